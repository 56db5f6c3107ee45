package cpu

import (
	"fmt"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu/internal/qmm"
)

// QuantizedMatMul runs the fused kernels of internal/qmm: packed words are unpacked
// group by group on the fly (decode streams the weights once), never into a whole
// dequantized matrix. Compact bfloat16/float16 scales and biases (a 16-bit checkpoint's,
// loaded compact) are read at their width; any others as float32.
func (be *Backend) QuantizedMatMul(x, w, scales, biases *mx.Array, transpose bool, groupSize, bits int, out []int) (mx.Handle, error) {
	ws := w.Shape()
	q := quantCall{w: h(w).u, x: h(x).f, n: ws[len(ws)-2], k: ws[len(ws)-1] * 32 / bits, batch: numel(ws[:len(ws)-2]),
		transpose: transpose, group: groupSize, bits: bits, res: newF(numel(out))}
	switch s, b, dt := compactScales(scales, biases); dt {
	case mx.BFloat16:
		runQuant(q, qmm.BF16(s), qmm.BF16(b))
	case mx.Float16:
		runQuant(q, qmm.F16(s), qmm.F16(b))
	default:
		runQuant(q, h(scales).f, h(biases).f)
	}
	roundTo(x.DType(), q.res)
	return fbuf(q.res), nil
}

// QuantizedMatMuls runs qmm's several-matrix products (mx.QuantizedMatmuls): x
// prepared, or rounded to 8 bits where a8 is set, once, and the rows of every matrix
// split among the cores together. The scales are read at 16 bits only where every
// matrix holds them compact in one dtype.
func (be *Backend) QuantizedMatMuls(x *mx.Array, ws []mx.QuantizedMatrix, groupSize, bits int, a8 bool, outs [][]int) ([]mx.Handle, error) {
	xs := x.Shape()
	if rows := x.Size() / max(xs[len(xs)-1], 1); a8 && !qmm.HasInt8For(rows, bits) {
		return nil, fmt.Errorf("cpu: no integer kernel for %d rows of x and %d-bit weights on this CPU", rows, bits)
	}
	q := multiCall{x: h(x).f, k: xs[len(xs)-1], group: groupSize, bits: bits, a8: a8, res: make([][]float32, len(ws))}
	for i := range ws {
		q.res[i] = newF(numel(outs[i]))
	}
	switch sharedCompact(ws) {
	case mx.BFloat16:
		runMulti(q, matrices(ws, func(s, b []uint16, _, _ *mx.Array) (qmm.BF16, qmm.BF16) { return s, b }))
	case mx.Float16:
		runMulti(q, matrices(ws, func(s, b []uint16, _, _ *mx.Array) (qmm.F16, qmm.F16) { return s, b }))
	default:
		runMulti(q, matrices(ws, func(_, _ []uint16, s, b *mx.Array) ([]float32, []float32) { return h(s).f, h(b).f }))
	}
	hs := make([]mx.Handle, len(ws))
	for i, r := range q.res {
		roundTo(x.DType(), r)
		hs[i] = fbuf(r)
	}
	return hs, nil
}

// sharedCompact is the 16-bit dtype every matrix of ws holds its scales and biases
// in, compact; Float32 where they do not all hold one.
func sharedCompact(ws []mx.QuantizedMatrix) mx.DType {
	_, _, dt := compactScales(ws[0].Scales, ws[0].Biases)
	for _, w := range ws[1:] {
		if _, _, d := compactScales(w.Scales, w.Biases); d != dt {
			return mx.Float32
		}
	}
	return dt
}

// multiCall is one QuantizedMatMuls: x (M, k) by every matrix, into res.
type multiCall struct {
	x     []float32
	res   [][]float32
	k     int
	group int
	bits  int
	a8    bool
}

// matrices gives qmm each matrix of ws with its scales and biases as scales picks
// them: from their compact 16-bit bits, or from the arrays, widened.
func matrices[S qmm.Scales](ws []mx.QuantizedMatrix, scales func(s, b []uint16, sa, ba *mx.Array) (S, S)) []qmm.Matrix[S] {
	ms := make([]qmm.Matrix[S], len(ws))
	for i, w := range ws {
		s, b, _ := compactScales(w.Scales, w.Biases)
		ms[i].Packed, ms[i].N = h(w.W).u, w.W.Dim(0)
		ms[i].Scales, ms[i].Biases = scales(s, b, w.Scales, w.Biases)
	}
	return ms
}

// runMulti runs q over ms.
func runMulti[S qmm.Scales](q multiCall, ms []qmm.Matrix[S]) {
	if q.a8 {
		qmm.MatMulTsInt8(q.res, q.x, len(q.x)/max(q.k, 1), q.k, ms, q.group, q.bits)
	} else {
		qmm.MatMulTs(q.res, q.x, len(q.x)/max(q.k, 1), q.k, ms, q.group, q.bits)
	}
}

// quantCall is one QuantizedMatMul: batch W (n, k) and their x, into res.
type quantCall struct {
	w                        []uint32
	x, res                   []float32
	n, k, batch, group, bits int
	transpose                bool
}

func runQuant[S qmm.Scales](q quantCall, sf, bf S) {
	xn, rn := len(q.x)/q.batch, len(q.res)/q.batch
	wn, gn := q.n*q.k*q.bits/32, q.n*(q.k/q.group)
	for i := range q.batch {
		xb, rb := q.x[i*xn:(i+1)*xn], q.res[i*rn:(i+1)*rn]
		wb, sb, bb := q.w[i*wn:(i+1)*wn], part(sf, i*gn, (i+1)*gn), part(bf, i*gn, (i+1)*gn)
		if q.transpose { // x (M, K) -> (M, N)
			qmm.MatMulT(rb, xb, len(xb)/max(q.k, 1), q.k, wb, sb, bb, q.n, q.group, q.bits)
		} else { // x (M, N) -> (M, K)
			qmm.MatMul(rb, xb, len(xb)/max(q.n, 1), q.n, wb, sb, bb, q.k, q.group, q.bits)
		}
	}
}

// compactScales returns the bits of compact scales and biases of one 16-bit dtype, and
// that dtype; for any other pair, a dtype that is neither BFloat16 nor Float16.
func compactScales(scales, biases *mx.Array) (s, b []uint16, dt mx.DType) {
	rs, rb, dt := raw(scales), raw(biases), scales.DType()
	if rs.s == nil || rb.s == nil || biases.DType() != dt {
		return nil, nil, mx.Float32
	}
	return rs.s, rb.s, dt
}

// part is s[lo:hi] for any kind of scales.
func part[S qmm.Scales](s S, lo, hi int) S {
	switch v := any(s).(type) {
	case qmm.BF16:
		return any(v[lo:hi]).(S)
	case qmm.F16:
		return any(v[lo:hi]).(S)
	}
	return any(any(s).([]float32)[lo:hi]).(S)
}

// ReadsCompactScales reports whether decoding's kernels read 16-bit scales and
// biases of bits-bit weights at their width on this CPU (2, 4 and 8 bits, AVX-512
// with BW); the other kernels widen them a tile at a time, slower than float32
// scales.
func (be *Backend) ReadsCompactScales(bits int) bool { return qmm.ReadsHalfScales(bits) }

// HasA8 reports whether this CPU has the integer kernels behind
// mx.QuantizedMatmulA8 for bits-bit weights: 4 bits on x86-64 with AVX2, 8 bits
// with AVX-512 VNNI.
func (be *Backend) HasA8(bits int) bool { return qmm.HasInt8(bits) }

// HasA8Rows reports whether this CPU multiplies many rows of x on integers
// (mx.QuantizedMatmulA8 for a prompt): 4- and 8-bit weights with AVX-512 VNNI.
func (be *Backend) HasA8Rows(bits int) bool { return qmm.HasInt8Rows(bits) }

// QuantizedMatMulA8 runs qmm's 8-bit-activation kernel (mx.QuantizedMatmulA8 asks
// HasA8 first): QuantizedMatMuls' product for one matrix.
func (be *Backend) QuantizedMatMulA8(x, w, scales, biases *mx.Array, groupSize, bits int, out []int) (mx.Handle, error) {
	hs, err := be.QuantizedMatMuls(x, []mx.QuantizedMatrix{{W: w, Scales: scales, Biases: biases}}, groupSize, bits, true, [][]int{out})
	if err != nil {
		return nil, err
	}
	return hs[0], nil
}

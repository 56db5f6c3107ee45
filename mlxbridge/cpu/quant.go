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

// QuantizedMatMulA8 runs qmm's 8-bit-activation kernel (mx.QuantizedMatmulA8 asks
// HasA8 first).
func (be *Backend) QuantizedMatMulA8(x, w, scales, biases *mx.Array, groupSize, bits int, out []int) (mx.Handle, error) {
	if !qmm.HasInt8(bits) {
		return nil, fmt.Errorf("quantized_matmul_a8: no integer kernel for %d-bit weights on this CPU", bits)
	}
	ws := w.Shape()
	n, k := ws[0], ws[1]*32/bits
	res := newF(n)
	switch s, b, dt := compactScales(scales, biases); dt {
	case mx.BFloat16:
		qmm.MatVecTInt8(res, h(x).f, k, h(w).u, qmm.BF16(s), qmm.BF16(b), n, groupSize, bits)
	case mx.Float16:
		qmm.MatVecTInt8(res, h(x).f, k, h(w).u, qmm.F16(s), qmm.F16(b), n, groupSize, bits)
	default:
		qmm.MatVecTInt8(res, h(x).f, k, h(w).u, h(scales).f, h(biases).f, n, groupSize, bits)
	}
	roundTo(x.DType(), res)
	return fbuf(res), nil
}

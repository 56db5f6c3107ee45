package cpu

import (
	"fmt"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/cpu/internal/qmm"
)

func (be *Backend) MatMul(a, b *mx.Array, ta, tb bool, out []int) (mx.Handle, error) {
	as, bs := a.Shape(), b.Shape()
	m, n := out[len(out)-2], out[len(out)-1]
	k := as[len(as)-1]
	if ta {
		k = as[len(as)-2]
	}
	lda, ldb := as[len(as)-1], bs[len(bs)-1]
	batch := out[:len(out)-2]
	nb := numel(batch)
	if nb == 0 || m == 0 || n == 0 || k == 0 {
		return fbuf(newFZero(numel(out))), nil
	}
	// x (..., M, K) @ a compact w with no batch: the 16-bit kernels, which read w at its
	// width (a 16-bit checkpoint's layers, and their backward pass).
	if w := raw(b); w.s != nil && !ta && numel(bs[:len(bs)-2]) == 1 && numel(as[:len(as)-2]) == nb {
		res, x, f16 := newF(numel(out)), h(a).f, b.DType() == mx.Float16
		if tb { // w (N, K)
			qmm.HalfMatMulT(res, x, nb*m, k, w.s, n, f16)
		} else { // w (K, N): x @ w
			qmm.HalfMatMul(res, x, nb*m, k, w.s, n, f16)
		}
		return fbuf(res), nil
	}
	af, bf := h(a).f, h(b).f
	res := newF(numel(out)) // sgemm with beta 0 overwrites every element
	// One row times a matrix (decode): a matrix-vector product.
	if !ta && nb*m == 1 && numel(bs[:len(bs)-2]) == 1 {
		if tb && ldb == k { // w (N, K): y = w·x, each core streaming its rows in order
			qmm.MatVecT(res, af, bf, n, k)
		} else if tb {
			sgemv(false, n, k, bf, ldb, af, res)
		} else { // w (K, N): y = wᵀ·x
			sgemv(true, k, n, bf, ldb, af, res)
		}
		return fbuf(res), nil
	}
	// x (..., M, K) @ w (K, N) with no batch on w: one GEMM over all rows.
	if !ta && numel(bs[:len(bs)-2]) == 1 && numel(as[:len(as)-2]) == nb {
		sgemm(false, tb, nb*m, n, k, af, lda, bf, ldb, 0, res, n)
		return fbuf(res), nil
	}
	sa := bstrides(as[:len(as)-2], batch)
	sb := bstrides(bs[:len(bs)-2], batch)
	ma, mb := as[len(as)-2]*as[len(as)-1], bs[len(bs)-2]*bs[len(bs)-1]
	// Batched products (attention's per-head scores): a batch element per core when each
	// is small, else one at a time with each product cut over the cores.
	shape, strides := append(append([]int(nil), batch...), 1), [][]int{append(sa, 0), append(sb, 0)}
	if m*n*k < 1<<21 {
		parallel(nb, max(1, (1<<19)/(m*n*k)), func(lo, hi int) {
			rows(shape, strides, []int{0, 0}, lo, hi, func(i int, offs []int) {
				sgemmOne(ta, tb, m, n, k, af[offs[0]*ma:], lda, bf[offs[1]*mb:], ldb, 0, res[i*m*n:], n)
			})
		})
		return fbuf(res), nil
	}
	rows(shape, strides, []int{0, 0}, 0, nb, func(i int, offs []int) {
		sgemm(ta, tb, m, n, k, af[offs[0]*ma:], lda, bf[offs[1]*mb:], ldb, 0, res[i*m*n:], n)
	})
	return fbuf(res), nil
}

func (be *Backend) Slice(x *mx.Array, start, step, out []int) (mx.Handle, error) {
	st := stridesOf(x.Shape())
	base := 0
	strides := make([]int, len(st))
	for i := range st {
		base += start[i] * st[i]
		strides[i] = st[i] * step[i]
	}
	return gatherOut(x.DType(), h(x), numel(out), out, strides, base), nil
}

// scatter writes contiguous src into the strided view (shape, strides from base) of dst.
func scatter[T any](dst, src []T, shape, strides []int, base int) {
	nd := len(shape)
	if nd == 0 {
		dst[base] = src[0]
		return
	}
	inner, is := shape[nd-1], strides[nd-1]
	if inner == 0 || len(src) == 0 {
		return
	}
	n := len(src) / inner
	rows(shape, [][]int{strides}, []int{base}, 0, n, func(row int, offs []int) {
		s, o := src[row*inner:row*inner+inner], offs[0]
		if is == 1 {
			copy(dst[o:o+inner], s)
			return
		}
		for j, v := range s {
			dst[o+j*is] = v
		}
	})
}

func (be *Backend) SliceUpdate(dst, src *mx.Array, start, step []int) (mx.Handle, error) {
	st := stridesOf(dst.Shape())
	base := 0
	strides := make([]int, len(st))
	for i := range st {
		base += start[i] * st[i]
		strides[i] = st[i] * step[i]
	}
	d, s := h(dst), h(src)
	n := dst.Size()
	r := gatherOut(dst.DType(), d, n, []int{n}, []int{1}, 0) // copy
	switch dst.DType() {
	case mx.Int32:
		scatter(r.i, s.i, src.Shape(), strides, base)
	case mx.Uint32:
		scatter(r.u, s.u, src.Shape(), strides, base)
	case mx.Uint8, mx.Bool:
		scatter(r.b, s.b, src.Shape(), strides, base)
	default:
		scatter(r.f, s.f, src.Shape(), strides, base)
	}
	return r, nil
}

func (be *Backend) Concatenate(xs []*mx.Array, axis int, out []int) (mx.Handle, error) {
	dt := xs[0].DType()
	n := numel(out)
	r := outBuf(dt, n) // every element comes from one input
	// Everything from axis inward is contiguous in each input and in the output, so an
	// input is outer blocks of numel(s[axis:]) values, each copied whole into the
	// output's block at the input's offset along axis.
	outer, block := numel(out[:axis]), numel(out[axis:])
	at := 0
	for _, x := range xs {
		s, b := x.Shape(), h(x)
		switch dt {
		case mx.Int32:
			copyBlocks(r.i, b.i, outer, block, at)
		case mx.Uint32:
			copyBlocks(r.u, b.u, outer, block, at)
		case mx.Uint8, mx.Bool:
			copyBlocks(r.b, b.b, outer, block, at)
		default:
			copyBlocks(r.f, b.f, outer, block, at)
		}
		at += numel(s[axis:])
	}
	return r, nil
}

// copyBlocks copies src, outer blocks of len(src)/outer values, into dst's blocks of
// block values, starting at offset at within each.
func copyBlocks[T any](dst, src []T, outer, block, at int) {
	if outer == 0 || len(src) == 0 {
		return
	}
	m := len(src) / outer
	for o := range outer {
		copy(dst[o*block+at:o*block+at+m], src[o*m:(o+1)*m])
	}
}

// indices reads an Int32/Uint32 index array and checks every index against n.
func indices(idx *mx.Array, n int) ([]int, error) {
	b := h(idx)
	out := make([]int, idx.Size())
	for i := range out {
		var v int64
		if idx.DType() == mx.Int32 {
			v = int64(b.i[i])
		} else {
			v = int64(b.u[i])
		}
		if v < 0 || v >= int64(n) {
			return nil, fmt.Errorf("index %d out of range for axis of size %d", v, n)
		}
		out[i] = int(v)
	}
	return out, nil
}

func (be *Backend) Take(x, idx *mx.Array, axis int) (mx.Handle, error) {
	s := x.Shape()
	outer, n, inner := numel(s[:axis]), s[axis], numel(s[axis+1:])
	ids, err := indices(idx, n)
	if err != nil {
		return nil, err
	}
	if !x.DType().IsFloat() {
		r := &buf{}
		src := h(x)
		switch x.DType() {
		case mx.Int32:
			r.i = takeRows(src.i, ids, outer, n, inner)
		case mx.Uint32:
			r.u = takeRows(src.u, ids, outer, n, inner)
		default:
			r.b = takeRows(src.b, ids, outer, n, inner)
		}
		return r, nil
	}
	if c := raw(x); c.s != nil { // a compact table: widen only the rows taken
		rows := takeRows(c.s, ids, outer, n, inner)
		f := make([]float32, len(rows))
		qmm.HalfWiden(f, rows, x.DType() == mx.Float16)
		return &buf{f: f}, nil
	}
	return &buf{f: takeRows(h(x).f, ids, outer, n, inner)}, nil
}

func takeRows[T any](src []T, ids []int, outer, n, inner int) []T {
	m := len(ids)
	out := make([]T, outer*m*inner)
	parallel(outer*m, max(1, 4096/max(inner, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			o, j := r/m, r%m
			copy(out[r*inner:(r+1)*inner], src[(o*n+ids[j])*inner:(o*n+ids[j]+1)*inner])
		}
	})
	return out
}

func (be *Backend) ScatterAdd(upd, idx *mx.Array, axis int, shape []int) (mx.Handle, error) {
	outer, n, inner := numel(shape[:axis]), shape[axis], numel(shape[axis+1:])
	ids, err := indices(idx, n)
	if err != nil {
		return nil, err
	}
	m := len(ids)
	src := h(upd).f
	out := newFZero(numel(shape))
	// Rows of one outer block may hit the same index: split the work by outer block
	// and by column ranges, never by index, so no two workers add into one element.
	parallel(outer*max(inner/256, 1), 1, func(lo, hi int) {
		chunks := max(inner/256, 1)
		for w := lo; w < hi; w++ {
			o, c := w/chunks, w%chunks
			c0, c1 := c*inner/chunks, (c+1)*inner/chunks
			for j, id := range ids {
				d := out[(o*n+id)*inner+c0 : (o*n+id)*inner+c1]
				s := src[(o*m+j)*inner+c0 : (o*m+j)*inner+c1]
				for k, v := range s {
					d[k] += v
				}
			}
		}
	})
	return fbuf(out), nil
}

// alongOffsets walks the out shape of a TakeAlongAxis, calling f with the flat output
// index, the index array's value there, and the offset of x's row with axis set to 0.
func alongOffsets(xShape, idxShape, out []int, axis int, f func(o, xoff int, xAxisStride int, idxOff int)) {
	xs := stridesOf(xShape)
	xb := make([]int, len(out))
	for i := range out {
		if i != axis && xShape[i] != 1 {
			xb[i] = xs[i]
		}
	}
	ib := bstrides(idxShape, out)
	nd := len(out)
	idx := make([]int, nd)
	for o := 0; o < numel(out); o++ {
		xo, io := 0, 0
		for d := 0; d < nd; d++ {
			xo += idx[d] * xb[d]
			io += idx[d] * ib[d]
		}
		f(o, xo, xs[axis], io)
		for d := nd - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < out[d] {
				break
			}
			idx[d] = 0
		}
	}
}

func (be *Backend) TakeAlongAxis(x, idx *mx.Array, axis int, out []int) (mx.Handle, error) {
	ids, err := indices(idx, x.Dim(axis))
	if err != nil {
		return nil, err
	}
	src := h(x)
	r := outBuf(x.DType(), numel(out)) // every element is written
	alongOffsets(x.Shape(), idx.Shape(), out, axis, func(o, xo, as, io int) {
		p := xo + ids[io]*as
		switch {
		case r.f != nil:
			r.f[o] = src.f[p]
		case r.i != nil:
			r.i[o] = src.i[p]
		case r.u != nil:
			r.u[o] = src.u[p]
		default:
			r.b[o] = src.b[p]
		}
	})
	return r, nil
}

func (be *Backend) ScatterAddAlongAxis(upd, idx *mx.Array, axis int, shape []int) (mx.Handle, error) {
	ids, err := indices(idx, shape[axis])
	if err != nil {
		return nil, err
	}
	src := h(upd).f
	out := newFZero(numel(shape))
	alongOffsets(shape, idx.Shape(), upd.Shape(), axis, func(o, xo, as, io int) {
		out[xo+ids[io]*as] += src[o]
	})
	return fbuf(out), nil
}

// TakesBF16 reports whether MatMulBF16 multiplies many rows by w in bfloat16 pairs: w
// a compact bfloat16 matrix (a 16-bit checkpoint's weights, mx.Compact) and a CPU
// with AVX-512 BF16.
func (be *Backend) TakesBF16(w *mx.Array) bool {
	return w.DType() == mx.BFloat16 && len(w.Shape()) == 2 && raw(w).s != nil && qmm.HasBF16Rows()
}

// HasBF16Rows reports whether this CPU has the bfloat16 dot-product kernel.
func (be *Backend) HasBF16Rows() bool { return qmm.HasBF16Rows() }

// MatMulBF16 is x @ wᵀ with x rounded to bfloat16 (mx.MatmulTBF16), by qmm's
// bfloat16 dot-product kernel where TakesBF16 holds, else exactly.
func (be *Backend) MatMulBF16(x, w *mx.Array, out []int) (mx.Handle, error) {
	ws := w.Shape()
	n, k := ws[0], ws[1]
	m := numel(out) / max(n, 1)
	if be.TakesBF16(w) {
		res := newF(numel(out))
		qmm.HalfMatMulTBF16(res, h(x).f, m, k, raw(w).s, n)
		return fbuf(res), nil
	}
	return be.MatMul(x, w, false, true, out)
}

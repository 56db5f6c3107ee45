package cpu

import (
	"fmt"
	"math"
	"slices"

	mx "github.com/inloop/inloop/mlxbridge"
)

// groups merges adjacent axes that are all reduced or all kept, so a reduction is a
// few passes over (outer, n, inner) blocks.
func groups(shape, axes []int) (dims []int, reduced []bool) {
	red := make([]bool, len(shape))
	for _, a := range axes {
		red[a] = true
	}
	for i, d := range shape {
		if d == 1 && !red[i] {
			continue // size-1 kept axes change nothing
		}
		if len(dims) > 0 && reduced[len(reduced)-1] == red[i] {
			dims[len(dims)-1] *= d
			continue
		}
		dims = append(dims, d)
		reduced = append(reduced, red[i])
	}
	return dims, reduced
}

func (be *Backend) Reduce(op mx.ReduceOp, x *mx.Array, axes []int) (mx.Handle, error) {
	dims, red := groups(x.Shape(), axes)
	cur := h(x).f
	for g := len(dims) - 1; g >= 0; g-- {
		if !red[g] {
			continue
		}
		outer, inner := 1, 1
		for i := 0; i < g; i++ {
			outer *= dims[i]
		}
		for i := g + 1; i < len(dims); i++ {
			inner *= dims[i]
		}
		cur = reduceAxis(op, cur, outer, dims[g], inner)
		dims[g] = 1
	}
	if src := h(x).f; len(cur) > 0 && len(src) > 0 && &cur[0] == &src[0] {
		cur = append([]float32(nil), cur...) // nothing was reduced: never alias the input
	}
	roundTo(x.DType(), cur)
	return &buf{f: cur}, nil
}

// reduceAxis reduces the middle axis of an (outer, n, inner) block, accumulating
// sums in float64 so long sums (a loss over many tokens) keep their precision.
func reduceAxis(op mx.ReduceOp, src []float32, outer, n, inner int) []float32 {
	out := make([]float32, outer*inner)
	if n == 0 {
		if op != mx.ReduceSum {
			for i := range out {
				out[i] = float32(math.NaN())
			}
		}
		return out
	}
	if inner == 1 {
		parallel(outer, max(1, elemGrain/n), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				row := src[o*n : o*n+n]
				switch op {
				case mx.ReduceSum:
					var s float64
					for _, v := range row {
						s += float64(v)
					}
					out[o] = float32(s)
				case mx.ReduceMax:
					m := row[0]
					for _, v := range row[1:] {
						if v > m || v != v {
							m = v
						}
					}
					out[o] = m
				case mx.ReduceMin:
					m := row[0]
					for _, v := range row[1:] {
						if v < m || v != v {
							m = v
						}
					}
					out[o] = m
				}
			}
		})
		return out
	}
	parallel(outer*inner, max(1, elemGrain/n), func(lo, hi int) {
		// Walk columns [lo,hi) of the (outer, inner) output; rows of n stride by inner.
		acc := make([]float64, 0, 64)
		for c := lo; c < hi; {
			o, i0 := c/inner, c%inner
			i1 := min(inner, i0+(hi-c))
			w := i1 - i0
			base := o*n*inner + i0
			dst := out[o*inner+i0 : o*inner+i1]
			if op == mx.ReduceSum {
				acc = acc[:0]
				for j := 0; j < w; j++ {
					acc = append(acc, 0)
				}
				for k := 0; k < n; k++ {
					row := src[base+k*inner : base+k*inner+w]
					for j, v := range row {
						acc[j] += float64(v)
					}
				}
				for j := range dst {
					dst[j] = float32(acc[j])
				}
			} else {
				copy(dst, src[base:base+w])
				for k := 1; k < n; k++ {
					row := src[base+k*inner : base+k*inner+w]
					for j, v := range row {
						if (op == mx.ReduceMax && v > dst[j]) || (op == mx.ReduceMin && v < dst[j]) || v != v {
							dst[j] = v
						}
					}
				}
			}
			c += w
		}
	})
	return out
}

func (be *Backend) ArgMax(x *mx.Array, axis int) (mx.Handle, error) {
	s := x.Shape()
	outer, n, inner := numel(s[:axis]), s[axis], numel(s[axis+1:])
	src := h(x).f
	out := make([]int32, outer*inner)
	parallel(outer*inner, max(1, elemGrain/max(n, 1)), func(lo, hi int) {
		for c := lo; c < hi; c++ {
			o, i := c/inner, c%inner
			best, bi := float32(math.Inf(-1)), 0
			for k := 0; k < n; k++ {
				v := src[(o*n+k)*inner+i]
				if v > best || (k == 0 && v == best) {
					best, bi = v, k
				}
			}
			out[c] = int32(bi)
		}
	})
	return &buf{i: out}, nil
}

// lastAxisRows runs f on each row of the last axis, in parallel.
func lastAxisRows(x *mx.Array, outLen int, f func(row, out []float32)) []float32 {
	s := x.Shape()
	d := s[len(s)-1]
	src := h(x).f
	nrows := 0
	if d > 0 {
		nrows = len(src) / d
	}
	out := newF(nrows * outLen) // f writes every element of its row
	parallel(nrows, max(1, elemGrain/max(d, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			f(src[r*d:(r+1)*d], out[r*outLen:(r+1)*outLen])
		}
	})
	return out
}

func (be *Backend) Softmax(x *mx.Array) (mx.Handle, error) {
	src := h(x).f
	out := newF(len(src))
	softmaxRows(out, src, x.Dim(-1))
	roundTo(x.DType(), out)
	return fbuf(out), nil
}

func (be *Backend) LogSumExp(x *mx.Array) (mx.Handle, error) {
	src := h(x).f
	d := x.Dim(-1)
	out := make([]float32, len(src)/max(d, 1))
	if d == 0 {
		for i := range out {
			out[i] = float32(math.Inf(-1))
		}
	}
	logSumExpRows(out, src, d)
	roundTo(x.DType(), out)
	return &buf{f: out}, nil
}

// CrossEntropyGrad is the cross-entropy's backward pass in one pass over the logits
// (mx.CrossEntropyGrader), instead of the five the composed one makes over the (positions,
// vocabulary) arrays that dominate a training step's elementwise work.
func (be *Backend) CrossEntropyGrad(x, lse, targets, g *mx.Array) (mx.Handle, error) {
	d := x.Dim(-1)
	ids, err := indices(targets, d)
	if err != nil {
		return nil, err
	}
	src, l, gv := h(x).f, h(lse).f, h(g).f
	if d == 0 || len(src) != len(ids)*d || len(l) != len(ids) || len(gv) != len(ids) {
		return nil, fmt.Errorf("cross entropy grad: logits %v, logsumexp %v, targets %v, cotangent %v",
			x.Shape(), lse.Shape(), targets.Shape(), g.Shape())
	}
	t := make([]int32, len(ids))
	for i, v := range ids {
		t[i] = int32(v)
	}
	out := newF(len(src)) // every element is written
	xentGradRows(out, src, l, gv, t, d)
	roundTo(x.DType(), out)
	return fbuf(out), nil
}

// Sort sorts each row of the last axis, NaNs last.
func (be *Backend) Sort(x *mx.Array) (mx.Handle, error) {
	out := lastAxisRows(x, x.Dim(-1), func(row, out []float32) {
		copy(out, row)
		slices.SortFunc(out, func(a, b float32) int {
			switch {
			case a < b || (b != b && a == a):
				return -1
			case a > b || (a != a && b == b):
				return 1
			}
			return 0
		})
	})
	return fbuf(out), nil
}

// CumSum is the running sum of each row of the last axis, accumulated in
// float32 as the sum is stored, from the row's end when reverse.
func (be *Backend) CumSum(x *mx.Array, reverse bool) (mx.Handle, error) {
	out := lastAxisRows(x, x.Dim(-1), func(row, out []float32) {
		var acc float32
		if reverse {
			for i := len(row) - 1; i >= 0; i-- {
				acc += row[i]
				out[i] = acc
			}
			return
		}
		for i, v := range row {
			acc += v
			out[i] = acc
		}
	})
	roundTo(x.DType(), out)
	return fbuf(out), nil
}

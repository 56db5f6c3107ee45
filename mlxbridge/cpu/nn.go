package cpu

import (
	"math"

	mx "github.com/inloop/inloop/mlxbridge"
)

func (be *Backend) RMSNorm(x, w *mx.Array, eps float32) (mx.Handle, error) {
	wf := h(w).f
	d := len(wf)
	out := lastAxisRows(x, d, func(row, o []float32) {
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		r := float32(1 / math.Sqrt(ss/float64(d)+float64(eps)))
		for i, v := range row {
			o[i] = v * r * wf[i]
		}
	})
	if x.DType() == w.DType() {
		roundTo(x.DType(), out)
	}
	return &buf{f: out}, nil
}

func (be *Backend) RoPE(x *mx.Array, o mx.RoPEOptions) (mx.Handle, error) {
	s := x.Shape()
	l, d := s[len(s)-2], s[len(s)-1]
	half := o.Dims / 2
	cos, sin := mx.RoPEAngles(l, o)
	src := h(x).f
	nrows := 0
	if d > 0 {
		nrows = len(src) / d
	}
	out := make([]float32, len(src))
	parallel(nrows, max(1, elemGrain/max(d, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			p := r % l
			in, dst := src[r*d:(r+1)*d], out[r*d:(r+1)*d]
			c, sn := cos[p*half:(p+1)*half], sin[p*half:(p+1)*half]
			for i := 0; i < half; i++ {
				var i1, i2 int
				if o.Traditional {
					i1, i2 = 2*i, 2*i+1
				} else {
					i1, i2 = i, i+half
				}
				x1, x2 := in[i1], in[i2]
				dst[i1] = x1*c[i] - x2*sn[i]
				dst[i2] = x1*sn[i] + x2*c[i]
			}
			copy(dst[o.Dims:], in[o.Dims:])
		}
	})
	roundTo(x.DType(), out)
	return &buf{f: out}, nil
}

// SDPA runs one (batch, head) at a time: scores = q·kᵀ through sgemm, the mask and a
// softmax per row, then scores·v through sgemm. Heads run in parallel.
func (be *Backend) SDPA(q, k, v *mx.Array, scale float32, causal bool, mask *mx.Array) (mx.Handle, error) {
	qs, ks, vs := q.Shape(), k.Shape(), v.Shape()
	b, hq, l, d := qs[0], qs[1], qs[2], qs[3]
	hkv, s, dv := ks[1], ks[2], vs[3]
	rep := hq / hkv
	qf, kf, vf := h(q).f, h(k).f, h(v).f
	out := make([]float32, b*hq*l*dv)
	var mf []float32
	var mb []uint8
	var mst []int
	if mask != nil {
		full := []int{b, hq, l, s}
		mst = bstrides(mask.Shape(), full)
		if mask.DType() == mx.Bool {
			mb = h(mask).b
		} else {
			mf = asFloat(mask)
		}
	}
	negInf := float32(math.Inf(-1))
	parallel(b*hq, 1, func(lo, hi int) {
		scores := make([]float32, l*s)
		for bh := lo; bh < hi; bh++ {
			bi, hi_ := bh/hq, bh%hq
			kv := bi*hkv + hi_/rep
			qm := qf[bh*l*d : (bh+1)*l*d]
			km := kf[kv*s*d : (kv+1)*s*d]
			vm := vf[kv*s*dv : (kv+1)*s*dv]
			sgemm(false, true, l, s, d, qm, d, km, d, 0, scores, s)
			for i := 0; i < l; i++ {
				row := scores[i*s : (i+1)*s]
				limit := s
				if causal {
					limit = i + s - l + 1
				}
				m := negInf
				for j := range row {
					x := row[j] * scale
					if j >= limit {
						x = negInf
					} else if mst != nil {
						off := bi*mst[0] + hi_*mst[1] + i*mst[2] + j*mst[3]
						if mb != nil {
							if mb[off] == 0 {
								x = negInf
							}
						} else {
							x += mf[off]
						}
					}
					row[j] = x
					m = max(m, x)
				}
				var sum float64
				for j, x := range row {
					e := float32(0)
					if x != negInf {
						e = float32(math.Exp(float64(x - m)))
					}
					row[j] = e
					sum += float64(e)
				}
				inv := float32(1 / sum)
				for j := range row {
					row[j] *= inv
				}
			}
			sgemm(false, false, l, dv, s, scores, s, vm, dv, 0, out[bh*l*dv:], dv)
		}
	})
	roundTo(q.DType(), out)
	return &buf{f: out}, nil
}

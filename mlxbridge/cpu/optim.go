package cpu

import (
	"math"

	mx "github.com/inloop/inloop/mlxbridge"
)

// adamGrain is elements per goroutine of a fused Adam update: seven streams of
// floats per element, so fewer than elementwise ops take.
const adamGrain = 1 << 12

// AdamUpdate is mx.AdamUpdate in one pass; m and v nil are zero moments.
// Float32 runs the C kernel (inloop_adam); float16 and bfloat16 round after
// every op, as the composed ops do, so either path gives the same numbers.
func (be *Backend) AdamUpdate(p, g, m, v *mx.Array, c mx.AdamCoeffs) (p2, m2, v2 mx.Handle, err error) {
	r := func(x float32) float32 { return x }
	switch p.DType() {
	case mx.Float16:
		r = mx.RoundFloat16
	case mx.BFloat16:
		r = mx.RoundBFloat16
	}
	k := adamK{
		b1: r(float32(c.B1)), c1: r(float32(c.C1)), b2: r(float32(c.B2)), c2: r(float32(c.C2)),
		decay: r(float32(c.Decay)), num: r(float32(c.Num)), div: r(float32(c.Div)), eps: r(float32(c.Eps)),
	}
	pf, gf := h(p).f, h(g).f
	var mf, vf []float32
	if m != nil {
		mf, vf = h(m).f, h(v).f
	}
	n := len(pf)
	po, mo, vo := newF(n), newF(n), newF(n)
	f32 := p.DType() == mx.Float32
	parallel(n, adamGrain, func(lo, hi int) {
		var ms, vs []float32
		if mf != nil {
			ms, vs = mf[lo:hi], vf[lo:hi]
		}
		if f32 {
			adamVec(po[lo:hi], mo[lo:hi], vo[lo:hi], pf[lo:hi], gf[lo:hi], ms, vs, &k)
		} else {
			adamKernelRounded(po[lo:hi], mo[lo:hi], vo[lo:hi], pf[lo:hi], gf[lo:hi], ms, vs, k, r)
		}
	})
	return fbuf(po), fbuf(mo), fbuf(vo), nil
}

// adamK is inloop_adam's k, in its order.
type adamK struct{ b1, c1, b2, c2, decay, num, div, eps float32 }

// adamKernelRounded is the update for the 16-bit dtypes, rounding with r
// wherever the composed ops round (inloop_adam's arithmetic otherwise); m and
// v nil are zeros.
func adamKernelRounded(po, mo, vo, p, g, m, v []float32, k adamK, r func(float32) float32) {
	for i := range po {
		var m0, v0 float32
		if m != nil {
			m0, v0 = m[i], v[i]
		}
		gi := g[i]
		mi := r(r(m0*k.b1) + r(gi*k.c1))
		vi := r(r(v0*k.b2) + r(r(gi*gi)*k.c2))
		den := r(r(r(float32(math.Sqrt(float64(vi))))/k.div) + k.eps)
		po[i] = r(r(p[i]*k.decay) - r(r(mi*k.num)/den))
		mo[i], vo[i] = mi, vi
	}
}

// normChunk is elements per partial sum of GlobalNorm. The chunks do not
// depend on the number of cores, so neither does the sum.
const normChunk = 1 << 14

// GlobalNorm is mx.GlobalNorm: squares summed in float64 per chunk, chunks
// summed in order.
func (be *Backend) GlobalNorm(xs []*mx.Array) (mx.Handle, error) {
	var sum float64
	for _, x := range xs {
		f := h(x).f
		chunks := (len(f) + normChunk - 1) / normChunk
		if chunks <= 1 {
			sum += sumSquares(f)
			continue
		}
		part := make([]float64, chunks)
		parallel(chunks, max(1, (1<<17)/normChunk), func(lo, hi int) {
			for c := lo; c < hi; c++ {
				part[c] = sumSquares(f[c*normChunk : min(len(f), (c+1)*normChunk)])
			}
		})
		for _, s := range part {
			sum += s
		}
	}
	return &buf{f: []float32{float32(math.Sqrt(sum))}}, nil
}

// sumSquares is Σx² in float64, four running sums.
func sumSquares(f []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(f); i += 4 {
		a, b, c, d := float64(f[i]), float64(f[i+1]), float64(f[i+2]), float64(f[i+3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(f); i++ {
		a := float64(f[i])
		s0 += a * a
	}
	return (s0 + s1) + (s2 + s3)
}

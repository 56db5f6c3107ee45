package mlxbridge

import (
	"math"
)

// RMSNorm normalizes the last axis: x · rsqrt(mean(x²) + eps) · w, w of shape (D).
func RMSNorm(x, w *Array, eps float32) *Array {
	if e := checkFloat("rms_norm", x, w); e != nil {
		return e
	}
	if len(x.shape) == 0 || len(w.shape) != 1 || w.shape[0] != x.shape[len(x.shape)-1] {
		return Errorf("rms_norm: weight %s for input %s", fmtShape(w.shape), fmtShape(x.shape))
	}
	if r, ok := x.b.(RMSNormer); ok {
		h, err := r.RMSNorm(x, w, eps)
		keepAlive(x, w)
		out := newArray("rms_norm", x.b, h, err, x.shape, promote(x.dtype, w.dtype))
		return record(out, func(g *Array) []*Array { return rmsNormVJP(x, w, eps, g) }, x, w)
	}
	return Mul(Mul(x, rmsScale(x, eps)), w)
}

func rmsScale(x *Array, eps float32) *Array {
	return Rsqrt(AddScalar(Mean(Square(x), []int{-1}, true), eps))
}

// rmsNormVJP: with r = rsqrt(mean(x²)+eps) and y = x·r·w,
// dx = r·(g·w) − x·r³·Σ(g·w·x)/D and dw = Σ over rows of g·x·r; each only
// for a traced input (a model's norm weights are frozen under LoRA). A
// backend with a fused dx (RMSNormGrader) takes it for float32 arrays.
func rmsNormVJP(x, w *Array, eps float32, g *Array) []*Array {
	needX, needW := x.node != nil, w.node != nil
	x, w = StopGradient(x), StopGradient(w)
	var dx, dw *Array
	var r *Array
	if needX {
		f, ok := x.b.(RMSNormGrader)
		if ok && !traced(g) && x.dtype == Float32 && w.dtype == Float32 && g.dtype == Float32 && sameShape(g.shape, x.shape) {
			h, err := f.RMSNormGrad(x, w, g, eps)
			keepAlive(x, w, g)
			dx = newArray("rms_norm grad", x.b, h, err, x.shape, Float32)
		} else {
			d := float32(x.shape[len(x.shape)-1])
			r = rmsScale(x, eps)
			gw := Mul(g, w)
			dot := Sum(Mul(gw, x), []int{-1}, true)
			dx = Sub(Mul(gw, r), Mul(x, MulScalar(Mul(Mul(r, Square(r)), dot), 1/d)))
		}
	}
	if needW {
		if r == nil {
			r = rmsScale(x, eps)
		}
		dw = unbroadcast(Mul(g, Mul(x, r)), w.shape)
	}
	return []*Array{dx, dw}
}

// RoPEOptions configures rotary position embedding.
type RoPEOptions struct {
	Dims        int     // leading features of the last axis to rotate (even); the rest pass through
	Traditional bool    // MLX's traditional layout rotates adjacent pairs; false is HF's rotate-half
	Base        float32 // frequency base, e.g. 10000 or 1e6
	Scale       float32 // positions are multiplied by Scale (1 for none)
	Offset      int     // position of the first row along axis -2 (the KV-cache length)
	Inverse     bool    // rotate by the negative angle; the transpose, used for gradients
	// Freqs, when set, replaces Base: a (Dims/2) float array of periods, pair i
	// turning by position·Scale/Freqs[i], as MLX's fast.rope takes them (llama3's
	// rope_scaling). Computed with the model's own backend, they are on MLX the
	// very numbers mlx-lm hands fast.rope.
	Freqs *Array

	invFreq []float64 // 1/Freqs, read once by RoPE for backends that compute in Go
}

// RoPE rotates x (..., L, D): row l is at position Offset+l, feature pair i turns by
// (Offset+l)·Scale·Base^(−2i/Dims).
func RoPE(x *Array, o RoPEOptions) *Array {
	if e := checkFloat("rope", x); e != nil {
		return e
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if len(x.shape) < 2 || o.Dims <= 0 || o.Dims%2 != 0 || o.Dims > x.shape[len(x.shape)-1] || (o.Base <= 0 && o.Freqs == nil) || o.Offset < 0 {
		return Errorf("rope: dims %d base %g offset %d for input %s", o.Dims, o.Base, o.Offset, fmtShape(x.shape))
	}
	if f := o.Freqs; f != nil && o.invFreq == nil {
		if e := checkFloat("rope freqs", f); e != nil {
			return e
		}
		if !sameShape(f.shape, []int{o.Dims / 2}) {
			return Errorf("rope: freqs %s for %d dims, want (%d)", fmtShape(f.shape), o.Dims, o.Dims/2)
		}
		v, err := f.Float32s()
		if err != nil {
			return errArray(err)
		}
		o.invFreq = make([]float64, len(v))
		for i, p := range v {
			o.invFreq[i] = 1 / float64(p)
		}
	}
	var out *Array
	if r, ok := x.b.(RoPEr); ok {
		h, err := r.RoPE(x, o)
		keepAlive(x, o.Freqs)
		out = newArray("rope", x.b, h, err, x.shape, x.dtype)
	} else {
		out = ropeComposed(StopGradient(x), o)
	}
	return record(out, func(g *Array) []*Array {
		inv := o
		inv.Inverse = !o.Inverse
		return []*Array{RoPE(g, inv)}
	}, x)
}

// RoPEAngles returns cos and sin tables (L, Dims/2) in float64-accurate float32,
// for options RoPE has checked (it reads Freqs).
func RoPEAngles(l int, o RoPEOptions) (cos, sin []float32) {
	half := o.Dims / 2
	cos, sin = make([]float32, l*half), make([]float32, l*half)
	sign := 1.0
	if o.Inverse {
		sign = -1
	}
	freq := make([]float64, half) // Base^(−2i/Dims) or 1/Freqs, once per call rather than per position
	for i := range freq {
		if o.invFreq != nil {
			freq[i] = sign * o.invFreq[i]
		} else {
			freq[i] = sign * math.Pow(float64(o.Base), -2*float64(i)/float64(o.Dims))
		}
	}
	for p := 0; p < l; p++ {
		pos := float64(o.Offset+p) * float64(o.Scale)
		for i, f := range freq {
			s, c := math.Sincos(pos * f)
			cos[p*half+i], sin[p*half+i] = float32(c), float32(s)
		}
	}
	return cos, sin
}

func ropeComposed(x *Array, o RoPEOptions) *Array {
	nd := len(x.shape)
	l, d := x.shape[nd-2], x.shape[nd-1]
	half := o.Dims / 2
	c, s := RoPEAngles(l, o)
	cos := FromData(x.b, x.dtype, c, l, half)
	sin := FromData(x.b, x.dtype, s, l, half)
	rot := SliceAxis(x, -1, 0, o.Dims)
	var x1, x2 *Array
	if o.Traditional {
		pairs := Reshape(rot, append(clone(x.shape[:nd-1]), half, 2)...)
		x1 = Squeeze(SliceAxis(pairs, -1, 0, 1), -1)
		x2 = Squeeze(SliceAxis(pairs, -1, 1, 2), -1)
	} else {
		x1 = SliceAxis(rot, -1, 0, half)
		x2 = SliceAxis(rot, -1, half, o.Dims)
	}
	y1 := Sub(Mul(x1, cos), Mul(x2, sin))
	y2 := Add(Mul(x1, sin), Mul(x2, cos))
	var y *Array
	if o.Traditional {
		y = Reshape(Stack([]*Array{y1, y2}, -1), append(clone(x.shape[:nd-1]), o.Dims)...)
	} else {
		y = Concatenate([]*Array{y1, y2}, -1)
	}
	if o.Dims < d {
		y = Concatenate([]*Array{y, SliceAxis(x, -1, o.Dims, d)}, -1)
	}
	return y
}

// ScaledDotProductAttention computes softmax(q·kᵀ·scale + mask)·v for q (B,Hq,L,D) and
// k, v (B,Hkv,S,D) with Hq a multiple of Hkv (grouped-query attention). causal masks
// key j for query i when j > i + S − L, so a cache of S−L earlier tokens works.
// mask, if not nil, is additive (float) or a keep-mask (Bool), broadcast to (B,Hq,L,S).
func ScaledDotProductAttention(q, k, v *Array, scale float32, causal bool, mask *Array) *Array {
	xs := []*Array{q, k, v}
	if mask != nil {
		xs = append(xs, mask)
	}
	if e := check("sdpa", xs...); e != nil {
		return e
	}
	if e := checkFloat("sdpa", q, k, v); e != nil {
		return e
	}
	if len(q.shape) != 4 || len(k.shape) != 4 || len(v.shape) != 4 {
		return Errorf("sdpa: q, k, v must be (B,H,L,D), got %s %s %s", fmtShape(q.shape), fmtShape(k.shape), fmtShape(v.shape))
	}
	b, hq, l, d := q.shape[0], q.shape[1], q.shape[2], q.shape[3]
	hkv, s := k.shape[1], k.shape[2]
	if k.shape[0] != b || v.shape[0] != b || k.shape[3] != d || v.shape[1] != hkv || v.shape[2] != s || hkv == 0 || hq%hkv != 0 {
		return Errorf("sdpa: q %s, k %s, v %s do not fit", fmtShape(q.shape), fmtShape(k.shape), fmtShape(v.shape))
	}
	if causal && l > s {
		return Errorf("sdpa: causal with %d queries but only %d keys", l, s)
	}
	if mask != nil {
		if bs, err := broadcastShapes(mask.shape, []int{b, hq, l, s}); err != nil || !sameShape(bs, []int{b, hq, l, s}) {
			return Errorf("sdpa: mask %s does not broadcast to %s", fmtShape(mask.shape), fmtShape([]int{b, hq, l, s}))
		}
	}
	f, fused := q.b.(SDPAer)
	vjp, fusedGrad := q.b.(SDPAVJPer)
	if !fused || (traced(xs...) && (!fusedGrad || traced(mask))) {
		return sdpaComposed(q, k, v, scale, causal, mask)
	}
	h, err := f.SDPA(q, k, v, scale, causal, mask)
	keepAlive(q, k, v, mask)
	out := newArray("sdpa", q.b, h, err, []int{b, hq, l, v.shape[3]}, q.dtype)
	return record(out, func(g *Array) []*Array {
		sq, sk, sv := StopGradient(q), StopGradient(k), StopGradient(v)
		dq, dk, dv, err := vjp.SDPAVJP(sq, sk, sv, scale, causal, StopGradient(mask), g)
		keepAlive(sq, sk, sv, mask, g)
		return []*Array{
			newArray("sdpa grad", q.b, dq, err, q.shape, q.dtype),
			newArray("sdpa grad", q.b, dk, err, k.shape, k.dtype),
			newArray("sdpa grad", q.b, dv, err, v.shape, v.dtype),
		}
	}, q, k, v)
}

func sdpaComposed(q, k, v *Array, scale float32, causal bool, mask *Array) *Array {
	b, hq, l, d := q.shape[0], q.shape[1], q.shape[2], q.shape[3]
	hkv, s, dv := k.shape[1], k.shape[2], v.shape[3]
	rep := hq / hkv
	// Query heads g·rep … g·rep+rep−1 share kv head g: fold them into the row axis.
	qg := Reshape(q, b, hkv, rep*l, d)
	scores := MulScalar(MatmulT(qg, k, false, true), scale) // (B,Hkv,rep·L,S)
	scores = Reshape(scores, b, hq, l, s)
	if mask != nil {
		if mask.dtype == Bool {
			scores = Where(mask, scores, scalarLike(scores, float32(math.Inf(-1))))
		} else {
			scores = Add(scores, mask)
		}
	}
	if causal {
		keep := make([]uint8, l*s)
		for i := 0; i < l; i++ {
			for j := 0; j <= i+s-l; j++ {
				keep[i*s+j] = 1
			}
		}
		scores = Where(FromData(q.b, Bool, keep, l, s), scores, scalarLike(scores, float32(math.Inf(-1))))
	}
	p := Reshape(Softmax(scores, -1), b, hkv, rep*l, s)
	return Reshape(Matmul(p, v), b, hq, l, dv)
}

// CrossEntropy returns the per-position loss −log softmax(logits)[target] for logits
// (..., V) and Int32 targets (...).
func CrossEntropy(logits, targets *Array) *Array {
	if e := check("cross_entropy", logits, targets); e != nil {
		return e
	}
	if len(logits.shape) == 0 || !sameShape(logits.shape[:len(logits.shape)-1], targets.shape) {
		return Errorf("cross_entropy: logits %s for targets %s", fmtShape(logits.shape), fmtShape(targets.shape))
	}
	// With a backend that fuses the backward pass, the forward ops run on the values
	// alone and one recorded op's backward is the backend's single pass over the logits;
	// otherwise the ops are differentiated one by one.
	cg, fused := logits.b.(CrossEntropyGrader)
	fused = fused && traced(logits)
	x := logits
	if fused {
		x = StopGradient(logits)
	}
	lse := LogSumExp(x, []int{-1}, false)
	out := Sub(lse, Squeeze(TakeAlongAxis(x, ExpandDims(targets, -1), -1), -1))
	if !fused {
		return out
	}
	return record(out, func(g *Array) []*Array {
		h, err := cg.CrossEntropyGrad(x, lse, targets, g)
		keepAlive(x, lse, targets, g)
		return []*Array{newArray("cross_entropy grad", x.b, h, err, clone(x.shape), x.dtype)}
	}, logits)
}

// CrossEntropyMasked is the mean cross-entropy over positions where mask is nonzero
// (mlx-lm's training loss); it is NaN-free when the mask is empty (gives 0).
func CrossEntropyMasked(logits, targets, mask *Array) *Array {
	ce := CrossEntropy(logits, targets)
	if e := check("cross_entropy", ce, mask); e != nil {
		return e
	}
	if !sameShape(mask.shape, targets.shape) {
		return Errorf("cross_entropy: mask %s for targets %s", fmtShape(mask.shape), fmtShape(targets.shape))
	}
	m := AsType(mask, ce.dtype)
	n := Maximum(Sum(m, nil, false), scalarLike(ce, 1))
	return Div(Sum(Mul(ce, m), nil, false), n)
}

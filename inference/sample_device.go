package inference

import (
	mx "github.com/inloop/inloop/mlxbridge"
)

// Sampling on the device. A decoder on a lazy backend (MLX) keeps the device
// busy only if the next step is queued before the current token is read back:
// the token must then be an array the next forward pass takes as its input,
// drawn by array ops. The draw is the host Sampler's (Sample): the same
// weights exp((z − max z)/T), the same filters, and the same uniform number
// from the same stream, compared against the running sum of the weights in id
// order. Two differences, both at the level of rounding: the running sum is in
// float32 rather than float64, and top-p keeps every token tied with the last
// one it needs rather than the first of them in id order.

// onDevice reports whether o can be sampled by deviceDraw: all but the
// repetition penalty, which needs the tokens so far on the host.
func (o SampleOptions) onDevice() bool {
	return o.RepetitionPenalty == 0 || o.RepetitionPenalty == 1
}

// deviceDraw draws the next token from logits (V) with array ops. It returns
// the token as an Int32 (1, 1) array, ready to be the next forward pass's
// input, and with logProb its log-probability under the raw logits (a 0-d
// Float32), else nil. A temperature above 0 takes one number from the
// sampler's stream, as Sample does.
func (s *Sampler) deviceDraw(logits *mx.Array, logProb bool) (tok, lp *mx.Array) {
	z := mx.AsType(logits, mx.Float32)
	v := z.Dim(-1)
	if s.o.Temperature == 0 {
		tok = mx.ArgMax(z, -1, false)
	} else {
		tok = s.deviceWeighted(z, v)
	}
	tok = mx.Reshape(tok, 1, 1)
	if logProb {
		lp = mx.Reshape(mx.Sub(mx.Take(z, mx.Reshape(tok, 1), 0), mx.LogSumExp(z, nil, false)), []int{}...)
	}
	return tok, lp
}

// deviceWeighted is Sample's draw for a temperature above 0 (see weigh).
func (s *Sampler) deviceWeighted(z *mx.Array, v int) *mx.Array {
	b := z.Backend()
	c := func(x float64) *mx.Array { return mx.FromData(b, mx.Float32, []float32{float32(x)}) }
	zero := c(0)
	zmax := mx.Max(z, nil, false)
	d := mx.MulScalar(mx.Sub(zmax, z), float32(1/s.o.Temperature))
	w := mx.Where(mx.Less(d, c(negligible)), mx.Exp(mx.Neg(d)), zero)
	if k := s.o.TopK; k > 0 && k < v {
		// Below the k-th largest logit; ties with it stay, as in kthLargest.
		kth := mx.SliceAxis(mx.Sort(z, -1), 0, v-k, v-k+1)
		w = mx.Where(mx.Less(z, kth), zero, w)
	}
	if p := s.o.TopP; p > 0 && p < 1 {
		// Most likely first: keep each token while the mass before it is
		// below p of the total, so the one that crosses it stays.
		desc := mx.Neg(mx.Sort(mx.Neg(w), -1))
		before := mx.Sub(mx.CumSum(desc, -1, false), desc)
		target := mx.MulScalar(mx.Sum(w, nil, false), float32(p))
		n := mx.Sum(mx.AsType(mx.Less(before, target), mx.Float32), nil, false) // ≥ 1: before[0] = 0
		last := mx.AsType(mx.Reshape(mx.Sub(n, c(1)), 1), mx.Int32)
		w = mx.Where(mx.GreaterEqual(w, mx.Take(desc, last, 0)), w, zero)
	}
	if mp := s.o.MinP; mp > 0 {
		// The best token weighs exp(0) = 1 and survives every filter.
		w = mx.Where(mx.Less(w, c(mp)), zero, w)
	}
	// The first token whose running weight exceeds u × the total, in id order;
	// the last surviving one when rounding puts u × total at the very end.
	cum := mx.CumSum(w, -1, false)
	u := s.uniform()
	target := mx.MulScalar(mx.SliceAxis(cum, 0, v-1, v), float32(u))
	idx := mx.Sum(mx.AsType(mx.GreaterEqual(target, cum), mx.Float32), nil, false)
	ids := s.deviceIDs(b, v)
	lastKept := mx.Max(mx.Where(mx.Greater(w, zero), ids, mx.Full(b, nil, -1, mx.Float32)), nil, false)
	return mx.AsType(mx.Reshape(mx.Minimum(idx, lastKept), 1), mx.Int32)
}

// deviceIDs is 0, 1, …, v−1 as Float32 (exact up to 2²⁴), made once.
func (s *Sampler) deviceIDs(b mx.Backend, v int) *mx.Array {
	if s.ids == nil || s.ids.Backend() != b || s.ids.Dim(0) != v {
		f := make([]float32, v)
		for i := range f {
			f[i] = float32(i)
		}
		s.ids = mx.FromData(b, mx.Float32, f, v)
	}
	return s.ids
}

// uniform is the next number of the sampler's stream, or the one unread gave
// back.
func (s *Sampler) uniform() float64 {
	if s.hasBack {
		s.hasBack = false
		return s.back
	}
	s.back = s.rng.Float64()
	return s.back
}

// unread gives back the number the last device draw took, for a draw that
// was queued and then dropped: the next draw takes it again, so the tokens
// are those of a stream that never saw the dropped one.
func (s *Sampler) unread() {
	if s.o.Temperature > 0 {
		s.hasBack = true
	}
}

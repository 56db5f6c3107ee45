package inference

import (
	"math"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Cache holds the keys and values of every layer for the positions processed so far:
// the session state of one conversation. It stores num_key_value_heads heads, so a
// grouped-query model caches Hkv/Hq of what full attention would.
//
// Layout: each layer keeps a long "frozen" part and a short "tail". Arrays are
// immutable, so growing one buffer costs a copy of it: mlx-lm's preallocated buffer
// plus slice_update is cheap on MLX, which updates in place, but on the cpu backend
// slice_update copies the whole buffer every token. Here a decode step appends to the
// tail only (a copy of at most tailLimit positions) and attends to the two parts at
// once; the tail joins the frozen part once it reaches about √(2·S) positions, which
// keeps the amortized copying per token at O(√S) positions.
//
// The frozen keys are stored transposed, (B, Hkv, D, S): a decode step's scores
// q·kᵀ are then a plain product, which cblas runs 2–4× faster than one with a
// transposed operand at these shapes (a few query rows against thousands of keys).
// A multi-token prefill joins everything into the frozen part and runs the fused
// causal attention kernel.
type Cache struct {
	layers []LayerCache
}

// LayerCache is one layer's part of a Cache.
type LayerCache struct {
	kt, v  *mx.Array // frozen: keys (B, Hkv, D, S0) and values (B, Hkv, S0, D), nil when empty
	tk, tv *mx.Array // tail: (B, Hkv, S1, D), nil when empty

	hook AttentionHook // takes part in this layer's attention (hook.go); kept by Trim and Reset
}

// NewCache returns an empty cache for m.
func NewCache(m *Model) *Cache { return &Cache{layers: make([]LayerCache, len(m.layers))} }

// Len is the number of positions cached.
func (c *Cache) Len() int {
	if c == nil || len(c.layers) == 0 {
		return 0
	}
	return c.layers[0].Len()
}

// Bytes is the memory the keys and values take: the KV-cache tax of a long context.
func (c *Cache) Bytes() int64 {
	if c == nil {
		return 0
	}
	var n int64
	for i := range c.layers {
		l := &c.layers[i]
		for _, a := range []*mx.Array{l.kt, l.v, l.tk, l.tv} {
			if a != nil {
				n += a.Nbytes()
			}
		}
	}
	return n
}

// Trim keeps the first n positions and forgets the rest (n ≥ Len keeps everything).
func (c *Cache) Trim(n int) {
	if c == nil {
		return
	}
	for i := range c.layers {
		c.layers[i].trim(n)
	}
}

// Reset empties the cache.
func (c *Cache) Reset() { c.Trim(0) }

func (c *Cache) layer(i int) *LayerCache {
	if c == nil {
		return nil
	}
	return &c.layers[i]
}

func seqLen(a *mx.Array) int {
	if a == nil {
		return 0
	}
	return a.Dim(2)
}

// Len is the number of positions this layer holds (0 for a nil cache).
func (l *LayerCache) Len() int {
	if l == nil {
		return 0
	}
	return seqLen(l.v) + seqLen(l.tk)
}

func (l *LayerCache) trim(n int) {
	s0, s1 := seqLen(l.v), seqLen(l.tk)
	switch {
	case n >= s0+s1:
	case n <= 0:
		l.kt, l.v, l.tk, l.tv = nil, nil, nil, nil
	case n <= s0:
		l.kt, l.v = mx.SliceAxis(l.kt, 3, 0, n), mx.SliceAxis(l.v, 2, 0, n)
		l.tk, l.tv = nil, nil
	default:
		l.tk, l.tv = mx.SliceAxis(l.tk, 2, 0, n-s0), mx.SliceAxis(l.tv, 2, 0, n-s0)
	}
}

// tailLimit is the tail length at which it joins the frozen part, ≈ √(2·S) rounded
// up to a power of two, between 16 and 256.
func tailLimit(s int) int {
	t := 16
	for t < 256 && t*t < 2*s {
		t *= 2
	}
	return t
}

// cat joins the non-nil parts along axis (nil if there are none).
func cat(axis int, parts ...*mx.Array) *mx.Array {
	var xs []*mx.Array
	for _, p := range parts {
		if p != nil {
			xs = append(xs, p)
		}
	}
	switch len(xs) {
	case 0:
		return nil
	case 1:
		return xs[0]
	}
	return mx.Concatenate(xs, axis)
}

// transposeKeys swaps the last two axes: (B, H, S, D) ↔ (B, H, D, S).
func transposeKeys(k *mx.Array) *mx.Array {
	if k == nil {
		return nil
	}
	return mx.Transpose(k, 0, 1, 3, 2)
}

// Attend appends k, v (B, Hkv, L, D) to the cache and returns causal attention of
// q (B, Hq, L, D) over everything cached, (B, Hq, L, D). x (B, L, hidden) is the
// layer's normalized input that q, k and v were projected from: the cache hands it,
// with q, to the layer's AttentionHook when one is installed (hook.go), and
// otherwise does not look at it. A nil cache attends to k, v alone (training,
// scoring).
func (l *LayerCache) Attend(x, q, k, v *mx.Array, scale float32) *mx.Array {
	if l != nil && l.hook != nil {
		return l.hook.Attend(x, q, func(q *mx.Array) *mx.Array { return l.attend(q, k, v, scale) })
	}
	return l.attend(q, k, v, scale)
}

// attend is Attend without the hook.
func (l *LayerCache) attend(q, k, v *mx.Array, scale float32) *mx.Array {
	if l == nil {
		return mx.ScaledDotProductAttention(q, k, v, scale, true, nil)
	}
	if e := firstErr(q, k, v); e != nil {
		return e
	}
	if q.Dim(2) > 1 || l.Len() == 0 {
		// Prefill: one frozen part, the fused kernel.
		keys, vals := cat(2, transposeKeys(l.kt), l.tk, k), cat(2, l.v, l.tv, v)
		kt := transposeKeys(keys)
		if e := firstErr(keys, vals, kt); e != nil {
			return e // the cache is left as it was
		}
		l.kt, l.v, l.tk, l.tv = kt, vals, nil, nil
		return mx.ScaledDotProductAttention(q, keys, vals, scale, true, nil)
	}
	tk, tv := cat(2, l.tk, k), cat(2, l.tv, v)
	if e := firstErr(tk, tv); e != nil {
		return e
	}
	l.tk, l.tv = tk, tv
	// A tail always follows a frozen part: an empty cache takes the prefill path,
	// and trim empties the tail whenever it cuts into the frozen part.
	o := attendTwo(q, l.kt, l.v, l.tk, l.tv, scale)
	if seqLen(l.tk) >= tailLimit(l.Len()) {
		kt, vals := cat(3, l.kt, transposeKeys(l.tk)), cat(2, l.v, l.tv)
		if firstErr(kt, vals) == nil {
			l.kt, l.v, l.tk, l.tv = kt, vals, nil, nil
		}
	}
	return o
}

// attendTwo is attention of one query position over keys split in two parts, the
// frozen one transposed: the scores of both parts share one softmax, then each part's
// values are weighted by its slice of the probabilities. The rep = Hq/Hkv query heads
// that share a kv head are folded into the rows of one product, as grouped-query
// attention allows.
func attendTwo(q, kt0, v0, k1, v1 *mx.Array, scale float32) *mx.Array {
	b, hq, d := q.Dim(0), q.Dim(1), q.Dim(3)
	hkv, s0, s1 := v0.Dim(1), v0.Dim(2), v1.Dim(2)
	qg := mx.Reshape(mx.MulScalar(q, scale), b, hkv, hq/hkv, d)
	scores := mx.Concatenate([]*mx.Array{mx.Matmul(qg, kt0), mx.MatmulT(qg, k1, false, true)}, -1)
	p := mx.Softmax(scores, -1)
	o := mx.Add(mx.Matmul(mx.SliceAxis(p, -1, 0, s0), v0), mx.Matmul(mx.SliceAxis(p, -1, s0, s0+s1), v1))
	return mx.Reshape(o, b, hq, 1, v0.Dim(3))
}

// firstErr returns the first of xs that carries an error, or nil.
func firstErr(xs ...*mx.Array) *mx.Array {
	for _, x := range xs {
		if x.Err() != nil {
			return x
		}
	}
	return nil
}

// attentionScale is the usual 1/√head_dim.
func attentionScale(d int) float32 { return float32(1 / math.Sqrt(float64(d))) }

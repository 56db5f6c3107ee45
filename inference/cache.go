package inference

import (
	"math"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Cache holds the keys and values of every layer for the positions processed so far:
// the session state of one conversation. It stores num_key_value_heads heads, so a
// grouped-query model caches Hkv/Hq of what full attention would.
//
// Layout: each layer keeps a long "frozen" part and a short "tail" (B, Hkv, S, D).
// Arrays are immutable, so growing one buffer costs a copy of it: mlx-lm's
// preallocated buffer plus slice_update is cheap on MLX, which updates in place, but
// on the cpu backend slice_update copies the whole buffer every token. Here a decode
// step appends to the tail only (a copy of at most tailLimit positions) and attends to
// the two parts at once; the tail joins the frozen part once it reaches about
// √(2·S) positions, which keeps both copies' amortized cost per token at O(√S).
// A multi-token prefill joins everything into the frozen part and runs the fused
// causal attention kernel over it.
type Cache struct {
	layers []LayerCache
}

// LayerCache is one layer's part of a Cache.
type LayerCache struct {
	k, v   *mx.Array // frozen: (B, Hkv, S0, D), nil when empty
	tk, tv *mx.Array // tail:   (B, Hkv, S1, D), nil when empty
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
		for _, a := range []*mx.Array{l.k, l.v, l.tk, l.tv} {
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
	return seqLen(l.k) + seqLen(l.tk)
}

func (l *LayerCache) trim(n int) {
	s0, s1 := seqLen(l.k), seqLen(l.tk)
	switch {
	case n >= s0+s1:
	case n <= 0:
		*l = LayerCache{}
	case n <= s0:
		l.k, l.v = mx.SliceAxis(l.k, 2, 0, n), mx.SliceAxis(l.v, 2, 0, n)
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

// cat joins the non-nil parts along the sequence axis (nil if there are none).
func cat(parts ...*mx.Array) *mx.Array {
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
	return mx.Concatenate(xs, 2)
}

// Attend appends k, v (B, Hkv, L, D) to the cache and returns causal attention of
// q (B, Hq, L, D) over everything cached, (B, Hq, L, D). A nil cache attends to k, v
// alone (training, scoring).
func (l *LayerCache) Attend(q, k, v *mx.Array, scale float32) *mx.Array {
	if l == nil {
		return mx.ScaledDotProductAttention(q, k, v, scale, true, nil)
	}
	if q.Err() != nil || k.Err() != nil || v.Err() != nil {
		return firstErr(q, k, v)
	}
	if q.Dim(2) > 1 || (l.k == nil && l.tk == nil) {
		// Prefill: one frozen part, the fused kernel.
		fk, fv := cat(l.k, l.tk, k), cat(l.v, l.tv, v)
		if e := firstErr(fk, fv); e != nil {
			return e // the cache is left as it was
		}
		*l = LayerCache{k: fk, v: fv}
		return mx.ScaledDotProductAttention(q, l.k, l.v, scale, true, nil)
	}
	tk, tv := cat(l.tk, k), cat(l.tv, v)
	if e := firstErr(tk, tv); e != nil {
		return e
	}
	l.tk, l.tv = tk, tv
	var o *mx.Array
	if l.k == nil {
		o = mx.ScaledDotProductAttention(q, l.tk, l.tv, scale, false, nil)
	} else {
		o = attendTwo(q, l.k, l.v, l.tk, l.tv, scale)
	}
	if seqLen(l.tk) >= tailLimit(l.Len()) {
		if fk, fv := cat(l.k, l.tk), cat(l.v, l.tv); firstErr(fk, fv) == nil {
			*l = LayerCache{k: fk, v: fv}
		}
	}
	return o
}

// attendTwo is attention of one query position over keys split in two parts: the
// scores of both parts share one softmax, then each part's values are weighted by
// its slice of the probabilities. The rep = Hq/Hkv query heads that share a kv head
// are folded into the rows of one product, as grouped-query attention allows.
func attendTwo(q, k0, v0, k1, v1 *mx.Array, scale float32) *mx.Array {
	b, hq, d := q.Dim(0), q.Dim(1), q.Dim(3)
	hkv, s0, s1 := k0.Dim(1), k0.Dim(2), k1.Dim(2)
	qg := mx.Reshape(mx.MulScalar(q, scale), b, hkv, hq/hkv, d)
	scores := mx.Concatenate([]*mx.Array{mx.MatmulT(qg, k0, false, true), mx.MatmulT(qg, k1, false, true)}, -1)
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

package inference

import (
	"errors"
	"fmt"
	"math"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/mlxbridge/quant"
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
// That attention is mx.AttendParts, which the cpu backend runs in one pass over
// the keys and values where they lie (composed, it would join them first). A
// multi-token prefill joins everything into the frozen part and runs the fused
// causal attention kernel.
//
// On a lazy backend (MLX) an exact cache is laid out as mlx-lm lays out its own
// instead: one buffer per layer for keys and one for values, (B, Hkv, capacity,
// D), grown 256 positions at a time, a step's keys and values written in with
// slice_update and attention run by the fused kernel over the positions held.
// MLX updates such a buffer in place once nothing else holds it, so the cache
// frees its old buffer and views as soon as the step's graph is built: a decode
// step is then five ops per layer and copies nothing, where the two-part layout
// would join its parts into new buffers every step (MLX has no AttendParts
// kernel).
//
// With CacheOptions.Bits the frozen part is kept quantized instead, per position and
// head (MLX's affine format along the head dimension, as mlx-lm's --kv-bits keeps
// its cache), and a decode step reads the packed keys and values where they lie:
// mx.AttendQuantized where the backend has a kernel for it (the cpu backend, at 2, 4
// and 8 bits), else quantized products with one matrix per head (attendPacked). The
// tail, the most recent positions, stays exact until it joins.
type Cache struct {
	layers []LayerCache
	opts   CacheOptions

	// keepAt > 0 keeps the hidden states entering block keepAt, (B, S,
	// hidden), for every position held: what a session of the same model with
	// other adapters from that block on starts from (Session.SeedFrom).
	keepAt int
	kept   *mx.Array
}

// CacheOptions choose how a Cache stores keys and values.
type CacheOptions struct {
	// Bits quantizes the keys and values of every position but the most recent
	// few (up to 256): 8 keeps a position in 28% of the memory float32 takes,
	// 4 in 16%, at a cost in quality the README gives for the demo model. 16
	// rounds them to bfloat16 instead: half of float32, the width mlx-lm caches a
	// bfloat16 model in. 0 keeps them in the model's type.
	Bits int
	// GroupSize is how many values share a scale and a bias (0: 64, mlx-lm's
	// kv_group_size). A head dimension that is not a multiple of it is padded
	// with zeros to one.
	GroupSize int
}

func (o CacheOptions) withDefaults() CacheOptions {
	if o.quantized() && o.GroupSize == 0 {
		o.GroupSize = 64
	}
	return o
}

// Validate reports options a cache cannot take.
func (o CacheOptions) Validate() error {
	o = o.withDefaults()
	if o.Bits == 0 || o.Bits == 16 {
		return nil
	}
	if err := quant.Validate(o.Bits, o.GroupSize); err != nil {
		return fmt.Errorf("inference: kv cache: %w; or 16 bits, bfloat16", err)
	}
	return nil
}

// quantized reports a quantized cache (not exact, not 16-bit).
func (o CacheOptions) quantized() bool { return o.Bits > 0 && o.Bits < 16 }

// half holds x in bfloat16, compact where the backend can (a 16-bit cache's
// frozen part).
func half(x *mx.Array) *mx.Array {
	if x == nil {
		return nil
	}
	return mx.Compact(mx.AsType(x, mx.BFloat16))
}

// LayerCache is one layer's part of a Cache.
type LayerCache struct {
	k, v   *mx.Array // frozen: keys and values (B, Hkv, S0, D), nil when empty
	tk, tv *mx.Array // tail: (B, Hkv, S1, D), nil when empty
	// qk, qv replace k and v in a quantized cache: keys and values (B, Hkv, S0, ·)
	// packed, each head's positions one matrix.
	qk, qv *packed
	opts   CacheOptions

	// slotted: the layout of a lazy backend's exact cache. bk, bv are keys
	// and values (B, Hkv, capacity, D), of which the first n positions hold.
	slotted bool
	bk, bv  *mx.Array
	n       int
	// shared: another cache holds bk and bv too (Session.SeedFrom), so they
	// are not freed when replaced.
	shared bool

	hook AttentionHook // takes part in this layer's attention (hook.go); kept by Trim and Reset
}

// packed is a quantized (B, Hkv, S, Dp) array: words, scales, biases. Dp is the head
// dimension padded to a multiple of the group size.
type packed struct{ w, s, b *mx.Array }

// NewCache returns an empty cache for m.
func NewCache(m *Model) *Cache {
	c := &Cache{layers: make([]LayerCache, len(m.layers))}
	_, lazy := m.b.(mx.AsyncEvaluator)
	for i := range c.layers {
		c.layers[i].slotted = lazy || slotsAlways
	}
	return c
}

// slotsAlways gives every exact cache the slotted layout (tests: the layout's
// bookkeeping on the cpu backend).
var slotsAlways bool

// slotStep is how many positions a slotted buffer grows by, mlx-lm's step.
const slotStep = 256

// NewCacheWith returns an empty cache for m that stores keys and values as o says.
func NewCacheWith(m *Model, o CacheOptions) (*Cache, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := NewCache(m)
	c.opts = o.withDefaults()
	for i := range c.layers {
		c.layers[i].opts = c.opts
		c.layers[i].slotted = c.layers[i].slotted && c.opts.Bits == 0
	}
	return c, nil
}

// Options are the options the cache was made with.
func (c *Cache) Options() CacheOptions {
	if c == nil {
		return CacheOptions{}
	}
	return c.opts
}

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
		parts := []*mx.Array{l.k, l.v, l.tk, l.tv, l.bk, l.bv}
		for _, p := range []*packed{l.qk, l.qv} {
			if p != nil {
				parts = append(parts, p.w, p.s, p.b)
			}
		}
		for _, a := range parts {
			if a != nil {
				n += a.Nbytes()
			}
		}
	}
	if c.kept != nil {
		n += c.kept.Nbytes()
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
	switch {
	case c.kept == nil || n >= c.kept.Dim(1):
	case n <= 0:
		c.kept = nil
	default:
		c.kept = mx.SliceAxis(c.kept, 1, 0, n)
	}
}

// KeepHidden makes the cache keep, from now on, the hidden states entering
// block k for every position it holds (hidden × 4 bytes a position in
// float32), so that a session of the same model whose adapters differ only
// from block k on can start from them instead of running every block again
// (Session.SeedFrom): test-time training's temporary adapter sits on the last
// blocks. The cache must be empty; k = 0 stops keeping them.
func (c *Cache) KeepHidden(k int) error {
	if k < 0 || k >= len(c.layers) {
		return fmt.Errorf("inference: keep the input of block %d of %d", k, len(c.layers))
	}
	if c.Len() > 0 {
		return errors.New("inference: keep hidden states: the cache is not empty")
	}
	c.keepAt, c.kept = k, nil
	return nil
}

// keep appends h (B, L, hidden), the input of block keepAt, to the kept states.
func (c *Cache) keep(h *mx.Array) {
	c.kept = cat(1, c.kept, h)
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
	if l.slotted {
		return l.n
	}
	return l.frozen() + seqLen(l.tk)
}

// frozen is the length of the frozen part.
func (l *LayerCache) frozen() int {
	if l.qv != nil {
		return l.qv.w.Dim(2)
	}
	return seqLen(l.v)
}

func (l *LayerCache) trim(n int) {
	if l.slotted {
		l.n = max(0, min(l.n, n))
		if l.n == 0 {
			l.bk, l.bv = nil, nil
		}
		return
	}
	s0, s1 := l.frozen(), seqLen(l.tk)
	switch {
	case n >= s0+s1:
	case n <= 0:
		l.k, l.v, l.tk, l.tv, l.qk, l.qv = nil, nil, nil, nil, nil, nil
	case n <= s0:
		if l.qv != nil {
			l.qk, l.qv = l.qk.slice(n), l.qv.slice(n)
		} else {
			l.k, l.v = mx.SliceAxis(l.k, 2, 0, n), mx.SliceAxis(l.v, 2, 0, n)
			if l.opts.Bits == 16 {
				l.k, l.v = half(l.k), half(l.v)
			}
		}
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
	if l.slotted {
		return l.attendSlots(q, k, v, scale)
	}
	if q.Dim(2) > 1 || l.Len() == 0 {
		// Prefill: one frozen part, the fused kernel.
		old, oldV := l.k, l.v
		switch {
		case l.qk != nil:
			d := k.Dim(3)
			old, oldV = l.qk.dense(l.opts, d), l.qv.dense(l.opts, d)
		case old != nil && l.opts.Bits == 16:
			old, oldV = mx.AsType(old, k.DType()), mx.AsType(oldV, v.DType())
		}
		keys, vals := cat(2, old, l.tk, k), cat(2, oldV, l.tv, v)
		if e := firstErr(keys, vals); e != nil {
			return e // the cache is left as it was
		}
		switch {
		case l.opts.quantized():
			if err := l.freeze(cat(2, l.tk, k), cat(2, l.tv, v)); err != nil {
				return mx.ErrorArray(err)
			}
		case l.opts.Bits == 16:
			hk, hv := half(keys), half(vals)
			if e := firstErr(hk, hv); e != nil {
				return e
			}
			l.k, l.v, l.tk, l.tv = hk, hv, nil, nil
		default:
			l.k, l.v, l.tk, l.tv = keys, vals, nil, nil
		}
		return mx.ScaledDotProductAttention(q, keys, vals, scale, true, nil)
	}
	tk, tv := cat(2, l.tk, k), cat(2, l.tv, v)
	if e := firstErr(tk, tv); e != nil {
		return e
	}
	l.tk, l.tv = tk, tv
	// A tail always follows a frozen part: an empty cache takes the prefill path,
	// and trim empties the tail whenever it cuts into the frozen part.
	var o *mx.Array
	switch {
	case l.qk != nil && attendsQuantized(q.Backend(), l.opts.Bits):
		o = mx.AttendQuantized(q, l.qk.kv(), l.qv.kv(), l.opts.GroupSize, l.opts.Bits, []*mx.Array{l.tk}, []*mx.Array{l.tv}, scale)
	case l.qk != nil:
		o = attendPacked(q, l.qk, l.qv, l.tk, l.tv, scale, l.opts)
	default:
		o = mx.AttendParts(q, []*mx.Array{l.k, l.tk}, []*mx.Array{l.v, l.tv}, scale)
	}
	if seqLen(l.tk) >= tailLimit(l.Len()) {
		if l.qk != nil {
			l.freeze(l.tk, l.tv) // on failure the tail stays as it is
		} else {
			tk, tv := l.tk, l.tv
			if l.opts.Bits == 16 { // the tail rounded onto the frozen part
				tk, tv = mx.AsType(tk, mx.BFloat16), mx.AsType(tv, mx.BFloat16)
			}
			keys, vals := cat(2, l.k, tk), cat(2, l.v, tv)
			if l.opts.Bits == 16 {
				keys, vals = half(keys), half(vals)
			}
			if firstErr(keys, vals) == nil {
				l.k, l.v, l.tk, l.tv = keys, vals, nil, nil
			}
		}
	}
	return o
}

// attendSlots is attend for the slotted layout: k and v written after the
// positions held (into a new, larger buffer when they do not fit), then
// causal attention of q over all of them.
func (l *LayerCache) attendSlots(q, k, v *mx.Array, scale float32) *mx.Array {
	n, add := l.n, k.Dim(2)
	var bk, bv *mx.Array
	if l.bk != nil && n+add <= l.bk.Dim(2) {
		at := []int{0, 0, n, 0}
		bk, bv = mx.SliceUpdate(l.bk, k, at, nil), mx.SliceUpdate(l.bv, v, at, nil)
	} else {
		capacity := (n + add + slotStep - 1) / slotStep * slotStep
		grow := func(old, x *mx.Array) *mx.Array {
			sh := x.Shape()
			sh[2] = capacity - n - add
			parts := []*mx.Array{x, mx.Full(x.Backend(), sh, 0, x.DType())}
			if n > 0 {
				parts = append([]*mx.Array{mx.SliceAxis(old, 2, 0, n)}, parts...)
			}
			return mx.Concatenate(parts, 2)
		}
		bk, bv = grow(l.bk, k), grow(l.bv, v)
	}
	if e := firstErr(bk, bv); e != nil {
		return e // the cache is left as it was
	}
	keys, vals := mx.SliceAxis(bk, 2, 0, n+add), mx.SliceAxis(bv, 2, 0, n+add)
	out := mx.ScaledDotProductAttention(q, keys, vals, scale, true, nil)
	// The step's graph holds what it reads; without the old buffers' and the
	// views' handles, MLX can write the next step into this buffer in place.
	if !l.shared {
		mx.Free(l.bk, l.bv)
	}
	l.shared = false
	for _, view := range []*mx.Array{keys, vals} {
		if view.Handle() != bk.Handle() && view.Handle() != bv.Handle() {
			mx.Free(view)
		}
	}
	l.bk, l.bv, l.n = bk, bv, n+add
	return out
}

// freeze quantizes keys and values (B, Hkv, L, D) onto the end of the frozen part
// of a quantized cache and empties the tail; on an error nothing changes.
func (l *LayerCache) freeze(k, v *mx.Array) error {
	qk, qv := pack(k, l.opts), pack(v, l.opts)
	if l.qk != nil {
		qk, qv = l.qk.join(qk), l.qv.join(qv)
	}
	if e := firstErr(qk.w, qk.s, qk.b, qv.w, qv.s, qv.b); e != nil {
		return e.Err()
	}
	l.qk, l.qv, l.tk, l.tv = qk, qv, nil, nil
	return nil
}

// padTo is the head dimension d padded to a multiple of the group size.
func padTo(d int, o CacheOptions) int { return (d + o.GroupSize - 1) / o.GroupSize * o.GroupSize }

// padHead pads the last axis of x (..., d) with zeros to padTo(d).
func padHead(x *mx.Array, o CacheOptions) *mx.Array {
	d := x.Dim(-1)
	p := padTo(d, o)
	if p == d {
		return x
	}
	sh := x.Shape()
	sh[len(sh)-1] = p - d
	return mx.Concatenate([]*mx.Array{x, mx.Full(x.Backend(), sh, 0, x.DType())}, -1)
}

// pack quantizes x (B, Hkv, L, D) along its head dimension.
func pack(x *mx.Array, o CacheOptions) *packed {
	w, s, b := mx.Quantize(padHead(x, o), o.GroupSize, o.Bits)
	return &packed{w, s, b}
}

func (p *packed) join(q *packed) *packed {
	return &packed{mx.Concatenate([]*mx.Array{p.w, q.w}, 2), mx.Concatenate([]*mx.Array{p.s, q.s}, 2), mx.Concatenate([]*mx.Array{p.b, q.b}, 2)}
}

func (p *packed) slice(n int) *packed {
	return &packed{mx.SliceAxis(p.w, 2, 0, n), mx.SliceAxis(p.s, 2, 0, n), mx.SliceAxis(p.b, 2, 0, n)}
}

// dense is p dequantized, (B, Hkv, S, d).
func (p *packed) dense(o CacheOptions, d int) *mx.Array {
	x := mx.Dequantize(p.w, p.s, p.b, o.GroupSize, o.Bits)
	if x.Err() == nil && x.Dim(-1) != d {
		x = mx.SliceAxis(x, -1, 0, d)
	}
	return x
}

// attendsQuantized reports whether b has a kernel for attention over a quantized
// cache part at bits (the cpu backend); elsewhere (MLX) the composed op would
// dequantize the whole part every step, and attendPacked's quantized products
// per head do better.
func attendsQuantized(b mx.Backend, bits int) bool {
	qa, ok := b.(mx.QuantizedAttender)
	return ok && qa.AttendsQuantized(bits)
}

// kv is p as mlxbridge's QuantizedKV.
func (p *packed) kv() mx.QuantizedKV { return mx.QuantizedKV{W: p.w, Scales: p.s, Biases: p.b} }

// attendPacked is attention of one query position over a quantized frozen part
// and an exact tail, the scores of both sharing one softmax: the scores of a head's
// query rows against its packed keys, and its probabilities against its packed
// values, are quantized products, one matrix per head.
func attendPacked(q *mx.Array, k0, v0 *packed, k1, v1 *mx.Array, scale float32, o CacheOptions) *mx.Array {
	b, hq, d := q.Dim(0), q.Dim(1), q.Dim(3)
	hkv, s0, s1 := k0.w.Dim(1), k0.w.Dim(2), v1.Dim(2)
	qg := mx.Reshape(mx.MulScalar(q, scale), b, hkv, hq/hkv, d)
	scores := mx.Concatenate([]*mx.Array{
		mx.QuantizedMatmul(padHead(qg, o), k0.w, k0.s, k0.b, true, o.GroupSize, o.Bits),
		mx.MatmulT(qg, k1, false, true)}, -1)
	p := mx.Softmax(scores, -1)
	old := mx.QuantizedMatmul(mx.SliceAxis(p, -1, 0, s0), v0.w, v0.s, v0.b, false, o.GroupSize, o.Bits)
	if old.Err() == nil && old.Dim(-1) != d {
		old = mx.SliceAxis(old, -1, 0, d)
	}
	out := mx.Add(old, mx.Matmul(mx.SliceAxis(p, -1, s0, s0+s1), v1))
	return mx.Reshape(out, b, hq, 1, d)
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

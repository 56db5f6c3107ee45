package inference

import (
	"fmt"

	mx "github.com/inloop/inloop/mlxbridge"
)

// AttentionHook lets per-session state take part in one layer's attention without
// adding positions to the context: an online memory (adapt/deltamem) reads the
// layer's input, corrects the query and the output, and updates itself, while the
// cache goes on storing only keys and values. A Cache consults the hook of a layer
// when one is installed (SetHook); with none, attention is exactly what it is
// without this file, bit for bit and at the same speed.
//
// Hooks belong to a cache, and so to one session: the state they keep is that
// session's. Trim and Reset forget keys and values but keep the hooks, so a
// memory outlives a reset of the KV cache.
type AttentionHook interface {
	// Attend is called in place of the layer's attention with x (B, L, hidden),
	// the normalized input that the query, keys and values were projected from,
	// and the query q (B, Hq, L, D) after RoPE. attend is the attention the layer
	// would have run: it appends the layer's keys and values to the cache and
	// returns causal attention of the query it is given over everything cached,
	// (B, Hq, L, D). Attend calls it exactly once and returns the layer's
	// attention output, (B, Hq, L, D), before the output projection. It is called
	// with a multi-token x on prefill and a one-token x on each decode step, in
	// the order of the positions.
	Attend(x, q *mx.Array, attend func(q *mx.Array) *mx.Array) *mx.Array
}

// SetHook installs h in layer i's attention (nil removes it).
func (c *Cache) SetHook(i int, h AttentionHook) error {
	if c == nil || i < 0 || i >= len(c.layers) {
		return fmt.Errorf("inference: set hook: layer %d of %d", i, c.NumLayers())
	}
	c.layers[i].hook = h
	return nil
}

// Hook returns layer i's hook, nil when there is none.
func (c *Cache) Hook(i int) AttentionHook {
	if c == nil || i < 0 || i >= len(c.layers) {
		return nil
	}
	return c.layers[i].hook
}

// NumLayers is the number of layers the cache has room for.
func (c *Cache) NumLayers() int {
	if c == nil {
		return 0
	}
	return len(c.layers)
}

package optim

import (
	"fmt"
	"maps"
	"math"
	"slices"

	mx "github.com/inloop/inloop/mlxbridge"
)

// ClipGlobalNorm is mlx.optimizers.clip_grad_norm: it scales every gradient by
// maxNorm/(‖g‖+1e-6) when the global norm ‖g‖, the L2 norm of all gradients taken
// as one vector, is not below maxNorm, and returns the gradients with ‖g‖ (a float32
// scalar, before clipping). The decision is made with array ops, so nothing is read
// back; call Item on the norm to log it. The norm is mx.GlobalNorm: accumulated in
// float64 where the backend fuses it, else in float32, whatever the gradients' dtype
// (MLX sums in the gradients' own dtype). maxNorm ≤ 0 turns
// clipping off and only measures. Errors ride in the arrays, as in mlxbridge.
func ClipGlobalNorm(grads map[string]*mx.Array, maxNorm float32) (map[string]*mx.Array, *mx.Array) {
	names, xs := Flatten(grads)
	if len(names) == 0 {
		return map[string]*mx.Array{}, mx.Scalar(0)
	}
	norm := mx.GlobalNorm(xs[0].Backend(), xs...)
	out := make(map[string]*mx.Array, len(names))
	if maxNorm <= 0 {
		for _, n := range names {
			out[n] = grads[n]
		}
		return out, norm
	}
	limit := scalar(norm, float64(maxNorm))
	below := mx.Less(norm, limit)
	factor := mx.Div(limit, addScalar(norm, 1e-6))
	for _, n := range names {
		g := grads[n]
		if g.Err() != nil {
			out[n] = g
			continue
		}
		out[n] = mx.Where(below, g, mx.Mul(g, mx.AsType(factor, g.DType())))
	}
	return out, norm
}

// ClipGlobalNormRead is ClipGlobalNorm deciding on the host: it reads ‖g‖ back
// and scales the gradients only when ‖g‖ is not below maxNorm, so a step that is
// not clipped issues no op beyond the norm. The numbers are ClipGlobalNorm's. For
// a caller that reads the norm anyway (a training step that logs it); an error in
// any gradient is returned.
func ClipGlobalNormRead(grads map[string]*mx.Array, maxNorm float32) (map[string]*mx.Array, float32, error) {
	names, xs := Flatten(grads)
	out := maps.Clone(grads)
	if len(names) == 0 {
		return map[string]*mx.Array{}, 0, nil
	}
	norm, err := mx.GlobalNorm(xs[0].Backend(), xs...).Item()
	if err != nil {
		return nil, float32(math.NaN()), fmt.Errorf("optim: clip: %w", err)
	}
	if maxNorm <= 0 || norm < maxNorm {
		return out, norm, nil
	}
	factor := float64(maxNorm / (norm + float32(1e-6)))
	for _, n := range names {
		out[n] = mulScalar(grads[n], factor)
	}
	return out, norm, nil
}

// Accumulator sums the gradients of several micro-batches so that one optimizer
// step sees the gradient of their union: Mean returns Σ wᵢ·gᵢ / Σ wᵢ. With equal
// weights (Add) and micro-batches of equal size whose losses are means, that is the
// gradient of the whole batch's mean loss, mlx-lm's gradient accumulation. When
// micro-batches hold different numbers of loss tokens, AddWeighted with the token
// count keeps it exact. Sums are kept in float32 and handed back in each
// gradient's own dtype.
type Accumulator struct {
	sum    map[string]*mx.Array
	dtypes map[string]mx.DType
	weight float64
	n      int
}

// Add adds one micro-batch's gradients with weight 1.
func (a *Accumulator) Add(grads map[string]*mx.Array) error { return a.AddWeighted(grads, 1) }

// AddWeighted adds one micro-batch's gradients with weight w > 0. Every call must
// pass the same names and shapes.
func (a *Accumulator) AddWeighted(grads map[string]*mx.Array, w float32) error {
	if !(w > 0) || math.IsInf(float64(w), 0) {
		return fmt.Errorf("optim: accumulate: weight %g, want a positive finite number", w)
	}
	if len(grads) == 0 {
		return fmt.Errorf("optim: accumulate: no gradients")
	}
	if a.sum != nil && len(grads) != len(a.sum) {
		return fmt.Errorf("optim: accumulate: %d gradients after %d", len(grads), len(a.sum))
	}
	next := make(map[string]*mx.Array, len(grads))
	dtypes := make(map[string]mx.DType, len(grads))
	for _, n := range Names(grads) {
		g := grads[n]
		if err := g.Err(); err != nil {
			return fmt.Errorf("optim: accumulate: gradient %q: %w", n, err)
		}
		if !g.DType().IsFloat() {
			return fmt.Errorf("optim: accumulate: gradient %q is %s", n, g.DType())
		}
		x := mx.AsType(g, mx.Float32)
		if w != 1 {
			x = mulScalar(x, float64(w))
		}
		if a.sum != nil {
			prev, ok := a.sum[n]
			if !ok {
				return fmt.Errorf("optim: accumulate: gradient %q was not in the earlier micro-batches", n)
			}
			if !slices.Equal(prev.Shape(), g.Shape()) {
				return fmt.Errorf("optim: accumulate: gradient %q has shape %v, earlier %v", n, g.Shape(), prev.Shape())
			}
			x = mx.Add(prev, x)
		}
		next[n], dtypes[n] = x, g.DType()
	}
	if err := evalNamed(namedGroup{"accumulated gradient", next}); err != nil {
		return err
	}
	a.sum, a.dtypes = next, dtypes
	a.weight += float64(w)
	a.n++
	return nil
}

// Count is the number of micro-batches added since the last Reset.
func (a *Accumulator) Count() int { return a.n }

// Mean returns the weighted mean of the gradients added so far.
func (a *Accumulator) Mean() (map[string]*mx.Array, error) {
	if a.n == 0 {
		return nil, fmt.Errorf("optim: accumulate: mean of no micro-batches")
	}
	out := make(map[string]*mx.Array, len(a.sum))
	for n, s := range a.sum {
		out[n] = mx.AsType(mulScalar(s, 1/a.weight), a.dtypes[n])
	}
	if err := evalNamed(namedGroup{"mean gradient", out}); err != nil {
		return nil, err
	}
	return out, nil
}

// Reset empties the accumulator for the next optimizer step.
func (a *Accumulator) Reset() { *a = Accumulator{} }

// AllFinite reports whether every element of the float arrays is finite (no NaN,
// no ±Inf); integer arrays are finite by construction. It reads back one number,
// mx.GlobalNorm of them all: finite, so is every element. Only when it is not
// (an element is not, or the squares overflowed) does it look again, with Σ x·0,
// which is 0 exactly when all x are finite and NaN otherwise.
func AllFinite(xs ...*mx.Array) (bool, error) {
	var fs []*mx.Array
	for i, x := range xs {
		if err := x.Err(); err != nil {
			return false, fmt.Errorf("optim: all finite: array %d: %w", i, err)
		}
		if x.DType().IsFloat() && x.Size() > 0 {
			fs = append(fs, x)
		}
	}
	if len(fs) == 0 {
		return true, nil
	}
	norm, err := mx.GlobalNorm(fs[0].Backend(), fs...).Item()
	if err != nil {
		return false, fmt.Errorf("optim: all finite: %w", err)
	}
	if !math.IsNaN(float64(norm)) && !math.IsInf(float64(norm), 0) {
		return true, nil
	}
	var acc *mx.Array
	for _, x := range fs {
		z := mx.Sum(mx.Mul(mx.AsType(x, mx.Float32), mx.FromData(x.Backend(), mx.Float32, []float32{0})), nil, false)
		if acc == nil {
			acc = z
		} else {
			acc = mx.Add(acc, z)
		}
	}
	v, err := acc.Item()
	if err != nil {
		return false, fmt.Errorf("optim: all finite: %w", err)
	}
	return v == 0, nil
}

// NonFinite names the arrays, in sorted order, that hold a NaN or an infinity:
// what a trainer reports when AllFinite fails ("gradient of … is not finite").
func NonFinite(named map[string]*mx.Array) ([]string, error) {
	var bad []string
	for _, n := range Names(named) {
		ok, err := AllFinite(named[n])
		if err != nil {
			return nil, fmt.Errorf("optim: %q: %w", n, err)
		}
		if !ok {
			bad = append(bad, n)
		}
	}
	return bad, nil
}

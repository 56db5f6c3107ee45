// Package optim updates a model's trainable parameters from their gradients: the
// optimizers (SGD, Adam, AdamW), learning-rate schedules, global-norm gradient
// clipping, gradient accumulation and the non-finite checks a trainer runs each step.
//
// It follows mlx.optimizers: parameters are named arrays (the names mlx-lm gives
// adapter weights, "model.layers.0.self_attn.q_proj.lora_a"), an optimizer keeps
// per-parameter state keyed by those names, the step count starts at 0 and each
// update uses the learning rate its schedule gives for the step count before the
// update. Everything is written with mlxbridge ops, so it runs on any backend.
package optim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Optimizer turns gradients into new parameter values.
//
// Step is functional in the parameters: it returns new arrays and never changes
// the ones passed in. It advances the optimizer's own state (moments, step count)
// only when the whole update succeeds, so a failed Step can be retried or the run
// stopped with the state of the last good step.
type Optimizer interface {
	// Step returns params updated with grads. params and grads must have the
	// same names and each gradient its parameter's shape.
	Step(params, grads map[string]*mx.Array) (map[string]*mx.Array, error)
	// Steps is the number of updates applied so far.
	Steps() int
	// LearningRate is the rate the next Step will use.
	LearningRate() float32
	// State exports what a checkpoint must keep to resume bit for bit.
	State() State
	// SetState replaces the optimizer's state with one exported by State.
	SetState(State) error
}

// State is an optimizer's resumable state: per-parameter arrays named
// "<param>.<slot>" (the names mlx.utils.tree_flatten gives MLX's optimizer state,
// e.g. "…lora_a.m", "…lora_a.v") and scalars, of which "step" is the update count.
// Hyperparameters are not state; they belong to the run's configuration.
type State struct {
	Arrays  map[string]*mx.Array
	Scalars map[string]float64
}

// ScalarStep is the State scalar holding the number of updates applied.
const ScalarStep = "step"

// Names returns m's keys in sorted order, the order every function here visits
// parameters in, so float sums over several arrays are reproducible.
func Names(m map[string]*mx.Array) []string { return slices.Sorted(maps.Keys(m)) }

// Flatten lists m's names and arrays in sorted name order, the form
// mlxbridge.ValueAndGrad takes its parameters in.
func Flatten(m map[string]*mx.Array) ([]string, []*mx.Array) {
	names := Names(m)
	xs := make([]*mx.Array, len(names))
	for i, n := range names {
		xs[i] = m[n]
	}
	return names, xs
}

// Unflatten pairs names with arrays again; the lengths must match.
func Unflatten(names []string, xs []*mx.Array) map[string]*mx.Array {
	if len(names) != len(xs) {
		panic(fmt.Sprintf("optim: Unflatten: %d names for %d arrays", len(names), len(xs)))
	}
	m := make(map[string]*mx.Array, len(names))
	for i, n := range names {
		m[n] = xs[i]
	}
	return m
}

// matchParams checks that params and grads name the same float arrays of the same
// shapes, and returns the names sorted.
func matchParams(params, grads map[string]*mx.Array) ([]string, error) {
	if len(params) == 0 {
		return nil, fmt.Errorf("optim: step: no parameters")
	}
	names := Names(params)
	for _, n := range names {
		p, g := params[n], grads[n]
		if g == nil {
			return nil, fmt.Errorf("optim: step: no gradient for parameter %q", n)
		}
		if err := p.Err(); err != nil {
			return nil, fmt.Errorf("optim: step: parameter %q: %w", n, err)
		}
		if err := g.Err(); err != nil {
			return nil, fmt.Errorf("optim: step: gradient of %q: %w", n, err)
		}
		if !p.DType().IsFloat() || !g.DType().IsFloat() {
			return nil, fmt.Errorf("optim: step: parameter %q is %s with a %s gradient, want float", n, p.DType(), g.DType())
		}
		if !slices.Equal(p.Shape(), g.Shape()) {
			return nil, fmt.Errorf("optim: step: gradient of %q has shape %v, parameter %v", n, g.Shape(), p.Shape())
		}
	}
	if len(grads) != len(params) {
		for n := range grads {
			if params[n] == nil {
				return nil, fmt.Errorf("optim: step: gradient %q has no parameter", n)
			}
		}
	}
	return names, nil
}

// scalar is v as a 0-d array of x's dtype on x's backend: a Go constant that
// broadcasts against x without promoting it, like a Python float in MLX.
func scalar(x *mx.Array, v float64) *mx.Array {
	return mx.FromData(x.Backend(), x.DType(), []float32{float32(v)})
}

func mulScalar(x *mx.Array, v float64) *mx.Array { return mx.Mul(x, scalar(x, v)) }
func addScalar(x *mx.Array, v float64) *mx.Array { return mx.Add(x, scalar(x, v)) }

// evalNamed evaluates every array of the groups in one go (one graph evaluation
// on a lazy backend) and names the first one that carries an error.
func evalNamed(groups ...namedGroup) error {
	var labels []string
	var xs []*mx.Array
	for _, g := range groups {
		for _, n := range Names(g.arrays) {
			labels = append(labels, g.what+" "+strconv.Quote(n))
			xs = append(xs, g.arrays[n])
		}
	}
	if len(xs) == 0 {
		return nil
	}
	if err := mx.Eval(xs...); err != nil {
		for i, x := range xs {
			if x.Err() != nil {
				return fmt.Errorf("optim: %s: %w", labels[i], x.Err())
			}
		}
		return fmt.Errorf("optim: %w", err)
	}
	return nil
}

type namedGroup struct {
	what   string
	arrays map[string]*mx.Array
}

// stepFromScalars reads and checks the "step" scalar.
func stepFromScalars(s map[string]float64) (int, error) {
	v, ok := s[ScalarStep]
	if !ok {
		return 0, fmt.Errorf("optim: state has no %q scalar", ScalarStep)
	}
	if v < 0 || v != math.Trunc(v) || v > 1<<53 {
		return 0, fmt.Errorf("optim: state step %v is not a count", v)
	}
	for k := range s {
		if k != ScalarStep {
			return 0, fmt.Errorf("optim: state has unknown scalar %q", k)
		}
	}
	return int(v), nil
}

// splitSlots checks that every state array is a float array named
// "<param>.<slot>" with slot in slots, and groups them by slot.
func splitSlots(arrays map[string]*mx.Array, slots ...string) (map[string]map[string]*mx.Array, error) {
	out := make(map[string]map[string]*mx.Array, len(slots))
	for _, s := range slots {
		out[s] = map[string]*mx.Array{}
	}
	for _, name := range Names(arrays) {
		a := arrays[name]
		i := strings.LastIndexByte(name, '.')
		if i <= 0 {
			return nil, fmt.Errorf("optim: state array %q is not named <param>.<slot>", name)
		}
		param, slot := name[:i], name[i+1:]
		bySlot, ok := out[slot]
		if !ok {
			return nil, fmt.Errorf("optim: state array %q: unknown slot %q (want %s)", name, slot, strings.Join(slots, ", "))
		}
		if err := a.Err(); err != nil {
			return nil, fmt.Errorf("optim: state array %q: %w", name, err)
		}
		if !a.DType().IsFloat() {
			return nil, fmt.Errorf("optim: state array %q is %s, want float", name, a.DType())
		}
		bySlot[param] = a
	}
	return out, nil
}

// joinSlots is splitSlots' inverse.
func joinSlots(bySlot map[string]map[string]*mx.Array) map[string]*mx.Array {
	out := map[string]*mx.Array{}
	for slot, m := range bySlot {
		for param, a := range m {
			out[param+"."+slot] = a
		}
	}
	return out
}

// slotFor returns the state array for param, or zeros like p when the parameter
// has none yet (MLX initializes state lazily on the first update the same way).
func slotFor(m map[string]*mx.Array, name, slot string, p *mx.Array) (*mx.Array, error) {
	s, err := stateOf(m, name, slot, p)
	if s == nil && err == nil {
		s = mx.ZerosLike(p)
	}
	return s, err
}

// stateOf returns the state array for param, or nil when it has none yet.
func stateOf(m map[string]*mx.Array, name, slot string, p *mx.Array) (*mx.Array, error) {
	s, ok := m[name]
	if !ok {
		return nil, nil
	}
	if !slices.Equal(s.Shape(), p.Shape()) {
		return nil, fmt.Errorf("optim: state %s.%s has shape %v, parameter %v", name, slot, s.Shape(), p.Shape())
	}
	return s, nil
}

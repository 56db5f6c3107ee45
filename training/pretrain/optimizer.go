package pretrain

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/optim"
)

// decayMatrices is AdamW (β2 0.95, bias correction: GPT-2's recipe) with weight
// decay on matrices only, so norms keep their scale: two Adams on one
// schedule, one with decay for parameters of two or more dimensions, one
// without for the rest. It is one optim.Optimizer, so the shared step can take
// back a rejected update whole.
type decayMatrices struct {
	decay, plain *optim.Adam
}

func newOptimizer(cfg Config) *decayMatrices {
	mk := func(wd float64) *optim.Adam {
		o := optim.NewAdamW(optim.WarmupCosine(float32(cfg.LR), cfg.Warmup, cfg.Steps-cfg.Warmup, float32(cfg.MinLR)))
		o.Beta2 = 0.95
		o.BiasCorrection = true
		o.WeightDecay = wd
		return o
	}
	return &decayMatrices{decay: mk(cfg.WeightDecay), plain: mk(0)}
}

func split(m map[string]*mx.Array, matrix func(string) bool) (yes, no map[string]*mx.Array) {
	yes, no = map[string]*mx.Array{}, map[string]*mx.Array{}
	for n, a := range m {
		if matrix(n) {
			yes[n] = a
		} else {
			no[n] = a
		}
	}
	return yes, no
}

// Step updates both groups, or neither.
func (o *decayMatrices) Step(params, grads map[string]*mx.Array) (map[string]*mx.Array, error) {
	isMatrix := func(n string) bool { return params[n] != nil && params[n].Ndim() >= 2 }
	p1, p2 := split(params, isMatrix)
	g1, g2 := split(grads, isMatrix)
	before := o.decay.State()
	next, err := o.decay.Step(p1, g1)
	if err != nil {
		return nil, err
	}
	if len(p2) > 0 || len(g2) > 0 {
		rest, err := o.plain.Step(p2, g2)
		if err != nil {
			if serr := o.decay.SetState(before); serr != nil {
				err = errors.Join(err, serr)
			}
			return nil, err
		}
		maps.Copy(next, rest)
	}
	return next, nil
}

func (o *decayMatrices) Steps() int            { return o.decay.Steps() }
func (o *decayMatrices) LearningRate() float32 { return o.decay.LearningRate() }

// State is both groups' moments (their names do not overlap) and the step.
func (o *decayMatrices) State() optim.State {
	s := o.decay.State()
	maps.Copy(s.Arrays, o.plain.State().Arrays)
	return s
}

// SetState hands each moment to the group its parameter belongs to, told by
// the moment's own shape.
func (o *decayMatrices) SetState(s optim.State) error {
	d := optim.State{Arrays: map[string]*mx.Array{}, Scalars: s.Scalars}
	p := optim.State{Arrays: map[string]*mx.Array{}, Scalars: s.Scalars}
	for n, a := range s.Arrays {
		if !strings.HasSuffix(n, ".m") && !strings.HasSuffix(n, ".v") {
			return fmt.Errorf("pretrain: optimizer state %q is not a moment", n)
		}
		if a.Ndim() >= 2 {
			d.Arrays[n] = a
		} else {
			p.Arrays[n] = a
		}
	}
	before := o.decay.State()
	if err := o.decay.SetState(d); err != nil {
		return err
	}
	if err := o.plain.SetState(p); err != nil {
		if serr := o.decay.SetState(before); serr != nil {
			err = errors.Join(err, serr)
		}
		return err
	}
	return nil
}

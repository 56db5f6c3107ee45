package ror

import (
	"fmt"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/decide"
	"github.com/inloop/inloop/training/optim"
)

// sgd is plain gradient descent with one rate for the head and one for the
// adapter, p ← p − lr·g. It keeps no state beyond a step count, so a version of
// the weights is all there is to undo: a correction starts from the weights,
// never from moments an earlier (perhaps undone) correction left behind. Adam's
// first steps move every weight by about its rate whatever the gradient says;
// SGD moves each weight in proportion to how much it matters to the
// correction, which is what a one-example step should do.
type sgd struct {
	head, adapter float64
	steps         int
}

func (o *sgd) Step(params, grads map[string]*mx.Array) (map[string]*mx.Array, error) {
	out := make(map[string]*mx.Array, len(params))
	for _, n := range optim.Names(params) {
		g := grads[n]
		if g == nil {
			return nil, fmt.Errorf("ror: no gradient for %s", n)
		}
		lr := o.adapter
		if decide.IsHeadParam(n) {
			lr = o.head
		}
		out[n] = mx.Sub(params[n], mx.MulScalar(g, float32(lr)))
	}
	if len(grads) != len(params) {
		return nil, fmt.Errorf("ror: %d gradients for %d weights", len(grads), len(params))
	}
	if err := mx.Eval(valuesOf(out)...); err != nil {
		return nil, fmt.Errorf("ror: step: %w", err)
	}
	o.steps++
	return out, nil
}

func (o *sgd) Steps() int { return o.steps }

// LearningRate is the head's rate.
func (o *sgd) LearningRate() float32 { return float32(o.head) }

func (o *sgd) State() optim.State {
	return optim.State{Scalars: map[string]float64{optim.ScalarStep: float64(o.steps)}}
}

func (o *sgd) SetState(s optim.State) error {
	o.steps = int(s.Scalars[optim.ScalarStep])
	return nil
}

func valuesOf(m map[string]*mx.Array) []*mx.Array {
	out := make([]*mx.Array, 0, len(m))
	for _, n := range optim.Names(m) {
		out = append(out, m[n])
	}
	return out
}

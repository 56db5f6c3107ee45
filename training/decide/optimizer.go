package decide

import (
	"maps"

	mx "github.com/inloop/inloop/mlxbridge"
	"github.com/inloop/inloop/training/optim"
)

// groupOptimizer is Adam (with bias correction) with two learning-rate
// schedules: one for the head's weights, one for the adapter's. The trainer's
// Stepper takes one optimizer; this is one.
type groupOptimizer struct {
	head, rest *optim.Adam
	headOnly   bool // no adapter: report the head's rate
}

func newGroupOptimizer(head, rest optim.Schedule, headOnly bool) *groupOptimizer {
	h, r := optim.NewAdam(head), optim.NewAdam(rest)
	h.BiasCorrection, r.BiasCorrection = true, true
	return &groupOptimizer{head: h, rest: r, headOnly: headOnly}
}

func splitParams(m map[string]*mx.Array) (head, rest map[string]*mx.Array) {
	head, rest = map[string]*mx.Array{}, map[string]*mx.Array{}
	for n, a := range m {
		if IsHeadParam(n) {
			head[n] = a
		} else {
			rest[n] = a
		}
	}
	return head, rest
}

// Step updates both groups, or neither: a failure of the second restores the
// first's state, as Optimizer's contract asks.
func (g *groupOptimizer) Step(params, grads map[string]*mx.Array) (map[string]*mx.Array, error) {
	hp, rp := splitParams(params)
	hg, rg := splitParams(grads)
	saved := g.head.State()
	out, err := g.head.Step(hp, hg)
	if err != nil {
		return nil, err
	}
	if len(rp) > 0 || len(rg) > 0 {
		next, err := g.rest.Step(rp, rg)
		if err != nil {
			g.head.SetState(saved)
			return nil, err
		}
		maps.Copy(out, next)
	}
	return out, nil
}

func (g *groupOptimizer) Steps() int { return g.head.Steps() }

// LearningRate is the adapter's rate (the head's follows the same schedule
// from its own peak), or the head's when there is no adapter.
func (g *groupOptimizer) LearningRate() float32 {
	if g.headOnly {
		return g.head.LearningRate()
	}
	return g.rest.LearningRate()
}

func (g *groupOptimizer) State() optim.State {
	h, r := g.head.State(), g.rest.State()
	arrays := maps.Clone(h.Arrays)
	maps.Copy(arrays, r.Arrays)
	return optim.State{Arrays: arrays, Scalars: h.Scalars}
}

func (g *groupOptimizer) SetState(s optim.State) error {
	h, r := optim.State{Arrays: map[string]*mx.Array{}, Scalars: s.Scalars}, optim.State{Arrays: map[string]*mx.Array{}, Scalars: s.Scalars}
	for n, a := range s.Arrays {
		if IsHeadParam(n) {
			h.Arrays[n] = a
		} else {
			r.Arrays[n] = a
		}
	}
	if err := g.head.SetState(h); err != nil {
		return err
	}
	return g.rest.SetState(r)
}

package optim

import (
	"fmt"
	"maps"

	mx "github.com/inloop/inloop/mlxbridge"
)

// SGD is mlx.optimizers.SGD: with rate lr = LR(t−1) at update t,
//
//	g ← g + λ·p                          (weight decay as an L2 term, coupled)
//	v ← μ·v + (1−τ)·g                    (momentum μ, dampening τ; v starts at 0)
//	p ← p − lr·(g + μ·v)                 (Nesterov)
//	p ← p − lr·v                         (otherwise; p − lr·g when μ = 0)
//
// PyTorch differs in one place: its first update sets v = g, undamped, where MLX
// (and this) computes v = (1−τ)·g. With τ = 0, the default, they agree.
type SGD struct {
	LR          Schedule
	Momentum    float64 // μ ≥ 0; 0 keeps no state
	WeightDecay float64 // λ
	Dampening   float64 // τ
	Nesterov    bool    // needs μ > 0 and τ = 0

	step int
	v    map[string]*mx.Array
}

// NewSGD returns plain SGD at the given rate; set the fields for momentum.
func NewSGD(lr Schedule) *SGD { return &SGD{LR: lr} }

func (o *SGD) check() error {
	switch {
	case o.LR == nil:
		return fmt.Errorf("optim: sgd: no learning rate schedule")
	case !(o.Momentum >= 0):
		return fmt.Errorf("optim: sgd: momentum %g < 0", o.Momentum)
	case o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0):
		return fmt.Errorf("optim: sgd: Nesterov momentum needs a momentum and zero dampening")
	}
	return nil
}

// Step applies one update; see Optimizer.
func (o *SGD) Step(params, grads map[string]*mx.Array) (map[string]*mx.Array, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	names, err := matchParams(params, grads)
	if err != nil {
		return nil, err
	}
	lr := float64(o.LR.LR(o.step))
	out := make(map[string]*mx.Array, len(names))
	newV := maps.Clone(o.v)
	if newV == nil {
		newV = map[string]*mx.Array{}
	}
	for _, n := range names {
		p := params[n]
		g := mx.AsType(grads[n], p.DType())
		if o.WeightDecay != 0 {
			g = mx.Add(g, mulScalar(p, o.WeightDecay))
		}
		if o.Momentum <= 0 {
			out[n] = mx.Sub(p, mulScalar(g, lr))
			continue
		}
		v, err := slotFor(o.v, n, "v", p)
		if err != nil {
			return nil, err
		}
		v = mulScalar(v, o.Momentum)
		if o.Dampening > 0 {
			v = mx.Add(v, mulScalar(g, 1-o.Dampening))
		} else {
			v = mx.Add(v, g)
		}
		update := v
		if o.Nesterov {
			update = mx.Add(g, mulScalar(v, o.Momentum))
		}
		out[n] = mx.Sub(p, mulScalar(update, lr))
		newV[n] = v
	}
	if err := evalNamed(namedGroup{"update of", out}, namedGroup{"momentum of", newV}); err != nil {
		return nil, err
	}
	o.v = newV
	o.step++
	return out, nil
}

// Steps is the number of updates applied.
func (o *SGD) Steps() int { return o.step }

// LearningRate is the rate the next Step uses.
func (o *SGD) LearningRate() float32 {
	if o.LR == nil {
		return 0
	}
	return o.LR.LR(o.step)
}

// State exports the momentum buffers as "<param>.v" and the step count.
func (o *SGD) State() State {
	return State{
		Arrays:  joinSlots(map[string]map[string]*mx.Array{"v": o.v}),
		Scalars: map[string]float64{ScalarStep: float64(o.step)},
	}
}

// SetState replaces the momentum buffers and step count.
func (o *SGD) SetState(s State) error {
	step, err := stepFromScalars(s.Scalars)
	if err != nil {
		return err
	}
	slots, err := splitSlots(s.Arrays, "v")
	if err != nil {
		return err
	}
	o.v, o.step = slots["v"], step
	return nil
}

package optim

import (
	"fmt"
	"maps"
	"math"
	"slices"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Adam is mlx.optimizers.Adam, and with a weight decay mlx.optimizers.AdamW. For
// each parameter p with gradient g, at update t = 1, 2, … with rate lr = LR(t−1):
//
//	m ← β1·m + (1−β1)·g
//	v ← β2·v + (1−β2)·g²
//	p ← p·(1 − lr·λ)                                          (decoupled weight decay)
//	p ← p − lr·m / (√v + ε)                                   (BiasCorrection off)
//	p ← p − (lr/(1−β1ᵗ))·m / (√v/√(1−β2ᵗ) + ε)                (BiasCorrection on)
//
// ε is added outside the square root, as MLX's code (and PyTorch) does; MLX's
// docstring writes it inside. With BiasCorrection on, this is torch.optim.AdamW
// (and Adam with λ = 0) exactly, up to float32 rounding; MLX and mlx-lm leave it
// off by default, so the first updates of an uncorrected run are ≈ √(1−β2)/(1−β1)
// ≈ 0.32 times smaller. PyTorch's Adam (not AdamW) applies weight_decay as an L2
// term added to g instead; that variant is not offered, as in MLX.
//
// Moments are kept in each parameter's dtype, as MLX does.
type Adam struct {
	LR             Schedule // learning rate per step
	Beta1, Beta2   float64  // moment decay rates, in [0, 1)
	Eps            float64  // added to the denominator
	WeightDecay    float64  // λ, decoupled (AdamW); 0 gives Adam
	BiasCorrection bool     // divide the moments by 1−βᵗ

	step int
	m, v map[string]*mx.Array // by parameter name
}

// NewAdam returns mlx.optimizers.Adam's defaults: β = (0.9, 0.999), ε = 1e-8,
// no bias correction, no weight decay.
func NewAdam(lr Schedule) *Adam {
	return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
}

// NewAdamW returns mlx.optimizers.AdamW's defaults: Adam's, with weight decay 0.01.
// PyTorch's AdamW has the same numbers and BiasCorrection on.
func NewAdamW(lr Schedule) *Adam {
	o := NewAdam(lr)
	o.WeightDecay = 0.01
	return o
}

func (o *Adam) check() error {
	switch {
	case o.LR == nil:
		return fmt.Errorf("optim: adam: no learning rate schedule")
	case !(o.Beta1 >= 0 && o.Beta1 < 1) || !(o.Beta2 >= 0 && o.Beta2 < 1):
		return fmt.Errorf("optim: adam: betas (%g, %g) must lie in [0, 1)", o.Beta1, o.Beta2)
	case !(o.Eps >= 0):
		return fmt.Errorf("optim: adam: eps %g < 0", o.Eps)
	case !(o.WeightDecay >= 0):
		return fmt.Errorf("optim: adam: weight decay %g < 0", o.WeightDecay)
	}
	return nil
}

// Step applies one update; see Optimizer.
func (o *Adam) Step(params, grads map[string]*mx.Array) (map[string]*mx.Array, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	names, err := matchParams(params, grads)
	if err != nil {
		return nil, err
	}
	lr := float64(o.LR.LR(o.step))
	t := float64(o.step + 1)
	b1, b2 := o.Beta1, o.Beta2
	out := make(map[string]*mx.Array, len(names))
	newM, newV := maps.Clone(o.m), maps.Clone(o.v)
	if newM == nil {
		newM, newV = map[string]*mx.Array{}, map[string]*mx.Array{}
	}
	for _, n := range names {
		p := params[n]
		g := mx.AsType(grads[n], p.DType())
		// No moments yet (a first update): AdamUpdate takes nil as zeros. Step
		// and SetState keep both moments of a parameter or neither.
		m, err := stateOf(o.m, n, "m", p)
		if err != nil {
			return nil, err
		}
		v, err := stateOf(o.v, n, "v", p)
		if err != nil {
			return nil, err
		}
		c := mx.AdamCoeffs{B1: b1, C1: 1 - b1, B2: b2, C2: 1 - b2, Decay: 1, Num: lr, Div: 1, Eps: o.Eps}
		if o.WeightDecay != 0 {
			c.Decay = 1 - lr*o.WeightDecay
		}
		if o.BiasCorrection {
			c.Num, c.Div = lr/(1-math.Pow(b1, t)), math.Sqrt(1-math.Pow(b2, t))
		}
		out[n], m, v = mx.AdamUpdate(p, g, m, v, c)
		newM[n], newV[n] = m, v
	}
	if err := evalNamed(namedGroup{"update of", out}, namedGroup{"first moment of", newM}, namedGroup{"second moment of", newV}); err != nil {
		return nil, err
	}
	o.m, o.v = newM, newV
	o.step++
	return out, nil
}

// Steps is the number of updates applied.
func (o *Adam) Steps() int { return o.step }

// LearningRate is the rate the next Step uses.
func (o *Adam) LearningRate() float32 {
	if o.LR == nil {
		return 0
	}
	return o.LR.LR(o.step)
}

// State exports the moments as "<param>.m" and "<param>.v" and the step count.
func (o *Adam) State() State {
	return State{
		Arrays:  joinSlots(map[string]map[string]*mx.Array{"m": o.m, "v": o.v}),
		Scalars: map[string]float64{ScalarStep: float64(o.step)},
	}
}

// SetState replaces the moments and step count. Parameters without moments start
// from zeros at their next update, as in MLX.
func (o *Adam) SetState(s State) error {
	step, err := stepFromScalars(s.Scalars)
	if err != nil {
		return err
	}
	slots, err := splitSlots(s.Arrays, "m", "v")
	if err != nil {
		return err
	}
	m, v := slots["m"], slots["v"]
	for _, n := range slices.Concat(Names(m), Names(v)) {
		if m[n] == nil || v[n] == nil {
			return fmt.Errorf("optim: adam state: parameter %q has only one of its two moments", n)
		}
		if !slices.Equal(m[n].Shape(), v[n].Shape()) {
			return fmt.Errorf("optim: adam state: moments of %q have shapes %v and %v", n, m[n].Shape(), v[n].Shape())
		}
	}
	o.m, o.v, o.step = m, v, step
	return nil
}

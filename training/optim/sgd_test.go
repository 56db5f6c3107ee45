package optim

import (
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// SGD from w = 1 at lr 0.1 with the gradient 2 at every step.
func TestSGDHand(t *testing.T) {
	g := [][]float32{{2}, {2}, {2}}
	cases := []struct {
		name string
		o    *SGD
		want []float64
	}{
		// w ← w − 0.1·2: 0.8, 0.6, 0.4.
		{"plain", &SGD{LR: Constant(0.1)}, []float64{0.8, 0.6, 0.4}},
		// g ← 2 + 0.5·w: 2.5 → w = 0.75; 2.375 → 0.5125; 2.25625 → 0.286875.
		{"weight decay", &SGD{LR: Constant(0.1), WeightDecay: 0.5}, []float64{0.75, 0.5125, 0.286875}},
		// v = 2, 0.9·2+2 = 3.8, 0.9·3.8+2 = 5.42; w = 0.8, 0.42, −0.122.
		{"momentum", &SGD{LR: Constant(0.1), Momentum: 0.9}, []float64{0.8, 0.42, -0.122}},
		// v as above; the step is g + 0.9·v = 3.8, 5.42, 6.878; w = 0.62, 0.078, −0.6098.
		{"nesterov", &SGD{LR: Constant(0.1), Momentum: 0.9, Nesterov: true}, []float64{0.62, 0.078, -0.6098}},
		// MLX damps the first step too: v = 0.5·2 = 1, 0.9+1 = 1.9, 1.71+1 = 2.71;
		// w = 0.9, 0.71, 0.439. (PyTorch's first v would be 2, undamped.)
		{"dampening", &SGD{LR: Constant(0.1), Momentum: 0.9, Dampening: 0.5}, []float64{0.9, 0.71, 0.439}},
		// The schedule is read before each update: rates 0, 0.05, 0.1.
		{"schedule", &SGD{LR: Linear(0, 0.1, 2)}, []float64{1, 0.9, 0.7}},
	}
	for _, c := range cases {
		got := steps(t, c.o, []float32{1}, g)
		for i, w := range c.want {
			near(t, c.name, got[i], []float64{w}, 1e-6)
		}
	}
}

func TestSGDStateResume(t *testing.T) {
	mk := func() *SGD { return &SGD{LR: Constant(0.1), Momentum: 0.9, Nesterov: true} }
	a := mk()
	p := map[string]*mx.Array{"w": vec(1, 2)}
	g := map[string]*mx.Array{"w": vec(2, -1)}
	p1, _ := a.Step(p, g)
	b := mk()
	if err := b.SetState(a.State()); err != nil {
		t.Fatal(err)
	}
	pa, _ := a.Step(p1, g)
	pb, err := b.Step(p1, g)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "resumed", values(t, pb["w"]), []float64{float64(values(t, pa["w"])[0]), float64(values(t, pa["w"])[1])}, 0)
	if b.Steps() != 2 {
		t.Errorf("Steps() = %d, want 2", b.Steps())
	}
	if err := mk().SetState(State{Scalars: map[string]float64{"step": 1}, Arrays: map[string]*mx.Array{"w.m": vec(0)}}); err == nil {
		t.Error("an Adam moment was accepted as SGD state")
	}
	if _, err := (&SGD{LR: Constant(1), Nesterov: true}).Step(p, g); err == nil {
		t.Error("Nesterov without momentum accepted")
	}
}

package optim

import (
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// AdamW drives Σ (x − c)² to its minimum.
func TestAdamWMinimizesQuadratic(t *testing.T) {
	c := mx.FromFloat32([]float32{1.5, -2, 0.25, 4}, 4)
	f := func(p []*mx.Array) []*mx.Array { return []*mx.Array{mx.Sum(mx.Square(mx.Sub(p[0], c)), nil, false)} }
	o := NewAdamW(WarmupCosine(0.1, 10, 300, 0))
	o.WeightDecay = 0
	params := map[string]*mx.Array{"x": mx.Zeros(4)}
	var loss float32
	for range 320 {
		outs, gs, err := mx.ValueAndGrad(f, []*mx.Array{params["x"]})
		if err != nil {
			t.Fatal(err)
		}
		loss = mustItem(t, outs[0])
		if params, err = o.Step(params, map[string]*mx.Array{"x": gs[0]}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loss %g, x %v", loss, values(t, params["x"]))
	if loss > 1e-6 {
		t.Errorf("loss after 320 steps: %g", loss)
	}
	near(t, "x", values(t, params["x"]), []float64{1.5, -2, 0.25, 4}, 1e-3)
}

// A full training loop at its default settings (AdamW with bias correction and
// weight decay 0.01, warmup + cosine, clipping at norm 1) fits a noiseless linear
// regression.
func TestAdamWFitsLinearRegression(t *testing.T) {
	const n, d = 64, 4
	wTrue := []float32{1, -2, 0.5, 3}
	x := mx.FromFloat32(randn(21, n*d), n, d)
	y := mx.AddScalar(mx.Matmul(x, mx.FromFloat32(wTrue, d, 1)), 0.7)
	params := map[string]*mx.Array{"w": mx.Zeros(d, 1), "b": mx.Zeros(1)}
	o := NewAdamW(WarmupCosine(0.05, 20, 580, 0))
	o.BiasCorrection = true
	var first, loss float32
	for step := range 600 {
		l, g := linearGrads(t, params, [2]*mx.Array{x, y})
		if ok, err := AllFinite(append([]*mx.Array{mx.Scalar(l)}, g["w"], g["b"])...); err != nil || !ok {
			t.Fatalf("step %d: non-finite loss or gradient (%v)", step, err)
		}
		if step == 0 {
			first = l
		}
		loss = l
		g, _ = ClipGlobalNorm(g, 1)
		var err error
		if params, err = o.Step(params, g); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loss %g → %g, w %v, b %v", first, loss, values(t, params["w"]), values(t, params["b"]))
	if loss > 1e-4*first {
		t.Errorf("loss %g after 600 steps, from %g", loss, first)
	}
	near(t, "w", values(t, params["w"]), []float64{1, -2, 0.5, 3}, 2e-2)
	if b := values(t, params["b"])[0]; math.Abs(float64(b)-0.7) > 2e-2 {
		t.Errorf("b = %g, want 0.7", b)
	}
}

package optim

import (
	"math"
	"strings"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Three Adam steps with MLX's defaults (no bias correction), lr 0.1, β = (0.9,
// 0.999), ε = 1e-8, from w = (1, −2) with gradients (2, ½), (−1, ½), (½, ½).
//
//	t=1  m = 0.1·2 = 0.2              v = 0.001·4 = 0.004
//	     w0 = 1 − 0.1·0.2/√0.004 = 1 − 0.02/0.0632456 = 0.6837723
//	     m = 0.05, v = 0.00025:  w1 = −2 − 0.005/0.0158114 = −2.3162278
//	t=2  m = 0.9·0.2 − 0.1 = 0.08     v = 0.999·0.004 + 0.001 = 0.004996
//	     w0 = 0.6837723 − 0.008/0.0706824 = 0.5705899
//	     m = 0.095, v = 0.00049975:  w1 = −2.3162278 − 0.0095/0.0223551 = −2.7411865
//	t=3  m = 0.072 + 0.05 = 0.122     v = 0.00499100 + 0.00025 = 0.005241004
//	     w0 = 0.5705899 − 0.0122/0.0723948 = 0.4020695
//	     m = 0.1355, v = 0.00074925:  w1 = −2.7411865 − 0.01355/0.0273724 = −3.2362099
func TestAdamHand(t *testing.T) {
	got := steps(t, NewAdam(Constant(0.1)), []float32{1, -2}, [][]float32{{2, 0.5}, {-1, 0.5}, {0.5, 0.5}})
	want := [][]float64{{0.683772284, -2.31622757}, {0.570589933, -2.74118654}, {0.402069516, -3.2362099}}
	for i := range want {
		near(t, "step", got[i], want[i], 2e-6)
	}
}

// The same gradients through PyTorch-style AdamW: bias correction on, λ = 0.1.
// The second coordinate sees a constant gradient, so m̂ = ½ and v̂ = ¼ exactly
// and each update is w·(1 − 0.01) − 0.1.
//
//	t=1  decay: w = (0.99, −1.98); m̂ = g, v̂ = g² so the step is lr·sign(g) = 0.1
//	     w = (0.89, −2.08)
//	t=2  decay: w0 = 0.8811; m̂ = 0.08/0.19 = 0.4210526, v̂ = 0.004996/0.001999 = 2.4992496
//	     w0 = 0.8811 − 0.1·0.4210526/1.5809015 = 0.8544663;   w1 = −2.08·0.99 − 0.1 = −2.1592
//	t=3  decay: w0 = 0.8459216; m̂ = 0.122/0.271 = 0.4501845, v̂ = 0.005241004/0.002997001 = 1.7487498
//	     w0 = 0.8459216 − 0.1·0.4501845/1.3224031 = 0.8118787; w1 = −2.1592·0.99 − 0.1 = −2.237608
func TestAdamWBiasCorrectedHand(t *testing.T) {
	o := NewAdamW(Constant(0.1))
	o.WeightDecay, o.BiasCorrection = 0.1, true
	got := steps(t, o, []float32{1, -2}, [][]float32{{2, 0.5}, {-1, 0.5}, {0.5, 0.5}})
	want := [][]float64{{0.89, -2.08}, {0.854466297, -2.1592}, {0.811878719, -2.23760799}}
	for i := range want {
		near(t, "step", got[i], want[i], 2e-6)
	}
}

// With a zero gradient the moments stay 0, the Adam step is 0/(0+ε) = 0, and only
// the decoupled decay acts: w ← w·(1 − lr·λ) = w·(1 − 0.1·0.01) = 0.999·w.
func TestAdamWDecayOnly(t *testing.T) {
	got := steps(t, NewAdamW(Constant(0.1)), []float32{1, -4}, [][]float32{{0, 0}, {0, 0}})
	near(t, "step 1", got[0], []float64{0.999, -3.996}, 1e-6)
	near(t, "step 2", got[1], []float64{0.998001, -3.992004}, 1e-6)
}

// pytorchAdamW is torch.optim.AdamW's update (amsgrad off, maximize off) in
// float64, written from PyTorch's algorithm as documented:
//
//	θ ← θ − γλθ;  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²
//	m̂ = m/(1−β1ᵗ); v̂ = v/(1−β2ᵗ);  θ ← θ − γ m̂/(√v̂ + ε)
//
// biasCorrection false gives MLX's default AdamW for comparison.
func pytorchAdamW(theta []float64, grads [][]float64, lrs []float64, b1, b2, eps, wd float64, biasCorrection bool) []float64 {
	theta = append([]float64(nil), theta...)
	m := make([]float64, len(theta))
	v := make([]float64, len(theta))
	for t := 1; t <= len(grads); t++ {
		g, lr := grads[t-1], lrs[t-1]
		c1, c2 := 1.0, 1.0
		if biasCorrection {
			c1, c2 = 1-math.Pow(b1, float64(t)), 1-math.Pow(b2, float64(t))
		}
		for i := range theta {
			theta[i] -= lr * wd * theta[i]
			m[i] = b1*m[i] + (1-b1)*g[i]
			v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
			theta[i] -= lr * (m[i] / c1) / (math.Sqrt(v[i]/c2) + eps)
		}
	}
	return theta
}

// Ten AdamW steps on random data under a warmup + cosine schedule against the
// float64 reference: the float32 run must agree to float32 rounding.
func TestAdamWGoldenPyTorch(t *testing.T) {
	const n, nsteps = 64, 10
	sched := WarmupCosine(1e-2, 3, 7, 1e-3)
	for _, bc := range []bool{true, false} {
		o := NewAdamW(sched)
		o.BiasCorrection = bc
		p0 := randn(1, n)
		params := map[string]*mx.Array{"model.layers.0.lora_a": mx.FromFloat32(p0, 8, 8)}
		theta := make([]float64, n)
		for i, x := range p0 {
			theta[i] = float64(x)
		}
		var grads [][]float64
		var lrs []float64
		for s := range nsteps {
			g32 := randn(uint64(100+s), n)
			for i := range g32 {
				g32[i] *= float32(1 + s) // growing gradients exercise the moments
			}
			g := make([]float64, n)
			for i, x := range g32 {
				g[i] = float64(x)
			}
			grads, lrs = append(grads, g), append(lrs, float64(sched.LR(s)))
			if got, want := o.LearningRate(), sched.LR(s); got != want {
				t.Fatalf("step %d: LearningRate %g, want %g", s, got, want)
			}
			var err error
			params, err = o.Step(params, map[string]*mx.Array{"model.layers.0.lora_a": mx.FromFloat32(g32, 8, 8)})
			if err != nil {
				t.Fatal(err)
			}
		}
		want := pytorchAdamW(theta, grads, lrs, 0.9, 0.999, 1e-8, 0.01, bc)
		near(t, "after 10 steps", values(t, params["model.layers.0.lora_a"]), want, 1e-6)
		if o.Steps() != nsteps {
			t.Errorf("Steps() = %d, want %d", o.Steps(), nsteps)
		}
	}
}

// Exporting the state after 3 steps and importing it into a fresh optimizer must
// continue exactly as the uninterrupted run does: the resume path.
func TestAdamStateResume(t *testing.T) {
	mk := func() *Adam { o := NewAdamW(WarmupCosine(1e-2, 2, 4, 0)); o.BiasCorrection = true; return o }
	gradsAt := func(s int) map[string]*mx.Array {
		return map[string]*mx.Array{"a": mx.FromFloat32(randn(uint64(s), 6), 2, 3), "b": vec(randn(uint64(50+s), 4)...)}
	}
	p0 := map[string]*mx.Array{"a": mx.FromFloat32(randn(7, 6), 2, 3), "b": vec(randn(8, 4)...)}
	run := func(o Optimizer, p map[string]*mx.Array, from, to int) map[string]*mx.Array {
		for s := from; s < to; s++ {
			var err error
			if p, err = o.Step(p, gradsAt(s)); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	whole := run(mk(), p0, 0, 6)

	first := mk()
	mid := run(first, p0, 0, 3)
	st := first.State()
	if len(st.Arrays) != 4 || st.Scalars[ScalarStep] != 3 {
		t.Fatalf("state: %d arrays, step %v; want a.m a.v b.m b.v and step 3", len(st.Arrays), st.Scalars[ScalarStep])
	}
	for _, k := range []string{"a.m", "a.v", "b.m", "b.v"} {
		if st.Arrays[k] == nil {
			t.Fatalf("state lacks %q", k)
		}
	}
	second := mk()
	if err := second.SetState(st); err != nil {
		t.Fatal(err)
	}
	resumed := run(second, mid, 3, 6)
	for _, k := range []string{"a", "b"} {
		got, want := values(t, resumed[k]), values(t, whole[k])
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d]: resumed %v, uninterrupted %v", k, i, got[i], want[i])
			}
		}
	}
}

func TestAdamErrors(t *testing.T) {
	o := NewAdamW(Constant(0.1))
	p := map[string]*mx.Array{"w": vec(1, 2)}
	cases := []struct {
		name  string
		grads map[string]*mx.Array
		want  string
	}{
		{"missing", map[string]*mx.Array{}, `no gradient for parameter "w"`},
		{"extra", map[string]*mx.Array{"w": vec(1, 1), "x": vec(1)}, `gradient "x" has no parameter`},
		{"shape", map[string]*mx.Array{"w": vec(1, 1, 1)}, "has shape [3]"},
		{"int", map[string]*mx.Array{"w": mx.FromInt32([]int32{1, 2}, 2)}, "want float"},
	}
	for _, c := range cases {
		if _, err := o.Step(p, c.grads); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if o.Steps() != 0 {
		t.Errorf("failed steps advanced the count to %d", o.Steps())
	}
	bad := []State{
		{Scalars: map[string]float64{}},
		{Scalars: map[string]float64{"step": 1.5}},
		{Scalars: map[string]float64{"step": 1, "lr": 2}},
		{Scalars: map[string]float64{"step": 1}, Arrays: map[string]*mx.Array{"w.m": vec(0, 0)}},
		{Scalars: map[string]float64{"step": 1}, Arrays: map[string]*mx.Array{"w.m": vec(0, 0), "w.v": vec(0)}},
		{Scalars: map[string]float64{"step": 1}, Arrays: map[string]*mx.Array{"w.momentum": vec(0, 0)}},
	}
	for i, s := range bad {
		if err := NewAdam(Constant(1)).SetState(s); err == nil {
			t.Errorf("bad state %d accepted", i)
		}
	}
	// A state whose moments do not fit the parameter fails at the step, by name.
	o = NewAdam(Constant(1))
	if err := o.SetState(State{Scalars: map[string]float64{"step": 2}, Arrays: map[string]*mx.Array{"w.m": vec(0, 0, 0), "w.v": vec(0, 0, 0)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Step(p, map[string]*mx.Array{"w": vec(1, 1)}); err == nil || !strings.Contains(err.Error(), "w.m") {
		t.Errorf("got %v, want a shape error naming w.m", err)
	}
	o = NewAdam(Constant(1))
	o.Beta1 = 1
	if _, err := o.Step(p, map[string]*mx.Array{"w": vec(1, 1)}); err == nil {
		t.Error("β1 = 1 accepted")
	}
}

// Parameters stored in bfloat16 keep their dtype and so do their moments.
func TestAdamKeepsDType(t *testing.T) {
	b := mx.Default()
	p := map[string]*mx.Array{"w": mx.FromData(b, mx.BFloat16, []float32{1, 2}, 2)}
	g := map[string]*mx.Array{"w": mx.FromData(b, mx.BFloat16, []float32{0.5, -0.5}, 2)}
	o := NewAdamW(Constant(0.01))
	out, err := o.Step(p, g)
	if err != nil {
		t.Fatal(err)
	}
	if out["w"].DType() != mx.BFloat16 || o.State().Arrays["w.m"].DType() != mx.BFloat16 {
		t.Errorf("got param %s, moment %s; want bfloat16", out["w"].DType(), o.State().Arrays["w.m"].DType())
	}
}

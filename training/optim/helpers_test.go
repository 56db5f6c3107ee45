package optim

import (
	"math"
	"math/rand/v2"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
)

func vec(v ...float32) *mx.Array { return mx.FromFloat32(v, len(v)) }

func values(t *testing.T, a *mx.Array) []float32 {
	t.Helper()
	v, err := a.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// near fails unless got and want agree within tol, relative to max(1, |want|).
func near(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); !(d <= tol*math.Max(1, math.Abs(want[i]))) {
			t.Errorf("%s[%d]: got %.9g, want %.9g", what, i, got[i], want[i])
		}
	}
}

func randn(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 11))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// steps runs o over a sequence of gradients for one parameter "w" and returns
// the parameter after each update.
func steps(t *testing.T, o Optimizer, p0 []float32, grads [][]float32) [][]float32 {
	t.Helper()
	params := map[string]*mx.Array{"w": vec(p0...)}
	var out [][]float32
	for _, g := range grads {
		next, err := o.Step(params, map[string]*mx.Array{"w": vec(g...)})
		if err != nil {
			t.Fatal(err)
		}
		params = next
		out = append(out, values(t, params["w"]))
	}
	return out
}

package mlxbridge_test

import (
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
	_ "github.com/inloop/inloop/mlxbridge/cpu"
)

// TestCompiledRunsF checks Compiled where the backend does not compile (cpu):
// every call is f's, and a gradient flows through it as through f.
func TestCompiledRunsF(t *testing.T) {
	b, err := mx.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	f := func(in []*mx.Array) []*mx.Array {
		calls++
		return []*mx.Array{mx.Mul(mx.Silu(in[0]), in[1])}
	}
	c := mx.Compile(b, 1, f)
	if c.Compiles() {
		t.Fatal("the cpu backend compiled")
	}
	x := mx.FromData(b, mx.Float32, []float32{-2, -0.5, 0, 1.5}, 4)
	y := mx.FromData(b, mx.Float32, []float32{3, 1, -1, 0.25}, 4)
	got, err := c.Call(x, y)[0].Float32s()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := f([]*mx.Array{x, y})[0].Float32s()
	if !slices.Equal(got, want) || calls != 2 {
		t.Fatalf("Call: %v, want %v (f ran %d times, want 2)", got, want, calls)
	}
	grad := func(g func(in []*mx.Array) []*mx.Array) []float32 {
		_, gs, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
			return []*mx.Array{mx.Sum(g([]*mx.Array{p[0], y})[0], nil, false)}
		}, []*mx.Array{x})
		if err != nil {
			t.Fatal(err)
		}
		v, err := gs[0].Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if g, w := grad(func(in []*mx.Array) []*mx.Array { return c.Call(in...) }), grad(f); !slices.Equal(g, w) {
		t.Fatalf("gradient through Compiled %v, through f %v", g, w)
	}
	if e := c.Call(nil, y)[0].Err(); e == nil {
		t.Fatal("a nil input gave no error")
	}
}

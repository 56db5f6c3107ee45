package optim

import (
	"math"
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

func TestClipGlobalNorm(t *testing.T) {
	// ‖(3, 4) ∪ (12)‖ = √(9+16+144) = 13.
	grads := map[string]*mx.Array{"a": vec(3, 4), "b": vec(12)}
	cases := []struct {
		max  float32
		want map[string][]float64
	}{
		{20, map[string][]float64{"a": {3, 4}, "b": {12}}},   // below: unchanged
		{13.5, map[string][]float64{"a": {3, 4}, "b": {12}}}, // just below
		// above: scaled by 1.3/(13+1e-6), the norm becomes 1.3
		{1.3, map[string][]float64{"a": {0.3, 0.4}, "b": {1.2}}},
		{0, map[string][]float64{"a": {3, 4}, "b": {12}}}, // off
	}
	for _, c := range cases {
		out, norm := ClipGlobalNorm(grads, c.max)
		n, err := norm.Item()
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(float64(n)-13) > 1e-5 {
			t.Errorf("max %g: norm %g, want 13", c.max, n)
		}
		for k, want := range c.want {
			near(t, k, values(t, out[k]), want, 1e-6)
		}
	}
	// At exactly the threshold MLX clips (the test is norm < max), by 13/(13+1e-6).
	out, _ := ClipGlobalNorm(grads, 13)
	if got := values(t, out["b"])[0]; got >= 12 || got < 12-1e-5 {
		t.Errorf("at the threshold: b = %.9g, want just under 12", got)
	}
	if _, norm := ClipGlobalNorm(map[string]*mx.Array{}, 1); mustItem(t, norm) != 0 {
		t.Error("empty gradients: nonzero norm")
	}
}

// ClipGlobalNormRead decides on the host what ClipGlobalNorm decides with
// array ops: the same gradients, bit for bit, on both sides of the threshold,
// in float32 and bfloat16, and the same norm.
func TestClipGlobalNormRead(t *testing.T) {
	for _, dt := range []mx.DType{mx.Float32, mx.BFloat16} {
		grads := map[string]*mx.Array{
			"a": mx.FromData(mx.Default(), dt, []float32{3, 4.1}, 2),
			"b": mx.FromData(mx.Default(), dt, []float32{-12.3}, 1),
		}
		for _, maxNorm := range []float32{100, 13.6, 13, 1.3, 0} {
			want, wantNorm := ClipGlobalNorm(grads, maxNorm)
			got, norm, err := ClipGlobalNormRead(grads, maxNorm)
			if err != nil {
				t.Fatal(err)
			}
			if norm != mustItem(t, wantNorm) {
				t.Errorf("%s max %g: norm %v, want %v", dt, maxNorm, norm, mustItem(t, wantNorm))
			}
			for _, k := range []string{"a", "b"} {
				if !slices.Equal(values(t, got[k]), values(t, want[k])) || got[k].DType() != dt {
					t.Errorf("%s max %g: %s = %v %s, want %v", dt, maxNorm, k, values(t, got[k]), got[k].DType(), values(t, want[k]))
				}
			}
		}
	}
	if _, _, err := ClipGlobalNormRead(map[string]*mx.Array{"a": vec(1), "b": mx.Errorf("boom")}, 1); err == nil {
		t.Error("an error gradient passed")
	}
}

// plain hides the backend's fused ops, so GlobalNorm sums float32 squares.
type plain struct{ mx.Backend }

// Squares that overflow float32 make a composed global norm infinite; AllFinite
// then looks again element by element and finds the values finite.
func TestAllFiniteWhenSquaresOverflow(t *testing.T) {
	x := mx.FromData(plain{mx.Default()}, mx.Float32, []float32{3e38, -3e38}, 2)
	if n := mustItem(t, mx.GlobalNorm(x.Backend(), x)); !math.IsInf(float64(n), 1) {
		t.Fatalf("composed norm of 3e38 = %v, want +Inf (the case under test)", n)
	}
	ok, err := AllFinite(x)
	if err != nil || !ok {
		t.Errorf("AllFinite(3e38, -3e38) = %v, %v; want true", ok, err)
	}
	ok, err = AllFinite(mx.FromData(x.Backend(), mx.Float32, []float32{3e38, float32(math.NaN())}, 2))
	if err != nil || ok {
		t.Errorf("AllFinite(3e38, NaN) = %v, %v; want false", ok, err)
	}
}

func mustItem(t *testing.T, a *mx.Array) float32 {
	t.Helper()
	v, err := a.Item()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// linearLoss is the mean squared error of x@w + b against y, for params [w, b].
func linearLoss(x, y *mx.Array) func([]*mx.Array) []*mx.Array {
	return func(p []*mx.Array) []*mx.Array {
		d := mx.Sub(mx.Add(mx.Matmul(x, p[0]), p[1]), y)
		return []*mx.Array{mx.Mean(mx.Square(d), nil, false)}
	}
}

func linearGrads(t *testing.T, params map[string]*mx.Array, xy [2]*mx.Array) (float32, map[string]*mx.Array) {
	t.Helper()
	x, y := xy[0], xy[1]
	names, ps := Flatten(params) // b, w
	f := linearLoss(x, y)
	outs, gs, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array { return f([]*mx.Array{p[1], p[0]}) }, ps)
	if err != nil {
		t.Fatal(err)
	}
	return mustItem(t, outs[0]), Unflatten(names, gs)
}

// Accumulating micro-batch gradients gives the full batch's gradient: equal
// micro-batches with Add, unequal ones weighted by their sizes.
func TestAccumulateMatchesFullBatch(t *testing.T) {
	const n, d = 8, 3
	xs, ys := randn(1, n*d), randn(2, n)
	params := map[string]*mx.Array{"w": mx.FromFloat32(randn(3, d), d, 1), "b": mx.FromFloat32([]float32{0.3}, 1)}
	rows := func(lo, hi int) [2]*mx.Array {
		return [2]*mx.Array{mx.FromFloat32(xs[lo*d:hi*d], hi-lo, d), mx.FromFloat32(ys[lo:hi], hi-lo, 1)}
	}
	_, full := linearGrads(t, params, rows(0, n))

	var acc Accumulator
	for i := 0; i < n; i += 2 {
		_, g := linearGrads(t, params, rows(i, i+2))
		if err := acc.Add(g); err != nil {
			t.Fatal(err)
		}
	}
	if acc.Count() != 4 {
		t.Fatalf("Count() = %d, want 4", acc.Count())
	}
	check := func(what string, got map[string]*mx.Array) {
		for _, k := range []string{"w", "b"} {
			want := values(t, full[k])
			w64 := make([]float64, len(want))
			for i, v := range want {
				w64[i] = float64(v)
			}
			near(t, what+" "+k, values(t, got[k]), w64, 1e-6)
		}
	}
	mean, err := acc.Mean()
	if err != nil {
		t.Fatal(err)
	}
	check("equal micro-batches", mean)

	acc.Reset()
	for _, r := range [][2]int{{0, 3}, {3, 8}} {
		_, g := linearGrads(t, params, rows(r[0], r[1]))
		if err := acc.AddWeighted(g, float32(r[1]-r[0])); err != nil {
			t.Fatal(err)
		}
	}
	mean, err = acc.Mean()
	if err != nil {
		t.Fatal(err)
	}
	check("weighted micro-batches", mean)

	if err := acc.Add(map[string]*mx.Array{"w": vec(1)}); err == nil {
		t.Error("a micro-batch with other names was accepted")
	}
	acc.Reset()
	if _, err := acc.Mean(); err == nil {
		t.Error("mean of nothing")
	}
}

func TestAllFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		name string
		xs   []*mx.Array
		want bool
	}{
		{"finite", []*mx.Array{mx.Scalar(2.5), vec(1, -3e38, 0)}, true},
		{"none", nil, true},
		{"nan loss", []*mx.Array{mx.Scalar(nan), vec(1)}, false},
		{"+inf grad", []*mx.Array{mx.Scalar(1), vec(1, inf)}, false},
		{"-inf grad", []*mx.Array{vec(-inf, 0)}, false},
		{"ints", []*mx.Array{mx.FromInt32([]int32{1 << 30}, 1)}, true},
		{"bf16 nan", []*mx.Array{mx.FromData(mx.Default(), mx.BFloat16, []float32{1, nan}, 2)}, false},
	}
	for _, c := range cases {
		got, err := AllFinite(c.xs...)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: AllFinite = %v, want %v", c.name, got, c.want)
		}
	}
	bad, err := NonFinite(map[string]*mx.Array{"a": vec(1), "b": vec(nan), "c": vec(0, -inf)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bad, []string{"b", "c"}) {
		t.Errorf("NonFinite = %v, want [b c]", bad)
	}
	if _, err := AllFinite(mx.Errorf("boom")); err == nil {
		t.Error("an error array passed")
	}
}

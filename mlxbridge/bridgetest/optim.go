package bridgetest

import (
	"fmt"
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// composed hides a backend's optional abilities: arrays made on it take the
// ops composed from the required ones.
type composed struct{ mx.Backend }

// optimizer checks AdamUpdate and GlobalNorm against float64 references, and
// where the backend fuses them, against the composed ops bit for bit, in every
// float dtype: a fused step must not change a training run's numbers.
func (s *suite) optimizer(t *testing.T) {
	const n = 5000 // above the cpu backend's grain, so its kernels split
	p, g, m := randn(1, n), randn(2, n), randn(3, n)
	v := randn(4, n)
	for i := range v {
		v[i] *= v[i]
		g[i] *= 0.1
	}
	g[7], v[7] = 0, 0 // √v = 0: the denominator is Eps alone
	coeffs := []mx.AdamCoeffs{
		{B1: 0.9, C1: 0.1, B2: 0.999, C2: 0.001, Decay: 1, Num: 1e-3, Div: 1, Eps: 1e-8},
		{B1: 0.8, C1: 0.2, B2: 0.99, C2: 0.01, Decay: 1 - 1e-3*0.01, Num: 1e-3 / (1 - 0.8*0.8), Div: math.Sqrt(1 - 0.99*0.99), Eps: 1e-6},
	}
	for k, c := range coeffs {
		t.Run(fmt.Sprintf("adam/%d", k), func(t *testing.T) {
			p2, m2, v2 := mx.AdamUpdate(s.arr(p, n), s.arr(g, n), s.arr(m, n), s.arr(v, n), c)
			wp, wm, wv := make([]float64, n), make([]float64, n), make([]float64, n)
			for i := range n {
				gi := float64(g[i])
				wm[i] = c.B1*float64(m[i]) + c.C1*gi
				wv[i] = c.B2*float64(v[i]) + c.C2*gi*gi
				wp[i] = c.Decay*float64(p[i]) - c.Num*wm[i]/(math.Sqrt(wv[i])/c.Div+c.Eps)
			}
			expect(t, "m", m2, []int{n}, wm, 1e-6, 1e-5)
			expect(t, "v", v2, []int{n}, wv, 1e-7, 1e-5)
			expect(t, "p", p2, []int{n}, wp, 1e-6, 1e-5)
		})
	}
	for _, x := range [][]float32{{3, 4}, randn(5, 70000)} {
		var want float64
		for _, e := range x {
			want += float64(e) * float64(e)
		}
		want = math.Sqrt(want)
		expect(t, fmt.Sprintf("global norm of %d", len(x)), mx.GlobalNorm(s.b, s.arr(x, len(x))), []int{}, []float64{want}, 0, 1e-5)
	}
	expect(t, "global norm of three", mx.GlobalNorm(s.b, s.arr([]float32{1, 2}, 2), s.arr([]float32{2}, 1, 1), s.arr(make([]float32, 0), 0)), []int{}, []float64{3}, 0, 1e-6)
	expect(t, "global norm of none", mx.GlobalNorm(s.b), []int{}, []float64{0}, 0, 0)
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		got := get(t, mx.GlobalNorm(s.b, s.arr([]float32{1}, 1), s.arr([]float32{2, bad}, 2)))[0]
		if !math.IsNaN(got) && !math.IsInf(got, 1) {
			t.Errorf("global norm with %v = %v, want NaN or +Inf", bad, got)
		}
	}
	if e := mx.GlobalNorm(s.b, s.ints([]int32{1}, 1)); e.Err() == nil {
		t.Error("global norm of an int array gave no error")
	}
	if _, _, e := mx.AdamUpdate(s.arr(p[:4], 4), s.arr(g[:3], 3), s.arr(m[:4], 4), s.arr(v[:4], 4), coeffs[0]); e.Err() == nil {
		t.Error("adam update with a gradient of another shape gave no error")
	}
	if _, _, e := mx.AdamUpdate(s.arr(p[:4], 4), s.arr(g[:4], 4), s.arr(m[:4], 4), nil, coeffs[0]); e.Err() == nil {
		t.Error("adam update with one moment nil gave no error")
	}
	// Nil moments are zeros, bit for bit, in every float dtype (and so, below,
	// on the composed path too).
	for _, dt := range []mx.DType{mx.Float32, mx.Float16, mx.BFloat16} {
		on := func(x []float32) *mx.Array { return mx.FromData(s.b, dt, x, len(x)) }
		for k, c := range coeffs {
			p2, m2, v2 := mx.AdamUpdate(on(p), on(g), nil, nil, c)
			z := make([]float32, n)
			w2, wm2, wv2 := mx.AdamUpdate(on(p), on(g), on(z), on(z), c)
			same(t, fmt.Sprintf("adam %d %s nil moments p", k, dt), p2, w2)
			same(t, fmt.Sprintf("adam %d %s nil moments m", k, dt), m2, wm2)
			same(t, fmt.Sprintf("adam %d %s nil moments v", k, dt), v2, wv2)
		}
	}

	_, adam := s.b.(mx.AdamUpdater)
	_, norm := s.b.(mx.GlobalNormer)
	if !adam && !norm {
		return // both ops are the composed ones already
	}
	plain := composed{s.b}
	for _, dt := range []mx.DType{mx.Float32, mx.Float16, mx.BFloat16} {
		on := func(b mx.Backend, x []float32) *mx.Array { return mx.FromData(b, dt, x, len(x)) }
		if adam {
			for k, c := range coeffs {
				f := func(b mx.Backend) [6]*mx.Array {
					p2, m2, v2 := mx.AdamUpdate(on(b, p), on(b, g), on(b, m), on(b, v), c)
					q2, qm2, qv2 := mx.AdamUpdate(on(b, p), on(b, g), nil, nil, c)
					return [6]*mx.Array{p2, m2, v2, q2, qm2, qv2}
				}
				fused, want := f(s.b), f(plain)
				for j, name := range []string{"p", "m", "v", "p from zeros", "m from zeros", "v from zeros"} {
					same(t, fmt.Sprintf("adam %d %s %s", k, dt, name), fused[j], want[j])
				}
			}
		}
		if norm && dt == mx.Float32 {
			// Fused, the squares are summed in float64: as the composed ops,
			// up to float32 rounding; and past float32's range where they
			// overflow.
			x := randn(6, 70000)
			expect(t, "global norm fused vs composed", mx.GlobalNorm(s.b, on(s.b, x)), []int{}, get(t, mx.GlobalNorm(plain, on(plain, x))), 0, 1e-5)
			big := get(t, mx.GlobalNorm(s.b, on(s.b, []float32{3e20, 4e20})))[0]
			if math.Abs(big-5e20) > 5e20*1e-6 {
				t.Errorf("fused global norm of (3e20, 4e20) = %v, want 5e20", big)
			}
		}
	}
}

// same fails unless a and b hold the same float32 values bit for bit (NaNs
// alike).
func same(t *testing.T, name string, a, b *mx.Array) {
	t.Helper()
	x, err := a.Float32s()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	y, err := b.Float32s()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(x) != len(y) {
		t.Fatalf("%s: %d values, want %d", name, len(x), len(y))
	}
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) && !(x[i] != x[i] && y[i] != y[i]) {
			t.Errorf("%s: at %d fused %v, composed %v", name, i, x[i], y[i])
			return
		}
	}
}

package bridgetest

import (
	"fmt"
	"math"
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// compact checks that a Compact array is its source in every op a model puts its
// weights through: the same values, products equal within float32 rounding (the 16-bit
// kernels add in another order), exact gathers, elementwise ops and gradients through
// the product. On a backend without Compact it checks that Compact returns its input.
func (s *suite) compact(t *testing.T) {
	for _, dt := range []mx.DType{mx.BFloat16, mx.Float16} {
		for _, shape := range [][2]int{{5, 8}, {33, 37}, {64, 100}} {
			N, K := shape[0], shape[1]
			t.Run(fmt.Sprintf("%s/%dx%d", dt, N, K), func(t *testing.T) {
				w := mx.AsType(mx.MulScalar(s.randn(11, N, K), 0.3), dt)
				c := mx.Compact(w)
				if _, ok := s.b.(mx.Compacter); !ok && c != w {
					t.Fatal("Compact on a backend without it did not return its input")
				}
				if c.DType() != dt || !slices.Equal(c.Shape(), w.Shape()) {
					t.Fatalf("Compact gave %s %v, want %s %v", c.DType(), c.Shape(), dt, w.Shape())
				}
				same(t, "values", c, w)
				near := func(name string, got, want *mx.Array) {
					t.Helper()
					if i, ok := closeTo(get(t, got), get(t, want), 1e-5, 1e-5); !ok {
						t.Errorf("%s: differs at %d: %v against %v", name, i, get(t, got)[i], get(t, want)[i])
					}
				}
				for _, m := range []int{1, 3, 40} {
					x := s.randn(uint64(m), m, K)
					near(fmt.Sprintf("x·wᵀ, %d rows", m), mx.MatmulT(x, c, false, true), mx.MatmulT(x, w, false, true))
					g := s.randn(uint64(m)+1, m, N)
					near(fmt.Sprintf("g·w, %d rows", m), mx.Matmul(g, c), mx.Matmul(g, w))
				}
				x3 := s.randn(5, 2, 3, K)
				near("batched x·wᵀ", mx.MatmulT(x3, c, false, true), mx.MatmulT(x3, w, false, true))
				near("w·xᵀ (compact first)", mx.MatmulT(c, x3, false, true), mx.MatmulT(w, x3, false, true))
				near("reshaped", mx.MatmulT(x3, mx.Reshape(c, 1, N, K), false, true), mx.MatmulT(x3, mx.Reshape(w, 1, N, K), false, true))
				ids := s.ints([]int32{int32(N - 1), 0, 2, 0}, 2, 2)
				same(t, "take rows", mx.Take(c, ids, 0), mx.Take(w, ids, 0))
				same(t, "take columns", mx.Take(c, ids, 1), mx.Take(w, ids, 1))
				same(t, "add", mx.AddScalar(c, 1), mx.AddScalar(w, 1))
				same(t, "transpose", mx.Transpose(c, 1, 0), mx.Transpose(w, 1, 0))
				same(t, "astype", mx.AsType(c, mx.Float32), mx.AsType(w, mx.Float32))
				same(t, "compact again", mx.Compact(c), w)
				grad := func(w *mx.Array) *mx.Array {
					x := s.randn(9, 3, K)
					_, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array {
						return []*mx.Array{mx.Sum(mx.Square(mx.MatmulT(p[0], w, false, true)), nil, false)}
					}, []*mx.Array{x})
					if err != nil {
						t.Fatal(err)
					}
					return g[0]
				}
				near("gradient through x·wᵀ", grad(c), grad(w))
			})
		}
	}
}

// matmulBF16: prefill's product on bfloat16 activations. Where the backend multiplies a
// compact bfloat16 w in bfloat16 pairs (HasBF16Rows), each result of many rows is within
// x's rounding of the exact product (2⁻⁹ of each |w·x|), two rows alone give their results
// bit for bit, and one row, a traced x, a bfloat16 x and a float32 w are MatmulT exactly;
// elsewhere every case is MatmulT exactly. An outlier channel is in x, as in real
// activations.
func (s *suite) matmulBF16(t *testing.T) {
	const N, K = 37, 130
	w := mx.AsType(mx.MulScalar(s.randn(21, N, K), 0.1), mx.BFloat16)
	c := mx.Compact(w)
	xv := randn(22, 5*K)
	for r := range 5 {
		xv[r*K+17] = 40
	}
	x := s.arr(xv, 5, K)
	exact := get(t, mx.MatmulT(x, c, false, true))
	got := mx.MatmulTBF16(x, c)
	if !mx.TakesBF16Rows(c) {
		expect(t, "matmul_bf16 where the backend has no kernel", got, []int{5, N}, exact, 0, 0)
	} else {
		g, wv := get(t, got), get(t, c)
		for r := range 5 {
			for n := range N {
				var mag float64
				for k := range K {
					mag += math.Abs(wv[n*K+k] * float64(xv[r*K+k]))
				}
				if d := math.Abs(g[r*N+n] - exact[r*N+n]); d > 0x1p-9*mag+1e-5*mag {
					t.Fatalf("matmul_bf16: out[%d][%d] = %g, exact %g: off by %g, past x's rounding %g", r, n, g[r*N+n], exact[r*N+n], d, 0x1p-9*mag)
				}
			}
		}
		expect(t, "matmul_bf16 of two of the five rows", mx.MatmulTBF16(mx.SliceAxis(x, 0, 1, 3), c), []int{2, N}, g[N:3*N], 0, 0)
		if mx.TakesBF16Rows(w) && w != c {
			t.Error("TakesBF16Rows holds for a bfloat16 matrix that is not compact")
		}
		if !mx.HasBF16Rows(c.Backend()) {
			t.Error("TakesBF16Rows holds on a backend whose HasBF16Rows does not")
		}
	}
	x1 := mx.SliceAxis(x, 0, 2, 3)
	expect(t, "matmul_bf16 of one row", mx.MatmulTBF16(x1, c), []int{1, N}, get(t, mx.MatmulT(x1, c, false, true)), 0, 0)
	wf := mx.AsType(c, mx.Float32)
	expect(t, "matmul_bf16 of a float32 w", mx.MatmulTBF16(x, wf), []int{5, N}, get(t, mx.MatmulT(x, wf, false, true)), 0, 0)
	bx := mx.AsType(x, mx.BFloat16)
	if b := mx.MatmulTBF16(bx, c); b.DType() != mx.MatmulT(bx, c, false, true).DType() || b.Err() != nil {
		t.Errorf("matmul_bf16 of a bfloat16 x gave %s (%v)", b.DType(), b.Err())
	}
	if bad := mx.MatmulTBF16(s.randn(3, 4, K+1), c); bad.Err() == nil {
		t.Errorf("x of %d values against w of %d gave %s", K+1, K, bad)
	}
	grad := func(f func(x *mx.Array) *mx.Array) []float64 {
		_, g, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array { return []*mx.Array{mx.Sum(mx.Square(f(p[0])), nil, false)} }, []*mx.Array{x})
		if err != nil {
			t.Fatal(err)
		}
		return get(t, g[0])
	}
	want := grad(func(x *mx.Array) *mx.Array { return mx.MatmulT(x, c, false, true) })
	gg := grad(func(x *mx.Array) *mx.Array { return mx.MatmulTBF16(x, c) })
	for i := range want {
		if gg[i] != want[i] {
			t.Fatalf("matmul_bf16 gradient [%d] = %g, MatmulT's %g", i, gg[i], want[i])
		}
	}
}

package bridgetest

import (
	"fmt"
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

package bridgetest

import (
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// sorting checks Sort and CumSum where the backend has them (they are what a
// decoder samples with on the device): values along either axis, NaNs last,
// half precision, and a traced sort refused by the frontend's autodiff.
func (s *suite) sorting(t *testing.T) {
	_, sorts := s.b.(mx.Sorter)
	_, sums := s.b.(mx.CumSummer)
	x := s.arr([]float32{3, -1, 2, 0, 5, 4}, 2, 3)
	if sorts {
		expect(t, "sort last", mx.Sort(x, -1), []int{2, 3}, []float64{-1, 2, 3, 0, 4, 5}, 0, 0)
		expect(t, "sort axis 0", mx.Sort(x, 0), []int{2, 3}, []float64{0, -1, 2, 3, 5, 4}, 0, 0)
		nan := get(t, mx.Sort(s.arr([]float32{2, float32(math.NaN()), -3, 1}, 4), 0))
		if nan[0] != -3 || nan[1] != 1 || nan[2] != 2 || !math.IsNaN(nan[3]) {
			t.Errorf("sort with a NaN = %v, want [-3 1 2 NaN]", nan)
		}
		big := randn(9, 5000)
		got := get(t, mx.Sort(s.arr(big, 5000), -1))
		for i := 1; i < len(got); i++ {
			if got[i] < got[i-1] {
				t.Fatalf("sort of 5000: out of order at %d", i)
			}
		}
		expect(t, "sort bf16", mx.AsType(mx.Sort(mx.AsType(x, mx.BFloat16), -1), mx.Float32), []int{2, 3}, []float64{-1, 2, 3, 0, 4, 5}, 0, 0)
		_, _, err := mx.ValueAndGrad(func(p []*mx.Array) []*mx.Array { return []*mx.Array{mx.Sum(mx.Sort(p[0], -1), nil, false)} }, []*mx.Array{x})
		if _, own := s.b.(mx.Grader); err == nil && !own { // MLX differentiates its sort
			t.Error("a traced sort gave no error")
		}
	} else if mx.Sort(x, -1).Err() == nil {
		t.Error("sort on a backend without Sorter gave no error")
	}
	if sums {
		expect(t, "cumsum", mx.CumSum(x, -1, false), []int{2, 3}, []float64{3, 2, 4, 0, 5, 9}, 0, 0)
		expect(t, "cumsum reverse", mx.CumSum(x, -1, true), []int{2, 3}, []float64{4, 1, 2, 9, 9, 4}, 0, 0)
		expect(t, "cumsum axis 0", mx.CumSum(x, 0, false), []int{2, 3}, []float64{3, -1, 2, 3, 4, 6}, 0, 0)
		ones := make([]float32, 70000)
		for i := range ones {
			ones[i] = 1
		}
		last := get(t, mx.CumSum(s.arr(ones, 70000), 0, false))[69999]
		if last != 70000 {
			t.Errorf("cumsum of 70000 ones ends at %v", last)
		}
	} else if mx.CumSum(x, -1, false).Err() == nil {
		t.Error("cumsum on a backend without CumSummer gave no error")
	}
}

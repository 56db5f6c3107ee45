package mlxbridge

import (
	"fmt"
	"strconv"
	"strings"
)

// maxElements caps any array this package creates (2^40 elements), so that a hostile
// shape read from a file fails with an error instead of an impossible allocation.
const maxElements = 1 << 40

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func checkShape(shape []int) error {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("negative dimension in shape %s", fmtShape(shape))
		}
		if d != 0 && n > maxElements/d {
			return fmt.Errorf("shape %s has too many elements", fmtShape(shape))
		}
		n *= d
	}
	return nil
}

func fmtShape(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return "(" + strings.Join(parts, ",") + ")"
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func clone(s []int) []int { return append([]int(nil), s...) }

// broadcastShapes applies NumPy's rule: align trailing axes; sizes must match or be 1.
func broadcastShapes(a, b []int) ([]int, error) {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		default:
			return nil, fmt.Errorf("shapes %s and %s do not broadcast", fmtShape(a), fmtShape(b))
		}
	}
	return out, nil
}

// normAxis maps a possibly negative axis into [0, ndim).
func normAxis(axis, ndim int) (int, error) {
	if axis < -ndim || axis >= ndim {
		return 0, fmt.Errorf("axis %d out of range for %d dimensions", axis, ndim)
	}
	if axis < 0 {
		axis += ndim
	}
	return axis, nil
}

// normAxes normalizes, sorts and de-duplicates-checks a set of axes; nil means all.
func normAxes(axes []int, ndim int) ([]int, error) {
	if axes == nil {
		all := make([]int, ndim)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	seen := make([]bool, ndim)
	out := make([]int, 0, len(axes))
	for _, a := range axes {
		n, err := normAxis(a, ndim)
		if err != nil {
			return nil, err
		}
		if seen[n] {
			return nil, fmt.Errorf("axis %d repeated", a)
		}
		seen[n] = true
		out = append(out, n)
	}
	for i := 1; i < len(out); i++ { // insertion sort: tiny
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// keepShape is shape with the reduced axes set to 1.
func keepShape(shape, axes []int) []int {
	out := clone(shape)
	for _, a := range axes {
		out[a] = 1
	}
	return out
}

// dropShape is shape with the reduced axes removed.
func dropShape(shape, axes []int) []int {
	out := make([]int, 0, len(shape))
	j := 0
	for i, d := range shape {
		if j < len(axes) && axes[j] == i {
			j++
			continue
		}
		out = append(out, d)
	}
	return out
}

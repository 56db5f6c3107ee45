package bridgetest

import (
	"slices"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// readInto checks Array.Float32sInto against Float32s: the same values into no
// buffer, a short one and a long one (whose storage a FloatReader backend reuses),
// a bfloat16 array widened the same way, and the same errors for an integer array
// and a nil one.
func (s *suite) readInto(t *testing.T) {
	x := mx.Add(s.arr([]float32{1, 2, 3, 4, 5}, 5), s.arr([]float32{0.5}, 1))
	for _, a := range []*mx.Array{x, mx.AsType(mx.Mul(x, s.arr([]float32{1.001}, 1)), mx.BFloat16)} {
		want, err := a.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for _, dst := range [][]float32{nil, make([]float32, 2), make([]float32, 9)} {
			got, err := a.Float32sInto(dst)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s into %d: %v, want %v", a.DType(), cap(dst), got, want)
			}
			if _, reads := s.b.(mx.FloatReader); reads && cap(dst) >= len(want) && &got[0] != &dst[0] {
				t.Errorf("%s into %d: a new slice, want dst's storage", a.DType(), cap(dst))
			}
		}
	}
	ints := mx.FromData(s.b, mx.Int32, []int32{1, 2}, 2)
	if _, err := ints.Float32sInto(make([]float32, 4)); err == nil {
		t.Error("Float32sInto of an Int32 array: no error")
	}
	if _, err := (*mx.Array)(nil).Float32sInto(nil); err == nil {
		t.Error("Float32sInto of a nil array: no error")
	}
}

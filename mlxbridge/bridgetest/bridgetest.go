// Package bridgetest is the conformance suite every mlxbridge backend must pass:
// each op against hand-computed values or a float64 reference written here, each
// differentiable op's gradient against central finite differences, and shape errors
// reported as errors. A backend's tests call Run; the cpu backend runs it in CI and
// the mlx backend wherever libmlxc loads, so both give the same numbers.
package bridgetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
)

// Run runs the whole suite on b. It makes b the default backend while it runs.
func Run(t *testing.T, b mx.Backend) {
	mx.SetDefault(b)
	s := &suite{b: b}
	t.Run("Values", s.values)
	t.Run("ReadInto", s.readInto)
	t.Run("Reference", s.reference)
	t.Run("LowRank", s.lowRank)
	t.Run("Concatenate", s.concatenate)
	t.Run("Gradients", s.gradients)
	t.Run("CrossEntropyFused", s.crossEntropyFused)
	t.Run("Checkpoints", s.checkpoints)
	t.Run("Run", s.run)
	t.Run("Errors", s.errors)
	t.Run("DTypes", s.dtypes)
	t.Run("Quantized", s.quantized)
	t.Run("QuantizedBatched", s.quantizedBatched)
	t.Run("QuantizedA8", s.quantizedA8)
	t.Run("QuantizedMany", s.quantizedMany)
	t.Run("Optimizer", s.optimizer)
	t.Run("Sorting", s.sorting)
	t.Run("Compact", s.compact)
	t.Run("MatmulBF16", s.matmulBF16)
	t.Run("XOR", s.xor)
}

type suite struct{ b mx.Backend }

// arr makes a float32 array on the suite's backend.
func (s *suite) arr(data []float32, shape ...int) *mx.Array {
	return mx.FromData(s.b, mx.Float32, data, shape...)
}

func (s *suite) ints(data []int32, shape ...int) *mx.Array {
	return mx.FromData(s.b, mx.Int32, data, shape...)
}

// randn returns deterministic normal values.
func randn(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func (s *suite) randn(seed uint64, shape ...int) *mx.Array {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return s.arr(randn(seed, n), shape...)
}

// get reads an array as float64s, failing the test on error.
func get(t *testing.T, a *mx.Array) []float64 {
	t.Helper()
	v, err := a.Float32s()
	if err != nil {
		t.Fatalf("readback: %v", err)
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// close reports whether got matches want within atol + rtol·|want| everywhere.
func closeTo(got, want []float64, atol, rtol float64) (int, bool) {
	if len(got) != len(want) {
		return -1, false
	}
	for i := range got {
		if math.IsNaN(want[i]) != math.IsNaN(got[i]) || math.Abs(got[i]-want[i]) > atol+rtol*math.Abs(want[i]) {
			if !(math.IsInf(want[i], 0) && got[i] == want[i]) {
				return i, false
			}
		}
	}
	return 0, true
}

func expect(t *testing.T, name string, a *mx.Array, shape []int, want []float64, atol, rtol float64) {
	t.Helper()
	if err := a.Err(); err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	if fmt.Sprint(a.Shape()) != fmt.Sprint(shape) {
		t.Errorf("%s: shape got %v, want %v", name, a.Shape(), shape)
		return
	}
	got := get(t, a)
	if i, ok := closeTo(got, want, atol, rtol); !ok {
		if i < 0 {
			t.Errorf("%s: got %d values, want %d", name, len(got), len(want))
			return
		}
		t.Errorf("%s: at %d got %.7g, want %.7g (all: got %v want %v)", name, i, got[i], want[i], trim(got), trim(want))
	}
}

func trim(v []float64) []float64 {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

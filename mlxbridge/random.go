package mlxbridge

import (
	"math"
	"math/rand/v2"
)

// Random arrays are drawn in Go from a PCG stream keyed by seed, so the same seed
// gives the same numbers on every backend and machine: a LoRA initialized on a
// Mac matches one initialized in CI.

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// RandomNormal draws from N(0, 1) in float32 on the default backend.
func RandomNormal(seed uint64, shape ...int) *Array {
	if err := checkShape(shape); err != nil {
		return Errorf("random normal: %v", err)
	}
	r := rng(seed)
	d := make([]float32, numel(shape))
	for i := range d {
		d[i] = float32(r.NormFloat64())
	}
	return FromFloat32(d, shape...)
}

// RandomUniform draws from [lo, hi) in float32 on the default backend.
func RandomUniform(seed uint64, lo, hi float32, shape ...int) *Array {
	if err := checkShape(shape); err != nil {
		return Errorf("random uniform: %v", err)
	}
	if !(hi >= lo) || math.IsInf(float64(hi-lo), 0) {
		return Errorf("random uniform: bad range [%g, %g)", lo, hi)
	}
	r := rng(seed)
	d := make([]float32, numel(shape))
	for i := range d {
		d[i] = lo + (hi-lo)*float32(r.Float64())
		if d[i] >= hi && hi > lo { // float32 rounding can land on hi
			d[i] = math.Nextafter32(hi, lo)
		}
	}
	return FromFloat32(d, shape...)
}

// RandomBernoulli is 1 with probability p, else 0 (a dropout keep-mask), in float32.
func RandomBernoulli(seed uint64, p float32, shape ...int) *Array {
	if err := checkShape(shape); err != nil {
		return Errorf("random bernoulli: %v", err)
	}
	if p < 0 || p > 1 {
		return Errorf("random bernoulli: p = %g", p)
	}
	r := rng(seed)
	d := make([]float32, numel(shape))
	for i := range d {
		if r.Float64() < float64(p) {
			d[i] = 1
		}
	}
	return FromFloat32(d, shape...)
}

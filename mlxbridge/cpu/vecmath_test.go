package cpu

import (
	"math"
	"testing"
)

func TestVecExp(t *testing.T) {
	var x []float32
	for v := float32(-87); v < 88; v += 0.00173 {
		x = append(x, v)
	}
	y := make([]float32, len(x))
	expVec(y, x)
	worst := 0.0
	for i, v := range x {
		want := math.Exp(float64(v))
		if want < 0x1p-126 {
			continue // float32 subnormals carry fewer digits
		}
		worst = math.Max(worst, math.Abs(float64(y[i])-want)/want)
	}
	if worst > 2.5e-7 {
		t.Errorf("exp: worst relative error %.3g, want ≤ 2.5e-7 (2 ulp)", worst)
	}
	edge := []float32{float32(math.Inf(-1)), -1000, 0, 1000, float32(math.Inf(1)), float32(math.NaN())}
	out := make([]float32, len(edge))
	expVec(out, edge)
	for i, want := range []float32{0, 0, 1, float32(math.Inf(1)), float32(math.Inf(1))} {
		if out[i] != want {
			t.Errorf("exp(%v) = %v, want %v", edge[i], out[i], want)
		}
	}
	if out[5] == out[5] {
		t.Errorf("exp(NaN) = %v, want NaN", out[5])
	}
}

func TestVecSoftmaxRows(t *testing.T) {
	inf := float32(math.Inf(-1))
	x := []float32{1, 2, 3, inf, 0, 0, 0, 0, 1000, 1000, inf, inf}
	out := make([]float32, len(x))
	softmaxRows(out, x, 4)
	e := math.Exp
	z := e(1) + e(2) + e(3)
	want := []float64{e(1) / z, e(2) / z, e(3) / z, 0, .25, .25, .25, .25, .5, .5, 0, 0}
	for i := range want {
		if math.Abs(float64(out[i])-want[i]) > 1e-7 {
			t.Errorf("softmax[%d] = %v, want %v", i, out[i], want[i])
		}
	}
	lse := make([]float32, 3)
	logSumExpRows(lse, x, 4)
	for i, w := range []float64{math.Log(z), math.Log(4), 1000 + math.Ln2} {
		if math.Abs(float64(lse[i])-w) > 1e-5*math.Max(1, math.Abs(w)) {
			t.Errorf("logsumexp row %d = %v, want %v", i, lse[i], w)
		}
	}
	// A row longer than one 1024-block sums in double: 3000 equal entries.
	long := make([]float32, 3000)
	logSumExpRows(lse[:1], long, 3000)
	if math.Abs(float64(lse[0])-math.Log(3000)) > 1e-6 {
		t.Errorf("logsumexp of 3000 zeros = %v, want ln 3000 = %v", lse[0], math.Log(3000))
	}
}

func TestVecSiluGrad(t *testing.T) {
	var x []float32
	for v := float32(-90); v < 90; v += 0.00731 {
		x = append(x, v)
	}
	x = append(x, -1000, 1000)
	y := make([]float32, len(x))
	siluGradVec(y, x)
	worst := 0.0
	for i, v := range x {
		s := 1 / (1 + math.Exp(-float64(v)))
		want := s * (1 + float64(v)*(1-s)) // in [-0.1, 1.1]
		worst = math.Max(worst, math.Abs(float64(y[i])-want))
	}
	if worst > 2e-7 {
		t.Errorf("silu': worst error %.3g, want ≤ 2e-7", worst)
	}
}

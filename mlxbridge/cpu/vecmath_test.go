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

// Every vector form of inloop_adam gives the numbers of the float32 ops one at
// a time (each product rounded, no fused multiply-add), bit for bit, with
// moments and without (zeros), over lengths that leave vector tails.
func TestAdamForms(t *testing.T) {
	defer limitAdam(-1)
	k := adamK{b1: 0.9, c1: 0.1, b2: 0.999, c2: 0.001, decay: 1 - 1e-5, num: 1e-3 / (1 - 0.9), div: 0.0447, eps: 1e-8}
	for _, n := range []int{1, 15, 16, 37, 1000} {
		p, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range n {
			p[i], g[i], m[i] = float32(math.Sin(float64(i)+1)), float32(math.Cos(float64(3*i)))*0.01, float32(math.Sin(float64(7*i)))*0.001
			v[i] = m[i] * m[i]
		}
		for _, moments := range []bool{true, false} {
			wp, wm, wv := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range n {
				var m0, v0 float32
				if moments {
					m0, v0 = m[i], v[i]
				}
				mi := float32(m0*k.b1) + float32(g[i]*k.c1)
				vi := float32(v0*k.b2) + float32(float32(g[i]*g[i])*k.c2)
				den := float32(float32(math.Sqrt(float64(vi)))/k.div) + k.eps
				wp[i], wm[i], wv[i] = float32(p[i]*k.decay)-float32(float32(mi*k.num)/den), mi, vi
			}
			for level := 2; level >= 0; level-- {
				limitAdam(level)
				po, mo, vo := make([]float32, n), make([]float32, n), make([]float32, n)
				if moments {
					adamVec(po, mo, vo, p, g, m, v, &k)
				} else {
					adamVec(po, mo, vo, p, g, nil, nil, &k)
				}
				for i := range n {
					if po[i] != wp[i] || mo[i] != wm[i] || vo[i] != wv[i] {
						t.Fatalf("level %d, n %d, moments %v, [%d]: p %v m %v v %v, want %v %v %v", level, n, moments, i, po[i], mo[i], vo[i], wp[i], wm[i], wv[i])
					}
				}
			}
		}
	}
}

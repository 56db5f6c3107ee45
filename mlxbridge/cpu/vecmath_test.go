package cpu

import (
	"math"
	"testing"

	mx "github.com/inloop/inloop/mlxbridge"
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

// TestAttendSplitMatchesWhole runs decode steps with each group's positions cut into
// pieces (2 to 5, whatever the cores here) against the same steps over whole groups:
// float32, bfloat16 and quantized first parts, cuts inside parts and on their edges,
// a piece past the end, and a NaN key (it must reach every output of its group).
func TestAttendSplitMatchesWhole(t *testing.T) {
	be := New()
	defer func() { forceSplits = 0 }()
	q := randArray(be, 1, 1, 6, 1, 64)
	k0, v0 := randArray(be, 2, 1, 3, 600, 64), randArray(be, 3, 1, 3, 600, 64)
	k1, v1 := randArray(be, 4, 1, 3, 300, 64), randArray(be, 5, 1, 3, 300, 64)
	k2, v2 := randArray(be, 6, 1, 3, 7, 64), randArray(be, 7, 1, 3, 7, 64)
	kw, ksc, kb := mx.Quantize(k0, 64, 4)
	vw, vsc, vb := mx.Quantize(v0, 64, 4)
	kq, vq := mx.QuantizedKV{W: kw, Scales: ksc, Biases: kb}, mx.QuantizedKV{W: vw, Scales: vsc, Biases: vb}
	nanKey := mx.Full(be, []int{1, 1, 1, 64}, float32(math.NaN()), mx.Float32)
	kn := mx.Concatenate([]*mx.Array{mx.SliceAxis(k2, 1, 0, 1), nanKey}, 2) // the NaN in the first group only
	kn = mx.Concatenate([]*mx.Array{kn, mx.SliceAxis(mx.Concatenate([]*mx.Array{k2, mx.SliceAxis(k2, 2, 0, 1)}, 2), 1, 1, 3)}, 1)
	vn := mx.Concatenate([]*mx.Array{v2, mx.SliceAxis(v2, 2, 0, 1)}, 2)
	h0, hv0 := mx.Compact(mx.AsType(k0, mx.BFloat16)), mx.Compact(mx.AsType(v0, mx.BFloat16))
	for _, c := range []struct {
		name string
		f    func() *mx.Array
	}{
		{"float32", func() *mx.Array { return mx.AttendParts(q, []*mx.Array{k0, k1, k2}, []*mx.Array{v0, v1, v2}, 0.125) }},
		{"bfloat16", func() *mx.Array { return mx.AttendParts(q, []*mx.Array{h0, k1}, []*mx.Array{hv0, v1}, 0.125) }},
		{"quantized", func() *mx.Array {
			return mx.AttendQuantized(q, kq, vq, 64, 4, []*mx.Array{k1, k2}, []*mx.Array{v1, v2}, 0.125)
		}},
		{"nan key", func() *mx.Array { return mx.AttendParts(q, []*mx.Array{k1, kn}, []*mx.Array{v1, vn}, 0.125) }},
	} {
		forceSplits = 0
		whole, err := c.f().Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for parts := 2; parts <= 5; parts++ {
			forceSplits = parts
			got, err := c.f().Float32s()
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range whole {
				if c.name == "nan key" && i < 2*64 { // the first group's two heads
					if !math.IsNaN(float64(got[i])) || !math.IsNaN(float64(w)) {
						t.Fatalf("%s, %d pieces: output %d is %v (whole: %v), want NaN", c.name, parts, i, got[i], w)
					}
					continue
				}
				if d := math.Abs(float64(got[i] - w)); d > 1e-5*(1+math.Abs(float64(w))) || math.IsNaN(float64(got[i])) {
					t.Fatalf("%s, %d pieces: output %d is %v, whole groups give %v", c.name, parts, i, got[i], w)
				}
			}
		}
	}
}

// TestRMSNormRows checks the C kernel against the definition in float64, at row
// lengths that leave every remainder of its eight partial sums, including rows
// shorter than eight; the result is x·r·w rounded twice, so each element is within
// two roundings of the exact value.
func TestRMSNormRows(t *testing.T) {
	for _, d := range []int{1, 3, 7, 8, 13, 64, 128, 1024, 1031} {
		const rows = 5
		x, w := make([]float32, rows*d), make([]float32, d)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)*0.37+float64(d))) * float32(1+i%5)
		}
		for i := range w {
			w[i] = float32(math.Cos(float64(i) * 0.11))
		}
		out := make([]float32, len(x))
		const eps = 1e-5
		rmsNormRows(out, x, w, d, eps)
		for r := range rows {
			var ss float64
			for _, v := range x[r*d : (r+1)*d] {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(d)+eps)
			for i := range d {
				want := float64(x[r*d+i]) * inv * float64(w[i])
				if got := float64(out[r*d+i]); math.Abs(got-want) > 2.5e-7*math.Abs(want)+1e-30 {
					t.Fatalf("d=%d row %d [%d]: %v, want %v", d, r, i, got, want)
				}
			}
		}
	}
}

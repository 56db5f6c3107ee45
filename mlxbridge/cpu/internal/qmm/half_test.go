package qmm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// halfRef widens one 16-bit value by the formats' definitions.
func halfRef(h uint16, f16 bool) float64 {
	if !f16 {
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, man := int(h>>10&0x1f), float64(h&0x3ff)
	switch exp {
	case 0x1f:
		if man != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	case 0:
		return sign * man * math.Pow(2, -24)
	}
	return sign * (1 + man/1024) * math.Pow(2, float64(exp-15))
}

// forEachLevel runs f at every kernel level this machine has, the portable one included.
func forEachLevel(t *testing.T, f func(t *testing.T)) {
	defer limitSIMD(-1)
	for level := simdLevel(); level >= 0; level-- {
		limitSIMD(level)
		t.Run(levelNames[level], f)
	}
}

func TestHalfWidenEveryValue(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	forEachLevel(t, func(t *testing.T) {
		for _, f16 := range []bool{false, true} {
			dst := make([]float32, len(src))
			HalfWiden(dst, src, f16)
			for i, h := range src {
				want, got := halfRef(h, f16), float64(dst[i])
				if math.IsNaN(want) != math.IsNaN(got) || !math.IsNaN(want) && (want != got || math.Signbit(want) != math.Signbit(got)) {
					t.Fatalf("f16=%v: %#04x widened to %v, want %v", f16, h, got, want)
				}
			}
		}
	})
}

// randomHalf returns n random finite 16-bit values in about ±scale.
func randomHalf(rng *rand.Rand, n int, f16 bool, scale float32) []uint16 {
	w := make([]uint16, n)
	for i := range w {
		v := float32(rng.NormFloat64()) * scale
		if f16 {
			w[i] = float16Bits(v)
		} else {
			w[i] = uint16(math.Float32bits(v) >> 16)
		}
	}
	return w
}

// float16Bits rounds v (well inside half's range) to the nearest half, ties to even.
func float16Bits(v float32) uint16 {
	u := math.Float32bits(v)
	sign := uint16(u>>16) & 0x8000
	a := math.Abs(float64(v))
	if a < math.Pow(2, -14) { // subnormal
		return sign | uint16(math.RoundToEven(a*math.Pow(2, 24)))
	}
	e := math.Floor(math.Log2(a))
	m := math.RoundToEven((a/math.Pow(2, e) - 1) * 1024)
	if m == 1024 {
		m, e = 0, e+1
	}
	return sign | uint16(int(e)+15)<<10 | uint16(m)
}

func TestHalfMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	forEachLevel(t, func(t *testing.T) {
		for _, f16 := range []bool{false, true} {
			for _, M := range []int{1, 2, 3, 4, 5, 7, 16, 17, 40, 64, 65, 128, 129} {
				for _, s := range [][2]int{{1, 1}, {3, 7}, {5, 8}, {33, 9}, {6, 64}, {19, 100}, {70, 35}, {1100, 40}, {700, 100}} {
					N, K := s[0], s[1]
					if M >= 64 && N*K < 2000 && N < 70 || M >= 64 && N == 1100 {
						continue // either side of the crossovers: a few shapes are enough
					}
					t.Run(fmt.Sprintf("f16=%v/M=%d/N=%d/K=%d", f16, M, N, K), func(t *testing.T) {
						w := randomHalf(rng, N*K, f16, 0.5)
						x := make([]float32, M*max(K, N))
						for i := range x {
							x[i] = float32(rng.NormFloat64())
						}
						// Each product against float64 sums of the widened values: out[i, j] =
						// Σ_e x[i·xs + e]·w(j, e), over e < inner.
						check := func(name string, out []float32, rows, cols, inner int, w func(j, e int) float64) {
							t.Helper()
							for i := range rows {
								for j := range cols {
									var want, mag float64
									for e := range inner {
										p := float64(x[i*inner+e]) * w(j, e)
										want, mag = want+p, mag+math.Abs(p)
									}
									if d := math.Abs(float64(out[i*cols+j]) - want); d > 1e-5*mag+1e-30 {
										t.Fatalf("%s [%d,%d] = %v, want %v", name, i, j, out[i*cols+j], want)
									}
								}
							}
						}
						out := make([]float32, M*N)
						HalfMatMulT(out, x, M, K, w, N, f16)
						check("x@Wᵀ", out, M, N, K, func(n, k int) float64 { return halfRef(w[n*K+k], f16) })
						out2 := make([]float32, M*K) // x (M, N) @ W
						HalfMatMul(out2, x, M, N, w, K, f16)
						check("x@W", out2, M, K, N, func(k, n int) float64 { return halfRef(w[n*K+k], f16) })
					})
				}
			}
		}
	})
}

func TestHalfShapesPanic(t *testing.T) {
	for name, f := range map[string]func(){
		"short W":   func() { HalfMatMulT(make([]float32, 4), make([]float32, 4), 1, 4, make([]uint16, 15), 4, false) },
		"short x":   func() { HalfMatMulT(make([]float32, 4), make([]float32, 3), 1, 4, make([]uint16, 16), 4, false) },
		"short out": func() { HalfMatMul(make([]float32, 3), make([]float32, 4), 1, 4, make([]uint16, 16), 4, true) },
		"widen":     func() { HalfWiden(make([]float32, 3), make([]uint16, 4), false) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

package qmm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// roundedX is qmm_prepare_x_i8's rounding of x, in Go: per lane of 32/bits values, the
// scale max|x|/127 and the values round(x*127/max) as int8, in float32 as the C code does.
func roundedX(x []float32, bits int) (xq []int8, scale []float32) {
	S := 32 / bits
	xq, scale = make([]int8, len(x)), make([]float32, len(x))
	for k0 := 0; k0 < len(x); k0 += S {
		var amax float32
		for k := k0; k < min(k0+S, len(x)); k++ {
			amax = max(amax, float32(math.Abs(float64(x[k]))))
		}
		var inv float32
		if amax > 0 {
			inv = 127 / amax
		}
		for k := k0; k < min(k0+S, len(x)); k++ {
			xq[k] = int8(max(-127, min(127, math.RoundToEven(float64(x[k]*inv)))))
			scale[k] = amax / 127
		}
	}
	return xq, scale
}

// unpacked is value k of row n of w.
func (w *qweights) q(n, k int) float64 {
	words := w.K * w.bits / 32
	bit := k * w.bits
	return float64(w.packed[n*words+bit/32] >> (bit % 32) & (1<<w.bits - 1))
}

// TestMatVecTInt8 checks the 8-bit-activation kernel two ways: against the same arithmetic
// in float64 (x rounded as the kernel rounds it, so any slip in the lane layout, the scales
// or the bias term shows at float32 precision), and against the exact product, within the
// bound the rounding of x allows (half a lane scale per value, times |scale*q|).
func TestMatVecTInt8(t *testing.T) {
	forEachInt8Form(t, testMatVecTInt8)
}

// forEachInt8Form runs fn with each form of the integer kernel this machine has: AVX-512 VNNI
// and AVX2.
func forEachInt8Form(t *testing.T, fn func(t *testing.T)) {
	defer limitSIMD(-1)
	ran := false
	for level := simdLevel(); level >= 1; level-- {
		limitSIMD(level)
		if level == 2 && !vnni() || !HasInt8(4) {
			continue
		}
		ran = true
		t.Run(map[int]string{1: "avx2", 2: "vnni"}[level], fn)
	}
	if !ran {
		t.Skip("no integer kernels on this CPU")
	}
}

func testMatVecTInt8(t *testing.T) {
	if simdLevel() == 1 && MatVecTInt8(make([]float32, 1), make([]float32, 64), 64, make([]uint32, 16), make([]float32, 1), make([]float32, 1), 1, 64, 8) {
		t.Error("8-bit weights took the integer kernel on AVX2, where it buys no time")
	}
	rng := rand.New(rand.NewPCG(3, 8))
	for _, bits := range []int{4, 8} {
		if !HasInt8(bits) {
			continue // 8 bits on AVX2
		}
		for _, group := range []int{32, 64, 128} {
			for _, shape := range [][2]int{{1, group}, {5, 128}, {4, 576}, {37, 1152}, {9, 1088}, {130, 384}} {
				N, K := shape[0], shape[1]
				if K%group != 0 {
					continue
				}
				name := fmt.Sprintf("bits=%d/group=%d/%dx%d", bits, group, N, K)
				w := randomWeights(rng, N, K, group, bits)
				x := randomFloats(rng, K)
				x[rng.IntN(K)] = 40 // an outlier channel, as real activations have
				out := make([]float32, N)
				if !MatVecTInt8(out, x, K, w.packed, w.scales, w.biases, N, group, bits) {
					t.Fatalf("%s: kernel did not run", name)
				}
				xq, xs := roundedX(x, bits)
				same, sameMag := make([]float64, N), make([]float64, N)
				for n := range N {
					var exact, bound, mag float64
					for k := range K {
						g := n*(K/group) + k/group
						sq := float64(w.scales[g]) * w.q(n, k)
						xr := float64(xs[k]) * float64(xq[k])
						same[n] += sq*xr + float64(w.biases[g])*float64(x[k])
						sameMag[n] += math.Abs(sq*xr) + math.Abs(float64(w.biases[g])*float64(x[k]))
						exact += w.deq[n*K+k] * float64(x[k])
						mag += math.Abs(w.deq[n*K+k] * float64(x[k]))
						bound += math.Abs(sq) * float64(xs[k]) / 2
					}
					if d := math.Abs(float64(out[n]) - exact); d > bound*(1+1e-6)+1e-5*mag {
						t.Fatalf("%s: out[%d] = %g, exact %g: |diff| %g past the rounding bound %g", name, n, out[n], exact, d, bound)
					}
				}
				checkClose(t, name, out, same, sameMag)
			}
		}
	}
}

// TestMatVecTInt8Edges: a zero x (every lane scale 0) gives exactly the zero product, and a
// NaN or infinity in x is not rounded away: every output is NaN or infinite, as in the exact
// product.
func TestMatVecTInt8Edges(t *testing.T) { forEachInt8Form(t, testMatVecTInt8Edges) }

func testMatVecTInt8Edges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, bits := range []int{4, 8} {
		if !HasInt8(bits) {
			continue
		}
		w := randomWeights(rng, 8, 256, 64, bits)
		out := randomFloats(rng, 8)
		MatVecTInt8(out, make([]float32, 256), 256, w.packed, w.scales, w.biases, 8, 64, bits)
		for n, v := range out {
			if v != 0 {
				t.Fatalf("%d-bit: out[%d] = %g for x = 0", bits, n, v)
			}
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			x := randomFloats(rng, 256)
			x[77] = bad
			MatVecTInt8(out, x, 256, w.packed, w.scales, w.biases, 8, 64, bits)
			for n, v := range out {
				if !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) {
					t.Fatalf("%d-bit: out[%d] = %g with x[77] = %g", bits, n, v, bad)
				}
			}
		}
	}
}

// BenchmarkMatVecInt8 is decoding's product with W streamed from memory, the float kernel
// (MatMulT, one row) against the 8-bit-activation one, on large and on small models' shapes,
// at each SIMD level this machine has (AVX2 is what every x86-64 user is expected to have).
func BenchmarkMatVecInt8(b *testing.B) {
	bw := twoThreadBandwidth()
	defer limitSIMD(-1)
	for _, bits := range []int{4, 8} {
		for _, shape := range [][2]int{{4096, 4096}, {576, 576}, {1536, 576}, {576, 1536}, {1024, 1024}, {3072, 1024}} {
			N, K := shape[0], shape[1]
			w := newBenchWeights(N, K, 64, bits)
			x, out := make([]float32, K), make([]float32, N)
			for i := range x {
				x[i] = float32(i%7) - 3
			}
			limitSIMD(-1)
			for level := simdLevel(); level >= 1; level-- {
				for _, kind := range []string{"float", "int8"} {
					b.Run(fmt.Sprintf("bits=%d/%dx%d/%s/%s", bits, N, K, levelNames[level], kind), func(b *testing.B) {
						limitSIMD(level)
						if kind == "int8" && !HasInt8(bits) {
							b.Skip("no integer kernel for these weights at this level")
						}
						b.SetBytes(w.bytes())
						i := 0
						for b.Loop() {
							p, s, bi := w.copy(i)
							if kind == "int8" {
								MatVecTInt8(out, x, K, p, s, bi, N, 64, bits)
							} else {
								MatMulT(out, x, 1, K, p, s, bi, N, 64, bits)
							}
							i++
						}
						gbs := float64(b.N) * float64(w.bytes()) / b.Elapsed().Seconds() / 1e9
						b.ReportMetric(gbs, "GB/s")
						b.ReportMetric(100*gbs/bw, "%bw2")
					})
				}
			}
		}
	}
}

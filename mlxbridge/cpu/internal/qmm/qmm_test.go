package qmm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/inloop/inloop/mlxbridge/quant"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// qweights is a random quantized W (N, K) and its dequantized values, the reference.
type qweights struct {
	N, K, group, bits int
	packed            []uint32
	scales, biases    []float32
	deq               []float64 // (N, K)
}

// randomWeights draws random q, scales and biases. The reference is quant.Dequantize, except
// for 7 bits, which MLX does not quantize with; there it is scale*q + bias in float64.
func randomWeights(rng *rand.Rand, N, K, group, bits int) *qweights {
	w := &qweights{N: N, K: K, group: group, bits: bits}
	G := K / group
	w.scales = make([]float32, N*G)
	w.biases = make([]float32, N*G)
	for i := range w.scales {
		w.scales[i] = float32(rng.NormFloat64() * 0.02)
		w.biases[i] = float32(rng.NormFloat64() * 0.1)
	}
	q := make([]uint8, N*K)
	for i := range q {
		q[i] = uint8(rng.IntN(1 << bits))
	}
	for n := range N {
		w.packed = append(w.packed, quant.Pack(q[n*K:(n+1)*K], bits)...)
	}
	w.deq = make([]float64, N*K)
	if quant.Validate(bits, group) != nil {
		for i := range q {
			g := i / group
			w.deq[i] = float64(w.scales[g])*float64(q[i]) + float64(w.biases[g])
		}
		return w
	}
	d, err := quant.Dequantize(w.packed, w.scales, w.biases, N, K, group, bits)
	if err != nil {
		panic(err)
	}
	for i, v := range d {
		w.deq[i] = float64(v)
	}
	return w
}

// reference is x @ W^T in float64 for M rows of x, and each output's magnitude sum_k |x·w|.
func (w *qweights) reference(x []float32, M int) (want, mag []float64) {
	N, K := w.N, w.K
	want, mag = make([]float64, M*N), make([]float64, M*N)
	for m := range M {
		for n := range N {
			for k := range K {
				p := float64(x[m*K+k]) * w.deq[n*K+k]
				want[m*N+n] += p
				mag[m*N+n] += math.Abs(p)
			}
		}
	}
	return want, mag
}

func randomFloats(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// checkClose compares got with want[i] = sum_j a_j*b_j, whose float64 magnitude sum_j
// |a_j*b_j| is mag[i]: a float32 product may be off by a few roundings of that magnitude,
// so the tolerance is relative 1e-5 to it.
func checkClose(t *testing.T, name string, got []float32, want, mag []float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > 1e-5*mag[i]+1e-30 || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: out[%d] = %g, want %g (|diff| %g, magnitude %g)", name, i, got[i], want[i], d, mag[i])
		}
	}
}

// forEachPath runs fn once per kernel level this machine has: AVX-512, AVX2, portable.
func forEachPath(t *testing.T, fn func(t *testing.T)) {
	top := simdLevel()
	defer limitSIMD(-1)
	for level := top; level >= 0; level-- {
		limitSIMD(level)
		t.Run(levelNames[level], fn)
	}
}

func TestMatMulT(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(2, 2))
		for bits := 2; bits <= 8; bits++ {
			for _, group := range []int{32, 64, 128} {
				for _, shape := range [][2]int{{7, group * 3}, {33, 256}, {1, 128}} {
					N, K := shape[0], shape[1]
					if K%group != 0 {
						continue
					}
					w := randomWeights(rng, N, K, group, bits)
					for _, M := range []int{1, 2, 7, 33} {
						testMatMulT(t, rng, w, M)
					}
				}
			}
		}
		// Large enough to split rows among cores and to take several sgemm tiles.
		w := randomWeights(rng, 1029, 1024, 64, 4)
		for _, M := range []int{1, 3, 40, 64, 65} { // 64 and 65: either side of fusedMax
			testMatMulT(t, rng, w, M)
		}
		w = randomWeights(rng, 515, 4160, 32, 8) // K % 64 == 32: a half block at the end
		testMatMulT(t, rng, w, 1)
		testMatMulT(t, rng, w, 5)
	})
}

// TestMatVecRowsAlike checks that decoding's product gives a row the same bits whichever
// kernel takes it: on AVX-512 a core reads 8-bit rows as four runs side by side (dec512s)
// and the rest in sets of four consecutive rows, and which rows are the rest changes with
// the cores and with the matrices sharing a call. Each set of four rows alone must match the
// whole product, with float32 and bfloat16 scales.
func TestMatVecRowsAlike(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(4, 4))
		for _, bits := range []int{2, 4, 8} {
			for _, group := range []int{32, 64, 128} {
				const N, K = 1032, 640 // K: a partial chunk at the end for every width
				w := randomWeights(rng, N, K, group, bits)
				s16, b16 := make(BF16, len(w.scales)), make(BF16, len(w.biases))
				for i := range s16 {
					s16[i], b16[i] = safetensors.Float32ToBFloat16(w.scales[i]), safetensors.Float32ToBFloat16(w.biases[i])
				}
				x := randomFloats(rng, K)
				words, G := K*bits/32, K/group
				whole, part := make([]float32, N), make([]float32, 4)
				for _, half := range []bool{false, true} {
					if half {
						MatMulT(whole, x, 1, K, w.packed, s16, b16, N, group, bits)
					} else {
						MatMulT(whole, x, 1, K, w.packed, w.scales, w.biases, N, group, bits)
					}
					for n := 0; n < N; n += 4 {
						p := w.packed[n*words : (n+4)*words]
						if half {
							MatMulT(part, x, 1, K, p, s16[n*G:(n+4)*G], b16[n*G:(n+4)*G], 4, group, bits)
						} else {
							MatMulT(part, x, 1, K, p, w.scales[n*G:(n+4)*G], w.biases[n*G:(n+4)*G], 4, group, bits)
						}
						for r := range 4 {
							if part[r] != whole[n+r] {
								t.Fatalf("bits=%d group=%d bf16=%v: row %d is %v in the whole product and %v in its set alone",
									bits, group, half, n+r, whole[n+r], part[r])
							}
						}
					}
				}
			}
		}
	})
}

func testMatMulT(t *testing.T, rng *rand.Rand, w *qweights, M int) {
	t.Helper()
	N, K := w.N, w.K
	x := randomFloats(rng, M*K)
	want, mag := w.reference(x, M)
	out := randomFloats(rng, M*N) // garbage that must be overwritten
	MatMulT(out, x, M, K, w.packed, w.scales, w.biases, N, w.group, w.bits)
	checkClose(t, fmt.Sprintf("MatMulT bits=%d group=%d M=%d N=%d K=%d", w.bits, w.group, M, N, K), out, want, mag)
}

func TestMatMul(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 3))
		for bits := 2; bits <= 8; bits++ {
			for _, group := range []int{32, 64, 128} {
				for _, shape := range [][2]int{{7, group * 3}, {33, 256}, {1, 128}} {
					N, K := shape[0], shape[1]
					if K%group != 0 {
						continue
					}
					w := randomWeights(rng, N, K, group, bits)
					for _, M := range []int{1, 2, 7, 33} {
						testMatMul(t, rng, w, M)
					}
				}
			}
		}
		w := randomWeights(rng, 1029, 2080, 32, 4) // several column chunks, a partial one
		for _, M := range []int{1, 3, 40} {
			testMatMul(t, rng, w, M)
		}
		w = randomWeights(rng, 515, 1024, 128, 8)
		testMatMul(t, rng, w, 1)
		testMatMul(t, rng, w, 6)
	})
}

func testMatMul(t *testing.T, rng *rand.Rand, w *qweights, M int) {
	t.Helper()
	N, K := w.N, w.K
	x := randomFloats(rng, M*N)
	want, mag := make([]float64, M*K), make([]float64, M*K)
	for m := range M {
		for n := range N {
			xn := float64(x[m*N+n])
			for k := range K {
				p := xn * w.deq[n*K+k]
				want[m*K+k] += p
				mag[m*K+k] += math.Abs(p)
			}
		}
	}
	out := randomFloats(rng, M*K)
	MatMul(out, x, M, N, w.packed, w.scales, w.biases, K, w.group, w.bits)
	checkClose(t, fmt.Sprintf("MatMul bits=%d group=%d M=%d N=%d K=%d", w.bits, w.group, M, N, K), out, want, mag)
}

func TestEmptyAndInvalid(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	w := randomWeights(rng, 3, 64, 32, 4)
	out := make([]float32, 33)
	out[32] = 7
	MatMulT(out, nil, 0, 64, w.packed, w.scales, w.biases, 3, 32, 4) // M = 0: nothing to do
	out[0] = 7
	MatMul[[]float32](out, []float32{}, 1, 0, nil, nil, nil, 32, 32, 4) // N = 0: out = 0
	if out[0] != 0 || out[32] != 7 {
		t.Fatalf("MatMul with N = 0 gave out[0], out[32] = %g, %g, want 0, 7", out[0], out[32])
	}
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"bits 1", func() { MatMulT(out, make([]float32, 64), 1, 64, w.packed, w.scales, w.biases, 3, 32, 1) }},
		{"group 16", func() { MatMulT(out, make([]float32, 64), 1, 64, w.packed, w.scales, w.biases, 3, 16, 4) }},
		{"short packed", func() {
			MatMulT(make([]float32, 3), make([]float32, 64), 1, 64, w.packed[:5], w.scales, w.biases, 3, 32, 4)
		}},
		{"short x", func() {
			MatMulT(make([]float32, 3), make([]float32, 63), 1, 64, w.packed, w.scales, w.biases, 3, 32, 4)
		}},
		{"short out", func() { MatMul(make([]float32, 63), make([]float32, 3), 1, 3, w.packed, w.scales, w.biases, 64, 32, 4) }},
		{"K not multiple of group", func() { MatMul(make([]float32, 48), make([]float32, 3), 1, 3, w.packed, w.scales, w.biases, 48, 32, 4) }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			tc.f()
		}()
	}
}

// A vocabulary-sized W takes the fused kernels up to 64 rows (fusedMax): both
// products stay right there, at the crossover and past it.
func TestVocabSizedW(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	w := randomWeights(rng, vocabRows+5, 64, 32, 4)
	for _, M := range []int{33, 64, 65} {
		testMatMulT(t, rng, w, M)
		testMatMul(t, rng, w, M)
	}
}

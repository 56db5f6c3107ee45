package qmm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMatMulTsInt8 checks prefill's integer product row by row against decoding's, which
// TestMatVecTInt8 checks against float64 arithmetic and the exact product: for every row of
// x, the many-row kernel's result must be the one-row kernel's, bit for bit (the same integer
// sums, scaled and added in the same order). The shapes cover partial final chunks (K = 576
// at 4 bits), rows of W past a multiple of four, rows of x past a multiple of four and past
// one block of 64, float32, bfloat16 and float16 scales, every group size, 4 and 8 bits, and
// two matrices in one call; an outlier channel sits in every row of x.
func TestMatMulTsInt8(t *testing.T) {
	if !HasInt8Rows(4) {
		t.Skip("no many-row integer kernel on this CPU (it needs AVX-512 VNNI)")
	}
	rng := rand.New(rand.NewPCG(5, 12))
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, c := range []struct{ M, N, K int }{{2, 5, 128}, {7, 4, 576}, {70, 37, 1152}, {9, 130, 384}, {131, 8, 1088}} {
				if c.K%group != 0 {
					continue
				}
				for _, width := range []string{"f32", "bf16", "f16"} {
					name := fmt.Sprintf("bits=%d/group=%d/%dx%dx%d/%s", bits, group, c.M, c.N, c.K, width)
					w1, w2 := randomWeights(rng, c.N, c.K, group, bits), randomWeights(rng, c.N+3, c.K, group, bits)
					x := randomFloats(rng, c.M*c.K)
					for m := range c.M {
						x[m*c.K+rng.IntN(c.K)] = 30 * float32(m%3-1)
					}
					got := [][]float32{make([]float32, c.M*c.N), make([]float32, c.M*(c.N+3))}
					want := [][]float32{make([]float32, c.M*c.N), make([]float32, c.M*(c.N+3))}
					if !int8Product(width, got, x, c.M, c.K, []*qweights{w1, w2}, group, bits) {
						t.Fatalf("%s: kernel did not run", name)
					}
					for m := range c.M {
						row := [][]float32{want[0][m*c.N : (m+1)*c.N], want[1][m*(c.N+3) : (m+1)*(c.N+3)]}
						int8Product(width, row, x[m*c.K:(m+1)*c.K], 1, c.K, []*qweights{w1, w2}, group, bits)
					}
					sameBits(t, name+"/first", got[0], want[0])
					sameBits(t, name+"/second", got[1], want[1])
				}
			}
		}
	}
}

// int8Product is MatMulTsInt8 over ws with their scales and biases as float32 or at a 16-bit
// width (which rounds the qweights' own copies to it first, so every width is given the same
// values each time).
func int8Product(width string, outs [][]float32, x []float32, M, K int, ws []*qweights, group, bits int) bool {
	switch width {
	case "f32":
		ms := make([]Matrix[[]float32], len(ws))
		for i, w := range ws {
			ms[i] = Matrix[[]float32]{w.packed, w.scales, w.biases, w.N}
		}
		return MatMulTsInt8(outs, x, M, K, ms, group, bits)
	case "bf16":
		ms := make([]Matrix[BF16], len(ws))
		for i, w := range ws {
			h := halfScales(w, false)
			ms[i] = Matrix[BF16]{w.packed, BF16(h.s), BF16(h.b), w.N}
		}
		return MatMulTsInt8(outs, x, M, K, ms, group, bits)
	}
	ms := make([]Matrix[F16], len(ws))
	for i, w := range ws {
		h := halfScales(w, true)
		ms[i] = Matrix[F16]{w.packed, F16(h.s), F16(h.b), w.N}
	}
	return MatMulTsInt8(outs, x, M, K, ms, group, bits)
}

// TestMatMulTsInt8Edges: rows of zeros give exact zeros, a NaN in one row of x reaches that
// row's outputs and no other row's, and a call without the kernel does nothing.
func TestMatMulTsInt8Edges(t *testing.T) {
	if !HasInt8Rows(4) {
		t.Skip("no many-row integer kernel on this CPU (it needs AVX-512 VNNI)")
	}
	rng := rand.New(rand.NewPCG(2, 9))
	const M, N, K = 6, 12, 256
	w := randomWeights(rng, N, K, 64, 4)
	x := randomFloats(rng, M*K)
	clear(x[2*K : 3*K])
	x[4*K+100] = float32(math.NaN())
	out := [][]float32{make([]float32, M*N)}
	MatMulTsInt8(out, x, M, K, []Matrix[[]float32]{{w.packed, w.scales, w.biases, N}}, 64, 4)
	for m := range M {
		for n := range N {
			v := out[0][m*N+n]
			switch {
			case m == 2 && v != 0:
				t.Fatalf("row of zeros: out[%d][%d] = %g", m, n, v)
			case m == 4 && !math.IsNaN(float64(v)):
				t.Fatalf("row with a NaN: out[%d][%d] = %g", m, n, v)
			case m != 4 && math.IsNaN(float64(v)):
				t.Fatalf("the NaN of row 4 reached row %d", m)
			}
		}
	}
	defer limitSIMD(-1)
	limitSIMD(1)
	out[0][0] = 42
	if MatMulTsInt8(out, x, M, K, []Matrix[[]float32]{{w.packed, w.scales, w.biases, N}}, 64, 4) || out[0][0] != 42 {
		t.Fatal("AVX2 ran a many-row integer product it has no kernel for")
	}
}

// BenchmarkMatMulTInt8 is prefill's product, 512 rows of x through the projections of
// SmolLM2-135M and Qwen3-0.6B and a 4096-square W, exact (tiles of W dequantized for sgemm)
// against 8-bit activations, in GFLOP/s of the product (two per multiply-add).
func BenchmarkMatMulTInt8(b *testing.B) {
	const M = 512
	for _, bits := range []int{4, 8} {
		for _, shape := range [][2]int{{576, 576}, {1536, 576}, {576, 1536}, {2048, 1024}, {1024, 2048}, {3072, 1024}, {1024, 3072}, {4096, 4096}} {
			N, K := shape[0], shape[1]
			w := newBenchWeights(N, K, 64, bits)
			rng := rand.New(rand.NewPCG(1, 1))
			x, out := randomFloats(rng, M*K), make([]float32, M*N)
			p, s, bi := w.copy(0)
			for _, kind := range []string{"exact", "int8"} {
				b.Run(fmt.Sprintf("bits=%d/%dx%d/%s", bits, N, K, kind), func(b *testing.B) {
					if kind == "int8" && !HasInt8Rows(bits) {
						b.Skip("no many-row integer kernel here")
					}
					for b.Loop() {
						if kind == "int8" {
							MatMulTsInt8([][]float32{out}, x, M, K, []Matrix[[]float32]{{p, s, bi, N}}, 64, bits)
						} else {
							MatMulT(out, x, M, K, p, s, bi, N, 64, bits)
						}
					}
					b.ReportMetric(2*float64(M*N*K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

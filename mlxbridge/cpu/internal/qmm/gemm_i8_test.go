package qmm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// roundedX32 is qmm_prepare_x_q8's rounding of x, in Go: per block of 32 values, the scale
// max|x|/127 and the values round(x*127/max) as int8, in float32 as the C code does.
func roundedX32(x []float32) (xq []int8, scale []float32) {
	xq, scale = make([]int8, len(x)), make([]float32, len(x))
	for k0 := 0; k0 < len(x); k0 += 32 {
		var amax float32
		for k := k0; k < k0+32; k++ {
			amax = max(amax, float32(math.Abs(float64(x[k]))))
		}
		var inv float32
		if amax > 0 {
			inv = 127 / amax
		}
		for k := k0; k < k0+32; k++ {
			xq[k] = int8(max(-127, min(127, math.RoundToEven(float64(x[k]*inv)))))
			scale[k] = amax / 127
		}
	}
	return xq, scale
}

// TestMatMulTsInt8 checks prefill's integer product two ways, as TestMatVecTInt8 checks
// decoding's: against the same arithmetic in float64 (x rounded per block of 32 as the kernel
// rounds it, so any slip in the panel layout, the scales or the bias term shows at float32
// precision), and against the exact product within the bound the rounding allows (half a
// block scale per value, times |scale*q|). It also checks that rows are rounded alone: rows
// 3..9 of a call give the same bits as those 7 rows by themselves. The shapes cover panels
// of fewer than 16 rows, rows of x past a multiple of 8, float32, bfloat16 and float16
// scales, every group size, 4 and 8 bits, and two matrices in one call; an outlier channel
// sits in every row of x.
func TestMatMulTsInt8(t *testing.T) {
	if !HasInt8Rows(4) {
		t.Skip("no many-row integer kernel on this CPU (it needs AVX-512 VNNI)")
	}
	rng := rand.New(rand.NewPCG(5, 12))
	for _, bits := range []int{4, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, c := range []struct{ M, N, K int }{{2, 5, 128}, {10, 4, 576}, {70, 37, 1152}, {9, 130, 384}, {19, 16, 1088}, {5, 21, 1120}} {
				if c.K%group != 0 {
					continue
				}
				for _, width := range []string{"f32", "bf16", "f16"} {
					name := fmt.Sprintf("bits=%d/group=%d/%dx%dx%d/%s", bits, group, c.M, c.N, c.K, width)
					ws := []*qweights{randomWeights(rng, c.N, c.K, group, bits), randomWeights(rng, c.N+3, c.K, group, bits)}
					x := randomFloats(rng, c.M*c.K)
					for m := range c.M {
						x[m*c.K+rng.IntN(c.K)] = 30 * float32(m%3-1)
					}
					got := [][]float32{make([]float32, c.M*c.N), make([]float32, c.M*(c.N+3))}
					if !int8Product(width, got, x, c.M, c.K, ws, group, bits) {
						t.Fatalf("%s: kernel did not run", name)
					}
					for i, w := range ws {
						N := w.N
						same, sameMag := make([]float64, c.M*N), make([]float64, c.M*N)
						for m := range c.M {
							xm := x[m*c.K : (m+1)*c.K]
							xq, xs := roundedX32(xm)
							for n := range N {
								var exact, bound, mag float64
								o := m*N + n
								for k := range c.K {
									g := n*(c.K/group) + k/group
									sq := float64(w.scales[g]) * w.q(n, k)
									xr := float64(xs[k]) * float64(xq[k])
									same[o] += sq*xr + float64(w.biases[g])*float64(xm[k])
									sameMag[o] += math.Abs(sq*xr) + math.Abs(float64(w.biases[g])*float64(xm[k]))
									exact += w.deq[n*c.K+k] * float64(xm[k])
									mag += math.Abs(w.deq[n*c.K+k] * float64(xm[k]))
									bound += math.Abs(sq) * float64(xs[k]) / 2
								}
								if d := math.Abs(float64(got[i][o]) - exact); d > bound*(1+1e-6)+1e-5*mag {
									t.Fatalf("%s: matrix %d out[%d][%d] = %g, exact %g: |diff| %g past the rounding bound %g", name, i, m, n, got[i][o], exact, d, bound)
								}
							}
						}
						checkClose(t, fmt.Sprintf("%s/matrix %d", name, i), got[i], same, sameMag)
					}
					if c.M >= 10 {
						part := [][]float32{make([]float32, 7*c.N), make([]float32, 7*(c.N+3))}
						int8Product(width, part, x[3*c.K:10*c.K], 7, c.K, ws, group, bits)
						sameBits(t, name+"/rows 3..9 alone", part[0], got[0][3*c.N:10*c.N])
						sameBits(t, name+"/rows 3..9 alone, second matrix", part[1], got[1][3*(c.N+3):10*(c.N+3)])
					}
				}
			}
		}
	}
}

// int8Product is MatMulTsInt8 over ws with their scales and biases as float32 or at a 16-bit
// width (which rounds the qweights' own copies to it first, and their dequantized reference
// with them, so every width is given the same values each time and checked against them).
func int8Product(width string, outs [][]float32, x []float32, M, K int, ws []*qweights, group, bits int) bool {
	switch width {
	case "f32":
		return productWith(outs, x, M, K, ws, group, bits, func(w *qweights) ([]float32, []float32) { return w.scales, w.biases })
	case "bf16":
		return productWith(outs, x, M, K, ws, group, bits, func(w *qweights) (BF16, BF16) {
			h := halfScales(w, false)
			w.redequantize()
			return h.s, h.b
		})
	}
	return productWith(outs, x, M, K, ws, group, bits, func(w *qweights) (F16, F16) {
		h := halfScales(w, true)
		w.redequantize()
		return h.s, h.b
	})
}

// productWith is MatMulTsInt8 over ws, each with the scales and biases scales gives it.
func productWith[S Scales](outs [][]float32, x []float32, M, K int, ws []*qweights, group, bits int, scales func(*qweights) (S, S)) bool {
	ms := make([]Matrix[S], len(ws))
	for i, w := range ws {
		s, b := scales(w)
		ms[i] = Matrix[S]{w.packed, s, b, w.N}
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

// redequantize recomputes w's reference from its scales and biases, scale*q + bias in float64.
func (w *qweights) redequantize() {
	G := w.K / w.group
	for n := range w.N {
		for k := range w.K {
			g := n*G + k/w.group
			w.deq[n*w.K+k] = float64(w.scales[g])*w.q(n, k) + float64(w.biases[g])
		}
	}
}

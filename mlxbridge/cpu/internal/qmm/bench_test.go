package qmm

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/inloop/inloop/mlxbridge/cpu/internal/blas"
	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// Decoding streams weights far larger than any cache, so the matrix-vector benchmarks cycle
// through copies of W totalling at least this much, several times the last-level cache.
const streamBytes = 256 << 20

// benchWeights is `copies` random quantized (N, K) matrices laid out one after another.
type benchWeights struct {
	N, K, group, bits, copies int
	packed                    []uint32
	scales, biases            []float32
}

func newBenchWeights(N, K, group, bits int) *benchWeights {
	words, G := N*K*bits/32, N*K/group
	bytes := 4 * (words + 2*G)
	w := &benchWeights{N: N, K: K, group: group, bits: bits, copies: max(1, (streamBytes+bytes-1)/bytes)}
	rng := rand.New(rand.NewPCG(9, 9))
	w.packed = make([]uint32, w.copies*words)
	for i := range w.packed {
		w.packed[i] = rng.Uint32()
	}
	w.scales = make([]float32, w.copies*G)
	w.biases = make([]float32, w.copies*G)
	for i := range w.scales {
		w.scales[i] = float32(rng.NormFloat64() * 0.01)
		w.biases[i] = float32(rng.NormFloat64() * 0.05)
	}
	return w
}

// copy returns the i-th copy's slices.
func (w *benchWeights) copy(i int) ([]uint32, []float32, []float32) {
	words, G := w.N*w.K*w.bits/32, w.N*w.K/w.group
	i %= w.copies
	return w.packed[i*words : (i+1)*words], w.scales[i*G : (i+1)*G], w.biases[i*G : (i+1)*G]
}

// bytes is what one product streams: packed words, scales and biases of one copy.
func (w *benchWeights) bytes() int64 { return int64(w.N*w.K*w.bits/8 + 8*w.N*w.K/w.group) }

var (
	bandwidthOnce sync.Once
	bandwidth2    float64 // GB/s read by 2 threads, measured in this process
)

// readBandwidth sums a 256 MiB array on `threads` goroutines and returns GB/s, best of reps.
func readBandwidth(a []float32, threads, reps int) float64 {
	best := 0.0
	for range reps {
		start := time.Now()
		var wg sync.WaitGroup
		for t := range threads {
			part := a[len(a)*t/threads : len(a)*(t+1)/threads]
			wg.Go(func() { sumFloats(part) })
		}
		wg.Wait()
		best = max(best, float64(4*len(a))/time.Since(start).Seconds()/1e9)
	}
	return best
}

var memArray = sync.OnceValue(func() []float32 {
	a := make([]float32, 64<<20) // 256 MiB
	for i := range a {
		a[i] = float32(i & 1023)
	}
	return a
})

// twoThreadBandwidth is the machine's 2-thread read bandwidth, measured once per process so
// that every matrix-vector benchmark reports its share of it from the same run.
func twoThreadBandwidth() float64 {
	bandwidthOnce.Do(func() { bandwidth2 = readBandwidth(memArray(), 2, 5) })
	return bandwidth2
}

func BenchmarkMemRead(b *testing.B) {
	a := memArray()
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			b.SetBytes(int64(4 * len(a)))
			for b.Loop() {
				readBandwidth(a, threads, 1)
			}
			b.ReportMetric(float64(b.N)*float64(4*len(a))/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// levelNames names the kernel levels, as limitSIMD takes them.
var levelNames = []string{"portable", "avx2", "avx512"}

// BenchmarkMatVec is decoding's product, one row of x through a W streamed from memory, at
// each SIMD level this machine has (AVX2 is the one every x86-64 user is expected to have).
func BenchmarkMatVec(b *testing.B) {
	bw := twoThreadBandwidth()
	top := simdLevel()
	defer limitSIMD(-1)
	for _, bits := range []int{4, 8} {
		for _, shape := range [][2]int{{4096, 4096}, {11008, 4096}, {4096, 11008}} {
			N, K := shape[0], shape[1]
			w := newBenchWeights(N, K, 64, bits)
			x, out := make([]float32, K), make([]float32, N)
			for i := range x {
				x[i] = float32(i%7) - 3
			}
			for level := top; level >= 1; level-- {
				b.Run(fmt.Sprintf("bits=%d/%dx%d/%s", bits, N, K, levelNames[level]), func(b *testing.B) {
					limitSIMD(level)
					b.SetBytes(w.bytes())
					i := 0
					for b.Loop() {
						p, s, bi := w.copy(i)
						MatMulT(out, x, 1, K, p, s, bi, N, 64, bits)
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

// BenchmarkMatVecSmall covers the matrices of small models (SmolLM2-135M: 576 wide, MLP
// 1536; Qwen3-0.6B: 1024 wide, MLP 3072), where a product takes microseconds and handing work
// to other cores is a visible part of it. Weights stream from memory as in decoding.
func BenchmarkMatVecSmall(b *testing.B) {
	bw := twoThreadBandwidth()
	for _, bits := range []int{4, 8} {
		for _, shape := range [][2]int{{576, 576}, {1536, 576}, {576, 1536}, {1024, 1024}, {3072, 1024}} {
			N, K := shape[0], shape[1]
			b.Run(fmt.Sprintf("bits=%d/%dx%d", bits, N, K), func(b *testing.B) {
				w := newBenchWeights(N, K, 64, bits)
				x, out := make([]float32, K), make([]float32, N)
				b.SetBytes(w.bytes())
				i := 0
				for b.Loop() {
					p, s, bi := w.copy(i)
					MatMulT(out, x, 1, K, p, s, bi, N, 64, bits)
					i++
				}
				gbs := float64(b.N) * float64(w.bytes()) / b.Elapsed().Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(100*gbs/bw, "%bw2")
			})
		}
	}
}

// BenchmarkMatVecScales16 is decoding's product with the same weights' scales and biases
// in float32 and in bfloat16 (a 16-bit checkpoint's, read at their width), the two
// alternating product by product so their ratio comes from one run: exact (float32
// activations) and, where the CPU has the kernels, on 8-bit activations. Small models' and
// Qwen3-0.6B's shapes, streamed from memory; us-f32 and us-bf16 are microseconds a product.
func BenchmarkMatVecScales16(b *testing.B) {
	for _, bits := range []int{4, 8} {
		for _, shape := range [][2]int{{576, 576}, {1536, 576}, {576, 1536}, {1024, 1024}, {3072, 1024}, {1024, 3072}} {
			N, K := shape[0], shape[1]
			w := newBenchWeights(N, K, 64, bits)
			s16, b16 := make(BF16, len(w.scales)), make(BF16, len(w.biases))
			for i := range s16 {
				s16[i], b16[i] = safetensors.Float32ToBFloat16(w.scales[i]), safetensors.Float32ToBFloat16(w.biases[i])
			}
			G := N * K / 64
			x, out := make([]float32, K), make([]float32, N)
			for i := range x {
				x[i] = float32(i%7) - 3
			}
			for _, int8 := range []bool{false, true} {
				if int8 && !HasInt8(bits) {
					continue
				}
				name := map[bool]string{false: "exact", true: "int8"}[int8]
				b.Run(fmt.Sprintf("bits=%d/%dx%d/%s", bits, N, K, name), func(b *testing.B) {
					alternate(b, "f32", "bf16", func(i int) {
						p, s, bi := w.copy(i)
						if int8 {
							MatVecTInt8(out, x, K, p, s, bi, N, 64, bits)
						} else {
							MatMulT(out, x, 1, K, p, s, bi, N, 64, bits)
						}
					}, func(i int) {
						p, _, _ := w.copy(i + w.copies/2) // another copy, so neither finds the other's in cache
						c := (i + w.copies/2) % w.copies
						sh, bh := s16[c*G:(c+1)*G], b16[c*G:(c+1)*G]
						if int8 {
							MatVecTInt8(out, x, K, p, sh, bh, N, 64, bits)
						} else {
							MatMulT(out, x, 1, K, p, sh, bh, N, 64, bits)
						}
					})
				})
			}
		}
	}
}

// alternate times first(i) and second(i) in turn, i counting the iterations, and
// reports each one's microseconds an iteration (us-<a>, us-<b>) and their ratio
// (<a>/<b>): two forms of one product, compared within one run.
func alternate(b *testing.B, a, c string, first, second func(i int)) {
	var t1, t2 time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		first(i)
		t1 += time.Since(start)
		start = time.Now()
		second(i)
		t2 += time.Since(start)
	}
	b.ReportMetric(t1.Seconds()*1e6/float64(b.N), "us-"+a)
	b.ReportMetric(t2.Seconds()*1e6/float64(b.N), "us-"+c)
	b.ReportMetric(t1.Seconds()/t2.Seconds(), a+"/"+c)
}

// BenchmarkMatVecMulti is decoding's products of a block's query, key and value projections
// and of its gate and up projections (SmolLM2-135M's and Qwen3-0.6B's shapes, 4-bit) one
// matrix at a time (MatMulT each) and in one call (MatMulTs), alternating set by set so their
// ratio comes from one run; each set's weights streamed from memory. us-each and us-joint are
// microseconds a set.
func BenchmarkMatVecMulti(b *testing.B) {
	for _, c := range []struct {
		name string
		K    int
		Ns   []int
	}{
		{"smollm2/qkv", 576, []int{576, 192, 192}},
		{"smollm2/gate-up", 576, []int{1536, 1536}},
		{"qwen3/qkv", 1024, []int{2048, 1024, 1024}},
		{"qwen3/gate-up", 1024, []int{3072, 3072}},
	} {
		b.Run(c.name, func(b *testing.B) {
			ws := make([]*benchWeights, len(c.Ns))
			outs := make([][]float32, len(c.Ns))
			for i, n := range c.Ns {
				ws[i], outs[i] = newBenchWeights(n, c.K, 64, 4), make([]float32, n)
			}
			x := make([]float32, c.K)
			for i := range x {
				x[i] = float32(i%7) - 3
			}
			copies := ws[0].copies
			for _, w := range ws {
				copies = min(copies, w.copies)
			}
			sets := make([][]Matrix[[]float32], copies) // each set's copies of the matrices
			for i := range sets {
				for _, w := range ws {
					p, s, bi := w.copy(i)
					sets[i] = append(sets[i], Matrix[[]float32]{p, s, bi, w.N})
				}
			}
			alternate(b, "each", "joint", func(i int) {
				for j, m := range sets[i%copies] {
					MatMulT(outs[j], x, 1, c.K, m.Packed, m.Scales, m.Biases, m.N, 64, 4)
				}
			}, func(i int) {
				MatMulTs(outs, x, 1, c.K, sets[(i+copies/2)%copies], 64, 4) // another copy, so neither finds the other's in cache
			})
		})
	}
}

// BenchmarkMatVecT is the transposed product for one row (x @ W), as in a backward pass.
func BenchmarkMatVecT(b *testing.B) {
	bw := twoThreadBandwidth()
	for _, bits := range []int{4, 8} {
		b.Run(fmt.Sprintf("bits=%d/4096x4096", bits), func(b *testing.B) {
			w := newBenchWeights(4096, 4096, 64, bits)
			x, out := make([]float32, 4096), make([]float32, 4096)
			b.SetBytes(w.bytes())
			i := 0
			for b.Loop() {
				p, s, bi := w.copy(i)
				MatMul(out, x, 1, 4096, p, s, bi, 4096, 64, bits)
				i++
			}
			gbs := float64(b.N) * float64(w.bytes()) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(100*gbs/bw, "%bw2")
		})
	}
}

const benchM, benchN, benchK = 512, 4096, 4096

func BenchmarkMatMulT_M512(b *testing.B) {
	for _, bits := range []int{4, 8} {
		b.Run(fmt.Sprintf("bits=%d", bits), func(b *testing.B) {
			w := newBenchWeights(benchN, benchK, 64, bits)
			x, out := make([]float32, benchM*benchK), make([]float32, benchM*benchN)
			p, s, bi := w.copy(0)
			for b.Loop() {
				MatMulT(out, x, benchM, benchK, p, s, bi, benchN, 64, bits)
			}
			b.ReportMetric(2*benchM*benchN*benchK*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkSgemm is package blas's product at BenchmarkMatMulT_M512's shape, x (M, K) @ W^T (K, N).
func BenchmarkSgemm(b *testing.B) {
	x, wt, out := make([]float32, benchM*benchK), make([]float32, benchN*benchK), make([]float32, benchM*benchN)
	for b.Loop() {
		blas.Sgemm(false, true, benchM, benchN, benchK, x, benchK, wt, benchK, 0, out, benchN)
	}
	b.ReportMetric(2*benchM*benchN*benchK*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkCrossover times both strategies of each form (T: x @ W^T, N: x @ W) for small M,
// to place fusedMax.
func BenchmarkCrossover(b *testing.B) {
	const N, K = 4096, 4096
	for _, bits := range []int{4, 8} {
		w := newBenchWeights(N, K, 64, bits)
		for _, form := range []string{"T", "N"} {
			for _, M := range []int{1, 4, 16, 32, 64, 128} {
				x, out := make([]float32, M*K), make([]float32, M*N)
				for _, strategy := range []string{"fused", "tiled"} {
					b.Run(fmt.Sprintf("bits=%d/%s/M=%d/%s", bits, form, M, strategy), func(b *testing.B) {
						i := 0
						for b.Loop() {
							p, s, bi := w.copy(i)
							ww := newWeights("bench", p, s, bi, N, K, 64, bits)
							switch form + strategy {
							case "Tfused":
								gemvT([]*weights{ww}, [][]float32{out}, x, M)
							case "Ttiled":
								tiledT(ww, out, x, M)
							case "Nfused":
								gemv(ww, out, x, M)
							case "Ntiled":
								tiled(ww, out, x, M)
							}
							ww.close()
							i++
						}
						b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(M), "us/row")
					})
				}
			}
		}
	}
}

// BenchmarkMatVecHot runs the matrix-vector kernel on one thread over a W that stays in L2,
// which measures decoding speed alone: the ceiling the streaming benchmarks approach, per
// core. It covers each kernel level this machine has, then the 8-bit-activation kernels
// (i8.go) in each form.
func BenchmarkMatVecHot(b *testing.B) {
	const N, K = 128, 4096
	defer limitSIMD(-1)
	hot := func(name string, level, bits int, kernel func(*weights, []float32) func([]float32)) {
		b.Run(name, func(b *testing.B) {
			limitSIMD(level)
			w := newBenchWeights(N, K, 64, bits)
			ww := newWeights("bench", w.packed, w.scales, w.biases, N, K, 64, bits)
			defer ww.close()
			x, out := make([]float32, K), make([]float32, N)
			run := kernel(ww, x)
			b.SetBytes(w.bytes())
			for b.Loop() {
				run(out)
			}
			b.ReportMetric(float64(b.N)*float64(w.bytes())/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
	top := simdLevel()
	for level := top; level >= 0; level-- {
		for _, bits := range []int{2, 4, 8} {
			hot(fmt.Sprintf("%s/bits=%d", levelNames[level], bits), level, bits, kernelOnThisThread)
		}
	}
	for level := top; level >= 1; level-- {
		if level == 2 && !vnni() {
			continue
		}
		for _, bits := range []int{4, 8} {
			if limitSIMD(level); !HasInt8(bits) {
				continue
			}
			hot(fmt.Sprintf("int8-%s/bits=%d", map[int]string{1: "avx2", 2: "vnni"}[level], bits), level, bits, int8OnThisThread)
		}
	}
}

// BenchmarkDequantTiles is the dequantizing half of the sgemm path: all of a 4096x4096 W,
// one tile at a time into the same buffer, on all cores.
func BenchmarkDequantTiles(b *testing.B) {
	const N, K = 4096, 4096
	for _, bits := range []int{4, 8} {
		b.Run(fmt.Sprintf("bits=%d", bits), func(b *testing.B) {
			w := newBenchWeights(N, K, 64, bits)
			p, s, bi := w.copy(0)
			ww := newWeights("bench", p, s, bi, N, K, 64, bits)
			defer ww.close()
			T := tileRows(K)
			buf := make([]float32, T*K)
			fill := dequantTile(ww)
			for b.Loop() {
				for n0 := 0; n0 < N; n0 += T {
					parallel(min(T, N-n0), 8, K, func(a, c int) { fill(buf[a*K:], n0+a, n0+c) })
				}
			}
			b.ReportMetric(float64(N*K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gweights/s")
		})
	}
}

// halfCopies is enough copies of a 16-bit W (N, K) to stream from memory, as newBenchWeights.
func halfCopies(N, K int) [][]uint16 {
	n := max(1, streamBytes/(2*N*K))
	rng := rand.New(rand.NewPCG(5, 5))
	out := make([][]uint16, n)
	for i := range out {
		out[i] = randomHalf(rng, N*K, false, 0.05)
	}
	return out
}

// BenchmarkHalfMatVec is decoding's product over a bfloat16 W streamed from memory, against
// sgemv over the same W in float32 (twice the bytes): GB/s of weights read.
func BenchmarkHalfMatVec(b *testing.B) {
	bw := twoThreadBandwidth()
	for _, shape := range [][2]int{{1024, 1024}, {3072, 1024}, {1024, 3072}, {4096, 4096}} {
		N, K := shape[0], shape[1]
		x, out := make([]float32, K), make([]float32, N)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		ws := halfCopies(N, K)
		for level := simdLevel(); level >= 1; level-- {
			b.Run(fmt.Sprintf("%dx%d/bf16/%s", N, K, levelNames[level]), func(b *testing.B) {
				limitSIMD(level)
				defer limitSIMD(-1)
				i := 0
				for b.Loop() {
					HalfMatMulT(out, x, 1, K, ws[i%len(ws)], N, false)
					i++
				}
				gbs := float64(b.N) * float64(2*N*K) / b.Elapsed().Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(gbs/bw, "of-bandwidth")
			})
		}
		b.Run(fmt.Sprintf("%dx%d/f32-sgemv", N, K), func(b *testing.B) {
			copies := max(1, streamBytes/(4*N*K))
			ws := make([][]float32, copies)
			for c := range ws {
				ws[c] = make([]float32, N*K)
				for j := range ws[c] {
					ws[c][j] = float32(j%13) * 0.01
				}
			}
			i := 0
			for b.Loop() {
				blas.Sgemv(false, N, K, ws[i%len(ws)], K, x, 0, out)
				i++
			}
			gbs := float64(b.N) * float64(4*N*K) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(gbs/bw, "of-bandwidth")
		})
	}
}

// BenchmarkHalfCrossover times the fused kernels against widened tiles and sgemm per row of
// x, to place halfFusedMax: x @ W^T (T, the forward pass) and x @ W (N, its backward).
func BenchmarkHalfCrossover(b *testing.B) {
	for _, shape := range [][2]int{{4096, 192}, {3072, 1024}, {4096, 4096}} {
		N, K := shape[0], shape[1]
		ws := halfCopies(N, K)
		for _, M := range []int{4, 8, 16, 32, 64, 128, 256} {
			x, out := make([]float32, M*max(N, K)), make([]float32, M*max(N, K))
			for _, strategy := range []string{"T-fused", "T-tiled", "N-fused", "N-tiled"} {
				b.Run(fmt.Sprintf("%dx%d/M=%d/%s", N, K, M, strategy), func(b *testing.B) {
					i := 0
					for b.Loop() {
						w := ws[i%len(ws)]
						switch strategy {
						case "T-fused":
							halfFused(out, x, M, K, w, N, false)
						case "T-tiled":
							halfTiled(out, x, M, K, w, N, false)
						case "N-fused":
							halfFusedN(out, x, M, N, w, K, false)
						case "N-tiled":
							tilesN(out, x, M, N, K, widener(w, K, false))
						}
						i++
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(M), "us/row")
				})
			}
		}
	}
}

// BenchmarkTiles is the sgemm path of a 16-bit W at 64 rows of x (a TTT step's piece, a
// short prompt), against sgemm on the same W in float32: x @ W^T (T) and x @ W (N), for
// Qwen3-0.6B's output projection and two of its block's shapes.
func BenchmarkTiles(b *testing.B) {
	for _, s := range [][2]int{{151936, 1024}, {3072, 1024}, {1024, 3072}} {
		N, K := s[0], s[1]
		M := 64
		w16 := make([]uint16, N*K)
		for i := range w16 {
			w16[i] = uint16(0x3c00 + i%7)
		}
		w32 := make([]float32, N*K)
		HalfWiden(w32, w16, false)
		x := make([]float32, M*max(N, K))
		out := make([]float32, M*max(N, K))
		flops := 2 * float64(M) * float64(N) * float64(K)
		for _, st := range []string{"T16", "T32", "N16", "N32"} {
			b.Run(fmt.Sprintf("%dx%d/%s", N, K, st), func(b *testing.B) {
				for b.Loop() {
					switch st {
					case "T16":
						halfTiled(out, x, M, K, w16, N, false)
					case "T32":
						blas.Sgemm(false, true, M, N, K, x, K, w32, K, 0, out, N)
					case "N16":
						tilesN(out, x, M, N, K, widener(w16, K, false))
					case "N32":
						blas.Sgemm(false, false, M, K, N, x, N, w32, K, 0, out, K)
					}
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

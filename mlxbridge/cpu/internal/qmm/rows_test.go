package qmm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/inloop/inloop/mlxbridge/cpu/internal/blas"
)

func TestMatVecT(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	defer rowsPolicy(-1)
	for _, nta := range []int{1, 0} { // the prefetches change no bits: the same checks pass under both
		rowsPolicy(nta)
		t.Run(map[int]string{1: "nta", 0: "l2"}[nta], func(t *testing.T) { testMatVecT(t, rng) })
	}
}

func testMatVecT(t *testing.T, rng *rand.Rand) {
	forEachLevel(t, func(t *testing.T) {
		for _, s := range [][2]int{{1, 1}, {3, 7}, {5, 16}, {9, 33}, {33, 64}, {70, 100}, {130, 100}, {130, 576}, {2103, 1024}} { // the last past streamedMin: chunks
			N, K := s[0], s[1]
			w, x, out, one := make([]float32, N*K), make([]float32, K), make([]float32, N), make([]float32, 1)
			for i := range w {
				w[i] = float32(rng.NormFloat64())
			}
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			MatVecT(out, x, w, N, K)
			for n := range N {
				var want, mag float64
				for k := range K {
					p := float64(w[n*K+k]) * float64(x[k])
					want, mag = want+p, mag+math.Abs(p)
				}
				if d := math.Abs(float64(out[n]) - want); d > 1e-5*mag {
					t.Fatalf("%dx%d: row %d = %v, want %v", N, K, n, out[n], want)
				}
				// A row's result is the same bits whichever kernel takes it: on AVX-512 a
				// core reads four runs of its rows side by side and the few left over one
				// at a time, and which rows are left over changes with the cores and chunks.
				MatVecT(one, x, w[n*K:(n+1)*K], 1, K)
				if one[0] != out[n] {
					t.Fatalf("%dx%d: row %d is %v in the whole product and %v alone", N, K, n, out[n], one[0])
				}
			}
		}
	})
}

// BenchmarkMatVecF32 is decoding's float32 product through MatVecT against OpenBLAS's
// sgemv over the same W streamed from memory: GB/s of weights read.
func BenchmarkMatVecF32(b *testing.B) {
	bw := twoThreadBandwidth()
	for _, shape := range [][2]int{{576, 576}, {1536, 576}, {1024, 1024}, {3072, 1024}, {1024, 3072}, {4096, 4096}} {
		N, K := shape[0], shape[1]
		x, out := make([]float32, K), make([]float32, N)
		ws := make([][]float32, max(1, streamBytes/(4*N*K)))
		for c := range ws {
			ws[c] = make([]float32, N*K)
			for j := range ws[c] {
				ws[c][j] = float32(j%13) * 0.01
			}
		}
		for _, kind := range []string{"rows", "sgemv"} {
			b.Run(fmt.Sprintf("%dx%d/%s", N, K, kind), func(b *testing.B) {
				i := 0
				for b.Loop() {
					if w := ws[i%len(ws)]; kind == "sgemv" {
						blas.Sgemv(false, N, K, w, K, x, 0, out)
					} else {
						MatVecT(out, x, w, N, K)
					}
					i++
				}
				gbs := float64(b.N) * float64(4*N*K) / b.Elapsed().Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(gbs/bw, "of-bandwidth")
			})
		}
	}
}

// BenchmarkMatVecF32Token is one float32 Qwen3-0.6B decode token's products, without the
// model: 28 blocks of q, k, v, o, gate, up and down (each matrix its own allocation, in
// the order a block runs them) and then the 151936-row output projection, 2.4 GB in all.
// Products of 4 to 12 MB, one after another, stream slower than one shape repeated
// (BenchmarkMatVecF32): each starts its streams afresh and ends waiting for the slower
// core. GB/s is the token's bytes over its time; the per-shape figures say where.
func BenchmarkMatVecF32Token(b *testing.B) {
	const hidden, qDim, kvDim, mlp, vocab, blocks = 1024, 2048, 1024, 3072, 151936, 28
	block := [][2]int{{qDim, hidden}, {kvDim, hidden}, {kvDim, hidden}, {hidden, qDim}, {mlp, hidden}, {mlp, hidden}, {hidden, mlp}}
	type matrix struct {
		N, K int
		w    []float32
	}
	var ms []matrix
	for range blocks {
		for _, s := range block {
			ms = append(ms, matrix{s[0], s[1], make([]float32, s[0]*s[1])})
		}
	}
	ms = append(ms, matrix{vocab, hidden, make([]float32, vocab*hidden)})
	var bytes int64
	for _, m := range ms {
		for j := range m.w {
			m.w[j] = float32(j%13) * 0.01
		}
		bytes += int64(4 * len(m.w))
	}
	x, out := make([]float32, mlp), make([]float32, vocab)
	spent := map[[2]int]time.Duration{}
	read := map[[2]int]int64{}
	for b.Loop() {
		for _, m := range ms {
			start := time.Now()
			MatVecT(out, x, m.w, m.N, m.K)
			shape := [2]int{m.N, m.K}
			spent[shape] += time.Since(start)
			read[shape] += int64(4 * len(m.w))
		}
	}
	b.ReportMetric(float64(b.N)*float64(bytes)/b.Elapsed().Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	for s, d := range spent {
		b.ReportMetric(float64(read[s])/d.Seconds()/1e9, fmt.Sprintf("GB/s-%dx%d", s[0], s[1]))
	}
}

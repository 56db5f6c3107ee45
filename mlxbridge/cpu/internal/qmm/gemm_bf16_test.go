package qmm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// BenchmarkHalfMatMulTBF16 is prefill's product for a bfloat16 W, 512 rows of x through the
// projections of SmolLM2-135M and Qwen3-0.6B and a 4096-square W: exact (tiles of W widened
// for sgemm) against bfloat16 activations, in GFLOP/s of the product (two per multiply-add).
func BenchmarkHalfMatMulTBF16(b *testing.B) {
	defer forceBF16()()
	const M = 512
	for _, shape := range [][2]int{{576, 576}, {1536, 576}, {576, 1536}, {2048, 1024}, {1024, 2048}, {3072, 1024}, {1024, 3072}, {4096, 4096}} {
		N, K := shape[0], shape[1]
		rng := rand.New(rand.NewPCG(1, 1))
		w := randomHalf(rng, N*K, false, 0.05)
		x, out := randomFloats(rng, M*K), make([]float32, M*N)
		for _, kind := range []string{"exact", "bf16"} {
			b.Run(fmt.Sprintf("%dx%d/%s", N, K, kind), func(b *testing.B) {
				if kind == "bf16" && !HasBF16Rows() {
					b.Skip("no bfloat16 dot-product kernel here")
				}
				for b.Loop() {
					if kind == "bf16" {
						HalfMatMulTBF16(out, x, M, K, w, N)
					} else {
						HalfMatMulT(out, x, M, K, w, N, false)
					}
				}
				b.ReportMetric(2*float64(M*N*K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// bf16Round is x rounded to the nearest bfloat16, ties to even, as a float64.
func bf16Round(v float32) float64 {
	u := math.Float32bits(v)
	u += 0x7fff + (u>>16)&1
	return float64(math.Float32frombits(u &^ 0xffff))
}

// TestHalfMatMulTBF16 checks prefill's bfloat16 product against the same arithmetic in
// float64 (x rounded to bfloat16 in Go, W's values widened), to float32 precision of the
// magnitude, and against the exact product within the bound x's rounding allows (2⁻⁹ of
// each |w·x|). Rows are rounded alone: rows 3..9 of a call give the same bits as those 7
// rows by themselves. The shapes cover odd K (a padded last pair), a last pass of one panel
// and of part of one, W narrower than a panel, and rows of x past a multiple of 8.
func TestHalfMatMulTBF16(t *testing.T) {
	defer forceBF16()()
	if !HasBF16Rows() {
		t.Skip("no bfloat16 dot-product kernel on this CPU (it needs AVX-512 BF16)")
	}
	rng := rand.New(rand.NewPCG(7, 16))
	for _, c := range []struct{ M, N, K int }{{2, 5, 64}, {10, 4, 577}, {70, 37, 1024}, {9, 130, 383}, {19, 48, 1}, {12, 33, 96}} {
		name := fmt.Sprintf("%dx%dx%d", c.M, c.N, c.K)
		w := randomHalf(rng, c.N*c.K, false, 0.05)
		x := randomFloats(rng, c.M*c.K)
		for m := range c.M {
			x[m*c.K+rng.IntN(c.K)] = 30 * float32(m%3-1)
		}
		got := make([]float32, c.M*c.N)
		if !HalfMatMulTBF16(got, x, c.M, c.K, w, c.N) {
			t.Fatalf("%s: kernel did not run", name)
		}
		for m := range c.M {
			for n := range c.N {
				var same, mag, exact float64
				for k := range c.K {
					wv, xv := halfRef(w[n*c.K+k], false), float64(x[m*c.K+k])
					same += wv * bf16Round(x[m*c.K+k])
					exact += wv * xv
					mag += math.Abs(wv * xv)
				}
				g := float64(got[m*c.N+n])
				if d := math.Abs(g - same); d > 1e-5*mag+1e-30 {
					t.Fatalf("%s: out[%d][%d] = %v, same arithmetic in float64 %v (|w||x| %v)", name, m, n, g, same, mag)
				}
				if d := math.Abs(g - exact); d > 0x1p-9*mag*(1+1e-3)+1e-5*mag {
					t.Fatalf("%s: out[%d][%d] = %v is %v from the exact %v, past the rounding bound %v", name, m, n, g, d, exact, 0x1p-9*mag)
				}
			}
		}
		if c.M >= 10 {
			part := make([]float32, 7*c.N)
			HalfMatMulTBF16(part, x[3*c.K:], 7, c.K, w, c.N)
			for i, v := range part {
				if math.Float32bits(v) != math.Float32bits(got[3*c.N+i]) {
					t.Fatalf("%s: rows 3..9 alone differ at %d: %v against %v in the whole call", name, i, v, got[3*c.N+i])
				}
			}
		}
	}
}

// TestHalfMatMulTBF16Edges: a row of zeros gives zeros, a NaN in x reaches its own row's
// outputs and no other row's, and with the kernels capped at AVX2 the call does nothing and
// says so.
func TestHalfMatMulTBF16Edges(t *testing.T) {
	defer forceBF16()()
	if !HasBF16Rows() {
		t.Skip("no bfloat16 dot-product kernel on this CPU (it needs AVX-512 BF16)")
	}
	const M, N, K = 9, 20, 64
	rng := rand.New(rand.NewPCG(3, 3))
	w, x := randomHalf(rng, N*K, false, 0.05), randomFloats(rng, M*K)
	clear(x[2*K : 3*K])
	x[5*K+7] = float32(math.NaN())
	out := make([]float32, M*N)
	HalfMatMulTBF16(out, x, M, K, w, N)
	for m := range M {
		for n := range N {
			v := out[m*N+n]
			switch {
			case m == 2 && v != 0:
				t.Fatalf("a row of zeros gave %v at column %d", v, n)
			case m == 5 && !math.IsNaN(float64(v)):
				t.Fatalf("the NaN in row 5 did not reach column %d: %v", n, v)
			case m != 5 && math.IsNaN(float64(v)):
				t.Fatalf("row 5's NaN reached row %d", m)
			}
		}
	}
	defer limitSIMD(-1)
	limitSIMD(1)
	out[0] = 42
	if HalfMatMulTBF16(out, x, M, K, w, N) || out[0] != 42 {
		t.Fatal("AVX2 ran a bfloat16 dot-product kernel it does not have")
	}
}

// forceBF16 runs the bfloat16 kernel where HasBF16Rows leaves it off because it does not
// pay (Intel), so its tests cover it on every processor that has the instructions; the
// returned function undoes it.
func forceBF16() func() {
	bf16Forced = true
	return func() { bf16Forced = false }
}

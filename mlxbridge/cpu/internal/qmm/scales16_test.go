package qmm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/inloop/inloop/mlxbridge/safetensors"
)

// halfScales rounds w's scales and biases to bfloat16 (or float16) in place and returns
// their bits: the float32 copy then holds exactly the values the 16-bit kernels widen.
func halfScales(w *qweights, f16 bool) half16 {
	narrow, widen := safetensors.Float32ToBFloat16, safetensors.BFloat16ToFloat32
	if f16 {
		narrow, widen = safetensors.Float32ToFloat16, safetensors.Float16ToFloat32
	}
	s, b := make([]uint16, len(w.scales)), make([]uint16, len(w.biases))
	for i := range w.scales {
		s[i], b[i] = narrow(w.scales[i]), narrow(w.biases[i])
		w.scales[i], w.biases[i] = widen(s[i]), widen(b[i])
	}
	return half16{s, b, f16}
}

// half16 is a W's scales and biases as 16-bit bits, float16 where f16 is set, else
// bfloat16: the products take them as F16 or BF16.
type half16 struct {
	s, b []uint16
	f16  bool
}

func (h half16) matMulT(out, x []float32, M, K int, packed []uint32, N, group, bits int) {
	if h.f16 {
		MatMulT(out, x, M, K, packed, F16(h.s), F16(h.b), N, group, bits)
	} else {
		MatMulT(out, x, M, K, packed, BF16(h.s), BF16(h.b), N, group, bits)
	}
}

func (h half16) matMul(out, x []float32, M, N int, packed []uint32, K, group, bits int) {
	if h.f16 {
		MatMul(out, x, M, N, packed, F16(h.s), F16(h.b), K, group, bits)
	} else {
		MatMul(out, x, M, N, packed, BF16(h.s), BF16(h.b), K, group, bits)
	}
}

func (h half16) matVecTInt8(out, x []float32, K int, packed []uint32, N, group, bits int) {
	if h.f16 {
		MatVecTInt8(out, x, K, packed, F16(h.s), F16(h.b), N, group, bits)
	} else {
		MatVecTInt8(out, x, K, packed, BF16(h.s), BF16(h.b), N, group, bits)
	}
}

// sameBits fails unless got and want are the same floats, bit for bit.
func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: out[%d] = %g, want %g bit for bit", name, i, got[i], want[i])
		}
	}
}

// With bfloat16 or float16 scales and biases every product gives, bit for bit, what it gives
// with float32 ones holding the same values: decoding's AVX-512 kernel reads them in its own
// loop, the other products widen them exactly, a tile of rows at a time, and run the float32
// kernels. The shapes take one tile, several with a remainder that is not a multiple of four
// rows, one to eight groups a chunk of the AVX-512 kernel with a partial final chunk, and
// (K of 8,224 groups of 32) rows wider than the per-thread buffer; M covers the matrix-vector kernels, the batched ones and the
// dequantized tiles.
func TestSixteenBitScales(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(16, 16))
		for _, c := range []struct{ N, K, group, bits int }{
			{7, 96, 32, 4}, {300, 4096, 32, 4}, {301, 2048, 64, 8}, {130, 1024, 128, 2},
			{37, 640, 64, 3}, {33, 640, 32, 2}, {3, 8224 * 32, 32, 4},
		} {
			for _, f16 := range []bool{false, true} {
				w := randomWeights(rng, c.N, c.K, c.group, c.bits)
				h := halfScales(w, f16)
				for _, M := range []int{1, 3, 5, 70} {
					if c.K > 100000 && M > 3 {
						continue
					}
					name := fmt.Sprintf("f16=%v bits=%d group=%d N=%d K=%d M=%d", f16, c.bits, c.group, c.N, c.K, M)
					x := randomFloats(rng, M*c.K)
					want, got := make([]float32, M*c.N), make([]float32, M*c.N)
					MatMulT(want, x, M, c.K, w.packed, w.scales, w.biases, c.N, c.group, c.bits)
					h.matMulT(got, x, M, c.K, w.packed, c.N, c.group, c.bits)
					sameBits(t, "MatMulT "+name, got, want)

					xt := randomFloats(rng, M*c.N)
					want, got = make([]float32, M*c.K), make([]float32, M*c.K)
					MatMul(want, xt, M, c.N, w.packed, w.scales, w.biases, c.K, c.group, c.bits)
					h.matMul(got, xt, M, c.N, w.packed, c.K, c.group, c.bits)
					sameBits(t, "MatMul "+name, got, want)
				}
			}
		}
	})
}

// The 8-bit-activation kernels read 16-bit scales the same way: the AVX2 form through
// widened tiles, the VNNI form in its own loop.
func TestSixteenBitScalesInt8(t *testing.T) {
	forEachInt8Form(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(16, 8))
		for _, c := range []struct{ N, K, group, bits int }{
			{5, 128, 32, 4}, {303, 4096, 32, 4}, {130, 3072, 64, 4}, {299, 2048, 128, 8}, {3, 8224 * 32, 32, 4},
		} {
			if !HasInt8(c.bits) {
				continue
			}
			for _, f16 := range []bool{false, true} {
				w := randomWeights(rng, c.N, c.K, c.group, c.bits)
				h := halfScales(w, f16)
				x := randomFloats(rng, c.K)
				want, got := make([]float32, c.N), make([]float32, c.N)
				MatVecTInt8(want, x, c.K, w.packed, w.scales, w.biases, c.N, c.group, c.bits)
				h.matVecTInt8(got, x, c.K, w.packed, c.N, c.group, c.bits)
				sameBits(t, fmt.Sprintf("MatVecTInt8 f16=%v bits=%d group=%d N=%d K=%d", f16, c.bits, c.group, c.N, c.K), got, want)
			}
		}
	})
}

// Only the AVX-512 level reads 16-bit scales in its kernels, and only for the lane kernels'
// widths, so only there may a loader keep them compact: elsewhere every product would
// widen them first.
func TestReadsHalfScales(t *testing.T) {
	defer limitSIMD(-1)
	for level := simdLevel(); level >= 0; level-- {
		limitSIMD(level)
		for bits := 2; bits <= 8; bits++ {
			if got := ReadsHalfScales(bits); got && (level < 2 || bits != 2 && bits != 4 && bits != 8) {
				t.Errorf("ReadsHalfScales(%d) = true at %s", bits, levelNames[level])
			}
		}
	}
}

package qmm

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// MatMulTs and MatVecTsInt8 give every matrix what MatMulT and MatVecTInt8 give it alone:
// bit for bit for one row of x (decoding), where a row's result does not depend on which
// core's range holds it; for more rows, where the batched kernels' blocks of rows depend on
// where a range starts (as they do on the number of cores), to float32 rounding of the
// float64 sums. The sets hold a layer's q/k/v-like and gate/up-like shapes, row counts that are
// not multiples of four (a core's range then ends inside a matrix), an empty matrix, and one
// large enough for cores to split it; M covers the matrix-vector kernels and the tiled
// product past fusedMax; scales are float32, bfloat16 and float16.
func TestMatMulTs(t *testing.T) {
	forEachPath(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 7))
		for _, c := range []struct {
			bits, group, K int
			Ns             []int
		}{
			{4, 64, 512, []int{512, 256, 256}},
			{4, 64, 512, []int{302, 210, 100}}, // two cores split inside the second matrix
			{4, 32, 256, []int{6, 13, 0, 7}},
			{8, 64, 576, []int{384, 384}},
			{2, 128, 512, []int{33, 130}},
			{3, 64, 192, []int{9, 40}}, // natural-order kernels
		} {
			ws := make([]*qweights, len(c.Ns))
			for i, n := range c.Ns {
				ws[i] = randomWeights(rng, n, c.K, c.group, c.bits)
			}
			for _, form := range []string{"f32", "bf16", "f16"} {
				var hs []half16
				for _, w := range ws {
					if form != "f32" {
						hs = append(hs, halfScales(w, form == "f16"))
					}
				}
				for _, M := range []int{1, 3, 5, 64, 65} {
					name := fmt.Sprintf("%s bits=%d group=%d K=%d Ns=%v M=%d", form, c.bits, c.group, c.K, c.Ns, M)
					x := randomFloats(rng, M*c.K)
					got := make([][]float32, len(ws))
					for i, w := range ws {
						got[i] = randomFloats(rng, M*w.N) // garbage that must be overwritten
					}
					switch form {
					case "f32":
						MatMulTs(got, x, M, c.K, matrices(ws, func(w *qweights) ([]float32, []float32) { return w.scales, w.biases }), c.group, c.bits)
					case "bf16":
						MatMulTs(got, x, M, c.K, halfMatrices[BF16](ws, hs), c.group, c.bits)
					case "f16":
						MatMulTs(got, x, M, c.K, halfMatrices[F16](ws, hs), c.group, c.bits)
					}
					for i, w := range ws {
						want := make([]float32, M*w.N)
						if form == "f32" {
							MatMulT(want, x, M, c.K, w.packed, w.scales, w.biases, w.N, c.group, c.bits)
						} else {
							hs[i].matMulT(want, x, M, c.K, w.packed, w.N, c.group, c.bits)
						}
						if M == 1 {
							sameBits(t, fmt.Sprintf("%s matrix %d", name, i), got[i], want)
						} else {
							_, mag := w.reference(x, M) // magnitudes (of the values before rounding the scales)
							checkClose(t, fmt.Sprintf("%s matrix %d", name, i), got[i], float64s(want), mag)
						}
					}
					if M > 1 || !HasInt8(c.bits) {
						continue
					}
					for i, w := range ws {
						got[i] = randomFloats(rng, w.N)
					}
					switch form {
					case "f32":
						MatVecTsInt8(got, x, c.K, matrices(ws, func(w *qweights) ([]float32, []float32) { return w.scales, w.biases }), c.group, c.bits)
					case "bf16":
						MatVecTsInt8(got, x, c.K, halfMatrices[BF16](ws, hs), c.group, c.bits)
					case "f16":
						MatVecTsInt8(got, x, c.K, halfMatrices[F16](ws, hs), c.group, c.bits)
					}
					for i, w := range ws {
						want := make([]float32, w.N)
						if form == "f32" {
							MatVecTInt8(want, x, c.K, w.packed, w.scales, w.biases, w.N, c.group, c.bits)
						} else {
							hs[i].matVecTInt8(want, x, c.K, w.packed, w.N, c.group, c.bits)
						}
						sameBits(t, fmt.Sprintf("int8 %s matrix %d", name, i), got[i], want)
					}
				}
			}
		}
	})
}

func matrices(ws []*qweights, sb func(*qweights) ([]float32, []float32)) []Matrix[[]float32] {
	var ms []Matrix[[]float32]
	for _, w := range ws {
		s, b := sb(w)
		ms = append(ms, Matrix[[]float32]{w.packed, s, b, w.N})
	}
	return ms
}

func halfMatrices[S BF16 | F16](ws []*qweights, hs []half16) []Matrix[S] {
	var ms []Matrix[S]
	for i, w := range ws {
		ms = append(ms, Matrix[S]{w.packed, S(hs[i].s), S(hs[i].b), w.N})
	}
	return ms
}

func TestMatMulTsInvalid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	w := randomWeights(rng, 8, 64, 32, 4)
	m := []Matrix[[]float32]{{w.packed, w.scales, w.biases, 8}}
	for name, f := range map[string]func(){
		"outputs": func() {
			MatMulTs([][]float32{make([]float32, 8), make([]float32, 8)}, make([]float32, 64), 1, 64, m, 32, 4)
		},
		"short out": func() { MatMulTs([][]float32{make([]float32, 7)}, make([]float32, 64), 1, 64, m, 32, 4) },
		"short x":   func() { MatMulTs([][]float32{make([]float32, 8)}, make([]float32, 63), 1, 64, m, 32, 4) },
		"short W": func() {
			MatMulTs([][]float32{make([]float32, 16)}, make([]float32, 64), 1, 64, []Matrix[[]float32]{{w.packed, w.scales, w.biases, 16}}, 32, 4)
		},
		"second short W": func() {
			MatMulTs([][]float32{make([]float32, 8), make([]float32, 16)}, make([]float32, 64), 1, 64, append(m, Matrix[[]float32]{w.packed, w.scales, w.biases, 16}), 32, 4)
		},
		"int8 second short out": func() {
			if !MatVecTsInt8([][]float32{make([]float32, 8), make([]float32, 7)}, make([]float32, 64), 64, append(m, m[0]), 32, 4) {
				panic("no int8 kernel here: nothing to check")
			}
		},
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
	// The first matrix of a call that panicked on its second was unpinned: a pinner
	// collected while still pinned would crash the program here.
	runtime.GC()
	runtime.GC()
}

func float64s(a []float32) []float64 {
	r := make([]float64, len(a))
	for i, v := range a {
		r[i] = float64(v)
	}
	return r
}

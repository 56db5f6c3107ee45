package qmm

/*
#include "qmm.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// HasInt8 reports whether MatVecTInt8 runs for bits-bit weights on this CPU: 4 bits on
// x86-64 with AVX2, and 8 bits too with AVX-512 VNNI (on AVX2 the float kernel already streams
// 8-bit weights at the memory's speed: BenchmarkMatVecInt8), unless limitSIMD caps the kernels
// below that.
func HasInt8(bits int) bool {
	switch bits {
	case 4:
		return simdLevel() >= 1
	case 8:
		return useVNNI() == 1
	}
	return false
}

// useVNNI reports whether the AVX-512 VNNI form runs (else the AVX2 one).
func useVNNI() C.int {
	if vnni() && simdLevel() >= 2 {
		return 1
	}
	return 0
}

var vnni = sync.OnceValue(func() bool { return C.qmm_cpu_vnni() != 0 })

// i8Lens are the lengths qmm_prepare_x_i8 writes for K values at bits: activation bytes
// (a chunk of 16 lanes of 32/bits values each takes 64 bytes at 8 bits and 128 at 4, the
// low and high nibbles' halves) and lane scales (16 a chunk).
func i8Lens(K, bits int) (xq, xsl int) {
	chunks := (K + 16*(32/bits) - 1) / (16 * (32 / bits))
	return chunks * 64 * (8 / bits), chunks * 16
}

// i8Scratch holds one call's rounded activations.
type i8Scratch struct {
	xq        []int8
	xsl, xsum []float32
}

var i8Pool sync.Pool

// getI8Scratch returns pooled room for a call's rounded activations: at least xqLen bytes,
// xslLen scales (a decode step's lane scales, or a prompt's block scales) and sumLen group
// sums. Both products draw on one pool.
func getI8Scratch(xqLen, xslLen, sumLen int) *i8Scratch {
	s, _ := i8Pool.Get().(*i8Scratch)
	if s == nil {
		s = &i8Scratch{}
	}
	s.xq, s.xsl, s.xsum = atLeast(s.xq, xqLen), atLeast(s.xsl, xslLen), atLeast(s.xsum, sumLen)
	return s
}

// atLeast is s if it can hold n values, else a new slice that can.
func atLeast[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s
}

// MatVecTInt8 sets out = x · dequant(W)ᵀ for one row x (K values), as MatMulT with M = 1, but
// with x rounded to 8 bits (one scale per 32/bits values) and integer dot products: each
// value of x moves by at most half its scale, and nothing else is rounded differently. It
// returns false, doing nothing, where HasInt8(bits) is false.
func MatVecTInt8[S Scales](out, x []float32, K int, packed []uint32, scales, biases S, N, groupSize, bits int) bool {
	return MatVecTsInt8([][]float32{out}, x, K, []Matrix[S]{{packed, scales, biases, N}}, groupSize, bits)
}

// MatVecTsInt8 is MatVecTInt8 for several matrices that read the same x, as MatMulTs is
// MatMulT for them: x rounded once, the rows of all of them split among cores as one range.
func MatVecTsInt8[S Scales](outs [][]float32, x []float32, K int, ws []Matrix[S], groupSize, bits int) bool {
	if !HasInt8(bits) {
		return false
	}
	all, total := pinAll("MatVecTInt8", outs, ws, 1, K, groupSize, bits)
	defer closeAll(all)
	if len(x) < K {
		panic(fmt.Sprintf("qmm.MatVecTInt8: x has %d values, for K=%d", len(x), K))
	}
	if total == 0 {
		return true
	}
	xqLen, xslLen := i8Lens(K, bits)
	s := getI8Scratch(xqLen, xslLen, K/groupSize)
	defer i8Pool.Put(s)
	xq, xsl, xsum := (*C.int8_t)(unsafe.Pointer(&s.xq[0])), (*C.float)(&s.xsl[0]), (*C.float)(&s.xsum[0])
	C.qmm_prepare_x_i8(&all[0].c, (*C.float)(&x[0]), xq, xsl, xsum)
	form := useVNNI()
	eachRange(all, K*bits/8, func(w *weights, i, n0, n1 int) {
		C.qmm_gemv_t_i8(&w.c, xq, xsl, xsum, C.int(n0), C.int(n1), (*C.float)(&outs[i][0]), form)
	})
	return true
}

// HasInt8Rows reports whether MatMulTsInt8 multiplies more than one row of x on integers on
// this CPU: with AVX-512 VNNI (and BMI2, which every such CPU has), for 4- and 8-bit weights.
// (On AVX2 alone the integer kernel works one row at a time, and prefill's dequantized sgemm
// is faster than that.)
func HasInt8Rows(bits int) bool { return (bits == 4 || bits == 8) && simdLevel() >= 2 && gemmI8() }

// HasInt8For reports whether MatMulTsInt8 runs for M rows of x and bits-bit weights here:
// HasInt8 for one row, HasInt8Rows for more.
func HasInt8For(M, bits int) bool {
	if M == 1 {
		return HasInt8(bits)
	}
	return HasInt8Rows(bits)
}

var gemmI8 = sync.OnceValue(func() bool { return C.qmm_cpu_gemm_i8() != 0 })

// MatMulTsInt8 is MatVecTsInt8 for M rows of x (M, K), outs[i] getting (M, ws[i].N), as
// llama.cpp multiplies its quantized weights by many rows (a prompt): each row rounded to 8
// bits with one scale per block of 32 values (each value moves by at most half its block's
// scale), multiplied by the weights as integers, and the bias term bias·Σx on the unrounded
// x. Each row is rounded alone, so a row's result does not depend on the other rows of the
// call. One row is MatVecTsInt8's (finer: a scale per 32/bits values). It returns false,
// doing nothing, where the CPU has no kernel for the call (HasInt8For).
func MatMulTsInt8[S Scales](outs [][]float32, x []float32, M, K int, ws []Matrix[S], groupSize, bits int) bool {
	if !HasInt8For(M, bits) {
		return false
	}
	if M == 1 {
		return MatVecTsInt8(outs, x, K, ws, groupSize, bits)
	}
	all, total := pinAll("MatMulTsInt8", outs, ws, M, K, groupSize, bits)
	defer closeAll(all)
	if len(x) < M*K || M < 0 {
		panic(fmt.Sprintf("qmm.MatMulTsInt8: x has %d values, for M=%d K=%d", len(x), M, K))
	}
	if M == 0 || total == 0 {
		return true
	}
	G, NB := K/groupSize, K/32
	s := getI8Scratch(M*K, M*NB, M*G)
	defer i8Pool.Put(s)
	parallel(M, 1, 8*K, func(lo, hi int) {
		for m := lo; m < hi; m++ {
			C.qmm_prepare_x_q8((*C.float)(&x[m*K]), C.int(K), C.int(groupSize), (*C.int8_t)(unsafe.Pointer(&s.xq[m*K])),
				(*C.float)(&s.xsl[m*NB]), (*C.float)(&s.xsum[m*G]))
		}
	})
	xq, xs, xsum := (*C.int8_t)(unsafe.Pointer(&s.xq[0])), (*C.float)(&s.xsl[0]), (*C.float)(&s.xsum[0])
	eachRange(all, M*K*bits/8, func(w *weights, i, n0, n1 int) {
		if C.qmm_gemm_t_i8(&w.c, xq, xs, xsum, C.int(M), C.int(n0), C.int(n1), (*C.float)(&outs[i][0]), C.int(w.N)) != 0 {
			panic("qmm.MatMulTsInt8: out of memory for a panel of W")
		}
	})
	return true
}

// int8OnThisThread is kernelOnThisThread for the 8-bit-activation kernel.
func int8OnThisThread(w *weights, x []float32) func(out []float32) {
	nq, nsl := i8Lens(w.K, int(w.c.bits))
	xq, xsl := make([]int8, nq), make([]float32, nsl)
	xsum := make([]float32, w.K/int(w.c.group))
	C.qmm_prepare_x_i8(&w.c, (*C.float)(&x[0]), (*C.int8_t)(unsafe.Pointer(&xq[0])), (*C.float)(&xsl[0]), (*C.float)(&xsum[0]))
	return func(out []float32) {
		C.qmm_gemv_t_i8(&w.c, (*C.int8_t)(unsafe.Pointer(&xq[0])), (*C.float)(&xsl[0]), (*C.float)(&xsum[0]), 0, C.int(w.N), (*C.float)(&out[0]), useVNNI())
	}
}

package qmm

/*
#include "qmm.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Products with W in 16-bit floats (half.c): a bfloat16 or float16 checkpoint's matrices
// kept at their own width, so a decode step streams half the bytes a float32 copy would.

// halfFusedMax is the crossover from the fused kernel to widened tiles and sgemm, in rows
// of x, for x @ W^T: the fused kernel does one FMA per weight and row, sgemm several times
// more per cycle once enough rows share each tile. The fused kernel takes four rows of W
// against four of x at a time and sums its sixteen accumulators across lanes together, and
// so keeps up to 128 rows. BenchmarkHalfCrossover on a 2-core AVX-512 slice, µs per row
// fused / tiled: 3072 × 1024 47 / 140 at 16 rows, 40 / 57 at 64, 35 / 40 at 128, 40 / 39
// at 256; 4096 × 4096 209 / 265 at 64, 177 / 215 at 128, 175 / 168 at 256; 4096 × 192
// about even from 64 rows. Accelerate's sgemm takes over early on macOS, as in fusedMax.
func halfFusedMax() int {
	if runtime.GOOS == "darwin" {
		return 4
	}
	return 128
}

// halfFusedNMax is halfFusedMax for x @ W (HalfMatMul), whose fused kernel
// broadcasts x and reads whole lines of W's rows, nothing to reduce across
// lanes: it keeps up with widened tiles and sgemm to more rows. µs per row
// fused / tiled, same slice: 3072 × 1024 32 / 40 at 64 rows, 29 / 26 at 128;
// 4096 × 4096 185 / 193 at 64; 4096 × 192 7.9 / 6.6 at 64. Qwen3-0.6B's
// output projection (151,936 × 1024) at 64 rows: 87 / 117 ms.
func halfFusedNMax() int {
	if runtime.GOOS == "darwin" {
		return 4
	}
	return 64
}

func checkHalf(op string, w []uint16, N, K int) {
	if N < 0 || K <= 0 || len(w) < N*K {
		panic(fmt.Sprintf("qmm.%s: W (%d, %d) needs %d values, got %d", op, N, K, max(N*K, 0), len(w)))
	}
}

func hp(w []uint16) *C.uint16_t { return (*C.uint16_t)(unsafe.Pointer(unsafe.SliceData(w))) }
func fp(v []float32) *C.float   { return (*C.float)(unsafe.Pointer(unsafe.SliceData(v))) }

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// HalfMatMulT sets out = x @ W^T: W is (N, K) in 16-bit floats (bfloat16, or IEEE half
// when f16), x is (M, K), out is (M, N), all row-major. A few rows of x (decoding) stream W
// once through a kernel that widens it as it reads, split over cores by rows of W; more
// rows (prefill, training) widen tiles of W for sgemm. It panics on inconsistent shapes.
func HalfMatMulT(out, x []float32, M, K int, w []uint16, N int, f16 bool) {
	checkHalf("HalfMatMulT", w, N, K)
	if len(x) < M*K || len(out) < M*N || M < 0 {
		panic(fmt.Sprintf("qmm.HalfMatMulT: x has %d values, out %d, for M=%d K=%d N=%d", len(x), len(out), M, K, N))
	}
	if M == 0 || N == 0 {
		return
	}
	if M <= halfFusedMax() {
		halfFused(out, x, M, K, w, N, f16)
	} else {
		halfTiled(out, x, M, K, w, N, f16)
	}
}

// halfFused streams W once, split over cores by rows, for all M rows of x.
func halfFused(out, x []float32, M, K int, w []uint16, N int, f16 bool) {
	parallel(N, 4, M*K*2, func(n0, n1 int) {
		C.qmm_half_gemv_t_batch(hp(w), C.int(K), cbool(f16), fp(x), C.int(M), C.int(n0), C.int(n1), fp(out), C.int(N))
	})
}

// halfTiled computes out = x @ W^T one widened tile of W's rows at a time.
func halfTiled(out, x []float32, M, K int, w []uint16, N int, f16 bool) {
	tilesT(out, x, M, K, N, widener(w, K, f16))
}

// widener fills tiles with rows of a 16-bit W (N, K) widened.
func widener(w []uint16, K int, f16 bool) tileFiller {
	return func(tile []float32, n0, n1 int) {
		C.qmm_half_widen(hp(w[n0*K:]), C.long((n1-n0)*K), cbool(f16), fp(tile))
	}
}

// HalfMatMul sets out = x @ W: W is (N, K) as in HalfMatMulT, x is (M, N), out is (M, K).
// It is the backward of HalfMatMulT with respect to x: for a few rows of x W is read once
// per block of rows and widened as it is read, split over cores by columns; more rows widen
// tiles of W for sgemm.
func HalfMatMul(out, x []float32, M, N int, w []uint16, K int, f16 bool) {
	checkHalf("HalfMatMul", w, N, K)
	if len(x) < M*N || len(out) < M*K || M < 0 {
		panic(fmt.Sprintf("qmm.HalfMatMul: x has %d values, out %d, for M=%d N=%d K=%d", len(x), len(out), M, N, K))
	}
	if M == 0 {
		return
	}
	if N == 0 {
		clear(out[:M*K])
		return
	}
	if M <= halfFusedNMax() {
		halfFusedN(out, x, M, N, w, K, f16)
		return
	}
	tilesN(out, x, M, N, K, widener(w, K, f16))
}

// halfFusedN is x @ W through the fused kernel, split over cores by blocks of 32 columns.
func halfFusedN(out, x []float32, M, N int, w []uint16, K int, f16 bool) {
	parallel(K, 32, N*2, func(k0, k1 int) {
		C.qmm_half_gemm_n(hp(w), C.int(N), C.int(K), cbool(f16), fp(x), C.int(M), C.int(k0), C.int(k1), fp(out))
	})
}

// HalfWiden sets dst[i] to src[i] widened to float32 (exact), on all cores.
func HalfWiden(dst []float32, src []uint16, f16 bool) {
	if len(dst) != len(src) {
		panic(fmt.Sprintf("qmm.HalfWiden: %d values into %d", len(src), len(dst)))
	}
	parallel(len(src), 64, 6, func(lo, hi int) {
		C.qmm_half_widen(hp(src[lo:]), C.long(hi-lo), cbool(f16), fp(dst[lo:]))
	})
}

// HasBF16Rows reports whether HalfMatMulTBF16 runs here: AVX-512 with BF16 on AMD (Zen 4 and
// later), unless limitSIMD caps the kernels below AVX-512. Intel processors have the
// instructions too (Cooper Lake, Sapphire Rapids and later), but there the kernel lost to
// OpenBLAS's float32 sgemm over the widened weights: on a 2-core Emerald Rapids slice a
// 512-token prompt of SmolLM2-135M's and Qwen3-0.6B's shapes read at 0.64-0.85 of exact
// prefill's speed in four runs, where AMD's read 1.5-2.2 times faster. So it is off there,
// and prompts are read exactly.
func HasBF16Rows() bool { return simdLevel() >= 2 && bf16Dot() && (bf16Pays() || bf16Forced) }

var (
	bf16Dot  = sync.OnceValue(func() bool { return C.qmm_cpu_bf16() != 0 })
	bf16Pays = sync.OnceValue(func() bool { return C.qmm_cpu_amd() != 0 })
	// bf16Forced runs the kernel where it does not pay, for its tests and benchmarks.
	bf16Forced bool
)

var bf16Pool sync.Pool

// HalfMatMulTBF16 is HalfMatMulT for a bfloat16 W and many rows of x, with each value of x
// rounded to bfloat16 (to nearest, ties even: it moves by at most 2⁻⁹ of itself) and
// multiplied by W's values in pairs with AVX-512 BF16, as llama.cpp multiplies its BF16
// weights. Products of two bfloat16 values are exact, so only x's rounding (and subnormal
// values, read and written as zero) differs from HalfMatMulT. Each row is rounded alone: a
// row's result does not depend on the other rows of the call. It returns false, doing
// nothing, where HasBF16Rows is false.
func HalfMatMulTBF16(out, x []float32, M, K int, w []uint16, N int) bool {
	if !HasBF16Rows() {
		return false
	}
	checkHalf("HalfMatMulTBF16", w, N, K)
	if len(x) < M*K || len(out) < M*N || M < 0 {
		panic(fmt.Sprintf("qmm.HalfMatMulTBF16: x has %d values, out %d, for M=%d K=%d N=%d", len(x), len(out), M, K, N))
	}
	if M == 0 || N == 0 {
		return true
	}
	ldx := (K + 1) &^ 1
	p, _ := bf16Pool.Get().(*[]uint16)
	if p == nil {
		p = new([]uint16)
	}
	defer bf16Pool.Put(p)
	*p = atLeast(*p, M*ldx)
	xb := *p
	parallel(M, 1, 2*K, func(lo, hi int) {
		for m := lo; m < hi; m++ {
			C.qmm_round_bf16(fp(x[m*K:]), C.long(K), hp(xb[m*ldx:]))
		}
	})
	parallel(N, 32, M*K, func(n0, n1 int) {
		if C.qmm_gemm_t_bf16(hp(w), C.int(K), hp(xb), C.int(M), C.int(n0), C.int(n1), fp(out), C.int(N)) != 0 {
			panic("qmm.HalfMatMulTBF16: out of memory for a panel of W")
		}
	})
	return true
}

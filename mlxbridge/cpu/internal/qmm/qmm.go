// Package qmm is the cpu backend's quantized matrix product: out = x @ dequant(W)^T and its
// transpose, over weights in MLX's affine format (see package quant), without ever
// materializing the whole dequantized W.
//
// Decoding a token multiplies one activation row by every weight matrix, so that case (M
// small) is a matrix-vector product bounded by how fast the packed weights stream from memory
// and are decoded. C kernels read each packed word once, split over cores by rows of W, and
// use dot(w_g, x_g) = s*dot(q_g, x_g) + b*sum(x_g) per group: AVX-512 or AVX2+FMA on x86-64,
// chosen at run time, for 2, 4 and 8 bits; portable C written for the compiler to vectorize
// (NEON on arm64) for those and every other width. Prefill and training (M large) are compute
// bound: tiles of W are dequantized into a scratch buffer and multiplied by package blas's
// sgemm (OpenBLAS, Accelerate on macOS), so they run near sgemm speed. Where the caller
// accepts 8-bit activations (MatVecTsInt8 for a decode step, MatMulTsInt8 for many rows:
// int8.c, vnni.c, gemm_i8.c), x is rounded to int8 and multiplied by the packed weights
// with integer dot products, as llama.cpp multiplies its quantized weights: for many rows on
// AVX-512 VNNI, two to three times dequantized sgemm's speed (BenchmarkMatMulTInt8).
//
// The same two regimes serve a W held in 16-bit floats, a bfloat16 or float16 checkpoint's
// own width (half.go), and decoding's product with a float32 W (MatVecT, rows.c): W's rows
// read in order, four runs of them side by side per core on AVX-512.
package qmm

/*
#cgo CFLAGS: -O3 -std=gnu11
#include "qmm.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/inloop/inloop/mlxbridge/cpu/internal/blas"
	"github.com/inloop/inloop/mlxbridge/cpu/internal/par"
)

// Crossovers from the fused matrix-vector kernels to dequantize-and-sgemm, in rows of x. On
// x86-64 with OpenBLAS, measured at 4096x4096 on a 2-core AVX-512 slice (see
// BenchmarkCrossover): the fused kernels win up to 64 rows for x @ W^T (µs a row fused /
// tiled, 4-bit 246 / 434 at 32 rows, 222-262 / 257-266 at 64, 212-216 / 207-214 at 128;
// 8-bit 287 / 479, 266-278 / 277-295 and 242-253 / 210), now that blocks of four rows of x
// take two rows of W at a time, and about 8 for x @ W (on a 2-core Xeon slice, with a slower
// sgemm, they won up to 64 for both). On macOS, Accelerate's sgemm runs on the matrix
// coprocessor at several times NEON's speed, so sgemm takes over early; that value is an
// estimate, not a measurement.
//
// A vocabulary-sized W (an LM head, a tied embedding: N in the tens of thousands) is
// another matter: dequantizing all of it costs more than the fused kernels' extra
// arithmetic until far more rows. On a 2-core AMD EPYC slice (AVX-512) at Qwen3-0.6B's head (151,936 ×
// 1024, 4-bit) the fused kernels took 47 / 64 ms at 33 rows against 106 / 156 ms
// dequantized (x @ W^T / x @ W), and 92 / 98 against 122 / 158 at 64; they are even at
// about 96. Training and decision scoring put 16–100 rows through the head.
func fusedMax(wT bool, n int) int {
	if runtime.GOOS == "darwin" {
		return 4
	}
	if n >= vocabRows {
		return 64
	}
	if wT {
		return 64
	}
	return 8
}

// vocabRows is where a W counts as vocabulary-sized (fusedMax).
const vocabRows = 32768

// weights is a validated W with its slices pinned, so the C struct may point into them.
type weights struct {
	c      C.qmm_w
	N, K   int
	pinner runtime.Pinner
}

// Scales are a quantized W's scales or biases: float32, or a 16-bit checkpoint's own
// bfloat16 (BF16) or float16 (F16) bits, which the kernels read at that width.
type Scales interface{ []float32 | BF16 | F16 }

// BF16 holds bfloat16 scales or biases, F16 float16 ones, as their bits.
type (
	BF16 []uint16
	F16  []uint16
)

func newWeights[S Scales](op string, packed []uint32, scales, biases S, N, K, groupSize, bits int) *weights {
	if bits < 2 || bits > 8 {
		panic(fmt.Sprintf("qmm.%s: %d bits outside 2..8", op, bits))
	}
	if groupSize != 32 && groupSize != 64 && groupSize != 128 {
		panic(fmt.Sprintf("qmm.%s: group size %d is not 32, 64 or 128", op, groupSize))
	}
	if N < 0 || K <= 0 || K%groupSize != 0 {
		panic(fmt.Sprintf("qmm.%s: W shape (%d, %d) with group %d", op, N, K, groupSize))
	}
	words, groups := K*bits/32, K/groupSize
	if len(packed) < N*words || len(scales) < N*groups || len(biases) < N*groups {
		panic(fmt.Sprintf("qmm.%s: W (%d, %d) at %d bits needs %d words and %d scales and biases, got %d, %d, %d",
			op, N, K, bits, N*words, N*groups, len(packed), len(scales), len(biases)))
	}
	w := &weights{N: N, K: K}
	w.c = C.qmm_w{K: C.int(K), group: C.int(groupSize), bits: C.int(bits)}
	if N == 0 {
		return w
	}
	w.pinner.Pin(&packed[0])
	w.c.packed = (*C.uint32_t)(unsafe.Pointer(&packed[0]))
	switch s := any(scales).(type) {
	case []float32:
		b := any(biases).([]float32)
		w.pinner.Pin(&s[0])
		w.pinner.Pin(&b[0])
		w.c.scales, w.c.biases = (*C.float)(&s[0]), (*C.float)(&b[0])
	case BF16:
		w.half(s, any(biases).(BF16), false)
	case F16:
		w.half(s, any(biases).(F16), true)
	}
	return w
}

// half points w at 16-bit scales and biases.
func (w *weights) half(s, b []uint16, f16 bool) {
	w.pinner.Pin(&s[0])
	w.pinner.Pin(&b[0])
	w.c.scales16, w.c.biases16 = hp(s), hp(b)
	w.c.f16 = cbool(f16)
}

func (w *weights) close() { w.pinner.Unpin() }

// MatMulT sets out = x @ dequant(W)^T: x is (M, K), W is (N, K) stored as packed
// (N, K*bits/32) words and (N, K/groupSize) scales and biases (float32, or BF16 or F16
// bits read at that width), out is (M, N). All row-major.
// bits may be 2..8; groupSize 32, 64 or 128. It panics on inconsistent shapes.
func MatMulT[S Scales](out, x []float32, M, K int, packed []uint32, scales, biases S, N, groupSize, bits int) {
	w := newWeights("MatMulT", packed, scales, biases, N, K, groupSize, bits)
	defer w.close()
	if len(x) < M*K || len(out) < M*N || M < 0 {
		panic(fmt.Sprintf("qmm.MatMulT: x has %d values, out %d, for M=%d K=%d N=%d", len(x), len(out), M, K, N))
	}
	if M == 0 || N == 0 {
		return
	}
	if M <= fusedMax(true, N) {
		gemvT([]*weights{w}, [][]float32{out}, x, M)
	} else {
		tiledT(w, out, x, M)
	}
}

// MatMul sets out = x @ dequant(W): W is (N, K) as in MatMulT, x is (M, N), out is (M, K). It
// is the backward of MatMulT with respect to x. It panics on inconsistent shapes.
func MatMul[S Scales](out, x []float32, M, N int, packed []uint32, scales, biases S, K, groupSize, bits int) {
	w := newWeights("MatMul", packed, scales, biases, N, K, groupSize, bits)
	defer w.close()
	if len(x) < M*N || len(out) < M*K || M < 0 {
		panic(fmt.Sprintf("qmm.MatMul: x has %d values, out %d, for M=%d N=%d K=%d", len(x), len(out), M, N, K))
	}
	if M == 0 {
		return
	}
	if N == 0 {
		clear(out[:M*K])
		return
	}
	if M <= fusedMax(false, N) {
		gemv(w, out, x, M)
	} else {
		tiled(w, out, x, M)
	}
}

// scratch holds a call's prepared activations; pooled so decoding allocates nothing.
type scratch struct{ xp, xsum []float32 }

var scratchPool sync.Pool

// getScratch returns buffers of at least the given lengths, xp aligned to 64 bytes so the
// kernels' vector loads of it never straddle cache lines.
func getScratch(xpLen, xsumLen int) *scratch {
	s, _ := scratchPool.Get().(*scratch)
	if s == nil {
		s = &scratch{}
	}
	if cap(s.xp) < xpLen {
		s.xp = alignedFloats(xpLen)
	}
	if cap(s.xsum) < xsumLen {
		s.xsum = make([]float32, xsumLen)
	}
	return s
}

// alignedFloats returns n floats starting on a 64-byte boundary.
func alignedFloats(n int) []float32 {
	buf := make([]float32, n+16)
	off := int(uintptr(unsafe.Pointer(&buf[0]))%64) / 4
	if off != 0 {
		off = 16 - off
	}
	return buf[off : off+n : off+n]
}

// Matrix is one W of MatMulTs and MatVecTsInt8: packed words, scales and biases as
// MatMulT takes them, and its N rows.
type Matrix[S Scales] struct {
	Packed         []uint32
	Scales, Biases S
	N              int
}

// MatMulTs sets outs[i] = x @ dequant(ws[i])^T for matrices of the same K, group size and
// bits that read the same x: a layer's query, key and value projections, or its gate and up
// projections. Where M is small enough for the fused kernels (decoding), x is prepared once
// and the rows of all the matrices are split among the cores as one range, so they are
// handed to the cores once and small matrices stream as one large one does; otherwise each
// is MatMulT's tiled product. It panics on inconsistent shapes.
func MatMulTs[S Scales](outs [][]float32, x []float32, M, K int, ws []Matrix[S], groupSize, bits int) {
	all, total := pinAll("MatMulTs", outs, ws, M, K, groupSize, bits)
	defer closeAll(all)
	if len(x) < M*K || M < 0 {
		panic(fmt.Sprintf("qmm.MatMulTs: x has %d values, for M=%d K=%d", len(x), M, K))
	}
	if M == 0 || total == 0 {
		return
	}
	if M <= fusedMax(true, total) {
		gemvT(all, outs, x, M)
		return
	}
	for i, w := range all {
		if w.N > 0 {
			tiledT(w, outs[i], x, M)
		}
	}
}

// pinAll validates and pins every matrix of a several-matrix call (op), each with room in
// outs for M rows of its output, and returns them and their rows in all. On a panic those
// already pinned are released; otherwise the caller closes them (closeAll).
func pinAll[S Scales](op string, outs [][]float32, ws []Matrix[S], M, K, groupSize, bits int) ([]*weights, int) {
	if len(outs) != len(ws) {
		panic(fmt.Sprintf("qmm.%s: %d outputs for %d matrices", op, len(outs), len(ws)))
	}
	all, total, ok := make([]*weights, len(ws)), 0, false
	defer func() {
		if !ok {
			closeAll(all)
		}
	}()
	for i, m := range ws {
		all[i] = newWeights(op, m.Packed, m.Scales, m.Biases, m.N, K, groupSize, bits)
		if len(outs[i]) < M*m.N {
			panic(fmt.Sprintf("qmm.%s: out %d has %d values, for M=%d N=%d", op, i, len(outs[i]), M, m.N))
		}
		total += m.N
	}
	ok = true
	return all, total
}

// closeAll closes the weights of ws that were made.
func closeAll(ws []*weights) {
	for _, w := range ws {
		if w != nil {
			w.close()
		}
	}
}

// gemvT runs the fused kernel over the rows of every W in ws, outs[i] getting ws[i]'s, the
// rows of all of them split among cores as one range; each core reads its rows once for all
// M rows of x, which is prepared once.
func gemvT(ws []*weights, outs [][]float32, x []float32, M int) {
	w0 := ws[0]
	K, G := w0.K, w0.K/int(w0.c.group)
	xpLen := int(C.qmm_xp_len(C.int(K), w0.c.bits))
	s := getScratch(M*xpLen, M*G)
	defer scratchPool.Put(s)
	xp, xsum := (*C.float)(&s.xp[0]), (*C.float)(&s.xsum[0])
	for m0 := 0; m0 < M; m0 += 4 {
		C.qmm_prepare_x(&w0.c, (*C.float)(&x[m0*K]), C.int(K), C.int(min(4, M-m0)),
			(*C.float)(&s.xp[m0*xpLen]), (*C.float)(&s.xsum[m0*G]))
	}
	eachRange(ws, M*K*int(w0.c.bits)/8, func(w *weights, i, n0, n1 int) {
		C.qmm_gemv_t_batch(&w.c, xp, xsum, C.int(M), C.int(n0), C.int(n1), (*C.float)(&outs[i][0]), C.int(w.N))
	})
}

// eachRange splits the rows of all of ws, taken one after another, among cores and calls f
// for the part of each matrix a core's range covers, rows [n0, n1) of ws[i]. Each matrix
// starts at a multiple of 4 and the ranges are cut at multiples of 4, so n0 is always one:
// the matrix-vector kernels take rows four at a time and the rest one by one, which round
// differently, so for up to four rows of x (decoding) a row's result is the same whichever
// range holds it and however many matrices share the call. (The batched kernels for more
// rows work in blocks of sixteen rows of W from a range's start, so theirs may differ in
// the last bits, as they do with the number of cores.)
func eachRange(ws []*weights, costPerRow int, f func(w *weights, i, n0, n1 int)) {
	total := 0
	for _, w := range ws {
		total += (w.N + 3) / 4 * 4
	}
	parallel(total, 4, costPerRow, func(lo, hi int) {
		base := 0
		for i, w := range ws {
			if n0, n1 := max(lo, base), min(hi, base+w.N); n0 < n1 {
				f(w, i, n0-base, n1-base)
			}
			base += (w.N + 3) / 4 * 4
		}
	})
}

// gemv runs the fused transposed kernel. Each core takes a range of W's rows, streaming them
// in order, and sums their contributions to all of out into its own buffer (the first core
// into out itself); the buffers are added at the end.
func gemv(w *weights, out, x []float32, M int) {
	K, N, G := w.K, w.N, w.K/int(w.c.group)
	for m0 := 0; m0 < M; m0 += 4 {
		mb := min(4, M-m0)
		ranges := split(N, 4, mb*K*int(w.c.bits)/8)
		parts := make([][]float32, len(ranges))
		parts[0] = out[m0*K : (m0+mb)*K]
		for i := 1; i < len(parts); i++ {
			parts[i] = make([]float32, mb*K)
		}
		xm := (*C.float)(&x[m0*N])
		run(ranges, func(i, n0, n1 int) {
			scratch := make([]float32, mb*(int(C.qmm_xp_len(C.int(K), w.c.bits))+G))
			C.qmm_gemv(&w.c, C.int(n0), C.int(n1), xm, C.int(N), C.int(mb), (*C.float)(&parts[i][0]), C.int(K), (*C.float)(&scratch[0]))
		})
		for _, p := range parts[1:] {
			addTo(parts[0], p)
		}
	}
}

// tileBytes bounds the dequantized tile of W handed to sgemm: large enough that sgemm runs at
// full speed, small enough to stay in the last-level cache between dequantizing and use.
const tileBytes = 4 << 20

func tileRows(K int) int { return max(32, min(512, tileBytes/(4*K))/32*32) }

// dequantTile dequantizes rows [n0, n1) of W into buf.
func dequantTile(w *weights) tileFiller {
	return func(buf []float32, n0, n1 int) {
		C.qmm_dequant(&w.c, C.int(n0), C.int(n1), (*C.float)(&buf[0]))
	}
}

// tilePool recycles the dequantized tiles (megabytes each), which would otherwise be
// allocated and cleared on every call.
var tilePool sync.Pool

func getTile(n int) []float32 {
	if t, _ := tilePool.Get().([]float32); cap(t) >= n {
		return t[:n]
	}
	return make([]float32, n)
}

// tiledT computes out = x @ dequant(W)^T one dequantized tile of W's rows at a time.
func tiledT(w *weights, out, x []float32, M int) { tilesT(out, x, M, w.K, w.N, dequantTile(w)) }

// tiled computes out = x @ dequant(W) one dequantized tile of W's rows at a time.
func tiled(w *weights, out, x []float32, M int) { tilesN(out, x, M, w.N, w.K, dequantTile(w)) }

// A tile filler writes rows [n0, n1) of a W (N, K) held otherwise (packed, 16-bit) into
// tile as float32, row-major, on the calling goroutine.
type tileFiller func(tile []float32, n0, n1 int)

// Where package blas cuts products over the cores (Linux), each core takes rows of W of its
// own, fills a tile of them and multiplies it single-threaded, a tile at a time: no hand-over
// per tile, and every tile is used from the cache of the core that wrote it. Handing each
// shared tile to sgemm split over the cores ran a 64-row product at half the speed of sgemm
// on float32 W (BenchmarkTiles). Where BLAS threads its own calls (macOS), tiles are
// filled on all cores and handed to it whole.

// tilesT computes out = x @ W^T a tile of W's rows at a time: out[:, n0:n1] = x @ tile^T.
func tilesT(out, x []float32, M, K, N int, fill tileFiller) {
	if !blas.Splits() {
		eachTile(N, K, fill, func(n0, n1 int, tile []float32) {
			blas.Sgemm(false, true, M, n1-n0, K, x, K, tile, K, 0, out[n0:], N)
		})
		return
	}
	T := coreTileRows(K)
	parallel(N, 32, M*K, func(lo, hi int) {
		tile := getTile(T * K)
		defer tilePool.Put(tile)
		for n0 := lo; n0 < hi; n0 += T {
			n1 := min(n0+T, hi)
			fill(tile, n0, n1)
			blas.SgemmOne(false, true, M, n1-n0, K, x, K, tile, K, 0, out[n0:], N)
		}
	})
}

// tilesN computes out = x @ W (x is (M, N)) a tile of W's rows at a time, accumulating out
// += x[:, n0:n1] @ tile. Per core, each core sums its rows' share into a buffer of its own
// (the first into out), added up at the end; when those buffers would be large (many rows of
// x) the tiles are shared instead.
func tilesN(out, x []float32, M, N, K int, fill tileFiller) {
	ranges := split(N, 32, M*K)
	if !blas.Splits() || len(ranges) < 2 || M*K > partialMax {
		eachTile(N, K, fill, func(n0, n1 int, tile []float32) {
			beta := float32(1)
			if n0 == 0 {
				beta = 0
			}
			blas.Sgemm(false, false, M, K, n1-n0, x[n0:], N, tile, K, beta, out, K)
		})
		return
	}
	T := coreTileRows(K)
	parts := make([][]float32, len(ranges))
	run(ranges, func(i, lo, hi int) {
		part := out[:M*K]
		if i > 0 {
			part = getTile(M * K)
			parts[i] = part
		}
		tile := getTile(T * K)
		defer tilePool.Put(tile)
		for n0 := lo; n0 < hi; n0 += T {
			n1 := min(n0+T, hi)
			fill(tile, n0, n1)
			beta := float32(1)
			if n0 == lo {
				beta = 0
			}
			blas.SgemmOne(false, false, M, K, n1-n0, x[n0:], N, tile, K, beta, part, K)
		}
	})
	for _, p := range parts[1:] {
		addTo(out[:M*K], p)
		tilePool.Put(p)
	}
}

// partialMax bounds, in floats, the per-core partial sums tilesN keeps (16 MiB each: a
// 512-token row's input gradient through Qwen3-0.6B's down projection takes 6).
const partialMax = 1 << 22

// coreTileRows is the rows of a tile one core fills and multiplies: half the shared tile.
func coreTileRows(K int) int { return max(16, min(256, tileBytes/2/(4*K))/16*16) }

// addTo sets dst += src.
func addTo(dst, src []float32) {
	parallel(len(dst), 64, 12, func(lo, hi int) {
		d, s := dst[lo:hi], src[lo:hi]
		for i := range d {
			d[i] += s[i]
		}
	})
}

// eachTile hands f rows [n0, n1) of W filled in as float32 (on all cores), a tile at a
// time, in order.
func eachTile(N, K int, fill tileFiller, f func(n0, n1 int, tile []float32)) {
	T := tileRows(K)
	buf := getTile(T * K)
	defer tilePool.Put(buf)
	for n0 := 0; n0 < N; n0 += T {
		n1 := min(n0+T, N)
		parallel(n1-n0, 8, K, func(a, b int) { fill(buf[a*K:], n0+a, n0+b) })
		f(n0, n1, buf)
	}
}

// split cuts [0, n) into contiguous ranges, multiples of align except the last, one per core.
// costPerItem (bytes touched per item) keeps small problems on one core: below about 64 KiB
// per core, waking another one costs more than it saves.
func split(n, align, costPerItem int) [][2]int {
	const minWork = 1 << 16
	workers := min(par.Cores(), (n+align-1)/align, max(1, n*costPerItem/minWork))
	ranges := make([][2]int, 0, workers)
	for i := range workers {
		if lo, hi := par.Bounds(n, align, workers, i); hi > lo {
			ranges = append(ranges, [2]int{lo, hi})
		}
	}
	return ranges
}

// run calls fn(i, lo, hi) for every range concurrently, the first on the calling goroutine.
func run(ranges [][2]int, fn func(i, lo, hi int)) {
	par.Run(len(ranges), func(i int) { fn(i, ranges[i][0], ranges[i][1]) })
}

// parallel runs fn over split(n, align, costPerItem).
func parallel(n, align, costPerItem int, fn func(lo, hi int)) {
	run(split(n, align, costPerItem), func(_, lo, hi int) { fn(lo, hi) })
}

// limitSIMD caps the kernel level (2 AVX-512, 1 AVX2, 0 portable; -1 lifts the cap); tests
// use it to cover every path on one machine.
func limitSIMD(level int) { C.qmm_limit_simd(C.int(level)) }

// ReadsHalfScales reports whether decoding's kernels read BF16 and F16 scales and biases
// of bits-bit weights in their own loops here (2, 4 and 8 bits, AVX-512 with BW): only
// then are 16-bit scales as fast as float32 ones or faster. Elsewhere they are widened a
// tile at a time, which is slower.
func ReadsHalfScales(bits int) bool {
	return (bits == 2 || bits == 4 || bits == 8) && C.qmm_reads_half_scales() != 0
}

// simdLevel reports the kernel level in use.
func simdLevel() int { return int(C.qmm_simd()) }

// sumFloats sums a in C at memory speed; benchmarks use it to measure read bandwidth.
func sumFloats(a []float32) float32 {
	return float32(C.qmm_sum_floats((*C.float)(&a[0]), C.long(len(a))))
}

// kernelOnThisThread prepares one row x for the matrix-vector kernel and returns a function
// that runs the kernel over all of W's rows on the calling thread; benchmarks use it.
func kernelOnThisThread(w *weights, x []float32) func(out []float32) {
	xp := alignedFloats(int(C.qmm_xp_len(C.int(w.K), w.c.bits)))
	xsum := make([]float32, w.K/int(w.c.group))
	C.qmm_prepare_x(&w.c, (*C.float)(&x[0]), C.int(w.K), 1, (*C.float)(&xp[0]), (*C.float)(&xsum[0]))
	return func(out []float32) {
		C.qmm_gemv_t(&w.c, (*C.float)(&xp[0]), (*C.float)(&xsum[0]), 1, 0, C.int(w.N), (*C.float)(&out[0]), C.int(w.N))
	}
}

// streamedMin is the work (items × cost) from which streamed hands out chunks instead of
// one range a core: the large matrices of a decode step (Qwen3-0.6B's in float32, 4 to 12
// MB, and any model's output projection).
const streamedMin = 8 << 20

// streamed is parallel for a memory-bound loop (a decode step's matrix-vector product): a
// large one is cut into four chunks a core, which the cores take in turn, so that a core
// slowed by the other's memory traffic does fewer of them instead of leaving the other
// waiting at the end. Qwen3-0.6B float32 decode, alternated in one process with halves a
// core: 1.06-1.15x in three runs; SmolLM2-135M (all its block's matrices under
// streamedMin, so only its output projection is chunked) unchanged.
func streamed(n, align, costPerItem int, fn func(lo, hi int)) {
	parts := len(split(n, align, costPerItem))
	if parts <= 1 || n*costPerItem < streamedMin {
		parallel(n, align, costPerItem, fn)
		return
	}
	chunks := min(parts*4, (n+align-1)/align)
	var next atomic.Int32
	par.Run(parts, func(int) {
		for c := int(next.Add(1)) - 1; c < chunks; c = int(next.Add(1)) - 1 {
			if lo, hi := par.Bounds(n, align, chunks, c); hi > lo {
				fn(lo, hi)
			}
		}
	})
}

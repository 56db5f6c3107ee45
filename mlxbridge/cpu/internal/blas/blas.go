// Package blas is the cpu backend's one door to the system BLAS (OpenBLAS on Linux,
// Accelerate on macOS): single-precision GEMM and GEMV, split over the cores here, in Go.
//
// Why not let OpenBLAS thread its own calls: the backend already runs attention heads,
// elementwise passes and the quantized kernels on goroutines, and OpenBLAS's pthreads
// spin (sched_yield) for a while after every call waiting for the next one. On a 2-core
// machine those spinning threads took the cores from the goroutines that had work: 25% of
// a prefill's samples were OpenBLAS threads yielding, and with any other load on the
// machine (a browser, a build) a 2.4M-parameter model prefilled 11 tokens in 190 ms. So on
// Linux OpenBLAS is told to use one thread, once, and every product big enough to be
// worth it is cut into one block of rows or columns per core, each a single-threaded call
// on a small pool of threads of our own (pool.c) that spin for 20 µs after a part, not
// OpenBLAS's tens of milliseconds, and then sleep. They are C threads, not goroutines: a
// matrix-vector product's second half handed to a goroutine waited whenever the Go
// scheduler's two Ps were taken (by the collector, by another parallel loop), and decoding
// a float32 SmolLM2-135M ran at half speed.
//
// Accelerate schedules its own work (and may run it on the matrix coprocessor), so on
// macOS calls go to it whole.
package blas

/*
#cgo CFLAGS: -O2 -std=gnu11
#cgo linux pkg-config: openblas
#cgo linux LDFLAGS: -lpthread
#cgo darwin CFLAGS: -DACCELERATE_NEW_LAPACK
#cgo darwin LDFLAGS: -framework Accelerate
#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
static void inloop_blas_threads(int n) { (void)n; }
static int inloop_blas_threads_now(void) { return -1; }
#else
#include <cblas.h>
static void inloop_blas_threads(int n) { openblas_set_num_threads(n); }
static int inloop_blas_threads_now(void) { return openblas_get_num_threads(); }
#endif

#include "pool.h"
*/
import "C"

import (
	"runtime"
	"sync"
)

// split reports whether calls are cut over the cores here (BLAS itself single-threaded).
var split = runtime.GOOS != "darwin"

// Splits reports whether calls are cut over the cores here, so that a caller running one
// single-threaded product per core (SgemmOne) has the cores to itself; where not (macOS),
// BLAS threads its own calls and such a caller should hand it whole products instead.
func Splits() bool { return split }

// cores is how many parts a call is cut into at most: the caller and the pool's threads.
// A GOMAXPROCS above the machine's cores (set by hand) would only add spinning threads.
var cores = min(runtime.GOMAXPROCS(0), runtime.NumCPU())

// start makes BLAS single-threaded and starts the pool, once, when this package first
// multiplies rather than when it is loaded. OpenBLAS's thread count is one for the whole
// process, and the mlx backend's CPU device (MLX built on Linux) multiplies through the
// same library: set at load, it ran every MLX product on one core in any process that
// linked this package, which Inloop always does (the demo model on MLX's CPU device
// decoded at 183–205 tok/s instead of 330–346). A process using only the mlx backend now
// leaves OpenBLAS as it found it.
func start() {
	started.Do(func() {
		C.inloop_blas_threads(1)
		if split {
			C.inloop_pool_start(C.int(cores - 1))
		}
	})
}

var started sync.Once

// blasThreads is OpenBLAS's thread count now (−1 where BLAS is Accelerate).
func blasThreads() int { return int(C.inloop_blas_threads_now()) }

// threadedBLAS hands calls to BLAS whole with n threads of its own (n > 1), or returns to
// the split (n = 1); benchmarks use it to compare the two.
func threadedBLAS(n int) {
	start()
	split = n <= 1 && runtime.GOOS != "darwin"
	C.inloop_blas_threads(C.int(n))
}

// Below these many multiply-adds a core, handing part of a call to another core costs
// more than it saves: a hand-over to a spinning pool thread is about a microsecond, plus
// the other core's cold cache, in which a core does ~10^5 multiply-adds of a GEMM. A
// GEMV's matrix under ~512 KB sits in cache and takes a core a few microseconds, less
// than waking a pool thread that went to sleep between two products: split from 2^14
// elements, the demo model (192-wide) decoded at 500–900 tok/s instead of 900–1,300.
const (
	gemmGrain = 1 << 19
	gemvGrain = 1 << 17
)

// Sgemm computes C = op(A)·op(B) + beta·C for row-major matrices, with op a transpose
// when ta/tb; lda/ldb/ldc are row strides. C is (m, n), op(A) (m, k), op(B) (k, n). All
// slices are Go or C memory without Go pointers inside. It returns when C is written.
func Sgemm(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	start()
	if k == 0 {
		for i := range m {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				row[j] *= beta
			}
		}
		return
	}
	parts := ways(m*n*k, gemmGrain)
	if parts <= 1 {
		sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)
		return
	}
	// Cut the larger side of C: columns in multiples of 16 (whole vector registers in
	// the kernels' micro-tiles), rows in multiples of 4.
	C.inloop_sgemm_par(cbool(ta), cbool(tb), C.int(m), C.int(n), C.int(k),
		(*C.float)(&a[0]), C.int(lda), (*C.float)(&b[0]), C.int(ldb), C.float(beta), (*C.float)(&c[0]), C.int(ldc),
		C.int(parts), cbool(n >= m))
}

// Sgemv computes y = op(A)·x + beta·y for a row-major A (m, n) with row stride lda, op a
// transpose when trans. (A matrix-vector product through Sgemm would pack the whole
// matrix first; this streams it.)
func Sgemv(trans bool, m, n int, a []float32, lda int, x []float32, beta float32, y []float32) {
	if m == 0 || n == 0 {
		return
	}
	start()
	parts := ways(m*n, gemvGrain)
	if parts <= 1 {
		sgemv(trans, m, n, a, lda, x, beta, y)
		return
	}
	// y (m) = A·x: each core takes rows of A. y (n) = Aᵀ·x: each core takes columns of
	// A, which keeps every row's read contiguous per core and needs no reduction.
	C.inloop_sgemv_par(cbool(trans), C.int(m), C.int(n), (*C.float)(&a[0]), C.int(lda), (*C.float)(&x[0]),
		C.float(beta), (*C.float)(&y[0]), C.int(parts))
}

// SgemmOne is Sgemm on the calling goroutine only, for callers that already run one
// product per core (attention heads, batched products).
func SgemmOne(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 || k == 0 {
		Sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc) // the same edge cases, no split
		return
	}
	start()
	sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)
}

func sgemm(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	C.inloop_sgemm(cbool(ta), cbool(tb), C.int(m), C.int(n), C.int(k),
		(*C.float)(&a[0]), C.int(lda), (*C.float)(&b[0]), C.int(ldb), C.float(beta), (*C.float)(&c[0]), C.int(ldc))
}

func sgemv(trans bool, m, n int, a []float32, lda int, x []float32, beta float32, y []float32) {
	C.inloop_sgemv(cbool(trans), C.int(m), C.int(n), (*C.float)(&a[0]), C.int(lda), (*C.float)(&x[0]), C.float(beta), (*C.float)(&y[0]))
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// ways is how many cores a call of work multiply-adds should use: 1 where BLAS threads
// itself, else one per grain of work, at most one per core.
func ways(work, grain int) int {
	if !split {
		return 1
	}
	return max(1, min(cores, work/grain))
}

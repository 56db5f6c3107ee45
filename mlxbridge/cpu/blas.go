package cpu

/*
#cgo linux pkg-config: openblas
#cgo darwin CFLAGS: -DACCELERATE_NEW_LAPACK
#cgo darwin LDFLAGS: -framework Accelerate
#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif

static void inloop_sgemm(int ta, int tb, int m, int n, int k, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc) {
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
	            m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

static void inloop_sgemv(int trans, int m, int n, const float *a, int lda, const float *x, float *y) {
	cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, m, n, 1.0f, a, lda, x, 1, 0.0f, y, 1);
}
*/
import "C"

// sgemm computes C = op(A)·op(B) + beta·C for row-major matrices, with op a
// transpose when ta/tb; lda/ldb/ldc are row strides. All slices are Go memory
// without Go pointers inside, so passing them to C is allowed.
func sgemm(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				row[j] *= beta
			}
		}
		return
	}
	C.inloop_sgemm(cbool(ta), cbool(tb), C.int(m), C.int(n), C.int(k),
		(*C.float)(&a[0]), C.int(lda), (*C.float)(&b[0]), C.int(ldb), C.float(beta), (*C.float)(&c[0]), C.int(ldc))
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// sgemv computes y = op(A)·x for a row-major A (m, n) with row stride lda; op is a
// transpose when trans. A matrix-vector product through sgemm packs the whole
// matrix first, which halved decode speed; sgemv streams it.
func sgemv(trans bool, m, n int, a []float32, lda int, x, y []float32) {
	if m == 0 || n == 0 {
		return
	}
	C.inloop_sgemv(cbool(trans), C.int(m), C.int(n), (*C.float)(&a[0]), C.int(lda), (*C.float)(&x[0]), (*C.float)(&y[0]))
}

package cpu

import "github.com/inloop/inloop/mlxbridge/cpu/internal/blas"

// sgemm computes C = op(A)·op(B) + beta·C for row-major matrices (see blas.Sgemm).
func sgemm(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	blas.Sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)
}

// sgemmOne is sgemm on the calling goroutine only (see blas.SgemmOne).
func sgemmOne(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	blas.SgemmOne(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)
}

// sgemv computes y = op(A)·x for a row-major A (m, n) with row stride lda; op is a
// transpose when trans. A matrix-vector product through sgemm packs the whole
// matrix first, which halved decode speed; sgemv streams it.
func sgemv(trans bool, m, n int, a []float32, lda int, x, y []float32) {
	blas.Sgemv(trans, m, n, a, lda, x, 0, y)
}

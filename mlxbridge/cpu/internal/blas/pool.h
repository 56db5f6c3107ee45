// A small pool of BLAS threads: one per extra core, each calling the single-threaded
// BLAS on its part of a product. They spin for a short while after each part (so the
// next product of a decoding step finds them awake) and then sleep; unlike goroutines
// they never wait for the Go scheduler, which a garbage collection or another parallel
// loop can keep busy while the product's caller waits.
#ifndef INLOOP_BLAS_POOL_H
#define INLOOP_BLAS_POOL_H

// One single-threaded call on the calling thread: C = op(A)·op(B) + beta·C, y = op(A)·x + beta·y.
void inloop_sgemm(int ta, int tb, int m, int n, int k, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc);
void inloop_sgemv(int trans, int m, int n, const float *a, int lda, const float *x, float beta, float *y);

// Starts the pool with this many threads (once; later calls do nothing).
void inloop_pool_start(int threads);

// C = op(A)·op(B) + beta·C, cut into parts blocks: of C's columns when cols, else rows.
void inloop_sgemm_par(int ta, int tb, int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc, int parts, int cols);

// y = op(A)·x + beta·y, cut into parts blocks of y.
void inloop_sgemv_par(int trans, int m, int n, const float *a, int lda, const float *x,
                      float beta, float *y, int parts);

#endif

package qmm

/*
#include "qmm.h"
*/
import "C"

import "fmt"

// MatVecT sets out = W x for a float32 W (N, K) row-major and one row x (K): decoding's
// product with a float32 layer, each core streaming runs of W's rows in order (streamed).
func MatVecT(out, x, w []float32, N, K int) {
	if N < 0 || K <= 0 || len(w) < N*K || len(x) < K || len(out) < N {
		panic(fmt.Sprintf("qmm.MatVecT: W (%d, %d) has %d values, x %d, out %d", N, K, len(w), len(x), len(out)))
	}
	if N == 0 {
		return
	}
	streamed(N, 4, K*4, func(n0, n1 int) {
		C.qmm_rows(fp(w), C.int(K), fp(x), C.int(n0), C.int(n1), fp(out))
	})
}

// rowsPolicy forces qmm_rows's prefetches for tests: 1 non-temporal, 0 into L2, -1 the
// processor's own (rows.c).
func rowsPolicy(nta int) { C.qmm_rows_policy(C.int(nta)) }

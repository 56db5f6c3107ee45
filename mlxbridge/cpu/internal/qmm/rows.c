// Float32 matrix-vector product, each row of W one dot product: out[n] = w_n · x. Decoding
// multiplies one activation row by each float32 weight matrix; reading W in order, in a few
// sequential streams per core (four on AVX-512, rows_streams4) with prefetches ahead of
// them, streams faster than OpenBLAS's sgemv at the narrow shapes of small models
// (BenchmarkMatVecF32).
//
// Which prefetches suit W depends on the processor (rows_policy):
//   - AMD (measured on a 2-core EPYC slice): non-temporal ones, 4 KiB ahead. W is read once
//     a token, and fetched as ordinary data it was also kept in L2 and the last-level cache,
//     evicting what is reused. BenchmarkMatVecF32Token's products (Qwen3-0.6B float32)
//     alternated with T0 prefetches in one process, median GB/s of ten rounds each
//     (non-temporal / T0), five runs on AVX-512 34.2/31.6, 35.8/32.7, 35.8/34.3, 35.2/31.4,
//     35.0/32.5, two on AVX2 37.4/33.0, 32.1/30.5; the model's float32 decode 1.04-1.08x in
//     four rounds.
//   - Intel (measured on a 2-core Xeon slice, Emerald Rapids): the same prefetches halved
//     float32 decode. Non-temporal lines fill L1 alone, whose few fill buffers then bound
//     each core's misses in flight. Prefetches into L2, 8 KiB ahead, use L2's deeper queue.
//     Decode alternated in one process (medians of 3-8 rounds, tok/s): Qwen3-0.6B float32
//     3.9 non-temporal, 7.1-8.7 T0 4 KiB ahead, 7.1-7.5 none, 8.6-9.2 into L2 8 KiB ahead;
//     SmolLM2-135M 16.8-17.7, 37.0, 30.2 and 38.7.
// (The quantized kernels' prefetches stay T0/T1 everywhere: non-temporal ones lost 11-13% of
// 4-bit decode on AMD in the model in three rounds of four, though they won 2-6% in
// products alone.)
#include "qmm.h"

void qmm_rows_portable(const float *w, int K, const float *x, int n0, int n1, float *out) {
	for (int n = n0; n < n1; n++) {
		const float *wr = w + (long)n * K;
		float acc[8] = {0};
		int k = 0;
		for (; k + 8 <= K; k += 8)
			for (int i = 0; i < 8; i++) acc[i] += wr[k + i] * x[k + i];
		float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
		for (; k < K; k++) s += wr[k] * x[k];
		out[n] = s;
	}
}

#ifdef QMM_X86
#include <immintrin.h>

// pf_w prefetches a line of W ahead of p, the line being read: non-temporal where nta, else
// into L2. The kernels below take nta as a constant (their callers are rows_streams4_nta and
// friends), so each policy compiles to its own loop.
#define INLINE static inline __attribute__((always_inline))

INLINE void pf_w(const char *p, int nta) {
	if (nta) _mm_prefetch(p + 4096, _MM_HINT_NTA);
	else _mm_prefetch(p + 8192, _MM_HINT_T1);
}

__attribute__((target("avx512f,avx2,fma"))) INLINE void rows_avx512(const float *w, int K, const float *x, int n0,
                                                                     int n1, float *out, int nta) {
	for (int n = n0; n < n1; n++) {
		const float *wr = w + (long)n * K;
		__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		int k = 0;
		for (; k + 64 <= K; k += 64) {
			for (int l = 0; l < 4; l++) pf_w((const char *)(wr + k) + 64 * l, nta);
			a0 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + k), _mm512_loadu_ps(x + k), a0);
			a1 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + k + 16), _mm512_loadu_ps(x + k + 16), a1);
			a2 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + k + 32), _mm512_loadu_ps(x + k + 32), a2);
			a3 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + k + 48), _mm512_loadu_ps(x + k + 48), a3);
		}
		for (; k + 16 <= K; k += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(wr + k), _mm512_loadu_ps(x + k), a0);
		float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
		for (; k < K; k++) s += wr[k] * x[k];
		out[n] = s;
	}
}

// rows4_avx512 is rows_avx512 over four rows at once, n + i*st for i < 4: four streams of W a
// core reads side by side, each row summed exactly as rows_avx512 sums it, so a row's result
// does not depend on which kernel took it.
__attribute__((target("avx512f,avx2,fma"))) INLINE void rows4_avx512(const float *w, int K, const float *x, long n,
                                                                      long st, float *out, int nta) {
	const float *wr[4];
	__m512 a[4][4];
	for (int r = 0; r < 4; r++) {
		wr[r] = w + (n + r * st) * K;
		for (int j = 0; j < 4; j++) a[r][j] = _mm512_setzero_ps();
	}
	int k = 0;
	for (; k + 64 <= K; k += 64) {
		for (int r = 0; r < 4; r++)
			for (int l = 0; l < 4; l++) pf_w((const char *)(wr[r] + k) + 64 * l, nta);
		__m512 xv[4];
		for (int j = 0; j < 4; j++) xv[j] = _mm512_loadu_ps(x + k + 16 * j);
		for (int r = 0; r < 4; r++)
			for (int j = 0; j < 4; j++) a[r][j] = _mm512_fmadd_ps(_mm512_loadu_ps(wr[r] + k + 16 * j), xv[j], a[r][j]);
	}
	for (int r = 0; r < 4; r++) {
		int kr = k;
		for (; kr + 16 <= K; kr += 16) a[r][0] = _mm512_fmadd_ps(_mm512_loadu_ps(wr[r] + kr), _mm512_loadu_ps(x + kr), a[r][0]);
		float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3])));
		for (; kr < K; kr++) s += wr[r][kr] * x[kr];
		out[n + r * st] = s;
	}
}

// rows_streams4 cuts rows [n0, n1) into four runs and reads them side by side (rows4_avx512),
// the rest one row at a time. One sequential stream a core left the memory system idle
// between a stream's misses: a Qwen3-0.6B float32 decode token's products
// (BenchmarkMatVecF32Token) alternated in one process with rows_avx512 alone, median GB/s of
// ten rounds each, 57.1/40.8, 58.1/44.0, 53.4/40.5 in three runs; four consecutive rows at
// once (one stream, four rows wide) 47.4, 46.2, 45.3.
__attribute__((target("avx512f,avx2,fma"))) INLINE void rows_streams4(const float *w, int K, const float *x, int n0,
                                                                       int n1, float *out, int nta) {
	long q = (n1 - n0) / 4;
	for (long i = 0; i < q; i++) rows4_avx512(w, K, x, n0 + i, q, out, nta);
	rows_avx512(w, K, x, n0 + 4 * (int)q, n1, out, nta);
}

__attribute__((target("avx2,fma"))) INLINE void rows_avx2(const float *w, int K, const float *x, int n0, int n1,
                                                          float *out, int nta) {
	for (int n = n0; n < n1; n++) {
		const float *wr = w + (long)n * K;
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		int k = 0;
		for (; k + 32 <= K; k += 32) {
			for (int l = 0; l < 2; l++) pf_w((const char *)(wr + k) + 64 * l, nta);
			a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k), _mm256_loadu_ps(x + k), a0);
			a1 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k + 8), _mm256_loadu_ps(x + k + 8), a1);
			a2 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k + 16), _mm256_loadu_ps(x + k + 16), a2);
			a3 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k + 24), _mm256_loadu_ps(x + k + 24), a3);
		}
		for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k), _mm256_loadu_ps(x + k), a0);
		__m256 v = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
		__m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
		t = _mm_add_ps(t, _mm_movehl_ps(t, t));
		t = _mm_add_ss(t, _mm_movehdup_ps(t));
		float s = _mm_cvtss_f32(t);
		for (; k < K; k++) s += wr[k] * x[k];
		out[n] = s;
	}
}

// The two policies' entry points.
#define ROWS(name, isa)                                                                                    \
	__attribute__((target(isa))) static void name##_nta(const float *w, int K, const float *x, int n0, \
	                                                       int n1, float *out) {                       \
		name(w, K, x, n0, n1, out, 1);                                                             \
	}                                                                                                  \
	__attribute__((target(isa))) static void name##_l2(const float *w, int K, const float *x, int n0,  \
	                                                      int n1, float *out) {                        \
		name(w, K, x, n0, n1, out, 0);                                                             \
	}
ROWS(rows_streams4, "avx512f,avx2,fma")
ROWS(rows_avx2, "avx2,fma")

// rows_policy is 1 where W is prefetched non-temporally (AMD), 0 where into L2 (Intel and the
// rest); see the top of the file. qmm_rows_policy(p) forces one for tests, -1 lifts that.
static int rows_forced = -1;

void qmm_rows_policy(int nta) { rows_forced = nta; }

static int rows_policy(void) { return rows_forced >= 0 ? rows_forced : qmm_cpu_amd(); }
#else
void qmm_rows_policy(int nta) { (void)nta; }
#endif

void qmm_rows(const float *w, int K, const float *x, int n0, int n1, float *out) {
#ifdef QMM_X86
	int l = qmm_simd();
	if (l >= 2) {
		(rows_policy() ? rows_streams4_nta : rows_streams4_l2)(w, K, x, n0, n1, out);
		return;
	}
	if (l == 1) {
		(rows_policy() ? rows_avx2_nta : rows_avx2_l2)(w, K, x, n0, n1, out);
		return;
	}
#endif
	qmm_rows_portable(w, K, x, n0, n1, out);
}

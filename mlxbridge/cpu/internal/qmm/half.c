// Products with a W held in 16-bit floats (bfloat16 or IEEE half), widened to float32 as it
// is read: a checkpoint's own width, half the bytes of float32 to stream per token.
//
// Widening is exact in both formats, so every product equals the one over the float32 copy
// up to the order of the additions. bfloat16 is the top half of a float32 (a shift). Half
// floats go through F16C on x86-64 and the compiler's _Float16 elsewhere (a NEON convert on
// arm64); the portable path below also handles subnormals, infinities and NaNs bit for bit.
#include "qmm.h"

#include <string.h>

// h2f widens one value.
static inline float h2f(uint16_t h, int f16) {
	uint32_t u;
	float f;
	if (!f16) {
		u = (uint32_t)h << 16;
	} else {
		uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
		if (exp == 0x1f) { // infinity or NaN
			u = sign | 0x7f800000 | man << 13;
		} else if (exp != 0) {
			u = sign | (exp + 112) << 23 | man << 13;
		} else if (man == 0) {
			u = sign;
		} else { // subnormal: man * 2^-24, exact in float32
			f = (float)man * 0x1p-24f;
			memcpy(&u, &f, 4);
			u |= sign;
		}
	}
	memcpy(&f, &u, 4);
	return f;
}

void qmm_half_widen_portable(const uint16_t *w, long n, int f16, float *dst) {
	if (!f16) { // vectorizes: a shift per value
		uint32_t *d = (uint32_t *)dst;
		for (long i = 0; i < n; i++) d[i] = (uint32_t)w[i] << 16;
		return;
	}
	for (long i = 0; i < n; i++) dst[i] = h2f(w[i], 1);
}

// Rows [n0, n1) of W (row length K) times mb <= 4 rows of x: out[m*ldo + n].
void qmm_half_gemv_t_portable(const uint16_t *w, int K, int f16, const float *x, int ldx, int mb,
                              int n0, int n1, float *out, int ldo) {
	enum { C = 256 };
	float row[C];
	for (int n = n0; n < n1; n++) {
		float acc[4] = {0, 0, 0, 0};
		for (int k0 = 0; k0 < K; k0 += C) {
			int kn = K - k0 < C ? K - k0 : C;
			qmm_half_widen_portable(w + (long)n * K + k0, kn, f16, row);
			for (int m = 0; m < mb; m++) {
				const float *xm = x + (long)m * ldx + k0;
				float s = 0;
				for (int k = 0; k < kn; k++) s += row[k] * xm[k];
				acc[m] += s;
			}
		}
		for (int m = 0; m < mb; m++) out[(long)m * ldo + n] = acc[m];
	}
}

// out[m*K + k] = sum_n x[m*N + n] * w[n][k] for m < M and k in [k0, k1): x @ W, the backward
// of x @ W^T, for a few rows of x. Columns a block at a time, every row of W widened once per
// block and added into each row of out (a block of M rows stays in L1).
void qmm_half_gemm_n_portable(const uint16_t *w, int N, int K, int f16, const float *x, int M,
                              int k0, int k1, float *out) {
	enum { C = 64 };
	float row[C];
	for (int kb = k0; kb < k1; kb += C) {
		int kn = k1 - kb < C ? k1 - kb : C;
		for (int m = 0; m < M; m++) memset(out + (long)m * K + kb, 0, sizeof(float) * kn);
		for (int n = 0; n < N; n++) {
			qmm_half_widen_portable(w + (long)n * K + kb, kn, f16, row);
			for (int m = 0; m < M; m++) {
				float a = x[(long)m * N + n], *o = out + (long)m * K + kb;
				for (int k = 0; k < kn; k++) o[k] += a * row[k];
			}
		}
	}
}

#ifdef QMM_X86
#include <immintrin.h>

#define TARGET __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
#ifndef PF
#define PF 2048
#endif

TARGET INLINE float hsum8(__m256 v) {
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

TARGET INLINE __m256 widen8(const uint16_t *p, int f16) {
	__m128i h = _mm_loadu_si128((const __m128i *)p);
	if (f16) return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// R rows of W times MB rows of x, 8 columns at a time; the tail of K (K % 8) in scalar.
#define HGEMV(F16, R, MB)                                                                       \
	TARGET static void hgemv_##F16##_##R##_##MB(const uint16_t *w, int K, const float *x, int ldx, \
	                                            int n, float *out, int ldo) {                  \
		__m256 acc[R][MB];                                                                     \
		for (int r = 0; r < R; r++)                                                            \
			for (int m = 0; m < MB; m++) acc[r][m] = _mm256_setzero_ps();                      \
		const uint16_t *wr = w + (long)n * K;                                                  \
		int k = 0;                                                                             \
		for (; k + 8 <= K; k += 8) {                                                           \
			__m256 wv[R];                                                                      \
			if ((k & 31) == 0)                                                                 \
				for (int r = 0; r < R; r++) _mm_prefetch((const char *)(wr + (long)r * K + k) + PF, _MM_HINT_T0); \
			for (int r = 0; r < R; r++) wv[r] = widen8(wr + (long)r * K + k, F16);             \
			for (int m = 0; m < MB; m++) {                                                     \
				__m256 xv = _mm256_loadu_ps(x + (long)m * ldx + k);                            \
				for (int r = 0; r < R; r++) acc[r][m] = _mm256_fmadd_ps(wv[r], xv, acc[r][m]); \
			}                                                                                  \
		}                                                                                      \
		for (int r = 0; r < R; r++)                                                            \
			for (int m = 0; m < MB; m++) {                                                     \
				float s = hsum8(acc[r][m]);                                                    \
				for (int j = k; j < K; j++) s += h2f(wr[(long)r * K + j], F16) * x[(long)m * ldx + j]; \
				out[(long)m * ldo + n + r] = s;                                                \
			}                                                                                  \
	}

#define HGEMV_ALL(F16) \
	HGEMV(F16, 2, 2)   \
	HGEMV(F16, 1, 2)   \
	HGEMV(F16, 2, 3)   \
	HGEMV(F16, 1, 3)   \
	HGEMV(F16, 2, 4)   \
	HGEMV(F16, 1, 4)
HGEMV_ALL(0)
HGEMV_ALL(1)

typedef void hgemv_fn(const uint16_t *, int, const float *, int, int, float *, int);

// Per MB (2 to 4; one row of x takes hrow): the wide kernel and its one-row remainder.
static hgemv_fn *const wide[2][4] = {
	{NULL, hgemv_0_2_2, hgemv_0_2_3, hgemv_0_2_4},
	{NULL, hgemv_1_2_2, hgemv_1_2_3, hgemv_1_2_4},
};
static hgemv_fn *const one[2][4] = {
	{NULL, hgemv_0_1_2, hgemv_0_1_3, hgemv_0_1_4},
	{NULL, hgemv_1_1_2, hgemv_1_1_3, hgemv_1_1_4},
};

// One row at a time, 32 columns a step into 4 accumulators: decoding reads W as one
// sequential stream, which the prefetchers follow better than several rows at once
// (BenchmarkHalfMatVec: about 30 against 23 GB/s).
#define HROW(F16)                                                                               \
	TARGET static void hrow_##F16(const uint16_t *w, int K, const float *x, int n0, int n1, float *out) { \
		for (int n = n0; n < n1; n++) {                                                        \
			const uint16_t *wr = w + (long)n * K;                                              \
			__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                        \
			int k = 0;                                                                         \
			for (; k + 32 <= K; k += 32) {                                                     \
				_mm_prefetch((const char *)(wr + k) + PF, _MM_HINT_T0);                        \
				a0 = _mm256_fmadd_ps(widen8(wr + k, F16), _mm256_loadu_ps(x + k), a0);         \
				a1 = _mm256_fmadd_ps(widen8(wr + k + 8, F16), _mm256_loadu_ps(x + k + 8), a1); \
				a2 = _mm256_fmadd_ps(widen8(wr + k + 16, F16), _mm256_loadu_ps(x + k + 16), a2); \
				a3 = _mm256_fmadd_ps(widen8(wr + k + 24, F16), _mm256_loadu_ps(x + k + 24), a3); \
			}                                                                                  \
			for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(widen8(wr + k, F16), _mm256_loadu_ps(x + k), a0); \
			float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));      \
			for (; k < K; k++) s += h2f(wr[k], F16) * x[k];                                    \
			out[n] = s;                                                                        \
		}                                                                                      \
	}
HROW(0)
HROW(1)

static void half_gemv_t_avx2(const uint16_t *w, int K, int f16, const float *x, int ldx, int mb,
                             int n0, int n1, float *out, int ldo) {
	if (mb == 1) {
		if (f16) hrow_1(w, K, x, n0, n1, out);
		else hrow_0(w, K, x, n0, n1, out);
		return;
	}
	int R = 2, n = n0;
	for (; n + R <= n1; n += R) wide[f16][mb - 1](w, K, x, ldx, n, out, ldo);
	for (; n < n1; n++) one[f16][mb - 1](w, K, x, ldx, n, out, ldo);
}

// x @ W for MB rows of x and 16 columns: MB x 2 accumulators, one pass over W's rows, each
// row's 16 values widened once for all MB rows. N rows ahead are prefetched (a column
// block walks W with a stride of a whole row).
// Rows of x of HGEMMN and HGEMMN512, as named accumulators (two per row, unused rows folded
// away): held in an array, GCC stored all of a block's accumulators to the stack on every row
// of W.
#define HN_ROWS(X, MB) X(0, MB) X(1, MB) X(2, MB) X(3, MB) X(4, MB) X(5, MB) X(6, MB) X(7, MB)
#define H2_DECL(i, MB) __m256 p##i = _mm256_setzero_ps(), q##i = p##i;
#define H2_LOAD(i, MB)                                                                          \
	if (MB > i && n0) {                                                                         \
		p##i = _mm256_loadu_ps(out + (long)i * K + k);                                          \
		q##i = _mm256_loadu_ps(out + (long)i * K + k + 8);                                      \
	}
#define H2_FMA(i, MB)                                                                           \
	if (MB > i) {                                                                               \
		__m256 xv = _mm256_broadcast_ss(x + (long)i * N + n);                                   \
		p##i = _mm256_fmadd_ps(w0, xv, p##i);                                                   \
		q##i = _mm256_fmadd_ps(w1, xv, q##i);                                                   \
	}
#define H2_STORE(i, MB)                                                                         \
	if (MB > i) {                                                                               \
		_mm256_storeu_ps(out + (long)i * K + k, p##i);                                          \
		_mm256_storeu_ps(out + (long)i * K + k + 8, q##i);                                      \
	}
#define HGEMMN(F16, MB)                                                                         \
	TARGET static void hgemmn_##F16##_##MB(const uint16_t *w, int N, int K, const float *x, int k, \
	                                       int n0, int n1, float *out) {                       \
		HN_ROWS(H2_DECL, MB)                                                                   \
		HN_ROWS(H2_LOAD, MB)                                                                   \
		const uint16_t *wk = w + k;                                                            \
		for (int n = n0; n < n1; n++) {                                                        \
			const uint16_t *wr = wk + (long)n * K;                                             \
			_mm_prefetch((const char *)(wr + 8L * K), _MM_HINT_T0);                            \
			__m256 w0 = widen8(wr, F16), w1 = widen8(wr + 8, F16);                             \
			HN_ROWS(H2_FMA, MB)                                                                \
		}                                                                                      \
		HN_ROWS(H2_STORE, MB)                                                                  \
	}
HGEMMN(0, 1) HGEMMN(0, 2) HGEMMN(0, 3) HGEMMN(0, 4) HGEMMN(0, 5) HGEMMN(0, 6)
HGEMMN(1, 1) HGEMMN(1, 2) HGEMMN(1, 3) HGEMMN(1, 4) HGEMMN(1, 5) HGEMMN(1, 6)

typedef void hgemmn_fn(const uint16_t *, int, int, const float *, int, int, int, float *);
static hgemmn_fn *const gemmn[2][7] = {
	{NULL, hgemmn_0_1, hgemmn_0_2, hgemmn_0_3, hgemmn_0_4, hgemmn_0_5, hgemmn_0_6},
	{NULL, hgemmn_1_1, hgemmn_1_2, hgemmn_1_3, hgemmn_1_4, hgemmn_1_5, hgemmn_1_6},
};

// A band of NB rows of W at a time, and in it every block of columns (its strips stay in
// cache while the blocks of rows of x pass over them): a block walking all of W's rows at
// once would touch a new page every row or two, more than the TLB holds. The last K % 16
// columns of [k0, k1) go through the portable kernel.
enum { NB = 128 };

static void half_gemm_n_avx2(const uint16_t *w, int N, int K, int f16, const float *x, int M,
                             int k0, int k1, float *out) {
	int kf = k0 + (k1 - k0) / 16 * 16;
	for (int n0 = 0; n0 < N; n0 += NB) {
		int n1 = N - n0 < NB ? N : n0 + NB;
		for (int k = k0; k < kf; k += 16)
			for (int m = 0; m < M; m += 6) {
				int mb = M - m < 6 ? M - m : 6;
				gemmn[f16][mb](w, N, K, x + (long)m * N, k, n0, n1, out + (long)m * K);
			}
	}
	if (kf < k1) qmm_half_gemm_n_portable(w, N, K, f16, x, M, kf, k1, out);
}

#define TARGET512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// widen16h widens sixteen 16-bit values held in h.
TARGET512 INLINE __m512 widen16h(__m256i h, int f16) {
	if (f16) return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

TARGET512 INLINE __m512 widen16(const uint16_t *p, int f16) {
	return widen16h(_mm256_loadu_si256((const __m256i *)p), f16);
}

// widen16m is widen16 of the values under mask m, zeros elsewhere.
TARGET512 INLINE __m512 widen16m(const uint16_t *p, __mmask16 m, int f16) {
	return widen16h(_mm256_maskz_loadu_epi16(m, p), f16);
}

// The AVX-512 form of HGEMV: 16 columns a step, fewer instructions per byte streamed.
#define HGEMV512(F16, R, MB)                                                                    \
	TARGET512 static void hgemv512_##F16##_##R##_##MB(const uint16_t *w, int K, const float *x, int ldx, \
	                                                  int n, float *out, int ldo) {            \
		__m512 acc[R][MB];                                                                     \
		for (int r = 0; r < R; r++)                                                            \
			for (int m = 0; m < MB; m++) acc[r][m] = _mm512_setzero_ps();                      \
		const uint16_t *wr = w + (long)n * K;                                                  \
		int k = 0;                                                                             \
		for (; k + 16 <= K; k += 16) {                                                         \
			__m512 wv[R];                                                                      \
			if ((k & 31) == 0)                                                                 \
				for (int r = 0; r < R; r++) _mm_prefetch((const char *)(wr + (long)r * K + k) + PF, _MM_HINT_T0); \
			for (int r = 0; r < R; r++) wv[r] = widen16(wr + (long)r * K + k, F16);            \
			for (int m = 0; m < MB; m++) {                                                     \
				__m512 xv = _mm512_loadu_ps(x + (long)m * ldx + k);                            \
				for (int r = 0; r < R; r++) acc[r][m] = _mm512_fmadd_ps(wv[r], xv, acc[r][m]); \
			}                                                                                  \
		}                                                                                      \
		for (int r = 0; r < R; r++)                                                            \
			for (int m = 0; m < MB; m++) {                                                     \
				float s = _mm512_reduce_add_ps(acc[r][m]);                                     \
				for (int j = k; j < K; j++) s += h2f(wr[(long)r * K + j], F16) * x[(long)m * ldx + j]; \
				out[(long)m * ldo + n + r] = s;                                                \
			}                                                                                  \
	}

#define HGEMV512_ALL(F16) \
	HGEMV512(F16, 4, 2)   \
	HGEMV512(F16, 1, 2)   \
	HGEMV512(F16, 2, 3)   \
	HGEMV512(F16, 1, 3)   \
	HGEMV512(F16, 2, 4)   \
	HGEMV512(F16, 1, 4)
HGEMV512_ALL(0)
HGEMV512_ALL(1)

static hgemv_fn *const wide512[2][4] = {
	{NULL, hgemv512_0_4_2, hgemv512_0_2_3, hgemv512_0_2_4},
	{NULL, hgemv512_1_4_2, hgemv512_1_2_3, hgemv512_1_2_4},
};
static hgemv_fn *const one512[2][4] = {
	{NULL, hgemv512_0_1_2, hgemv512_0_1_3, hgemv512_0_1_4},
	{NULL, hgemv512_1_1_2, hgemv512_1_1_3, hgemv512_1_1_4},
};

// One row at a time, 64 columns a step into 4 accumulators: W read as one sequential stream,
// prefetched twice PF ahead: decoding a bfloat16 Qwen3-0.6B and SmolLM2-135M took 2-6% less
// time a token than at PF (three alternating runs of eight rounds each, in the model, whose
// weights sit on huge pages; a microbenchmark on the Go heap's 4 KiB pages ranks distances
// differently).
#define HROW_PF (2 * PF)
#define HROW512(F16)                                                                            \
	TARGET512 static void hrow512_##F16(const uint16_t *w, int K, const float *x, int n0, int n1, float *out) { \
		for (int n = n0; n < n1; n++) {                                                        \
			const uint16_t *wr = w + (long)n * K;                                              \
			__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                        \
			int k = 0;                                                                         \
			for (; k + 64 <= K; k += 64) {                                                     \
				_mm_prefetch((const char *)(wr + k) + HROW_PF, _MM_HINT_T0);                   \
				_mm_prefetch((const char *)(wr + k) + HROW_PF + 64, _MM_HINT_T0);              \
				a0 = _mm512_fmadd_ps(widen16(wr + k, F16), _mm512_loadu_ps(x + k), a0);        \
				a1 = _mm512_fmadd_ps(widen16(wr + k + 16, F16), _mm512_loadu_ps(x + k + 16), a1); \
				a2 = _mm512_fmadd_ps(widen16(wr + k + 32, F16), _mm512_loadu_ps(x + k + 32), a2); \
				a3 = _mm512_fmadd_ps(widen16(wr + k + 48, F16), _mm512_loadu_ps(x + k + 48), a3); \
			}                                                                                  \
			for (; k + 16 <= K; k += 16) a0 = _mm512_fmadd_ps(widen16(wr + k, F16), _mm512_loadu_ps(x + k), a0); \
			float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
			for (; k < K; k++) s += h2f(wr[k], F16) * x[k];                                    \
			out[n] = s;                                                                        \
		}                                                                                      \
	}
HROW512(0)
HROW512(1)

// Sixteen accumulators summed across their lanes at once: lane 4·i + j of the result is the
// sum of a[4·i + j]. Four rounds of pairwise shuffles and adds (15 adds in all), where one
// reduction each would take 16 × 4.
TARGET512 INLINE __m512 sum16x16(const __m512 *a) {
	__m512 b[8], c[4], d[2];
	for (int i = 0; i < 8; i++)
		b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
	for (int i = 0; i < 4; i++)
		c[i] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0x44), _mm512_shuffle_ps(b[2 * i], b[2 * i + 1], 0xee));
	for (int i = 0; i < 2; i++)
		d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88), _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));
	return _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], 0x88), _mm512_shuffle_f32x4(d[0], d[1], 0xdd));
}

// Four rows of W (n to n+3) times four rows of x: sixteen accumulators over K, 16 columns a
// step (the last step under masks, so no scalar tail), summed across lanes together at the
// end (sum16x16) and stored as four rows of four outputs. Accumulator 4·m + r is row m of x
// against row n + r of W. Named, not an array, so GCC keeps them in registers.
#define HT44(F16)                                                                               \
	TARGET512 static void ht44_##F16(const uint16_t *w, int K, const float *x, int ldx, int n, float *out, \
	                                 int ldo) {                                                \
		__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0; \
		__m512 a8 = a0, a9 = a0, a10 = a0, a11 = a0, a12 = a0, a13 = a0, a14 = a0, a15 = a0;  \
		const uint16_t *w0 = w + (long)n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;        \
		const float *x0 = x, *x1 = x + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;                    \
		for (int k = 0; k < K; k += 16) {                                                      \
			__mmask16 km = K - k >= 16 ? 0xffff : (__mmask16)((1u << (K - k)) - 1);            \
			if ((k & 31) == 0) {                                                               \
				_mm_prefetch((const char *)(w0 + k) + PF, _MM_HINT_T0);                        \
				_mm_prefetch((const char *)(w1 + k) + PF, _MM_HINT_T0);                        \
				_mm_prefetch((const char *)(w2 + k) + PF, _MM_HINT_T0);                        \
				_mm_prefetch((const char *)(w3 + k) + PF, _MM_HINT_T0);                        \
			}                                                                                  \
			__m512 v0 = widen16m(w0 + k, km, F16), v1 = widen16m(w1 + k, km, F16);              \
			__m512 v2 = widen16m(w2 + k, km, F16), v3 = widen16m(w3 + k, km, F16);              \
			__m512 x_ = _mm512_maskz_loadu_ps(km, x0 + k);                                     \
			a0 = _mm512_fmadd_ps(v0, x_, a0), a1 = _mm512_fmadd_ps(v1, x_, a1);                \
			a2 = _mm512_fmadd_ps(v2, x_, a2), a3 = _mm512_fmadd_ps(v3, x_, a3);                \
			x_ = _mm512_maskz_loadu_ps(km, x1 + k);                                            \
			a4 = _mm512_fmadd_ps(v0, x_, a4), a5 = _mm512_fmadd_ps(v1, x_, a5);                \
			a6 = _mm512_fmadd_ps(v2, x_, a6), a7 = _mm512_fmadd_ps(v3, x_, a7);                \
			x_ = _mm512_maskz_loadu_ps(km, x2 + k);                                            \
			a8 = _mm512_fmadd_ps(v0, x_, a8), a9 = _mm512_fmadd_ps(v1, x_, a9);                \
			a10 = _mm512_fmadd_ps(v2, x_, a10), a11 = _mm512_fmadd_ps(v3, x_, a11);            \
			x_ = _mm512_maskz_loadu_ps(km, x3 + k);                                            \
			a12 = _mm512_fmadd_ps(v0, x_, a12), a13 = _mm512_fmadd_ps(v1, x_, a13);            \
			a14 = _mm512_fmadd_ps(v2, x_, a14), a15 = _mm512_fmadd_ps(v3, x_, a15);            \
		}                                                                                      \
		__m512 a[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15}; \
		__m512 s = sum16x16(a);                                                                \
		_mm_storeu_ps(out + n, _mm512_extractf32x4_ps(s, 0));                                  \
		_mm_storeu_ps(out + ldo + n, _mm512_extractf32x4_ps(s, 1));                            \
		_mm_storeu_ps(out + 2L * ldo + n, _mm512_extractf32x4_ps(s, 2));                       \
		_mm_storeu_ps(out + 3L * ldo + n, _mm512_extractf32x4_ps(s, 3));                       \
	}
HT44(0)
HT44(1)

static void half_gemv_t_avx512(const uint16_t *w, int K, int f16, const float *x, int ldx, int mb,
                               int n0, int n1, float *out, int ldo) {
	if (mb == 4) {
		int n = n0;
		for (; n + 4 <= n1; n += 4) (f16 ? ht44_1 : ht44_0)(w, K, x, ldx, n, out, ldo);
		for (; n < n1; n++) one512[f16][3](w, K, x, ldx, n, out, ldo);
		return;
	}
	if (mb == 1) {
		if (f16) hrow512_1(w, K, x, n0, n1, out);
		else hrow512_0(w, K, x, n0, n1, out);
		return;
	}
	int R = mb <= 2 ? 4 : 2, n = n0;
	for (; n + R <= n1; n += R) wide512[f16][mb - 1](w, K, x, ldx, n, out, ldo);
	for (; n < n1; n++) one512[f16][mb - 1](w, K, x, ldx, n, out, ldo);
}

// The AVX-512 form of HGEMMN: 32 columns (one 64-byte line of each row of W) a step, up to 8
// rows of x; a final partial block is loaded and stored under masks.
#define HN_DECL(i, MB) __m512 p##i = _mm512_setzero_ps(), q##i = p##i;
#define HN_LOAD(i, MB)                                                                          \
	if (MB > i && n0) {                                                                         \
		p##i = _mm512_maskz_loadu_ps(m0, out + (long)i * K + k);                                \
		q##i = _mm512_maskz_loadu_ps(m1, out + (long)i * K + k + 16);                           \
	}
#define HN_FMA(i, MB)                                                                           \
	if (MB > i) {                                                                               \
		__m512 xv = _mm512_set1_ps(x[(long)i * N + n]);                                         \
		p##i = _mm512_fmadd_ps(w0, xv, p##i);                                                   \
		q##i = _mm512_fmadd_ps(w1, xv, q##i);                                                   \
	}
#define HN_STORE(i, MB)                                                                         \
	if (MB > i) {                                                                               \
		_mm512_mask_storeu_ps(out + (long)i * K + k, m0, p##i);                                 \
		_mm512_mask_storeu_ps(out + (long)i * K + k + 16, m1, q##i);                            \
	}
#define HGEMMN512(F16, MB)                                                                      \
	TARGET512 static void hgemmn512_##F16##_##MB(const uint16_t *w, int N, int K, const float *x, int k, \
	                                             int cols, int n0, int n1, float *out) {       \
		__mmask32 km = cols >= 32 ? 0xffffffffu : (__mmask32)((1u << cols) - 1);               \
		__mmask16 m0 = (__mmask16)km, m1 = (__mmask16)(km >> 16);                              \
		HN_ROWS(HN_DECL, MB)                                                                   \
		HN_ROWS(HN_LOAD, MB)                                                                   \
		const uint16_t *wk = w + k;                                                            \
		for (int n = n0; n < n1; n++) {                                                        \
			const uint16_t *wr = wk + (long)n * K;                                             \
			_mm_prefetch((const char *)(wr + 8L * K), _MM_HINT_T0);                            \
			__m512i h = cols >= 32 ? _mm512_loadu_si512(wr) : _mm512_maskz_loadu_epi16(km, wr); \
			__m256i h0 = _mm512_castsi512_si256(h), h1 = _mm512_extracti64x4_epi64(h, 1);      \
			__m512 w0 = widen16h(h0, F16), w1 = widen16h(h1, F16);                             \
			HN_ROWS(HN_FMA, MB)                                                                \
		}                                                                                      \
		HN_ROWS(HN_STORE, MB)                                                                  \
	}
HGEMMN512(0, 1) HGEMMN512(0, 2) HGEMMN512(0, 3) HGEMMN512(0, 4)
HGEMMN512(0, 5) HGEMMN512(0, 6) HGEMMN512(0, 7) HGEMMN512(0, 8)
HGEMMN512(1, 1) HGEMMN512(1, 2) HGEMMN512(1, 3) HGEMMN512(1, 4)
HGEMMN512(1, 5) HGEMMN512(1, 6) HGEMMN512(1, 7) HGEMMN512(1, 8)

typedef void hgemmn512_fn(const uint16_t *, int, int, const float *, int, int, int, int, float *);
static hgemmn512_fn *const gemmn512[2][9] = {
	{NULL, hgemmn512_0_1, hgemmn512_0_2, hgemmn512_0_3, hgemmn512_0_4, hgemmn512_0_5, hgemmn512_0_6,
	 hgemmn512_0_7, hgemmn512_0_8},
	{NULL, hgemmn512_1_1, hgemmn512_1_2, hgemmn512_1_3, hgemmn512_1_4, hgemmn512_1_5, hgemmn512_1_6,
	 hgemmn512_1_7, hgemmn512_1_8},
};

static void half_gemm_n_avx512(const uint16_t *w, int N, int K, int f16, const float *x, int M,
                               int k0, int k1, float *out) {
	for (int n0 = 0; n0 < N; n0 += NB) {
		int n1 = N - n0 < NB ? N : n0 + NB;
		for (int k = k0; k < k1; k += 32)
			for (int m = 0; m < M; m += 8) {
				int mb = M - m < 8 ? M - m : 8;
				gemmn512[f16][mb](w, N, K, x + (long)m * N, k, k1 - k, n0, n1, out + (long)m * K);
			}
	}
}

TARGET static void half_widen_avx2(const uint16_t *w, long n, int f16, float *dst) {
	long i = 0;
	for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, widen8(w + i, f16));
	for (; i < n; i++) dst[i] = h2f(w[i], f16);
}

static int use_avx2(void) { return qmm_simd() >= 1 && __builtin_cpu_supports("f16c"); }
#endif

void qmm_half_widen(const uint16_t *w, long n, int f16, float *dst) {
#ifdef QMM_X86
	if (use_avx2()) {
		half_widen_avx2(w, n, f16, dst);
		return;
	}
#endif
	qmm_half_widen_portable(w, n, f16, dst);
}

static void half_gemv_t(const uint16_t *w, int K, int f16, const float *x, int ldx, int mb,
                        int n0, int n1, float *out, int ldo) {
#ifdef QMM_X86
	if (use_avx2()) {
		if (qmm_simd() >= 2) half_gemv_t_avx512(w, K, f16 != 0, x, ldx, mb, n0, n1, out, ldo);
		else half_gemv_t_avx2(w, K, f16 != 0, x, ldx, mb, n0, n1, out, ldo);
		return;
	}
#endif
	qmm_half_gemv_t_portable(w, K, f16, x, ldx, mb, n0, n1, out, ldo);
}

void qmm_half_gemv_t_batch(const uint16_t *w, int K, int f16, const float *x, int M,
                           int n0, int n1, float *out, int ldo) {
	enum { RB = 16 }; // rows of W kept in cache while every block of x passes over them
	if (M <= 4) {
		half_gemv_t(w, K, f16, x, K, M, n0, n1, out, ldo);
		return;
	}
	for (int n = n0; n < n1; n += RB) {
		int ne = n + RB < n1 ? n + RB : n1;
		for (int m = 0; m < M; m += 4)
			half_gemv_t(w, K, f16, x + (long)m * K, K, M - m < 4 ? M - m : 4, n, ne, out + (long)m * ldo, ldo);
	}
}

void qmm_half_gemm_n(const uint16_t *w, int N, int K, int f16, const float *x, int M, int k0,
                     int k1, float *out) {
#ifdef QMM_X86
	if (use_avx2()) {
		if (qmm_simd() >= 2) half_gemm_n_avx512(w, N, K, f16 != 0, x, M, k0, k1, out);
		else half_gemm_n_avx2(w, N, K, f16 != 0, x, M, k0, k1, out);
		return;
	}
#endif
	qmm_half_gemm_n_portable(w, N, K, f16 != 0, x, M, k0, k1, out);
}

// AVX2+FMA matrix-vector kernels for 2-, 4- and 8-bit weights, compiled for those
// instructions only here (target attribute) and chosen at run time, so the binary still runs
// on older x86-64.
//
// Decoding is what bounds these kernels, so they never shift values into place: a chunk of 8
// words is one register whose lane j holds values j*S .. j*S+S-1 (S = 32/bits), and step i
// just masks each lane with (2^bits-1) << bits*i. Converting the masked lane to float gives
// exactly q*2^(bits*i), so the activations are stored permuted to match (step i, lane j holds
// x[j*S+i], see qmm_prepare_x_lanes) and pre-scaled by 2^-(bits*i), which is exact (unless
// |x| < 2^-98, far below any activation); the product is then q*x to the last bit. The last
// value of a word would reach the sign bit, so it is shifted down instead. One AND, one
// convert and one FMA per 8 weights.
#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>
#include <string.h>

#include "avx2.h"
#include "prefetch_x86.h"

#define TARGET TARGET_AVX2
#define INLINE static inline __attribute__((always_inline))

// R rows of W times MB rows of x at BITS bits. acc[r][m][i%2] collects one chunk's q.x, tot
// collects acc times each lane's group scale over the row. A final partial chunk (K not a
// multiple of 8*S) loads only its words; the prepared x is zero past K.
#define GEMV(BITS, R, MB)                                                                        \
	TARGET static void gemv_##BITS##_##R##_##MB(const qmm_w *w, const float *xp, const float *xsum, \
	                                           int n, float *out, int ldo) {                   \
		enum { S = 32 / BITS, V = 8 * S };                                                     \
		int K = w->K, gs = w->group, G = K / gs, words = K * BITS / 32;                        \
		int kp = qmm_xp_len(K, BITS), nc = (K + V - 1) / V;                                    \
		int gshift = __builtin_ctz(gs), gpc = V > gs ? V >> gshift : 1;                        \
		__m256i idx = _mm256_srli_epi32(_mm256_setr_epi32(0, S, 2 * S, 3 * S, 4 * S, 5 * S, 6 * S, 7 * S), gshift); \
		const char *ahead = pf_start(w, n, R, words, PF_DIST(BITS));                          \
		pf_groups(w, n, R, G);                                                                \
		__m256 tot[R][MB];                                                                    \
		for (int r = 0; r < R; r++)                                                           \
			for (int m = 0; m < MB; m++) tot[r][m] = _mm256_setzero_ps();                     \
		for (int c = 0; c < nc; c++) {                                                        \
			pf_chunk(ahead, c, R * 32, BITS == 8);                                            \
			int left = words - 8 * c;                                                         \
			__m256i v[R];                                                                     \
			for (int r = 0; r < R; r++) {                                                     \
				const uint32_t *p = w->packed + (long)(n + r) * words + 8 * c;                \
				v[r] = left >= 8 ? _mm256_loadu_si256((const __m256i *)p) : load_partial(p, left); \
			}                                                                                 \
			__m256 acc[R][MB][2];                                                             \
			for (int r = 0; r < R; r++)                                                       \
				for (int m = 0; m < MB; m++) acc[r][m][0] = acc[r][m][1] = _mm256_setzero_ps();  \
			for (int i = 0; i < S; i++) {                                                     \
				__m256 q[R];                                                                  \
				for (int r = 0; r < R; r++)                                                   \
					q[r] = _mm256_cvtepi32_ps(i == S - 1 ? _mm256_srli_epi32(v[r], 32 - BITS)  \
					    : _mm256_and_si256(v[r], _mm256_set1_epi32(((1 << BITS) - 1) << (BITS * i)))); \
				for (int m = 0; m < MB; m++) {                                                \
					__m256 xv = _mm256_loadu_ps(xp + (long)m * kp + (long)c * V + 8 * i);     \
					for (int r = 0; r < R; r++)                                               \
						acc[r][m][i & 1] = _mm256_fmadd_ps(q[r], xv, acc[r][m][i & 1]);       \
				}                                                                             \
			}                                                                                 \
			int g0 = (c * V) >> gshift, ng = G - g0 < gpc ? G - g0 : gpc;                     \
			for (int r = 0; r < R; r++) {                                                     \
				__m256 sv = chunk_scales(w->scales + (long)(n + r) * G + g0, gpc, ng, idx);   \
				for (int m = 0; m < MB; m++)                                                  \
					tot[r][m] = _mm256_fmadd_ps(_mm256_add_ps(acc[r][m][0], acc[r][m][1]), sv, tot[r][m]); \
			}                                                                                 \
		}                                                                                     \
		for (int r = 0; r < R; r++)                                                           \
			for (int m = 0; m < MB; m++)                                                      \
				out[(long)m * ldo + n + r] = hsum(tot[r][m]) +                                \
				    dot_avx2(w->biases + (long)(n + r) * G, xsum + m * G, G);                 \
	}

#define GEMV_ALL(BITS) \
	GEMV(BITS, 2, 1)   \
	GEMV(BITS, 1, 1)   \
	GEMV(BITS, 1, 2)   \
	GEMV(BITS, 1, 3)   \
	GEMV(BITS, 1, 4)

GEMV_ALL(2)
GEMV_ALL(4)
GEMV_ALL(8)

typedef void (*gemv_fn)(const qmm_w *, const float *, const float *, int, float *, int);

void TARGET qmm_gemv_t_avx2(const qmm_w *w, const float *xp, const float *xsum, int mb,
                            int n0, int n1, float *out, int ldo) {
	static const gemv_fn pair[9] = {[2] = gemv_2_2_1, [4] = gemv_4_2_1, [8] = gemv_8_2_1};
	static const gemv_fn one[9][5] = {
	    [2] = {0, gemv_2_1_1, gemv_2_1_2, gemv_2_1_3, gemv_2_1_4},
	    [4] = {0, gemv_4_1_1, gemv_4_1_2, gemv_4_1_3, gemv_4_1_4},
	    [8] = {0, gemv_8_1_1, gemv_8_1_2, gemv_8_1_3, gemv_8_1_4},
	};
	int n = n0, words = w->K * w->bits / 32;
	pf_first(w, n0, mb == 1 ? 2 : 1, words, w->K / w->group, PF_DIST(w->bits));
	if (mb == 1) // two rows at a time share the x loads
		for (; n + 2 <= n1; n += 2) pair[w->bits](w, xp, xsum, n, out, ldo);
	for (; n < n1; n++) one[w->bits][mb](w, xp, xsum, n, out, ldo);
}
#endif

#ifdef QMM_X86
// The transposed product x @ W over rows [n0, n1) of W, in the lane layout (see
// qmm_gemv_avx512, whose scheme this is on 8 lanes): acc collects the masked values times
// x[n]*scale; qmm_lanes_to_out divides the power-of-two position factors out exactly.
#define GEMVN(BITS, R, MB)                                                                      \
	TARGET static void gemvn_##BITS##_##R##_##MB(const qmm_w *w, const float *x, int ldx,     \
	                                            int n, float *acc, float *cb) {              \
		enum { S = 32 / BITS, V = 8 * S };                                                     \
		int K = w->K, gs = w->group, G = K / gs, words = K * BITS / 32;                        \
		int kp = qmm_xp_len(K, BITS), nc = (K + V - 1) / V;                                    \
		int gshift = __builtin_ctz(gs), gpc = V > gs ? V >> gshift : 1;                        \
		__m256i idx = _mm256_srli_epi32(_mm256_setr_epi32(0, S, 2 * S, 3 * S, 4 * S, 5 * S, 6 * S, 7 * S), gshift); \
		const char *ahead = pf_start(w, n, R, words, PF_DIST(BITS));                           \
		pf_groups(w, n, R, G);                                                                 \
		float xn[R][MB];                                                                       \
		for (int r = 0; r < R; r++)                                                            \
			for (int m = 0; m < MB; m++) {                                                     \
				xn[r][m] = x[(long)m * ldx + n + r];                                           \
				const float *b = w->biases + (long)(n + r) * G;                                \
				for (int g = 0; g < G; g++) cb[m * G + g] += xn[r][m] * b[g];                  \
			}                                                                                  \
		for (int c = 0; c < nc; c++) {                                                         \
			pf_chunk(ahead, c, R * 32, BITS == 8);                                             \
			int left = words - 8 * c, g0 = (c * V) >> gshift, ng = G - g0 < gpc ? G - g0 : gpc; \
			__m256i v[R];                                                                      \
			__m256 sv[R];                                                                      \
			for (int r = 0; r < R; r++) {                                                      \
				const uint32_t *p = w->packed + (long)(n + r) * words + 8 * c;                 \
				v[r] = left >= 8 ? _mm256_loadu_si256((const __m256i *)p) : load_partial(p, left); \
				sv[r] = chunk_scales(w->scales + (long)(n + r) * G + g0, gpc, ng, idx);        \
			}                                                                                  \
			for (int i = 0; i < S; i++) {                                                      \
				__m256 q[R];                                                                   \
				for (int r = 0; r < R; r++)                                                    \
					q[r] = _mm256_cvtepi32_ps(i == S - 1 ? _mm256_srli_epi32(v[r], 32 - BITS)  \
					    : _mm256_and_si256(v[r], _mm256_set1_epi32(((1 << BITS) - 1) << (BITS * i)))); \
				for (int m = 0; m < MB; m++) {                                                 \
					float *p = acc + (long)m * kp + (long)c * V + 8 * i;                       \
					__m256 t = _mm256_loadu_ps(p);                                             \
					for (int r = 0; r < R; r++)                                                \
						t = _mm256_fmadd_ps(q[r], _mm256_mul_ps(sv[r], _mm256_set1_ps(xn[r][m])), t); \
					_mm256_storeu_ps(p, t);                                                    \
				}                                                                              \
			}                                                                                  \
		}                                                                                      \
	}

#define GEMVN_ALL(BITS)                                                         \
	GEMVN(BITS, 4, 1) GEMVN(BITS, 4, 2) GEMVN(BITS, 4, 3) GEMVN(BITS, 4, 4)     \
	GEMVN(BITS, 1, 1) GEMVN(BITS, 1, 2) GEMVN(BITS, 1, 3) GEMVN(BITS, 1, 4)

GEMVN_ALL(2)
GEMVN_ALL(4)
GEMVN_ALL(8)

typedef void (*gemvn_fn)(const qmm_w *, const float *, int, int, float *, float *);

void TARGET qmm_gemv_lanes_avx2(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
                                float *out, int ldo, float *scratch) {
#define ROW(B) {0, gemvn_##B##_4_1, gemvn_##B##_4_2, gemvn_##B##_4_3, gemvn_##B##_4_4}
#define ONE(B) {0, gemvn_##B##_1_1, gemvn_##B##_1_2, gemvn_##B##_1_3, gemvn_##B##_1_4}
	static const gemvn_fn four[9][5] = {[2] = ROW(2), [4] = ROW(4), [8] = ROW(8)};
	static const gemvn_fn one[9][5] = {[2] = ONE(2), [4] = ONE(4), [8] = ONE(8)};
#undef ROW
#undef ONE
	int K = w->K, G = K / w->group, kp = qmm_xp_len(K, w->bits);
	float *acc = scratch, *cb = scratch + (long)mb * kp;
	memset(scratch, 0, sizeof(float) * mb * (kp + G));
	int n = n0;
	for (; n + 4 <= n1; n += 4) four[w->bits][mb](w, x, ldx, n, acc, cb);
	for (; n < n1; n++) one[w->bits][mb](w, x, ldx, n, acc, cb);
	qmm_lanes_to_out(w, 8, acc, cb, mb, out, ldo);
}
#endif

// AVX-512 matrix-vector kernels for 2-, 4- and 8-bit weights, used when the CPU has
// AVX-512F and VL. The decoding is the AVX2 kernel's (see avx2.c) on 16 words at a time:
// lane j holds word j of a 16-word chunk, so step i masks value i of every word, and the
// activations are laid out to match (qmm_prepare_x_lanes with 16 lanes). Twice the width
// halves the instructions per weight, which is what bounds these kernels: with the weights in
// L2, 4-bit decoding ran 1.2x and 8-bit 1.4x faster than AVX2 on Zen 4 (which issues a
// 512-bit operation as one), and 1.2x and 1.8x on a Xeon.
#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>
#include <string.h>

#include "avx512.h"
#include "prefetch_x86.h"

#define TARGET TARGET512

// R rows of W times MB rows of x at BITS bits. Per chunk: acc[r][m][i%NA] += q_i * x_i over
// the steps, then tot += acc * (each lane's group scale). The final chunk of a row may be
// partial (K not a multiple of the chunk): its words are loaded under a mask, and the
// prepared x is zero there.
#define GEMV512(BITS, R, MB)                                                                   \
	TARGET static void gemv512_##BITS##_##R##_##MB(const qmm_w *w, const float *xp,           \
	                                                const float *xsum, int n, float *out, int ldo) { \
		enum { S = 32 / BITS, V = 16 * S };                                                    \
		int K = w->K, gs = w->group, G = K / gs, words = K * BITS / 32;                        \
		int kp = qmm_xp_len(K, BITS), nc = (K + V - 1) / V;                                    \
		int gshift = __builtin_ctz(gs), gpc = V > gs ? V >> gshift : 1; /* groups per chunk */  \
		/* lane j of chunk c lies in group (c*V + j*S)/gs; idx is that minus the first's */    \
		__m512i idx = _mm512_srli_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, \
		    9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(S)), gshift);                       \
		const char *ahead = pf_start(w, n, R, words, PF_DIST(BITS));                          \
		pf_groups(w, n, R, G);                                                                 \
		__m512 tot[R][MB];                                                                     \
		for (int r = 0; r < R; r++)                                                            \
			for (int m = 0; m < MB; m++) tot[r][m] = _mm512_setzero_ps();                      \
		for (int c = 0; c < nc; c++) {                                                         \
			pf_chunk(ahead, c, R * 64, BITS == 8);                                             \
			int left = words - 16 * c;                                                         \
			__mmask16 wm = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);                \
			__m512i v[R];                                                                      \
			for (int r = 0; r < R; r++)                                                        \
				v[r] = left >= 16 ? _mm512_loadu_si512(w->packed + (long)(n + r) * words + 16 * c) \
				                  : _mm512_maskz_loadu_epi32(wm, w->packed + (long)(n + r) * words + 16 * c); \
			/* two accumulators a pair hide the FMA latency; eight pairs or more do it alone, \
			   and twice as many would not fit the registers */                                 \
			enum { NA = R * MB >= 8 ? 1 : 2 };                                                 \
			__m512 acc[R][MB][NA];                                                             \
			for (int r = 0; r < R; r++)                                                        \
				for (int m = 0; m < MB; m++) acc[r][m][0] = acc[r][m][NA - 1] = _mm512_setzero_ps(); \
			for (int i = 0; i < S; i++) {                                                      \
				__m512 q[R];                                                                   \
				for (int r = 0; r < R; r++)                                                    \
					q[r] = _mm512_cvtepi32_ps(i == S - 1 ? _mm512_srli_epi32(v[r], 32 - BITS)  \
					    : _mm512_and_si512(v[r], _mm512_set1_epi32(((1 << BITS) - 1) << (BITS * i)))); \
				for (int m = 0; m < MB; m++) {                                                 \
					__m512 xv = _mm512_loadu_ps(xp + (long)m * kp + (long)c * V + 16 * i);     \
					for (int r = 0; r < R; r++)                                                \
						acc[r][m][i % NA] = _mm512_fmadd_ps(q[r], xv, acc[r][m][i % NA]);      \
				}                                                                              \
			}                                                                                  \
			int g0 = (c * V) >> gshift, ng = G - g0 < gpc ? G - g0 : gpc;                      \
			for (int r = 0; r < R; r++) {                                                      \
				const float *s = w->scales + (long)(n + r) * G + g0;                           \
				__m512 sv = chunk_scales(s, gpc, ng, idx);                                     \
				for (int m = 0; m < MB; m++)                                                   \
					tot[r][m] = _mm512_fmadd_ps(NA == 2 ? _mm512_add_ps(acc[r][m][0], acc[r][m][NA - 1]) : acc[r][m][0], sv, tot[r][m]); \
			}                                                                                  \
		}                                                                                      \
		for (int r = 0; r < R; r++)                                                            \
			for (int m = 0; m < MB; m++)                                                       \
				out[(long)m * ldo + n + r] = _mm512_reduce_add_ps(tot[r][m]) +                 \
				    dot512(w->biases + (long)(n + r) * G, xsum + m * G, G);                    \
	}

// Decoding's case (one row of x), four rows of W at a time, as the VNNI kernels (vnni.c) are
// laid out: every shape decision made once a call, full chunks without masks or branches,
// the partial final chunk as one masked step, the bias term folded into the lane sums and
// four rows reduced together (sum4). Per chunk and row the arithmetic is GEMV512's.
#define DEC_STEPS(t0, t1, t2, t3, v0, v1, v2, v3, c, sc, g, ng, H)                                 \
	do {                                                                                           \
		__m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0 = a0, c1 = a0, d0 = a0, d1 = a0; \
		for (int i = 0; i < S; i++) {                                                              \
			const __m512 xv = _mm512_loadu_ps(xp + (long)(c) * V + 16 * i);                         \
			const __m512i m = _mm512_set1_epi32(((1 << B) - 1) << (B * i));                        \
			__m512 q0 = _mm512_cvtepi32_ps(i == S - 1 ? _mm512_srli_epi32(v0, 32 - B) : _mm512_and_si512(v0, m)); \
			__m512 q1 = _mm512_cvtepi32_ps(i == S - 1 ? _mm512_srli_epi32(v1, 32 - B) : _mm512_and_si512(v1, m)); \
			__m512 q2 = _mm512_cvtepi32_ps(i == S - 1 ? _mm512_srli_epi32(v2, 32 - B) : _mm512_and_si512(v2, m)); \
			__m512 q3 = _mm512_cvtepi32_ps(i == S - 1 ? _mm512_srli_epi32(v3, 32 - B) : _mm512_and_si512(v3, m)); \
			if (i % 2 == 0) {                                                                      \
				a0 = _mm512_fmadd_ps(q0, xv, a0), b0 = _mm512_fmadd_ps(q1, xv, b0);                \
				c0 = _mm512_fmadd_ps(q2, xv, c0), d0 = _mm512_fmadd_ps(q3, xv, d0);                \
			} else {                                                                               \
				a1 = _mm512_fmadd_ps(q0, xv, a1), b1 = _mm512_fmadd_ps(q1, xv, b1);                \
				c1 = _mm512_fmadd_ps(q2, xv, c1), d1 = _mm512_fmadd_ps(q3, xv, d1);                \
			}                                                                                      \
		}                                                                                          \
		t0 = _mm512_fmadd_ps(_mm512_add_ps(a0, a1), LANES_##H((sc) + (g), GPC, ng), t0);           \
		t1 = _mm512_fmadd_ps(_mm512_add_ps(b0, b1), LANES_##H((sc) + G + (g), GPC, ng), t1);       \
		t2 = _mm512_fmadd_ps(_mm512_add_ps(c0, c1), LANES_##H((sc) + 2 * G + (g), GPC, ng), t2);   \
		t3 = _mm512_fmadd_ps(_mm512_add_ps(d0, d1), LANES_##H((sc) + 3 * G + (g), GPC, ng), t3);   \
	} while (0)

// What DEC512 and DEC512S know of a row's shape: G0 groups, words, full chunks and the
// partial one's mask (kt) and groups (gt, ngt), and each lane's group within a chunk (idx).
#define DEC_SHAPE(BITS, GS)                                                                        \
	enum { B = BITS, S = 32 / B, V = 16 * S, GSZ = GS, GPC = V > GS ? V / GS : 1 };                \
	const int K = w->K, G0 = K / GS, words = K * B / 32, full = words / 16, left = words % 16;     \
	const int gt = full * V / GS, ngt = G0 - gt < GPC ? G0 - gt : GPC;                             \
	const __mmask16 kt = (__mmask16)((1u << left) - 1);                                            \
	const __m512i idx = _mm512_srli_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, \
	    8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(S)), __builtin_ctz(GS))

// The lane sums t0..t3 of four rows of W, rows p, p + rs, p + 2*rs and p + 3*rs (rs in
// words), whose scales are sc, sc + G, sc + 2*G and sc + 3*G (DEC_STEPS' G): DEC512's four
// consecutive rows and DEC512S's four runs. Before each chunk c it prefetches the lines at
// ahead + r*pa + c*pcs (r < 4), to L2 for 8-bit weights.
#define DEC_SET4(t0, t1, t2, t3, p, rs, sc, H, ahead, pa, pcs)                                      \
	do {                                                                                           \
		for (int c = 0; c < full; c++) {                                                           \
			for (int r = 0; r < 4; r++) pf_line((ahead) + r * (long)(pa) + c * (long)(pcs), B == 8); \
			const uint32_t *pc = (p) + 16 * c;                                                     \
			__m512i v0 = _mm512_loadu_si512(pc), v1 = _mm512_loadu_si512(pc + (rs));               \
			__m512i v2 = _mm512_loadu_si512(pc + 2 * (rs)), v3 = _mm512_loadu_si512(pc + 3 * (rs)); \
			DEC_STEPS(t0, t1, t2, t3, v0, v1, v2, v3, c, sc, c * V / GSZ, GPC, H);                 \
		}                                                                                          \
		if (left) {                                                                                \
			for (int r = 0; r < 4; r++) pf_line((ahead) + r * (long)(pa) + full * (long)(pcs), B == 8); \
			const uint32_t *pc = (p) + 16 * full;                                                  \
			__m512i v0 = _mm512_maskz_loadu_epi32(kt, pc), v1 = _mm512_maskz_loadu_epi32(kt, pc + (rs)); \
			__m512i v2 = _mm512_maskz_loadu_epi32(kt, pc + 2 * (rs));                              \
			__m512i v3 = _mm512_maskz_loadu_epi32(kt, pc + 3 * (rs));                              \
			DEC_STEPS(t0, t1, t2, t3, v0, v1, v2, v3, full, sc, gt, ngt, H);                       \
		}                                                                                          \
	} while (0)

// H is the scales' width (avx512.h): 0 float32, 1 bfloat16, 2 float16. The 16-bit forms take
// whole sets of four rows only (n1 - n0 a multiple of four): the caller widens a remainder.
#define DEC512(BITS, GS, H, KTARGET)                                                               \
	KTARGET static void dec512_##BITS##_##GS##_##H(const qmm_w *w, const float *xp, const float *xsum, \
	                                               int n0, int n1, float *out) {                  \
		DEC_SHAPE(BITS, GS);                                                                       \
		const int G = G0;                                                                          \
		pf_first(w, n0, 4, words, G, PF_DIST(B));                                                  \
		int n = n0;                                                                                \
		for (; n + 4 <= n1; n += 4) {                                                              \
			const char *ahead = pf_start(w, n, 4, words, PF_DIST(B));                              \
			pf_groups(w, n, 4, G);                                                                 \
			const uint32_t *p = w->packed + (long)n * words;                                       \
			const SCALE_T_##H *sc = SCALES_##H(w) + (long)n * G;                                   \
			__m512 t0 = _mm512_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;                            \
			DEC_SET4(t0, t1, t2, t3, p, words, sc, H, ahead, 64, 4 * 64);                          \
			STORE4(out + n, t0, t1, t2, t3, BIAS_##H, BIASES_##H(w) + (long)n * G, xsum, G);       \
		}                                                                                          \
		if (H == 0)                                                                                \
			for (; n < n1; n++) gemv512_##BITS##_1_1(w, xp, xsum, n, out, 0);                      \
	}

// DEC512's arithmetic over four runs of rows read side by side: set i is rows n0 + i + r*q
// (r < 4), one row from each run, so a core keeps four streams of W in flight instead of
// one. Each row is summed exactly as DEC512 sums it (sum4 reduces every row of a set in
// the same order whatever its place), so a row's bits do not depend on which kernel took
// it. q is a multiple of four.
#define DEC512S(BITS, GS, H, KTARGET)                                                              \
	KTARGET static void dec512s_##BITS##_##GS##_##H(const qmm_w *w, const float *xp, const float *xsum, \
	                                                int n0, int q, float *out) {                  \
		DEC_SHAPE(BITS, GS);                                                                       \
		const long rs = (long)q * words; /* words from one run to the next */                     \
		const long ss = (long)q * G0 * (long)sizeof(SCALE_T_##H);                                  \
		for (int r = 0; r < 4; r++) pf_first(w, n0 + r * q, 1, words, G0, PF_DIST(B));             \
		for (int n = n0; n < n0 + q; n++) {                                                        \
			const uint32_t *p = w->packed + (long)n * words;                                       \
			const SCALE_T_##H *sc = SCALES_##H(w) + (long)n * G0;                                  \
			const SCALE_T_##H *bb = BIASES_##H(w) + (long)n * G0;                                  \
			const char *ahead = (const char *)p + PF_DIST(B);                                      \
			for (int r = 0; r < 4; r++) {                                                          \
				_mm_prefetch((const char *)sc + r * ss + PF_GROUPS, _MM_HINT_T0);                  \
				_mm_prefetch((const char *)bb + r * ss + PF_GROUPS, _MM_HINT_T0);                  \
			}                                                                                      \
			const int G = q * G0; /* DEC_STEPS steps from a row's scales to the next row's by G */ \
			__m512 t0 = _mm512_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;                            \
			DEC_SET4(t0, t1, t2, t3, p, rs, sc, H, ahead, 4 * rs, 64);                             \
			float tot[4];                                                                          \
			_mm_storeu_ps(tot, sum4(BIAS_##H(t0, bb, xsum, G0), BIAS_##H(t1, bb + G, xsum, G0),      \
			                        BIAS_##H(t2, bb + 2 * G, xsum, G0), BIAS_##H(t3, bb + 3 * G, xsum, G0))); \
			for (int r = 0; r < 4; r++) out[n + r * q] = tot[r];                                   \
		}                                                                                          \
	}

// Every (bits, group size) for float32, bfloat16 and float16 scales.
#define DEC512_ALL(BITS, GS)              \
	DEC512(BITS, GS, 0, TARGET512)        \
	DEC512(BITS, GS, 1, TARGET16)         \
	DEC512(BITS, GS, 2, TARGET16)

#define DEC512S_ALL(GS)                   \
	DEC512S(8, GS, 0, TARGET512)          \
	DEC512S(8, GS, 1, TARGET16)           \
	DEC512S(8, GS, 2, TARGET16)

#define GEMV512_ALL(BITS) \
	GEMV512(BITS, 2, 4)   \
	GEMV512(BITS, 1, 1)   \
	GEMV512(BITS, 1, 2)   \
	GEMV512(BITS, 1, 3)   \
	GEMV512(BITS, 1, 4)

GEMV512_ALL(2)
GEMV512_ALL(4)
GEMV512_ALL(8)

DEC512_ALL(2, 32)
DEC512_ALL(2, 64)
DEC512_ALL(2, 128)
DEC512_ALL(4, 32)
DEC512_ALL(4, 64)
DEC512_ALL(4, 128)
DEC512_ALL(8, 32)
DEC512_ALL(8, 64)
DEC512_ALL(8, 128)
DEC512S_ALL(32)
DEC512S_ALL(64)
DEC512S_ALL(128)

typedef void (*gemv_fn)(const qmm_w *, const float *, const float *, int, float *, int);
typedef void (*gemv_dec)(const qmm_w *, const float *, const float *, int, int, float *);

void TARGET qmm_gemv_t_avx512(const qmm_w *w, const float *xp, const float *xsum, int mb,
                              int n0, int n1, float *out, int ldo) {
#define DEC(B, H) {dec512_##B##_32_##H, dec512_##B##_64_##H, dec512_##B##_128_##H}
	static const gemv_dec dec[3][9][3] = {{[2] = DEC(2, 0), [4] = DEC(4, 0), [8] = DEC(8, 0)},
	                                      {[2] = DEC(2, 1), [4] = DEC(4, 1), [8] = DEC(8, 1)},
	                                      {[2] = DEC(2, 2), [4] = DEC(4, 2), [8] = DEC(8, 2)}};
#undef DEC
#define DECS(H) {dec512s_8_32_##H, dec512s_8_64_##H, dec512s_8_128_##H}
	static const gemv_dec decs8[3][3] = {DECS(0), DECS(1), DECS(2)};
#undef DECS
	static const gemv_fn one[9][5] = {
	    [2] = {0, gemv512_2_1_1, gemv512_2_1_2, gemv512_2_1_3, gemv512_2_1_4},
	    [4] = {0, gemv512_4_1_1, gemv512_4_1_2, gemv512_4_1_3, gemv512_4_1_4},
	    [8] = {0, gemv512_8_1_1, gemv512_8_1_2, gemv512_8_1_3, gemv512_8_1_4},
	};
	static const gemv_fn pair4[9] = {[2] = gemv512_2_2_4, [4] = gemv512_4_2_4, [8] = gemv512_8_2_4};
	if (mb == 1) {
		int h = scale_width(w), g = w->group == 32 ? 0 : w->group == 64 ? 1 : 2, q = (n1 - n0) / 16 * 4;
		// 8-bit weights read as four runs side by side (DEC512S): a Qwen3-0.6B decode token's
		// 8-bit products alternated in one process, ms a token, median of 16 rounds, four
		// runs / one: 20.9/24.0, 21.5/26.0, 20.9/22.9. 4-bit ones gained nothing (15.5/15.3,
		// 13.7/13.5): their kernel, not the memory, sets their pace.
		if (w->bits == 8 && q >= 16) {
			decs8[h][g](w, xp, xsum, n0, q, out);
			n0 += 4 * q;
		}
		if (n0 < n1) dec[h][w->bits][g](w, xp, xsum, n0, n1, out);
		return;
	}
	int n = n0, words = w->K * w->bits / 32;
	pf_first(w, n0, 1, words, w->K / w->group, PF_DIST(w->bits));
	if (mb == 4) // two rows of W share the four rows of x's loads: 1.6-1.9x at 4 bits
		for (; n + 2 <= n1; n += 2) pair4[w->bits](w, xp, xsum, n, out, ldo);
	for (; n < n1; n++) one[w->bits][mb](w, xp, xsum, n, out, ldo);
}
#endif

#ifdef QMM_X86
// The transposed product x @ W over rows [n0, n1) of W, in the same lane layout: acc (one
// padded row of qmm_xp_len floats per row of x) gathers, at step i of lane j of chunk c,
// sum_n q[n][c*V + j*S + i] * 2^(bits*i) * x[n]*scale, i.e. the masked values times the
// coefficient, so decoding costs the same as in the matrix-vector kernel. The power-of-two
// factor is divided out, exactly, when the lanes are put back in order at the end.
#define GEMVN512(BITS, R, MB)                                                                  \
	TARGET static void gemvn512_##BITS##_##R##_##MB(const qmm_w *w, const float *x, int ldx,  \
	                                                 int n, float *acc, float *cb) {          \
		enum { S = 32 / BITS, V = 16 * S };                                                    \
		int K = w->K, gs = w->group, G = K / gs, words = K * BITS / 32;                        \
		int kp = qmm_xp_len(K, BITS), nc = (K + V - 1) / V;                                    \
		int gshift = __builtin_ctz(gs), gpc = V > gs ? V >> gshift : 1;                        \
		__m512i idx = _mm512_srli_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, \
		    9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(S)), gshift);                       \
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
			pf_chunk(ahead, c, R * 64, BITS == 8);                                             \
			int left = words - 16 * c, g0 = (c * V) >> gshift, ng = G - g0 < gpc ? G - g0 : gpc; \
			__m512i v[R];                                                                      \
			__m512 a[R][MB];                                                                   \
			for (int r = 0; r < R; r++) {                                                      \
				const uint32_t *p = w->packed + (long)(n + r) * words + 16 * c;                \
				v[r] = left >= 16 ? _mm512_loadu_si512(p)                                      \
				                  : _mm512_maskz_loadu_epi32((__mmask16)((1u << left) - 1), p); \
				__m512 sv = chunk_scales(w->scales + (long)(n + r) * G + g0, gpc, ng, idx);    \
				for (int m = 0; m < MB; m++) a[r][m] = _mm512_mul_ps(sv, _mm512_set1_ps(xn[r][m])); \
			}                                                                                  \
			for (int i = 0; i < S; i++) {                                                      \
				__m512 q[R];                                                                   \
				for (int r = 0; r < R; r++)                                                    \
					q[r] = _mm512_cvtepi32_ps(i == S - 1 ? _mm512_srli_epi32(v[r], 32 - BITS)  \
					    : _mm512_and_si512(v[r], _mm512_set1_epi32(((1 << BITS) - 1) << (BITS * i)))); \
				for (int m = 0; m < MB; m++) {                                                 \
					float *p = acc + (long)m * kp + (long)c * V + 16 * i;                      \
					__m512 t = _mm512_loadu_ps(p);                                             \
					for (int r = 0; r < R; r++) t = _mm512_fmadd_ps(q[r], a[r][m], t);        \
					_mm512_storeu_ps(p, t);                                                    \
				}                                                                              \
			}                                                                                  \
		}                                                                                      \
	}

#define GEMVN512_ALL(BITS)                                                                \
	GEMVN512(BITS, 4, 1) GEMVN512(BITS, 4, 2) GEMVN512(BITS, 4, 3) GEMVN512(BITS, 4, 4)   \
	GEMVN512(BITS, 1, 1) GEMVN512(BITS, 1, 2) GEMVN512(BITS, 1, 3) GEMVN512(BITS, 1, 4)

GEMVN512_ALL(2)
GEMVN512_ALL(4)
GEMVN512_ALL(8)

typedef void (*gemvn_fn)(const qmm_w *, const float *, int, int, float *, float *);

void TARGET qmm_gemv_avx512(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
                            float *out, int ldo, float *scratch) {
#define ROW(B) {0, gemvn512_##B##_4_1, gemvn512_##B##_4_2, gemvn512_##B##_4_3, gemvn512_##B##_4_4}
#define ONE(B) {0, gemvn512_##B##_1_1, gemvn512_##B##_1_2, gemvn512_##B##_1_3, gemvn512_##B##_1_4}
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
	qmm_lanes_to_out(w, 16, acc, cb, mb, out, ldo);
}
#endif

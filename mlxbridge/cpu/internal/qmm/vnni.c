// The AVX-512 VNNI form of decoding's 8-bit-activation product (see int8.c): vpdpbusd does
// 64 multiply-adds of an unsigned weight byte by a signed activation byte in one instruction,
// so 128 weights at 4 bits cost two masks, a shift and two of them.
#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>

#include "avx512.h"
#include "prefetch_x86.h"

#define TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")))

// One row's chunk: v's integer dot products with the chunk's activations (x0, and x1 for the
// high nibbles; B is the weights' bits), scaled lane-wise by the weight groups' scales sv
// times the lanes' x scales xs, added to t.
#define ROW_CHUNK(t, v, sv)                                                                          \
	do {                                                                                             \
		__m512i acc_ = B == 4 ? _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, _mm512_and_si512(v, low), x0), \
		                                               _mm512_and_si512(_mm512_srli_epi16(v, 4), low), x1) \
		                         : _mm512_dpbusd_epi32(zero, v, x0);                                  \
		t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc_), _mm512_mul_ps(sv, xs), t);                    \
	} while (0)

// Rows [n0, n1) of BITS-bit W in groups of GS, four rows at a time: every shape decision is
// made once a call, full chunks run without masks or branches, and a row's partial final
// chunk (K = 576 at 4 bits is four and a half) is the one masked step after them. The
// accumulators of four rows are reduced together (sum4). H is the scales' width (avx512.h).
#define VNNI(BITS, GS, H)                                                                            \
	TARGET static void vnni_##BITS##_##GS##_##H(const qmm_w *w, const int8_t *xq, const float *xsl, \
	                                            const float *xsum, int n0, int n1, float *out) {     \
		enum { B = BITS, S = 32 / B, V = 16 * S, XB = B == 4 ? 128 : 64, GPC = V > GS ? V / GS : 1 }; \
		const int K = w->K, G = K / GS, words = K * BITS / 32, full = words / 16, left = words % 16; \
		const int gt = full * V / GS, ngt = G - gt < GPC ? G - gt : GPC; /* the final chunk's groups */ \
		const __mmask16 kt = (__mmask16)((1u << left) - 1);                                          \
		const __m512i idx = _mm512_srli_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, \
		    8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(S)), __builtin_ctz(GS));                \
		const __m512i low = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();                   \
		const uint32_t *packed = w->packed;                                                          \
		const SCALE_T_##H *scales = SCALES_##H(w), *biases = BIASES_##H(w);                          \
		pf_first(w, n0, 4, words, G, PF_DIST(BITS));                                                 \
		int n = n0;                                                                                  \
		for (; n + 4 <= n1; n += 4) {                                                                \
			const char *ahead = pf_start(w, n, 4, words, PF_DIST(BITS));                             \
			pf_groups(w, n, 4, G);                                                                   \
			const uint32_t *p = packed + (long)n * words;                                            \
			const SCALE_T_##H *sc = scales + (long)n * G;                                            \
			__m512 t0 = _mm512_setzero_ps(), t1 = t0, t2 = t0, t3 = t0;                              \
			for (int c = 0; c < full; c++) {                                                         \
				pf_chunk(ahead, c, 4 * 64, BITS == 8);                                               \
				const __m512 xs = _mm512_loadu_ps(xsl + 16 * c);                                     \
				const __m512i x0 = _mm512_loadu_si512(xq + (long)c * XB);                            \
				const __m512i x1 = BITS == 4 ? _mm512_loadu_si512(xq + (long)c * XB + 64) : x0;      \
				const int g = c * V / GS;                                                            \
				const uint32_t *pc = p + 16 * c;                                                     \
				ROW_CHUNK(t0, _mm512_loadu_si512(pc), LANES_##H(sc + g, GPC, GPC));                 \
				ROW_CHUNK(t1, _mm512_loadu_si512(pc + words), LANES_##H(sc + G + g, GPC, GPC));     \
				ROW_CHUNK(t2, _mm512_loadu_si512(pc + 2 * words), LANES_##H(sc + 2 * G + g, GPC, GPC)); \
				ROW_CHUNK(t3, _mm512_loadu_si512(pc + 3 * words), LANES_##H(sc + 3 * G + g, GPC, GPC)); \
			}                                                                                        \
			if (left) {                                                                              \
				pf_chunk(ahead, full, 4 * 64, BITS == 8);                                            \
				const __m512 xs = _mm512_loadu_ps(xsl + 16 * full);                                  \
				const __m512i x0 = _mm512_loadu_si512(xq + (long)full * XB);                         \
				const __m512i x1 = BITS == 4 ? _mm512_loadu_si512(xq + (long)full * XB + 64) : x0;   \
				const uint32_t *pc = p + 16 * full;                                                  \
				ROW_CHUNK(t0, _mm512_maskz_loadu_epi32(kt, pc), LANES_##H(sc + gt, GPC, ngt));      \
				ROW_CHUNK(t1, _mm512_maskz_loadu_epi32(kt, pc + words), LANES_##H(sc + G + gt, GPC, ngt)); \
				ROW_CHUNK(t2, _mm512_maskz_loadu_epi32(kt, pc + 2 * words), LANES_##H(sc + 2 * G + gt, GPC, ngt)); \
				ROW_CHUNK(t3, _mm512_maskz_loadu_epi32(kt, pc + 3 * words), LANES_##H(sc + 3 * G + gt, GPC, ngt)); \
			}                                                                                        \
			STORE4(out + n, t0, t1, t2, t3, BIAS_##H, biases + (long)n * G, xsum, G);                \
		}                                                                                            \
		for (; n < n1; n++) {                                                                        \
			const uint32_t *p = packed + (long)n * words;                                            \
			const SCALE_T_##H *sc = scales + (long)n * G;                                            \
			__m512 t0 = _mm512_setzero_ps();                                                         \
			for (int c = 0; c < full; c++) {                                                         \
				const __m512 xs = _mm512_loadu_ps(xsl + 16 * c);                                     \
				const __m512i x0 = _mm512_loadu_si512(xq + (long)c * XB);                            \
				const __m512i x1 = BITS == 4 ? _mm512_loadu_si512(xq + (long)c * XB + 64) : x0;      \
				ROW_CHUNK(t0, _mm512_loadu_si512(p + 16 * c), LANES_##H(sc + c * V / GS, GPC, GPC)); \
			}                                                                                        \
			if (left) {                                                                              \
				const __m512 xs = _mm512_loadu_ps(xsl + 16 * full);                                  \
				const __m512i x0 = _mm512_loadu_si512(xq + (long)full * XB);                         \
				const __m512i x1 = BITS == 4 ? _mm512_loadu_si512(xq + (long)full * XB + 64) : x0;   \
				ROW_CHUNK(t0, _mm512_maskz_loadu_epi32(kt, p + 16 * full), LANES_##H(sc + gt, GPC, ngt)); \
			}                                                                                        \
			out[n] = _mm512_reduce_add_ps(BIAS_##H(t0, biases + (long)n * G, xsum, G));             \
		}                                                                                            \
	}

#define VNNI_ALL(BITS, GS) VNNI(BITS, GS, 0) VNNI(BITS, GS, 1) VNNI(BITS, GS, 2)
VNNI_ALL(4, 32)
VNNI_ALL(4, 64)
VNNI_ALL(4, 128)
VNNI_ALL(8, 32)
VNNI_ALL(8, 64)
VNNI_ALL(8, 128)

void qmm_gemv_t_i8_vnni(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
                        int n0, int n1, float *out) {
	typedef void (*kernel)(const qmm_w *, const int8_t *, const float *, const float *, int, int, float *);
#define GROUPS(B, H) {vnni_##B##_32_##H, vnni_##B##_64_##H, vnni_##B##_128_##H}
	static const kernel k[3][2][3] = {{GROUPS(4, 0), GROUPS(8, 0)}, {GROUPS(4, 1), GROUPS(8, 1)}, {GROUPS(4, 2), GROUPS(8, 2)}};
#undef GROUPS
	int g = w->group;
	k[scale_width(w)][w->bits == 8][g == 32 ? 0 : g == 64 ? 1 : 2](w, xq, xsl, xsum, n0, n1, out);
}
#endif

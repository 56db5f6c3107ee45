// The AVX-512 VNNI form of decoding's 8-bit-activation product (see int8.c): vpdpbusd does
// 64 multiply-adds of an unsigned weight byte by a signed activation byte in one instruction,
// so 128 weights at 4 bits cost two masks, a shift and two of them.
#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>

#include "avx512.h"
#include "prefetch_x86.h"

#define TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma")))

// R rows of W from row n.
#define VNNI(BITS, R)                                                                          \
	TARGET static void vnni_##BITS##_##R(const qmm_w *w, const int8_t *xq, const float *xsl,  \
	                                     const float *xsum, int n, float *out) {              \
		enum { S = 32 / BITS, V = 16 * S, XB = BITS == 4 ? 128 : 64 };                         \
		int K = w->K, gs = w->group, G = K / gs, words = K * BITS / 32, nc = (K + V - 1) / V;  \
		int gshift = __builtin_ctz(gs), gpc = V > gs ? V >> gshift : 1;                        \
		__m512i idx = _mm512_srli_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, \
		    9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(S)), gshift);                       \
		const __m512i low = _mm512_set1_epi8(0x0f);                                            \
		const char *ahead = pf_start(w, n, R, words, PF_DIST(BITS));                          \
		pf_groups(w, n, R, G);                                                                 \
		__m512 tot[R];                                                                         \
		for (int r = 0; r < R; r++) tot[r] = _mm512_setzero_ps();                              \
		for (int c = 0; c < nc; c++) {                                                         \
			pf_chunk(ahead, c, R * 64, BITS == 8);                                             \
			int left = words - 16 * c, g0 = (c * V) >> gshift, ng = G - g0 < gpc ? G - g0 : gpc; \
			__m512 xs = _mm512_loadu_ps(xsl + 16 * c);                                         \
			__m512i x0 = _mm512_loadu_si512(xq + (long)c * XB), x1 = x0;                       \
			if (BITS == 4) x1 = _mm512_loadu_si512(xq + (long)c * XB + 64);                    \
			for (int r = 0; r < R; r++) {                                                      \
				const uint32_t *p = w->packed + (long)(n + r) * words + 16 * c;                \
				__m512i v = left >= 16 ? _mm512_loadu_si512(p)                                 \
				                       : _mm512_maskz_loadu_epi32((__mmask16)((1u << left) - 1), p); \
				__m512i acc;                                                                   \
				if (BITS == 4) {                                                               \
					acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, low), x0); \
					acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(v, 4), low), x1); \
				} else {                                                                       \
					acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, x0);                  \
				}                                                                              \
				__m512 sv = chunk_scales(w->scales + (long)(n + r) * G + g0, gpc, ng, idx);    \
				tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(sv, xs), tot[r]); \
			}                                                                                  \
		}                                                                                      \
		for (int r = 0; r < R; r++)                                                            \
			out[n + r] = _mm512_reduce_add_ps(tot[r]) + dot512(w->biases + (long)(n + r) * G, xsum, G); \
	}

VNNI(4, 4)
VNNI(4, 1)
VNNI(8, 4)
VNNI(8, 1)

void qmm_gemv_t_i8_vnni(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
                        int n0, int n1, float *out) {
	int n = n0, words = w->K * w->bits / 32;
	pf_first(w, n0, 4, words, w->K / w->group, PF_DIST(w->bits));
	if (w->bits == 4) {
		for (; n + 4 <= n1; n += 4) vnni_4_4(w, xq, xsl, xsum, n, out);
		for (; n < n1; n++) vnni_4_1(w, xq, xsl, xsum, n, out);
	} else {
		for (; n + 4 <= n1; n += 4) vnni_8_4(w, xq, xsl, xsum, n, out);
		for (; n < n1; n++) vnni_8_1(w, xq, xsl, xsum, n, out);
	}
}
#endif

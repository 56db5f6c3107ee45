// Decoding's product with 4- and 8-bit weights on 8-bit activations: integer dot products
// (AVX-512 VNNI's vpdpbusd, 64 multiply-adds of an unsigned weight byte by a signed activation
// byte an instruction) in place of widening every weight to float32. The float kernels spend
// about three vector operations on every 16 weights (mask, convert, multiply-add) and are
// bound by that, not by memory; here 128 weights at 4 bits cost two masks, a shift and two
// dot products.
//
// x is rounded to int8 with one scale per lane: the 32/bits values a 32-bit lane of a chunk
// covers (8 at 4 bits, 4 at 8), so an outlier spoils only its own few neighbours. Per chunk
// and row, the lanes' integer sums are widened once and scaled by the weight group's scale
// times the lane's x scale. The bias term, bias * sum(x) per group, keeps float32 sums of the
// unrounded x. The result differs from the float kernel's by the rounding of x alone, at most
// half an x scale per value (qmm_i8_bound gives the bound a test checks).
#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>
#include <string.h>

#include "avx512.h"
#include "prefetch_x86.h"

#define TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma")))

int qmm_cpu_vnni(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
}

// Lane layout, chunk c of V = 16*S values (S = 32/bits): lane j covers values c*V + j*S ..
// + S-1, the bytes of packed word c*16 + j. At 8 bits byte t of the word is value j*4 + t, so
// x goes in natural order. At 4 bits byte t holds values j*8 + 2t (low nibble) and
// j*8 + 2t + 1 (high), so a chunk's 128 activation bytes are the low nibbles' 64 and then the
// high nibbles' 64, each in byte order.
TARGET void qmm_prepare_x_i8(const qmm_w *w, const float *x, int8_t *xq, float *xsl, float *xsum) {
	int K = w->K, bits = w->bits, S = 32 / bits, V = 16 * S, nc = (K + V - 1) / V;
	int gs = w->group, G = K / gs;
	// At 4 bits a lane's eight values go out as bytes 0, 2, 4, 6 (low nibbles) then 1, 3, 5, 7.
	const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
	const __m128 absmask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
	for (int c = 0; c < nc; c++) {
		int8_t *d = xq + (long)c * 64 * (bits == 4 ? 2 : 1);
		for (int j = 0; j < 16; j++) {
			int k0 = c * V + j * S, n = K - k0 < S ? (K - k0 > 0 ? K - k0 : 0) : S;
			__m128 lo, hi = _mm_setzero_ps(); // the lane's values, zero past K
			if (n == S) {
				lo = _mm_loadu_ps(x + k0);
				if (S == 8) hi = _mm_loadu_ps(x + k0 + 4);
			} else {
				float t[8] = {0};
				for (int i = 0; i < n; i++) t[i] = x[k0 + i];
				lo = _mm_loadu_ps(t), hi = _mm_loadu_ps(t + 4);
			}
			__m128 m = _mm_max_ps(_mm_and_ps(lo, absmask), _mm_and_ps(hi, absmask));
			m = _mm_max_ps(m, _mm_movehl_ps(m, m));
			m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
			float amax = _mm_cvtss_f32(m);
			float inv = amax > 0 ? 127.0f / amax : 0.0f;
			xsl[c * 16 + j] = amax / 127.0f;
			__m128 iv = _mm_set1_ps(inv);
			// Rounded to nearest, ties even; |x*inv| <= 127 up to a rounding, clamped.
			__m128i a = _mm_cvtps_epi32(_mm_mul_ps(lo, iv)), b = _mm_cvtps_epi32(_mm_mul_ps(hi, iv));
			__m128i lim = _mm_set1_epi32(127);
			a = _mm_max_epi32(_mm_min_epi32(a, lim), _mm_sub_epi32(_mm_setzero_si128(), lim));
			b = _mm_max_epi32(_mm_min_epi32(b, lim), _mm_sub_epi32(_mm_setzero_si128(), lim));
			__m128i bytes = _mm_packs_epi16(_mm_packs_epi32(a, b), _mm_setzero_si128()); // 8 bytes in order
			if (bits == 8) {
				*(int32_t *)(d + 4 * j) = _mm_cvtsi128_si32(bytes);
			} else {
				bytes = _mm_shuffle_epi8(bytes, split);
				*(int32_t *)(d + 4 * j) = _mm_cvtsi128_si32(bytes);
				*(int32_t *)(d + 64 + 4 * j) = _mm_extract_epi32(bytes, 1);
			}
		}
	}
	for (int g = 0; g < G; g++) {
		__m512 acc = _mm512_setzero_ps();
		const float *xg = x + (long)g * gs;
		for (int i = 0; i < gs; i += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(xg + i));
		xsum[g] = _mm512_reduce_add_ps(acc);
	}
}

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

void qmm_gemv_t_i8(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
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
#else
int qmm_cpu_vnni(void) { return 0; }
void qmm_prepare_x_i8(const qmm_w *w, const float *x, int8_t *xq, float *xsl, float *xsum) {}
void qmm_gemv_t_i8(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
                   int n0, int n1, float *out) {}
#endif

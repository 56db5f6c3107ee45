// Decoding's product with 4- and 8-bit weights on 8-bit activations: integer dot products in
// place of widening every weight to float32. The float kernels spend about three vector
// operations on every lane of weights (mask, convert, multiply-add) and are bound by that, not
// by memory; integer multiply-adds take four or eight weights a lane at once. Two forms: AVX-512
// VNNI (vnni.c), for 4 and 8 bits, and AVX2 (here), which every x86-64 CPU since 2013 has, for
// 4 bits.
//
// x is rounded to int8 with one scale per lane: the 32/bits values a 32-bit lane of packed
// weights covers (8 at 4 bits, 4 at 8), so an outlier spoils only its own few neighbours. Per
// chunk and row, the lanes' integer sums are widened once and scaled by the weight group's
// scale times the lane's x scale. The bias term, bias * sum(x) per group, keeps float32 sums of
// the unrounded x. The result differs from the float kernel's by the rounding of x alone, at
// most half an x scale per value, and a NaN or infinity in x still reaches every output through
// the bias term.
#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>

#include "avx2.h"
#include "prefetch_x86.h"

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
TARGET_AVX2 void qmm_prepare_x_i8(const qmm_w *w, const float *x, int8_t *xq, float *xsl, float *xsum) {
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
		__m256 acc = _mm256_setzero_ps();
		const float *xg = x + (long)g * gs;
		for (int i = 0; i < gs; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(xg + i));
		xsum[g] = hsum(acc);
	}
}

void qmm_gemv_t_i8_vnni(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
                        int n0, int n1, float *out);

// R rows of 4-bit W from row n, on AVX2: each prepared chunk in two halves of 8 words. For a
// lane set (8 lanes), vpmaddubsw multiplies the nibbles (0..15) by x in pairs (at most
// 2·15·127 a pair, no saturation) and the two halves add in 16 bits (at most 7,620). (At 8 bits
// the AVX2 float kernel already streams at the memory's speed, so integers buy no time there
// for the precision they cost; HasInt8 does not offer them.)
#define I8AVX2(R)                                                                              \
	TARGET_AVX2 static void i8avx2_4_##R(const qmm_w *w, const int8_t *xq, const float *xsl,  \
	                                     const float *xsum, int n, float *out) {              \
		enum { S = 8, V = 128, H = 64 };                                                       \
		int K = w->K, gs = w->group, G = K / gs, words = K / 8, nc = (K + V - 1) / V;          \
		int gshift = __builtin_ctz(gs), gpc = H > gs ? H >> gshift : 1; /* groups per half */  \
		__m256i idx = _mm256_srli_epi32(_mm256_setr_epi32(0, S, 2 * S, 3 * S, 4 * S, 5 * S, 6 * S, 7 * S), gshift); \
		const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);              \
		const char *ahead = pf_start(w, n, R, words, PF_DIST(4));                             \
		pf_groups(w, n, R, G);                                                                 \
		__m256 tot[R];                                                                         \
		for (int r = 0; r < R; r++) tot[r] = _mm256_setzero_ps();                              \
		for (int c = 0; c < nc; c++) {                                                         \
			pf_chunk(ahead, c, R * 64, 0);                                                     \
			for (int h = 0; h < 2; h++) {                                                      \
				int left = words - 16 * c - 8 * h;                                             \
				if (left <= 0) break;                                                          \
				int g0 = (c * V + h * H) >> gshift, ng = G - g0 < gpc ? G - g0 : gpc;          \
				__m256 xs = _mm256_loadu_ps(xsl + 16 * c + 8 * h);                             \
				const int8_t *xc = xq + (long)c * 128 + 32 * h;                                \
				__m256i x0 = _mm256_loadu_si256((const __m256i *)xc);                          \
				__m256i x1 = _mm256_loadu_si256((const __m256i *)(xc + 64));                   \
				for (int r = 0; r < R; r++) {                                                  \
					const uint32_t *p = w->packed + (long)(n + r) * words + 16 * c + 8 * h;    \
					__m256i v = left >= 8 ? _mm256_loadu_si256((const __m256i *)p) : load_partial(p, left); \
					__m256i pr = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(v, low), x0), \
					    _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), x1)); \
					__m256i acc = _mm256_madd_epi16(pr, ones);                                 \
					__m256 sv = chunk_scales(w->scales + (long)(n + r) * G + g0, gpc, ng, idx); \
					tot[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(sv, xs), tot[r]); \
				}                                                                              \
			}                                                                                  \
		}                                                                                      \
		for (int r = 0; r < R; r++)                                                            \
			out[n + r] = hsum(tot[r]) + dot_avx2(w->biases + (long)(n + r) * G, xsum, G);      \
	}

I8AVX2(4)
I8AVX2(1)

void qmm_gemv_t_i8_f32(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
                       int n0, int n1, float *out, int vnni) {
	if (vnni) {
		qmm_gemv_t_i8_vnni(w, xq, xsl, xsum, n0, n1, out);
		return;
	}
	int n = n0, words = w->K / 8; // 4 bits: HasInt8 offers AVX2 nothing else
	pf_first(w, n0, 4, words, w->K / w->group, PF_DIST(4));
	for (; n + 4 <= n1; n += 4) i8avx2_4_4(w, xq, xsl, xsum, n, out);
	for (; n < n1; n++) i8avx2_4_1(w, xq, xsl, xsum, n, out);
}
#else
int qmm_cpu_vnni(void) { return 0; }
void qmm_prepare_x_i8(const qmm_w *w, const float *x, int8_t *xq, float *xsl, float *xsum) {}
void qmm_gemv_t_i8_f32(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
                       int n0, int n1, float *out, int vnni) {}
#endif

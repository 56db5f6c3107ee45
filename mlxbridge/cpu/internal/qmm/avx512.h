// Helpers shared by the AVX-512 matrix-vector kernels (avx512.c, vnni.c).
#ifndef INLOOP_QMM_AVX512_H
#define INLOOP_QMM_AVX512_H

#include <immintrin.h>

#define TARGET512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#define TARGET TARGET512

static inline __attribute__((always_inline)) float TARGET dot512(const float *a, const float *b, int n) {
	__m512 acc = _mm512_setzero_ps();
	int i = 0;
	for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
	if (i < n) {
		__mmask16 k = (__mmask16)((1u << (n - i)) - 1);
		acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), acc);
	}
	return _mm512_reduce_add_ps(acc);
}

// The scales of a chunk's lanes: gpc groups, of which ng < gpc exist in a row's final chunk.
// Full loads of exactly the groups present (masked loads are slow on some CPUs), spread to
// the lanes by idx.
static inline __attribute__((always_inline)) __m512 TARGET chunk_scales(const float *s, int gpc, int ng, __m512i idx) {
	if (gpc == 1) return _mm512_set1_ps(*s);
	if (ng < gpc) return _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps((__mmask16)((1u << ng) - 1), s));
	if (gpc == 2) return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)s))));
	if (gpc == 4) return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_loadu_ps(s)));
	return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(_mm256_loadu_ps(s)));
}

// sum + bias · Σx per group, added lane-wise: a row's G groups fill G lanes, so the row's
// final reduction (sum4 or one reduce) takes the bias term with the integer sums.
static inline __attribute__((always_inline)) __m512 TARGET add_bias_terms(__m512 sum, const float *b, const float *xsum, int G) {
	int g = 0;
	for (; g + 16 <= G; g += 16) sum = _mm512_fmadd_ps(_mm512_loadu_ps(b + g), _mm512_loadu_ps(xsum + g), sum);
	if (g < G) {
		__mmask16 k = (__mmask16)((1u << (G - g)) - 1);
		sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, b + g), _mm512_maskz_loadu_ps(k, xsum + g), sum);
	}
	return sum;
}

// The lane sums of four rows' accumulators, as one vector (a's in lane 0): 128-bit blocks
// of two rows are added pairwise, then of all four, then within each block, so the four
// reductions share their shuffles (about a quarter of four separate reductions' work).
static inline __attribute__((always_inline)) __m128 TARGET sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
	// [a0+a2 a1+a3 b0+b2 b1+b3] with blocks numbered within each row
	__m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
	__m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
	// block j: row j's four partial sums
	__m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
	s = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4e));
	s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xb1));
	// lane 4j holds row j's total
	return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

// Rows n..n+3 done: adds each row's bias term (biases b, one row every G; BIAS is
// add_bias_terms or a 16-bit form below) to its lane sums and stores the four totals at out.
#define STORE4(out, t0, t1, t2, t3, BIAS, b, xsum, G)                                                  \
	_mm_storeu_ps(out, sum4(BIAS(t0, b, xsum, G), BIAS(t1, (b) + (G), xsum, G),                        \
	                        BIAS(t2, (b) + 2 * (G), xsum, G), BIAS(t3, (b) + 3 * (G), xsum, G)))

// The scales of a chunk's lanes, GPC groups' worth from s: one group broadcast, or two, four
// or eight (2-bit weights in groups of 32) spread to the lanes by idx. ng < GPC only in a
// row's final, partial chunk.
#define LANE_SCALES(s, GPC, ng)                                                                      \
	((GPC) == 1 ? _mm512_set1_ps(*(s))                                                               \
	 : (ng) < (GPC) ? _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps((__mmask16)((1u << (ng)) - 1), s)) \
	 : (GPC) == 2 ? _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(s))))) \
	 : (GPC) == 4 ? _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_loadu_ps(s)))          \
	              : _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(_mm256_loadu_ps(s))))

// A 16-bit checkpoint's scales and biases, read at their width (qmm_w.scales16): H is 1 for
// bfloat16, 2 for float16 (0, float32, uses the forms above). The decode kernels are
// instantiated once per H; these helpers take the place of LANE_SCALES and add_bias_terms.
#define TARGET16 __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c")))

// One 16-bit value as a float.
static inline __attribute__((always_inline)) float TARGET16 half_float(uint16_t v, int H) {
	if (H == 2) return _cvtsh_ss(v);
	return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128((int)((uint32_t)v << 16))));
}

// The scales of a chunk's lanes from GPC 16-bit values at s, as LANE_SCALES. Bfloat16 widens
// in the permute itself: each lane's high half takes its group's value (vpermw), the low half
// is zeroed, which is the float's bits.
static inline __attribute__((always_inline)) __m512 TARGET16 lane_scales16(const uint16_t *s, int GPC, int ng,
                                                                           __m512i idx, int H) {
	if (GPC == 1) return _mm512_set1_ps(half_float(*s, H));
	__m128i v;
	if (ng < GPC) v = _mm_maskz_loadu_epi16((__mmask8)((1u << ng) - 1), s);
	else if (GPC == 2) v = _mm_cvtsi32_si128(*(const int32_t *)(const void *)s);
	else if (GPC == 4) v = _mm_loadl_epi64((const __m128i *)(const void *)s);
	else v = _mm_loadu_si128((const __m128i *)(const void *)s);
	if (H == 1)
		return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xaaaaaaaau, _mm512_slli_epi32(idx, 16),
		                                                           _mm512_castsi128_si512(v)));
	return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(_mm256_cvtph_ps(v)));
}

// Sixteen 16-bit values as floats.
static inline __attribute__((always_inline)) __m512 TARGET16 widen16(__m256i v, int H) {
	if (H == 2) return _mm512_cvtph_ps(v);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

// add_bias_terms with 16-bit biases.
static inline __attribute__((always_inline)) __m512 TARGET16 add_bias_terms16(__m512 sum, const uint16_t *b,
                                                                              const float *xsum, int G, int H) {
	int g = 0;
	for (; g + 16 <= G; g += 16)
		sum = _mm512_fmadd_ps(widen16(_mm256_loadu_si256((const __m256i *)(const void *)(b + g)), H),
		                      _mm512_loadu_ps(xsum + g), sum);
	if (g < G) {
		__mmask16 k = (__mmask16)((1u << (G - g)) - 1);
		sum = _mm512_fmadd_ps(widen16(_mm256_maskz_loadu_epi16(k, b + g), H), _mm512_maskz_loadu_ps(k, xsum + g), sum);
	}
	return sum;
}

// scale_width is w's H: which form of a decode kernel reads its scales.
static inline int scale_width(const qmm_w *w) { return w->scales ? 0 : w->f16 ? 2 : 1; }

// The per-H pieces the decode kernels are written with: the scale and bias pointers' type and
// where they are, the lanes' scales, the bias term and the kernel's target.
#define SCALE_T_0 float
#define SCALE_T_1 uint16_t
#define SCALE_T_2 uint16_t
#define SCALES_0(w) ((w)->scales)
#define SCALES_1(w) ((w)->scales16)
#define SCALES_2(w) ((w)->scales16)
#define BIASES_0(w) ((w)->biases)
#define BIASES_1(w) ((w)->biases16)
#define BIASES_2(w) ((w)->biases16)
#define LANES_0(s, GPC, ng) LANE_SCALES(s, GPC, ng)
#define LANES_1(s, GPC, ng) lane_scales16(s, GPC, ng, idx, 1)
#define LANES_2(s, GPC, ng) lane_scales16(s, GPC, ng, idx, 2)
#define BIAS_0(t, b, xsum, G) add_bias_terms(t, b, xsum, G)
#define BIAS_1(t, b, xsum, G) add_bias_terms16(t, b, xsum, G, 1)
#define BIAS_2(t, b, xsum, G) add_bias_terms16(t, b, xsum, G, 2)

#undef TARGET
#endif

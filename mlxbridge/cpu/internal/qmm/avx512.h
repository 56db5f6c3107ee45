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

// Rows n..n+3 done: adds each row's bias term (biases b, one row every G) to its lane
// sums and stores the four totals at out.
static inline __attribute__((always_inline)) void TARGET store4(float *out, __m512 t0, __m512 t1, __m512 t2, __m512 t3,
                                                                const float *b, const float *xsum, int G) {
	t0 = add_bias_terms(t0, b, xsum, G);
	t1 = add_bias_terms(t1, b + G, xsum, G);
	t2 = add_bias_terms(t2, b + 2 * G, xsum, G);
	t3 = add_bias_terms(t3, b + 3 * G, xsum, G);
	_mm_storeu_ps(out, sum4(t0, t1, t2, t3));
}

// The scales of a chunk's lanes, GPC groups' worth from s: one group broadcast, or two, four
// or eight (2-bit weights in groups of 32) spread to the lanes by idx. ng < GPC only in a
// row's final, partial chunk.
#define LANE_SCALES(s, GPC, ng)                                                                      \
	((GPC) == 1 ? _mm512_set1_ps(*(s))                                                               \
	 : (ng) < (GPC) ? _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps((__mmask16)((1u << (ng)) - 1), s)) \
	 : (GPC) == 2 ? _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(s))))) \
	 : (GPC) == 4 ? _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_loadu_ps(s)))          \
	              : _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(_mm256_loadu_ps(s))))

#undef TARGET
#endif

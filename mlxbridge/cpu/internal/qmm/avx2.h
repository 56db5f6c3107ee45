// Helpers shared by the AVX2 matrix-vector kernels (avx2.c, i8avx2.c).
#ifndef INLOOP_QMM_AVX2_H
#define INLOOP_QMM_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TARGET TARGET_AVX2
#define INLINE static inline __attribute__((always_inline))

TARGET INLINE float hsum(__m256 v) {
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

TARGET INLINE float dot_avx2(const float *a, const float *b, int n) {
	__m256 acc = _mm256_setzero_ps();
	int i = 0;
	for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
	float s = hsum(acc);
	for (; i < n; i++) s += a[i] * b[i];
	return s;
}

// The scales of a chunk's lanes: gpc groups, of which ng < gpc exist in a row's final chunk.
// Loads of exactly the groups present, spread to the lanes by idx.
TARGET INLINE __m256 chunk_scales(const float *s, int gpc, int ng, __m256i idx) {
	if (gpc == 1 || ng == 1) return _mm256_broadcast_ss(s);
	if (gpc == 2 || ng == 2) return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_castpd_ps(_mm_load_sd((const double *)s))), idx);
	if (ng == 3) return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_setr_ps(s[0], s[1], s[2], 0)), idx);
	return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(s)), idx);
}

// The first `left` (< 8) words of a chunk, zeros after; only a row's final chunk needs it.
TARGET INLINE __m256i load_partial(const uint32_t *p, int left) {
	uint32_t tmp[8] = {0};
	memcpy(tmp, p, sizeof(uint32_t) * left);
	return _mm256_loadu_si256((const __m256i *)tmp);
}

#undef TARGET
#undef INLINE
#endif

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

#undef TARGET
#endif

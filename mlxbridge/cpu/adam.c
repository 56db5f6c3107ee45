// The float32 Adam(W) update of optim.go. Every product, sum, square root and
// quotient is rounded on its own, as the composed ops round: no contraction
// into fused multiply-adds (which GNU C mode and Clang would otherwise allow).
// The vector forms use intrinsics because a plain loop calling sqrtf does not
// vectorize under the default -fmath-errno, which cgo does not let a package
// turn off.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif
#include <math.h>
#include "vecmath.h"

// k: b1, c1, b2, c2, decay, num, div, eps. m and v NULL: zero moments.
static void adam_scalar(float *po, float *mo, float *vo, const float *p, const float *g, const float *m,
                        const float *v, size_t i, size_t n, const float *k) {
	for (; i < n; i++) {
		float gi = g[i], m0 = m ? m[i] : 0.0f, v0 = v ? v[i] : 0.0f;
		float mi = m0 * k[0] + gi * k[1];
		float vi = v0 * k[2] + (gi * gi) * k[3];
		float den = sqrtf(vi) / k[6] + k[7];
		po[i] = p[i] * k[4] - (mi * k[5]) / den;
		mo[i] = mi;
		vo[i] = vi;
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// ADAM_VEC is the loop over whole vectors of W floats with the intrinsics of
// prefix P (_mm256 or _mm512) on type T; it leaves i at the first element not
// done.
#define ADAM_VEC(W, T, P)                                                                                    \
	T b1 = P##_set1_ps(k[0]), c1 = P##_set1_ps(k[1]), b2 = P##_set1_ps(k[2]), c2 = P##_set1_ps(k[3]);    \
	T decay = P##_set1_ps(k[4]), num = P##_set1_ps(k[5]), div = P##_set1_ps(k[6]), eps = P##_set1_ps(k[7]); \
	T zero = P##_setzero_ps();                                                                             \
	for (; i + W <= n; i += W) {                                                                           \
		T gi = P##_loadu_ps(g + i);                                                                        \
		T m0 = m ? P##_loadu_ps(m + i) : zero, v0 = v ? P##_loadu_ps(v + i) : zero;                       \
		T mi = P##_add_ps(P##_mul_ps(m0, b1), P##_mul_ps(gi, c1));                                         \
		T vi = P##_add_ps(P##_mul_ps(v0, b2), P##_mul_ps(P##_mul_ps(gi, gi), c2));                         \
		T den = P##_add_ps(P##_div_ps(P##_sqrt_ps(vi), div), eps);                                         \
		T pi = P##_sub_ps(P##_mul_ps(P##_loadu_ps(p + i), decay), P##_div_ps(P##_mul_ps(mi, num), den));   \
		P##_storeu_ps(po + i, pi);                                                                         \
		P##_storeu_ps(mo + i, mi);                                                                         \
		P##_storeu_ps(vo + i, vi);                                                                         \
	}

__attribute__((target("avx512f"))) static size_t adam_avx512(float *po, float *mo, float *vo, const float *p,
                                                              const float *g, const float *m, const float *v,
                                                              size_t n, const float *k) {
	size_t i = 0;
	ADAM_VEC(16, __m512, _mm512)
	return i;
}

__attribute__((target("avx"))) static size_t adam_avx(float *po, float *mo, float *vo, const float *p,
                                                       const float *g, const float *m, const float *v, size_t n,
                                                       const float *k) {
	size_t i = 0;
	ADAM_VEC(8, __m256, _mm256)
	return i;
}
#endif

static int adam_cap = -1; // tests only (inloop_adam_limit), set while nothing runs

void inloop_adam_limit(int level) { adam_cap = level; }

void inloop_adam(float *po, float *mo, float *vo, const float *p, const float *g, const float *m, const float *v,
                 size_t n, const float *k) {
	size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
	// Asked on every call (a load and a test): cores run this at once, and a
	// cached answer written by both would be a data race.
	int level = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx") ? 1 : 0;
	if (adam_cap >= 0 && adam_cap < level) level = adam_cap;
	if (level == 2)
		i = adam_avx512(po, mo, vo, p, g, m, v, n, k);
	else if (level == 1)
		i = adam_avx(po, mo, vo, p, g, m, v, n, k);
#endif
	adam_scalar(po, mo, vo, p, g, m, v, i, n, k);
}

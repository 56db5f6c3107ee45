#include <math.h>
#include <stdint.h>
#include <string.h>
#include "vecmath.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MULTIVERSION __attribute__((target_clones("avx2,fma", "default")))
#else
#define MULTIVERSION
#endif

static inline int32_t bits_of(float f) { int32_t i; memcpy(&i, &f, 4); return i; }
static inline float float_of(int32_t i) { float f; memcpy(&f, &i, 4); return f; }

// e^x to within 2 ulp for x in [-87.3, 88.3]; 0 below (so masked -inf scores give
// exactly 0), +inf above, NaN for NaN. Cody–Waite reduction x = n·ln2 + r and a
// degree-6 polynomial for e^r (Cephes' expf coefficients); 2^n is built in the
// exponent bits. The range checks are bit masks rather than branches or ternaries so
// compilers vectorize the loops without relaxing floating-point semantics.
static inline float exp_poly(float x) {
	int32_t under = -(int32_t)(x < -87.3f), over = -(int32_t)(x > 88.3f);
	int32_t keep = ~(under | over);
	float xc = float_of((bits_of(x) & keep) | (bits_of(-87.3f) & under) | (bits_of(88.3f) & over));
	float t = xc * 1.44269504088896341f;
	int32_t ni = (int32_t)(t + __builtin_copysignf(0.5f, t)); // round to nearest
	float n = (float)ni;
	float r = xc - n * 0.693359375f - n * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	float y = p * float_of((ni + 127) << 23);
	return float_of((bits_of(y) & keep) | (bits_of(__builtin_inff()) & over));
}

MULTIVERSION
void inloop_exp(float *y, const float *x, size_t n) {
	for (size_t i = 0; i < n; i++) y[i] = exp_poly(x[i]);
}

MULTIVERSION
void inloop_silu(float *y, const float *x, size_t n) {
	for (size_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + exp_poly(-x[i]));
}

MULTIVERSION
void inloop_sigmoid(float *y, const float *x, size_t n) {
	for (size_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + exp_poly(-x[i]));
}

// The row max uses GCC/Clang vector extensions: a compare gives a lane mask and the
// select is bitwise, so it vectorizes without relaxing NaN semantics (a scalar
// `x > m ? x : m` does not, under strict floating point).
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static float row_max(const float *x, size_t d) {
	v8f m8;
	for (int k = 0; k < 8; k++) m8[k] = -__builtin_inff();
	size_t i = 0;
	for (; i + 8 <= d; i += 8) {
		v8f v;
		memcpy(&v, x + i, sizeof v);
		v8i gt = (v8i)(v > m8);
		m8 = (v8f)(((v8i)v & gt) | ((v8i)m8 & ~gt));
	}
	float m = -__builtin_inff();
	for (int k = 0; k < 8; k++) m = m8[k] > m ? m8[k] : m;
	for (; i < d; i++) m = x[i] > m ? x[i] : m;
	return m;
}

// Sums in blocks of float with a double total, so long rows keep their precision.
static double exp_sum(float *e, const float *x, float m, size_t d) {
	double total = 0;
	for (size_t b = 0; b < d; b += 1024) {
		size_t end = b + 1024 < d ? b + 1024 : d;
		for (size_t i = b; i < end; i++) e[i] = exp_poly(x[i] - m);
		float s8[8] = {0}; // the block is in L1 now; sum it in 8 lanes
		size_t i = b;
		for (; i + 8 <= end; i += 8)
			for (int k = 0; k < 8; k++) s8[k] += e[i + k];
		for (; i < end; i++) s8[0] += e[i];
		for (int k = 0; k < 8; k++) total += s8[k];
	}
	return total;
}

MULTIVERSION
void inloop_softmax_rows(float *out, const float *x, size_t rows, size_t d) {
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * d;
		float *o = out + r * d;
		float m = row_max(xr, d);
		if (isinf(m) && m < 0) m = 0; // a fully masked row: all zeros, then 0/0 = NaN as in MLX
		float inv = (float)(1.0 / exp_sum(o, xr, m, d));
		for (size_t i = 0; i < d; i++) o[i] *= inv;
	}
}

// Attention rows: p[0:limit] = softmax(p[0:limit]·scale), p[limit:d] = 0 (the causal
// mask), in place.
MULTIVERSION
void inloop_softmax_causal_rows(float *p, size_t rows, size_t d, size_t first_limit, float scale) {
	for (size_t r = 0; r < rows; r++) {
		float *row = p + r * d;
		size_t limit = first_limit + r < d ? first_limit + r : d;
		for (size_t j = 0; j < limit; j++) row[j] *= scale;
		float m = row_max(row, limit);
		if (isinf(m) && m < 0) m = 0;
		float inv = (float)(1.0 / exp_sum(row, row, m, limit));
		for (size_t j = 0; j < limit; j++) row[j] *= inv;
		for (size_t j = limit; j < d; j++) row[j] = 0;
	}
}

MULTIVERSION
void inloop_logsumexp_rows(float *out, const float *x, size_t rows, size_t d) {
	float scratch[1024];
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * d;
		float m = row_max(xr, d);
		if (isinf(m)) {
			out[r] = m;
			continue;
		}
		double total = 0;
		for (size_t b = 0; b < d; b += 1024) {
			size_t n = b + 1024 < d ? 1024 : d - b;
			total += exp_sum(scratch, xr + b, m, n);
		}
		out[r] = (float)log(total) + m;
	}
}

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "vecmath.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MULTIVERSION __attribute__((target_clones("avx2,fma", "default")))
// The attention kernels' clone has AVX2 and FMA together, so a product and its sum
// contract into one instruction. ("avx2,fma" above is two clones, one each: the
// functions under it keep their separate, bit-reproducible roundings.)
#define MULTIVERSION_FMA __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#define MULTIVERSION_FMA
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

// silu'(x) = σ(x)·(1 + x·(1 − σ(x))), with 1 − σ(x) taken as e·σ(x) (e =
// e^−x) for x > 0, where the subtraction would cancel.
MULTIVERSION
void inloop_silu_grad(float *y, const float *x, size_t n) {
	for (size_t i = 0; i < n; i++) {
		float e = exp_poly(-x[i]);
		float s = 1.0f / (1.0f + e);
		int32_t pos = -(int32_t)(x[i] > 0); // a mask, not a branch: the loop vectorizes
		float c = float_of((bits_of(e * s) & pos) | (bits_of(1.0f - s) & ~pos));
		y[i] = s * (1.0f + x[i] * c);
	}
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

static inline __attribute__((always_inline)) float row_max(const float *x, size_t d) {
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
static inline __attribute__((always_inline)) double exp_sum(float *e, const float *x, float m, size_t d) {
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

// row[0:n] = e^(row·scale − m) in place, m (set) the largest scaled score, or 0 when
// all are −inf (a fully masked row then sums to 0, and 0/0 gives NaN as in MLX);
// returns the sum.
static inline __attribute__((always_inline)) double scaled_exp(float *row, size_t n, float scale, float *m) {
	for (size_t j = 0; j < n; j++) row[j] *= scale;
	float mx = row_max(row, n);
	if (isinf(mx) && mx < 0) mx = 0;
	*m = mx;
	return exp_sum(row, row, mx, n);
}

// Attention rows: p[0:limit] = softmax(p[0:limit]·scale), p[limit:d] = 0 (the causal
// mask), in place.
MULTIVERSION
void inloop_softmax_causal_rows(float *p, size_t rows, size_t d, size_t first_limit, float scale) {
	for (size_t r = 0; r < rows; r++) {
		float *row = p + r * d, m;
		size_t limit = first_limit + r < d ? first_limit + r : d;
		float inv = (float)(1.0 / scaled_exp(row, limit, scale, &m));
		for (size_t j = 0; j < limit; j++) row[j] *= inv;
		for (size_t j = limit; j < d; j++) row[j] = 0;
	}
}

// One piece of attention rows for a split decode step: scaled_exp of each row's n
// scores, its maximum in m and its sum in l, left unnormalized for the pieces to be
// put together.
MULTIVERSION
void inloop_softmax_part(float *p, size_t rows, size_t ld, size_t n, float scale, float *m, float *l) {
	for (size_t r = 0; r < rows; r++) l[r] = (float)scaled_exp(p + r * ld, n, scale, &m[r]);
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

// out[i] = a[i·as] op b[i·bs] for op 0 add, 1 sub, 2 mul, 3 div and strides as, bs in
// {0, 1}: the elementwise arithmetic of training and prefill, vectorized (a plain Go loop
// does one element at a time). Each result is the one correctly rounded IEEE operation,
// as in Go.
#define BINARY_LOOP(EXPR)                                                   \
	do {                                                                    \
		if (as && bs) for (size_t i = 0; i < n; i++) { float x = a[i], y = b[i]; out[i] = EXPR; } \
		else if (as) { float y = b[0]; for (size_t i = 0; i < n; i++) { float x = a[i]; out[i] = EXPR; } } \
		else { float x = a[0]; for (size_t i = 0; i < n; i++) { float y = b[i]; out[i] = EXPR; } } \
	} while (0)

MULTIVERSION
void inloop_binary(int op, float *out, const float *a, int as, const float *b, int bs, size_t n) {
	switch (op) {
	case 0: BINARY_LOOP(x + y); break;
	case 1: BINARY_LOOP(x - y); break;
	case 2: BINARY_LOOP(x * y); break;
	case 3: BINARY_LOOP(x / y); break;
	}
}

// The cross-entropy's backward pass, one pass over the logits: row r of out is
// g[r]·e^(x − lse[r]), less g[r] at the target t[r] (checked by the caller). The same
// float operations, in the same order, as the composed backward (the log-sum-exp's
// g·e^(x − lse) plus the picked logit's −g scattered in), so the two agree bit for bit.
MULTIVERSION
void inloop_xent_grad_rows(float *out, const float *x, const float *lse, const float *g, const int32_t *t,
                           size_t rows, size_t d) {
	for (size_t r = 0; r < rows; r++) {
		const float *xr = x + r * d;
		float *o = out + r * d, l = lse[r], gr = g[r];
		for (size_t j = 0; j < d; j++) o[j] = gr * exp_poly(xr[j] - l);
		o[t[r]] += -gr;
	}
}

#if defined(__clang__)
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (v8i){__VA_ARGS__})
#endif

// The sums of 8 vectors' lanes, sum(a[j]) in lane j, in three rounds of pairwise adds.
static inline void sum8(v8f *sum, const v8f a[8]) {
	v8f t[4], u[2];
	for (int i = 0; i < 4; i++)
		t[i] = SHUFFLE(a[2 * i], a[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
		       SHUFFLE(a[2 * i], a[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
	for (int i = 0; i < 2; i++)
		u[i] = SHUFFLE(t[2 * i], t[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
		       SHUFFLE(t[2 * i], t[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
	*sum = SHUFFLE(u[0], u[1], 0, 1, 2, 3, 8, 9, 10, 11) + SHUFFLE(u[0], u[1], 4, 5, 6, 7, 12, 13, 14, 15);
}

// LOAD8 reads 8 floats at p, aligned or not, into the v8f v.
#define LOAD8(v, p) memcpy(&(v), (p), sizeof(v8f))

// q·k over n values in 8 lanes, the lanes then added pairwise.
static inline float dot8(const float *a, const float *b, size_t n) {
	v8f acc = {0};
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		v8f x, y;
		LOAD8(x, a + i);
		LOAD8(y, b + i);
		acc += x * y;
	}
	float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
	for (; i < n; i++) sum += a[i] * b[i];
	return sum;
}

// Eight dot products at once: dots[t] = Σ_{e0 ≤ e < e1} q[e]·k[t·stride + e], each
// in 8 lanes and all eight summed across lanes together (e1 − e0 a multiple of 8).
static inline void dot8x8(v8f *dots, const float *q, const float *k, size_t stride, size_t e0, size_t e1) {
	v8f acc[8] = {0};
	for (size_t e = e0; e < e1; e += 8) {
		v8f qv, kv;
		LOAD8(qv, q + e);
		for (int t = 0; t < 8; t++) {
			LOAD8(kv, k + t * stride + e);
			acc[t] += qv * kv;
		}
	}
	sum8(dots, acc);
}


// A bfloat16 as a float: its high half.
static inline float bf16_float(uint16_t h) {
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

// Element i of v: a float, or a bfloat16 widened (HALF).
static inline __attribute__((always_inline)) float elem_at(const void *v, size_t i, const int HALF) {
	return HALF ? bf16_float(((const uint16_t *)v)[i]) : ((const float *)v)[i];
}

// Sixteen bfloat16 values at v as two vectors of floats: the even ones and the odd
// ones. One load, a shift and a mask: a bfloat16 is a float's high half, and a
// 32-bit lane holds an even value in its low half and an odd one in its high half
// (little-endian). Kernels over bfloat16 keep their sums split the same way.
static inline __attribute__((always_inline)) void load16h(v8f *even, v8f *odd, const uint16_t *v) {
	v8i w;
	memcpy(&w, v, sizeof w);
	*even = (v8f)(w << 16);
	*odd = (v8f)(w & (v8i){-65536, -65536, -65536, -65536, -65536, -65536, -65536, -65536});
}

// Sixteen values of v from element i: c..c+8 in *x and c+8..c+16 in *y, or for
// bfloat16 (HALF) the even ones in *x and the odd ones in *y (load16h).
static inline __attribute__((always_inline)) void load16(v8f *x, v8f *y, const void *v, size_t i, const int HALF) {
	if (HALF) {
		load16h(x, y, (const uint16_t *)v + i);
		return;
	}
	memcpy(x, (const float *)v + i, sizeof *x);
	memcpy(y, (const float *)v + i + 8, sizeof *y);
}

// Sixteen columns (c..c+16) of NR rows of out, plus Σ_j p[r·ld + j]·v_j over n
// values (floats, or bfloat16 when HALF, summed as even and odd columns). NR is a
// constant where it is called, so the loops unroll and the sums live in registers;
// with one or two rows, even and odd positions keep sums of their own, so enough
// of them are in flight to hide the adds' latency. Each position also prefetches the line at element pf + j·dv,
// for the first npf positions: the same columns of the next block, so a block's
// prefetches spread over its passes instead of stalling in a burst.
static inline __attribute__((always_inline)) void values_cols(float *restrict out, size_t dv, const float *restrict p,
                                                              size_t ld, const void *restrict v, size_t n, size_t c,
                                                              const char *pf, size_t npf, const int NR,
                                                              const int HALF) {
	size_t es = HALF ? 2 : 4;
	v8f a0[4], b0[4], a1[4], b1[4];
	for (int r = 0; r < NR; r++) a0[r] = b0[r] = a1[r] = b1[r] = (v8f){0};
	size_t j = 0;
	if (NR <= 2)
		for (; j + 2 <= n; j += 2) {
			if (j + 1 < npf) {
				__builtin_prefetch(pf + j * dv * es, 0, 3);
				__builtin_prefetch(pf + (j + 1) * dv * es, 0, 3);
			}
			v8f x0, x1, y0, y1;
			load16(&x0, &x1, v, j * dv + c, HALF);
			load16(&y0, &y1, v, (j + 1) * dv + c, HALF);
			for (int r = 0; r < NR; r++) {
				float p0 = p[r * ld + j], p1 = p[r * ld + j + 1];
				a0[r] += p0 * x0;
				b0[r] += p0 * x1;
				a1[r] += p1 * y0;
				b1[r] += p1 * y1;
			}
		}
	for (; j < n; j++) {
		if (j < npf) __builtin_prefetch(pf + j * dv * es, 0, 3);
		v8f x0, x1;
		load16(&x0, &x1, v, j * dv + c, HALF);
		for (int r = 0; r < NR; r++) {
			float pr = p[r * ld + j];
			a0[r] += pr * x0;
			b0[r] += pr * x1;
		}
	}
	for (int r = 0; r < NR; r++) {
		float *o = out + r * dv + c;
		v8f o0, o1;
		LOAD8(o0, o);
		LOAD8(o1, o + 8);
		v8f x = a0[r] + a1[r], y = b0[r] + b1[r];
		if (HALF) { // even and odd columns back in order
			v8f t = SHUFFLE(x, y, 0, 8, 1, 9, 2, 10, 3, 11);
			y = SHUFFLE(x, y, 4, 12, 5, 13, 6, 14, 7, 15);
			x = t;
		}
		o0 += x;
		o1 += y;
		memcpy(o, &o0, sizeof o0);
		memcpy(o + 8, &o1, sizeof o1);
	}
}

// values_block is inloop_attend_values over n values (floats, or bfloat16 when
// HALF) that fit in L1: every column pass over them reads them from there. next
// is the block after (nnext values), prefetched as the first rows pass.
static inline __attribute__((always_inline)) void values_block(float *restrict out, size_t rows, size_t dv,
                                                               const float *restrict p, size_t ld,
                                                               const void *restrict v, size_t n, const void *next,
                                                               size_t nnext, const int HALF) {
	size_t d16 = dv / 16 * 16, es = HALF ? 2 : 4;
	for (size_t r0 = 0; r0 < rows; r0 += 4) {
		float *o = out + r0 * dv;
		const float *pr = p + r0 * ld;
		for (size_t c = 0; c < d16; c += 16) {
			const char *pf = (const char *)next + c * es;
			size_t npf = r0 == 0 ? nnext : 0;
			switch (rows - r0) {
			case 1: values_cols(o, dv, pr, ld, v, n, c, pf, npf, 1, HALF); break;
			case 2: values_cols(o, dv, pr, ld, v, n, c, pf, npf, 2, HALF); break;
			case 3: values_cols(o, dv, pr, ld, v, n, c, pf, npf, 3, HALF); break;
			default: values_cols(o, dv, pr, ld, v, n, c, pf, npf, 4, HALF); break;
			}
		}
		size_t nr = rows - r0 < 4 ? rows - r0 : 4;
		for (size_t j = 0; j < n && d16 < dv; j++)
			for (size_t r = 0; r < nr; r++) {
				float pj = pr[r * ld + j];
				for (size_t c = d16; c < dv; c++) o[r * dv + c] += pj * elem_at(v, j * dv + c, HALF);
			}
	}
}

// values runs values_block over s values a block of at most 16 KiB (as floats) at
// a time.
static inline __attribute__((always_inline)) void values(float *restrict out, size_t rows, size_t dv,
                                                         const float *restrict p, size_t ld, const void *restrict v,
                                                         size_t s, const int HALF) {
	size_t vb = dv > 0 && 4096 / dv > 8 ? 4096 / dv : 8, es = HALF ? 2 : 4;
	const char *vc = v;
	for (size_t j = 0; j < s; j += vb) {
		size_t n = s - j < vb ? s - j : vb;
		size_t m = s - j - n < vb ? s - j - n : vb; // the next block's
		values_block(out, rows, dv, p + j, ld, vc + j * dv * es, n, vc + (j + n) * dv * es, m, HALF);
	}
}

// Values: out_r += Σ_j p[r·ld + j]·v_j for rows r of out (rows, dv) and values j of
// v (s, dv). The values are taken a block of at most 16 KiB at a time, the next
// block prefetched, and up to four rows and 16 columns of out stay in registers
// while the block passes; so each value is read from memory once, however many
// column passes its width takes.
MULTIVERSION_FMA
void inloop_attend_values(float *restrict out, size_t rows, size_t dv, const float *restrict p, size_t ld,
                          const float *restrict v, size_t s) {
	values(out, rows, dv, p, ld, v, s, 0);
}

typedef uint32_t v8u __attribute__((vector_size(32)));

// Eight 4- or 2-bit values of a packed row from value i on (a multiple of 8) as
// floats: the word broadcast to the lanes, shifted by its values' offsets and
// masked, then converted; a variable shift and a conversion, not a loop over bytes.
static inline __attribute__((always_inline)) void unpack8(v8f *out, const uint32_t *restrict w, size_t i, int bits) {
	v8u x;
	switch (bits) {
	case 4: {
		uint32_t u = w[i / 8];
		x = ((v8u){u, u, u, u, u, u, u, u} >> (v8u){0, 4, 8, 12, 16, 20, 24, 28}) & 15;
		break;
	}
	default: { // 2 (8 bits is unpack_row's own loop)
		uint32_t u = w[i / 16] >> (i % 16 * 2);
		x = ((v8u){u, u, u, u, u, u, u, u} >> (v8u){0, 2, 4, 6, 8, 10, 12, 14}) & 3;
		break;
	}
	}
	*out = __builtin_convertvector((v8i)x, v8f);
}

// A packed row's n values at `bits` (2, 4 or 8; LSB first, as MLX packs them) as
// floats; n is a multiple of 8. Bytes convert in a plain loop, which the compiler
// vectorizes (a zero extension and a conversion).
static inline __attribute__((always_inline)) void unpack_row(float *restrict dst, const uint32_t *restrict w, size_t n,
                                                             int bits) {
	if (bits == 8) {
		const uint8_t *b = (const uint8_t *)w; // little-endian: the words' low bytes come first
		for (size_t i = 0; i < n; i++) dst[i] = (float)b[i];
		return;
	}
	for (size_t i = 0; i < n; i += 8) {
		v8f x;
		unpack8(&x, w, i, bits);
		memcpy(dst + i, &x, sizeof x);
	}
}

// Eight keys' scales (or biases) of group g, from c (the first key's groups,
// then the next's): one load with one group a key, two loads and a shuffle with
// two (heads of 64 and 128 in groups of 64), lane by lane otherwise.
static inline __attribute__((always_inline)) void group_coefs(v8f *out, const float *restrict c, size_t groups,
                                                              size_t g) {
	if (groups == 1) {
		LOAD8(*out, c);
		return;
	}
	if (groups == 2) {
		v8f a, b;
		LOAD8(a, c);
		LOAD8(b, c + 8);
		*out = g == 0 ? SHUFFLE(a, b, 0, 2, 4, 6, 8, 10, 12, 14) : SHUFFLE(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
		return;
	}
	for (int t = 0; t < 8; t++) (*out)[t] = c[t * groups + g];
}

// Attention over a quantized part (AttendQuantized): scores p[r·ld + j] = q_r·k_j
// for keys k_j = scale·int + bias per group. q holds rows of dp values (zero past
// the head size), qsum their sums per group; w, s, b hold n keys' packed words and
// their groups' scales and biases. tmp holds 8·dp floats. Per group it is
// scale·(q·int) + bias·Σq. Eight keys at a time are unpacked once for all the
// rows, and their eight dot products per group summed across lanes at once.
MULTIVERSION_FMA
void inloop_attend_quant_scores(float *restrict p, size_t ld, const float *restrict q, const float *restrict qsum,
                                size_t rows, size_t dp, size_t group, int bits, const uint32_t *restrict w,
                                const float *restrict s, const float *restrict b, size_t n, float *restrict tmp) {
	size_t groups = dp / group, words = dp * bits / 32, j = 0;
	for (; j + 8 <= n; j += 8) {
		for (int t = 0; t < 8; t++) unpack_row(tmp + t * dp, w + (j + t) * words, dp, bits);
		for (size_t r = 0; r < rows; r++) {
			const float *qr = q + r * dp;
			v8f sc = {0};
			for (size_t g = 0; g < groups; g++) {
				v8f dots, sv, bv;
				dot8x8(&dots, qr, tmp, dp, g * group, (g + 1) * group);
				group_coefs(&sv, s + j * groups, groups, g);
				group_coefs(&bv, b + j * groups, groups, g);
				float qs = qsum[r * groups + g];
				sc += sv * dots + bv * qs;
			}
			memcpy(p + r * ld + j, &sc, sizeof sc);
		}
	}
	for (; j < n; j++) {
		unpack_row(tmp, w + j * words, dp, bits);
		const float *sj = s + j * groups, *bj = b + j * groups;
		for (size_t r = 0; r < rows; r++) {
			float acc = 0;
			for (size_t g = 0; g < groups; g++)
				acc += sj[g] * dot8(q + r * dp + g * group, tmp + g * group, group) + bj[g] * qsum[r * groups + g];
			p[r * ld + j] = acc;
		}
	}
}

// Values: out_r += Σ_j p[r·ld + j]·v_j over n quantized values v_j = scale·int +
// bias: QBLOCK positions at a time are dequantized into tmp (QBLOCK·dp floats, in
// L1; their first dv values each, a row after another), which values_block then
// passes over.
enum { QBLOCK = 32 };
MULTIVERSION_FMA
void inloop_attend_quant_values(float *restrict out, size_t rows, size_t dv, const float *restrict p, size_t ld,
                                size_t dp, size_t group, int bits, const uint32_t *restrict w,
                                const float *restrict s, const float *restrict b, size_t n, float *restrict tmp) {
	size_t groups = dp / group, words = dp * bits / 32;
	for (size_t j0 = 0; j0 < n; j0 += QBLOCK) {
		size_t nb = n - j0 < QBLOCK ? n - j0 : QBLOCK;
		for (size_t t = 0; t < nb; t++) { // in order: a row's last vector may run up to 7 values into the next
			size_t j = j0 + t;
			float *row = tmp + t * dv;
			const uint8_t *bytes = (const uint8_t *)(w + j * words);
			for (size_t g = 0; g * group < dv; g++) {
				float sg = s[j * groups + g], bg = b[j * groups + g];
				size_t end = (g + 1) * group < dv ? (g + 1) * group : dv;
				if (bits == 8) // one pass: the compiler vectorizes the conversion
					for (size_t i = g * group; i < end; i++) row[i] = sg * (float)bytes[i] + bg;
				else
					for (size_t i = g * group; i < end; i += 8) {
						v8f x;
						unpack8(&x, w + j * words, i, bits);
						x = sg * x + bg;
						memcpy(row + i, &x, sizeof x);
					}
			}
		}
		values_block(out, rows, dv, p + j0, ld, tmp, nb, tmp, 0, 0);
	}
}

// bfloat16 keys (a 16-bit KV cache) for more than BF16_TMP query rows: widened
// BF16_BLOCK positions at a time into tmp for the float kernel, a shift per value,
// the block in L1 while every row passes over it.
enum { BF16_BLOCK = 16 };
// The query rows inloop_attend_bf16_scores lays out in tmp: the caller's tmp holds
// 64·d floats (bf16Block on the Go side), so up to 64 rows.
enum { BF16_TMP = 64 };

#ifndef PFH
#define PFH 2048
#endif

static inline void widen_bf16(float *restrict dst, const uint16_t *restrict src, size_t n) {
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__builtin_prefetch(src + i + PFH, 0, 3);
		for (size_t e = i; e < i + 32; e++) dst[e] = bf16_float(src[e]);
	}
	for (; i < n; i++) dst[i] = bf16_float(src[i]);
}

// Eight dot products of row qr of the queries with keys kj, kj + d, …: floats (dot8x8),
// or bfloat16 (HALF) against a row laid out with each 16 values' even ones before
// their odd ones (see scores), every key widened in registers as it is read.
static inline __attribute__((always_inline)) void dots8(v8f *sum, const float *restrict qr, const void *restrict kj,
                                                        size_t d, const int HALF) {
	size_t dn = HALF ? d / 16 * 16 : d / 8 * 8; // the vectorized part of d
	if (!HALF)
		dot8x8(sum, qr, kj, d, 0, dn);
	else {
		const uint16_t *kh = kj;
		v8f acc[8] = {0};
		for (size_t e = 0; e < dn; e += 16) {
			v8f qe, qo;
			LOAD8(qe, qr + e);
			LOAD8(qo, qr + e + 8);
			for (int t = 0; t < 8; t++) {
				v8f ke, ko;
				load16h(&ke, &ko, kh + t * d + e);
				acc[t] += qe * ke + qo * ko;
			}
		}
		sum8(sum, acc);
	}
	for (size_t e = dn; e < d; e++)
		for (int t = 0; t < 8; t++) (*sum)[t] += qr[e] * elem_at(kj, t * d + e, HALF);
}

// scores: p[r·ld + j] = q_r·k_j for rows r of q (rows, d) and keys j of k (s, d),
// floats or bfloat16 (HALF, with ql the rows laid out for dots8; q itself serves
// the last few keys). Eight keys at a time, held in L1 while every row passes over
// them, the keys two blocks on prefetched; each dot product runs in 8 lanes (vector
// extensions, so it vectorizes under strict floating-point semantics) and eight of
// them are summed across lanes at once.
static inline __attribute__((always_inline)) void scores(float *restrict p, size_t ld, const float *restrict q,
                                                         const float *restrict ql, size_t rows, size_t d,
                                                         const void *restrict k, size_t s, const int HALF) {
	size_t es = HALF ? 2 : 4, j = 0;
	const char *kc = k;
	for (; j + 8 <= s; j += 8) {
		const char *kj = kc + j * d * es;
		if (j + 24 <= s) // one line each 64 bytes
			for (size_t e = 0; e < 8 * d * es; e += 64) __builtin_prefetch(kj + 16 * d * es + e, 0, 3);
		for (size_t r = 0; r < rows; r++) {
			v8f sum;
			dots8(&sum, ql + r * d, kj, d, HALF);
			memcpy(p + r * ld + j, &sum, sizeof sum);
		}
	}
	for (; j < s; j++)
		for (size_t r = 0; r < rows; r++) {
			float acc = 0;
			for (size_t e = 0; e < d; e++) acc += q[r * d + e] * elem_at(k, j * d + e, HALF);
			p[r * ld + j] = acc;
		}
}

// Attention over keys held in parts, one part at a time (AttendParts). Scores:
// p[r·ld + j] = q_r·k_j for rows r of q (rows, d) and keys j of k (s, d).
MULTIVERSION_FMA
void inloop_attend_scores(float *restrict p, size_t ld, const float *restrict q, size_t rows, size_t d,
                          const float *restrict k, size_t s) {
	scores(p, ld, q, q, rows, d, k, s, 0);
}

// Scores over bfloat16 keys. With up to BF16_TMP rows, q is laid out in tmp for
// dots8 (each 16 values' even ones before their odd ones) and the keys are widened in
// registers; more rows widen BF16_BLOCK keys at a time into tmp for the float kernel
// instead.
MULTIVERSION_FMA
void inloop_attend_bf16_scores(float *restrict p, size_t ld, const float *restrict q, size_t rows, size_t d,
                               const uint16_t *restrict k, size_t s, float *restrict tmp) {
	if (rows > BF16_TMP) {
		for (size_t j = 0; j < s; j += BF16_BLOCK) {
			size_t n = s - j < BF16_BLOCK ? s - j : BF16_BLOCK;
			widen_bf16(tmp, k + j * d, n * d);
			scores(p + j, ld, q, q, rows, d, tmp, n, 0);
		}
		return;
	}
	size_t d16 = d / 16 * 16;
	for (size_t r = 0; r < rows; r++)
		for (size_t e = 0; e < d; e++) {
			size_t at = e; // within its 16: the even ones first, then the odd ones
			if (e < d16) at = e / 16 * 16 + (e % 2) * 8 + e % 16 / 2;
			tmp[r * d + at] = q[r * d + e];
		}
	scores(p, ld, q, tmp, rows, d, k, s, 1);
}

MULTIVERSION_FMA
void inloop_attend_bf16_values(float *restrict out, size_t rows, size_t dv, const float *restrict p, size_t ld,
                               const uint16_t *restrict v, size_t s) {
	values(out, rows, dv, p, ld, v, s, 1);
}

// out = y + scale·(x·a)·b for rows of x (k wide), a (k, r) and b (r, n): a LoRA
// update added to a layer's output while decoding, in one call where the ops
// would be four. x·a runs eight ranks at a time, summed in four sets of
// registers (a(p, j) for p = 0, 1, 2, 3 mod 4) so the adds do not wait on each
// other; then out gathers the eight ranks' rows of b, weighted by those sums,
// in one pass.
static inline __attribute__((always_inline)) void low_rank_t8(float *restrict t, const float *restrict x, size_t k,
                                                               const float *restrict a, size_t r) {
	v8f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0}, v0, v1, v2, v3;
	size_t p = 0;
	for (; p + 4 <= k; p += 4) {
		const float *a0 = a + p * r;
		LOAD8(v0, a0);
		LOAD8(v1, a0 + r);
		LOAD8(v2, a0 + 2 * r);
		LOAD8(v3, a0 + 3 * r);
		s0 += x[p] * v0;
		s1 += x[p + 1] * v1;
		s2 += x[p + 2] * v2;
		s3 += x[p + 3] * v3;
	}
	for (; p < k; p++) {
		LOAD8(v0, a + p * r);
		s0 += x[p] * v0;
	}
	v0 = (s0 + s1) + (s2 + s3);
	memcpy(t, &v0, sizeof v0);
}

MULTIVERSION_FMA
void inloop_add_low_rank(float *restrict out, const float *restrict y, const float *restrict x, size_t rows,
                         size_t k, const float *restrict a, size_t r, const float *restrict b, size_t n,
                         float scale) {
	for (size_t i = 0; i < rows; i++) {
		const float *xi = x + i * k;
		float *o = out + i * n;
		for (size_t c = 0; c < n; c++) o[c] = 0;
		size_t j0 = 0;
		for (; j0 < r; j0 += 8) {
			float t[8];
			size_t nr = r - j0 < 8 ? r - j0 : 8;
			if (nr == 8) {
				low_rank_t8(t, xi, k, a + j0, r);
			} else {
				for (size_t j = 0; j < nr; j++) {
					float sj = 0;
					for (size_t p = 0; p < k; p++) sj += xi[p] * a[p * r + j0 + j];
					t[j] = sj;
				}
			}
			const float *bj = b + j0 * n;
			if (nr == 8) { // one pass over out for all eight ranks
				for (size_t c = 0; c < n; c++)
					o[c] += ((t[0] * bj[c] + t[1] * bj[n + c]) + (t[2] * bj[2 * n + c] + t[3] * bj[3 * n + c])) +
					        ((t[4] * bj[4 * n + c] + t[5] * bj[5 * n + c]) +
					         (t[6] * bj[6 * n + c] + t[7] * bj[7 * n + c]));
				continue;
			}
			for (size_t j = 0; j < nr; j++)
				for (size_t c = 0; c < n; c++) o[c] += t[j] * bj[j * n + c];
		}
		const float *yi = y + i * n;
		for (size_t c = 0; c < n; c++) o[c] = yi[c] + o[c] * scale;
	}
}

// out = x · w / √(mean(x²) + eps), row by row (rows of d): each row's sum of squares in
// double, over eight partial sums, so the loop vectorizes without relaxing the
// arithmetic; x·r·w is rounded twice, in that order.
MULTIVERSION
void inloop_rmsnorm_rows(float *restrict out, const float *restrict x, const float *restrict w, size_t rows, size_t d,
                         float eps) {
	for (size_t i = 0; i < rows; i++) {
		const float *xi = x + i * d;
		double s[8] = {0};
		size_t j = 0;
		for (; j + 8 <= d; j += 8)
			for (size_t t = 0; t < 8; t++) s[t] += (double)xi[j + t] * (double)xi[j + t];
		for (; j < d; j++) s[j % 8] += (double)xi[j] * (double)xi[j];
		double ss = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
		float r = (float)(1 / sqrt(ss / (double)d + (double)eps));
		float *o = out + i * d;
		for (j = 0; j < d; j++) o[j] = xi[j] * r * w[j];
	}
}

// RoPE over rows of d features, row r at position r % l: the first dims features turned
// by the angles of that position (cos, sin: dims/2 of each a position), as pairs
// (i, i + dims/2), or (2i, 2i + 1) when traditional; the rest copied.
MULTIVERSION
void inloop_rope_rows(float *restrict out, const float *restrict x, const float *restrict cos_, const float *restrict sin_,
                      size_t row0, size_t rows, size_t d, size_t l, size_t dims, int traditional) {
	size_t half = dims / 2;
	for (size_t r = row0; r < row0 + rows; r++) {
		const float *in = x + r * d, *c = cos_ + (r % l) * half, *s = sin_ + (r % l) * half;
		float *o = out + r * d;
		if (traditional)
			for (size_t i = 0; i < half; i++) {
				float x1 = in[2 * i], x2 = in[2 * i + 1];
				o[2 * i] = x1 * c[i] - x2 * s[i];
				o[2 * i + 1] = x1 * s[i] + x2 * c[i];
			}
		else
			for (size_t i = 0; i < half; i++) {
				float x1 = in[i], x2 = in[i + half];
				o[i] = x1 * c[i] - x2 * s[i];
				o[i + half] = x1 * s[i] + x2 * c[i];
			}
		for (size_t i = dims; i < d; i++) o[i] = in[i];
	}
}

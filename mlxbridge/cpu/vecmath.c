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

// Attention over keys held in parts, one part at a time (AttendParts). Scores:
// p[r·ld + j] = q_r·k_j for rows r of q (rows, d) and keys j of k (s, d). Eight
// keys at a time, held in L1 while every row passes over them; each dot product
// runs in 8 lanes (vector extensions, so it vectorizes under strict
// floating-point semantics) and eight of them are summed across lanes at once.
MULTIVERSION
void inloop_attend_scores(float *restrict p, size_t ld, const float *restrict q, size_t rows, size_t d,
                          const float *restrict k, size_t s) {
	size_t d8 = d / 8 * 8, j = 0;
	for (; j + 8 <= s; j += 8) {
		const float *kj = k + j * d;
		if (j + 24 <= s) // the keys two blocks on, one line each 16 floats
			for (size_t e = 0; e < 8 * d; e += 16) __builtin_prefetch(kj + 16 * d + e, 0, 3);
		for (size_t r = 0; r < rows; r++) {
			const float *qr = q + r * d;
			v8f sum;
			dot8x8(&sum, qr, kj, d, 0, d8);
			for (size_t e = d8; e < d; e++)
				for (int t = 0; t < 8; t++) sum[t] += qr[e] * kj[t * d + e];
			memcpy(p + r * ld + j, &sum, sizeof sum);
		}
	}
	for (; j < s; j++)
		for (size_t r = 0; r < rows; r++) p[r * ld + j] = dot8(q + r * d, k + j * d, d);
}

// Values: out_r += Σ_j p[r·ld + j]·v_j for rows r of out (rows, dv) and values j of
// v (s, dv). Up to four rows and 16 columns of out stay in registers while the
// values stream past.
MULTIVERSION
void inloop_attend_values(float *restrict out, size_t rows, size_t dv, const float *restrict p, size_t ld,
                          const float *restrict v, size_t s) {
	size_t d16 = dv / 16 * 16;
	for (size_t r0 = 0; r0 < rows; r0 += 4) {
		size_t nr = rows - r0 < 4 ? rows - r0 : 4;
		for (size_t c = 0; c < d16; c += 16) {
			v8f acc[4][2] = {{{0}}};
			for (size_t j = 0; j < s; j++) {
				if (c == 0 && j + 16 < s) // the first pass brings the values 16 rows on
					for (size_t e = 0; e < dv; e += 16) __builtin_prefetch(v + (j + 16) * dv + e, 0, 3);
				v8f a, b;
				LOAD8(a, v + j * dv + c);
				LOAD8(b, v + j * dv + c + 8);
				for (size_t r = 0; r < nr; r++) {
					float pr = p[(r0 + r) * ld + j];
					acc[r][0] += pr * a;
					acc[r][1] += pr * b;
				}
			}
			for (size_t r = 0; r < nr; r++) {
				float *o = out + (r0 + r) * dv + c;
				v8f o0, o1;
				LOAD8(o0, o);
				LOAD8(o1, o + 8);
				o0 += acc[r][0];
				o1 += acc[r][1];
				memcpy(o, &o0, sizeof o0);
				memcpy(o + 8, &o1, sizeof o1);
			}
		}
		for (size_t j = 0; j < s && d16 < dv; j++)
			for (size_t r = r0; r < r0 + nr; r++) {
				float pr = p[r * ld + j];
				for (size_t c = d16; c < dv; c++) out[r * dv + c] += pr * v[j * dv + c];
			}
	}
}

// A packed row's n values at `bits` (2, 4 or 8; LSB first, as MLX packs them) as floats.
static inline void unpack_row(float *restrict dst, const uint32_t *restrict w, size_t n, int bits) {
	const uint8_t *b = (const uint8_t *)w; // little-endian: the words' low bytes come first
	switch (bits) {
	case 8:
		for (size_t i = 0; i < n; i++) dst[i] = (float)b[i];
		break;
	case 4:
		for (size_t i = 0; i < n / 2; i++) {
			dst[2 * i] = (float)(b[i] & 15);
			dst[2 * i + 1] = (float)(b[i] >> 4);
		}
		break;
	case 2:
		for (size_t i = 0; i < n / 4; i++) {
			dst[4 * i] = (float)(b[i] & 3);
			dst[4 * i + 1] = (float)((b[i] >> 2) & 3);
			dst[4 * i + 2] = (float)((b[i] >> 4) & 3);
			dst[4 * i + 3] = (float)(b[i] >> 6);
		}
		break;
	}
}

// Attention over a quantized part (AttendQuantized): scores p[r·ld + j] = q_r·k_j
// for keys k_j = scale·int + bias per group. q holds rows of dp values (zero past
// the head size), qsum their sums per group; w, s, b hold n keys' packed words and
// their groups' scales and biases. tmp holds 8·dp floats. Per group it is
// scale·(q·int) + bias·Σq. Eight keys at a time are unpacked once for all the
// rows, and their eight dot products per group summed across lanes at once.
MULTIVERSION
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
				for (int t = 0; t < 8; t++) {
					sv[t] = s[(j + t) * groups + g];
					bv[t] = b[(j + t) * groups + g];
				}
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
// bias, each unpacked and dequantized once (its first dv values) for all the rows.
MULTIVERSION
void inloop_attend_quant_values(float *restrict out, size_t rows, size_t dv, const float *restrict p, size_t ld,
                                size_t dp, size_t group, int bits, const uint32_t *restrict w,
                                const float *restrict s, const float *restrict b, size_t n, float *restrict tmp) {
	size_t groups = dp / group, words = dp * bits / 32;
	for (size_t j = 0; j < n; j++) {
		unpack_row(tmp, w + j * words, dp, bits);
		for (size_t g = 0; g < groups; g++) {
			float sg = s[j * groups + g], bg = b[j * groups + g];
			for (size_t i = g * group; i < (g + 1) * group; i++) tmp[i] = sg * tmp[i] + bg;
		}
		for (size_t r = 0; r < rows; r++) {
			float pr = p[r * ld + j];
			float *o = out + r * dv;
			for (size_t c = 0; c < dv; c++) o[c] += pr * tmp[c];
		}
	}
}

// bfloat16 keys or values (a 16-bit KV cache), widened BF16_BLOCK positions at a time
// into tmp (BF16_BLOCK·width floats) for the float kernels: a shift per value, and
// the block stays in L1 while every row passes over it.
enum { BF16_BLOCK = 64 };
#ifndef PFH
#define PFH 2048
#endif

static inline void widen_bf16(float *restrict dst, const uint16_t *restrict src, size_t n) {
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__builtin_prefetch(src + i + PFH, 0, 3);
		for (size_t e = i; e < i + 32; e++) {
			uint32_t u = (uint32_t)src[e] << 16;
			memcpy(dst + e, &u, 4);
		}
	}
	for (; i < n; i++) {
		uint32_t u = (uint32_t)src[i] << 16;
		memcpy(dst + i, &u, 4);
	}
}

MULTIVERSION
void inloop_attend_bf16_scores(float *restrict p, size_t ld, const float *restrict q, size_t rows, size_t d,
                               const uint16_t *restrict k, size_t s, float *restrict tmp) {
	for (size_t j = 0; j < s; j += BF16_BLOCK) {
		size_t n = s - j < BF16_BLOCK ? s - j : BF16_BLOCK;
		widen_bf16(tmp, k + j * d, n * d);
		inloop_attend_scores(p + j, ld, q, rows, d, tmp, n);
	}
}

MULTIVERSION
void inloop_attend_bf16_values(float *restrict out, size_t rows, size_t dv, const float *restrict p, size_t ld,
                               const uint16_t *restrict v, size_t s, float *restrict tmp) {
	for (size_t j = 0; j < s; j += BF16_BLOCK) {
		size_t n = s - j < BF16_BLOCK ? s - j : BF16_BLOCK;
		widen_bf16(tmp, v + j * dv, n * dv);
		inloop_attend_values(out, rows, dv, p + j, ld, tmp, n);
	}
}

// Portable kernels: plain C that compilers vectorize (NEON on arm64 at -O3), used for every
// bit width without a SIMD kernel and on machines without AVX2.
#include <string.h>

#include "qmm.h"

#if defined(__clang__)
#define UNROLL32 _Pragma("unroll")
#else
#define UNROLL32 _Pragma("GCC unroll 32")
#endif

// 32 values of BITS bits start a word every BITS words; unrolled, every shift is a constant
// and only the values that straddle two words read both.
#define UNPACK32(B)                                                                 \
	static void unpack32_##B(const uint32_t *p, float *dst) {                      \
		UNROLL32                                                                   \
		for (int i = 0; i < 32; i++) {                                             \
			const int o = i * B, w = o / 32, s = o % 32;                           \
			uint32_t v = s + B <= 32 ? p[w] >> s : (p[w] >> s) | (p[w + 1] << (32 - s)); \
			dst[i] = (float)(v & ((1u << B) - 1));                                 \
		}                                                                          \
	}
UNPACK32(2)
UNPACK32(3)
UNPACK32(4)
UNPACK32(5)
UNPACK32(6)
UNPACK32(7)
UNPACK32(8)

// qmm_unpack decodes values k0 .. k0+n-1 of a row's bit stream as floats. k0 and n are
// multiples of 32, so value k0 starts a word.
void qmm_unpack(const uint32_t *row, int k0, int n, int bits, float *dst) {
	static void (*const fn[9])(const uint32_t *, float *) = {
	    [2] = unpack32_2, [3] = unpack32_3, [4] = unpack32_4, [5] = unpack32_5,
	    [6] = unpack32_6, [7] = unpack32_7, [8] = unpack32_8,
	};
	const uint32_t *p = row + (long)k0 * bits / 32;
	for (int i = 0; i < n / 32; i++) fn[bits](p + i * bits, dst + 32 * i);
}

// Group sums of x, for the bias term bias*sum(x_g). Each group is summed in order, eight
// groups side by side: one group's sum is a chain of dependent adds, eight are not.
static void group_sums(const qmm_w *w, const float *xm, float *xsum) {
	int gs = w->group, G = w->K / gs, g = 0;
	for (; g + 8 <= G; g += 8) {
		float s[8] = {0};
		for (int i = 0; i < gs; i++)
			for (int t = 0; t < 8; t++) s[t] += xm[(g + t) * gs + i];
		for (int t = 0; t < 8; t++) xsum[g + t] = s[t];
	}
	for (; g < G; g++) {
		float s = 0;
		for (int i = 0; i < gs; i++) s += xm[g * gs + i];
		xsum[g] = s;
	}
}

void qmm_prepare_x_natural(const qmm_w *w, const float *x, int ldx, int mb, float *xp, float *xsum) {
	int K = w->K, kp = qmm_xp_len(K, w->bits), G = K / w->group;
	for (int m = 0; m < mb; m++) {
		memcpy(xp + (long)m * kp, x + (long)m * ldx, sizeof(float) * K);
		group_sums(w, x + (long)m * ldx, xsum + m * G);
	}
}

// One chunk of the lane layout (see qmm_prepare_x_lanes) from the values at xm, n of them
// (n < LANES*S only in the final chunk), inlined with constant LANES and S so that the
// loops unroll.
static inline __attribute__((always_inline)) void lanes_chunk(float *d, const float *xm, int n, const int LANES,
                                                              const int S, const int bits) {
	for (int i = 0; i < S; i++) {
		float scale = i == S - 1 ? 1.0f : 1.0f / (float)(1u << (bits * i));
		if (n == LANES * S)
			for (int j = 0; j < LANES; j++) d[LANES * i + j] = xm[j * S + i] * scale;
		else
			for (int j = 0; j < LANES; j++) d[LANES * i + j] = j * S + i < n ? xm[j * S + i] * scale : 0.0f;
	}
}

// One row of x in the lane layout: kp values from K (kp/(LANES*S) chunks).
static void lanes_row(float *d, const float *xm, int K, int kp, const int LANES, const int S, const int bits) {
	for (int c = 0; c < kp / (LANES * S); c++) {
		int k0 = c * LANES * S, n = K - k0 < LANES * S ? (K - k0 > 0 ? K - k0 : 0) : LANES * S;
		lanes_chunk(d + k0, xm + k0, n, LANES, S, bits);
	}
}

// The lane layout: a chunk is `lanes` words, lane j of it holding values j*S .. j*S+S-1
// (S = 32/bits), and the kernels take value i of every lane at step i. So step i, lane j of
// chunk c holds x[c*lanes*S + j*S + i], times 2^-(bits*i) to undo the position of the masked
// value (except for the last value, which is shifted down). Zero past K.
void qmm_prepare_x_lanes(const qmm_w *w, const float *x, int ldx, int mb, int lanes, float *xp, float *xsum) {
	int K = w->K, kp = qmm_xp_len(K, w->bits), G = K / w->group, bits = w->bits;
	for (int m = 0; m < mb; m++) {
		const float *xm = x + (long)m * ldx;
		float *d = xp + (long)m * kp;
		if (lanes == 16 && bits == 4) lanes_row(d, xm, K, kp, 16, 8, 4);
		else if (lanes == 16 && bits == 8) lanes_row(d, xm, K, kp, 16, 4, 8);
		else if (lanes == 8 && bits == 4) lanes_row(d, xm, K, kp, 8, 8, 4);
		else if (lanes == 8 && bits == 8) lanes_row(d, xm, K, kp, 8, 4, 8);
		else lanes_row(d, xm, K, kp, lanes, 32 / bits, bits);
		group_sums(w, xm, xsum + m * G);
	}
}

static float dot(const float *a, const float *b, int n) {
	float acc[8] = {0};
	for (int i = 0; i < n; i += 8)
		for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
	return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Any bit width, per row: sum over groups of scale*dot(q, x) + bias*sum(x), unpacking each
// group once for all mb rows of x.
static void gemv_t_unpacked(const qmm_w *w, const float *xp, const float *xsum, int mb,
                            int n0, int n1, float *out, int ldo) {
	int K = w->K, gs = w->group, G = K / gs, words = K * w->bits / 32, kp = qmm_xp_len(K, w->bits);
	float q[128];
	for (int n = n0; n < n1; n++) {
		const uint32_t *row = w->packed + (long)n * words;
		const float *s = w->scales + (long)n * G, *b = w->biases + (long)n * G;
		float acc[4] = {0, 0, 0, 0};
		for (int g = 0; g < G; g++) {
			qmm_unpack(row, g * gs, gs, w->bits, q);
			for (int m = 0; m < mb; m++)
				acc[m] += s[g] * dot(q, xp + (long)m * kp + g * gs, gs) + b[g] * xsum[m * G + g];
		}
		for (int m = 0; m < mb; m++) out[(long)m * ldo + n] = acc[m];
	}
}

// 2, 4 and 8 bits: the SIMD kernels' masking scheme (see avx2.c) over 16 lanes, written with
// the GCC/Clang vector extensions so that it becomes SSE2 or NEON code (AND, convert,
// multiply-add) on any target; plain loops did not vectorize reliably.
typedef uint32_t u32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef float f32x4 __attribute__((vector_size(16)));

static inline f32x4 loadf(const float *p) {
	f32x4 v;
	memcpy(&v, p, sizeof v);
	return v;
}

#define PGEMV(BITS, MB)                                                                           \
	static void gemv_t_lanes_##BITS##_##MB(const qmm_w *w, const float *xp, const float *xsum, \
	                                       int n, float *out, int ldo) {                     \
		enum { S = 32 / BITS, V = 16 * S };                                                   \
		int K = w->K, gs = w->group, G = K / gs, words = K * BITS / 32;                       \
		int kp = qmm_xp_len(K, BITS), nc = (K + V - 1) / V, gshift = __builtin_ctz(gs);       \
		const uint32_t *row = w->packed + (long)n * words;                                    \
		const float *s = w->scales + (long)n * G;                                             \
		f32x4 tot[MB][4] = {{{0}}};                                                            \
		for (int c = 0; c < nc; c++) {                                                        \
			u32x4 v[4];                                                                       \
			if (16 * c + 16 <= words) {                                                       \
				memcpy(v, row + 16 * c, sizeof v);                                            \
			} else {                                                                          \
				uint32_t vw[16] = {0};                                                        \
				memcpy(vw, row + 16 * c, sizeof(uint32_t) * (words - 16 * c));               \
				memcpy(v, vw, sizeof v);                                                      \
			}                                                                                 \
			f32x4 sv[4];                                                                      \
			if (gs >= V) {                                                                    \
				float one = s[(c * V) >> gshift];                                             \
				sv[0] = sv[1] = sv[2] = sv[3] = (f32x4){one, one, one, one};                  \
			} else {                                                                          \
				float sw[16];                                                                 \
				for (int j = 0; j < 16; j++) {                                                \
					int g = (c * V + j * S) >> gshift;                                        \
					sw[j] = s[g < G ? g : G - 1];                                             \
				}                                                                             \
				memcpy(sv, sw, sizeof sv);                                                    \
			}                                                                                 \
			f32x4 acc[MB][4] = {{{0}}};                                                        \
			for (int i = 0; i < S; i++) {                                                     \
				f32x4 q[4];                                                                   \
				for (int l = 0; l < 4; l++)                                                   \
					q[l] = __builtin_convertvector((i32x4)(i == S - 1 ? v[l] >> (32 - BITS)   \
					    : v[l] & (((1u << BITS) - 1) << (BITS * i))), f32x4);                 \
				for (int m = 0; m < MB; m++) {                                                \
					const float *xv = xp + (long)m * kp + (long)c * V + 16 * i;               \
					for (int l = 0; l < 4; l++) acc[m][l] += q[l] * loadf(xv + 4 * l);        \
				}                                                                             \
			}                                                                                 \
			for (int m = 0; m < MB; m++)                                                      \
				for (int l = 0; l < 4; l++) tot[m][l] += acc[m][l] * sv[l];                   \
		}                                                                                     \
		for (int m = 0; m < MB; m++) {                                                        \
			f32x4 t4 = (tot[m][0] + tot[m][1]) + (tot[m][2] + tot[m][3]);                     \
			float t = (t4[0] + t4[1]) + (t4[2] + t4[3]);                                      \
			for (int g = 0; g < G; g++) t += w->biases[(long)n * G + g] * xsum[m * G + g];    \
			out[(long)m * ldo + n] = t;                                                       \
		}                                                                                     \
	}

#define PGEMV_ALL(BITS) PGEMV(BITS, 1) PGEMV(BITS, 2) PGEMV(BITS, 3) PGEMV(BITS, 4)
PGEMV_ALL(2)
PGEMV_ALL(4)
PGEMV_ALL(8)

typedef void (*gemv_fn)(const qmm_w *, const float *, const float *, int, float *, int);

void qmm_gemv_t_portable(const qmm_w *w, const float *xp, const float *xsum, int mb,
                         int n0, int n1, float *out, int ldo) {
	static const gemv_fn fn[9][5] = {
	    [2] = {0, gemv_t_lanes_2_1, gemv_t_lanes_2_2, gemv_t_lanes_2_3, gemv_t_lanes_2_4},
	    [4] = {0, gemv_t_lanes_4_1, gemv_t_lanes_4_2, gemv_t_lanes_4_3, gemv_t_lanes_4_4},
	    [8] = {0, gemv_t_lanes_8_1, gemv_t_lanes_8_2, gemv_t_lanes_8_3, gemv_t_lanes_8_4},
	};
	if (w->bits != 2 && w->bits != 4 && w->bits != 8) {
		gemv_t_unpacked(w, xp, xsum, mb, n0, n1, out, ldo);
		return;
	}
	for (int n = n0; n < n1; n++) fn[w->bits][mb](w, xp, xsum, n, out, ldo);
}

// Transposed product over rows [n0, n1) of W: acc[m][k] += (x[m][n]*scale) * q[n][k] row by
// row, with the bias part sum_n x[m][n]*bias[n][g] gathered per group and added at the end.
void qmm_gemv_portable(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
                       float *out, int ldo, float *scratch) {
	int K = w->K, gs = w->group, G = K / gs, words = K * w->bits / 32;
	float *cb = scratch;
	for (int m = 0; m < mb; m++) memset(out + (long)m * ldo, 0, sizeof(float) * K);
	memset(cb, 0, sizeof(float) * mb * G);
	float q[128];
	for (int n = n0; n < n1; n++) {
		const uint32_t *row = w->packed + (long)n * words;
		const float *s = w->scales + (long)n * G, *b = w->biases + (long)n * G;
		for (int g = 0; g < G; g++) {
			qmm_unpack(row, g * gs, gs, w->bits, q);
			for (int m = 0; m < mb; m++) {
				float xn = x[(long)m * ldx + n], a = xn * s[g];
				float *am = out + (long)m * ldo + g * gs;
				for (int c = 0; c < gs; c++) am[c] += a * q[c];
				cb[m * G + g] += xn * b[g];
			}
		}
	}
	for (int m = 0; m < mb; m++)
		for (int k = 0; k < K; k++) out[(long)m * ldo + k] += cb[m * G + k / gs];
}

// Puts accumulators in the lane layout back in order: value k = c*V + j*S + i sits at
// c*V + lanes*i + j, scaled by 2^(bits*i) unless it is the last of its word; then adds the
// bias part of its group.
void qmm_lanes_to_out(const qmm_w *w, int lanes, const float *acc, const float *cb, int mb,
                      float *out, int ldo) {
	int K = w->K, gs = w->group, G = K / gs, kp = qmm_xp_len(K, w->bits);
	int S = 32 / w->bits, V = lanes * S;
	for (int m = 0; m < mb; m++)
		for (int k = 0; k < K; k++) {
			int c = k / V, j = k % V / S, i = k % S;
			float unscale = i == S - 1 ? 1.0f : 1.0f / (float)(1u << (w->bits * i));
			out[(long)m * ldo + k] = acc[(long)m * kp + c * V + lanes * i + j] * unscale + cb[m * G + k / gs];
		}
}

void qmm_dequant_portable(const qmm_w *w, int n0, int n1, float *dst) {
	int K = w->K, gs = w->group, G = K / gs, words = K * w->bits / 32;
	for (int n = n0; n < n1; n++) {
		const uint32_t *row = w->packed + (long)n * words;
		float *d = dst + (long)(n - n0) * K;
		qmm_unpack(row, 0, K, w->bits, d);
		for (int g = 0; g < G; g++) {
			float s = w->scales[(long)n * G + g], b = w->biases[(long)n * G + g];
			for (int i = 0; i < gs; i++) d[g * gs + i] = s * d[g * gs + i] + b;
		}
	}
}

float qmm_sum_floats(const float *a, long n) {
	float acc[32] = {0};
	long i = 0;
	for (; i + 32 <= n; i += 32)
		for (int j = 0; j < 32; j++) acc[j] += a[i + j];
	float s = 0;
	for (int j = 0; j < 32; j++) s += acc[j];
	for (; i < n; i++) s += a[i];
	return s;
}

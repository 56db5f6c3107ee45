// Prefill's product on 8-bit activations: many rows of x times 4- or 8-bit W, with AVX-512
// VNNI, as llama.cpp multiplies its quantized weights by its Q8_0 activations.
//
// Dequantizing W to float32 and handing it to sgemm runs at sgemm's speed at best; vpdpbusd
// does 64 multiply-adds of bytes in one instruction, four times a float FMA's 16. What costs
// is the scaling: every block of integer sums must be converted and scaled before the next
// group's. So the work is laid out to scale as rarely as possible:
//
//   - x is rounded to int8 with one scale per block of 32 values (qmm_prepare_x_q8), as
//     Q8_0 does: each value moves by at most half its block's scale.
//   - W is repacked, 16 rows at a time (a panel, rows padded with zeros), into bytes: one
//     64-byte line per 4 columns, holding those 4 values of each of the 16 rows. One
//     vpdpbusd of a line with 4 values of a row of x (broadcast) adds 4 products to each of
//     16 outputs: the 16 outputs sit in the lanes, so nothing is reduced across lanes.
//   - A block of 32 values is 8 vpdpbusd per row of x, then one conversion, one multiply
//     (the panel's 16 group scales by the block's x scale) and one FMA; the bias term,
//     bias · Σx per group (x unrounded), is one FMA per group. Decoding's kernel (one row,
//     int8.c) spends those three on every 2 vpdpbusd instead of 8.
//
// A panel (16 rows by K bytes) is repacked once per call and stays in L1/L2 while every row
// of x passes over it, MR rows at a time. The rows of x are rounded alone: a row's result does
// not depend on the rows beside it or on how W's rows are split among cores.
#include <stdlib.h>

#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c,bmi2")))
#define INLINE static inline __attribute__((always_inline))

enum { PR = 16, QB = 32, MR = 8 }; // panel rows, x block, rows of x per pass

int qmm_cpu_gemm_i8(void) {
	__builtin_cpu_init();
	return qmm_cpu_vnni() && __builtin_cpu_supports("bmi2");
}

// x (K values, K a multiple of 32) rounded to int8 per block of 32: xq gets K bytes, xs K/32
// scales (max|x|/127 of the block), xsum the K/gs sums of the unrounded values per group.
TARGET void qmm_prepare_x_q8(const float *x, int K, int gs, int8_t *xq, float *xs, float *xsum) {
	const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
	for (int b = 0; b < K / QB; b++) {
		__m512 a = _mm512_loadu_ps(x + b * QB), c = _mm512_loadu_ps(x + b * QB + 16);
		float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
		float inv = amax > 0 ? 127.0f / amax : 0.0f;
		xs[b] = amax / 127.0f;
		__m512 iv = _mm512_set1_ps(inv);
		// Rounded to nearest, ties even, clamped to ±127 (a NaN becomes -127; the bias term
		// still carries it to the outputs).
		__m512i qa = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a, iv)), lim), nlim);
		__m512i qc = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(c, iv)), lim), nlim);
		_mm_storeu_si128((__m128i *)(xq + b * QB), _mm512_cvtepi32_epi8(qa));
		_mm_storeu_si128((__m128i *)(xq + b * QB + 16), _mm512_cvtepi32_epi8(qc));
	}
	for (int g = 0; g < K / gs; g++) {
		__m512 s = _mm512_setzero_ps();
		for (int i = 0; i < gs; i += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(x + g * gs + i));
		xsum[g] = _mm512_reduce_add_ps(s);
	}
}

// One 16- or 32-bit scale as a float (H: 0 float32, 1 bfloat16, 2 float16; see avx512.h).
INLINE TARGET float scale_at(const qmm_w *w, long i, int bias) {
	if (w->scales) return bias ? w->biases[i] : w->scales[i];
	uint16_t v = bias ? w->biases16[i] : w->scales16[i];
	if (w->f16) return _cvtsh_ss(v);
	union {
		uint32_t u;
		float f;
	} c = {(uint32_t)v << 16};
	return c.f;
}

// Repacks rows [n, n+rows) of W (rows <= 16) into a panel: pw gets K/4 lines of 64 bytes, line
// k/4 holding values k..k+3 of row r at bytes 4r..4r+3 (rows past `rows` zero); ps and pb the
// 16 rows' scales and biases per group, as floats.
TARGET static void repack(const qmm_w *w, int n, int rows, uint8_t *pw, float *ps, float *pb) {
	const int K = w->K, G = K / w->group, words = K * w->bits / 32;
	if (rows < PR) {
		for (long i = 0; i < (long)K * PR; i += 64) _mm512_storeu_si512(pw + i, _mm512_setzero_si512());
		for (int i = 0; i < G * PR; i++) ps[i] = pb[i] = 0;
	}
	for (int r = 0; r < rows; r++) {
		const uint32_t *p = w->packed + (long)(n + r) * words;
		uint8_t *d = pw + 4 * r;
		if (w->bits == 4) {
			for (int i = 0; i < words; i++) { // 8 values: lines 2i and 2i+1
				uint64_t v = _pdep_u64(p[i], 0x0f0f0f0f0f0f0f0full);
				*(uint32_t *)(void *)(d + (long)(2 * i) * 64) = (uint32_t)v;
				*(uint32_t *)(void *)(d + (long)(2 * i + 1) * 64) = (uint32_t)(v >> 32);
			}
		} else {
			for (int i = 0; i < words; i++) *(uint32_t *)(void *)(d + (long)i * 64) = p[i];
		}
		for (int g = 0; g < G; g++) {
			ps[g * PR + r] = scale_at(w, (long)(n + r) * G + g, 0);
			pb[g * PR + r] = scale_at(w, (long)(n + r) * G + g, 1);
		}
	}
}

// out[(m+j)*ldo + n + r] for j < R and r < rows: the panel times rows m.. of x.
INLINE TARGET void pass(const uint8_t *pw, const float *ps, const float *pb, int K, int gs, const int8_t *xq,
                        const float *xs, const float *xsum, int m, const int R, float *out, int ldo, int n,
                        int rows) {
	const int G = K / gs, BPG = gs / QB, NB = K / QB;
	__m512 t[MR];
	_Pragma("GCC unroll 8") for (int j = 0; j < R; j++) t[j] = _mm512_setzero_ps();
	for (int g = 0; g < G; g++) {
		const __m512 sw = _mm512_loadu_ps(ps + g * PR);
		for (int bb = 0; bb < BPG; bb++) {
			const int b = g * BPG + bb;
			const uint8_t *wb = pw + (long)b * 8 * 64;
			__m512i acc[MR];
			_Pragma("GCC unroll 8") for (int j = 0; j < R; j++) acc[j] = _mm512_setzero_si512();
			_Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
				const __m512i v = _mm512_loadu_si512(wb + 64 * i);
				_Pragma("GCC unroll 8") for (int j = 0; j < R; j++) {
					const int32_t xv = *(const int32_t *)(const void *)(xq + (long)(m + j) * K + b * QB + 4 * i);
					acc[j] = _mm512_dpbusd_epi32(acc[j], v, _mm512_set1_epi32(xv));
				}
			}
			_Pragma("GCC unroll 8") for (int j = 0; j < R; j++)
				t[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[j]),
				                       _mm512_mul_ps(sw, _mm512_set1_ps(xs[(long)(m + j) * NB + b])), t[j]);
		}
		const __m512 bw = _mm512_loadu_ps(pb + g * PR);
		_Pragma("GCC unroll 8") for (int j = 0; j < R; j++)
			t[j] = _mm512_fmadd_ps(bw, _mm512_set1_ps(xsum[(long)(m + j) * G + g]), t[j]);
	}
	const __mmask16 k = (__mmask16)((1u << rows) - 1);
	_Pragma("GCC unroll 8") for (int j = 0; j < R; j++) _mm512_mask_storeu_ps(out + (long)(m + j) * ldo + n, k, t[j]);
}

TARGET int qmm_gemm_t_i8(const qmm_w *w, const int8_t *xq, const float *xs, const float *xsum, int M, int n0,
                         int n1, float *out, int ldo) {
	const int K = w->K, gs = w->group, G = K / gs;
	uint8_t *pw = aligned_alloc(64, (size_t)K * PR + 2 * sizeof(float) * (size_t)G * PR + 64);
	if (!pw) return -1;
	float *ps = (float *)(void *)(pw + (size_t)K * PR), *pb = ps + (size_t)G * PR;
	for (int n = n0; n < n1; n += PR) {
		const int rows = n1 - n < PR ? n1 - n : PR;
		repack(w, n, rows, pw, ps, pb);
		int m = 0;
		for (; m + MR <= M; m += MR) pass(pw, ps, pb, K, gs, xq, xs, xsum, m, MR, out, ldo, n, rows);
		for (; m < M; m++) pass(pw, ps, pb, K, gs, xq, xs, xsum, m, 1, out, ldo, n, rows);
	}
	free(pw);
	return 0;
}
#else
int qmm_cpu_gemm_i8(void) { return 0; }
void qmm_prepare_x_q8(const float *x, int K, int gs, int8_t *xq, float *xs, float *xsum) {}
int qmm_gemm_t_i8(const qmm_w *w, const int8_t *xq, const float *xs, const float *xsum, int M, int n0, int n1,
                  float *out, int ldo) {
	return -1;
}
#endif

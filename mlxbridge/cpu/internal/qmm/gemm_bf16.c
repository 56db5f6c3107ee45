// Prefill's product on bfloat16 activations: many rows of x times a bfloat16 W, with
// AVX-512 BF16, as llama.cpp multiplies its BF16 weights by activations rounded to bfloat16.
//
// The exact path widens tiles of W to float32 for sgemm: one FMA does 16 multiply-adds.
// vdpbf16ps does 32 (two bfloat16 pairs a lane, summed in float32), so with x rounded to
// bfloat16 the same products take half the instructions. The product of two bfloat16 values
// is exact in float32; only the rounding of x (to nearest, ties even: a relative 2^-9 at
// most) differs from the exact path.
//
// The layout is gemm_i8.c's: W is repacked 16 rows at a time (a panel, rows padded with
// zeros) into one 64-byte line per 2 columns, holding those 2 values of each of the 16 rows.
// One vpdpbf16ps of a line with one pair of a row of x (broadcast) adds to 16 outputs that sit
// in the lanes: nothing is reduced across lanes. Two panels pass over MR rows of x at a time
// (2·MR accumulators, 2 + MR loads for 2·MR instructions). The rows of x are rounded alone,
// so a row's result does not depend on the rows beside it or on how W's rows are split.
#include <stdlib.h>
#include <string.h>

#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

enum { PR = 16, NP = 2, MR = 8 }; // panel rows, panels per pass, rows of x per pass

int qmm_cpu_bf16(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512bf16");
}

// x (n values) rounded to bfloat16, to nearest with ties to even (a NaN stays a NaN); xb
// gets n values, and one zero after them when n is odd, so pairs are whole.
TARGET void qmm_round_bf16(const float *x, long n, uint16_t *xb) {
	long i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
		_mm512_storeu_si512(xb + i, (__m512i)v);
	}
	if (i < n) {
		float t[32] = {0};
		uint16_t u[32];
		memcpy(t, x + i, sizeof(float) * (size_t)(n - i));
		__m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(t + 16), _mm512_loadu_ps(t));
		_mm512_storeu_si512(u, (__m512i)v);
		memcpy(xb + i, u, sizeof(uint16_t) * (size_t)((n - i + 1) & ~1L));
	}
}

// transpose16 transposes the 16x16 matrix of 32-bit values whose rows are r[0..15], in
// place: four stages, each swapping the off-diagonal blocks of width h (8, 4, 2, 1) of
// every diagonal block of width 2h, two two-source permutes a pair of rows.
INLINE TARGET void transpose16(__m512i r[16]) {
	_Pragma("GCC unroll 4") for (int h = 8; h >= 1; h /= 2) {
		int ia[16], ib[16];
		for (int j = 0; j < 16; j++) {
			ia[j] = (j & h) ? 16 + j - h : j;
			ib[j] = (j & h) ? 16 + j : j + h;
		}
		const __m512i xa = _mm512_loadu_si512(ia), xb = _mm512_loadu_si512(ib);
		_Pragma("GCC unroll 16") for (int a = 0; a < 16; a++) {
			if (a & h) continue;
			const __m512i ra = r[a], rb = r[a + h];
			r[a] = _mm512_permutex2var_epi32(ra, xa, rb);
			r[a + h] = _mm512_permutex2var_epi32(ra, xb, rb);
		}
	}
}

// Repacks rows [n, n+rows) of W (rows <= 16, K values each) into a panel of KP = (K+1)/2 lines:
// line p holds values 2p and 2p+1 of row r at bytes 4r..4r+3 (a zero past K; rows past
// `rows` zero). Whole blocks of 16 pairs go through transpose16; the rest one pair at a time.
TARGET static void repack(const uint16_t *w, int K, int n, int rows, uint32_t *pw) {
	const int KP = (K + 1) / 2, KB = K / 32 * 32;
	for (int k = 0; k < KB; k += 32) {
		__m512i r[16];
		_Pragma("GCC unroll 16") for (int i = 0; i < 16; i++)
			r[i] = i < rows ? _mm512_loadu_si512(w + (long)(n + i) * K + k) : _mm512_setzero_si512();
		transpose16(r);
		_Pragma("GCC unroll 16") for (int p = 0; p < 16; p++) _mm512_storeu_si512(pw + (long)(k / 2 + p) * PR, r[p]);
	}
	if (KB == K) return;
	for (long i = (long)(KB / 2) * PR; i < (long)KP * PR; i++) pw[i] = 0;
	for (int r = 0; r < rows; r++) {
		const uint16_t *p = w + (long)(n + r) * K;
		uint32_t *d = pw + r;
		for (int i = KB / 2; i < K / 2; i++) {
			uint32_t v;
			memcpy(&v, p + 2 * i, 4);
			d[(long)i * PR] = v;
		}
		if (K & 1) d[(long)(K / 2) * PR] = p[K - 1];
	}
}

// out[(m+j)*ldo + n + 16q + r] for j < R, q < np, 16q + r < rows: np panels (pw, KP lines each)
// times rows m.. of x (xb, ldx values a row).
INLINE TARGET void pass(const uint32_t *pw, int KP, int np, const uint16_t *xb, int ldx, int m, const int R,
                        float *out, int ldo, int n, int rows) {
	__m512 acc[NP][MR];
	_Pragma("GCC unroll 8") for (int j = 0; j < R; j++) {
		acc[0][j] = _mm512_setzero_ps();
		acc[1][j] = _mm512_setzero_ps();
	}
	const uint32_t *p1 = pw + (long)KP * PR;
	if (np == 2) {
		for (int p = 0; p < KP; p++) {
			const __m512bh v0 = (__m512bh)_mm512_loadu_si512(pw + (long)p * PR);
			const __m512bh v1 = (__m512bh)_mm512_loadu_si512(p1 + (long)p * PR);
			_Pragma("GCC unroll 8") for (int j = 0; j < R; j++) {
				uint32_t xv;
				memcpy(&xv, xb + (long)(m + j) * ldx + 2 * p, 4);
				const __m512bh b = (__m512bh)_mm512_set1_epi32((int)xv);
				acc[0][j] = _mm512_dpbf16_ps(acc[0][j], v0, b);
				acc[1][j] = _mm512_dpbf16_ps(acc[1][j], v1, b);
			}
		}
	} else {
		for (int p = 0; p < KP; p++) {
			const __m512bh v0 = (__m512bh)_mm512_loadu_si512(pw + (long)p * PR);
			_Pragma("GCC unroll 8") for (int j = 0; j < R; j++) {
				uint32_t xv;
				memcpy(&xv, xb + (long)(m + j) * ldx + 2 * p, 4);
				acc[0][j] = _mm512_dpbf16_ps(acc[0][j], v0, (__m512bh)_mm512_set1_epi32((int)xv));
			}
		}
	}
	const int r0 = rows < PR ? rows : PR, r1 = rows - r0;
	const __mmask16 k0 = (__mmask16)((1u << r0) - 1), k1 = (__mmask16)((1u << (r1 > 0 ? r1 : 0)) - 1);
	_Pragma("GCC unroll 8") for (int j = 0; j < R; j++) {
		_mm512_mask_storeu_ps(out + (long)(m + j) * ldo + n, k0, acc[0][j]);
		if (np == 2) _mm512_mask_storeu_ps(out + (long)(m + j) * ldo + n + PR, k1, acc[1][j]);
	}
}

TARGET int qmm_gemm_t_bf16(const uint16_t *w, int K, const uint16_t *xb, int M, int n0, int n1, float *out,
                           int ldo) {
	const int KP = (K + 1) / 2, ldx = 2 * KP;
	uint32_t *pw = aligned_alloc(64, sizeof(uint32_t) * (size_t)KP * PR * NP + 64);
	if (!pw) return -1;
	for (int n = n0; n < n1; n += PR * NP) {
		const int rows = n1 - n < PR * NP ? n1 - n : PR * NP, np = rows > PR ? 2 : 1;
		repack(w, K, n, rows < PR ? rows : PR, pw);
		if (np == 2) repack(w, K, n + PR, rows - PR, pw + (long)KP * PR);
		int m = 0;
		for (; m + MR <= M; m += MR) pass(pw, KP, np, xb, ldx, m, MR, out, ldo, n, rows);
		for (; m < M; m++) pass(pw, KP, np, xb, ldx, m, 1, out, ldo, n, rows);
	}
	free(pw);
	return 0;
}
#else
int qmm_cpu_bf16(void) { return 0; }
void qmm_round_bf16(const float *x, long n, uint16_t *xb) {}
int qmm_gemm_t_bf16(const uint16_t *w, int K, const uint16_t *xb, int M, int n0, int n1, float *out, int ldo) {
	return -1;
}
#endif

// Prefill's product on 8-bit activations: many rows of x, each rounded to int8 as decoding
// rounds its one row (qmm_prepare_x_i8, int8.c), times 4- or 8-bit W with AVX-512 VNNI.
// Dequantizing W to float32 and handing it to sgemm runs at sgemm's speed at best; vpdpbusd
// does 64 multiply-adds of bytes in one instruction, four times a float FMA's 16, so even
// with the scaling each chunk needs it runs well past that (BenchmarkMatMulTInt8).
//
// A micro-tile is NR rows of W by MR rows of x, NR*MR float accumulators. Per chunk of 16
// words of W (128 values at 4 bits, 64 at 8), each row of W is unpacked once (mask, shift)
// and its lanes' scales spread once; each row of x is loaded once; each pair then costs its
// dot products, a conversion and a scaled add (the lane's weight scale times its x scale,
// which differ per pair, so that multiply cannot be hoisted). The integer sums are exactly
// those of decoding's kernel for the same row, so a row's result differs from the exact
// product by the rounding of x alone, as there.
//
// Rows of x go in blocks of MB, which stay in L2 while a core's rows of W pass over them
// four at a time (a few KiB, in L1 while the block's rows of x pass).
#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>

#include "avx512.h"

#define TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

enum { TILE_BYTES = 256 << 10 };

// The scales of a chunk's lanes, at width H (avx512.h): GPC groups from s, ng in a row's
// final, partial chunk.
INLINE TARGET __m512 lanes_h(const void *s, int H, int GPC, int ng, __m512i idx) {
	if (H == 0) {
		const float *f = (const float *)s;
		return LANE_SCALES(f, GPC, ng);
	}
	return lane_scales16((const uint16_t *)s, GPC, ng, idx, H);
}

// sum plus row n's bias terms against x row's group sums, at width H.
INLINE TARGET __m512 bias_h(__m512 sum, const void *b, const float *xsum, int G, int H) {
	if (H == 0) return add_bias_terms(sum, (const float *)b, xsum, G);
	return add_bias_terms16(sum, (const uint16_t *)b, xsum, G, H);
}

// out[(m+j)*ldo + n+r] for r < NR, j < MR: rows n.. of W (B bits, groups of GS, scales of
// width H) times prepared rows m.. of x (row strides xqs bytes, xsls lane scales, G sums).
INLINE TARGET void micro(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum, int xqs,
                         int xsls, int n, int m, float *out, int ldo, const int NR, const int MR, const int B,
                         const int GS, const int H) {
	const int S = 32 / B, V = 16 * S, XB = B == 4 ? 128 : 64, GPC = V > GS ? V / GS : 1;
	const int K = w->K, G = K / GS, words = K * B / 32, full = words / 16, left = words % 16;
	const int gt = full * V / GS, ngt = G - gt < GPC ? G - gt : GPC;
	const __mmask16 kt = (__mmask16)((1u << left) - 1);
	const __m512i idx = _mm512_srli_epi32(
	    _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(S)),
	    __builtin_ctz(GS));
	const __m512i low = _mm512_set1_epi8(0x0f), zero = _mm512_setzero_si512();
	const int esz = H == 0 ? 4 : 2;
	const char *scales = H == 0 ? (const char *)w->scales : (const char *)w->scales16;
	const char *biases = H == 0 ? (const char *)w->biases : (const char *)w->biases16;
	const uint32_t *p = w->packed + (long)n * words;
	__m512 t[4][4];
	_Pragma("GCC unroll 4")
	for (int r = 0; r < NR; r++)
		_Pragma("GCC unroll 4")
		for (int j = 0; j < MR; j++) t[r][j] = _mm512_setzero_ps();
	const int chunks = full + (left != 0);
	for (int c = 0; c < chunks; c++) {
		const int last = c == full, g = last ? gt : c * V / GS;
		__m512i wl[4], wh[4];
		__m512 sv[4];
		_Pragma("GCC unroll 4")
		for (int r = 0; r < NR; r++) {
			const uint32_t *pc = p + (long)r * words + 16 * c;
			__m512i v = last ? _mm512_maskz_loadu_epi32(kt, pc) : _mm512_loadu_si512(pc);
			wl[r] = B == 4 ? _mm512_and_si512(v, low) : v;
			wh[r] = B == 4 ? _mm512_and_si512(_mm512_srli_epi16(v, 4), low) : v;
			sv[r] = lanes_h(scales + ((long)(n + r) * G + g) * esz, H, GPC, last ? ngt : GPC, idx);
		}
		_Pragma("GCC unroll 4")
		for (int j = 0; j < MR; j++) {
			const int8_t *xc = xq + (long)(m + j) * xqs + (long)c * XB;
			const __m512i x0 = _mm512_loadu_si512(xc);
			const __m512i x1 = B == 4 ? _mm512_loadu_si512(xc + 64) : x0;
			const __m512 xs = _mm512_loadu_ps(xsl + (long)(m + j) * xsls + 16 * c);
			_Pragma("GCC unroll 4")
			for (int r = 0; r < NR; r++) {
				__m512i a = _mm512_dpbusd_epi32(zero, wl[r], x0);
				if (B == 4) a = _mm512_dpbusd_epi32(a, wh[r], x1);
				t[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(sv[r], xs), t[r][j]);
			}
		}
	}
	_Pragma("GCC unroll 4")
	for (int j = 0; j < MR; j++) {
		const float *xs = xsum + (long)(m + j) * G;
		float *o = out + (long)(m + j) * ldo + n;
		if (NR == 4) {
			_mm_storeu_ps(o, sum4(bias_h(t[0][j], biases + (long)n * G * esz, xs, G, H),
			                      bias_h(t[1][j], biases + (long)(n + 1) * G * esz, xs, G, H),
			                      bias_h(t[2][j], biases + (long)(n + 2) * G * esz, xs, G, H),
			                      bias_h(t[3][j], biases + (long)(n + 3) * G * esz, xs, G, H)));
		} else {
			_Pragma("GCC unroll 4")
			for (int r = 0; r < NR; r++)
				o[r] = _mm512_reduce_add_ps(bias_h(t[r][j], biases + (long)(n + r) * G * esz, xs, G, H));
		}
	}
}

// Rows [n0, n1) of W against all M prepared rows of x, in tiles of W's rows of about
// TILE_BYTES (kept in L2 while every row of x passes over them) and, within a tile, four rows
// of x at a time (kept in L1 while the tile's rows pass four at a time); then the rows left.
#define GEMM(BITS, GS, H)                                                                            \
	TARGET static void gemm_##BITS##_##GS##_##H(const qmm_w *w, const int8_t *xq, const float *xsl,  \
	                                            const float *xsum, int xqs, int xsls, int M, int n0,  \
	                                            int n1, float *out, int ldo) {                        \
		int NB = TILE_BYTES / (w->K * BITS / 8) / 4 * 4;                                             \
		if (NB < 4) NB = 4;                                                                          \
		for (int nb = n0; nb < n1; nb += NB) {                                                       \
			int ne = nb + NB < n1 ? nb + NB : n1, n4 = nb + (ne - nb) / 4 * 4, m = 0;                \
			for (; m + 4 <= M; m += 4) {                                                             \
				int n = nb;                                                                          \
				for (; n < n4; n += 4) micro(w, xq, xsl, xsum, xqs, xsls, n, m, out, ldo, 4, 4, BITS, GS, H); \
				for (; n < ne; n++) micro(w, xq, xsl, xsum, xqs, xsls, n, m, out, ldo, 1, 4, BITS, GS, H); \
			}                                                                                        \
			for (; m < M; m++) {                                                                     \
				int n = nb;                                                                          \
				for (; n < n4; n += 4) micro(w, xq, xsl, xsum, xqs, xsls, n, m, out, ldo, 4, 1, BITS, GS, H); \
				for (; n < ne; n++) micro(w, xq, xsl, xsum, xqs, xsls, n, m, out, ldo, 1, 1, BITS, GS, H); \
			}                                                                                        \
		}                                                                                            \
	}

#define GEMM_ALL(BITS, GS) GEMM(BITS, GS, 0) GEMM(BITS, GS, 1) GEMM(BITS, GS, 2)
GEMM_ALL(4, 32)
GEMM_ALL(4, 64)
GEMM_ALL(4, 128)
GEMM_ALL(8, 32)
GEMM_ALL(8, 64)
GEMM_ALL(8, 128)

void qmm_gemm_t_i8(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum, int M, int n0,
                   int n1, float *out, int ldo) {
	typedef void (*kernel)(const qmm_w *, const int8_t *, const float *, const float *, int, int, int, int, int,
	                       float *, int);
#define GROUPS(B, H) {gemm_##B##_32_##H, gemm_##B##_64_##H, gemm_##B##_128_##H}
	static const kernel k[3][2][3] = {{GROUPS(4, 0), GROUPS(8, 0)}, {GROUPS(4, 1), GROUPS(8, 1)},
	                                  {GROUPS(4, 2), GROUPS(8, 2)}};
#undef GROUPS
	int g = w->group, B = w->bits, S = 32 / B, V = 16 * S, chunks = (w->K + V - 1) / V;
	int xqs = chunks * 64 * (8 / B), xsls = chunks * 16;
	k[scale_width(w)][B == 8][g == 32 ? 0 : g == 64 ? 1 : 2](w, xq, xsl, xsum, xqs, xsls, M, n0, n1, out, ldo);
}
#else
void qmm_gemm_t_i8(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum, int M, int n0,
                   int n1, float *out, int ldo) {}
#endif

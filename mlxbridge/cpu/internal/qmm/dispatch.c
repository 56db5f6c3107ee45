// Run-time kernel choice: on x86-64, AVX-512 or AVX2+FMA kernels for the bit widths that have
// them, decided once from cpuid; the portable kernels everywhere else.
#include "qmm.h"

static int limit = -1;

void qmm_limit_simd(int level) { limit = level; }

int qmm_simd(void) {
#ifdef QMM_X86
	static int have = -1;
	if (have < 0) {
		__builtin_cpu_init();
		have = 0;
		if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) have = 1;
		if (have && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) have = 2;
	}
	return limit >= 0 && limit < have ? limit : have;
#else
	return 0;
#endif
}

// Which kernel family runs the matrix-vector product for these weights: the lane kernels
// for 2, 4 and 8 bits (AVX-512 at level 2, AVX2 at 1, portable C at 0), which read x in the
// lane layout; for other widths the natural-order AVX2 kernel (3) or portable C (0), which
// read x in order.
enum { PORTABLE = 0, LANES_AVX2 = 1, LANES_AVX512 = 2, NATURAL_AVX2 = 3 };

static int gemv_t_level(const qmm_w *w) {
	int b = w->bits, l = qmm_simd();
	if (b == 2 || b == 4 || b == 8) return l;
	return l >= 1 ? NATURAL_AVX2 : PORTABLE;
}

int qmm_xp_len(int K, int bits) {
	(void)bits;
	return (K + 255) / 256 * 256; // room for the SIMD layouts, which pad K to whole chunks
}

void qmm_prepare_x(const qmm_w *w, const float *x, int ldx, int mb, float *xp, float *xsum) {
	switch (gemv_t_level(w)) {
	case LANES_AVX2: qmm_prepare_x_lanes(w, x, ldx, mb, 8, xp, xsum); return;
	case LANES_AVX512: qmm_prepare_x_lanes(w, x, ldx, mb, 16, xp, xsum); return;
	case NATURAL_AVX2: qmm_prepare_x_natural(w, x, ldx, mb, xp, xsum); return;
	default:
		if (w->bits == 2 || w->bits == 4 || w->bits == 8) qmm_prepare_x_lanes(w, x, ldx, mb, 16, xp, xsum);
		else qmm_prepare_x_natural(w, x, ldx, mb, xp, xsum);
	}
}

void qmm_gemv_t(const qmm_w *w, const float *xp, const float *xsum, int mb,
                int n0, int n1, float *out, int ldo) {
	switch (gemv_t_level(w)) {
#ifdef QMM_X86
	case LANES_AVX512: qmm_gemv_t_avx512(w, xp, xsum, mb, n0, n1, out, ldo); return;
	case LANES_AVX2: qmm_gemv_t_avx2(w, xp, xsum, mb, n0, n1, out, ldo); return;
	case NATURAL_AVX2: qmm_gemv_t_natural_avx2(w, xp, xsum, mb, n0, n1, out, ldo); return;
#endif
	default: qmm_gemv_t_portable(w, xp, xsum, mb, n0, n1, out, ldo);
	}
}

void qmm_gemv_t_batch(const qmm_w *w, const float *xp, const float *xsum, int M,
                      int n0, int n1, float *out, int ldo) {
	enum { RB = 16 }; // rows of W kept in cache while every block of x passes over them
	int kp = qmm_xp_len(w->K, w->bits), G = w->K / w->group;
	if (M <= 4) {
		qmm_gemv_t(w, xp, xsum, M, n0, n1, out, ldo);
		return;
	}
	for (int n = n0; n < n1; n += RB) {
		int ne = n + RB < n1 ? n + RB : n1;
		for (int m = 0; m < M; m += 4)
			qmm_gemv_t(w, xp + (long)m * kp, xsum + (long)m * G, M - m < 4 ? M - m : 4, n, ne, out + (long)m * ldo, ldo);
	}
}

void qmm_gemv(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
              float *out, int ldo, float *scratch) {
	switch (gemv_t_level(w)) {
#ifdef QMM_X86
	case LANES_AVX512: qmm_gemv_avx512(w, n0, n1, x, ldx, mb, out, ldo, scratch); return;
	case LANES_AVX2: qmm_gemv_lanes_avx2(w, n0, n1, x, ldx, mb, out, ldo, scratch); return;
#endif
	default: qmm_gemv_portable(w, n0, n1, x, ldx, mb, out, ldo, scratch);
	}
}

void qmm_dequant(const qmm_w *w, int n0, int n1, float *dst) {
#ifdef QMM_X86
	if (qmm_simd() >= 1) {
		qmm_dequant_avx2(w, n0, n1, dst);
		return;
	}
#endif
	qmm_dequant_portable(w, n0, n1, dst);
}

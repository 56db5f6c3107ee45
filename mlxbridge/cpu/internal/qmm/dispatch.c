// Run-time kernel choice: on x86-64, AVX-512 or AVX2+FMA kernels for the bit widths that have
// them, decided once from cpuid; the portable kernels everywhere else.
#include "qmm.h"

#include <stdlib.h>

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

int qmm_cpu_amd(void) {
#ifdef QMM_X86
	static int amd = -1;
	if (amd < 0) {
		__builtin_cpu_init();
		amd = __builtin_cpu_is("amd");
	}
	return amd;
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

void qmm_gemv_t_f32(const qmm_w *w, const float *xp, const float *xsum, int mb,
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

static void gemv_f32(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
                     float *out, int ldo, float *scratch) {
	switch (gemv_t_level(w)) {
#ifdef QMM_X86
	case LANES_AVX512: qmm_gemv_avx512(w, n0, n1, x, ldx, mb, out, ldo, scratch); return;
	case LANES_AVX2: qmm_gemv_lanes_avx2(w, n0, n1, x, ldx, mb, out, ldo, scratch); return;
#endif
	default: qmm_gemv_portable(w, n0, n1, x, ldx, mb, out, ldo, scratch);
	}
}

static void dequant_f32(const qmm_w *w, int n0, int n1, float *dst) {
#ifdef QMM_X86
	if (qmm_simd() >= 1) {
		qmm_dequant_avx2(w, n0, n1, dst);
		return;
	}
#endif
	qmm_dequant_portable(w, n0, n1, dst);
}

// 16-bit scales and biases. The float32 kernels run on tiles of rows whose scales and biases
// are first widened (exactly) into a per-thread buffer: HALF_TILE floats of each hold a few
// hundred rows' worth at decoding's shapes, so a call pays the kernels' set-up once or a few
// times, and the buffer stays in cache while the kernel reads it.
enum { HALF_TILE = 8192 };
static __thread float half_buf[2 * HALF_TILE] __attribute__((aligned(64)));

// half_rows is how many rows of w a tile holds: a multiple of four (the kernels' row block)
// where the buffer allows, at least one.
static int half_rows(const qmm_w *w) {
	int t = HALF_TILE / (w->K / w->group);
	return t >= 8 ? t / 4 * 4 : t;
}

// half_tile points lw at rows [t0, t0+tn) of w with their scales and biases widened into buf
// (2*tn*G floats): row t0 of w is row 0 of lw.
static const qmm_w *half_tile(const qmm_w *w, int t0, int tn, float *buf, qmm_w *lw) {
	long G = w->K / w->group, words = (long)w->K * w->bits / 32;
	*lw = *w;
	lw->packed = w->packed + t0 * words;
	lw->scales = buf;
	lw->biases = buf + tn * G;
	lw->scales16 = lw->biases16 = 0;
	qmm_half_widen(w->scales16 + t0 * G, tn * G, w->f16, buf);
	qmm_half_widen(w->biases16 + t0 * G, tn * G, w->f16, buf + tn * G);
	return lw;
}

// half_each calls fn for each tile of rows [n0, n1): the tile's first row and count, and
// the tile as its own W. A row too wide for the buffer (over HALF_TILE groups) gets one
// allocated for it.
#define HALF_EACH(w, n0, n1, t0, tn, lw, body)                                                    \
	do {                                                                                      \
		int rows_ = half_rows(w);                                                         \
		float *buf_ = half_buf;                                                           \
		if (rows_ < 1) {                                                                  \
			rows_ = 1;                                                                \
			buf_ = malloc(sizeof(float) * 2 * (size_t)((w)->K / (w)->group));         \
			if (!buf_) abort();                                                       \
		}                                                                                 \
		for (int t0 = (n0); t0 < (n1); t0 += rows_) {                                     \
			int tn = (n1) - t0 < rows_ ? (n1) - t0 : rows_;                           \
			qmm_w tw_;                                                                \
			const qmm_w *lw = half_tile(w, t0, tn, buf_, &tw_);                       \
			body;                                                                     \
		}                                                                                 \
		if (buf_ != half_buf) free(buf_);                                                 \
	} while (0)

// Whether the AVX-512 decode kernels can read 16-bit scales themselves: they need AVX-512BW
// (16-bit loads and permutes) besides the F and VL the float32 forms need. Float16 scales
// also take F16C, which every AVX-512 processor has (and clang's __builtin_cpu_supports
// does not name).
static int reads16(void) {
#ifdef QMM_X86
	static int have = -1;
	if (have < 0) {
		__builtin_cpu_init();
		have = __builtin_cpu_supports("avx512bw");
	}
	return have;
#else
	return 0;
#endif
}

int qmm_reads_half_scales(void) { return qmm_simd() >= LANES_AVX512 && reads16(); }

void qmm_gemv_t(const qmm_w *w, const float *xp, const float *xsum, int mb,
                int n0, int n1, float *out, int ldo) {
	if (w->scales) {
		qmm_gemv_t_f32(w, xp, xsum, mb, n0, n1, out, ldo);
		return;
	}
#ifdef QMM_X86
	// Decoding (one row of x) on AVX-512 reads the 16-bit scales in its own loop, whole sets
	// of four rows; widening tiles first made a decode step slower than float32 scales (the
	// widening's reads stall instead of streaming with the weights').
	if (mb == 1 && gemv_t_level(w) == LANES_AVX512 && reads16()) {
		int n4 = n0 + (n1 - n0) / 4 * 4;
		qmm_gemv_t_avx512(w, xp, xsum, 1, n0, n4, out, ldo);
		n0 = n4;
	}
#endif
	HALF_EACH(w, n0, n1, t0, tn, lw, qmm_gemv_t_f32(lw, xp, xsum, mb, 0, tn, out + t0, ldo));
}

void qmm_gemv_t_i8(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
                   int n0, int n1, float *out, int vnni) {
	if (w->scales || vnni) { // the VNNI kernels read 16-bit scales themselves
		qmm_gemv_t_i8_f32(w, xq, xsl, xsum, n0, n1, out, vnni);
		return;
	}
	HALF_EACH(w, n0, n1, t0, tn, lw, qmm_gemv_t_i8_f32(lw, xq, xsl, xsum, 0, tn, out + t0, vnni));
}

void qmm_dequant(const qmm_w *w, int n0, int n1, float *dst) {
	if (w->scales) {
		dequant_f32(w, n0, n1, dst);
		return;
	}
	HALF_EACH(w, n0, n1, t0, tn, lw, dequant_f32(lw, 0, tn, dst + (long)(t0 - n0) * w->K));
}

// The transposed product sums over rows, so its range is widened whole: rows [n0, n1) are
// one tile, in a buffer allocated for it where they do not fit the thread's.
void qmm_gemv(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
              float *out, int ldo, float *scratch) {
	if (w->scales) {
		gemv_f32(w, n0, n1, x, ldx, mb, out, ldo, scratch);
		return;
	}
	if (n1 <= n0) {
		gemv_f32(w, n0, n0, x, ldx, mb, out, ldo, scratch); // zeroes out, as the float form does
		return;
	}
	long need = 2L * (n1 - n0) * (w->K / w->group);
	float *buf = need <= 2 * HALF_TILE ? half_buf : malloc(sizeof(float) * (size_t)need);
	if (!buf) abort();
	qmm_w tw;
	gemv_f32(half_tile(w, n0, n1 - n0, buf, &tw), 0, n1 - n0, x + n0, ldx, mb, out, ldo, scratch);
	if (buf != half_buf) free(buf);
}

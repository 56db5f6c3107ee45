// AVX2+FMA kernels that decode any bit width in natural order: value i of a row is bits
// [i*bits, (i+1)*bits) of its byte stream. They run the matrix-vector product for the widths
// without a lane kernel (3, 5, 6 and 7 bits) and dequantize tiles of W for sgemm.
//
// Values 8j..8j+7 start at byte j*bits of the row, and each lies within the 16-bit window that
// starts at its first byte; one byte shuffle moves every value's window into its own 32-bit
// lane, a variable shift drops the bits below it and a mask those above: a load, four
// operations and a convert per 8 values, the same for every j (j*bits is a whole byte).
#include "qmm.h"

#ifdef QMM_X86
#include <immintrin.h>
#include <string.h>

#include "prefetch_x86.h"

#define TARGET __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

typedef struct {
	__m256i ctl, shift, mask;
} decoder;

TARGET INLINE decoder decoder_for(int bits) {
	uint8_t ctl[32];
	uint32_t shift[8];
	for (int j = 0; j < 8; j++) {
		int o = j * bits, at = 16 * (j / 4) + 4 * (j % 4); // both halves hold the same 16 bytes
		ctl[at] = (uint8_t)(o / 8);
		ctl[at + 1] = (uint8_t)(o / 8 + 1);
		ctl[at + 2] = ctl[at + 3] = 0x80; // zero
		shift[j] = (uint32_t)(o % 8);
	}
	decoder d;
	d.ctl = _mm256_loadu_si256((const __m256i *)ctl);
	d.shift = _mm256_loadu_si256((const __m256i *)shift);
	d.mask = _mm256_set1_epi32((1 << bits) - 1);
	return d;
}

// The 8 values whose bytes start at p (16 bytes are read).
TARGET INLINE __m256 decode(const uint8_t *p, decoder d) {
	__m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
	v = _mm256_srlv_epi32(_mm256_shuffle_epi8(v, d.ctl), d.shift);
	return _mm256_cvtepi32_ps(_mm256_and_si256(v, d.mask));
}

// A row's bytes, with its last blocks (whose 16-byte reads would run past the row, and past
// W for its last row) copied into a zero-padded buffer.
typedef struct {
	const uint8_t *bytes;
	int tail; // first block read from buf
	uint8_t buf[48];
} row_reader;

TARGET INLINE void row_open(row_reader *r, const uint32_t *row, int words, int bits) {
	int len = 4 * words;
	r->bytes = (const uint8_t *)row;
	r->tail = len >= 16 ? (len - 16) / bits + 1 : 0;
	memset(r->buf, 0, sizeof r->buf);
	memcpy(r->buf, r->bytes + r->tail * bits, len - r->tail * bits);
}

TARGET INLINE const uint8_t *row_block(const row_reader *r, int j, int bits) {
	return j < r->tail ? r->bytes + j * bits : r->buf + (j - r->tail) * bits;
}

static inline float TARGET hsum8(__m256 v) {
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

// R rows of W times MB rows of x (natural layout, row stride qmm_xp_len): per group,
// acc = sum q*x over its blocks, tot += scale*acc; the bias part is added per row at the end.
#define GEMVA(R, MB)                                                                            \
	TARGET static void gemva_##R##_##MB(const qmm_w *w, const float *xp, const float *xsum,   \
	                                    int n, float *out, int ldo, decoder d) {              \
		int K = w->K, gs = w->group, G = K / gs, bits = w->bits, words = K * bits / 32;       \
		int kp = qmm_xp_len(K, bits);                                                          \
		const char *ahead = pf_start(w, n, R, words, PF_L1);                                   \
		pf_groups(w, n, R, G);                                                                 \
		row_reader rd[R];                                                                      \
		for (int r = 0; r < R; r++) row_open(&rd[r], w->packed + (long)(n + r) * words, words, bits); \
		__m256 tot[R][MB];                                                                     \
		for (int r = 0; r < R; r++)                                                            \
			for (int m = 0; m < MB; m++) tot[r][m] = _mm256_setzero_ps();                      \
		for (int g = 0; g < G; g++) {                                                          \
			pf_chunk(ahead, g, R * gs * bits / 8, 0);                                          \
			__m256 acc[R][MB];                                                                 \
			for (int r = 0; r < R; r++)                                                        \
				for (int m = 0; m < MB; m++) acc[r][m] = _mm256_setzero_ps();                  \
			for (int j = g * gs / 8; j < (g + 1) * gs / 8; j++) {                              \
				__m256 q[R];                                                                   \
				for (int r = 0; r < R; r++) q[r] = decode(row_block(&rd[r], j, bits), d);      \
				for (int m = 0; m < MB; m++) {                                                 \
					__m256 xv = _mm256_loadu_ps(xp + (long)m * kp + 8 * j);                    \
					for (int r = 0; r < R; r++) acc[r][m] = _mm256_fmadd_ps(q[r], xv, acc[r][m]); \
				}                                                                              \
			}                                                                                  \
			for (int r = 0; r < R; r++) {                                                      \
				__m256 s = _mm256_broadcast_ss(w->scales + (long)(n + r) * G + g);             \
				for (int m = 0; m < MB; m++) tot[r][m] = _mm256_fmadd_ps(acc[r][m], s, tot[r][m]); \
			}                                                                                  \
		}                                                                                      \
		for (int r = 0; r < R; r++)                                                            \
			for (int m = 0; m < MB; m++) {                                                     \
				float t = hsum8(tot[r][m]);                                                    \
				const float *b = w->biases + (long)(n + r) * G;                                \
				for (int g = 0; g < G; g++) t += b[g] * xsum[m * G + g];                       \
				out[(long)m * ldo + n + r] = t;                                                \
			}                                                                                  \
	}

GEMVA(2, 1)
GEMVA(1, 1)
GEMVA(1, 2)
GEMVA(1, 3)
GEMVA(1, 4)

void TARGET qmm_gemv_t_natural_avx2(const qmm_w *w, const float *xp, const float *xsum, int mb,
                                    int n0, int n1, float *out, int ldo) {
	static void (*const one[5])(const qmm_w *, const float *, const float *, int, float *, int, decoder) = {
	    0, gemva_1_1, gemva_1_2, gemva_1_3, gemva_1_4};
	decoder d = decoder_for(w->bits);
	int n = n0;
	pf_first(w, n0, mb == 1 ? 2 : 1, w->K * w->bits / 32, w->K / w->group, PF_L1);
	if (mb == 1)
		for (; n + 2 <= n1; n += 2) gemva_2_1(w, xp, xsum, n, out, ldo, d);
	for (; n < n1; n++) one[mb](w, xp, xsum, n, out, ldo, d);
}

// Dequantizes rows [n0, n1) of W into dst (leading dimension K), for sgemm.
void TARGET qmm_dequant_avx2(const qmm_w *w, int n0, int n1, float *dst) {
	int K = w->K, gs = w->group, G = K / gs, bits = w->bits, words = K * bits / 32;
	decoder d = decoder_for(bits);
	for (int n = n0; n < n1; n++) {
		row_reader rd;
		row_open(&rd, w->packed + (long)n * words, words, bits);
		float *out = dst + (long)(n - n0) * K;
		for (int g = 0; g < G; g++) {
			__m256 s = _mm256_broadcast_ss(w->scales + (long)n * G + g);
			__m256 b = _mm256_broadcast_ss(w->biases + (long)n * G + g);
			for (int j = g * gs / 8; j < (g + 1) * gs / 8; j++)
				_mm256_storeu_ps(out + 8 * j, _mm256_fmadd_ps(decode(row_block(&rd, j, bits), d), s, b));
		}
	}
}
#endif

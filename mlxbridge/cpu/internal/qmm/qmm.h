// Fused quantized matrix products over MLX's affine format. W is (N, K): row n holds K values
// of `bits` bits as an LSB-first uint32 bit stream (K*bits/32 words), and (K/group) float
// scales and biases, w = scale*q + bias.
#ifndef INLOOP_QMM_H
#define INLOOP_QMM_H

#include <stdint.h>

typedef struct {
	int K, group, bits;      // W is (N, K), quantized in groups of `group` along K
	const uint32_t *packed;  // (N, K*bits/32)
	const float *scales;     // (N, K/group); NULL where the scales are 16-bit (below)
	const float *biases;     // (N, K/group); NULL with scales
	// A 16-bit checkpoint's scales and biases at their own width, (N, K/group) bfloat16 bits,
	// or float16 where f16 is set, so memory is read at two bytes a scale. Decoding's AVX-512
	// kernels (exact and VNNI) read them in their own loops; the other entry points widen
	// them a tile of rows at a time into a buffer that stays in cache.
	const uint16_t *scales16, *biases16;
	int f16;
} qmm_w;

// Kernel selection, decided once from cpuid: 2 when the AVX-512 matrix-vector kernels run
// (and AVX2 for the rest), 1 for AVX2+FMA, 0 for the portable C path. qmm_limit_simd(l) caps
// the level at l (-1: no cap), so tests can cover every path on one machine.
int qmm_simd(void);
void qmm_limit_simd(int level);
// An AMD processor: where the float32 decode kernel prefetches non-temporally (rows.c) and
// the bfloat16 dot-product kernel pays (half.go), both measured against Intel.
int qmm_cpu_amd(void);

// Matrix-vector products out[m*ldo + n] = sum_k x[m][k] * w[n][k] for m < mb <= 4 and
// n in [n0, n1). The x rows must first go through qmm_prepare_x, which lays them out for the
// kernel (xp: mb * qmm_xp_len(K) floats) and sums them per group (xsum: mb * K/group).
int qmm_xp_len(int K, int bits);
void qmm_prepare_x(const qmm_w *w, const float *x, int ldx, int mb, float *xp, float *xsum);
void qmm_gemv_t(const qmm_w *w, const float *xp, const float *xsum, int mb,
                int n0, int n1, float *out, int ldo);

// The same for any number M of x rows (prepared all at once, row stride qmm_xp_len): W is
// read once, 16 rows at a time staying in cache while each block of 4 x rows passes over them.
void qmm_gemv_t_batch(const qmm_w *w, const float *xp, const float *xsum, int M,
                      int n0, int n1, float *out, int ldo);

// out[m*ldo + k] = sum_{n in [n0, n1)} x[m*ldx + n] * w[n][k] for m < mb <= 4 and all K
// columns: the part of x @ W that rows [n0, n1) of W contribute. scratch holds
// mb*(qmm_xp_len(K) + K/group) floats.
void qmm_gemv(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
              float *out, int ldo, float *scratch);

// Decoding's product on 8-bit activations (int8.c) for 4- and 8-bit W, on AVX2, or AVX-512
// VNNI where the CPU has it (qmm_cpu_vnni) and vnni is set. qmm_prepare_x_i8 rounds one row x
// to int8 in the kernels' layout: per chunk of 16 words of a row of W, xq gets 64 bytes
// (8 bits) or 128 (4 bits), xsl 16 lane scales; xsum gets K/group sums. qmm_gemv_t_i8 sets
// out[n] = w_n . x for n in [n0, n1), x read as rounded.
int qmm_cpu_vnni(void);
void qmm_prepare_x_i8(const qmm_w *w, const float *x, int8_t *xq, float *xsl, float *xsum);
void qmm_gemv_t_i8(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
                   int n0, int n1, float *out, int vnni);

// Prefill's product on 8-bit activations (gemm_i8.c; AVX-512 VNNI and BMI2, where
// qmm_cpu_gemm_i8 says so), for 4- and 8-bit W. qmm_prepare_x_q8 rounds one row x (K values, a
// multiple of 32) to int8 per block of 32: xq gets K bytes, xs K/32 scales, xsum K/gs sums.
// qmm_gemm_t_i8 sets out[m*ldo + n] = w_n . x_m for m < M and n in [n0, n1), the M rows of x
// prepared one after another; it returns -1 (doing nothing) where it cannot allocate its
// panel, else 0.
int qmm_cpu_gemm_i8(void);
void qmm_prepare_x_q8(const float *x, int K, int gs, int8_t *xq, float *xs, float *xsum);
int qmm_gemm_t_i8(const qmm_w *w, const int8_t *xq, const float *xs, const float *xsum, int M, int n0,
                  int n1, float *out, int ldo);

// Prefill's product on bfloat16 activations (gemm_bf16.c; AVX-512 BF16, where qmm_cpu_bf16
// says so) for a bfloat16 W (N, K). qmm_round_bf16 rounds n values of x to bfloat16 (to nearest,
// ties even), padding an odd n with a zero. qmm_gemm_t_bf16 sets out[m*ldo + n] = w_n . x_m for
// m < M and n in [n0, n1), the M rows of x rounded one after another, each K values padded to
// an even count; it returns -1 (doing nothing) where it cannot allocate its panels, else 0.
int qmm_cpu_bf16(void);
void qmm_round_bf16(const float *x, long n, uint16_t *xb);
int qmm_gemm_t_bf16(const uint16_t *w, int K, const uint16_t *xb, int M, int n0, int n1, float *out, int ldo);

// Whether decoding's kernels (qmm_gemv_t with one row of x, and the VNNI form of
// qmm_gemv_t_i8) read 16-bit scales in their own loops on this CPU, for 2-, 4- and 8-bit
// W. Elsewhere, and for other widths, every entry point widens them a tile at a time,
// which is slower than float32 scales.
int qmm_reads_half_scales(void);

// Dequantizes rows [n0, n1) of W into dst, row-major with leading dimension K.
void qmm_dequant(const qmm_w *w, int n0, int n1, float *dst);

// The entry points' forms for float32 scales only (w->scales set), which the 16-bit forms run
// on each widened tile.
void qmm_gemv_t_f32(const qmm_w *w, const float *xp, const float *xsum, int mb,
                    int n0, int n1, float *out, int ldo);
void qmm_gemv_t_i8_f32(const qmm_w *w, const int8_t *xq, const float *xsl, const float *xsum,
                       int n0, int n1, float *out, int vnni);

// Portable kernels, also the fallback for bit widths without a SIMD kernel. For 2, 4 and 8
// bits the matrix-vector kernels read x in the lane layout of qmm_prepare_x_lanes (16 lanes
// for AVX-512 and the portable kernel, 8 for AVX2), for other widths in natural order.
void qmm_prepare_x_lanes(const qmm_w *w, const float *x, int ldx, int mb, int lanes, float *xp, float *xsum);
void qmm_prepare_x_natural(const qmm_w *w, const float *x, int ldx, int mb, float *xp, float *xsum);
void qmm_gemv_t_portable(const qmm_w *w, const float *xp, const float *xsum, int mb,
                         int n0, int n1, float *out, int ldo);
void qmm_gemv_portable(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
                       float *out, int ldo, float *scratch);
void qmm_dequant_portable(const qmm_w *w, int n0, int n1, float *dst);
void qmm_unpack(const uint32_t *row, int k0, int n, int bits, float *dst);
void qmm_lanes_to_out(const qmm_w *w, int lanes, const float *acc, const float *cb, int mb,
                      float *out, int ldo);

#if defined(__x86_64__) || defined(_M_X64)
#define QMM_X86 1
void qmm_gemv_t_avx2(const qmm_w *w, const float *xp, const float *xsum, int mb,
                     int n0, int n1, float *out, int ldo);
void qmm_gemv_lanes_avx2(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
                         float *out, int ldo, float *scratch);
void qmm_gemv_t_natural_avx2(const qmm_w *w, const float *xp, const float *xsum, int mb,
                             int n0, int n1, float *out, int ldo);
void qmm_dequant_avx2(const qmm_w *w, int n0, int n1, float *dst);
void qmm_gemv_t_avx512(const qmm_w *w, const float *xp, const float *xsum, int mb,
                       int n0, int n1, float *out, int ldo);
void qmm_gemv_avx512(const qmm_w *w, int n0, int n1, const float *x, int ldx, int mb,
                     float *out, int ldo, float *scratch);
#endif

// W held in 16-bit floats, (N, K) row-major: bfloat16, or IEEE half when f16 (half.c).
// qmm_half_widen writes n widened values to dst; qmm_half_gemv_t_batch sets
// out[m*ldo + n] = sum_k x[m*K + k] * w[n][k] for m < M and n in [n0, n1).
void qmm_half_widen(const uint16_t *w, long n, int f16, float *dst);
void qmm_half_gemv_t_batch(const uint16_t *w, int K, int f16, const float *x, int M,
                           int n0, int n1, float *out, int ldo);
// qmm_half_gemm_n sets out[m*K + k] = sum_n x[m*N + n] * w[n][k] for m < M, k in [k0, k1).
void qmm_half_gemm_n(const uint16_t *w, int N, int K, int f16, const float *x, int M, int k0,
                     int k1, float *out);
void qmm_half_gemm_n_portable(const uint16_t *w, int N, int K, int f16, const float *x, int M,
                              int k0, int k1, float *out);
void qmm_half_widen_portable(const uint16_t *w, long n, int f16, float *dst);
void qmm_half_gemv_t_portable(const uint16_t *w, int K, int f16, const float *x, int ldx, int mb,
                              int n0, int n1, float *out, int ldo);

// Float32 W (N, K): out[n] = w_n . x for n in [n0, n1), one row at a time (rows.c).
void qmm_rows(const float *w, int K, const float *x, int n0, int n1, float *out);
void qmm_rows_policy(int nta); // tests: 1 non-temporal prefetches, 0 into L2, -1 by processor
void qmm_rows_portable(const float *w, int K, const float *x, int n0, int n1, float *out);

// Benchmark helper: sums n floats, to measure the machine's read bandwidth.
float qmm_sum_floats(const float *a, long n);

#endif

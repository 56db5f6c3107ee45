// Vectorizable exponentials for the cpu backend's softmax, logsumexp and
// activation kernels. Plain C loops that GCC and Clang vectorize at -O3; on x86-64
// GCC also builds an AVX2+FMA clone picked at load time.
#include <stddef.h>
#include <stdint.h>

void inloop_softmax_rows(float *out, const float *x, size_t rows, size_t d);
void inloop_logsumexp_rows(float *out, const float *x, size_t rows, size_t d);
void inloop_softmax_causal_rows(float *p, size_t rows, size_t d, size_t first_limit, float scale);
void inloop_exp(float *y, const float *x, size_t n);
void inloop_binary(int op, float *out, const float *a, int as, const float *b, int bs, size_t n);
void inloop_xent_grad_rows(float *out, const float *x, const float *lse, const float *g, const int32_t *t,
                           size_t rows, size_t d);
void inloop_silu(float *y, const float *x, size_t n);
void inloop_sigmoid(float *y, const float *x, size_t n);
void inloop_silu_grad(float *y, const float *x, size_t n);
void inloop_softmax_part(float *p, size_t rows, size_t ld, size_t n, float scale, float *m, float *l);
void inloop_attend_scores(float *p, size_t ld, const float *q, size_t rows, size_t d, const float *k, size_t s);
void inloop_attend_values(float *out, size_t rows, size_t dv, const float *p, size_t ld, const float *v, size_t s);
void inloop_attend_quant_scores(float *p, size_t ld, const float *q, const float *qsum, size_t rows, size_t dp,
                                size_t group, int bits, const uint32_t *w, const float *s, const float *b, size_t n,
                                float *tmp);
void inloop_attend_quant_values(float *out, size_t rows, size_t dv, const float *p, size_t ld, size_t dp,
                                size_t group, int bits, const uint32_t *w, const float *s, const float *b, size_t n,
                                float *tmp);
void inloop_attend_bf16_scores(float *p, size_t ld, const float *q, size_t rows, size_t d, const uint16_t *k, size_t s,
                               float *tmp);
void inloop_attend_bf16_values(float *out, size_t rows, size_t dv, const float *p, size_t ld, const uint16_t *v,
                               size_t s);
void inloop_adam(float *po, float *mo, float *vo, const float *p, const float *g, const float *m, const float *v,
                 size_t n, const float *k);
void inloop_adam_limit(int level);
void inloop_add_low_rank(float *out, const float *y, const float *x, size_t rows, size_t k, const float *a, size_t r,
                         const float *b, size_t n, float scale);
void inloop_rmsnorm_rows(float *out, const float *x, const float *w, size_t rows, size_t d, float eps);
void inloop_rope_rows(float *out, const float *x, const float *cos_, const float *sin_, size_t row0, size_t rows,
                      size_t d, size_t l, size_t dims, int traditional);

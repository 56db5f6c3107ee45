// Software prefetching for the x86 matrix-vector kernels.
//
// Hardware prefetchers stop at 4 KiB pages and need a few misses to pick up each new stream,
// and a row of W is often shorter than a page, so the kernels prefetch themselves. Rows are
// contiguous, so "ahead" is a linear distance: while reading R rows the kernel fetches the
// bytes a few KiB past them in step with its reads (one line per 64 bytes consumed), and the
// scales and biases PF_GROUPS bytes ahead once per row set. Prefetches never fault, so running
// past the end of W is harmless. 8-bit weights stream twice as many bytes per operation;
// prefetched into L1 they evicted the activations, so they go to L2, from further ahead, which
// measured 20-30% faster (PF_L2). 2- and 4-bit weights go to L1 (PF_L1).
#ifndef INLOOP_QMM_PREFETCH_H
#define INLOOP_QMM_PREFETCH_H

#include <immintrin.h>

#include "qmm.h"

enum { PF_L1 = 4096, PF_L2 = 8192, PF_GROUPS = 512 };
#define PF_DIST(bits) ((bits) == 8 ? PF_L2 : PF_L1)

// Where the prefetches for row set n (R rows) start: `dist` bytes past the set, or the next
// set if that is further.
static inline const char *pf_start(const qmm_w *w, int n, int R, int words, int dist) {
	long row = 4L * words, extra = dist - R * row;
	return (const char *)(w->packed + (long)(n + R) * words) + (extra > 0 ? extra : 0);
}

// One line of W, to L2 or to L1.
static inline __attribute__((always_inline)) void pf_line(const char *p, int to_l2) {
	if (to_l2) _mm_prefetch(p, _MM_HINT_T1);
	else _mm_prefetch(p, _MM_HINT_T0);
}

// The lines of chunk c: R rows of `bytes` each.
static inline __attribute__((always_inline)) void pf_chunk(const char *start, int c, int bytes, int to_l2) {
	const char *p = start + (long)c * bytes;
	for (int o = 0; o < bytes; o += 64) pf_line(p + o, to_l2);
}

// Where a row's scales and biases are, and their bytes each: float32, or 16-bit.
static inline const char *pf_scales(const qmm_w *w) { return w->scales ? (const char *)w->scales : (const char *)w->scales16; }
static inline const char *pf_biases(const qmm_w *w) { return w->scales ? (const char *)w->biases : (const char *)w->biases16; }
static inline long pf_width(const qmm_w *w) { return w->scales ? 4 : 2; }

// The scales and biases of the row set that is PF_GROUPS bytes past set n.
static inline void pf_groups(const qmm_w *w, int n, int R, int G) {
	long e = pf_width(w), set = e * R * G, extra = PF_GROUPS - set;
	long from = e * (n + R) * G + (extra > 0 ? extra : 0);
	const char *s = pf_scales(w), *b = pf_biases(w);
	for (long o = 0; o < set; o += 64) {
		_mm_prefetch(s + from + o, _MM_HINT_T0);
		_mm_prefetch(b + from + o, _MM_HINT_T0);
	}
}

// At the start of a call: everything the first row set's prefetches skip over.
static inline void pf_first(const qmm_w *w, int n0, int R, int words, int G, int dist) {
	const char *p = (const char *)(w->packed + (long)n0 * words), *end = pf_start(w, n0, R, words, dist);
	for (; p < end; p += 64) _mm_prefetch(p, _MM_HINT_T0);
	long e = pf_width(w), set = e * R * G, extra = PF_GROUPS - set, len = set + (extra > 0 ? extra : 0);
	const char *s = pf_scales(w) + e * n0 * G, *b = pf_biases(w) + e * n0 * G;
	for (long o = 0; o < len; o += 64) {
		_mm_prefetch(s + o, _MM_HINT_T0);
		_mm_prefetch(b + o, _MM_HINT_T0);
	}
}

#endif

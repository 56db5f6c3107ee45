#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#ifdef __APPLE__
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif

// How long a thread polls for its next part before it only yields its core between
// polls, and how long it does that before it sleeps; and how long a caller polls for
// its parts before it yields between polls. The first is short: the attention that
// follows a layer's projections runs on package par's goroutines, and a BLAS thread
// still spinning takes a core from them (at 100 µs a float32 SmolLM2-135M decoded
// 30–50% slower at depth 2048). Sleeping early costs the next product a wake-up,
// though, and a layer's products come tens of microseconds apart: a thread that
// yields for 200 µs before it sleeps decoded float32 SmolLM2-135M 8–25% faster than
// one that slept after 20 µs (four interleaved rounds), with prefill and the
// quantized cache at depth unchanged; at 2 ms the latter lost 5–15%.
#define SPIN_NS 20000
#define YIELD_NS 200000

#define MAX_THREADS 63

typedef struct {
	int gemv, ta, tb, m, n, k, lda, ldb, ldc;
	const float *a, *b;
	float beta;
	float *c;
} call;

void inloop_sgemm(int ta, int tb, int m, int n, int k, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc) {
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
	            m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void inloop_sgemv(int trans, int m, int n, const float *a, int lda, const float *x, float beta, float *y) {
	cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, m, n, 1.0f, a, lda, x, 1, beta, y, 1);
}

static void run_call(const call *p) {
	if (p->gemv)
		inloop_sgemv(p->ta, p->m, p->n, p->a, p->lda, p->b, p->beta, p->c);
	else
		inloop_sgemm(p->ta, p->tb, p->m, p->n, p->k, p->a, p->lda, p->b, p->ldb, p->beta, p->c, p->ldc);
}

enum { IDLE, RESERVED, ASSIGNED };

typedef struct {
	atomic_int state;
	call part;
	atomic_int *left; // the caller's count of parts not yet done
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char pad[64];
} worker;

static worker workers[MAX_THREADS];
static int nworkers;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int wanted;

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static long long now_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *loop(void *arg) {
	worker *w = arg;
	for (;;) {
		long long start = now_ns();
		int yielding = 0;
		for (int i = 1; atomic_load_explicit(&w->state, memory_order_acquire) != ASSIGNED; i++) {
			if (!yielding) {
				relax();
				yielding = i % 256 == 0 && now_ns() - start > SPIN_NS;
				continue;
			}
			sched_yield();
			if (i % 16 == 0 && now_ns() - start > YIELD_NS) {
				pthread_mutex_lock(&w->mu);
				while (atomic_load_explicit(&w->state, memory_order_acquire) != ASSIGNED)
					pthread_cond_wait(&w->cv, &w->mu);
				pthread_mutex_unlock(&w->mu);
				break;
			}
		}
		call part = w->part;
		atomic_int *left = w->left;
		run_call(&part);
		// Idle before the caller can see its part done, so the caller's next product
		// finds this thread free.
		atomic_store_explicit(&w->state, IDLE, memory_order_release);
		atomic_fetch_sub_explicit(left, 1, memory_order_acq_rel);
	}
	return 0;
}

static void start(void) {
	int n = wanted < MAX_THREADS ? wanted : MAX_THREADS;
	for (int i = 0; i < n; i++) {
		worker *w = &workers[i];
		atomic_init(&w->state, IDLE);
		pthread_mutex_init(&w->mu, 0);
		pthread_cond_init(&w->cv, 0);
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &attr, loop, w) != 0) {
			pthread_attr_destroy(&attr);
			break;
		}
		pthread_attr_destroy(&attr);
		nworkers = i + 1;
	}
}

void inloop_pool_start(int threads) {
	wanted = threads;
	pthread_once(&once, start);
}

// give hands part to an idle worker and reports whether one took it.
static int give(const call *part, atomic_int *left, int *next) {
	for (; *next < nworkers; (*next)++) {
		worker *w = &workers[*next];
		int idle = IDLE;
		if (atomic_load_explicit(&w->state, memory_order_relaxed) != IDLE ||
		    !atomic_compare_exchange_strong(&w->state, &idle, RESERVED))
			continue;
		w->part = *part;
		w->left = left;
		pthread_mutex_lock(&w->mu);
		atomic_store_explicit(&w->state, ASSIGNED, memory_order_release);
		pthread_cond_signal(&w->cv);
		pthread_mutex_unlock(&w->mu);
		(*next)++;
		return 1;
	}
	return 0;
}

// run_parts runs parts[0] here and the others on idle workers (or here, when none is
// idle: a product started while another is using the pool), and waits for them.
static void run_parts(const call *parts, int n) {
	atomic_int left;
	atomic_init(&left, 0);
	int next = 0;
	for (int i = 1; i < n; i++) {
		atomic_fetch_add_explicit(&left, 1, memory_order_relaxed);
		if (!give(&parts[i], &left, &next)) {
			atomic_fetch_sub_explicit(&left, 1, memory_order_relaxed);
			run_call(&parts[i]);
		}
	}
	run_call(&parts[0]);
	long long start = 0;
	for (int i = 1; atomic_load_explicit(&left, memory_order_acquire) != 0; i++) {
		relax();
		if (i % 256 == 0) {
			if (!start)
				start = now_ns();
			else if (now_ns() - start > SPIN_NS)
				sched_yield();
		}
	}
}

// bounds gives block i of parts cutting [0, n) in multiples of align.
static void bounds(int n, int align, int parts, int i, int *lo, int *hi) {
	long long l = ((long long)n * i / parts + align - 1) / align * align;
	long long h = i == parts - 1 ? n : ((long long)n * (i + 1) / parts + align - 1) / align * align;
	*lo = l < n ? (int)l : n;
	*hi = h < n ? (int)h : n;
}

void inloop_sgemm_par(int ta, int tb, int m, int n, int k, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc, int parts, int cols) {
	call p[MAX_THREADS + 1];
	if (parts > MAX_THREADS + 1) parts = MAX_THREADS + 1;
	int np = 0;
	for (int i = 0; i < parts; i++) {
		int lo, hi;
		call q = {0, ta, tb, m, n, k, lda, ldb, ldc, a, b, beta, c};
		if (cols) { // columns lo..hi of op(B) and C
			bounds(n, 16, parts, i, &lo, &hi);
			q.n = hi - lo;
			q.b = b + (tb ? (long)lo * ldb : lo);
			q.c = c + lo;
		} else { // rows lo..hi of op(A) and C
			bounds(m, 4, parts, i, &lo, &hi);
			q.m = hi - lo;
			q.a = a + (ta ? lo : (long)lo * lda);
			q.c = c + (long)lo * ldc;
		}
		if (hi > lo) p[np++] = q;
	}
	run_parts(p, np);
}

void inloop_sgemv_par(int trans, int m, int n, const float *a, int lda, const float *x,
                      float beta, float *y, int parts) {
	call p[MAX_THREADS + 1];
	if (parts > MAX_THREADS + 1) parts = MAX_THREADS + 1;
	int np = 0;
	for (int i = 0; i < parts; i++) {
		int lo, hi;
		call q = {1, trans, 0, m, n, 0, lda, 0, 0, a, x, beta, y};
		if (!trans) { // y (m) = A·x: rows lo..hi of A
			bounds(m, 4, parts, i, &lo, &hi);
			q.m = hi - lo;
			q.a = a + (long)lo * lda;
		} else { // y (n) = Aᵀ·x: columns lo..hi of A
			bounds(n, 16, parts, i, &lo, &hi);
			q.n = hi - lo;
			q.a = a + lo;
		}
		q.c = y + lo;
		if (hi > lo) p[np++] = q;
	}
	run_parts(p, np);
}

/* threads.c - persistent thread pool (see threads.h).
 *
 * Protocol. The dispatcher writes fn/ctx/nth, then bumps `gen` (seq_cst). Every
 * worker waits for gen to change, runs its part when ith < nth, and bumps `done`.
 * The dispatcher runs part 0 and spins until done == n-1, so a generation's
 * parameters are never rewritten while a worker may still read them.
 * Sleeping: a worker that spun for SPIN_S seconds increments n_sleep under the
 * mutex, re-checks gen, and waits on the condition variable; the dispatcher bumps
 * gen before it reads n_sleep, so either the worker sees the new gen or the
 * dispatcher sees the sleeper and broadcasts (no lost wake-up). */
#include "threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "util.h"

/* How long an idle worker spins before sleeping. Long enough to bridge the gap
 * between ops of a decode step (the caller runs small ops alone), short enough
 * that an idle server does not burn cores. */
#define SPIN_S 0.002
/* After this many pause-spins (about 0.5-2 ms) a waiting thread also yields
 * every 256 spins: on a machine shared with other processes, the thread we wait
 * for may have been preempted, and burning a core does not bring it back. */
#define SPIN_YIELD_AFTER 16384u

typedef struct worker {
    cpu_pool *p;
    int ith;
} worker;

struct cpu_pool {
    int n;                       /* threads including the caller */
    pthread_t *th;               /* [n-1] */
    worker *w;                   /* [n-1] */
    cpu_task_fn fn;              /* current task (valid while gen is current) */
    void *ctx;
    int nth;
    _Atomic uint32_t gen;
    _Atomic int done;
    _Atomic int n_sleep;
    _Atomic int stop;
    int oversub;                 /* more threads than cores: yield while spinning */
    _Atomic int bar_count;       /* in-task barrier */
    _Atomic uint32_t bar_phase;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int cpu_count_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static uint32_t wait_gen(cpu_pool *p, uint32_t seen) {
    uint32_t g;
    double t0 = 0.0;
    for (unsigned spins = 0;; spins++) {
        g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
        if ((spins & 1023) == 1023) {
            double t = mf_time_s();
            if (t0 == 0.0) t0 = t;
            else if (t - t0 > SPIN_S) break;
            if (p->oversub) sched_yield();  /* let the others run */
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleep, 1);
    while ((g = atomic_load(&p->gen)) == seen) pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->n_sleep, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    cpu_pool *p = w->p;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_gen(p, seen);
        if (atomic_load(&p->stop)) break;
        if (w->ith < p->nth) p->fn(p->ctx, w->ith, p->nth);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
    return NULL;
}

cpu_pool *cpu_pool_new(int n_threads) {
    cpu_pool *p = mf_xcalloc(1, sizeof *p);
    if (n_threads <= 0) n_threads = cpu_count_cores();
    p->n = n_threads;
    p->oversub = n_threads > cpu_count_cores();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (p->n > 1) {
        p->th = mf_xcalloc((size_t)p->n - 1, sizeof *p->th);
        p->w = mf_xcalloc((size_t)p->n - 1, sizeof *p->w);
        for (int i = 1; i < p->n; i++) {
            p->w[i - 1] = (worker){ p, i };
            if (pthread_create(&p->th[i - 1], NULL, worker_main, &p->w[i - 1]) != 0) {
                mf_log("cpu: cannot create thread %d of %d; running with %d", i + 1, p->n, i);
                p->n = i;
                break;
            }
        }
    }
    return p;
}

void cpu_pool_free(cpu_pool *p) {
    if (!p) return;
    if (p->n > 1) {
        atomic_store(&p->stop, 1);
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add(&p->gen, 1);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->n; i++) pthread_join(p->th[i - 1], NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->th);
    free(p->w);
    free(p);
}

int cpu_pool_size(const cpu_pool *p) { return p ? p->n : 1; }

void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *ctx, int nth_max) {
    int nth = p ? p->n : 1;
    if (nth_max > 0 && nth_max < nth) nth = nth_max;
    if (nth == 1 || !p) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->nth = nth;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1);                 /* seq_cst: publishes the task */
    if (atomic_load(&p->n_sleep) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, nth);
    const int want = p->n - 1;
    for (unsigned spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) != want; spins++) {
        cpu_relax();
        if ((spins & 255) == 255 && (p->oversub || spins > SPIN_YIELD_AFTER)) sched_yield();
    }
}

void cpu_pool_barrier(cpu_pool *p, int nth) {
    if (!p || nth <= 1) return;
    const uint32_t phase = atomic_load(&p->bar_phase);
    if (atomic_fetch_add(&p->bar_count, 1) == nth - 1) {
        atomic_store(&p->bar_count, 0);
        atomic_fetch_add(&p->bar_phase, 1);
        return;
    }
    for (unsigned spins = 0; atomic_load_explicit(&p->bar_phase, memory_order_acquire) == phase; spins++) {
        cpu_relax();
        if ((spins & 255) == 255 && (p->oversub || spins > SPIN_YIELD_AFTER)) sched_yield();
    }
}

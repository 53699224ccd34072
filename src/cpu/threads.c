/* threads.c - persistent thread pool (see threads.h).
 *
 * Protocol: parts are claimed, not assigned. One atomic word holds the task's
 * generation, its part count and how many parts have been claimed:
 *
 *     state = gen (40 bits) | nth (12 bits) | claimed (12 bits)
 *
 * The dispatcher writes fn/ctx, then publishes state = {gen+1, nth, 1} (part 0 is
 * its own). Any thread claims the next part by a compare-and-swap of claimed ->
 * claimed+1 on the exact word it read, runs fn(ctx, part, nth), and bumps `done`.
 * When the dispatcher has finished part 0 it claims whatever is left itself, then
 * waits only for the parts other threads claimed. So a worker that the kernel has
 * preempted (another process is running on its core) or that is asleep never holds
 * up a step: it simply takes no part of it. Without this, every one of the few
 * hundred dispatches of a decode step waited for the late worker's next time slice
 * (2 threads beside one busy process on 2 cores: 20-50 tok/s against 150 with one
 * thread; bench/RESULTS.md, issue 32).
 *
 * Why fn/ctx can be plain fields: a worker reads them only after a successful claim
 * of the current generation, and the dispatcher rewrites them only after every
 * claimed part has bumped `done` and no part is left to claim (a claim of an old
 * generation fails: its CAS compares the whole word, generation included).
 *
 * Barriers inside a task need all nth parts running at once; the dispatcher cannot
 * finish part 0 before every other part has reached the barrier, so by then every
 * part has been claimed by a distinct running thread and nothing is run serially.
 * A task that calls cpu_pool_barrier must call it from every part. Such a task also
 * hides a late worker: part 0 waits for it inside the barrier, before the late check
 * below starts its clock, so solo mode never begins (the backend's matmuls have no
 * barrier for that reason: backend_cpu.c, mm_quant_task).
 *
 * Sleeping: a worker that saw no new generation for SPIN_S seconds increments
 * n_sleep under the mutex, re-checks the state, and waits on the condition
 * variable; the dispatcher publishes the state (seq_cst) before it reads n_sleep,
 * so either the worker sees the new generation or the dispatcher sees the sleeper
 * and broadcasts (no lost wake-up). A sleeping worker costs the dispatcher only the
 * broadcast: the step does not wait for it to wake. */
#include "threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "util.h"

/* How long an idle worker spins before sleeping. Long enough to bridge the gap
 * between the ops of a decode step (the caller runs small ops alone, and samples
 * between tokens), short enough that an idle server does not burn its cores. A
 * pool with more threads than cores does not spin at all: a spinning worker there
 * takes the core from a thread that has work. */
#define SPIN_S 0.001
/* After this many pause-spins (about 0.5-2 ms) a waiting thread also yields
 * every 256 spins: on a machine shared with other processes, the thread we wait
 * for may have been preempted, and burning a core does not bring it back. */
#define SPIN_YIELD_AFTER 16384u
/* Solo mode. When the dispatcher waited longer than LATE_S for a worker's part, the
 * worker was not running (a wait between parts of one op is microseconds; a thread
 * without a core waits for the kernel's next time slice, milliseconds): the cores
 * are shared with another process. The pool then runs every task on the caller
 * alone for a while (below) before it tries its workers again. Two threads beside one busy
 * process on 2 cores get 4/3 of a core between them and lose a slice at every
 * preemption; one thread gets a whole core (bench/RESULTS.md, issue 32). */
#define LATE_S 0.0005
/* The solo period: SOLO_MIN_S after an isolated late wait (an unloaded machine has
 * some: a kernel thread, a timer), doubled up to SOLO_MAX_S each time the workers are
 * late again within SOLO_REARM_S of the last period's end (a process that keeps the
 * core busy), so a shared machine runs solo nearly all the time, and a quiet one
 * almost never. */
#define SOLO_MIN_S 0.005
#define SOLO_MAX_S 0.2
#define SOLO_REARM_S 0.02

#define ST_CLAIM_BITS 12
#define ST_NTH_BITS 12
#define ST_GEN_SHIFT (ST_CLAIM_BITS + ST_NTH_BITS)
#define ST_MASK12 ((1u << 12) - 1)
#define ST_GEN(s) ((s) >> ST_GEN_SHIFT)
#define ST_NTH(s) ((int)(((s) >> ST_CLAIM_BITS) & ST_MASK12))
#define ST_CLAIMED(s) ((int)((s) & ST_MASK12))
/* The most threads a pool holds: parts are counted in 12 bits. */
#define POOL_MAX_THREADS 4095

typedef struct worker {
    cpu_pool *p;
    int ith;
} worker;

struct cpu_pool {
    int n;                       /* threads including the caller */
    pthread_t *th;               /* [n-1] */
    worker *w;                   /* [n-1] */
    cpu_task_fn fn;              /* current task (valid to a thread holding a claimed part) */
    void *ctx;
    uint64_t gen;                /* the dispatcher's generation counter (its thread only) */
    _Atomic uint64_t state;      /* gen | nth | claimed, see above */
    _Atomic int done;            /* parts finished by workers in this generation */
    _Atomic int n_sleep;
    _Atomic int stop;
    int oversub;                 /* more threads than cores: no idle spinning, yield while waiting */
    double solo_until;           /* mf_time_s() before which tasks run on the caller alone (0: none) */
    double solo_end;             /* when the last solo period ended */
    double solo_len;             /* its length */
    int64_t n_solo_periods;      /* how often solo mode began (cpu_pool_solo_periods) */
    cpu_pool_stats st;           /* tasks and waits (cpu_pool_get_stats) */
    int solo_off;                /* cpu_pool_set_solo(p, 0): never enter solo mode */
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
    /* The cores this process may run on (taskset, cgroup cpusets), not the machine's. */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Claims the next part of generation `gen`: its index, or -1 when every part is
 * claimed or the pool has moved on to another generation. */
static int claim_part(cpu_pool *p, uint64_t gen) {
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    while (ST_GEN(s) == gen && ST_CLAIMED(s) < ST_NTH(s)) {
        if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return ST_CLAIMED(s);
    }
    return -1;
}

/* Waits for a generation other than `seen`; returns the state word that has it. */
static uint64_t wait_gen(cpu_pool *p, uint64_t seen) {
    uint64_t s;
    double t0 = 0.0;
    if (!p->oversub) {
        for (unsigned spins = 0;; spins++) {
            s = atomic_load_explicit(&p->state, memory_order_acquire);
            if (ST_GEN(s) != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) return s;
            cpu_relax();
            if ((spins & 1023) == 1023) {
                double t = mf_time_s();
                if (t0 == 0.0) t0 = t;
                else if (t - t0 > SPIN_S) break;
            }
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleep, 1);
    while (ST_GEN(s = atomic_load(&p->state)) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->n_sleep, 1);
    pthread_mutex_unlock(&p->mu);
    return s;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    cpu_pool *p = w->p;
    uint64_t seen = 0;
    for (;;) {
        const uint64_t s = wait_gen(p, seen);
        if (atomic_load(&p->stop)) break;
        seen = ST_GEN(s);
        int part;
        while ((part = claim_part(p, seen)) >= 0) {
            p->fn(p->ctx, part, ST_NTH(s));
            atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        }
    }
    return NULL;
}

cpu_pool *cpu_pool_new(int n_threads) {
    cpu_pool *p = mf_xcalloc(1, sizeof *p);
    if (n_threads <= 0) n_threads = cpu_count_cores();
    if (n_threads > POOL_MAX_THREADS) n_threads = POOL_MAX_THREADS;
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
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
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
    if (p->solo_until > 0.0) {
        if (mf_time_s() < p->solo_until) {
            p->st.solo_tasks++;
            fn(ctx, 0, 1);
            return;
        }
        p->solo_until = 0.0;
    }
    p->st.parallel_tasks++;
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const uint64_t gen = ++p->gen & ((UINT64_C(1) << (64 - ST_GEN_SHIFT)) - 1);
    /* seq_cst: publishes fn/ctx/done and orders the store before the n_sleep read */
    atomic_store(&p->state, gen << ST_GEN_SHIFT | (uint64_t)nth << ST_CLAIM_BITS | 1u);
    if (atomic_load(&p->n_sleep) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    const double t_start = mf_time_s();
    fn(ctx, 0, nth);
    int mine = 1, part;
    while ((part = claim_part(p, gen)) >= 0) {
        fn(ctx, part, nth);
        mine++;
    }
    const int want = nth - mine;
    const int waits = atomic_load_explicit(&p->done, memory_order_acquire) != want;
    const double t_own = waits ? mf_time_s() : 0.0;
    /* Late: a wait longer than LATE_S beyond twice what our own parts took, so that a
     * long but running part (a big op split unevenly) is not taken for a missing core. */
    double t_wait = 0.0, bound = 0.0;
    int late = 0;
    for (unsigned spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) != want; spins++) {
        cpu_relax();
        if ((spins & 255) == 255 && (p->oversub || spins > SPIN_YIELD_AFTER)) sched_yield();
        if ((spins & 1023) == 1023 && !late) { /* the clock only once the wait is already long */
            const double t = mf_time_s();
            if (t_wait == 0.0) {
                t_wait = t;
                bound = LATE_S + 2.0 * (t - t_start);
            } else if (t - t_wait > bound) {
                late = 1;
            }
        }
    }
    if (waits) {
        p->st.waits++;
        p->st.wait_s += mf_time_s() - t_own;
        p->st.late += late;
    }
    if (late && !p->solo_off) {
        const double t = mf_time_s();
        const int again = p->solo_end > 0.0 && t - p->solo_end < SOLO_REARM_S;
        p->solo_len = again ? MF_MIN(2.0 * p->solo_len, SOLO_MAX_S) : SOLO_MIN_S;
        p->solo_until = p->solo_end = t + p->solo_len;
        p->n_solo_periods++;
    }
}

int64_t cpu_pool_solo_periods(const cpu_pool *p) { return p ? p->n_solo_periods : 0; }

cpu_pool_stats cpu_pool_get_stats(const cpu_pool *p) {
    cpu_pool_stats z = {0};
    if (!p) return z;
    z = p->st;
    z.solo_periods = p->n_solo_periods;
    return z;
}

void cpu_pool_set_solo(cpu_pool *p, int allow) {
    if (!p) return;
    p->solo_off = !allow;
    if (!allow) p->solo_until = 0.0;
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

/* threads.h - a small persistent thread pool for the CPU backend.
 *
 * One pool per backend. cpu_pool_run(p, fn, ctx) runs fn(ctx, ith, nth) for
 * ith = 0..nth-1 and returns when every part has finished; the caller runs part 0
 * itself and any part no worker has claimed when it is done with part 0, workers
 * claim the rest. Workers spin for a short while after a task (a decode step
 * dispatches a few hundred small tasks per token, and waking a sleeping thread costs
 * tens of microseconds), then sleep on a condition variable. A part can run on any
 * thread, so per-thread scratch must be indexed by the part (ith), as it is.
 *
 * Work is split by the task itself (cpu_split below): by output rows for matmuls,
 * by (token, head) for attention, by elements for the element-wise ops. */
#ifndef MINFER_CPU_THREADS_H
#define MINFER_CPU_THREADS_H

#include <stdint.h>

typedef void (*cpu_task_fn)(void *ctx, int ith, int nth);
typedef struct cpu_pool cpu_pool;

/* n_threads <= 0 means one per online core. Never returns NULL: a pool whose
 * threads cannot be created runs everything on the caller (nth = 1). */
cpu_pool *cpu_pool_new(int n_threads);
void cpu_pool_free(cpu_pool *p);
int cpu_pool_size(const cpu_pool *p);
/* Runs fn on all threads of the pool (or on nth_max of them when 0 < nth_max <
 * size, for tasks too small to feed every thread), or as one part (nth = 1) on the
 * caller while the pool is in solo mode (threads.c): a task must be correct for any
 * nth it is given. Not reentrant. */
void cpu_pool_run(cpu_pool *p, cpu_task_fn fn, void *ctx, int nth_max);
/* How many times the pool switched to running tasks on the caller alone because a
 * worker was late (the cores are shared; see threads.c). */
int64_t cpu_pool_solo_periods(const cpu_pool *p);
/* What the pool did (MINFER_CPU_PROFILE prints it): tasks split over the threads and
 * tasks run on the caller alone in solo mode; of the split ones, how many left the
 * caller waiting for a worker's part after its own, for how long in all, and how many
 * of those waits counted as late (a worker without a core). */
typedef struct cpu_pool_stats {
    int64_t parallel_tasks, solo_tasks, waits, late, solo_periods;
    double wait_s;
} cpu_pool_stats;
cpu_pool_stats cpu_pool_get_stats(const cpu_pool *p);
/* allow = 0: the pool never enters solo mode, so every task runs on min(size,
 * nth_max) parts however late the workers are (tests of the claim and barrier
 * protocol; a benchmark of the threads alone). allow = 1 (the default) restores it.
 * Not to be called while a task runs. */
void cpu_pool_set_solo(cpu_pool *p, int allow);
/* Inside a task: waits until all nth parts have reached the barrier. */
void cpu_pool_barrier(cpu_pool *p, int nth);
/* Online cores (at least 1). */
int cpu_count_cores(void);

/* [*b, *e): part ith of nth of the range [0, n), boundaries multiples of `align`
 * (except the end), parts balanced to within one alignment unit. */
static inline void cpu_split(int64_t n, int64_t align, int ith, int nth, int64_t *b, int64_t *e) {
    const int64_t units = (n + align - 1) / align;
    const int64_t u0 = units * ith / nth, u1 = units * (ith + 1) / nth;
    *b = u0 * align < n ? u0 * align : n;
    *e = u1 * align < n ? u1 * align : n;
}

#endif

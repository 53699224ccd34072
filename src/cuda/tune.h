/* tune.h - the CUDA backend's tuning numbers, one row per architecture class.
 *
 * These are constants, not switches: ring depths, rows requested before a wait,
 * block widths. Each value is the one that measured fastest on the machine named in
 * its comment (tune.c; the runs are in bench/RESULTS.md); a new GPU gets a row of its
 * own after its own measurements. The kernel lab (bench/) varies them. Plain C. */
#ifndef MINFER_CUDA_TUNE_H
#define MINFER_CUDA_TUNE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cu_tune {
    const char *name;       /* the row's architecture class, for the notice */
    long long xst_bytes;    /* GEMV launches of at least this many weight bytes take the TMA ring; -1 never */
    int xst_depth;          /* ring rows in flight per warp (xst, xstm, xst2) */
    int xst_pre;            /* of those, the rows each ring asks for before its wait */
    int xst_pre_attn;       /* the same for the GEMV right after the one-token attention */
    int xst_pre_swiglu;     /* the same for the GEMV right after the gate+up launch (all: 16) */
    int xsg_depth;          /* the gate+up launch's ring rows per warp (per-warp form) */
    int xsg_pre;            /* its rows asked for before its wait, per warp */
    int norm_threads;       /* the one-pass RMSNorm's block width at most */
    int norm_split;         /* its blocks per row (1, 2, 4, 8) */
    int swiglu_threads;     /* the q8 SwiGLU's block width */
    int attn_warps;         /* the one-token attention's warps per block (8 or 4) */
    int attn_trigger;       /* where it lets the GEMV after it launch: 0 start, 1 after its wait,
                               2 after q/k/v, 3 after its tile loop */
    int attn_heads;         /* its query heads a block at head dims 128 and 256 (1 or 2; else the kv head's whole group) */
    int gemv_per_sm;        /* cap on the persistent GEMVs' blocks per SM (0: what fits) */
} cu_tune;

/* The row for code of __CUDA_ARCH__ code_arch (the SASS the device runs). */
const cu_tune *cu_tune_for(int code_arch);

#ifdef __cplusplus
}
#endif
#endif

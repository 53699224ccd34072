/* tune.c - the tuning rows (tune.h). Why each value, with the measurement:
 *
 * xst_bytes 8 MB: the 7B's wo (9.4 MB) on xst. With the decode attention triggering
 *   after its wait that measured faster: tg128 633.90 / 634.65 / 634.63 vs 627.37 /
 *   627.03 / 629.87 with 16 MB (7B q4_k_m, H200, 2026-11-30, bench/RESULTS.md).
 * xst_depth 2: replaced a 96 KB budget (5 rows of a 4096-wide q4_K row): tg128 494.2
 *   vs 468.2 tok/s in one run, the lab's qkv 10.6 vs 13.1 us (H200, 2026-11-29).
 * xst_pre 1, xst_pre_attn 1: XST_PRE=2 740.5-743.0 and 0 724.3-726.2 against the
 *   default's 740.7-743.0 (H200, 2026-12-02 calls 5 and 7).
 * xst_pre_swiglu 16 (all): the gate+up launch's last third runs on ~80 SMs, so the next
 *   GEMV's rows can come in meanwhile: 698.6-701.0 vs 691.1-695.4 at 1 row.
 * xsg_pre 2: 734.5-741.7 vs 722.2-727.9 with 1 row and 726.3-730.2 with 3 (2026-12-02).
 * xsg_depth 3: 110 KB for a 4096-wide q4_K row, one block per SM (mmv_xsg.cuh).
 * norm 1024 threads, 4 blocks a row; SwiGLU 256 threads: the decode-kernel sweeps of
 *   2026-11-30/12-01 (NORM_SPLIT, NORM_THREADS, SWIGLU_THREADS rows of RESULTS.md).
 * attn_warps 8, attn_trigger 1: 8 warps read a whole 128-position chunk before the
 *   kernel ahead ends; triggering after the wait measured 729.1-731.1 at 3 against
 *   733.6-736.3 (2026-12-02 call 7), 601.9 vs 605.9 at 0 (2026-11-30).
 * attn_heads 1: a block a query head, where the kv head's group's one block ran its heads'
 *   tile loops one after another. Head dim 256 (gemma3, 4 query heads a kv head):
 *   Gemma-3-270M tg128 1,703 / 1,715 vs 1,451 / 1,455 with the group (4), 1,644 / 1,655
 *   with 2; after a 4096-token prompt 1,420 vs 1,043. Head dim 128 (the 8B synth, 4 a kv
 *   head): tg128 515.4 / 513.8 vs 490.5 / 488.9; after 4096 tokens 391.4 / 391.4 vs
 *   380.3 / 379.1 (H100, 2026-12-05, the same tokens; bench/RESULTS.md).
 * Code below sm_90 has no TMA ring (the kernels need sm_90a's bulk copies). */
#include "cuda/tune.h"

static const cu_tune TUNE_SM90 = {
    .name = "sm90", .xst_bytes = 8ll << 20, .xst_depth = 2, .xst_pre = 1, .xst_pre_attn = 1, .xst_pre_swiglu = 16,
    .xsg_depth = 3, .xsg_pre = 2, .norm_threads = 1024, .norm_split = 4, .swiglu_threads = 256,
    .attn_warps = 8, .attn_trigger = 1, .attn_heads = 1, .gemv_per_sm = 0,
};
/* sm_80 and sm_120 code: the same values where they apply, measured on none of those
 * parts (TODO: a row of their own once one is lent) */
static const cu_tune TUNE_OTHER = {
    .name = "generic", .xst_bytes = -1, .xst_depth = 2, .xst_pre = 1, .xst_pre_attn = 1, .xst_pre_swiglu = 16,
    .xsg_depth = 3, .xsg_pre = 2, .norm_threads = 1024, .norm_split = 4, .swiglu_threads = 256,
    .attn_warps = 8, .attn_trigger = 1, .attn_heads = 1, .gemv_per_sm = 0,
};

const cu_tune *cu_tune_for(int code_arch) {
    return code_arch >= 900 && code_arch < 1000 ? &TUNE_SM90 : &TUNE_OTHER;
}

/* mmv.cuh - decode GEMVs: out[c][r] = sum_k W[r][k] * x[c][k] for
 * c < ncols <= 8, several matrices of one type and width per launch.
 *
 * A warp computes a row: the row is cut into *units* (the bytes one lane decodes at
 * once: 16-48 bytes of weights read with 16-byte loads); lane l takes units l,
 * l+32, ... so a warp streams the row front to back with coalesced loads and reads
 * every weight byte once. Activations come pre-quantized to q8 (common.cuh); the
 * dots are integer dp4a, scaled once per sub-block. Weights never depend on the
 * previous kernel, so every schedule requests its first weights before pdl_wait().
 *
 * The schedules (the lab, bench/cuda_gemv.cu, runs them side by side; figures in bench/RESULTS.md):
 *   v1   one row per warp, one wave of short-lived blocks; 2..8 columns where cols does not fit
 *   cols 2..8 columns from activations staged in shared memory, two rows a warp
 *   pp   persistent grid, two register sets of weights in turn (wide rows)
 *   xs   persistent grid, each lane's activations held in registers for every row
 *        it visits, weights double-buffered in registers
 *   xst  xs with the weights streamed through a per-warp TMA ring in shared memory
 *   xs2  xs with each row split between two warps (rows too wide for xs)
 *   xst2 xs2 fed by a TMA ring per pair; xstm xst over q/k of one type and v of another
 *   xsg  xst over gate and up with the SwiGLU and its q8 in the store
 *   xsgs xsg with one ring per block whose rows any free warp takes (the default
 *        where that ring fits)
 * The x-stationary kernels keep each row's sum in lane (row index % 32) and store 32
 * rows at once (mmv_keep): a lane's own instructions cost its whole warp issue slots,
 * and these kernels are issue-bound as well as memory-bound (bench/RESULTS.md); so xst
 * and xsg take two rows a loop step by default (path ring-pairs, warp_sum2).
 * Variant 3, the default, is xs/xst by launch size, xs2 (or pp) for rows xs cannot
 * hold, v1 for several columns (mmv_q8_launch below).
 *
 * This header is the map and the dispatch policy (mmv_prepare_unit, mmv_q8_launch); the
 * pieces, one concern each:
 *   mmv_unit.cuh   the unit interface, dp4a, the weight loaders ld_g / ld_s
 *   mmv_q32.cuh, mmv_k45.cuh, mmv_q6k.cuh   the units, one per format family
 *   mmv_core.cuh   rows of a stacked launch, the store, a lane's units, grid sizes
 *   mmv_pp.cuh     v1, pp
 *   mmv_xs.cuh     xs, xs2
 *   mmv_ring.cuh   the TMA ring (its PTX: ptx.cuh)
 *   mmv_xst.cuh    xst, xst2
 *   mmv_xstm.cuh   xstm
 *   mmv_xsg.cuh    xsg, xsgs
 *   mmv_cols.cuh   cols
 * The launchers (cu_mmv_q8 and the rest, mmv_q.cu and mmv_kquant.cu) instantiate them
 * per unit. */
#ifndef MINFER_CUDA_MMV_CUH
#define MINFER_CUDA_MMV_CUH

#include "mmv_pp.cuh"
#include "mmv_xs.cuh"
#include "mmv_xst.cuh"
#include "mmv_xstm.cuh"
#include "mmv_xsg.cuh"
#include "mmv_cols.cuh"

/* One-column rows of 129..256 units: xst2 first on sm_90+ (for launches xst would take,
 * path wide-ring), else xs2 where it fits 3 blocks per SM, else pp (mmv_q8_launch). */

/* Host-side set-up of one unit type for every schedule (occupancy lookups, shared
 * memory attributes), ahead of any graph capture. */
template <typename U>
static void mmv_prepare_unit() {
    mmv_pp_prepare<U>();
    mmv_xs_prepare<U>();
    mmv_xst_prepare<U>();
    mmv_xs2_prepare<U>();
    mmv_xst2_prepare<U>();
    mmv_cols_prepare<U>();
}

template <typename U>
static void mmv_q8_launch(cu_ctx *S, const cu_mmv_args *a, const char *name) {
    const int per_sm_cap = S->tune.gemv_per_sm;
    const int64_t xst_bytes = mmv_xst_bytes(S);
    const int64_t launch_bytes = (int64_t)mmv_total(*a) * a->stride;
    if (xst_bytes >= 0 && launch_bytes >= xst_bytes) {
        const int upl = mmv_xs_upl(a->K / U::QK * U::UPB, a->ncols);
        if (upl == 1 && mmv_xst_launch<U, 1>(S, a, name, per_sm_cap)) return;
        if (upl == 2 && mmv_xst_launch<U, 2>(S, a, name, per_sm_cap)) return;
        if (upl == 4 && mmv_xst_launch<U, 4>(S, a, name, per_sm_cap)) return;
        if (mmv_wide_ring(S)) {
            const int upl2 = mmv_xs2_upl(a->K / U::QK * U::UPB, a->ncols);
            if (upl2 == 3 && mmv_xst2_launch<U, 3>(S, a, name, per_sm_cap)) return;
            if (upl2 == 4 && mmv_xst2_launch<U, 4>(S, a, name, per_sm_cap)) return;
        }
    }
    {
        const int upl = mmv_xs_upl(a->K / U::QK * U::UPB, a->ncols);
        if (upl == 1) return mmv_xs_launch<U, 1>(S, a, name, per_sm_cap);
        if (upl == 2) return mmv_xs_launch<U, 2>(S, a, name, per_sm_cap);
        if (upl == 4) return mmv_xs_launch<U, 4>(S, a, name, per_sm_cap);
        /* xs2 only where 3 or more of its blocks fit on an SM: 11008-wide ffn_down,
         * lab of 2026-11-29, us xs2 / pp: q4_K 13.6 / 15.0 (168 registers, 3 blocks),
         * q6_K 17.4 / 14.6 (208 registers, 2 blocks) */
        {
            const int upl2 = mmv_xs2_upl(a->K / U::QK * U::UPB, a->ncols);
            if (upl2 == 3 && mmv_xs2_occupancy<U, 3>() >= 3) return mmv_xs2_launch<U, 3>(S, a, name, per_sm_cap);
            if (upl2 == 4 && mmv_xs2_occupancy<U, 4>() >= 3) return mmv_xs2_launch<U, 4>(S, a, name, per_sm_cap);
        }
    }
    /* xs/xst do not take rows of more than 128 units (the activations would not fit
     * in registers) or several columns: one column goes to pp, which measured
     * 12-18% faster than v1 on the 11008-wide ffn_down (lab, 2026-11-29), several
     * columns to v1. The notice counts the matrices that leave xs. */
    if (a->ncols == 1) {
        if (a->ncols <= 1) mmv_pp_launch<U, 1>(S, a, name);
        else if (a->ncols <= 2) mmv_pp_launch<U, 2>(S, a, name);
        else if (a->ncols <= 4) mmv_pp_launch<U, 4>(S, a, name);
        else mmv_pp_launch<U, 8>(S, a, name);
        return;
    }
    if (mmv_cols_launch<U>(S, a, name)) return;
    dim3 grid((mmv_total(*a) + MMV_WARPS - 1) / MMV_WARPS), block(MMV_WARPS * 32);
    if (a->ncols <= 1) cu_launch(S, name, kernel_mmv_q8<U, 1>, grid, block, 0, *a);
    else if (a->ncols <= 2) cu_launch(S, name, kernel_mmv_q8<U, 2>, grid, block, 0, *a);
    else if (a->ncols <= 4) cu_launch(S, name, kernel_mmv_q8<U, 4>, grid, block, 0, *a);
    else cu_launch(S, name, kernel_mmv_q8<U, 8>, grid, block, 0, *a);
}

#endif

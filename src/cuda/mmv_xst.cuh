/* mmv_xst.cuh - the x-stationary GEMVs fed by a TMA ring (sm_90+; mmv_ring.cuh):
 * xst (xs with a ring per warp: launches of cu_tune.xst_bytes or more, path tma-ring)
 * and xst2 (xs2 with a ring per pair of warps: rows of 129..256 units from that size,
 * path wide-ring), each in two loop forms, one row or two rows a step (path ring-pairs),
 * and their launchers. */
#ifndef MINFER_CUDA_MMV_XST_CUH
#define MINFER_CUDA_MMV_XST_CUH

#include "mmv_ring.cuh"

/* ---- Schedule "xst" (sm_90+; launches of cu_tune.xst_bytes or more, path tma-ring) ----
 * xs with the weights streamed through a per-warp ring of row slots in shared
 * memory, filled by the Tensor Memory Accelerator (cp.async.bulk, completion
 * counted in bytes on the slot's mbarrier), so the bytes in flight per SM are
 * bounded by shared memory instead of registers. Rows as in xs (g, g+W, ...); the
 * first `depth` rows of every warp are requested around pdl_wait() (ring_first_rows); a slot is
 * refilled as soon as its row is reduced. */
template <typename U, int UPL, bool PAIR = false>
static __global__ void __launch_bounds__(MMV_XST_WARPS * 32) kernel_mmv_xst(cu_mmv_args a, int depth) {
    pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t xst_smem[];
    /* (xst_warp_init, mmv_ring.cuh, computes the same; written out here because through it
     * this kernel, the measured default, gets 2 more registers: 91 vs 89, q4_K UPL 2) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int total = mmv_total(a);
    const int W = gridDim.x * MMV_XST_WARPS, gw = blockIdx.x * MMV_XST_WARPS + warp;
    if (gw >= total) return;
    const int n = (total - gw + W - 1) / W;
    const int64_t stride = a.stride;
    uint64_t *bar = (uint64_t *)xst_smem + warp * depth;  /* this warp's ring (mmv_ring_smem) */
    uint8_t *slot0 = xst_smem + mmv_ring_bars(MMV_XST_WARPS, depth) + (size_t)warp * depth * stride;
    /* lane l requests the warp's rows l, l + 32, ...: the first 32 rows' weights are
     * worked out once, here, ahead of the wait (lane 0 doing it row by row cost the
     * whole warp its issue slots) */
    const uint8_t *src = nullptr;
    if (lane < n) {
        int m, r;
        src = mmv_row(a, gw + lane * W, &m, &r);
    }
    if (lane == 0) mbar_init_ring(bar, depth);
    __syncwarp();
    const bool req = lane < depth && lane < n;
    ring_first_rows(a, true, req, lane, slot0 + (size_t)lane * stride, src, (uint32_t)stride, bar + lane);
    pdl_wait();
    const int nb = a.K / U::QK;
    const int nu = nb * U::UPB;
    typename U::X x[UPL];
    mmv_lane_loadx<U, UPL>(a.q, 0, nu, lane, x);
    ring_first_rows(a, false, req, lane, slot0 + (size_t)lane * stride, src, (uint32_t)stride, bar + lane);
    mmv_keep keep;
    ring_pos rp;
    const ring_units<U, UPL> ru(nb, 0, nu, lane);
    if constexpr (PAIR) {
        auto refill = [&](int f, int s) { /* row f into slot s */
            ring_refill(f, n, lane, slot0 + (size_t)s * stride, bar + s, [&](uint32_t *bytes) {
                int m, r;
                *bytes = (uint32_t)stride;
                return f < 32 ? src : mmv_row(a, gw + f * W, &m, &r);
            });
        };
        /* Two rows a step (path ring-pairs, default on): the two rows' sums in one
         * warp_sum2 (6 shuffles instead of 10, the same bits), a step's waits, refills
         * and bookkeeping shared. Slot s is refilled as soon as its dot is done, as in the
         * one-row loop, so the ring keeps its rows in flight. The 16-warp xsg's tail is
         * about half bound by instruction issue (bench/RESULTS.md, 2026-11-30), and so are
         * these loops wherever fewer SMs stream. tg128, 7B q4_k_m, H200, 2026-11-30, two
         * rounds: 706.32-707.19 tok/s with xst and xsg paired, 704.39-704.59 with xst
         * only, 695.94-697.85 with neither (the session start's binary: 701.85-703.20). */
        for (int i = 0; i < n; i += 2) {
            const float p0 = ring_first_of_pair(ru, bar, rp, slot0, stride, i, n, depth, nb, nu, lane, x, refill);
            if (i + 1 < n) {
                const float2 acc =
                    ring_second_of_pair(ru, bar, rp, slot0, stride, i, n, depth, nb, nu, lane, x, p0, refill);
                keep.put(a, i, n, gw, W, lane, acc.x);
                keep.put(a, i + 1, n, gw, W, lane, acc.y);
                rp.next(depth);
            } else {
                keep.put(a, i, n, gw, W, lane, warp_sum(p0));
            }
            __syncwarp();
        }
    } else {
        for (int i = 0; i < n; i++) {
            const int s = rp.s;
            ring_wait(bar, rp, i, n);
            const float acc = ring_dot<U, UPL>(ru, slot0 + (size_t)s * stride, nb, 0, nu, lane, x);
            if (i == 0) trace_mark(0);
            const int f = i + depth; /* the row that refills slot s */
            ring_refill(f, n, lane, slot0 + (size_t)s * stride, bar + s, [&](uint32_t *bytes) {
                int m, r;
                *bytes = (uint32_t)stride;
                return f < 32 ? src : mmv_row(a, gw + f * W, &m, &r);
            });
            keep.put(a, i, n, gw, W, lane, acc);
            rp.next(depth);
            __syncwarp();
        }
    }
    trace_end();
#endif
}

template <typename U>
static void mmv_xst_prepare() {
    mmv_ring_prepare_forms<kernel_mmv_xst<U, 1>, kernel_mmv_xst<U, 1, true>>();
    mmv_ring_prepare_forms<kernel_mmv_xst<U, 2>, kernel_mmv_xst<U, 2, true>>();
    mmv_ring_prepare_forms<kernel_mmv_xst<U, 4>, kernel_mmv_xst<U, 4, true>>();
}
/* (PAIR: two rows a step, unless that kernel spills more than the one-row one) */
template <typename U, int UPL, bool PAIR>
static int mmv_xst_launch_form(cu_ctx *S, const cu_mmv_args *a, const char *name, int per_sm_cap) {
    if constexpr (PAIR)
        if (!mmv_pair_ok<kernel_mmv_xst<U, UPL, true>, kernel_mmv_xst<U, UPL>>())
            return mmv_xst_launch_form<U, UPL, false>(S, a, name, per_sm_cap);
    const int depth =
        mmv_ring_depth(S->tune.xst_depth, MMV_XST_WARPS, a->stride, mmv_ring_limit<kernel_mmv_xst<U, UPL, PAIR>>());
    if (!depth) return 0;
    const size_t smem = mmv_ring_smem(MMV_XST_WARPS, depth, a->stride);
    const int blocks =
        mmv_persist_blocks(S, a, MMV_XST_WARPS, per_sm_cap > 0 ? per_sm_cap : MMV_XST_PERSM, 0);
    cu_launch(S, name, kernel_mmv_xst<U, UPL, PAIR>, dim3(blocks), dim3(MMV_XST_WARPS * 32), smem, *a, depth);
    if (PAIR) S->n.pairs++;
    return 1;
}
template <typename U, int UPL>
static int mmv_xst_launch(cu_ctx *S, const cu_mmv_args *a, const char *name, int per_sm_cap) {
    return S->on[CU_PATH_RING_PAIRS] ? mmv_xst_launch_form<U, UPL, true>(S, a, name, per_sm_cap)
                                : mmv_xst_launch_form<U, UPL, false>(S, a, name, per_sm_cap);
}

/* ---- Variant "xst2" (sm_90+; the default for wide rows from the xst size,
 * path wide-ring off turns it off) ----
 * xs2 fed like xst: the row split between the two warps of a pair (activations of
 * their half in registers, as xs2), the pair's rows streamed through one TMA ring of
 * whole-row slots per pair (depth cu_xst_depth), one request per row. Each warp
 * reads its half of the slot; the pair meets on its named barrier per row (xs2's
 * partial exchange), after which both halves are done with the slot and warp 0
 * refills it. Same per-lane sums and the same add as xs2, so bit-identical to it.
 * For the 11008-wide ffn_down: lab (graph us) q4_K 10.9 vs xs2's 13.6, q6_K 12.2 vs
 * pp's 14.6; tg128 on the 7B 518.7 vs 495.8 tok/s (bench/RESULTS.md, 2026-11-29).
 * By default two rows a step, the pair meeting once per two rows (PAIR, below). */
#define MMV_XST2_WARPS 4

template <typename U, int UPL, bool PAIR = false>
static __global__ void __launch_bounds__(MMV_XST2_WARPS * 32) kernel_mmv_xst2(cu_mmv_args a, int depth) {
    pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t xst2_smem[];
    __shared__ float part[MMV_XST2_WARPS / 2][2];
    __shared__ float part2[MMV_XST2_WARPS / 2][2]; /* (PAIR: the second row's) */
    const mmv_pair_warp<MMV_XST2_WARPS> pw(a);
    if (pw.idle()) return;
    const int lane = pw.lane, half = pw.half, pair = pw.pair, gp = pw.gp, P = pw.P, n = pw.rows();
    const int64_t stride = a.stride;
    uint64_t *bar = (uint64_t *)xst2_smem + pair * depth; /* this pair's ring (mmv_ring_smem) */
    uint8_t *slot0 = xst2_smem + mmv_ring_bars(MMV_XST2_WARPS / 2, depth) + (size_t)pair * depth * stride;
    const int nb = a.K / U::QK, nu = nb * U::UPB;
    const int hu = (nu + 1) / 2;
    const int u0 = half * hu, nh = half ? nu - hu : hu;
    /* (as xst: lane l of warp 0 requests the pair's rows l, l + 32, ...) */
    const uint8_t *src = nullptr;
    if (half == 0 && lane < n) {
        int m, r;
        src = mmv_row(a, gp + lane * P, &m, &r);
    }
    if (half == 0 && lane == 0) mbar_init_ring(bar, depth);
    __syncwarp();
    /* the ring's barriers are initialised before warp 1 waits on them */
    asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
    const bool req = half == 0 && lane < depth && lane < n;
    ring_first_rows(a, true, req, lane, slot0 + (size_t)lane * stride, src, (uint32_t)stride, bar + lane);
    pdl_wait();
    typename U::X x[UPL];
    mmv_lane_loadx<U, UPL>(a.q, u0, nh, lane, x);
    ring_first_rows(a, false, req, lane, slot0 + (size_t)lane * stride, src, (uint32_t)stride, bar + lane);
    mmv_keep keep;
    ring_pos rp;
    const ring_units<U, UPL> ru(nb, u0, nh, lane);
    if constexpr (PAIR) {
        auto refill = [&](int f, int s) { /* row f into slot s (warp 0 of the pair) */
            ring_refill(f, n, lane, slot0 + (size_t)s * stride, bar + s, [&](uint32_t *bytes) {
                int m, r;
                *bytes = (uint32_t)stride;
                return f < 32 ? src : mmv_row(a, gp + f * P, &m, &r);
            });
        };
        /* Two rows a step (path ring-pairs, default on): both halves' sums
         * of the two rows in one warp_sum2 and one meeting of the pair per two rows; the
         * two slots refilled after it, so the ring holds depth - 2 rows in flight while a
         * step computes (the launcher makes it one row deeper than the one-row loop's:
         * 3). Same sums as one row a step, so the same bits. Measured (tg128, 7B q4_k_m,
         * H200, 2026-12-01): +0.24%, +0.68%, +0.75% and -0.02% over one row a step on four
         * machines (e.g. 725.60 / 726.80 / 727.20 against 716.82 / 721.44 / 720.00 tok/s in
         * one call); ffn_down a layer (block timeline) q4_K 6.84 us against 7.56, q6_K 11.19
         * against 11.79. Depth 4 lost (675-685 tok/s: its rows asked for before the wait
         * after gate+up crowd that launch's end), and so did this at depth 3 held to 128
         * registers, 4 blocks per SM (712.56-718.09; 3 blocks at 145 for q6_K otherwise),
         * bench/RESULTS.md. The refill below is the one-row loop's, written out there as
         * it was measured (through this lambda its SASS changed: 118 -> 115 registers). */
        for (int i = 0; i < n; i += 2) {
            const int s0 = rp.s;
            ring_wait(bar, rp, i, n);
            const float p0 = ru.template dot<false>(slot0 + (size_t)s0 * stride, nb, u0, nh, lane, x);
            if (i == 0) trace_mark(0);
            rp.next(depth);
            const bool two = i + 1 < n;
            int s1 = s0;
            float2 acc;
            if (two) {
                s1 = rp.s;
                ring_wait(bar, rp, i + 1, n);
                const float p1 = ru.template dot<false>(slot0 + (size_t)s1 * stride, nb, u0, nh, lane, x);
                acc = warp_sum2(p0, p1);
                rp.next(depth);
            } else {
                acc = make_float2(warp_sum(p0), 0.0f);
            }
            if (half == 1 && lane == 0) {
                part[pair][(i >> 1) & 1] = acc.x;
                part2[pair][(i >> 1) & 1] = acc.y;
            }
            /* both halves have read both slots; warp 1's partials are in part, part2 */
            asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
            if (half == 0) {
                refill(i + depth, s0);
                keep.put(a, i, n, gp, P, lane, acc.x + part[pair][(i >> 1) & 1]);
                if (two) {
                    refill(i + 1 + depth, s1);
                    keep.put(a, i + 1, n, gp, P, lane, acc.y + part2[pair][(i >> 1) & 1]);
                }
            }
        }
    } else {
        for (int i = 0; i < n; i++) {
            const int s = rp.s;
            ring_wait(bar, rp, i, n);
            const float acc = ring_dot<U, UPL, false>(ru, slot0 + (size_t)s * stride, nb, u0, nh, lane, x);
            if (i == 0) trace_mark(0);
            if (half == 1 && lane == 0) part[pair][i & 1] = acc;
            /* both halves have read slot s; warp 1's partial is in part */
            asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
            if (half == 0) {
                const int f = i + depth;
                ring_refill(f, n, lane, slot0 + (size_t)s * stride, bar + s, [&](uint32_t *bytes) {
                    int m, r;
                    *bytes = (uint32_t)stride;
                    return f < 32 ? src : mmv_row(a, gp + f * P, &m, &r);
                });
                keep.put(a, i, n, gp, P, lane, acc + part[pair][i & 1]);
            }
            rp.next(depth);
        }
    }
    trace_end();
#endif
}
template <typename U>
static void mmv_xst2_prepare() {
    mmv_ring_prepare_forms<kernel_mmv_xst2<U, 3>, kernel_mmv_xst2<U, 3, true>>();
    mmv_ring_prepare_forms<kernel_mmv_xst2<U, 4>, kernel_mmv_xst2<U, 4, true>>();
}
/* 0: xst2 does not take the launch (no ring of 2 rows fits, or nothing fits an SM).
 * PAIR: two rows a step, with a ring one row deeper than the one-row loop's (cu_xst_depth
 * + 1: the rows in flight while a step computes), unless that kernel spills more than
 * the one-row one (none does, sm_90a). */
template <typename U, int UPL, bool PAIR>
static int mmv_xst2_launch_form(cu_ctx *S, const cu_mmv_args *a, const char *name, int per_sm_cap) {
    if constexpr (PAIR)
        if (!mmv_pair_ok<kernel_mmv_xst2<U, UPL, true>, kernel_mmv_xst2<U, UPL>>())
            return mmv_xst2_launch_form<U, UPL, false>(S, a, name, per_sm_cap);
    const int depth = mmv_ring_depth(S->tune.xst_depth + (PAIR ? 1 : 0), MMV_XST2_WARPS / 2, a->stride,
                                     mmv_ring_limit<kernel_mmv_xst2<U, UPL, PAIR>>());
    if (!depth) return 0;
    const size_t smem = mmv_ring_smem(MMV_XST2_WARPS / 2, depth, a->stride);
    const int per_sm = mmv_ring_per_sm<kernel_mmv_xst2<U, UPL, PAIR>>(MMV_XST2_WARPS * 32, smem);
    if (!per_sm) return 0;
    const int blocks = mmv_persist_blocks(S, a, MMV_XST2_WARPS / 2, per_sm, per_sm_cap);
    cu_launch(S, name, kernel_mmv_xst2<U, UPL, PAIR>, dim3(blocks), dim3(MMV_XST2_WARPS * 32), smem, *a, depth);
    S->n.xst2++;
    if (PAIR) S->n.pairs++;
    return 1;
}
template <typename U, int UPL>
static int mmv_xst2_launch(cu_ctx *S, const cu_mmv_args *a, const char *name, int per_sm_cap) {
    return S->on[CU_PATH_RING_PAIRS] ? mmv_xst2_launch_form<U, UPL, true>(S, a, name, per_sm_cap)
                                : mmv_xst2_launch_form<U, UPL, false>(S, a, name, per_sm_cap);
}

#endif

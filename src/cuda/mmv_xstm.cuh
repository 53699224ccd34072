/* mmv_xstm.cuh - xstm (sm_90+): xst over a stacked q/k/v launch whose last matrix has
 * another unit type of the same 256-value super-block (q4_K or q5_K with q6_K), in one
 * launch instead of one per type, the second type's activations staged in shared memory
 * (path xstm-staged); the ring is mmv_ring.cuh's. */
#ifndef MINFER_CUDA_MMV_XSTM_CUH
#define MINFER_CUDA_MMV_XSTM_CUH

#include "mmv_ring.cuh"
#include "mmv_xs.cuh" /* mmv_xs_upl: the rows xstm takes are xs's */

/* ---- Variant "xstm" (sm_90+, the default where xst takes the launch's size;
 * path qkv-mixed off turns it off: tg128, 7B q4_k_m, H200, 2026-11-29, 547.02
 * with it vs 541.72 without, bench/RESULTS.md) ----
 * xst for a stacked launch whose last matrix has another block type of the same
 * 256-value super-block (q4_K or q5_K with q6_K: llama.cpp's q4_k_m/q5_k_m give attn_v
 * q6_K in about half the layers, so q, k and v are two launches there). The ring's
 * slots take the longer row; each warp's rows ascend, so it meets the second type at
 * most once and loads that type's activation layout then (one more L2 round trip for
 * the warps that cross). Per row the same sums as xst of its type. */
/* where xstm's staged activations start in its dynamic shared memory: after the ring */
static __host__ __device__ __forceinline__ size_t mmv_xstm_stage_off(int depth, int64_t smax) {
    return (mmv_ring_smem(MMV_XST_WARPS, depth, smax) + 127) & ~(size_t)127;
}
/* Row g of an xstm launch: its weights and (bytes) their length; rows from g2 on are
 * matrix 2's, of the second type (stride2). */
static __device__ __forceinline__ const uint8_t *xstm_row(const cu_mmv_args &a, int g, int g2, uint32_t *bytes) {
    int m, r;
    const uint8_t *src = mmv_row(a, g, &m, &r);
    *bytes = (uint32_t)(g >= g2 ? a.stride2 : a.stride);
    return g >= g2 ? a.w[2] + (int64_t)r * a.stride2 : src;
}
/* Rows i0..i1 of an xstm warp, all of type U (after_x runs once its activation loads
 * are issued: the kernel's post-wait first requests, ring_first_rows). PAIR: two rows a
 * step, as xst's (an odd run's last row alone); the ring position carries over between
 * the two types' runs either way. */
template <typename U, int UPL, bool PAIR, class F>
static __device__ __forceinline__ void xstm_rows(const cu_mmv_args &a, int i0, int i1, int depth, int g2,
                                                 int64_t smax, const xst_warp &wp, const uint8_t *src,
                                                 uint32_t bytes, mmv_keep &keep, ring_pos &rp, F &&after_x,
                                                 const uint8_t *xl_staged = nullptr) {
    const int lane = wp.lane;
    const int nb = a.K / U::QK;
    const int nu = nb * U::UPB;
    typename U::X x[UPL];
    if constexpr (mmv_has_xl<U>::value) {
        if (xl_staged) {
            /* this type's lane-major activations, copied to shared memory at the start */
#pragma unroll
            for (int k = 0; k < UPL; k++) {
                if (lane + 32 * k < nu) U::loadx_lane(xl_staged, lane + 32 * k, x[k]);
                else x[k] = {};
            }
        } else {
            mmv_lane_loadx<U, UPL>(a.q, 0, nu, lane, x);
        }
    } else {
        mmv_lane_loadx<U, UPL>(a.q, 0, nu, lane, x);
    }
    after_x();
    const ring_units<U, UPL> ru(nb, 0, nu, lane);
    auto refill = [&](int f, int s) { /* row f into slot s */
        ring_refill(f, wp.n, lane, wp.slot0 + (size_t)s * smax, wp.bar + s, [&](uint32_t *b) {
            if (f >= 32) src = xstm_row(a, wp.gw + f * wp.W, g2, &bytes);
            *b = bytes;
            return src;
        });
    };
    if constexpr (PAIR) {
        for (int i = i0; i < i1; i += 2) {
            const float p0 =
                ring_first_of_pair(ru, wp.bar, rp, wp.slot0, smax, i, wp.n, depth, nb, nu, lane, x, refill);
            if (i + 1 < i1) {
                const float2 acc =
                    ring_second_of_pair(ru, wp.bar, rp, wp.slot0, smax, i, wp.n, depth, nb, nu, lane, x, p0, refill);
                keep.put(a, i, wp.n, wp.gw, wp.W, lane, acc.x);
                keep.put(a, i + 1, wp.n, wp.gw, wp.W, lane, acc.y);
                rp.next(depth);
            } else {
                keep.put(a, i, wp.n, wp.gw, wp.W, lane, warp_sum(p0));
            }
            __syncwarp();
        }
    } else {
        for (int i = i0; i < i1; i++) {
            const int s = rp.s;
            ring_wait(wp.bar, rp, i, wp.n);
            const float acc = ring_dot<U, UPL>(ru, wp.slot0 + (size_t)s * smax, nb, 0, nu, lane, x);
            if (i == 0) trace_mark(0);
            refill(i + depth, s);
            keep.put(a, i, wp.n, wp.gw, wp.W, lane, acc);
            rp.next(depth);
            __syncwarp();
        }
    }
}
template <typename U1, typename U2, int UPL, bool PAIR = false>
static __global__ void __launch_bounds__(MMV_XST_WARPS * 32, PAIR ? 2 : 0)
    kernel_mmv_xstm(cu_mmv_args a, int depth, int stage) {
    pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t xst_smem[];
    __shared__ uint64_t xbar; /* the second type's activations in shared memory (stage) */
    const int64_t smax = a.stride > a.stride2 ? a.stride : a.stride2; /* slot bytes */
    /* stage: the second type's lane-major activations (xl6 for a q6_K v) are copied once
     * per block into shared memory after the wait, instead of every warp loading them
     * from the L2 where it meets its first row of that type: the warps get there at about
     * the same time, mid-launch, 2112 of them on the 7B, and beside the weight stream such
     * loads take several times their unloaded 0.7 us (the fan-in probe, bench/RESULTS.md
     * 2026-11-30). tg128, 7B q4_k_m, H200, same call: 710.35-713.78 tok/s staged vs
     * 705.98-708.27 (path xstm-staged off), the same tokens */
    uint8_t *xs2 = xst_smem + mmv_xstm_stage_off(depth, smax);
    const uint32_t xs2_bytes = (uint32_t)cu_xl_bytes(a.K);
    if (stage) {
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&xbar)) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
    }
    xst_warp wp;
    if (!xst_warp_init(a, depth, smax, xst_smem, wp)) return;
    const int g2 = mmv_total(a) - a.rows[2]; /* the first row of the second type (matrix 2) */
    /* (as xst: lane l requests rows l, l + 32, ...; the first 32 worked out here) */
    const uint8_t *src = nullptr;
    uint32_t bytes = 0;
    if (wp.lane < wp.n) src = xstm_row(a, wp.gw + wp.lane * wp.W, g2, &bytes);
    if (wp.lane == 0) mbar_init_ring(wp.bar, depth);
    __syncwarp();
    const bool req = wp.lane < depth && wp.lane < wp.n;
    ring_first_rows(a, true, req, wp.lane, wp.slot0 + (size_t)wp.lane * smax, src, bytes, wp.bar + wp.lane);
    pdl_wait();
    if (stage && threadIdx.x == 0) {
        tma_expect(&xbar, xs2_bytes);
        tma_copy_plain(xs2, U2::xl(a.q), xs2_bytes, &xbar);
    }
    /* the rest of the first rows, after the first run's activation loads */
    bool rest = req;
    auto first_rest = [&] {
        ring_first_rows(a, false, rest, wp.lane, wp.slot0 + (size_t)wp.lane * smax, src, bytes, wp.bar + wp.lane);
        rest = false;
    };
    /* this warp's rows of the first type, gw + i W < g2 (no more than n: g2 <= total) */
    const int n1 = wp.gw >= g2 ? 0 : (g2 - wp.gw + wp.W - 1) / wp.W;
    mmv_keep keep;
    ring_pos rp; /* (carried from the first type's rows to the second's) */
    /* PAIR: the first type's rows two a step, the second's (q6_K) one: paired too, the
     * kernel needs more than 128 registers (q4_K + q6_K at 2 units a lane: 148), so one
     * block per SM instead of two, or it spills where __launch_bounds__ holds it to 128;
     * with the first type's rows alone paired it fits 128 without spilling (sm_90a) */
    if (n1 > 0) xstm_rows<U1, UPL, PAIR>(a, 0, n1, depth, g2, smax, wp, src, bytes, keep, rp, first_rest);
    if (n1 < wp.n) {
        if (stage) mbar_wait(&xbar, 0);
        xstm_rows<U2, UPL, false>(a, n1, wp.n, depth, g2, smax, wp, src, bytes, keep, rp, first_rest,
                                  stage ? xs2 : nullptr);
    }
    /* (the copy lands before the block may leave, even where no warp read it) */
    if (stage && threadIdx.x == 0) mbar_wait(&xbar, 0);
    trace_end();
#endif
}
template <typename U1, typename U2>
static void mmv_xstm_prepare() {
    mmv_ring_prepare_forms<kernel_mmv_xstm<U1, U2, 1>, kernel_mmv_xstm<U1, U2, 1, true>>();
    mmv_ring_prepare_forms<kernel_mmv_xstm<U1, U2, 2>, kernel_mmv_xstm<U1, U2, 2, true>>();
    mmv_ring_prepare_forms<kernel_mmv_xstm<U1, U2, 4>, kernel_mmv_xstm<U1, U2, 4, true>>();
}
/* (PAIR: two rows a step, unless that kernel spills more than the one-row one) */
template <typename U1, typename U2, int UPL, bool PAIR>
static int mmv_xstm_launch_form(cu_ctx *S, const cu_mmv_args *a, const char *name) {
    if constexpr (PAIR)
        if (!mmv_pair_ok<kernel_mmv_xstm<U1, U2, UPL, true>, kernel_mmv_xstm<U1, U2, UPL>>())
            return mmv_xstm_launch_form<U1, U2, UPL, false>(S, a, name);
    const int64_t smax = a->stride > a->stride2 ? a->stride : a->stride2;
    const int lim = mmv_ring_limit<kernel_mmv_xstm<U1, U2, UPL, PAIR>>();
    const size_t xl = cu_xl_bytes(a->K); /* (stage: the second type's activations) */
    const int stage = S->on[CU_PATH_XSTM_STAGED] && mmv_has_xl<U2>::value && (int64_t)xl <= lim;
    const int depth = mmv_ring_depth(S->tune.xst_depth, MMV_XST_WARPS, smax, stage ? lim - (int)xl - 128 : lim);
    if (!depth) return 0;
    const size_t smem = stage ? mmv_xstm_stage_off(depth, smax) + xl : mmv_ring_smem(MMV_XST_WARPS, depth, smax);
    const int blocks = mmv_persist_blocks(S, a, MMV_XST_WARPS, MMV_XST_PERSM, 0);
    S->n.xstm++;
    cu_launch(S, name, kernel_mmv_xstm<U1, U2, UPL, PAIR>, dim3(blocks), dim3(MMV_XST_WARPS * 32), smem, *a, depth,
              stage);
    if (PAIR) S->n.pairs++;
    return 1;
}
template <typename U1, typename U2, int UPL>
static int mmv_xstm_launch_upl(cu_ctx *S, const cu_mmv_args *a, const char *name) {
    return S->on[CU_PATH_RING_PAIRS] ? mmv_xstm_launch_form<U1, U2, UPL, true>(S, a, name)
                                : mmv_xstm_launch_form<U1, U2, UPL, false>(S, a, name);
}
/* Launches xstm when the launch is one column of exactly three matrices, its units per
 * lane fit xs, and the ring fits; else 0. */
template <typename U1, typename U2>
static int mmv_xstm_launch(cu_ctx *S, const cu_mmv_args *a, const char *name) {
    if (a->ncols != 1 || a->nmat != 3 || a->stride2 <= 0) return 0;
    const int upl = mmv_xs_upl(a->K / U1::QK * U1::UPB, 1);
    if (upl == 1) return mmv_xstm_launch_upl<U1, U2, 1>(S, a, name);
    if (upl == 2) return mmv_xstm_launch_upl<U1, U2, 2>(S, a, name);
    if (upl == 4) return mmv_xstm_launch_upl<U1, U2, 4>(S, a, name);
    return 0;
}

#endif

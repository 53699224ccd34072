/* mmv_ring.cuh - the TMA ring that the sm_90 GEMVs (xst and xst2: mmv_xst.cuh; xstm:
 * mmv_xstm.cuh; xsg and xsgs: mmv_xsg.cuh) stream their weight rows through: the row
 * copy with the streamed-weight L2 policy, where a warp's ring stands and its waits, the
 * first rows around pdl_wait(), what a lane keeps about its units across rows
 * (ring_units), the loop steps the kernels share, the ring's shared-memory layout and a
 * warp's place in it (xst_warp), and the host side (depth, the shared-memory limit,
 * whether the two-rows-a-step form may be taken). The PTX of the bulk copies and the
 * mbarriers is in ptx.cuh. */
#ifndef MINFER_CUDA_MMV_RING_CUH
#define MINFER_CUDA_MMV_RING_CUH

#include "mmv_core.cuh"
#include "ptx.cuh"

/* A whole row: the barrier told its bytes, then the copy (tma_copy: common.cuh). */
static __device__ __forceinline__ void tma_row(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    tma_expect(bar, bytes);
    tma_copy(dst, src, bytes, bar);
}

#define MMV_XST_WARPS 8

/* Where a warp's ring stands: the slot its next row arrives in (row i in slot
 * i % depth) and that slot barrier's phase ((i / depth) & 1), advanced once a row.
 * Worked out from i instead, with depth a launch parameter, it cost every row ~38
 * instructions of integer division (SASS of xst q4_K, sm_90a: ~12% of the row's). */
struct ring_pos {
    int s = 0;
    uint32_t ph = 0;
    __device__ __forceinline__ void next(int depth) {
        if (++s == depth) {
            s = 0;
            ph ^= 1u;
        }
    }
};
/* Waits for row i of a warp's n, at ring position p; the last row's wait is marked in
 * the block timeline (trace_mark 1 and 2: the GEMV's tail). */
static __device__ __forceinline__ void ring_wait(uint64_t *bar, const ring_pos &p, int i, int n) {
    if (i == n - 1) trace_mark(1);
    mbar_wait(bar + p.s, p.ph);
    if (i == n - 1) trace_mark(2);
}

/* A ring's first rows: lane l (req: it has a row l < depth) requests row l into its
 * slot; the lanes below a.ring_pre (MMV_XST_PRE_DEFAULT: 1) before pdl_wait() (called
 * with before_wait), the others after the wait and after the warp's activation loads
 * are issued. Why, from the block timeline (bench/trace_step.py, bench/RESULTS.md,
 * H200, 2026-11-29): with every first row requested ahead of the wait (9.7 MB for
 * xst/xstm, 14 MB for xst2, all at once) the small kernel before the GEMV waited
 * behind that burst: its loads ~2x slower, the boundary after gate+up 2.8 us and after
 * ffn_down 2.1 us against 0.8 us elsewhere. tg128 on the 7B, same runs: one row ahead
 * 601.6 / 603.2 vs 597.7 / 599.2 tok/s (with the 4-warp attention, made default with
 * it, 612.8 / 615.0 / 615.5 vs 595.4 / 602.1 / 602.1); none ahead 598.75 vs 618.56.
 * The activation loads go first because the first dot waits for them: 625.20 / 625.83
 * / 626.94 vs 617.16 / 621.47 / 621.15 with the requests first. */
static __device__ __forceinline__ void ring_first_rows(const cu_mmv_args &a, bool before_wait, bool req, int lane,
                                                       void *slot, const void *src, uint32_t bytes, uint64_t *bar) {
    if (req && (lane < a.ring_pre) == before_wait) tma_row(slot, src, bytes, bar);
}

/* What a lane keeps about its units across the rows (units with U::P: where the unit
 * lies in a row and what its dot needs besides the bytes, from U::prep; mmv_k45.cuh says
 * why), made opaque by U::pin so the compiler keeps it in registers instead of working
 * it out again at every row. Units without P are addressed from u at every row. */
template <typename U, typename = void>
struct mmv_has_p {
    static constexpr bool value = false;
};
template <typename U>
struct mmv_has_p<U, decltype((void)sizeof(typename U::P), void())> {
    static constexpr bool value = true;
};
template <typename U, int UPL, bool HP = mmv_has_p<U>::value>
struct ring_units {
    __device__ __forceinline__ ring_units(int, int, int, int) {}
    template <bool>
    __device__ __forceinline__ float dot(const uint8_t *slot, int nb, int u0, int nh, int lane,
                                         const typename U::X *x) const {
        typename U::W w[UPL];
        mmv_lane_load<U, UPL, ld_s>(slot, nb, u0, nh, lane, w);
        return mmv_lane_dot<U, UPL>(w, x, u0, nh, lane);
    }
};
/* A lane past the row's end (j >= nh) holds unit u0's place and drops its dot. dot<true>
 * branches around that lane's loads, dot<false> loads unit u0 and drops the sum by a
 * select. The two schedule differently (SASS, sm_90a, q4_K): with the branch ptxas issues
 * every unit's loads before the first dot, without it it interleaves them with the dots
 * (lab, H200: xst qkv 9.43 us instead of 7.93) but needs fewer registers (xst2 q4_K 118
 * instead of 142, which keeps 4 of its blocks per SM; ffn_down q4_K 7.22 us vs 7.58). */
template <typename U, int UPL>
struct ring_units<U, UPL, true> {
    typename U::P p[UPL];
    __device__ __forceinline__ ring_units(int nb, int u0, int nh, int lane) {
#pragma unroll
        for (int k = 0; k < UPL; k++) {
            p[k] = U::prep(nb, lane + 32 * k < nh ? u0 + lane + 32 * k : u0);
            U::pin(p[k]);
        }
    }
    /* (the sums of mmv_lane_dot, in its order) */
    template <bool GUARD>
    __device__ __forceinline__ float dot(const uint8_t *slot, int, int, int nh, int lane,
                                         const typename U::X *x) const {
        typename U::W w[UPL];
#pragma unroll
        for (int k = 0; k < UPL; k++)
            if (!GUARD || lane + 32 * k < nh) U::template load_p<ld_s>(slot, p[k], w[k]);
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < UPL; k++) {
            const float d = U::dot_p(w[k], x[k], p[k]);
            acc = lane + 32 * k < nh ? acc + d : acc;
        }
        return acc;
    }
};
/* The ring loop's two steps that xst, xstm, xst2 and xsg share. ring_dot: the lane's units
 * u0 + lane + 32k (< u0 + nh) of the row in a slot, dotted with its activations and
 * summed over the warp (after the sum every lane's reads of the slot are done).
 * ring_refill: row f (< n) into the slot its ring just read, requested by lane f % 32
 * (which worked out rows below 32 ahead of the wait), after a proxy fence: the slot was
 * read through the generic proxy and the refill writes through the async one. row(&bytes)
 * gives the row's weights and length; it runs on that lane only. */
template <typename U, int UPL, bool GUARD = true>
static __device__ __forceinline__ float ring_dot(const ring_units<U, UPL> &ru, const uint8_t *slot, int nb, int u0,
                                                 int nh, int lane, const typename U::X *x) {
    return warp_sum(ru.template dot<GUARD>(slot, nb, u0, nh, lane, x));
}
template <class R>
static __device__ __forceinline__ void ring_refill(int f, int n, int lane, void *slot, uint64_t *bar, R &&row) {
    if (f < n && lane == (f & 31)) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        uint32_t bytes;
        const uint8_t *src = row(&bytes);
        tma_row(slot, src, bytes, bar);
    }
}

/* The first of a two-row step (xst, xsg; path ring-pairs): row i's lane partial,
 * its slot s refilled with row i + depth once every lane has read it; rp moves on. */
template <typename U, int UPL, class R>
static __device__ __forceinline__ float ring_first_of_pair(const ring_units<U, UPL> &ru, uint64_t *bar, ring_pos &rp,
                                                           const uint8_t *slot0, int64_t stride, int i, int n, int depth,
                                                           int nb, int nu, int lane, const typename U::X *x, R &&refill) {
    const int s = rp.s;
    ring_wait(bar, rp, i, n);
    const float p0 = ru.template dot<true>(slot0 + (size_t)s * stride, nb, 0, nu, lane, x);
    rp.next(depth);
    __syncwarp(); /* (every lane's reads of slot s are done) */
    refill(i + depth, s);
    return p0;
}
/* The second: row i + 1's partial, the two rows' sums (warp_sum2), its slot refilled; rp
 * still stands at that slot (the caller moves it on after its stores). */
template <typename U, int UPL, class R>
static __device__ __forceinline__ float2 ring_second_of_pair(const ring_units<U, UPL> &ru, uint64_t *bar,
                                                             const ring_pos &rp, const uint8_t *slot0, int64_t stride,
                                                             int i, int n, int depth, int nb, int nu, int lane,
                                                             const typename U::X *x, float p0, R &&refill) {
    const int s1 = rp.s;
    ring_wait(bar, rp, i + 1, n);
    const float p1 = ru.template dot<true>(slot0 + (size_t)s1 * stride, nb, 0, nu, lane, x);
    const float2 acc = warp_sum2(p0, p1);
    refill(i + 1 + depth, s1);
    return acc;
}

/* Shared memory of a block of nrings rings (xst: one per warp; xst2: one per pair):
 * nrings*depth barriers, then the slots (128-aligned). */
static __host__ __device__ __forceinline__ size_t mmv_ring_bars(int nrings, int depth) {
    return ((size_t)nrings * depth * 8 + 127) & ~(size_t)127;
}
static __host__ __device__ __forceinline__ size_t mmv_ring_smem(int nrings, int depth, int64_t stride) {
    return mmv_ring_bars(nrings, depth) + (size_t)nrings * depth * (size_t)stride;
}

/* A warp of an xst-style kernel (xstm; xst writes the same out): its place in the
 * persistent grid, its rows (gw, gw + W, ... below the launch's total: n of them) and
 * its ring of D slots of slot bytes each (mmv_ring_smem's layout). False for a warp
 * without rows. */
struct xst_warp {
    int lane, W, gw, n;
    uint64_t *bar;
    uint8_t *slot0;
};
static __device__ __forceinline__ bool xst_warp_init(const cu_mmv_args &a, int D, int64_t slot, uint8_t *smem,
                                                     xst_warp &w) {
    const int warp = threadIdx.x >> 5;
    const int total = mmv_total(a);
    w.lane = threadIdx.x & 31;
    w.W = gridDim.x * MMV_XST_WARPS;
    w.gw = blockIdx.x * MMV_XST_WARPS + warp;
    if (w.gw >= total) return false;
    w.n = (total - w.gw + w.W - 1) / w.W;
    w.bar = (uint64_t *)smem + warp * D;
    w.slot0 = smem + mmv_ring_bars(MMV_XST_WARPS, D) + (size_t)warp * D * slot;
    return true;
}

/* Ring depth (rows in flight per warp) and blocks per SM: 2 blocks of 8 warps per SM
 * (the TMA lab runs of 2026-11-29: one block per SM left the SM short of compute),
 * MMV_XST_DEPTH (cu_tune.xst_depth) rows per warp
 * (cu_xst_depth), fewer where the ring would pass MMV_XST_SMEM_MAX (two blocks must
 * fit in an SM's 228 KB) or the device's limit (mmv_smem_attr). Depth 2 replaced a
 * 96 KB budget (5 rows of a 4096-wide q4_K row, 3 of q6_K) on 2026-11-29: tg128 494.2
 * vs 468.2 tok/s in one run, the lab's qkv 10.6 vs 13.1 us (bench/RESULTS.md). The shared memory
 * a device must allow per block for the ring: MMV_XST_SMEM. */
#define MMV_XST_DEPTH 2
#define MMV_XST_SMEM (96 * 1024 + 1024)
#define MMV_XST_SMEM_MAX (112 * 1024 + 1024)
#define MMV_XST_PERSM 2
/* The ring limit of ring kernel K (set once, ahead of any capture). */
template <auto K>
static int mmv_ring_limit() {
    static int lim[CU_MAX_DEVICES], known[CU_MAX_DEVICES]; /* (per device: common.cuh) */
    const int d = cu_cur_device();
    if (!known[d]) lim[d] = mmv_smem_attr(K, MMV_XST_SMEM_MAX), known[d] = 1;
    return lim[d];
}
/* The ring depth a launch gets: want rows (cu_xst_depth; xsg's cu_xsg_depth), fewer where
 * nrings rings of them would pass lim; 0 when not even 2 rows fit. */
static inline int mmv_ring_depth(int want, int nrings, int64_t stride, int lim) {
    int depth = want;
    while (depth >= 2 && mmv_ring_smem(nrings, depth, stride) > (size_t)lim) depth--;
    return depth >= 2 ? depth : 0;
}
/* 1 when the two-rows-a-step kernel P spills no more than the one-row kernel O (local
 * memory per thread, sm_90a: xsg of q5_K and q6_K at 2 units a lane, 24-32 bytes, where
 * the one-row kernel has none; q4_K's, the measured one, none), looked up once (the
 * launchers' prepare, ahead of any capture). */
template <auto P, auto O>
static bool mmv_pair_ok() {
    static int ok = -1;
    if (ok < 0) {
        cudaFuncAttributes fp, fo;
        if (cudaFuncGetAttributes(&fp, P) != cudaSuccess || cudaFuncGetAttributes(&fo, O) != cudaSuccess) {
            (void)cudaGetLastError();
            ok = 0;
        } else {
            ok = fp.localSizeBytes <= fo.localSizeBytes;
        }
    }
    return ok == 1;
}
/* Host set-up of a ring kernel in its two loop forms (O one row a step, P two): their
 * shared-memory limits and whether P may be taken. */
template <auto O, auto P>
static void mmv_ring_prepare_forms() {
    mmv_ring_limit<O>();
    mmv_ring_limit<P>();
    mmv_pair_ok<P, O>();
}

#endif

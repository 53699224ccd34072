/* mmv_xsg.cuh - the one-token FFN's gate and up GEMV with the SwiGLU and its q8 in the
 * store (sm_90+, path swiglu-gemv): xsg (a TMA ring per warp, mmv_ring.cuh) and xsgs (one
 * ring per block whose rows any free warp takes: sring; path xsg-shared), and
 * mmv_xsg_launch, which picks between them (cu_mmv_q8_swiglu, mmv_kquant.cu). */
#ifndef MINFER_CUDA_MMV_XSG_CUH
#define MINFER_CUDA_MMV_XSG_CUH

#include "mmv_ring.cuh"
#include "mmv_xs.cuh" /* mmv_xs_upl: the rows xsg takes are xs's */

/* ---- "xsg" (sm_90+): the one-token FFN's gate and up launch with the SwiGLU in its
 * store (where xst would take the launch; path swiglu-gemv off turns it off) ----
 * The SwiGLU kernel after the gate+up GEMV cost ~1.9 us a layer on the 7B (its launch,
 * its q8, the boundary; bench/RESULTS.md). It cannot simply move into the GEMV's store:
 * its q8 needs the amax of 32 consecutive outputs, which xst computes in 32 different
 * warps (rows g, g + W, ...), and a handoff between warps across the grid costs about a
 * launch boundary (the folded norm, 2026-11-30). Here a block owns whole 32-output
 * groups: groups g = block, block + blocks, ... (so the machine still reads one band of
 * rows at a time), and of each group warp w takes the OPW outputs from 32g + OPW w: its
 * gate rows, then its up rows, through the warp's ring as xst (the same sums, so the
 * same bits). With a group's gate and up sums in hand the warp puts silu(g) * u into
 * shared memory and arrives on the group's counter there; the last of the block's warps
 * to arrive writes the group's f32 outputs and its q8 (q8_store1: the same bits as the
 * SwiGLU kernel's q8_store4); gate and up are written as the plain launch writes them
 * (gate not where h goes over it). The q8 goes to its own buffer (hq): the launch's
 * input q8 is still being read by other blocks. One column; no bias.
 * The cost: 344 groups (the 7B's 11008 rows) over 132 blocks leave 80 blocks a third
 * group, and each block streams at the rate of its own rows in flight, not the DRAM's,
 * so those 80 run ~3 us past the others (block timeline, H200). Hence a ring of 3 rows
 * (MMV_XSG_DEPTH; 110 KB for a 4096-wide q4_K row, one block per SM) and the GEMV after
 * it asking for all its ring rows before its wait (blocks.cu, cu_tune.xst_pre_swiglu).
 * Measured (tg128, 7B q4_k_m, H200, 2026-11-30): 686-690 tok/s with xsg against 680-682
 * with the SwiGLU kernel; 698.6-701.0 with the ring of 3 and the early rows. */
#define MMV_XSG_WARPS 16
#define MMV_XSG_MAXG 16 /* groups per block (the launcher refuses more) */
/* The end of an xsg warp's group gi (its last row's sum just taken; lane k holds row k's
 * sum v, gate rows then up rows): its SwiGLU outputs into the block's hs, the gate and up
 * outputs, and the last warp of the block to arrive writes the group's h and its q8. */
static __device__ __forceinline__ void xsg_group_end(const cu_mmv_args &a, float *h, const cu_q8 &hq,
                                                     float (*hs)[32], int *arrived, int gi, int G, int warp, int lane,
                                                     float v) {
    constexpr int OPW = 32 / MMV_XSG_WARPS, RPG = 2 * OPW;
    const int r0 = 32 * ((int)blockIdx.x + gi * G) + OPW * warp;
    const float up = __shfl_down_sync(0xffffffffu, v, OPW); /* lane j < OPW: its up sum */
    if (lane < OPW) hs[gi][OPW * warp + lane] = silu_mul(v, up);
    /* the gate and up outputs too, as the launch would have written them (gate
     * only where h is not written over it) */
    if (lane < RPG && (lane >= OPW || a.out[0] != h)) (lane < OPW ? a.out[0] : a.out[1])[r0 + lane % OPW] = v;
    __syncwarp();
    int last = 0;
    if (lane == 0) {
        __threadfence_block();
        last = atomicAdd(&arrived[gi], 1) == MMV_XSG_WARPS - 1;
    }
    if (__shfl_sync(0xffffffffu, last, 0)) {
        __threadfence_block();
        const float hv = ((volatile float *)hs[gi])[lane];
        const int64_t idx = r0 - OPW * warp + lane;
        h[idx] = hv;
        q8_store1(hq, idx, hv, 1);
    }
}
template <typename U, int UPL, bool PAIR = false>
static __global__ void __launch_bounds__(MMV_XSG_WARPS * 32, 1)
    kernel_mmv_xsg(cu_mmv_args a, float *h, cu_q8 hq, int depth) {
    pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t xsg_smem[];
    __shared__ float hs[MMV_XSG_MAXG][32];
    __shared__ int arrived[MMV_XSG_MAXG];
    constexpr int OPW = 32 / MMV_XSG_WARPS, RPG = 2 * OPW; /* outputs, rows per group of a warp */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int G = gridDim.x, ng = a.rows[0] / 32;
    const int n = (ng - (int)blockIdx.x + G - 1) / G * RPG; /* this warp's rows */
    const int64_t stride = a.stride;
    uint64_t *bar = (uint64_t *)xsg_smem + warp * depth;
    uint8_t *slot0 = xsg_smem + mmv_ring_bars(MMV_XSG_WARPS, depth) + (size_t)warp * depth * stride;
    /* row i of this warp: group i / RPG, its gate rows then its up rows */
    auto row = [&](int i) {
        const int k = i % RPG;
        const int r = 32 * ((int)blockIdx.x + i / RPG * G) + OPW * warp + k % OPW;
        return (k < OPW ? a.w[0] : a.w[1]) + (int64_t)r * stride;
    };
    const uint8_t *src = lane < n ? row(lane) : nullptr; /* (as xst: lane l requests rows l, l + 32, ...) */
    if (threadIdx.x < MMV_XSG_MAXG) arrived[threadIdx.x] = 0;
    if (lane == 0) mbar_init_ring(bar, depth);
    __syncthreads(); /* the counters are zero before any warp arrives */
    const bool req = lane < depth && lane < n;
    ring_first_rows(a, true, req, lane, slot0 + (size_t)lane * stride, src, (uint32_t)stride, bar + lane);
    pdl_wait();
    const int nb = a.K / U::QK;
    const int nu = nb * U::UPB;
    typename U::X x[UPL];
    mmv_lane_loadx<U, UPL>(a.q, 0, nu, lane, x);
    ring_first_rows(a, false, req, lane, slot0 + (size_t)lane * stride, src, (uint32_t)stride, bar + lane);
    float v = 0.0f; /* lane k: the sum of the group's row k */
    ring_pos rp;
    const ring_units<U, UPL> ru(nb, 0, nu, lane);
    if constexpr (PAIR) {
        auto refill = [&](int f, int s) { /* row f into slot s */
            ring_refill(f, n, lane, slot0 + (size_t)s * stride, bar + s, [&](uint32_t *bytes) {
                *bytes = (uint32_t)stride;
                return f < 32 ? src : row(f);
            });
        };
        auto take = [&](int i, float acc) { /* row i's sum, in every lane (the loop below) */
            const int k = i % RPG;
            if (lane == k) v = acc;
            if (k == RPG - 1) xsg_group_end(a, h, hq, hs, arrived, i / RPG, G, warp, lane, v);
        };
        /* two rows a step as xst's (n is a multiple of RPG, even) */
        static_assert(RPG % 2 == 0, "xsg pairs rows");
        for (int i = 0; i < n; i += 2) {
            const float p0 = ring_first_of_pair(ru, bar, rp, slot0, stride, i, n, depth, nb, nu, lane, x, refill);
            const float2 acc = ring_second_of_pair(ru, bar, rp, slot0, stride, i, n, depth, nb, nu, lane, x, p0, refill);
            take(i, acc.x);
            take(i + 1, acc.y);
            rp.next(depth);
            __syncwarp();
        }
    } else {
        for (int i = 0; i < n; i++) {
            const int s = rp.s;
            ring_wait(bar, rp, i, n);
            const float acc = ring_dot<U, UPL>(ru, slot0 + (size_t)s * stride, nb, 0, nu, lane, x);
            if (i == 0) trace_mark(0);
            const int f = i + depth;
            ring_refill(f, n, lane, slot0 + (size_t)s * stride, bar + s, [&](uint32_t *bytes) {
                *bytes = (uint32_t)stride;
                return f < 32 ? src : row(f);
            });
            const int k = i % RPG;
            if (lane == k) v = acc;
            if (k == RPG - 1) xsg_group_end(a, h, hq, hs, arrived, i / RPG, G, warp, lane, v);
            rp.next(depth);
            __syncwarp();
        }
    }
    trace_end();
#endif
}
template <typename U>
static void mmv_xsg_prepare() {
    mmv_ring_prepare_forms<kernel_mmv_xsg<U, 1>, kernel_mmv_xsg<U, 1, true>>();
    mmv_ring_prepare_forms<kernel_mmv_xsg<U, 2>, kernel_mmv_xsg<U, 2, true>>();
    mmv_ring_prepare_forms<kernel_mmv_xsg<U, 4>, kernel_mmv_xsg<U, 4, true>>();
}
/* The grid of an xsg or xsgs launch: per_sm blocks per SM, at most one per 32-output
 * group; 0 (refused) where a block would get more groups than MMV_XSG_MAXG (their
 * shared-memory arrays). */
static inline int mmv_xsg_blocks(cu_ctx *S, const cu_mmv_args *a, int per_sm) {
    const int ng = a->rows[0] / 32;
    int blocks = per_sm * cu_num_sms(S);
    if (blocks > ng) blocks = ng;
    return (ng + blocks - 1) / blocks > MMV_XSG_MAXG ? 0 : blocks;
}
/* (PAIR as mmv_xst_launch_form's) */
template <typename U, int UPL, bool PAIR>
static int mmv_xsg_launch_upl(cu_ctx *S, const cu_mmv_args *a, float *h, const cu_q8 *hq, const char *name) {
    if constexpr (PAIR)
        if (!mmv_pair_ok<kernel_mmv_xsg<U, UPL, true>, kernel_mmv_xsg<U, UPL>>())
            return mmv_xsg_launch_upl<U, UPL, false>(S, a, h, hq, name);
    const int depth =
        mmv_ring_depth(S->tune.xsg_depth, MMV_XSG_WARPS, a->stride, mmv_ring_limit<kernel_mmv_xsg<U, UPL, PAIR>>());
    if (!depth) return 0;
    const size_t smem = mmv_ring_smem(MMV_XSG_WARPS, depth, a->stride);
    const int per_sm = mmv_ring_per_sm<kernel_mmv_xsg<U, UPL, PAIR>>(MMV_XSG_WARPS * 32, smem);
    if (!per_sm) return 0;
    const int blocks = mmv_xsg_blocks(S, a, per_sm);
    if (!blocks) return 0;
    cu_launch(S, name, kernel_mmv_xsg<U, UPL, PAIR>, dim3(blocks), dim3(MMV_XSG_WARPS * 32), smem, *a, h, *hq, depth);
    if (PAIR) S->n.pairs++;
    return 1;
}
/* One ring per block whose rows any free warp takes (xsgs): NS whole-row slots
 * after NS barriers (mmv_ring_smem(1, NS, stride)), block row r in slot r % NS. A slot
 * barrier's parity tells only two phases apart, so the taker of row r first waits for
 * slot_row[s] == r (its request issued, which the taker of row r - NS does only after
 * reading that row), then for the phase. */
template <int NS>
struct sring {
    uint64_t *bar;
    uint8_t *slot0;
    int *slot_row; /* [NS] in shared memory */
    int64_t stride;
    int nr; /* the block's rows */
    /* row r's slot, once its bytes are in */
    __device__ __forceinline__ const uint8_t *wait(int r) const {
        const int s = r % NS;
        while (((volatile int *)slot_row)[s] != r) {
        }
        mbar_wait(bar + s, (uint32_t)(r / NS) & 1u);
        return slot0 + (size_t)s * stride;
    }
    /* after every lane has read row r's slot: row r + NS into it, asked for by one lane
     * (src(f): row f's weights) */
    template <class Src>
    __device__ __forceinline__ void refill(int r, int lane, Src &&src) const {
        const int f = r + NS, s = r % NS;
        __syncwarp();
        if (f < nr && lane == (r & 31)) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            slot_row[s] = f;
            tma_row(slot0 + (size_t)s * stride, src(f), (uint32_t)stride, bar + s);
        }
    }
    /* set-up by the whole block (then a __syncthreads before any request): slot s holds
     * row s first */
    __device__ __forceinline__ void init(int tid) const {
        if (tid < NS) slot_row[tid] = tid;
        if (tid == 0) mbar_init_ring(bar, NS);
    }
    /* the first rows, one a thread (tid < NS): those below n_early ahead of the wait
     * (early), the others after it */
    template <class Src>
    __device__ __forceinline__ void first(int tid, bool early, int n_early, Src &&src) const {
        if (tid < NS && tid < nr && (tid < n_early) == early)
            tma_row(slot0 + (size_t)tid * stride, src(tid), (uint32_t)stride, bar + tid);
    }
};

/* ---- "xsgs": xsg with one ring per block, its rows taken by whichever warp is free
 * (the default where the ring fits: 48 slots of a 4096-wide q4_K row, 111 KB; else xsg;
 * path xsg-shared off turns it off) ----
 * In xsg each warp owns its rows and its ring; the block ends with its slowest warp. The
 * block timeline (2026-12-01, bench/RESULTS.md) puts the block's last warp's end a median
 * 1.56 us (max 2.85) after warp 0's last row arrived, about two rows of one warp's time
 * (16 warps share the SM's issue: ~0.9 us a row each). Here the block's rows (group gi =
 * r / 64: its 32 gate rows, then its 32 up rows) stream through one ring of XSGS_SLOTS
 * whole-row slots, row r in slot r % XSGS_SLOTS, and a warp takes the next two rows from
 * a shared counter when it is free, so the block's rows are shared out to the end (sring).
 * The sums land in shared memory; a group's 64th arrival writes its h, q8, gate
 * and up as xsg does (the same sums: the same bits).
 * Measured (tg128, 7B q4_k_m, H200, 2026-12-01, one call, three rounds): 727.92 / 729.36 /
 * 726.75 tok/s against 721.83 / 721.04 / 720.42 with xsg (path xsg-shared off); the
 * gate+up span per layer 14.37 us against 15.38, its last block ending 13.2 us after the
 * release instead of 14.4-15.2 (block timeline; bench/RESULTS.md). */
#define XSGS_SLOTS (MMV_XSG_WARPS * MMV_XSG_DEPTH)
template <typename U, int UPL>
static __global__ void __launch_bounds__(MMV_XSG_WARPS * 32, 1)
    kernel_mmv_xsgs(cu_mmv_args a, float *h, cu_q8 hq) {
    pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t xsgs_smem[];
    __shared__ float sums[MMV_XSG_MAXG][64];
    __shared__ int arrived[MMV_XSG_MAXG];
    __shared__ int slot_row[XSGS_SLOTS];
    __shared__ int next_row;
    const int tid = threadIdx.x, lane = tid & 31;
    const int G = gridDim.x, ng = a.rows[0] / 32;
    const sring<XSGS_SLOTS> ring{(uint64_t *)xsgs_smem, xsgs_smem + mmv_ring_bars(1, XSGS_SLOTS), slot_row,
                                 a.stride, (ng - (int)blockIdx.x + G - 1) / G * 64};
    auto row = [&](int r) { /* block row r: group r / 64, its 32 gate rows, then its 32 up rows */
        const int k = r & 63;
        return a.w[k >> 5] + (int64_t)(32 * ((int)blockIdx.x + (r >> 6) * G) + (k & 31)) * a.stride;
    };
    if (tid < MMV_XSG_MAXG) arrived[tid] = 0;
    if (tid == 0) next_row = 0;
    ring.init(tid);
    __syncthreads();
    /* as many rows ahead of the wait as xsg asks for there (a.ring_pre a warp:
     * cu_tune.xsg_pre, 2), the others after the
     * activation loads */
    const int n_early = MMV_XSG_WARPS * a.ring_pre;
    ring.first(tid, true, n_early, row);
    pdl_wait();
    const int nb = a.K / U::QK;
    const int nu = nb * U::UPB;
    typename U::X x[UPL];
    mmv_lane_loadx<U, UPL>(a.q, 0, nu, lane, x);
    ring.first(tid, false, n_early, row);
    const ring_units<U, UPL> ru(nb, 0, nu, lane);
    for (;;) {
        int r = 0;
        if (lane == 0) r = atomicAdd(&next_row, 2);
        r = __shfl_sync(0xffffffffu, r, 0);
        if (r >= ring.nr) break;
        const float p0 = ru.template dot<true>(ring.wait(r), nb, 0, nu, lane, x);
        ring.refill(r, lane, row);
        const float p1 = ru.template dot<true>(ring.wait(r + 1), nb, 0, nu, lane, x);
        const float2 acc = warp_sum2(p0, p1);
        ring.refill(r + 1, lane, row);
        const int gi = r >> 6, k = r & 63;
        int last = 0;
        if (lane == 0) {
            sums[gi][k] = acc.x;
            sums[gi][k + 1] = acc.y;
            __threadfence_block();
            last = atomicAdd(&arrived[gi], 2) == 62;
        }
        if (__shfl_sync(0xffffffffu, last, 0)) {
            /* the group's end (xsg_group_end's stores, from shared memory) */
            __threadfence_block();
            const float gv = ((volatile float *)sums[gi])[lane], uv = ((volatile float *)sums[gi])[32 + lane];
            const int64_t idx = 32 * ((int64_t)blockIdx.x + (int64_t)gi * G) + lane;
            const float hv = silu_mul(gv, uv);
            if (a.out[0] != h) a.out[0][idx] = gv;
            a.out[1][idx] = uv;
            h[idx] = hv;
            q8_store1(hq, idx, hv, 1);
        }
        __syncwarp();
    }
    trace_end();
#endif
}
template <typename U>
static void mmv_xsgs_prepare() {
    mmv_ring_limit<kernel_mmv_xsgs<U, 1>>();
    mmv_ring_limit<kernel_mmv_xsgs<U, 2>>();
    mmv_ring_limit<kernel_mmv_xsgs<U, 4>>();
}
/* One kernel_mmv_xsgs launch where its ring fits; else 0 (nothing launched). Always two
 * rows a step (path ring-pairs and cu_tune.xsg_depth are xsg's). */
template <typename U, int UPL>
static int mmv_xsgs_launch_upl(cu_ctx *S, const cu_mmv_args *a, float *h, const cu_q8 *hq, const char *name) {
    const size_t smem = mmv_ring_smem(1, XSGS_SLOTS, a->stride);
    const int lim = mmv_ring_limit<kernel_mmv_xsgs<U, UPL>>();
    if (lim <= 0 || smem > (size_t)lim) return 0;
    const int per_sm = mmv_ring_per_sm<kernel_mmv_xsgs<U, UPL>>(MMV_XSG_WARPS * 32, smem);
    if (!per_sm) return 0;
    const int blocks = mmv_xsg_blocks(S, a, per_sm);
    if (!blocks) return 0;
    cu_launch(S, name, kernel_mmv_xsgs<U, UPL>, dim3(blocks), dim3(MMV_XSG_WARPS * 32), smem, *a, h, *hq);
    return 1;
}

/* h = silu(a's matrix 0 x) * (matrix 1 x) and its q8 into hq, in one xsgs (returns 2) or
 * xsg launch (1), where it takes the launch (one column, two matrices of the same rows, a
 * multiple of 32, no bias or add, rows that fit xs, a ring that fits, the xst size under
 * cu_tune.xst_bytes); else 0 and nothing is launched. */
template <typename U>
static int mmv_xsg_launch(cu_ctx *S, const cu_mmv_args *a, float *h, const cu_q8 *hq, const char *name) {
    const int64_t xst_bytes = mmv_xst_bytes(S);
    const int64_t bytes = (int64_t)mmv_total(*a) * a->stride;
    if (xst_bytes < 0 || bytes < xst_bytes) return 0;
    if (a->ncols != 1 || a->nmat != 2 || a->rows[0] != a->rows[1] || a->rows[0] % 32 || a->accum || a->bias[0] ||
        a->bias[1])
        return 0;
    const int upl = mmv_xs_upl(a->K / U::QK * U::UPB, 1);
    if (S->on[CU_PATH_XSG_SHARED]) {
        const int done = upl == 1   ? mmv_xsgs_launch_upl<U, 1>(S, a, h, hq, name)
                         : upl == 2 ? mmv_xsgs_launch_upl<U, 2>(S, a, h, hq, name)
                         : upl == 4 ? mmv_xsgs_launch_upl<U, 4>(S, a, h, hq, name)
                                    : 0;
        if (done) return 2;
    }
    const bool pair = S->on[CU_PATH_RING_PAIRS];
    if (upl == 1)
        return pair ? mmv_xsg_launch_upl<U, 1, true>(S, a, h, hq, name) : mmv_xsg_launch_upl<U, 1, false>(S, a, h, hq, name);
    if (upl == 2)
        return pair ? mmv_xsg_launch_upl<U, 2, true>(S, a, h, hq, name) : mmv_xsg_launch_upl<U, 2, false>(S, a, h, hq, name);
    if (upl == 4)
        return pair ? mmv_xsg_launch_upl<U, 4, true>(S, a, h, hq, name) : mmv_xsg_launch_upl<U, 4, false>(S, a, h, hq, name);
    return 0;
}

#endif

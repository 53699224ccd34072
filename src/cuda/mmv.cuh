/* mmv.cuh - decode GEMV framework: out[c][r] = sum_k W[r][k] * x[c][k] for
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
 * hold, v1 for several columns (mmv_q8_launch at the end).
 *
 * A unit type U provides:
 *   QK, UPB        values per block, units per block
 *   UNR            units per lane in flight (v1)
 *   struct W       the registers of one unit's weights
 *   load<L>(row, nb, u, W&)              weights only; L = ld_g (global, read-only
 *                                        path) or ld_s (a row in shared memory)
 *   struct X       the activations of one unit
 *   loadx<L>(q, xoff, u, X&)             read them (after pdl_wait); xoff = c * K
 *   dotx(W, X, u) -> float               the unit's contribution
 * (mmv_dot below puts loadx and dotx together for the kernels that read the
 * activations afresh for every row: v1 and pp). */
#ifndef MINFER_CUDA_MMV_CUH
#define MINFER_CUDA_MMV_CUH

#include "common.cuh"

#define MMV_WARPS 4

/* The launch policy, read from the context (common.cuh cu_ctx): launches of at least
 * xst_bytes weight bytes take the TMA ring (path tma-ring; the backend sets -1 where the
 * device runs no sm_90 code or its shared memory cannot hold the ring); wide rows take
 * xst2 there (path wide-ring), else xs2 where 3 of its blocks fit on an SM, else pp;
 * tune.gemv_per_sm caps the persistent grids' blocks per SM (0: what fits). */
static inline int64_t mmv_xst_bytes(const cu_ctx *S) { return S->on[CU_PATH_TMA_RING] ? S->tune.xst_bytes : -1; }
static inline int mmv_wide_ring(const cu_ctx *S) { return S->on[CU_PATH_WIDE_RING] && mmv_xst_bytes(S) >= 0; }

static __device__ __forceinline__ int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    return c;
#endif
}
/* dp4a of four unsigned bytes a with four signed bytes b */
static __device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
#if defined(__CUDA_ARCH__)
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    return c;
#endif
}

/* Weight loaders of the units: global memory through the read-only path, or a
 * row staged in shared memory (plain loads; the compiler emits LDS because the
 * pointer derives from the __shared__ ring). */
/* (weights, u*: with the streamed-weight L2 policy, l2_stream_policy; the asm is not
 * volatile, like __ldg, since weights may be read before pdl_wait; activations, i128,
 * are plain loads after the wait: the kernel before writes them while this grid is
 * resident, which the read-only path does not allow; mmv_lane_loadx) */
struct ld_g {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && MINFER_CUDA_L2_HINT
    static __device__ __forceinline__ uint4 u128(const uint8_t *p) {
        uint4 v;
        asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
            : "l"(p), "l"(l2_stream_policy()));
        return v;
    }
    static __device__ __forceinline__ uint2 u64(const uint8_t *p) {
        uint2 v;
        asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(l2_stream_policy()));
        return v;
    }
    static __device__ __forceinline__ uint32_t u32(const uint8_t *p) {
        uint32_t v;
        asm("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(l2_stream_policy()));
        return v;
    }
    static __device__ __forceinline__ uint16_t u16(const uint8_t *p) {
        uint16_t v;
        asm("ld.global.nc.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(l2_stream_policy()));
        return v;
    }
#else
    static __device__ __forceinline__ uint4 u128(const uint8_t *p) { return __ldg((const uint4 *)p); }
    static __device__ __forceinline__ uint2 u64(const uint8_t *p) { return __ldg((const uint2 *)p); }
    static __device__ __forceinline__ uint32_t u32(const uint8_t *p) { return __ldg((const unsigned int *)p); }
    static __device__ __forceinline__ uint16_t u16(const uint8_t *p) { return __ldg((const unsigned short *)p); }
#endif
    static __device__ __forceinline__ int4 i128(const int8_t *p) { return *(const int4 *)p; }
};
struct ld_s {
    static __device__ __forceinline__ uint4 u128(const uint8_t *p) { return *(const uint4 *)p; }
    static __device__ __forceinline__ uint2 u64(const uint8_t *p) { return *(const uint2 *)p; }
    static __device__ __forceinline__ uint32_t u32(const uint8_t *p) { return *(const uint32_t *)p; }
    static __device__ __forceinline__ uint16_t u16(const uint8_t *p) { return *(const uint16_t *)p; }
    static __device__ __forceinline__ int4 i128(const int8_t *p) { return *(const int4 *)p; }
};

/* Global row g of a stacked launch -> (matrix m, row r) and its weights; selects,
 * not indexing, keep the parameter arrays out of local memory. */
static __device__ __forceinline__ const uint8_t *mmv_row(const cu_mmv_args &a, int g, int *m, int *r) {
    int mm = 0, rr = g;
    if (a.nmat > 1 && rr >= a.rows[0]) {
        rr -= a.rows[0];
        mm = 1;
        if (a.nmat > 2 && rr >= a.rows[1]) {
            rr -= a.rows[1];
            mm = 2;
        }
    }
    *m = mm;
    *r = rr;
    const uint8_t *w = mm == 0 ? a.w[0] : mm == 1 ? a.w[1] : a.w[2];
    return w + (int64_t)rr * a.stride;
}
/* Rows of a stacked launch (device and host). */
static __host__ __device__ __forceinline__ int mmv_total(const cu_mmv_args &a) {
    return a.rows[0] + (a.nmat > 1 ? a.rows[1] : 0) + (a.nmat > 2 ? a.rows[2] : 0);
}
/* One unit's contribution with its activations read from q (column offset xoff). */
template <typename U>
static __device__ __forceinline__ float mmv_dot(const typename U::W &w, int u, const cu_q8 &q, int64_t xoff) {
    typename U::X x;
    U::loadx(q, xoff, u, x);
    return U::dotx(w, x, u);
}

/* Writes one finished row (one lane: lane 0 in v1 and pp, mmv_keep below in the
 * x-stationary kernels): out[c][r] = acc[c] + bias[r], or with a.accum
 * out[c][r] += that, as a reduction the warp does not wait for: a load of the old
 * value stalls each warp an L2 round trip per row (tg128 on the 7B, H200,
 * 2026-11-29, with an experiment since removed also on: 480.7 with the load, 498.2
 * with the reduction). One writer per element: the atomicity is not what it is for. */
template <int NC>
static __device__ __forceinline__ void mmv_store(const cu_mmv_args &a, int m, int r, const float *acc) {
    const float *bias = m == 0 ? a.bias[0] : m == 1 ? a.bias[1] : a.bias[2];
    float *o = m == 0 ? a.out[0] : m == 1 ? a.out[1] : a.out[2];
    const int rows_m = m == 0 ? a.rows[0] : m == 1 ? a.rows[1] : a.rows[2];
    const float bv = bias ? bias[r] : 0.0f;
#pragma unroll
    for (int c = 0; c < NC; c++)
        if (NC == 1 || c < a.ncols) { /* (NC 1: launched for one column only) */
            float *d = o + (int64_t)c * rows_m + r;
            if (a.accum) atomicAdd(d, acc[c] + bv);
            else *d = acc[c] + bv;
        }
}

/* The sums of a warp's rows g0, g0 + W, ... (n of them; one column), kept one per lane
 * (row i in lane i % 32) and stored by all the lanes at once after every 32nd row and
 * the last, instead of lane 0 working out each row's matrix and storing it while the
 * rest of the warp waits: ~30 instructions a row, and every instruction of one lane
 * costs the warp an issue slot. */
struct mmv_keep {
    float v = 0.0f;
    __device__ __forceinline__ void put(const cu_mmv_args &a, int i, int n, int g0, int W, int lane, float acc) {
        if (lane == (i & 31)) v = acc;
        if ((i & 31) == 31 || i == n - 1) {
            if (lane <= (i & 31)) {
                int m, r;
                mmv_row(a, g0 + ((i & ~31) + lane) * W, &m, &r);
                mmv_store<1>(a, m, r, &v);
            }
        }
    }
};

/* v1 (2..8 columns where kernel_mmv_cols does not take them). Measured (tg128, 7B
 * q4_k_m, H200, 2026-11-29, bench/RESULTS.md): 403 tok/s for the whole step with
 * v1 everywhere, 455 with xs / xst / pp below. */
template <typename U, int NC>
static __global__ void __launch_bounds__(MMV_WARPS * 32) kernel_mmv_q8(cu_mmv_args a) {
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = blockIdx.x * MMV_WARPS + warp;
    if (g >= mmv_total(a)) return;
    int m, r;
    const uint8_t *row = mmv_row(a, g, &m, &r);
    const int K = a.K;
    const int nb = K / U::QK;
    const int nu = nb * U::UPB;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    bool waited = false;
    for (int u0 = 0; u0 < nu; u0 += 32 * U::UNR) {
        typename U::W wr[U::UNR];
#pragma unroll
        for (int k = 0; k < U::UNR; k++) {
            const int u = u0 + lane + 32 * k;
            if (u < nu) U::template load<ld_g>(row, nb, u, wr[k]);
        }
        if (!waited) {
            pdl_wait();
            waited = true;
        }
#pragma unroll
        for (int k = 0; k < U::UNR; k++) {
            const int u = u0 + lane + 32 * k;
            if (u < nu) {
#pragma unroll
                for (int c = 0; c < NC; c++)
                    if (c < a.ncols) acc[c] += mmv_dot<U>(wr[k], u, a.q, (int64_t)c * K);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = warp_sum(acc[c]);
    if (lane == 0) mmv_store<NC>(a, m, r, acc);
}

/* Resident blocks per SM of a kernel at `threads` threads and no dynamic shared
 * memory (the persistent grids' size); 4 when the runtime cannot say. */
template <typename Kern>
static int mmv_occupancy(Kern k, int threads) {
    int nb = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, threads, 0) != cudaSuccess || nb <= 0) {
        (void)cudaGetLastError();
        nb = 4;
    }
    return nb;
}

/* Blocks of a persistent grid: enough for every row (rows_per_block each), at most
 * what fits at once (per_sm blocks per SM, capped by per_sm_cap when > 0). */
static inline int mmv_persist_blocks(cu_ctx *S, const cu_mmv_args *a, int rows_per_block, int per_sm,
                                     int per_sm_cap) {
    const int blocks = (mmv_total(*a) + rows_per_block - 1) / rows_per_block;
    if (per_sm_cap > 0 && per_sm > per_sm_cap) per_sm = per_sm_cap;
    const int cap = per_sm * cu_num_sms(S);
    return blocks > cap ? cap : blocks;
}

/* ---- Schedule "pp" (one-column
 * launches whose rows are too wide for xs, e.g. the 11008-wide ffn_down) ----
 * Persistent grid (what fits on the device at once): each warp walks its rows
 * (g, g+W, ...) in chunks of 32*UNR units with two register sets used in turn:
 * chunk i+1 is loaded into the other set before chunk i is computed, so a warp
 * always has a chunk in flight and the blocks never drain between rows. No
 * register copy between the sets: a copy would wait for the prefetch to land.
 * Lab (2026-11-29): 12-18% faster than v1 on ffn_down 4096x11008, 5-15% slower
 * than v1 on the 4096-wide shapes. */
/* Work item i of warp gw: row gw + (i / nch) * W, chunk i % nch. */
template <typename U>
static __device__ __forceinline__ void mmv_pp_load(const cu_mmv_args &a, int gw, int W, int nch, int nb, int nu,
                                                   int i, int lane, typename U::W *buf) {
    int m, r;
    const uint8_t *row = mmv_row(a, gw + (i / nch) * W, &m, &r);
    const int ch = i % nch;
#pragma unroll
    for (int k = 0; k < U::UNR; k++) {
        const int u = ch * 32 * U::UNR + lane + 32 * k;
        if (u < nu) U::template load<ld_g>(row, nb, u, buf[k]);
    }
}

template <typename U, int NC>
static __device__ __forceinline__ void mmv_pp_compute(const cu_mmv_args &a, int gw, int W, int nch, int nb, int nu,
                                                      int i, int lane, const typename U::W *buf, float *acc) {
    int m, r;
    const uint8_t *row = mmv_row(a, gw + (i / nch) * W, &m, &r);
    const int ch = i % nch;
#pragma unroll
    for (int k = 0; k < U::UNR; k++) {
        const int u = ch * 32 * U::UNR + lane + 32 * k;
        if (u < nu) {
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (c < a.ncols) acc[c] += mmv_dot<U>(buf[k], u, a.q, (int64_t)c * a.K);
        }
    }
    if (ch == nch - 1) {
#pragma unroll
        for (int c = 0; c < NC; c++) acc[c] = warp_sum(acc[c]);
        if (lane == 0) mmv_store<NC>(a, m, r, acc);
#pragma unroll
        for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    }
}

template <typename U, int NC>
static __global__ void __launch_bounds__(MMV_WARPS * 32) kernel_mmv_q8_pp(cu_mmv_args a) {
    pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int gw = blockIdx.x * MMV_WARPS + (threadIdx.x >> 5);
    const int W = gridDim.x * MMV_WARPS;
    const int total = mmv_total(a);
    if (gw >= total) return;
    const int nb = a.K / U::QK;
    const int nu = nb * U::UPB;
    const int nch = (nu + 32 * U::UNR - 1) / (32 * U::UNR);
    const int n = ((total - gw + W - 1) / W) * nch;
    typename U::W A[U::UNR], B[U::UNR];
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    mmv_pp_load<U>(a, gw, W, nch, nb, nu, 0, lane, A);  /* weights: before the wait */
    pdl_wait();
    for (int i = 0; i < n; i += 2) {
        if (i + 1 < n) mmv_pp_load<U>(a, gw, W, nch, nb, nu, i + 1, lane, B);
        mmv_pp_compute<U, NC>(a, gw, W, nch, nb, nu, i, lane, A, acc);
        if (i + 1 >= n) break;
        if (i + 2 < n) mmv_pp_load<U>(a, gw, W, nch, nb, nu, i + 2, lane, A);
        mmv_pp_compute<U, NC>(a, gw, W, nch, nb, nu, i + 1, lane, B, acc);
    }
}

template <typename U, int NC>
static int mmv_pp_occupancy() {
    static int per_sm;
    if (!per_sm) {
        const int nb = mmv_occupancy(kernel_mmv_q8_pp<U, NC>, MMV_WARPS * 32);
        per_sm = nb > 8 ? 8 : nb;
    }
    return per_sm;
}

/* Occupancy lookups ahead of any graph capture (called at init). */
template <typename U>
static void mmv_pp_prepare() {
    mmv_pp_occupancy<U, 1>();
    mmv_pp_occupancy<U, 2>();
    mmv_pp_occupancy<U, 4>();
    mmv_pp_occupancy<U, 8>();
}

template <typename U, int NC>
static void mmv_pp_launch(cu_ctx *S, const cu_mmv_args *a, const char *name) {
    const int blocks = mmv_persist_blocks(S, a, MMV_WARPS, mmv_pp_occupancy<U, NC>(), 0);
    cu_launch(S, name, kernel_mmv_q8_pp<U, NC>, dim3(blocks), dim3(MMV_WARPS * 32), 0, *a);
}

/* ---- Variant "xs" (x-stationary persistent warps) ----
 * Counting the L1 traffic of v1 per q4_K row of 4096: 2.3 KB of weights, but each
 * lane also reads its 64 activations as four 16-byte loads 64 bytes apart (25% of
 * every 128-byte line used), about 190 L1 wavefronts per row in all, which caps
 * the SM at ~3.2 TB/s before anything else. Here the grid is persistent (what fits
 * at once) and lane l of a warp always takes the same units l, l+32, ... of every
 * row it visits, so it loads its activations (U::X) once per kernel into registers
 * and then only streams weights: warp g takes rows g, g+W, g+2W, ... (W = all
 * warps; the machine reads one contiguous band of rows at a time) and keeps the
 * next row's weights in flight in a second register set while it reduces the
 * current one. UPL = units per lane (a row has at most 32*UPL units); the sums are
 * v1's in v1's order, so the results are bit-identical. One column only. */
/* The x-stationary kernels (xs, xs2, xst; the lab's chain) give lane l of a warp the
 * units u0 + l + 32k (k < UPL) of a row that lie before u0 + nh: u0 = 0, nh = nu
 * for a whole row, a half for xs2. The lane's weights of those units from a row
 * (L: global or a shared-memory slot), its activations, and its part of the dot. */
template <typename U, int UPL, class L>
static __device__ __forceinline__ void mmv_lane_load(const uint8_t *row, int nb, int u0, int nh, int lane,
                                                     typename U::W *w) {
#pragma unroll
    for (int k = 0; k < UPL; k++) {
        const int j = lane + 32 * k;
        if (j < nh) U::template load<L>(row, nb, u0 + j, w[k]);
    }
}
/* Units with a lane-major activation copy (U::XL, U::xl, U::loadx_lane; common.cuh
 * says why) read only that: every q8 the backend hands a GEMV has it (the writers
 * q8_store4/q8_store1 make it), and without the plain path beside it xstm keeps 118
 * registers instead of 128 (ptxas, sm_90a). The other units read the plain layout.
 * The lane loads are plain ld.global, not the read-only path: the kernel before
 * writes these bytes while this grid is already resident (PDL), which ld.global.nc
 * does not allow (the data must not change during the kernel), and on the synthetic
 * 1B under xs it returned stale bytes (greedy diverged at the first decode step;
 * correct with PDL off and on the ring kernels; 2026-11-30). griddepcontrol.wait
 * makes the kernel before's writes visible to plain loads after it. */
template <typename U, typename = void>
struct mmv_has_xl {
    static constexpr bool value = false;
};
template <typename U>
struct mmv_has_xl<U, decltype((void)U::XL, void())> {
    static constexpr bool value = true;
};
template <typename U, int UPL>
static __device__ __forceinline__ void mmv_lane_loadx(const cu_q8 &q, int u0, int nh, int lane, typename U::X *x) {
#pragma unroll
    for (int k = 0; k < UPL; k++) {
        const int j = lane + 32 * k;
        if (j >= nh) {
            x[k] = {}; /* (read by ring_units' dropped dots) */
            continue;
        }
        if constexpr (mmv_has_xl<U>::value) U::loadx_lane(U::xl(q), u0 + j, x[k]); /* (never NULL: above) */
        else U::loadx(q, 0, u0 + j, x[k]);
    }
}
template <typename U, int UPL>
static __device__ __forceinline__ float mmv_lane_dot(const typename U::W *w, const typename U::X *x, int u0, int nh,
                                                     int lane) {
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < UPL; k++) {
        const int j = lane + 32 * k;
        if (j < nh) acc += U::dotx(w[k], x[k], u0 + j);
    }
    return acc;
}

template <typename U, int UPL>
static __device__ __forceinline__ void mmv_xs_load(const cu_mmv_args &a, int g, int nb, int nu, int lane,
                                                   typename U::W *w) {
    int m, r;
    mmv_lane_load<U, UPL, ld_g>(mmv_row(a, g, &m, &r), nb, 0, nu, lane, w);
}

template <typename U, int UPL>
static __global__ void __launch_bounds__(MMV_WARPS * 32) kernel_mmv_xs(cu_mmv_args a) {
    pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int gw = blockIdx.x * MMV_WARPS + (threadIdx.x >> 5);
    const int W = gridDim.x * MMV_WARPS;
    const int total = mmv_total(a);
    if (gw >= total) return;
    const int n = (total - gw + W - 1) / W;
    const int nb = a.K / U::QK;
    const int nu = nb * U::UPB;
    typename U::W A[UPL], B[UPL];
    mmv_xs_load<U, UPL>(a, gw, nb, nu, lane, A);  /* weights: before the wait */
    pdl_wait();
    typename U::X x[UPL];
    mmv_lane_loadx<U, UPL>(a.q, 0, nu, lane, x);
    mmv_keep keep;
    for (int i = 0; i < n; i += 2) {
        if (i + 1 < n) mmv_xs_load<U, UPL>(a, gw + (i + 1) * W, nb, nu, lane, B);
        keep.put(a, i, n, gw, W, lane, warp_sum(mmv_lane_dot<U, UPL>(A, x, 0, nu, lane)));
        if (i + 1 >= n) break;
        if (i + 2 < n) mmv_xs_load<U, UPL>(a, gw + (i + 2) * W, nb, nu, lane, A);
        keep.put(a, i + 1, n, gw, W, lane, warp_sum(mmv_lane_dot<U, UPL>(B, x, 0, nu, lane)));
    }
    trace_end();
}

template <typename U, int UPL>
static int mmv_xs_occupancy() {
    static int per_sm;
    if (!per_sm) per_sm = mmv_occupancy(kernel_mmv_xs<U, UPL>, MMV_WARPS * 32);
    return per_sm;
}
template <typename U>
static void mmv_xs_prepare() {
    mmv_xs_occupancy<U, 1>();
    mmv_xs_occupancy<U, 2>();
    mmv_xs_occupancy<U, 4>();
}
/* Units per lane the xs kernel is built for (0: v1 takes the launch). */
static inline int mmv_xs_upl(int nu, int ncols) {
    if (ncols != 1) return 0;
    return nu <= 32 ? 1 : nu <= 64 ? 2 : nu <= 128 ? 4 : 0;
}
template <typename U, int UPL>
static void mmv_xs_launch(cu_ctx *S, const cu_mmv_args *a, const char *name, int per_sm_cap) {
    const int blocks = mmv_persist_blocks(S, a, MMV_WARPS, mmv_xs_occupancy<U, UPL>(), per_sm_cap);
    cu_launch(S, name, kernel_mmv_xs<U, UPL>, dim3(blocks), dim3(MMV_WARPS * 32), 0, *a);
}

/* ---- Schedule "xs2" (rows of 129..256 units, e.g. the 11008-wide
 * ffn_down, which xs cannot hold, where 3 of its blocks fit per SM and path wide-ring is off) ----
 * xs with a row split between the two warps of a pair: warp h of the pair holds the
 * activations of units [h*hu, h*hu + hu) (hu = half the row, rounded up) for every
 * row it visits and streams those weights (double-buffered); the pair meets on a
 * named barrier per row, where warp 0 adds warp 1's partial (through shared memory,
 * two slots used in turn) and writes the row. Not bit-identical to v1 (two partial
 * sums per row). One column. */
template <typename U, int UPL>
static __device__ __forceinline__ void mmv_xs2_load(const cu_mmv_args &a, int g, int nb, int u0, int nh, int lane,
                                                    typename U::W *w) {
    int m, r;
    mmv_lane_load<U, UPL, ld_g>(mmv_row(a, g, &m, &r), nb, u0, nh, lane, w);
}
template <typename U, int UPL>
static __device__ __forceinline__ void mmv_xs2_row(const cu_mmv_args &a, int g, int i, int u0, int nh, int lane,
                                                   int half, int pair, float (*part)[2],
                                                   const typename U::W *w, const typename U::X *x) {
    const float acc = warp_sum(mmv_lane_dot<U, UPL>(w, x, u0, nh, lane));
    if (half == 1 && lane == 0) part[pair][i & 1] = acc;
    asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
    if (half == 0 && lane == 0) {
        int m, r;
        mmv_row(a, g, &m, &r);
        const float v = acc + part[pair][i & 1];
        mmv_store<1>(a, m, r, &v);
    }
}

/* A warp of a kernel with NW warps per block that splits each row between the two
 * warps of a pair (xs2, xst2): its lane, its half of the row, its pair in the block,
 * the pair's place gp among the grid's P pairs and its rows gp, gp + P, ... below the
 * launch's total: rows() of them, asked only where idle() is false. An idle pair leaves
 * whole (both warps), so no barrier of the pair is left waiting. */
template <int NW>
struct mmv_pair_warp {
    int lane, half, pair, gp, P, total;
    __device__ __forceinline__ explicit mmv_pair_warp(const cu_mmv_args &a) {
        const int warp = threadIdx.x >> 5;
        lane = threadIdx.x & 31;
        half = warp & 1;
        pair = warp >> 1;
        gp = blockIdx.x * (NW / 2) + pair;
        P = gridDim.x * (NW / 2);
        total = mmv_total(a);
    }
    __device__ __forceinline__ bool idle() const { return gp >= total; }
    __device__ __forceinline__ int rows() const { return (total - gp + P - 1) / P; }
};

template <typename U, int UPL>
static __global__ void __launch_bounds__(MMV_WARPS * 32) kernel_mmv_xs2(cu_mmv_args a) {
    __shared__ float part[MMV_WARPS / 2][2];
    pdl_trigger();
    const mmv_pair_warp<MMV_WARPS> pw(a);
    if (pw.idle()) return;
    const int lane = pw.lane, half = pw.half, pair = pw.pair, gp = pw.gp, P = pw.P, n = pw.rows();
    const int nb = a.K / U::QK;
    const int nu = nb * U::UPB;
    const int hu = (nu + 1) / 2;
    const int u0 = half * hu, nh = half ? nu - hu : hu;
    typename U::W A[UPL], B[UPL];
    mmv_xs2_load<U, UPL>(a, gp, nb, u0, nh, lane, A);  /* weights: before the wait */
    pdl_wait();
    typename U::X x[UPL];
    mmv_lane_loadx<U, UPL>(a.q, u0, nh, lane, x);
    for (int i = 0; i < n; i += 2) {
        if (i + 1 < n) mmv_xs2_load<U, UPL>(a, gp + (i + 1) * P, nb, u0, nh, lane, B);
        mmv_xs2_row<U, UPL>(a, gp + i * P, i, u0, nh, lane, half, pair, part, A, x);
        if (i + 1 >= n) break;
        if (i + 2 < n) mmv_xs2_load<U, UPL>(a, gp + (i + 2) * P, nb, u0, nh, lane, A);
        mmv_xs2_row<U, UPL>(a, gp + (i + 1) * P, i + 1, u0, nh, lane, half, pair, part, B, x);
    }
}

template <typename U, int UPL>
static int mmv_xs2_occupancy() {
    static int per_sm;
    if (!per_sm) per_sm = mmv_occupancy(kernel_mmv_xs2<U, UPL>, MMV_WARPS * 32);
    return per_sm;
}
template <typename U>
static void mmv_xs2_prepare() {
    mmv_xs2_occupancy<U, 3>();
    mmv_xs2_occupancy<U, 4>();
}
/* Units per lane of xs2 for a row of nu units (0: it does not take the row). */
static inline int mmv_xs2_upl(int nu, int ncols) {
    if (ncols != 1 || nu <= 128 || nu > 256) return 0;
    return (nu + 1) / 2 <= 96 ? 3 : 4;
}
template <typename U, int UPL>
static void mmv_xs2_launch(cu_ctx *S, const cu_mmv_args *a, const char *name, int per_sm_cap) {
    const int blocks = mmv_persist_blocks(S, a, MMV_WARPS / 2, mmv_xs2_occupancy<U, UPL>(), per_sm_cap);
    cu_launch(S, name, kernel_mmv_xs2<U, UPL>, dim3(blocks), dim3(MMV_WARPS * 32), 0, *a);
}

/* ---- Schedule "xst" (sm_90+; launches of cu_tune.xst_bytes or more, path tma-ring) ----
 * xs with the weights streamed through a per-warp ring of row slots in shared
 * memory, filled by the Tensor Memory Accelerator (cp.async.bulk, completion
 * counted in bytes on the slot's mbarrier), so the bytes in flight per SM are
 * bounded by shared memory instead of registers. Rows as in xs (g, g+W, ...); the
 * first `depth` rows of every warp are requested around pdl_wait() (ring_first_rows); a slot is
 * refilled as soon as its row is reduced. */
static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
/* The barrier's arrival, telling it the bytes to expect (once per phase; a run of copies
 * on one barrier tells it their total), and a bulk copy that completes on it. */
static __device__ __forceinline__ void tma_expect(uint64_t *bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
#endif
}
static __device__ __forceinline__ void tma_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#if MINFER_CUDA_L2_HINT
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
            smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(l2_stream_policy())
        : "memory");
#else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
#endif
}
/* (the same copy without the streamed-weight L2 policy: for activations, which every block reads) */
static __device__ __forceinline__ void tma_copy_plain(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
}
static __device__ __forceinline__ void tma_row(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    tma_expect(bar, bytes);
    tma_copy(dst, src, bytes, bar);
}
static __device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t phase) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(phase)
                     : "memory");
#endif
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
/* One thread initialises a warp's n ring barriers, before the ring's first request. */
static __device__ __forceinline__ void mbar_init_ring(uint64_t *bar, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    for (int s = 0; s < n; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar + s)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
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

template <typename U, int UPL, bool PAIR = false>
static __global__ void __launch_bounds__(MMV_XST_WARPS * 32) kernel_mmv_xst(cu_mmv_args a, int depth) {
    pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t xst_smem[];
    /* (xst_warp_init below computes the same; written out here because through it
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
/* Lets kernel k take up to cap bytes of dynamic shared memory, or the device's per-block
 * opt-in limit (less 1 KB for static shared memory) where that is lower. Returns the
 * limit, 0 if refused. The rings ask for MMV_XST_SMEM_MAX (two blocks must fit in an
 * SM), kernel_mmv_cols for all the device allows. */
template <class K>
static int mmv_smem_attr(K k, int cap) {
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    const int lim = optin - 1024 < cap ? optin - 1024 : cap;
    if (lim <= 0 || cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, lim) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return lim;
}
/* The ring limit of ring kernel K (set once, ahead of any capture). */
template <auto K>
static int mmv_ring_limit() {
    static int lim = -1;
    if (lim < 0) lim = mmv_smem_attr(K, MMV_XST_SMEM_MAX);
    return lim;
}
/* The ring depth a launch gets: want rows (cu_xst_depth; xsg's cu_xsg_depth), fewer where
 * nrings rings of them would pass lim; 0 when not even 2 rows fit. */
static inline int mmv_ring_depth(int want, int nrings, int64_t stride, int lim) {
    int depth = want;
    while (depth >= 2 && mmv_ring_smem(nrings, depth, stride) > (size_t)lim) depth--;
    return depth >= 2 ? depth : 0;
}
/* Resident blocks per SM of ring kernel K at `threads` threads and smem bytes of dynamic
 * shared memory, looked up once per size (the first, eager step comes before the decode
 * graph's capture, which then finds it here); 0 when none fit or the runtime cannot say. */
template <auto K>
static int mmv_ring_per_sm(int threads, size_t smem) {
    static size_t known_smem[4];
    static int known_per_sm[4], nknown;
    for (int i = 0; i < nknown; i++)
        if (known_smem[i] == smem) return known_per_sm[i];
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, K, threads, smem) != cudaSuccess || per_sm < 1) {
        (void)cudaGetLastError();
        return 0;
    }
    if (nknown < 4) {
        known_smem[nknown] = smem;
        known_per_sm[nknown++] = per_sm;
    }
    return per_sm;
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
 * it asking for all its ring rows before its wait (backend_cuda.cu, xst_pre_swiglu).
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

/* One-column rows of 129..256 units: xst2 first on sm_90+ (for launches xst would take,
 * path wide-ring), else xs2 where it fits 3 blocks per SM, else pp (mmv_q8_launch). */

/* ---- "cols": 2..8 columns (one token of each of several sequences, short prompts;
 * path gemv-cols, else v1) ----
 * v1 (one row per warp) reads each column's activations from the L1/L2 again for every
 * row: 80 bytes a q4_K unit and column against its 48 bytes of weights, so at 8 columns
 * the step ran at 0.37 TB/s of weights (tg128@s8 on the 7B q4_k_m, H200, 2026-12-02:
 * 772 tok/s aggregate, 1.05x one sequence; bench/RESULTS.md). Here each persistent
 * block copies the ncols x K q8 activations into shared memory once, after its wait (the
 * lane-major copy where the unit has one: mmv_cols_smem), and
 * each warp takes two rows at a time (g and g + the grid's warps), so one load of a
 * unit's activations serves both rows. Each row's units are summed per lane in v1's
 * order, so the results are v1's bits. */
#define MMV_COLS_WARPS 16
/* Shared memory of a block: the lane-major copy of the ncols x K activations for units
 * that have one (q4_K, q5_K, q6_K: each lane's 16-byte loads then fall on consecutive
 * banks; from the plain layout, lanes 64 bytes apart, each load took 4 times the
 * wavefronts), else the plain codes, scales and sums. */
template <typename U>
static __host__ __device__ __forceinline__ size_t mmv_cols_smem(int ncols, int K) {
    const size_t n = (size_t)ncols * K;
    if constexpr (mmv_has_xl<U>::value) return cu_xl_bytes((int64_t)n);
    return ((n + 15) & ~(size_t)15) + n / 32 * 4 + n / 16 * 4;
}
template <typename U, int NC>
static __global__ void __launch_bounds__(MMV_COLS_WARPS * 32) kernel_mmv_cols(cu_mmv_args a) {
    extern __shared__ __align__(16) uint8_t cols_sm[];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int K = a.K, nb = K / U::QK, nu = nb * U::UPB;
    const int total = mmv_total(a), W = gridDim.x * MMV_COLS_WARPS;
    const int n = a.ncols * K;
    int8_t *sq = (int8_t *)cols_sm;
    float *sd = (float *)(cols_sm + ((n + 15) & ~15));
    float *ss = sd + n / 32;
    pdl_wait();
    if constexpr (mmv_has_xl<U>::value) {
        const int nx = (int)cu_xl_bytes(n);
        const uint8_t *src = U::xl(a.q);
        for (int i = threadIdx.x * 16; i < nx; i += blockDim.x * 16) *(int4 *)(cols_sm + i) = *(const int4 *)(src + i);
    } else {
        for (int i = threadIdx.x * 16; i < n; i += blockDim.x * 16) *(int4 *)(sq + i) = *(const int4 *)(a.q.qs + i);
        for (int i = threadIdx.x; i < n / 32; i += blockDim.x) sd[i] = a.q.d[i];
        for (int i = threadIdx.x; i < n / 16; i += blockDim.x) ss[i] = a.q.s[i];
    }
    __syncthreads();
    cu_q8 q = {sq, sd, ss, NULL, NULL};
    for (int g = blockIdx.x * MMV_COLS_WARPS + warp; g < total; g += 2 * W) {
        const int g2 = g + W;
        const bool two = g2 < total;
        int m0, r0, m1 = 0, r1 = 0;
        const uint8_t *row0 = mmv_row(a, g, &m0, &r0);
        const uint8_t *row1 = two ? mmv_row(a, g2, &m1, &r1) : row0;
        float acc0[NC], acc1[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) acc0[c] = acc1[c] = 0.0f;
        for (int u0 = 0; u0 < nu; u0 += 32 * U::UNR) {
            typename U::W w0[U::UNR], w1[U::UNR];
#pragma unroll
            for (int k = 0; k < U::UNR; k++) {
                const int u = u0 + lane + 32 * k;
                if (u < nu) {
                    U::template load<ld_g>(row0, nb, u, w0[k]);
                    if (two) U::template load<ld_g>(row1, nb, u, w1[k]);
                }
            }
#pragma unroll
            for (int k = 0; k < U::UNR; k++) {
                const int u = u0 + lane + 32 * k;
                if (u < nu) {
#pragma unroll
                    for (int c = 0; c < NC; c++)
                        if (c < a.ncols) {
                            typename U::X x;
                            if constexpr (mmv_has_xl<U>::value) U::loadx_lane(cols_sm, c * nu + u, x);
                            else U::template loadx<ld_s>(q, (int64_t)c * K, u, x);
                            acc0[c] += U::dotx(w0[k], x, u);
                            if (two) acc1[c] += U::dotx(w1[k], x, u);
                        }
                }
            }
        }
#pragma unroll
        for (int c = 0; c < NC; c++) {
            acc0[c] = warp_sum(acc0[c]);
            acc1[c] = warp_sum(acc1[c]);
        }
        if (lane == 0) {
            mmv_store<NC>(a, m0, r0, acc0);
            if (two) mmv_store<NC>(a, m1, r1, acc1);
        }
    }
}
/* kernel_mmv_cols' shared-memory limit: all the device allows (set once, ahead of any
 * capture). */
template <auto K>
static int mmv_cols_limit() {
    static int lim = -1;
    if (lim < 0) lim = mmv_smem_attr(K, INT_MAX);
    return lim;
}
template <typename U>
static void mmv_cols_prepare() {
    mmv_cols_limit<kernel_mmv_cols<U, 2>>();
    mmv_cols_limit<kernel_mmv_cols<U, 4>>();
    mmv_cols_limit<kernel_mmv_cols<U, 8>>();
}
template <typename U, int NC>
static int mmv_cols_launch_nc(cu_ctx *S, const cu_mmv_args *a, const char *name) {
    const size_t smem = mmv_cols_smem<U>(a->ncols, a->K);
    if (smem > (size_t)mmv_cols_limit<kernel_mmv_cols<U, NC>>()) return 0;
    const int per_sm = mmv_ring_per_sm<kernel_mmv_cols<U, NC>>(MMV_COLS_WARPS * 32, smem);
    if (per_sm < 1) return 0;
    const int blocks = mmv_persist_blocks(S, a, 2 * MMV_COLS_WARPS, per_sm, S->tune.gemv_per_sm);
    cu_launch(S, name, kernel_mmv_cols<U, NC>, dim3(blocks), dim3(MMV_COLS_WARPS * 32), smem, *a);
    S->n.cols++;
    return 1;
}
/* 2..8 columns on kernel_mmv_cols where path gemv-cols is on and the activations fit in
 * shared memory; 0 when it does not take the launch. */
template <typename U>
static int mmv_cols_launch(cu_ctx *S, const cu_mmv_args *a, const char *name) {
    if (!S->on[CU_PATH_GEMV_COLS] || a->ncols < 2 || a->ncols > 8 || a->K % 32) return 0;
    if (a->ncols <= 2) return mmv_cols_launch_nc<U, 2>(S, a, name);
    if (a->ncols <= 4) return mmv_cols_launch_nc<U, 4>(S, a, name);
    return mmv_cols_launch_nc<U, 8>(S, a, name);
}

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

#define M4 0x0F0F0F0Fu

#endif

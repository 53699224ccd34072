/* mmv_core.cuh - what the decode GEMV schedules share: the stacked launch's rows
 * (mmv_row, mmv_total), a unit's dot (mmv_dot), one row's store (mmv_store; mmv_keep in
 * the x-stationary kernels), the launch policy read from the context, a lane's units in
 * the x-stationary kernels (mmv_lane_load, mmv_lane_loadx, mmv_lane_dot), the pair of
 * warps that splits a row (mmv_pair_warp: xs2, xst2), and the host side of persistent
 * grids (blocks per SM, grid size, the shared-memory attribute). The schedules are one
 * header each or per family (mmv.cuh lists them and holds the dispatch policy). */
#ifndef MINFER_CUDA_MMV_CORE_CUH
#define MINFER_CUDA_MMV_CORE_CUH

#include "mmv_unit.cuh"

#define MMV_WARPS 4

/* The launch policy, read from the context (common.cuh cu_ctx): launches of at least
 * xst_bytes weight bytes take the TMA ring (path tma-ring; the backend sets -1 where the
 * device runs no sm_90 code or its shared memory cannot hold the ring); wide rows take
 * xst2 there (path wide-ring), else xs2 where 3 of its blocks fit on an SM, else pp;
 * tune.gemv_per_sm caps the persistent grids' blocks per SM (0: what fits). */
static inline int64_t mmv_xst_bytes(const cu_ctx *S) { return S->on[CU_PATH_TMA_RING] ? S->tune.xst_bytes : -1; }
static inline int mmv_wide_ring(const cu_ctx *S) { return S->on[CU_PATH_WIDE_RING] && mmv_xst_bytes(S) >= 0; }

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

#endif

/* mmv_cols.cuh - kernel_mmv_cols: the GEMV over 2..8 columns (path gemv-cols), the
 * columns' activations staged once per block in shared memory, two rows a warp. */
#ifndef MINFER_CUDA_MMV_COLS_CUH
#define MINFER_CUDA_MMV_COLS_CUH

#include "mmv_core.cuh"

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
    static int lim[CU_MAX_DEVICES], known[CU_MAX_DEVICES]; /* (per device: common.cuh) */
    const int d = cu_cur_device();
    if (!known[d]) lim[d] = mmv_smem_attr(K, INT_MAX), known[d] = 1;
    return lim[d];
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

#endif

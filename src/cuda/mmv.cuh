/* mmv.cuh - decode GEMV framework: out[c][r] = sum_k W[r][k] * x[c][k] for
 * c < ncols <= 8, several matrices of one type and width per launch.
 *
 * One warp per output row. A row is cut into *units* (the bytes one lane decodes
 * at once: 16-48 bytes of weights read with 16-byte loads); lane l takes units
 * l, l+32, ... so a warp streams the row front to back with coalesced loads and
 * reads every weight byte once. Activations come pre-quantized to q8 (common.cuh)
 * and are read through L1 (every warp of an SM reads the same vector); the dots
 * are integer dp4a, scaled once per sub-block.
 *
 * Under programmatic dependent launch the first UNR units of weights are loaded
 * before pdl_wait(): weight fetch overlaps the previous kernel's tail.
 *
 * A unit type U provides:
 *   QK, UPB        values per block, units per block
 *   UNR            units per lane in flight
 *   struct W       the registers of one unit
 *   load(row, nb, u, W&)                 weights only (may run before pdl_wait)
 *   dot(W, row, nb, u, q, xoff) -> float one column, xoff = c * K */
#ifndef MINFER_CUDA_MMV_CUH
#define MINFER_CUDA_MMV_CUH

#include "common.cuh"

#define MMV_WARPS 4

static __device__ __forceinline__ int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    return c;
#endif
}
static __device__ __forceinline__ uint4 ldg16(const void *p) { return __ldg((const uint4 *)p); }
static __device__ __forceinline__ int4 ldx16(const int8_t *p) { return __ldg((const int4 *)p); }

template <typename U, int NC>
static __global__ void __launch_bounds__(MMV_WARPS * 32) kernel_mmv_q8(cu_mmv_args a) {
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* global row -> (matrix m, row r); selects, not indexing, keep the
     * parameter arrays out of local memory */
    int r = blockIdx.x * MMV_WARPS + warp;
    int m = 0;
    if (a.nmat > 1 && r >= a.rows[0]) {
        r -= a.rows[0];
        m = 1;
        if (a.nmat > 2 && r >= a.rows[1]) {
            r -= a.rows[1];
            m = 2;
        }
    }
    const int rows_m = m == 0 ? a.rows[0] : m == 1 ? a.rows[1] : a.rows[2];
    if (r >= rows_m) return;
    const uint8_t *wm = m == 0 ? a.w[0] : m == 1 ? a.w[1] : a.w[2];
    const uint8_t *row = wm + (int64_t)r * a.stride;
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
            if (u < nu) U::load(row, nb, u, wr[k]);
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
                    if (c < a.ncols) acc[c] += U::dot(wr[k], row, nb, u, a.q, (int64_t)c * K);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = warp_sum(acc[c]);
    if (lane == 0) {
        const float *bias = m == 0 ? a.bias[0] : m == 1 ? a.bias[1] : a.bias[2];
        float *o = m == 0 ? a.out[0] : m == 1 ? a.out[1] : a.out[2];
        const float bv = bias ? bias[r] : 0.0f;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (c < a.ncols) o[(int64_t)c * rows_m + r] = acc[c] + bv;
    }
}

template <typename U>
static void mmv_q8_launch(cu_state *S, const cu_mmv_args *a, const char *name) {
    int total = 0;
    for (int i = 0; i < a->nmat; i++) total += a->rows[i];
    dim3 grid((total + MMV_WARPS - 1) / MMV_WARPS), block(MMV_WARPS * 32);
    if (a->ncols <= 1) cu_launch(S, name, kernel_mmv_q8<U, 1>, grid, block, 0, *a);
    else if (a->ncols <= 2) cu_launch(S, name, kernel_mmv_q8<U, 2>, grid, block, 0, *a);
    else if (a->ncols <= 4) cu_launch(S, name, kernel_mmv_q8<U, 4>, grid, block, 0, *a);
    else cu_launch(S, name, kernel_mmv_q8<U, 8>, grid, block, 0, *a);
}

#define M4 0x0F0F0F0Fu

#endif

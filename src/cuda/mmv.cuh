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

/* Measured (tg128, 7B q4_k_m, H200, 2026-11-29): this one-row-per-warp form,
 * 400 tok/s for the whole step; a persistent grid-stride variant that prefetched
 * the next chunk into a second register set (cur = nxt at the end of each
 * iteration) ran 369 tok/s with the rest unchanged: the register copy waits for
 * the prefetch to land, so it only lost the warps it capped away. A real
 * ping-pong (two unrolled buffers, no copy) is the next thing to try. */
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

/* ---- Variant "pp" (MINFER_CUDA_GEMV_PP=1; not yet measured, so not the default) ----
 * Persistent grid (what fits on the device at once): each warp walks its rows
 * (g, g+W, ...) in chunks of 32*UNR units with two register sets used in turn:
 * chunk i+1 is loaded into the other set before chunk i is computed, so a warp
 * always has a chunk in flight and the blocks never drain between rows (the
 * waves of one-row warps leave the memory idle between them: 1.2-2.0 TB/s). No
 * register copy between the sets: a copy would wait for the prefetch to land. */
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
        if (u < nu) U::load(row, nb, u, buf[k]);
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
                if (c < a.ncols) acc[c] += U::dot(buf[k], row, nb, u, a.q, (int64_t)c * a.K);
        }
    }
    if (ch == nch - 1) {
#pragma unroll
        for (int c = 0; c < NC; c++) acc[c] = warp_sum(acc[c]);
        if (lane == 0) {
            const float *bias = m == 0 ? a.bias[0] : m == 1 ? a.bias[1] : a.bias[2];
            float *o = m == 0 ? a.out[0] : m == 1 ? a.out[1] : a.out[2];
            const int rows_m = m == 0 ? a.rows[0] : m == 1 ? a.rows[1] : a.rows[2];
            const float bv = bias ? bias[r] : 0.0f;
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (c < a.ncols) o[(int64_t)c * rows_m + r] = acc[c] + bv;
        }
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
    const int total = a.rows[0] + (a.nmat > 1 ? a.rows[1] : 0) + (a.nmat > 2 ? a.rows[2] : 0);
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

int cu_num_sms(const cu_state *S);
int cu_gemv_pp(const cu_state *S);

template <typename U, int NC>
static int mmv_pp_occupancy() {
    static int per_sm;
    if (!per_sm) {
        int nb = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel_mmv_q8_pp<U, NC>, MMV_WARPS * 32, 0) !=
                cudaSuccess ||
            nb <= 0) {
            (void)cudaGetLastError();
            nb = 4;
        }
        per_sm = nb > 8 ? 8 : nb;
    }
    return per_sm;
}

/* Occupancy lookups ahead of any graph capture (called at init when the variant is on). */
template <typename U>
static void mmv_pp_prepare() {
    mmv_pp_occupancy<U, 1>();
    mmv_pp_occupancy<U, 2>();
    mmv_pp_occupancy<U, 4>();
    mmv_pp_occupancy<U, 8>();
}

template <typename U, int NC>
static void mmv_pp_launch(cu_state *S, const cu_mmv_args *a, const char *name) {
    int total = 0;
    for (int i = 0; i < a->nmat; i++) total += a->rows[i];
    int blocks = (total + MMV_WARPS - 1) / MMV_WARPS;
    const int cap = mmv_pp_occupancy<U, NC>() * cu_num_sms(S);
    if (blocks > cap) blocks = cap;
    cu_launch(S, name, kernel_mmv_q8_pp<U, NC>, dim3(blocks), dim3(MMV_WARPS * 32), 0, *a);
}

template <typename U>
static void mmv_q8_launch(cu_state *S, const cu_mmv_args *a, const char *name) {
    if (cu_gemv_pp(S)) {
        if (a->ncols <= 1) mmv_pp_launch<U, 1>(S, a, name);
        else if (a->ncols <= 2) mmv_pp_launch<U, 2>(S, a, name);
        else if (a->ncols <= 4) mmv_pp_launch<U, 4>(S, a, name);
        else mmv_pp_launch<U, 8>(S, a, name);
        return;
    }
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

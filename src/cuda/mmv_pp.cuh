/* mmv_pp.cuh - the two GEMV schedules that read the activations afresh for every row
 * (mmv_dot): v1 (kernel_mmv_q8: one row per warp, one wave of short-lived blocks; 2..8
 * columns where kernel_mmv_cols does not take them) and pp (kernel_mmv_q8_pp: a
 * persistent grid with two register sets of weights in turn; one-column rows too wide
 * for xs). */
#ifndef MINFER_CUDA_MMV_PP_CUH
#define MINFER_CUDA_MMV_PP_CUH

#include "mmv_core.cuh"

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

#endif

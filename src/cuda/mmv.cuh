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
 *   load<L>(row, nb, u, W&)              weights only (may run before pdl_wait);
 *                                        L = ld_g (global, read-only path) or
 *                                        ld_s (a row already in shared memory)
 *   dot(W, row, nb, u, q, xoff) -> float one column, xoff = c * K
 *
 * Two kernels use the units: kernel_mmv_q8 (v1, below) and kernel_mmv_tma (the
 * TMA ring, sm_90+, further down). */
#ifndef MINFER_CUDA_MMV_CUH
#define MINFER_CUDA_MMV_CUH

#include "common.cuh"

#define MMV_WARPS 4

int cu_num_sms(const cu_state *S);

static __device__ __forceinline__ int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    return c;
#endif
}
static __device__ __forceinline__ int4 ldx16(const int8_t *p) { return __ldg((const int4 *)p); }

/* Weight loaders of the units: global memory through the read-only path, or a
 * row staged in shared memory (plain loads; the compiler emits LDS because the
 * pointer derives from the __shared__ ring). */
struct ld_g {
    static __device__ __forceinline__ uint4 u128(const uint8_t *p) { return __ldg((const uint4 *)p); }
    static __device__ __forceinline__ uint2 u64(const uint8_t *p) { return __ldg((const uint2 *)p); }
    static __device__ __forceinline__ uint32_t u32(const uint8_t *p) { return __ldg((const unsigned int *)p); }
    static __device__ __forceinline__ uint16_t u16(const uint8_t *p) { return __ldg((const unsigned short *)p); }
};
struct ld_s {
    static __device__ __forceinline__ uint4 u128(const uint8_t *p) { return *(const uint4 *)p; }
    static __device__ __forceinline__ uint2 u64(const uint8_t *p) { return *(const uint2 *)p; }
    static __device__ __forceinline__ uint32_t u32(const uint8_t *p) { return *(const uint32_t *)p; }
    static __device__ __forceinline__ uint16_t u16(const uint8_t *p) { return *(const uint16_t *)p; }
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
static __device__ __forceinline__ int mmv_total(const cu_mmv_args &a) {
    return a.rows[0] + (a.nmat > 1 ? a.rows[1] : 0) + (a.nmat > 2 ? a.rows[2] : 0);
}
/* Writes one finished row (lane 0): out[c][r] = acc[c] + bias[r]. */
template <int NC>
static __device__ __forceinline__ void mmv_store(const cu_mmv_args &a, int m, int r, const float *acc) {
    const float *bias = m == 0 ? a.bias[0] : m == 1 ? a.bias[1] : a.bias[2];
    float *o = m == 0 ? a.out[0] : m == 1 ? a.out[1] : a.out[2];
    const int rows_m = m == 0 ? a.rows[0] : m == 1 ? a.rows[1] : a.rows[2];
    const float bv = bias ? bias[r] : 0.0f;
#pragma unroll
    for (int c = 0; c < NC; c++)
        if (c < a.ncols) o[(int64_t)c * rows_m + r] = acc[c] + bv;
}

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
                    if (c < a.ncols) acc[c] += U::dot(wr[k], row, nb, u, a.q, (int64_t)c * K);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = warp_sum(acc[c]);
    if (lane == 0) mmv_store<NC>(a, m, r, acc);
}

/* ---- Variant "pp" (MINFER_CUDA_GEMV_PP=1; not yet measured, so not the default) ----
 * Persistent grid (what fits on the device at once): each warp walks its rows
 * (g, g+W, ...) in chunks of 32*UNR units with two register sets used in turn:
 * chunk i+1 is loaded into the other set before chunk i is computed, so a warp
 * always has a chunk in flight and the blocks never drain between rows (the
 * waves of one-row warps leave the memory idle between them: 1.2-2.0 TB/s). No
 * register copy between the sets: a copy would wait for the prefetch to land. */
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
                if (c < a.ncols) acc[c] += U::dot(buf[k], row, nb, u, a.q, (int64_t)c * a.K);
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

/* ---- Variant "tma" (sm_90+): weights streamed through a shared-memory ring ----
 * v1 keeps at most one row per warp in flight in registers, and a warp that
 * finishes leaves its slot idle until the next block is scheduled: the small
 * matrices run at 1.2-2.0 TB/s. Here the grid is persistent (one block per SM)
 * and every warp owns `depth` row slots in shared memory, filled by the Tensor
 * Memory Accelerator (cp.async.bulk: one instruction per row, completion counted
 * in bytes on the slot's mbarrier). Warp w of block b takes rows g, g+W, g+2W, ...
 * (g = b*nw + w, W = all warps), so at any moment the machine reads one contiguous
 * band of rows. The first `depth` rows of every warp are requested before
 * pdl_wait(): under PDL the whole first band (nw*depth rows per SM, up to the ring
 * budget) streams in while the previous kernel drains. A slot is refilled as soon
 * as its row is reduced, so each warp keeps depth-1 rows in flight while it
 * computes. The arithmetic per row is v1's (same units, same order), so the
 * results are bit-identical to v1. */
static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void tma_row(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
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

#define MMV_TMA_MAXW 8

/* Shared memory of one block: nw*depth barriers, then the slots (128-aligned). */
static inline size_t mmv_tma_smem(int nw, int depth, int64_t stride) {
    return (((size_t)nw * depth * 8 + 127) & ~(size_t)127) + (size_t)nw * depth * (size_t)stride;
}

template <typename U, int NC>
static __global__ void __launch_bounds__(MMV_TMA_MAXW * 32) kernel_mmv_tma(cu_mmv_args a, int depth) {
    pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t tma_smem[];
    const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int total = mmv_total(a);
    const int W = gridDim.x * nw, gw = blockIdx.x * nw + warp;
    if (gw >= total) return;
    const int n = (total - gw + W - 1) / W;  /* rows of this warp */
    const int64_t stride = a.stride;
    uint64_t *bar = (uint64_t *)tma_smem + warp * depth;
    uint8_t *slot0 = tma_smem + (((size_t)nw * depth * 8 + 127) & ~(size_t)127) + (size_t)warp * depth * stride;
    if (lane == 0) {
        for (int s = 0; s < depth; s++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar + s)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int i = 0; i < depth && i < n; i++) {
            int m, r;
            tma_row(slot0 + (size_t)i * stride, mmv_row(a, gw + i * W, &m, &r), (uint32_t)stride, bar + i);
        }
    }
    __syncwarp();
    pdl_wait();
    const int K = a.K;
    const int nb = K / U::QK;
    const int nu = nb * U::UPB;
    for (int i = 0; i < n; i++) {
        const int s = i % depth;
        mbar_wait(bar + s, (uint32_t)(i / depth) & 1u);
        const uint8_t *row = slot0 + (size_t)s * stride;
        float acc[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) acc[c] = 0.0f;
        for (int u0 = 0; u0 < nu; u0 += 32 * U::UNR) {
            typename U::W wr[U::UNR];
#pragma unroll
            for (int k = 0; k < U::UNR; k++) {
                const int u = u0 + lane + 32 * k;
                if (u < nu) U::template load<ld_s>(row, nb, u, wr[k]);
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
        for (int c = 0; c < NC; c++) acc[c] = warp_sum(acc[c]);  /* every lane's slot reads are done */
        if (lane == 0) {
            int m, r;
            if (i + depth < n) {
                /* the slot was read through the generic proxy; order that before the
                 * async-proxy write that refills it */
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                tma_row(slot0 + (size_t)s * stride, mmv_row(a, gw + (i + depth) * W, &m, &r), (uint32_t)stride,
                        bar + s);
            }
            mmv_row(a, gw + i * W, &m, &r);
            mmv_store<NC>(a, m, r, acc);
        }
        __syncwarp();
    }
#endif
}

/* Ring shape for a row stride and a budget of shared memory per block: up to 8
 * warps with at least 2 slots each. 0 when a row does not fit twice. */
static inline int mmv_tma_shape(int64_t stride, int budget, int *nw, int *depth) {
    if (stride <= 0 || stride > budget / 2) return 0;
    int w = (int)(budget / (2 * stride));
    if (w > MMV_TMA_MAXW) w = MMV_TMA_MAXW;
    int d = (int)(budget / ((int64_t)w * stride));
    if (d > 16) d = 16;
    *nw = w;
    *depth = d;
    return 1;
}

template <typename U, int NC>
static void mmv_tma_attr(int budget) {
    static int done;
    if (done >= budget) return;
    if (cudaFuncSetAttribute(kernel_mmv_tma<U, NC>, cudaFuncAttributeMaxDynamicSharedMemorySize, budget + 1024) ==
        cudaSuccess)
        done = budget;
    else
        (void)cudaGetLastError();
}
/* The attribute calls ahead of any graph capture (at init, when the variant is on). */
template <typename U>
static void mmv_tma_prepare(int budget) {
    mmv_tma_attr<U, 1>(budget);
    mmv_tma_attr<U, 2>(budget);
    mmv_tma_attr<U, 4>(budget);
    mmv_tma_attr<U, 8>(budget);
}

template <typename U, int NC>
static int mmv_tma_launch(cu_state *S, const cu_mmv_args *a, const char *name, int budget, int per_sm) {
    int nw, depth;
    if (!mmv_tma_shape(a->stride, budget, &nw, &depth)) return 0;
    mmv_tma_attr<U, NC>(budget);
    const int total = a->rows[0] + (a->nmat > 1 ? a->rows[1] : 0) + (a->nmat > 2 ? a->rows[2] : 0);
    int blocks = (total + nw - 1) / nw;
    const int cap = cu_num_sms(S) * per_sm;
    if (blocks > cap) blocks = cap;
    cu_launch(S, name, kernel_mmv_tma<U, NC>, dim3(blocks), dim3(nw * 32), mmv_tma_smem(nw, depth, a->stride), *a,
              depth);
    return 1;
}

/* The GEMV variant: 1 = v1 (one row per warp), 2 = pp (persistent ping-pong),
 * 3 = tma (shared-memory ring; needs sm_90+); with the ring's budget in bytes of
 * shared memory per block and blocks per SM. */
int cu_gemv_variant(const cu_state *S, int *tma_budget, int *tma_per_sm);

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
    int budget = 0, per_sm = 1;
    const int v = cu_gemv_variant(S, &budget, &per_sm);
    if (v == 3) {
        int ok;
        if (a->ncols <= 1) ok = mmv_tma_launch<U, 1>(S, a, name, budget, per_sm);
        else if (a->ncols <= 2) ok = mmv_tma_launch<U, 2>(S, a, name, budget, per_sm);
        else if (a->ncols <= 4) ok = mmv_tma_launch<U, 4>(S, a, name, budget, per_sm);
        else ok = mmv_tma_launch<U, 8>(S, a, name, budget, per_sm);
        if (ok) return;
        /* a row longer than half the ring: v1 (counted by the caller's notice) */
    }
    if (v == 2) {
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

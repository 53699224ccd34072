/* attn_wo.cu - the one-token decode attention fused with the o-projection (wo) and
 * the residual add after it: an EXPERIMENT, off unless MINFER_CUDA_ATTN_WO=1 (it measured
 * no faster, below). The backend takes it for the models the attention's fast store
 * takes (attn.cu, `fast`: one query head per kv head, head dim 128, RoPE of adjacent pairs
 * over the whole head, one sequence) when every wo is q4_K, and hands the sums to the
 * RMSNorm after it (norm.cu, cu_rmsnorm_acc); the notice says "+wo" when it is on.
 *
 * kernel_attn_wo: C blocks per head; block c of head h
 *   - before pdl_wait: requests its slice of wo into shared memory (rows c*R ..
 *     c*R + R - 1 and the head's 128 columns: per row the q4_K block header and the
 *     64 bytes of qs of the head's two 64-value groups, 80 bytes; one contiguous run of
 *     the wo plane, below, so a few bulk copies of the TMA), and the cache rows of
 *     its positions: position p is block (p / 2) % C's (2-row steps dealt round robin, so
 *     the C blocks share any context evenly); the first 16 C positions are read whatever
 *     pos is (pos is a round trip; rows at and past pos are zeroed once it is in), the
 *     rest of the first tile below pos. attn.cu (cu_attn_args.pre) says why reading
 *     cache rows and pos before the wait is safe;
 *   - after it: q, k, v rotated in registers (as kernel_attn_dec's fast store); the
 *     block that owns pos stores k, v there and uses them from shared memory; an online
 *     softmax per lane group over its rows, merged by shuffles, then across its warps;
 *   - the C partials (max, sum, 128 outputs) exchanged through global memory (a barrier
 *     of the head's C blocks on a counter; all blocks of the grid are resident at once,
 *     which the backend checks: cu_attn_wo_fits) and merged in the same order in every
 *     block, so each holds the head's output, bit-identical. (A cluster of the C blocks
 *     exchanging through distributed shared memory measured slower: its blocks started
 *     ~2.6 us after the q/k/v GEMV's end instead of ~0.7, bench/RESULTS.md);
 *   - that output quantized to q8 (q8_store1's 32-blocks), dotted with the slice by the
 *     GEMVs' q4_K unit (mmv_k45.cuh: the wo GEMV's sums per unit), and each row's partial
 *     (this head's share) added to acc[row] in 32.32 fixed point: integer addition
 *     does not depend on the order the heads' blocks arrive in, so the residual (and the
 *     tokens) do not vary from run to run, as a float atomicAdd would make them.
 * Why try: on the 7B the attention and the wo GEMV are two launches, ~5.3 and ~3.9 us a
 * layer (block timeline, bench/RESULTS.md), wo's 9.4 MB streamed after its wait; here the
 * slice is requested at the block's start, and wo's launch, boundary and activation round
 * trip are gone. Measured (tg128 on the 7B, H200, 2026-11-30, RESULTS.md calls 2-10):
 * 643-644 tok/s with C = 8, 643 with C = 4, against 677-680 with the two launches; with
 * clusters of C blocks exchanging through distributed shared memory, 657 (C = 4). What
 * holds it back, in the block timeline: its blocks start ~2 us after the q/k/v GEMV's
 * end and over ~3 us more (the attention's blocks start as that GEMV's leave), and the
 * head's barrier waits for the last; not the slice's bytes (from the plane) nor the
 * atomics (skipped: +0.4%).
 *
 * The wo plane (cu_attn_wo_plane, made at init): per layer [head][row][80 bytes], the
 * slices of the row layout side by side. Read from the row layout itself, the slice was
 * 5 requests of 16 bytes per row (5120 per block) and cost the step ~200 us of its
 * ~1.58 ms (tg128 on the 7B, H200, 2026-11-30, bench/RESULTS.md: 634 tok/s, 725 with the
 * slice and the dot skipped), from the L2 as from DRAM. The plane is a derived copy of
 * the weights (+11%: the block header once per head pair's half), reported apart. */
#include "attn_dec.cuh"
#include "mmv_k45.cuh"

#define AW_NW 8
#define AW_HD 128
#define AW_ROWB 80 /* bytes of one wo row's slice (the plane's, and in shared memory) */
#define AW_CHUNK 16384 /* bytes per bulk copy of the slice */

static __device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#endif
    return v;
}

template <int C>
static __global__ void __launch_bounds__(AW_NW * 32) kernel_attn_wo(cu_attn_wo_args w, float scale) {
    constexpr int HD = AW_HD, NW = AW_NW, NT = NW * 32;
    constexpr int LPP = HD / 8, PPW = 32 / LPP; /* 16 lanes per row, 2 rows per warp step */
    constexpr int SPT = 8;                      /* steps per tile (kr, vr: 64 registers) */
    constexpr int SPAN = SPT * NW * C * PPW;    /* positions per tile over the head's blocks */
    extern __shared__ __align__(16) uint8_t aw_slice[]; /* [R][AW_ROWB] */
    __shared__ float qs[HD];
    __shared__ float kvp[2][HD]; /* k (rotated) and v at pos, in the block that owns pos */
    __shared__ float ob[NW][HD];
    __shared__ float wm[NW], wl[NW];
    __shared__ __align__(16) int8_t xq[HD];
    __shared__ float xd[HD / 32], xs[HD / 16];
    const cu_attn_args &a = w.a;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sl = lane % LPP, pr = lane / LPP;
    const int c = (int)blockIdx.x % C, h = (int)blockIdx.x / C;
    const int R = w.rows / C, r0 = c * R;
    __shared__ __align__(8) uint64_t slice_bar;
    if (tid == 0 && w.abl != 2) {
        /* the slice: weights, before the wait; one thread, bulk copies of AW_CHUNK bytes
         * on one barrier that counts all of them */
        const uint8_t *src = w.plane + ((int64_t)h * w.rows + r0) * AW_ROWB;
        const uint32_t total = (uint32_t)(R * AW_ROWB);
        mbar_init_ring(&slice_bar, 1);
        tma_expect(&slice_bar, total);
        for (uint32_t o = 0; o < total; o += AW_CHUNK)
            tma_copy(aw_slice + o, src + o, total - o < AW_CHUNK ? total - o : AW_CHUNK, &slice_bar);
    }
    const __half *kb = a.kc + (int64_t)h * a.n_ctx * HD + sl * 8, *vb = a.vc + (int64_t)h * a.n_ctx * HD + sl * 8;
    auto slot = [&](int b, int j) { return b + ((j * NW + warp) * C + c) * PPW + pr; };
    uint4 kr[SPT], vr[SPT];
    auto load = [&](int b, int j, int lim) {
        const int p = slot(b, j);
        const bool ok = p < lim;
        kr[j] = ok ? *(const uint4 *)(kb + (int64_t)p * HD) : make_uint4(0, 0, 0, 0);
        vr[j] = ok ? *(const uint4 *)(vb + (int64_t)p * HD) : make_uint4(0, 0, 0, 0);
    };
    load(0, 0, a.n_ctx);
    const int pos = a.pos[0];
    const int lim = min(pos, a.n_ctx);
#pragma unroll
    for (int j = 1; j < SPT; j++) load(0, j, lim);
    pdl_wait();
    pdl_trigger();
    const int own = (pos / PPW) % C; /* the block whose slots hold pos */
    {
        const int64_t at = (int64_t)h * a.n_ctx * HD + (int64_t)pos * HD;
        ad_fast_qkv<HD>(tid, w.q + h * HD, a.kin + h * HD, a.vin + h * HD, a.cs_now, scale, c == own, qs, kvp,
                        a.kc + at, a.vc + at);
    }
    /* the first step was read whatever pos was */
    if (slot(0, 0) >= pos) {
        kr[0] = make_uint4(0, 0, 0, 0);
        vr[0] = make_uint4(0, 0, 0, 0);
    }
    float acc[8], mx = -INFINITY, sum = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    __syncthreads(); /* qs, kvp */
    trace_mark(0);
    for (int b = 0; b <= pos; b += SPAN) {
        if (b > 0) {
#pragma unroll
            for (int j = 0; j < SPT; j++) load(b, j, lim);
        }
        if (c == own && pos - b < SPAN) {
            /* row pos from shared memory, rounded to f16 as its store rounded it */
#pragma unroll
            for (int j = 0; j < SPT; j++)
                if (slot(b, j) == pos) ad_row_f16(kvp[0], kvp[1], sl, kr[j], vr[j]);
        }
        ad_rows<SPT, LPP>(kr, vr, &qs[sl * 8], [&](int j) { return slot(b, j) <= pos; }, mx, sum, acc);
    }
    trace_mark(1);
    /* the lane groups of a warp, then its warps, then the head's blocks */
    ad_merge_groups<LPP>(mx, sum, acc);
    if (pr == 0) {
#pragma unroll
        for (int e = 0; e < 8; e++) ob[warp][sl * 8 + e] = acc[e];
        if (sl == 0) {
            wm[warp] = mx;
            wl[warp] = sum;
        }
    }
    __syncthreads();
    /* the block's partial, to global memory: [h][c] = 128 outputs, max, sum */
    float *pb = w.part + (int64_t)h * C * (HD + 2);
    if (tid < HD) {
        float M, L;
        const float o = ad_merge<NW>([&](int k) { return wm[k]; }, [&](int k) { return wl[k]; },
                                     [&](int k) { return ob[k][tid]; }, &M, &L);
        pb[c * (HD + 2) + tid] = o;
        if (tid == 0) {
            pb[c * (HD + 2) + HD] = M;
            pb[c * (HD + 2) + HD + 1] = L;
        }
        __threadfence();
    }
    __syncthreads();
    if (tid == 0) {
        /* the head's C blocks meet: the last to arrive resets the count and moves the
         * generation on, the others wait for that (the count and generation persist from
         * launch to launch, so nothing resets them between steps) */
        unsigned *cnt = w.bar + 2 * h, *gen = cnt + 1;
        const unsigned g = ld_acquire(gen);
        if (atomicAdd(cnt, 1u) == (unsigned)C - 1) {
            *cnt = 0;
            __threadfence();
            atomicAdd(gen, 1u);
        } else {
            while (ld_acquire(gen) == g) {
            }
        }
        __threadfence();
    }
    __syncthreads();
    float att = 0.0f;
    if (tid < HD) {
        float mr[C], M, L;
#pragma unroll
        for (int r = 0; r < C; r++) mr[r] = __ldcg(pb + r * (HD + 2) + HD);
        const float o = ad_merge<C>([&](int r) { return mr[r]; }, [&](int r) { return __ldcg(pb + r * (HD + 2) + HD + 1); },
                                    [&](int r) { return __ldcg(pb + r * (HD + 2) + tid); }, &M, &L);
        att = o / L;
    }
    trace_mark(2);
    if (tid < HD) {
        if (c == 0) w.out[h * HD + tid] = att;
        /* q8 as q8_store1 makes it: warp k quantizes values 32k .. 32k + 31 */
        int qv;
        float dd, ds;
        q8_quant1(att, &qv, &dd, &ds);
        xq[tid] = (int8_t)qv;
        if (lane == 0) xd[warp] = dd;
        if ((lane & 15) == 0) xs[tid >> 4] = ds;
    }
    __syncthreads(); /* xq, xd, xs (and slice_bar initialised, long before) */
    if (w.abl != 2) mbar_wait(&slice_bar, 0);
    typedef unit_k45<false> U;
    /* the head's two 64-value units as the GEMVs' q4_K unit reads them (mmv_k45.cuh) */
    auto unit_x = [&](int k) {
        U::X x;
        x.a0 = *(const int4 *)(xq + 64 * k);
        x.a1 = *(const int4 *)(xq + 64 * k + 16);
        x.b0 = *(const int4 *)(xq + 64 * k + 32);
        x.b1 = *(const int4 *)(xq + 64 * k + 48);
        x.d0 = xd[2 * k];
        x.d1 = xd[2 * k + 1];
        x.s0 = xs[4 * k] + xs[4 * k + 1];
        x.s1 = xs[4 * k + 2] + xs[4 * k + 3];
        return x;
    };
    const U::X x0 = unit_x(0), x1 = unit_x(1);
    const int g0 = 2 * (h & 1);
    for (int r = tid; r < (w.abl == 2 ? 0 : R); r += NT) {
        const uint8_t *sr = aw_slice + r * AW_ROWB;
        U::W u0, u1;
        u0.h = *(const uint4 *)sr;
        u1.h = u0.h;
        u0.q0 = *(const uint4 *)(sr + 16);
        u0.q1 = *(const uint4 *)(sr + 32);
        u1.q0 = *(const uint4 *)(sr + 48);
        u1.q1 = *(const uint4 *)(sr + 64);
        const float v = U::dotx(u0, x0, g0) + U::dotx(u1, x1, g0 + 1);
        if (w.abl != 1)
            atomicAdd((unsigned long long *)(w.acc + r0 + r), (unsigned long long)__float2ll_rn(v * 4294967296.0f));
    }
    trace_end();
}

/* Blocks per head: MINFER_CUDA_ATTN_WO_C (4 or 8, default 4; the backend checks that
 * the slice fits, cu_attn_wo_fits). */
static size_t attn_wo_smem(int rows, int C) { return (size_t)(rows / C) * AW_ROWB; }

/* The slice fits shared memory, and the grid (n_head * C blocks) fits the device at
 * once: its blocks wait for each other (the head's barrier), so all must be resident
 * together. Nothing after it can take their room first: the kernel after it launches only
 * once every block of this grid has started (programmatic launch waits for all of them to
 * trigger), and the q/k/v GEMV before it ends without waiting for it. */
int cu_attn_wo_fits(const cu_state *S, int rows, int n_head, int C) {
    if (!((C == 4 || C == 8) && rows % C == 0 && attn_wo_smem(rows, C) <= CU_ATTN_WO_SMEM_MAX)) return 0;
    int per_sm = 0;
    const size_t smem = attn_wo_smem(rows, C);
    cudaError_t e = C == 4 ? cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_attn_wo<4>, AW_NW * 32, smem)
                           : cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_attn_wo<8>, AW_NW * 32, smem);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (int64_t)per_sm * cu_num_sms(S) >= (int64_t)n_head * C;
}

void cu_attn_wo_prepare(void) {
    /* (the slice is dynamic shared memory past the 48 KB default) */
    cudaFuncSetAttribute(kernel_attn_wo<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, CU_ATTN_WO_SMEM_MAX);
    cudaFuncSetAttribute(kernel_attn_wo<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, CU_ATTN_WO_SMEM_MAX);
}

void cu_attn_wo(cu_state *S, const cu_attn_wo_args *w, int C) {
    const float scale = 1.0f / sqrtf((float)AW_HD);
    const dim3 grid((unsigned)(w->a.n_head * C)), block(AW_NW * 32);
    const size_t smem = attn_wo_smem(w->rows, C);
    if (C == 4) cu_launch(S, "attn_wo", kernel_attn_wo<4>, grid, block, smem, *w, scale);
    else cu_launch(S, "attn_wo", kernel_attn_wo<8>, grid, block, smem, *w, scale);
}

/* The wo plane of one layer (rows x n_head*128 q4_K in the device row layout, stride
 * bytes a row) into dst [n_head][rows][AW_ROWB]: block (row, head) copies the head's
 * block header and its 64 bytes of qs, 5 threads of 16 bytes. */
static __global__ void kernel_attn_wo_plane(uint8_t *dst, const uint8_t *wo, int64_t stride, int rows) {
    const int r = blockIdx.x, h = blockIdx.y, k = threadIdx.x;
    const uint8_t *src = wo + (int64_t)r * stride + (h >> 1) * 144 + (k == 0 ? 0 : 16 + (h & 1) * 64 + (k - 1) * 16);
    *(uint4 *)(dst + ((int64_t)h * rows + r) * AW_ROWB + k * 16) = *(const uint4 *)src;
}

size_t cu_attn_wo_plane_bytes(int rows, int n_head) { return (size_t)rows * n_head * AW_ROWB; }

void cu_attn_wo_plane(cu_state *S, uint8_t *dst, const uint8_t *wo, int64_t stride, int rows, int n_head) {
    cu_launch(S, "attn_wo_plane", kernel_attn_wo_plane, dim3((unsigned)rows, (unsigned)n_head), dim3(5), 0, dst, wo,
              stride, rows);
}

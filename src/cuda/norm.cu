/* norm.cu - RMSNorm, one block per row: out = x / sqrt(mean(x^2) + eps) * w.
 * Fused variants (decode): the residual add that precedes every norm in the
 * transformer (x += y, written back), and the q8 quantization of out that the next
 * GEMVs read, so a layer's norm costs one launch instead of three. */
#include "common.cuh"

#define NORM_THREADS 256

static __device__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) red[w] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = l < nw ? red[l] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

/* Generic: any dim (two passes over memory). */
template <bool ADD>
static __global__ void kernel_rmsnorm(float *out, float *x, const float *y, const float *w, int dim, float eps) {
    __shared__ float red[32];
    pdl_trigger();
    pdl_wait();
    const int64_t row = blockIdx.x;
    float *xr = x + row * dim;
    const float *yr = ADD ? y + row * dim : nullptr;
    float *orow = out + row * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i];
        if (ADD) {
            v += yr[i];
            xr[i] = v;
        }
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    /* each thread re-reads only the elements it wrote above: no barrier needed */
    for (int i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = xr[i] * inv * w[i];
}

/* The row's float4s k*T + tid (k < NPT) into v (zeros past n4, and for the whole row
 * where !live), with y added where ADD and the sum written back to x (split rows, split
 * > 1: only float4 k == slice, the block's own); returns this thread's sum of squares. kernel_rmsnorm_reg and kernel_rmsnorm_mq both load with it, so that their
 * sums, and the norms after them, have the same bits. */
template <bool ADD, int NPT>
static __device__ __forceinline__ float norm_row_load(float4 (&v)[NPT], float *x, const float *y, int64_t row,
                                                      int dim, bool live, int split, int slice,
                                                      const float4 (*yn)[NPT] = nullptr) {
    const int n4 = dim / 4, tid = threadIdx.x, T = blockDim.x;
    float4 *xr = (float4 *)(x + row * dim);
    const float4 *yr = (const float4 *)(ADD ? y + row * dim : nullptr);
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int i = tid + k * T;
        v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (live && i < n4) {
            v[k] = xr[i];
            if (ADD) {
                const float4 a = yn ? (*yn)[k] : yr[i];
                v[k].x += a.x; v[k].y += a.y; v[k].z += a.z; v[k].w += a.w;
                if (split == 1 || k == slice) xr[i] = v[k];
            }
        }
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    return ss;
}

/* dim % 4 == 0, dim <= 4 * NPT * blockDim: one pass, the row held in registers
 * (NPT float4 per thread, all loads in flight at once), up to 1024 threads so a
 * single decode row is one memory round trip. Q8 needs dim % 32 == 0.
 * Split rows (gridDim.y = S > 1, then NPT == S and blockDim * S * 4 == dim): the S
 * blocks of a row each read and sum the whole row and write only their S-th of it,
 * float4 k == blockIdx.y of each thread, so the stores leave from S SMs. */
/* POST (with ADD; path post-norm-add): y is first RMS-normed by the weights pw, as the
 * one-block-a-row norm would do it in a launch of its own (the same block shape, sum and
 * products: the same bits), x += that. */
template <bool ADD, bool Q8, int NPT, bool POST = false>
static __global__ void kernel_rmsnorm_reg(float *out, float *x, const float *y, const float *w, int dim, float eps,
                                          cu_q8 q, __half *xh, const float *pw) {
    __shared__ float red[32];
    pdl_trigger();
    const int n4 = dim / 4;
    const int tid = threadIdx.x, T = blockDim.x;
    const int split = gridDim.y, slice = blockIdx.y;
    float4 g[NPT], pg[NPT];
#pragma unroll
    for (int k = 0; k < NPT; k++)
        if (tid + k * T < n4 && (split == 1 || k == slice)) {
            g[k] = ((const float4 *)w)[tid + k * T];  /* weights: before the wait */
            if (POST) pg[k] = ((const float4 *)pw)[tid + k * T];
        }
    pdl_wait();
    const int64_t row = blockIdx.x;
    float4 v[NPT];
    float4 yn[NPT];
    if (POST) {
        /* y's own norm: its sum (norm_row_load without an add), then y * inv * pw */
        float ys = norm_row_load<false, NPT>(yn, (float *)y, nullptr, row, dim, true, 1, 0);
        ys = block_sum(ys, red);
        const float yinv = 1.0f / sqrtf(ys / (float)dim + eps);
#pragma unroll
        for (int k = 0; k < NPT; k++)
            yn[k] = make_float4(yn[k].x * yinv * pg[k].x, yn[k].y * yinv * pg[k].y, yn[k].z * yinv * pg[k].z,
                                yn[k].w * yinv * pg[k].w);
    }
    float ss = norm_row_load<ADD, NPT>(v, x, y, row, dim, true, split, slice, POST ? &yn : nullptr);
    trace_mark(0);
    ss = block_sum(ss, red);
    trace_mark(1);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    float4 *orow = (float4 *)(out + row * dim);
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        if (split > 1 && k != slice) continue; /* (block-uniform: q8_store4's shuffles see whole warps) */
        const int i = tid + k * T;
        const int valid = i < n4;
        float4 r = make_float4(0.f, 0.f, 0.f, 0.f);
        if (valid) {
            r = make_float4(v[k].x * inv * g[k].x, v[k].y * inv * g[k].y, v[k].z * inv * g[k].z, v[k].w * inv * g[k].w);
            orow[i] = r;
            if (xh) *(uint2 *)(xh + row * dim + (int64_t)i * 4) = f2h4_sat(r);
        }
        if (k == NPT - 1 || split > 1) trace_mark(2);
        if (Q8) q8_store4(q, row * dim + (int64_t)i * 4, r, valid);
    }
    trace_end();
}

/* The one-token norm by lone warps (path norm-warps; rows of 128 NF4, 2048 or 4096): warp b of
 * a row writes its values 128b .. 128b + 127 (a float4 a lane) and, to get there, sums
 * the whole row itself (NF4 float4 a lane, all in flight at once, then warp_sum): no
 * block barrier and no shared memory between the row's load and its stores, which in the
 * 4-block form (kernel_rmsnorm_reg, split 4) cost ~0.26 us of the norm's ~1.8 (block
 * timeline, 2026-12-02). Each warp reads the row (16 KB at 4096) from the L2, one warp a
 * block; the same sum in every warp (same order). Measured (tg128, H200, 2026-12-02,
 * bench/RESULTS.md): the 1B synth (2048 wide, 16 warps) +0.3% to +2.7% over the split
 * form (the session's start binary, six rounds in three calls); the 7B (4096, 32 warps)
 * +0.0% to +0.1% over path norm-warps off in the same binary (three calls), within
 * the noise: there the block timeline shows the blocks packed several to an SM (up to 8
 * on one), each SM then reading 8 rows' worth from the L2. */
template <bool Q8, int NF4>
static __global__ void __launch_bounds__(32) kernel_rmsnorm_warp(float *out, const float *x, const float *w, float eps,
                                                                 cu_q8 q) {
    constexpr int dim = 128 * NF4;
    pdl_trigger();
    const int lane = threadIdx.x, b = blockIdx.x;
    const int64_t row = blockIdx.y;
    const float4 g = ((const float4 *)w)[b * 32 + lane]; /* weights: before the wait */
    pdl_wait();
    const float4 *xr = (const float4 *)(x + row * dim);
    float4 v[NF4];
#pragma unroll
    for (int j = 0; j < NF4; j++) v[j] = xr[lane + 32 * j];
    /* four sums, float4 j into sum j % 4: a chain of NF4 multiply-adds instead of 4 NF4
     * (at 4 cycles each, 0.26 us for NF4 32 in one chain) */
    float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < NF4; j++) s4[j & 3] += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    float ss = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    trace_mark(0);
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    float4 m = v[0]; /* (this warp's float4: v[b], picked without indexing registers) */
#pragma unroll
    for (int j = 1; j < NF4; j++)
        if (j == b) m = v[j];
    const float4 r = make_float4(m.x * inv * g.x, m.y * inv * g.y, m.z * inv * g.z, m.w * inv * g.w);
    const int64_t i4 = (int64_t)b * 32 + lane;
    ((float4 *)(out + row * dim))[i4] = r;
    trace_mark(1);
    if (Q8) q8_store4(q, row * dim + i4 * 4, r, 1);
    trace_mark(2);
    trace_end();
}
template <bool Q8>
static bool launch_warp(cu_ctx *S, float *out, const float *x, const float *w, int n, int dim, float eps,
                        const cu_q8 &q) {
    const char *name = Q8 ? "rmsnorm_q8_warp" : "rmsnorm_warp";
    const dim3 grid(dim / 128, n), block(32);
    switch (dim) { /* (the widths test_cuda_ops's norm checks cover) */
    case 2048: cu_launch(S, name, kernel_rmsnorm_warp<Q8, 16>, grid, block, 0, out, x, w, eps, q); return true;
    case 4096: cu_launch(S, name, kernel_rmsnorm_warp<Q8, 32>, grid, block, 0, out, x, w, eps, q); return true;
    default: return false;
    }
}

/* Prefill: the norm (after the residual add) writing the MMQ int8 form of its output
 * (path mmq-norm), so the GEMMs after it need no prepass launch: the arithmetic of
 * kernel_mmq_quantize (mmq.cu) on the values this kernel computes, so the codes are the
 * ones the norm + prepass pair writes. NPT float4 a thread, T * NPT * 4 == dim, T % 8 == 0:
 * each 32-block in 8 consecutive lanes. Rows n .. a.n_pad-1 (grid) get zero codes and
 * scales only. out may be NULL (no consumer reads the f32 form). */
template <bool ADD, int NPT>
static __global__ void kernel_rmsnorm_mq(float *out, float *x, const float *y, const float *w, int n, int dim, float eps,
                                         cu_mmq_act a) {
    __shared__ float red[32];
    pdl_trigger();
    const int tid = threadIdx.x, T = blockDim.x, lane = tid & 31, n4 = dim / 4;
    float4 g[NPT];
#pragma unroll
    for (int k = 0; k < NPT; k++)
        if (tid + k * T < n4) g[k] = ((const float4 *)w)[tid + k * T];
    pdl_wait();
    const int64_t row = blockIdx.x;
    const bool live = row < n; /* block-uniform */
    float4 v[NPT];
    float ss = norm_row_load<ADD, NPT>(v, x, y, row, dim, live, 1, 0);
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
#pragma unroll
    for (int k = 0; k < NPT; k++) {
        const int i = tid + k * T;
        float4 r = make_float4(0.f, 0.f, 0.f, 0.f);
        if (live && i < n4) {
            r = make_float4(v[k].x * inv * g[k].x, v[k].y * inv * g[k].y, v[k].z * inv * g[k].z, v[k].w * inv * g[k].w);
            if (out) ((float4 *)(out + row * dim))[i] = r;
        }
        /* (lanes past n4 go on with zeros for the shuffles, storing nothing: n4 % 8 == 0,
         * so a 32-block's 8 lanes are all in or all out, but a warp may straddle n4) */
        const bool in = i < n4;
        /* the 32-block of lanes 8b..8b+7: d, codes; integer sums of 16 and 32 */
        int c[4], s16;
        float d;
        q8_quant4(r, c, &d, &s16);
        const int s32 = s16 + __shfl_xor_sync(0xffffffffu, s16, 4);
        if (!in) continue; /* (after the last shuffle) */
        ((uint32_t *)(a.q + row * dim))[i] = q8_pack4(c);
        const int blk = i >> 3;
        if ((lane & 7) == 0) {
            a.d[(int64_t)blk * a.n_pad + row] = d;
            a.s[(int64_t)blk * a.n_pad + row] = d * (float)s32;
        }
        if ((lane & 3) == 0) a.is[(int64_t)(2 * blk + ((lane >> 2) & 1)) * a.n_pad + row] = s16;
    }
}

/* The block shape of launch_reg's one-block-a-row kernels (threads T, NPT float4 each),
 * which kernel_rmsnorm_mq takes too so that its sum of squares adds in the same order
 * (the same bits as the norm + prepass pair). Split rows (no add) count as one block of
 * n4 / split threads, which each split block is. 0 where dim does not fit. */
static int norm_shape(const cu_ctx *S, bool add, int n4, int *T, int *npt, int *split_rows) {
    const int split = S->tune.norm_split, maxt = S->tune.norm_threads;
    *split_rows = !add && split > 1 && n4 % (split * 32) == 0 && n4 / split <= 1024;
    if (*split_rows) {
        /* (not with an add: a block would read x where another already added y) */
        *T = n4 / split;
        *npt = split;
        return 1;
    }
    *npt = n4 <= maxt ? 1 : n4 <= 2 * maxt ? 2 : 4;
    *T = ((n4 + *npt - 1) / *npt + 31) / 32 * 32;
    return *T <= 1024;
}

int cu_rmsnorm_mq(cu_ctx *S, float *out, float *x, const float *y, const float *w, int n, int dim, float eps,
                  cu_mmq_act *a) {
    int T, npt, split_rows;
    if (dim % 32 || dim > 16384 || !norm_shape(S, y != NULL, dim / 4, &T, &npt, &split_rows)) return 0;
    a->n_pad = cu_mmq_npad(n);
    const char *name = y ? "add_rmsnorm_mq" : "rmsnorm_mq";
    const dim3 grid(a->n_pad), block(T);
#define MQ_LAUNCH(ADD, NPT) cu_launch(S, name, kernel_rmsnorm_mq<ADD, NPT>, grid, block, 0, out, x, y, w, n, dim, eps, *a)
    if (y) {
        if (npt == 1) MQ_LAUNCH(true, 1);
        else if (npt == 2) MQ_LAUNCH(true, 2);
        else MQ_LAUNCH(true, 4);
    } else {
        if (npt == 1) MQ_LAUNCH(false, 1);
        else if (npt == 2) MQ_LAUNCH(false, 2);
        else if (npt == 4) MQ_LAUNCH(false, 4);
        else MQ_LAUNCH(false, 8);
    }
#undef MQ_LAUNCH
    return 1;
}

template <bool ADD, bool Q8, bool POST = false>
static void launch_reg(cu_ctx *S, float *out, float *x, const float *y, const float *w, int n, int dim, float eps,
                       const cu_q8 &q, __half *xh = nullptr, const float *pw = nullptr) {
    /* one token, no add (each warp would add y into the x the others read): lone warps */
    if (!ADD && n == 1 && !xh && S->on[CU_PATH_NORM_WARPS] && launch_warp<Q8>(S, out, x, w, n, dim, eps, q)) return;
    /* threads: up to 1024 (cu_tune.norm_threads 256|512 for fewer), each with 1,
     * 2 or 4 float4. (Fewer threads per block, so that it co-resides with the xst GEMV
     * blocks ahead of it under PDL, measured slower: 256 -6%, 512 -2% tg128 on the 7B,
     * bench/RESULTS.md; before the ring GEMVs asked for one row ahead of their wait.) */
    const int n4 = dim / 4;
    const char *name = POST ? (Q8 ? "postnorm_add_rmsnorm_q8" : "postnorm_add_rmsnorm")
                       : xh ? (ADD ? "add_rmsnorm_f16" : "rmsnorm_f16")
                       : ADD ? (Q8 ? "add_rmsnorm_q8" : "add_rmsnorm") : (Q8 ? "rmsnorm_q8" : "rmsnorm");
    /* Split rows (cu_tune.norm_split, 4): the one block of 1024 threads
     * took ~1.4 us from its sum to its last store in the block timeline (trace build),
     * its 4096 values' f32, q8 and lane-major stores all leaving one SM; four blocks of
     * 256 each write a quarter. tg128 on the 7B (H200, 2026-11-30, alternating, three
     * rounds, bench/RESULTS.md call 45): split 4 659.83 / 662.15 / 660.53, split 2
     * 657.21 / 655.20 / 655.15, split 8 644.66 / 645.26 / 644.42 (eight reads of the row),
     * one block 653.82 / 653.41 / 653.03. */
    int T, npt, split_rows;
    norm_shape(S, ADD, n4, &T, &npt, &split_rows); /* (dim <= 16384 here: it fits) */
    if constexpr (!ADD) {
        if (split_rows) {
            const dim3 grid(n, npt), block(T);
#define SPLIT_LAUNCH(NPT) cu_launch(S, name, kernel_rmsnorm_reg<ADD, Q8, NPT>, grid, block, 0, out, x, y, w, dim, eps, q, xh, pw)
            if (npt == 2) SPLIT_LAUNCH(2);
            else if (npt == 4) SPLIT_LAUNCH(4);
            else SPLIT_LAUNCH(8);
#undef SPLIT_LAUNCH
            return;
        }
    }
#define REG_LAUNCH(NPT) cu_launch(S, name, kernel_rmsnorm_reg<ADD, Q8, NPT, POST>, dim3(n), dim3(T), 0, out, x, y, w, dim, eps, q, xh, pw)
    if (npt == 1) REG_LAUNCH(1);
    else if (npt == 2) REG_LAUNCH(2);
    else REG_LAUNCH(4);
#undef REG_LAUNCH
}

/* the widths kernel_rmsnorm_reg takes (launch_reg) */
static bool reg_fits(int dim) { return dim % 4 == 0 && dim <= 16384; }

void cu_rmsnorm(cu_ctx *S, float *out, float *x, const float *y, const float *w, int n, int dim, float eps,
                const cu_q8 *q) {
    const int q8 = q && dim % 32 == 0;
    cu_q8 qq = q ? *q : cu_q8{};
    if (reg_fits(dim)) {
        if (y) {
            if (q8) launch_reg<true, true>(S, out, x, y, w, n, dim, eps, qq);
            else launch_reg<true, false>(S, out, x, y, w, n, dim, eps, qq);
        } else {
            if (q8) launch_reg<false, true>(S, out, x, y, w, n, dim, eps, qq);
            else launch_reg<false, false>(S, out, x, y, w, n, dim, eps, qq);
        }
        return;
    }
    int threads = NORM_THREADS;
    while (threads > 32 && threads / 2 >= dim) threads /= 2;
    if (y) cu_launch(S, "add_rmsnorm", kernel_rmsnorm<true>, dim3(n), dim3(threads), 0, out, x, y, w, dim, eps);
    else cu_launch(S, "rmsnorm", kernel_rmsnorm<false>, dim3(n), dim3(threads), 0, out, x, y, w, dim, eps);
    if (q8) cu_quantize_q8(S, out, (int64_t)n * dim, q);
}

void cu_rmsnorm_post(cu_ctx *S, float *out, float *x, float *y, const float *pw, const float *w, int n, int dim,
                     float eps, const cu_q8 *q) {
    if (!reg_fits(dim)) {
        /* (a width the one-pass kernel does not take: the post-norm in a launch of its own) */
        cu_rmsnorm(S, y, y, NULL, pw, n, dim, eps, NULL);
        cu_rmsnorm(S, out, x, y, w, n, dim, eps, q);
        return;
    }
    const cu_q8 qq = q ? *q : cu_q8{};
    if (q && dim % 32 == 0) launch_reg<true, true, true>(S, out, x, y, w, n, dim, eps, qq, nullptr, pw);
    else launch_reg<true, false, true>(S, out, x, y, w, n, dim, eps, qq, nullptr, pw);
}

int cu_rmsnorm_h(cu_ctx *S, float *out, __half *xh, float *x, const float *y, const float *w, int n, int dim, float eps) {
    if (!reg_fits(dim) || !xh) return 0;
    const cu_q8 none{};
    if (y) launch_reg<true, false>(S, out, x, y, w, n, dim, eps, none, xh);
    else launch_reg<false, false>(S, out, x, y, w, n, dim, eps, none, xh);
    return 1;
}

/* moe.cu - a layer's FFN of experts on the device (plan.h cu_moe_kind), with no host
 * round trip, so that a decode step of a mixture-of-experts model stays one captured graph:
 *
 *   route   one block: each token's softmax over the router's scores, its k largest
 *           (ties: the lower expert, as forward_moe_route and llama.cpp's CPU argsort),
 *           their weights renormalised; then the n*k (token, slot) rows grouped by expert:
 *           row p of expert order for slot i (pos[i] = p, src[p] = its token), the list of
 *           experts with rows (groups: expert, first row, rows) and the list of tiles of
 *           at most CU_MOE_TILE_ROWS rows of one expert (tiles), both padded with empty
 *           entries to the launch's fixed grid;
 *   gemv    (decode, up to 127 tokens) a block per (32 weight rows, group), a warp 8 rows:
 *           the group's expert's rows against its rows' q8 activations (one column a pass
 *           for a single token's step, else 8), so each
 *           chosen expert's weights are read once a step whatever the number of tokens
 *           that chose it (gate and up in one launch, down in another);
 *   MMQ     (128+ tokens) the int8 tensor-core GEMM of mmq.cu over the tile list
 *           (cu_mmq_moe), the activations gathered into expert order by the prepass;
 *   combine out[t] = the sum over t's slots in order of w * y[pos] (the product rounded
 *           before each add, as the CPU's moe_combine and ggml's mul then add).
 * The order of rows inside an expert depends on the atomics of the grouping; each row's
 * result does not (every product is computed alone, in a fixed order), so the step's
 * output is the same every run. */
#include "backend.cuh"
#include "mmv_core.cuh"
#include "mmv_k45.cuh"
#include "mmv_q32.cuh"
#include "mmv_q6k.cuh"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "cuda/backend_cuda.h"

/* ------------------------------------------------------------------ router */

/* scores [n][E] = x [n][K] . W [E][K]^T in f32 (the router's weights stay f32, as on the
 * CPU): tiles of 32 tokens x 32 experts, K in steps of 32 through shared memory, 4 outputs
 * a thread. (Decode's few tokens take the f32 GEMV instead: blocks.cu.) */
static __global__ void __launch_bounds__(256) kernel_moe_router(float *out, const float *x, const float *w, int n, int E,
                                                                int K) {
    __shared__ float xs[32][33], ws[32][33];
    pdl_trigger();
    pdl_wait();
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int t0 = blockIdx.x * 32, e0 = blockIdx.y * 32;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < K; k0 += 32) {
        for (int i = ty; i < 32; i += 8) {
            const bool kin = k0 + tx < K;
            xs[i][tx] = t0 + i < n && kin ? x[(int64_t)(t0 + i) * K + k0 + tx] : 0.0f;
            ws[i][tx] = e0 + i < E && kin ? w[(int64_t)(e0 + i) * K + k0 + tx] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < 32; kk++) {
            const float wv = ws[tx][kk];
#pragma unroll
            for (int j = 0; j < 4; j++) acc[j] = fmaf(xs[ty + 8 * j][kk], wv, acc[j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int t = t0 + ty + 8 * j, e = e0 + tx;
        if (t < n && e < E) out[(int64_t)t * E + e] = acc[j];
    }
}

void cu_moe_router(cu_ctx *S, float *out, const float *x, const float *w, int n, int E, int K) {
    if (n <= 0) return;
    cu_launch(S, "moe_router", kernel_moe_router, dim3((unsigned)((n + 31) / 32), (unsigned)((E + 31) / 32)), dim3(256),
              0, out, x, w, n, E, K);
}

/* ------------------------------------------------------------------ route + grouping */

#define MOE_ROUTE_THREADS 1024
#define MOE_LANE_E (CU_MOE_MAX_E / 32) /* a lane's experts */

static __global__ void __launch_bounds__(MOE_ROUTE_THREADS) kernel_moe_route(const float *scores, int n, int E, int k,
                                                                             cu_moe_buf r) {
    __shared__ int cnt[CU_MOE_MAX_E], start[CU_MOE_MAX_E], fill[CU_MOE_MAX_E];
    __shared__ int ng, nt;
    pdl_trigger();
    pdl_wait();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    for (int e = tid; e < E; e += blockDim.x) cnt[e] = fill[e] = 0;
    __syncthreads();
    for (int t = warp; t < n; t += nw) {
        const float *s = scores + (int64_t)t * E;
        float v[MOE_LANE_E];
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < MOE_LANE_E; i++) {
            const int e = lane + 32 * i;
            v[i] = e < E ? s[e] : -INFINITY;
            mx = fmaxf(mx, v[i]);
        }
        mx = warp_max(mx);
        /* (the exponentials summed in double, as the CPU's router) */
        double sum = 0.0;
#pragma unroll
        for (int i = 0; i < MOE_LANE_E; i++) {
            v[i] = lane + 32 * i < E ? expf(v[i] - mx) : 0.0f;
            sum += (double)v[i];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float inv = (float)(1.0 / sum);
#pragma unroll
        for (int i = 0; i < MOE_LANE_E; i++) v[i] *= inv;
        unsigned taken = 0;
        int my_id = 0;
        float my_p = 0.0f, wsum = 0.0f;
        for (int j = 0; j < k; j++) {
            float bv = -1.0f;
            int bi = INT_MAX;
#pragma unroll
            for (int i = 0; i < MOE_LANE_E; i++) {
                const int e = lane + 32 * i;
                if (e < E && !(taken >> i & 1) && v[i] > bv) bv = v[i], bi = e; /* (e rises with i: ties keep the lower) */
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
            }
            if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
            if (lane == j) my_id = bi, my_p = bv;
            wsum += bv; /* (in slot order, as the CPU's) */
        }
        if (lane < k) {
            r.ids[(int64_t)t * k + lane] = my_id;
            r.w[(int64_t)t * k + lane] = my_p / wsum;
            atomicAdd(&cnt[my_id], 1);
        }
    }
    __syncthreads();
    if (warp == 0) {
        /* three exclusive scans over the experts in one warp, 8 a lane: rows (each expert's
         * first row), experts with rows (its group) and tiles (its first tile) */
        int c[MOE_LANE_E], rs = 0, gs = 0, ts = 0;
#pragma unroll
        for (int i = 0; i < MOE_LANE_E; i++) {
            const int e = lane * MOE_LANE_E + i;
            c[i] = e < E ? cnt[e] : 0;
            rs += c[i];
            gs += c[i] > 0;
            ts += (c[i] + CU_MOE_TILE_ROWS - 1) / CU_MOE_TILE_ROWS;
        }
        int ri = rs, gi = gs, ti = ts;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int a = __shfl_up_sync(0xffffffffu, ri, o), b = __shfl_up_sync(0xffffffffu, gi, o),
                      d = __shfl_up_sync(0xffffffffu, ti, o);
            if (lane >= o) ri += a, gi += b, ti += d;
        }
        int run = ri - rs, g = gi - gs, t = ti - ts;
#pragma unroll
        for (int i = 0; i < MOE_LANE_E; i++) {
            const int e = lane * MOE_LANE_E + i;
            if (e >= E) break;
            start[e] = run;
            if (c[i]) {
                r.groups[g++] = make_int4(e, run, c[i], 0);
                for (int o = 0; o < c[i]; o += CU_MOE_TILE_ROWS)
                    r.tiles[t++] = make_int4(e, run + o, min(CU_MOE_TILE_ROWS, c[i] - o), 0);
            }
            run += c[i];
        }
        if (lane == 31) ng = gi, nt = ti;
    }
    __syncthreads();
    for (int g = ng + tid; g < r.groups_cap; g += blockDim.x) r.groups[g] = make_int4(0, 0, 0, 0);
    for (int t = nt + tid; t < r.tiles_cap; t += blockDim.x) r.tiles[t] = make_int4(0, 0, 0, 0);
    for (int i = tid; i < n * k; i += blockDim.x) {
        const int e = r.ids[i];
        const int p = start[e] + atomicAdd(&fill[e], 1);
        r.pos[i] = p;
        r.src[p] = i / k;
    }
}

void cu_moe_route(cu_ctx *S, const float *scores, int n, int E, int k, const cu_moe_buf *r) {
    if (E > CU_MOE_MAX_E || k > 32 || k < 1 || (int64_t)n * k > r->cap) {
        cu_record(S, cudaErrorInvalidValue, "moe route: more than 256 experts, 32 used or the rows' capacity", __FILE__,
                  __LINE__);
        return;
    }
    /* (a warp a token: a decode step's few tokens in a small block) */
    const int threads = n >= MOE_ROUTE_THREADS / 32 ? MOE_ROUTE_THREADS : n <= 4 ? 128 : 32 * ((n + 3) / 4 * 4);
    cu_launch(S, "moe_route", kernel_moe_route, dim3(1), dim3(threads), 0, scores, n, E, k, *r);
}

/* ------------------------------------------------------------------ grouped GEMV */

/* A warp takes MOE_GEMV_ROWS consecutive rows of the launch (gate's then up's), MOE_GEMV_RPI
 * at a time: their weights loaded together, then each column's activations once for them.
 * The first version (a row a warp, a block of 4 rows) launched a block per 4 rows of every
 * expert a step touched, and the blocks' scheduling, not the memory, set its pace: about
 * 6 us per expert a layer (0.5 TB/s) on the qwen3-30b-a3b synth, H100. */
#define MOE_GEMV_ROWS 8
#define MOE_GEMV_RPI 4
template <typename U, int NC>
static __global__ void __launch_bounds__(MMV_WARPS * 32) kernel_moe_gemv(cu_moe_gemv_args a) {
    pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int g0 = (blockIdx.x * MMV_WARPS + (threadIdx.x >> 5)) * MOE_GEMV_ROWS;
    const int total = a.nmat * a.R;
    pdl_wait();
    const int4 G = a.groups[blockIdx.y];
    if (G.z == 0 || g0 >= total) return;
    const int g1 = min(total, g0 + MOE_GEMV_ROWS);
    const int K = a.K, nb = K / U::QK, nu = nb * U::UPB;
    for (int c0 = 0; c0 < G.z; c0 += NC) {
        const int nc = min(NC, G.z - c0);
        int64_t xo[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int p = G.y + c0 + (c < nc ? c : 0);
            xo[c] = (int64_t)(a.src ? a.src[p] : p) * K;
        }
        for (int gb = g0; gb < g1; gb += MOE_GEMV_RPI) {
            const uint8_t *row[MOE_GEMV_RPI];
#pragma unroll
            for (int i = 0; i < MOE_GEMV_RPI; i++) {
                const int g = min(gb + i, g1 - 1), m = g >= a.R;
                row[i] = (m ? a.w[1] : a.w[0]) + (int64_t)G.x * a.wslice + (int64_t)(g - m * a.R) * a.stride;
            }
            float acc[MOE_GEMV_RPI][NC];
#pragma unroll
            for (int i = 0; i < MOE_GEMV_RPI; i++)
#pragma unroll
                for (int c = 0; c < NC; c++) acc[i][c] = 0.0f;
            for (int u = lane; u < nu; u += 32) {
                typename U::W wr[MOE_GEMV_RPI];
#pragma unroll
                for (int i = 0; i < MOE_GEMV_RPI; i++) U::template load<ld_g>(row[i], nb, u, wr[i]);
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    if (c >= nc) break;
                    typename U::X x;
                    U::loadx(a.q, xo[c], u, x);
#pragma unroll
                    for (int i = 0; i < MOE_GEMV_RPI; i++) acc[i][c] += U::dotx(wr[i], x, u);
                }
            }
#pragma unroll
            for (int i = 0; i < MOE_GEMV_RPI; i++) {
                const int g = gb + i;
                if (g >= g1) break;
                const int m = g >= a.R, r = g - m * a.R;
                float *o = m ? a.out[1] : a.out[0];
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    if (c >= nc) break;
                    const float v = warp_sum(acc[i][c]);
                    if (lane == c) o[(int64_t)(G.y + c0 + c) * a.R + r] = v;
                }
            }
        }
    }
}

/* columns a pass: one where each expert has one row (a token's decode step: 8x fewer
 * accumulators, the registers of 4 rows in flight), else 8 */
template <typename U>
static void moe_gemv_launch(cu_ctx *S, const cu_moe_gemv_args *a, int groups, const char *name) {
    const int rows_per_block = MMV_WARPS * MOE_GEMV_ROWS;
    const dim3 grid((unsigned)((a->nmat * a->R + rows_per_block - 1) / rows_per_block), (unsigned)groups);
    if (a->max_rows <= 1) cu_launch(S, name, kernel_moe_gemv<U, 1>, grid, dim3(MMV_WARPS * 32), 0, *a);
    else cu_launch(S, name, kernel_moe_gemv<U, 8>, grid, dim3(MMV_WARPS * 32), 0, *a);
}

void cu_moe_gemv(cu_ctx *S, uint32_t type, const cu_moe_gemv_args *a, int groups) {
    if (groups <= 0) return;
    switch (type) {
    case QTYPE_Q4_0: moe_gemv_launch<unit_q4<QTYPE_Q4_0>>(S, a, groups, "moe_gemv_q4_0"); break;
    case QTYPE_Q4_1: moe_gemv_launch<unit_q4<QTYPE_Q4_1>>(S, a, groups, "moe_gemv_q4_1"); break;
    case QTYPE_Q5_0: moe_gemv_launch<unit_q4<QTYPE_Q5_0>>(S, a, groups, "moe_gemv_q5_0"); break;
    case QTYPE_Q5_1: moe_gemv_launch<unit_q4<QTYPE_Q5_1>>(S, a, groups, "moe_gemv_q5_1"); break;
    case QTYPE_Q8_0: moe_gemv_launch<unit_q8_0>(S, a, groups, "moe_gemv_q8_0"); break;
    case QTYPE_Q4_K: moe_gemv_launch<unit_k45<false>>(S, a, groups, "moe_gemv_q4_K"); break;
    case QTYPE_Q5_K: moe_gemv_launch<unit_k45<true>>(S, a, groups, "moe_gemv_q5_K"); break;
    case QTYPE_Q6_K: moe_gemv_launch<unit_q6k>(S, a, groups, "moe_gemv_q6_K"); break;
    default: cu_record(S, cudaErrorInvalidValue, "moe gemv: no q8 GEMV for the experts' type", __FILE__, __LINE__); break;
    }
}

/* ------------------------------------------------------------------ combine */

static __global__ void kernel_moe_combine(float *out, const float *y, const int32_t *pos, const float *w, int k, int dim) {
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim) return;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        const float p = y[(int64_t)pos[t * k + j] * dim + i] * w[t * k + j];
        acc = j == 0 ? p : acc + p;
    }
    out[(int64_t)t * dim + i] = acc;
}

void cu_moe_combine(cu_ctx *S, float *out, const float *y, const int32_t *pos, const float *w, int n, int k, int dim) {
    if (n <= 0) return;
    cu_launch(S, "moe_combine", kernel_moe_combine, dim3((unsigned)((dim + 255) / 256), (unsigned)n), dim3(256), 0, out, y,
              pos, w, k, dim);
}

/* ------------------------------------------------------------------ the FFN */

void cu_moe_ffn(cu_state *S, const mf_ffn *F, int kind, const float *x, const cu_q8 *qx, int n, const cu_moe_scratch *sc,
                float *out) {
    const int dim = (int)F->gate.cols, E = F->n_expert, k = F->n_used, ff = (int)F->gate.rows, rows = n * k;
    S->prof_tag = F->router.name;
    S->prof_type = F->router.type;
    if (n <= CU_MAX_GEMV_COLS) {
        /* (the f32 GEMV: a few tokens spread over the device, not 4 blocks of the tiles) */
        cu_mmv_args a;
        memset(&a, 0, sizeof a);
        a.w[0] = (const uint8_t *)F->router.dev;
        a.out[0] = sc->scores;
        a.rows[0] = E;
        a.nmat = 1;
        a.K = dim;
        a.stride = cu_row_stride(F->router.type, dim);
        a.ncols = n;
        a.x = x;
        cu_mmv_f(S, F->router.type, &a);
    } else {
        cu_moe_router(S, sc->scores, x, (const float *)F->router.dev, n, E, dim);
    }
    S->prof_tag = NULL;
    cu_moe_route(S, sc->scores, n, E, k, &S->moe);
    const int64_t gs = cu_row_stride(F->gate.type, dim), ds = cu_row_stride(F->down.type, ff);
    if (kind == CU_MOE_MMQ) {
        const int tiles = cu_moe_tiles(n, k, E);
        cu_mmq_quantize_rows(S, x, NULL, S->moe.src, rows, dim, &S->moe_mq);
        S->prof_tag = F->gate.name;
        cu_mmq_moe(S, sc->h, (const uint8_t *)F->gate.dev, (int64_t)F->gate.dev_slice_bytes, gs, F->gate.type, ff, dim,
                   &S->moe_mq, S->moe.tiles, tiles);
        S->prof_tag = F->up.name;
        cu_mmq_moe(S, sc->h2, (const uint8_t *)F->up.dev, (int64_t)F->up.dev_slice_bytes, gs, F->up.type, ff, dim,
                   &S->moe_mq, S->moe.tiles, tiles);
        S->prof_tag = NULL;
        cu_mmq_quantize_rows(S, sc->h, sc->h2, NULL, rows, ff, &S->moe_mq);
        S->prof_tag = F->down.name;
        cu_mmq_moe(S, sc->y, (const uint8_t *)F->down.dev, (int64_t)F->down.dev_slice_bytes, ds, F->down.type, dim, ff,
                   &S->moe_mq, S->moe.tiles, tiles);
        S->prof_tag = NULL;
        S->n.moe_mmq++;
    } else {
        cu_q8 q = qx ? *qx : S->moe_q8;
        if (!qx) cu_quantize_q8(S, x, (int64_t)n * dim, &S->moe_q8);
        const int groups = cu_moe_groups(n, k, E);
        cu_moe_gemv_args a;
        memset(&a, 0, sizeof a);
        a.w[0] = (const uint8_t *)F->gate.dev;
        a.w[1] = (const uint8_t *)F->up.dev;
        a.out[0] = sc->h;
        a.out[1] = sc->h2;
        a.nmat = 2;
        a.wslice = (int64_t)F->gate.dev_slice_bytes;
        a.stride = gs;
        a.R = ff;
        a.K = dim;
        a.groups = S->moe.groups;
        a.src = S->moe.src;
        a.q = q;
        a.max_rows = n; /* (a token chooses an expert once) */
        S->prof_tag = "ffn_gate+up_exps";
        cu_moe_gemv(S, F->gate.type, &a, groups);
        S->prof_tag = NULL;
        cu_swiglu(S, sc->h, sc->h, sc->h2, (int64_t)rows * ff, &S->moe_q8);
        a.w[0] = (const uint8_t *)F->down.dev;
        a.w[1] = NULL;
        a.out[0] = sc->y;
        a.out[1] = NULL;
        a.nmat = 1;
        a.wslice = (int64_t)F->down.dev_slice_bytes;
        a.stride = ds;
        a.R = dim;
        a.K = ff;
        a.src = NULL;
        a.q = S->moe_q8;
        S->prof_tag = F->down.name;
        cu_moe_gemv(S, F->down.type, &a, groups);
        S->prof_tag = NULL;
        S->n.moe_gemv++;
    }
    cu_moe_combine(S, out, sc->y, S->moe.pos, S->moe.w, n, k, dim);
}

/* ------------------------------------------------------------------ test hooks */

/* (backend_cuda.h) one allocation for the hooks' device buffers, freed before return */
static void *hook_alloc(size_t n) {
    void *p = NULL;
    return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}

extern "C" int cuda_moe_route_test(mf_backend *be, const float *scores, int n, int E, int k, int32_t *ids, float *w,
                                   int32_t *pos, int32_t *src, int32_t *groups, int32_t *tiles, mf_err *err) {
    cu_state *S = cu_st(be);
    cudaSetDevice(S->device);
    cu_moe_buf r;
    memset(&r, 0, sizeof r);
    r.cap = n * k;
    r.groups_cap = cu_moe_groups(n, k, E);
    r.tiles_cap = cu_moe_tiles(n, k, E);
    const size_t ns = sizeof(float) * (size_t)n * E, nc = (size_t)r.cap;
    char *buf = (char *)hook_alloc(ns + nc * 16 + sizeof(int4) * (size_t)(r.groups_cap + r.tiles_cap));
    if (!buf) return mf_fail(err, MF_ERR_DEVICE, "cuda: moe route test: out of device memory");
    float *d_scores = (float *)buf;
    r.ids = (int32_t *)(buf + ns);
    r.w = (float *)(r.ids + nc);
    r.pos = (int32_t *)(r.w + nc);
    r.src = r.pos + nc;
    r.groups = (int4 *)(r.src + nc);
    r.tiles = r.groups + r.groups_cap;
    cudaMemcpy(d_scores, scores, ns, cudaMemcpyHostToDevice);
    cu_moe_route(S, d_scores, n, E, k, &r);
    cudaStreamSynchronize(S->stream);
    cudaMemcpy(ids, r.ids, nc * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(w, r.w, nc * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(pos, r.pos, nc * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(src, r.src, nc * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(groups, r.groups, sizeof(int4) * (size_t)r.groups_cap, cudaMemcpyDeviceToHost);
    cudaMemcpy(tiles, r.tiles, sizeof(int4) * (size_t)r.tiles_cap, cudaMemcpyDeviceToHost);
    cudaFree(buf);
    return cuda_backend_status(be, err);
}

extern "C" int cuda_moe_ffn_test(mf_backend *be, const mf_ffn *F, int kind, const float *x, int n, float *out,
                                 mf_err *err) {
    cu_state *S = cu_st(be);
    cudaSetDevice(S->device);
    const int dim = (int)F->gate.cols, E = F->n_expert, k = F->n_used, ff = (int)F->gate.rows;
    if ((int64_t)n * k > S->moe.cap || (kind == CU_MOE_MMQ && !S->moe_mq.q))
        return mf_fail(err, MF_ERR_USAGE, "cuda: moe ffn test: %d tokens beyond the backend's experts' scratch", n);
    const size_t nx = sizeof(float) * (size_t)n * dim, nr = (size_t)n * k;
    char *buf = (char *)hook_alloc(2 * nx + sizeof(float) * ((size_t)n * E + 2 * nr * ff + nr * dim));
    if (!buf) return mf_fail(err, MF_ERR_DEVICE, "cuda: moe ffn test: out of device memory");
    float *d_x = (float *)buf, *d_out = d_x + (size_t)n * dim;
    cu_moe_scratch sc;
    sc.scores = d_out + (size_t)n * dim;
    sc.h = sc.scores + (size_t)n * E;
    sc.h2 = sc.h + nr * ff;
    sc.y = sc.h2 + nr * ff;
    cudaMemcpy(d_x, x, nx, cudaMemcpyHostToDevice);
    cu_moe_ffn(S, F, kind, d_x, NULL, n, &sc, d_out);
    cudaStreamSynchronize(S->stream);
    cudaMemcpy(out, d_out, nx, cudaMemcpyDeviceToHost);
    cudaFree(buf);
    return cuda_backend_status(be, err);
}

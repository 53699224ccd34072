/* bench/cuda_gemv.cu - kernel lab for the decode GEMV (one column, q8 activations):
 * the variants of src/cuda/mmv*.cuh (mmv.cuh lists them; v1: one row per warp; pp: persistent
 * ping-pong; auto: the backend's dispatch, x-stationary persistent warps (xs) below
 * cu_tune's xst size per launch, xs fed by a TMA ring (xst) above; rows too wide for
 * xs on xst2, xs2 fed by a TMA ring, from the xst size, else on xs2; xst: xst wherever
 * it applies; auto+xs2: wide rows on xs2 (path wide-ring off); auto+pp: on pp)
 * side by side on the llama-2-7B shapes with random valid
 * blocks. The losing v2 (bench/cuda_gemv_v2.cuh) and the TMA ring of 2026-11-29
 * are in git history (RESULTS.md has their figures).
 *
 * Per shape and variant: every row vs v1 and a few rows vs a CPU scalar reference
 * (quant.c dequantization, double dot with the same q8 activations), as normalised
 * error sqrt(sum (a-b)^2 / sum b^2); a second run must be bit-identical; then the
 * variant timed with CUDA events over NITER eager launches and one CUDA graph of
 * NITER launches. The launches cycle over copies of the weights (> 256 MB
 * in all) so the 60 MB L2 does not serve repeats. GB/s = weight bytes / time.
 *
 *   make bench/cuda-gemv && build/bench/cuda_gemv        (on the GPU machine)
 *   build/bench/cuda_gemv SHAPE VARIANT N                 (one shape substring and variant, N launches)
 *   build/bench/cuda_gemv chain [LAYERS] [N] [SLEEP_NS]   (the chain experiment below)
 *   build/bench/cuda_gemv empty [N]                       (what a kernel boundary costs alone)
 *   LAB_COPIES=1 build/bench/cuda_gemv ...                (weights in the L2: one copy, not > 256 MB)
 *
 * The kernels are the main tree's, compiled into this file (#include of the .cu
 * files) with a launch context of its own (lab_ctx); the ring loops two rows a step
 * as the backend's default (before 2026-12-01 the lab ran them one row a step). */
#include "../src/cuda/mmv_q.cu"
#include "../src/cuda/mmv_kquant.cu"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define LAB_NAME "cuda_gemv"
#include "cuda_check.h"
#include "lab_ctx.h"
#include "lab_util.h"

/* The lab fills the launch context itself (lab_ctx.h, then the tuning row of the
 * device and every path on, as the backend's defaults). The variants are the lab's policy, over the main tree's launchers:
 * v1 (one row per warp), pp (persistent ping-pong), auto (the backend's dispatch,
 * mmv_q8_launch), xst (the TMA ring wherever it applies), auto+xs2 (wide rows on xs2,
 * path wide-ring off), auto+pp (wide rows on pp). */
static void lab_ctx(cu_ctx *S) {
    cudaDeviceProp prop;
    lab_ctx_base(S, &prop);
    S->code_arch = prop.major * 100 + prop.minor * 10;
    S->tune = *cu_tune_for(S->code_arch);
    for (int i = 0; i < CU_PATH_COUNT; i++) S->on[i] = 1;
    cu_mmv_prepare();
}
struct variant {
    const char *name;
    int v;     /* 1 v1, 2 pp, 3 auto, 4 xst everywhere */
    int wide;  /* rows too wide for xs: 0 pp, 1 xs2, 2 xst2 (the backend's default) */
};
template <typename U>
static void lab_launch(cu_ctx *S, const variant &v, const cu_mmv_args *a) {
    if (v.v == 1) {
        dim3 grid((mmv_total(*a) + MMV_WARPS - 1) / MMV_WARPS), block(MMV_WARPS * 32);
        cu_launch(S, "v1", kernel_mmv_q8<U, 1>, grid, block, 0, *a);
        return;
    }
    const int wide = mmv_xs_upl(a->K / U::QK * U::UPB, 1) == 0;
    if (v.v == 2 || (wide && v.wide == 0)) return mmv_pp_launch<U, 1>(S, a, "pp");
    const cu_tune t = S->tune;
    S->on[CU_PATH_WIDE_RING] = v.wide == 2;
    if (v.v == 4) S->tune.xst_bytes = 0;
    mmv_q8_launch<U>(S, a, v.name);
    S->tune = t;
    S->on[CU_PATH_WIDE_RING] = 1;
}
static void gemv(cu_ctx *S, const variant &v, uint32_t type, const cu_mmv_args *a) {
    if (type == QTYPE_Q4_K) lab_launch<unit_k45<false>>(S, v, a);
    else lab_launch<unit_q6k>(S, v, a);
}

/* Captures what issue() launches on st into one graph and returns the time of one
 * replay in us divided by n (the launches or sequences it holds). warm: replay once
 * first, untimed (the chain experiment cannot: its barrier counters serve one replay). */
template <class F>
static double graph_us(cudaStream_t st, int n, bool warm, F issue) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    issue();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    if (warm) CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(t0, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(t1, st));
    CK(cudaEventSynchronize(t1));
    float ms;
    CK(cudaEventElapsedTime(&ms, t0, t1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    return 1000.0 * ms / n;
}

/* Random valid rows in the file layout (the CPU reference reads these). */
static void fill_rows(uint32_t type, uint8_t *w, int64_t rows, int K) {
    const int nb = K / 256;
    for (int64_t r = 0; r < rows; r++)
        for (int b = 0; b < nb; b++) {
            if (type == QTYPE_Q4_K) {
                uint8_t *blk = w + (r * nb + b) * 144;
                for (int i = 0; i < 144; i++) blk[i] = (uint8_t)rnd();
                const uint16_t d = f16bits(0.0005f + 0.002f * frnd()), dm = f16bits(0.0005f + 0.002f * frnd());
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &dm, 2);
            } else {
                uint8_t *blk = w + (r * nb + b) * 210;
                for (int i = 0; i < 208; i++) blk[i] = (uint8_t)rnd();
                const uint16_t d = f16bits(0.0002f + 0.001f * frnd());
                memcpy(blk + 208, &d, 2);
            }
        }
}

/* File rows -> device rows (cu_row_stride; q6_K planar: ql | qh | sc | d). */
static void to_device_layout(uint32_t type, const uint8_t *src, uint8_t *dst, int64_t rows, int K, int64_t stride) {
    const int nb = K / 256;
    memset(dst, 0, (size_t)(rows * stride));
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *o = dst + r * stride;
        if (type == QTYPE_Q4_K) {
            memcpy(o, src + r * nb * 144, (size_t)nb * 144);
            continue;
        }
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = src + (r * nb + b) * 210;
            memcpy(o + b * 128, blk, 128);
            memcpy(o + nb * 128 + b * 64, blk + 128, 64);
            memcpy(o + nb * 192 + b * 16, blk + 192, 16);
            memcpy(o + nb * 208 + b * 2, blk + 208, 2);
        }
    }
}

struct shape {
    const char *name;
    uint32_t type;
    int nmat, rows, K;  /* nmat matrices of rows x K each (stacked launch) */
};

/* Random activations in [-2, 2), quantized to the q8 layout on the host (hq, hd:
 * the values and 32-block scales, for a CPU reference) and uploaded. */
static cu_q8 q8_random(int K, std::vector<int8_t> &hq, std::vector<float> &hd) {
    std::vector<float> x(K), hs(K / 16);
    hq.assign(K, 0);
    hd.assign(K / 32, 0.0f);
    for (int i = 0; i < K; i++) x[i] = (frnd() - 0.5f) * 4.0f;
    for (int j = 0; j < K / 32; j++) {
        float am = 0;
        for (int i = 0; i < 32; i++) am = fmaxf(am, fabsf(x[32 * j + i]));
        const float d = am / 127.0f, id = am > 0 ? 127.0f / am : 0.0f;
        for (int i = 0; i < 32; i++) hq[32 * j + i] = (int8_t)lrintf(x[32 * j + i] * id);
        hd[j] = d;
        for (int h = 0; h < 2; h++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += hq[32 * j + 16 * h + i];
            hs[2 * j + h] = d * (float)sum;
        }
    }
    /* the lane-major copies the engine's q8 writers make (common.cuh, cu_xl_off) */
    const size_t xb = cu_xl_bytes(K);
    std::vector<uint8_t> x4(xb, 0), x6(xb, 0);
    for (int i = 0; i < K; i++) {
        x4[cu_xl4_at(i)] = (uint8_t)hq[i];
        x6[cu_xl6_at(i)] = (uint8_t)hq[i];
    }
    for (int j = 0; j < K / 32; j++) cu_xl_block(x4.data(), x6.data(), 32 * j, hd[j], hs[2 * j] + hs[2 * j + 1]);
    cu_q8 q = {};
    CK(cudaMalloc(&q.qs, K));
    CK(cudaMalloc(&q.d, K / 32 * 4));
    CK(cudaMalloc(&q.s, K / 16 * 4));
    CK(cudaMemcpy(q.qs, hq.data(), K, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(q.d, hd.data(), K / 32 * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(q.s, hs.data(), K / 16 * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&q.xl4, xb));
    CK(cudaMalloc(&q.xl6, xb));
    CK(cudaMemcpy(q.xl4, x4.data(), xb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(q.xl6, x6.data(), xb, cudaMemcpyHostToDevice));
    return q;
}
static void q8_free(cu_q8 &q) {
    CK(cudaFree(q.qs));
    CK(cudaFree(q.d));
    CK(cudaFree(q.s));
    CK(cudaFree(q.xl4));
    CK(cudaFree(q.xl6));
}

/* ---- Chain experiment (lab only, not in the engine) ----
 * Question: how fast do a layer's GEMVs go when the weight stream never stops? In the
 * engine every GEMV is its own kernel: the next one's blocks start (and fill their TMA
 * rings) only as the previous one's blocks leave, so each launch ramps up and drains
 * (qkv 28 MB runs at ~2.2 TB/s, the 107 MB output matrix at ~3.8). Here one persistent
 * kernel runs a sequence of q4_K GEMVs ("phases": per layer qkv 12288 rows, wo 4096,
 * gate+up 22016, all 4096 wide, each in its own memory) as xst does (per-warp TMA ring,
 * activations in registers, rows gw, gw + W, ...), but the ring runs on across phases:
 * a slot freed by the last rows of phase p is refilled with the first rows of phase
 * p + 1. Between phases the grid waits at a barrier (every warp arrives on a counter;
 * lane 0 of each warp spins until all have), the data dependence of a real layer; every
 * phase reads the same activations, re-read after the barrier as a real phase would.
 * Printed: the sequence as separate default launches (one graph) against the chain
 * kernel (one graph), outputs compared bit for bit, and the chain without the waits
 * (what the stream alone reaches). All blocks must be resident at once
 * (the barrier): the grid is what fits, checked with the occupancy API.
 * Two barriers (the first run, 2026-11-29, found the per-warp one costs what a launch
 * does): CH_WARPBAR, every warp arrives on the global counter and its lane 0 polls it
 * (2,112 arrivals and pollers on one address); CH_BLOCKBAR, warps arrive on a shared
 * counter, the block's last warp arrives on the global one (264 arrivals), polls it
 * alone and releases its block's warps through shared memory. Each also runs with no
 * rows at all (the barrier's own latency, nph of them in a row). */
#define CHAIN_MAXPH 24
struct chain_args {
    const uint8_t *w[CHAIN_MAXPH];
    float *out[CHAIN_MAXPH];
    int rows[CHAIN_MAXPH];
    int nph;
    int64_t stride;
    int K;
    cu_q8 q;
    unsigned *arrive; /* [nph], zero before the launch */
    int mode;         /* enum ch_mode */
    unsigned sleep_ns; /* CH_BLOCKBAR: pause between polls (0: spin) */
};
enum ch_mode { CH_WARPBAR, CH_NOWAIT /* the stream's own ceiling */, CH_BLOCKBAR };

template <typename U, int UPL>
static __global__ void __launch_bounds__(MMV_XST_WARPS * 32) kernel_chain(chain_args c, int depth) {
    pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t ch_smem[];
    __shared__ unsigned ch_arr, ch_rel; /* CH_BLOCKBAR: warps arrived (all phases), phases released */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) ch_arr = ch_rel = 0;
    __syncthreads();
    const int W = gridDim.x * MMV_XST_WARPS, gw = blockIdx.x * MMV_XST_WARPS + warp;
    const int64_t stride = c.stride;
    uint64_t *bar = (uint64_t *)ch_smem + warp * depth;  /* this warp's ring, as xst's */
    uint8_t *slot0 = ch_smem + mmv_ring_bars(MMV_XST_WARPS, depth) + (size_t)warp * depth * stride;
    const int nb = c.K / U::QK, nu = nb * U::UPB;
    /* the producer's cursor (lane 0): the next row to request is gw + pk * W of phase pp */
    int pp = 0, pk = 0;
    auto issue = [&](int s) {
        while (pp < c.nph && gw + pk * W >= c.rows[pp]) {
            pp++;
            pk = 0;
        }
        if (pp >= c.nph) return;
        tma_row(slot0 + (size_t)s * stride, c.w[pp] + (int64_t)(gw + pk * W) * stride, (uint32_t)stride, bar + s);
        pk++;
    };
    if (lane == 0) {
        mbar_init_ring(bar, depth);
        for (int s = 0; s < depth; s++) issue(s); /* weights: before the wait */
    }
    __syncwarp();
    pdl_wait();
    int i = 0; /* rows this warp consumed so far, over all phases: row i sits in slot i % depth */
    for (int p = 0; p < c.nph; p++) {
        if (p > 0 && c.mode == CH_WARPBAR) {
            if (lane == 0) {
                while (*(volatile unsigned *)(c.arrive + p - 1) < (unsigned)W) __nanosleep(64);
                __threadfence();
            }
            __syncwarp();
        } else if (p > 0 && c.mode == CH_BLOCKBAR) {
            if (lane == 0) { /* the block's last warp released phase p - 1 (below) */
                while (*(volatile unsigned *)&ch_rel < (unsigned)p)
                    if (c.sleep_ns) __nanosleep(c.sleep_ns);
                __threadfence_block(); /* the poller's acquire (gpu scope) came before its release here */
            }
            __syncwarp();
        }
        typename U::X x[UPL];
        mmv_lane_loadx<U, UPL>(c.q, 0, nu, lane, x);
        const ring_units<U, UPL> ru(nb, 0, nu, lane);
        for (int r = gw; r < c.rows[p]; r += W, i++) {
            const int s = i % depth;
            mbar_wait(bar + s, (uint32_t)(i / depth) & 1u);
            const float acc = ring_dot<U, UPL>(ru, slot0 + (size_t)s * stride, nb, 0, nu, lane, x); /* the slot's reads are done */
            if (lane == 0) {
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                issue(s);
                c.out[p][r] = acc;
            }
            __syncwarp();
        }
        if (lane == 0 && c.mode == CH_WARPBAR) {
            __threadfence(); /* this phase's outputs, before the arrival */
            atomicAdd(c.arrive + p, 1u);
        } else if (lane == 0 && c.mode == CH_BLOCKBAR) {
            __threadfence();
            if (atomicAdd_block(&ch_arr, 1u) == (unsigned)((p + 1) * MMV_XST_WARPS - 1)) {
                asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c.arrive + p) : "memory");
                for (;;) { /* the block's last warp arrived for the block and polls alone */
                    unsigned n;
                    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(n) : "l"(c.arrive + p) : "memory");
                    if (n >= gridDim.x) break;
                    if (c.sleep_ns) __nanosleep(c.sleep_ns);
                }
                *(volatile unsigned *)&ch_rel = (unsigned)(p + 1);
            }
        }
    }
#endif
}

static int chain_main(int argc, char **argv) {
    typedef unit_k45<false> U;
    const int L = argc > 2 ? atoi(argv[2]) : 4, NITER = argc > 3 ? atoi(argv[3]) : 50;
    const unsigned sleep_ns = argc > 4 ? (unsigned)atoi(argv[4]) : 0;
    const int K = 4096, nb = K / 256, UPL = 2;
    const int64_t stride = cu_row_stride(QTYPE_Q4_K, K);
    const int prow[3] = {3 * 4096, 4096, 2 * 11008}; /* qkv, wo, gate+up */
    const int nph = 3 * L;
    if (L < 1 || nph > CHAIN_MAXPH || NITER < 1) {
        fprintf(stderr, "cuda_gemv chain: 1..%d layers\n", CHAIN_MAXPH / 3);
        return 1;
    }
    if (mmv_xs_upl(nb * U::UPB, 1) != UPL) return 1;
    cu_ctx S;
    lab_ctx(&S);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 9) {
        printf("cuda_gemv chain: needs sm_90 (TMA)\n");
        return 0;
    }
    /* weights: one random set per phase shape, copied to every layer's own memory */
    std::vector<uint8_t *> dw(nph);
    int64_t bytes = 0;
    for (int t = 0; t < 3; t++) {
        std::vector<uint8_t> hf((size_t)prow[t] * nb * 144), hd((size_t)(prow[t] * stride));
        fill_rows(QTYPE_Q4_K, hf.data(), prow[t], K);
        to_device_layout(QTYPE_Q4_K, hf.data(), hd.data(), prow[t], K, stride);
        for (int l = 0; l < L; l++) {
            CK(cudaMalloc(&dw[3 * l + t], hd.size()));
            CK(cudaMemcpy(dw[3 * l + t], hd.data(), hd.size(), cudaMemcpyHostToDevice));
            bytes += (int64_t)hd.size();
        }
    }
    /* activations */
    std::vector<int8_t> hq;
    std::vector<float> hdd;
    cu_q8 q = q8_random(K, hq, hdd);
    std::vector<float *> out1(nph), out2(nph);
    for (int p = 0; p < nph; p++) {
        CK(cudaMalloc(&out1[p], (size_t)prow[p % 3] * 4));
        CK(cudaMalloc(&out2[p], (size_t)prow[p % 3] * 4));
    }
    unsigned *arrive;
    CK(cudaMalloc(&arrive, (size_t)(NITER + 1) * nph * sizeof(unsigned)));
    /* the chain kernel: the xst ring budget, the grid what fits (every block resident) */
    const int depth = S.tune.xst_depth;
    const size_t smem = mmv_ring_smem(MMV_XST_WARPS, depth, stride);
    CK(cudaFuncSetAttribute(kernel_chain<U, UPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_chain<U, UPL>, MMV_XST_WARPS * 32, smem));
    if (per_sm < 1) {
        printf("cuda_gemv chain: the kernel does not fit on an SM\n");
        return 1;
    }
    if (per_sm > MMV_XST_PERSM) per_sm = MMV_XST_PERSM;
    const int blocks = per_sm * S.num_sms;
    auto chain_args_for = [&](int it, std::vector<float *> &out) {
        chain_args c;
        memset(&c, 0, sizeof c);
        for (int p = 0; p < nph; p++) {
            c.w[p] = dw[p];
            c.out[p] = out[p];
            c.rows[p] = prow[p % 3];
        }
        c.nph = nph;
        c.stride = stride;
        c.K = K;
        c.q = q;
        c.arrive = arrive + (size_t)it * nph;
        return c;
    };
    auto run_chain = [&](int it, std::vector<float *> &out, int mode, int norows) {
        chain_args c = chain_args_for(it, out);
        c.mode = mode;
        c.sleep_ns = sleep_ns;
        if (norows)
            for (int p = 0; p < nph; p++) c.rows[p] = 0;
        cu_launch(&S, "chain", kernel_chain<U, UPL>, dim3(blocks), dim3(MMV_XST_WARPS * 32), smem, c, depth);
    };
    const variant dflt = {"auto", 3, 2};
    auto run_separate = [&](std::vector<float *> &out) {
        for (int p = 0; p < nph; p++) {
            cu_mmv_args a;
            memset(&a, 0, sizeof a);
            a.w[0] = dw[p];
            a.out[0] = out[p];
            a.rows[0] = prow[p % 3];
            a.nmat = 1;
            a.stride = stride;
            a.K = K;
            a.ncols = 1;
            a.q = q;
            a.ring_pre = S.tune.xst_pre;
            gemv(&S, dflt, QTYPE_Q4_K, &a);
        }
    };
    /* parity: the chain against the separate launches, bit for bit */
    CK(cudaMemset(arrive, 0, (size_t)(NITER + 1) * nph * sizeof(unsigned)));
    run_separate(out1);
    run_chain(NITER, out2, CH_WARPBAR, 0);
    CK(cudaStreamSynchronize(S.stream));
    int mism_blk = 0; /* the block barrier too */
    CK(cudaMemset(arrive, 0, (size_t)(NITER + 1) * nph * sizeof(unsigned)));
    std::vector<float *> out3(nph);
    for (int p = 0; p < nph; p++) {
        CK(cudaMalloc(&out3[p], (size_t)prow[p % 3] * 4));
        CK(cudaMemset(out3[p], 0xff, (size_t)prow[p % 3] * 4));
    }
    run_chain(NITER, out3, CH_BLOCKBAR, 0);
    CK(cudaStreamSynchronize(S.stream));
    CK(cudaGetLastError());
    int mism = 0;
    for (int p = 0; p < nph; p++) {
        std::vector<float> a(prow[p % 3]), b(prow[p % 3]);
        CK(cudaMemcpy(a.data(), out1[p], a.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b.data(), out2[p], b.size() * 4, cudaMemcpyDeviceToHost));
        if (memcmp(a.data(), b.data(), a.size() * 4)) mism++;
        CK(cudaMemcpy(b.data(), out3[p], b.size() * 4, cudaMemcpyDeviceToHost));
        if (memcmp(a.data(), b.data(), a.size() * 4)) mism_blk++;
    }
    /* timing: NITER sequences in one graph each way */
    /* ways: separate; chain with CH_WARPBAR, CH_NOWAIT, CH_BLOCKBAR; barriers alone (no rows) */
    const int NWAY = 6;
    const int wmode[NWAY] = {-1, CH_WARPBAR, CH_NOWAIT, CH_BLOCKBAR, CH_WARPBAR, CH_BLOCKBAR};
    double us[NWAY];
    for (int way = 0; way < NWAY; way++) {
        CK(cudaMemsetAsync(arrive, 0, (size_t)(NITER + 1) * nph * sizeof(unsigned), S.stream));
        us[way] = graph_us(S.stream, NITER, false, [&] {
            for (int it = 0; it < NITER; it++) {
                if (way == 0) run_separate(out1);
                else run_chain(it, out2, wmode[way], way >= 4);
            }
        });
    }
    printf("cuda_gemv chain: %s, %d layers x (qkv, wo, gate+up) q4_K, %.1f MB per sequence, %d sequences; "
           "chain grid %d blocks (%d per SM), ring depth %d, block barrier polls every %u ns\n",
           prop.name, L, bytes / 1e6, NITER, blocks, per_sm, depth, sleep_ns);
    printf("| way | us per sequence | GB/s |\n|---|---:|---:|\n");
    printf("| separate launches (default GEMV, graph) | %.2f | %.0f |\n", us[0], bytes / 1e3 / us[0]);
    printf("| one chain kernel, per-warp barrier (graph) | %.2f | %.0f |\n", us[1], bytes / 1e3 / us[1]);
    printf("| one chain kernel, no waits between phases | %.2f | %.0f |\n", us[2], bytes / 1e3 / us[2]);
    printf("| one chain kernel, per-block barrier | %.2f | %.0f |\n", us[3], bytes / 1e3 / us[3]);
    printf("| %d per-warp barriers alone (no rows; a launch included) | %.2f | %.2f us each |\n", nph - 1, us[4], us[4] / (nph - 1));
    printf("| %d per-block barriers alone (no rows; a launch included) | %.2f | %.2f us each |\n", nph - 1, us[5], us[5] / (nph - 1));
    printf("cuda_gemv chain: %s (phases that differ from the separate launches: %d of %d per-warp, %d per-block)\n",
           mism || mism_blk ? "FAIL" : "ok", mism, nph, mism_blk);
    return mism || mism_blk ? 1 : 0;
}

/* ---- The boundary experiment (`cuda_gemv empty [N]`) ----
 * What a kernel boundary costs with nothing else in it: N launches in one graph of a
 * kernel that only triggers, waits and has one thread add 1 to a counter the launch
 * before wrote (the dependence of a real step), per grid shape, with and without PDL;
 * and launches alternating a GEMV-sized grid with a one-block (norm-like) grid. */
static __global__ void kernel_empty(unsigned *ctr) {
    pdl_trigger();
    pdl_wait();
    if (blockIdx.x == 0 && threadIdx.x == 0) ctr[0] += 1;
}
static int empty_main(int argc, char **argv) {
    const int N = argc > 2 ? atoi(argv[2]) : 400;
    cu_ctx S;
    lab_ctx(&S);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    unsigned *ctr;
    CK(cudaMalloc(&ctr, 4));
    CK(cudaMemset(ctr, 0, 4));
    const int sms = S.num_sms;
    struct cfg { int grid, block, grid2, block2; } cfgs[] = {
        {1, 32, 0, 0}, {1, 1024, 0, 0}, {sms, 256, 0, 0}, {2 * sms, 256, 0, 0}, {4 * sms, 128, 0, 0},
        {2 * sms, 256, 1, 1024}, {2 * sms, 256, 32, 128}};
    printf("cuda_gemv empty: %s, %d launches per graph\n| grid x block | PDL us per launch | no PDL us per launch |\n|---|---:|---:|\n",
           prop.name, N);
    unsigned expect = 0;
    for (const cfg &c : cfgs) {
        double us[2];
        for (int pdl = 1; pdl >= 0; pdl--) {
            S.pdl = pdl;
            us[pdl] = graph_us(S.stream, N, true, [&] {
                for (int i = 0; i < N; i++) {
                    const bool second = c.grid2 && (i & 1);
                    cu_launch(&S, "empty", kernel_empty, dim3(second ? c.grid2 : c.grid),
                              dim3(second ? c.block2 : c.block), 0, ctr);
                }
            });
            expect += 2 * N; /* the warm replay and the timed one */
        }
        if (c.grid2) printf("| %d x %d alternating with %d x %d | %.2f | %.2f |\n", c.grid, c.block, c.grid2, c.block2, us[1], us[0]);
        else printf("| %d x %d | %.2f | %.2f |\n", c.grid, c.block, us[1], us[0]);
    }
    unsigned got;
    CK(cudaMemcpy(&got, ctr, 4, cudaMemcpyDeviceToHost));
    printf("cuda_gemv empty: counter %u, expected %u: %s\n", got, expect, got == expect ? "ok" : "FAIL");
    return got == expect ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "chain")) return chain_main(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "empty")) return empty_main(argc, argv);
    /* optional filters (for profiling one kernel): shape name substring, variant name, launches */
    const char *only_shape = argc > 1 ? argv[1] : NULL, *only_var = argc > 2 ? argv[2] : NULL;
    const int NITER = argc > 3 ? atoi(argv[3]) : 200;
    const shape shapes[] = {
        {"wo 4096x4096", QTYPE_Q4_K, 1, 4096, 4096},
        {"qkv 3x4096x4096", QTYPE_Q4_K, 3, 4096, 4096},
        {"gate+up 2x11008x4096", QTYPE_Q4_K, 2, 11008, 4096},
        {"down 4096x11008", QTYPE_Q4_K, 1, 4096, 11008},
        {"down 4096x11008", QTYPE_Q6_K, 1, 4096, 11008},
        {"output 32000x4096", QTYPE_Q6_K, 1, 32000, 4096},
    };
    cu_ctx S;
    lab_ctx(&S);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("cuda_gemv: %s, %d SMs, L2 %d MB; %d launches per timing, PDL %s, xst ring depth %d\n",
           prop.name, S.num_sms, prop.l2CacheSize >> 20, NITER, S.pdl ? "on" : "off", S.tune.xst_depth);
    std::vector<variant> vars = {{"v1", 1, 0}, {"pp", 2, 0}, {"auto", 3, 2}, {"xst", 4, 2},
                                 {"auto+xs2", 3, 1}, {"auto+pp", 3, 0}};
    printf("| shape | type | MB | variant | err vs v1 | err vs cpu | us | GB/s | graph us | graph GB/s |\n"
           "|---|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
    int fails = 0;
    for (const shape &sh : shapes) {
        if (only_shape && !strstr(sh.name, only_shape)) continue;
        const int K = sh.K, nb = K / 256, total = sh.nmat * sh.rows;
        const int64_t stride = cu_row_stride(sh.type, K);
        const int64_t fbytes = (int64_t)nb * (sh.type == QTYPE_Q4_K ? 144 : 210);
        const int64_t mbytes = stride * sh.rows;  /* one matrix */
        const int64_t lbytes = mbytes * sh.nmat;  /* one launch */
        std::vector<uint8_t> hf((size_t)(fbytes * total)), hd((size_t)(stride * total));
        fill_rows(sh.type, hf.data(), total, K);
        to_device_layout(sh.type, hf.data(), hd.data(), total, K, stride);
        /* activations */
        std::vector<int8_t> hq;
        std::vector<float> hdd;
        cu_q8 q = q8_random(K, hq, hdd);
        /* weight copies: > 256 MB in all */
        int ncopy = (int)((256ll << 20) / lbytes) + 1;
        if (ncopy < 2) ncopy = 2;
        /* LAB_COPIES=1: one copy, so a launch under the L2's size finds its weights
         * there (what a GEMV would take if they were prefetched into the L2) */
        if (getenv("LAB_COPIES") && atoi(getenv("LAB_COPIES")) > 0) ncopy = atoi(getenv("LAB_COPIES"));
        std::vector<uint8_t *> dw(ncopy);
        for (int c = 0; c < ncopy; c++) {
            CK(cudaMalloc(&dw[c], (size_t)lbytes));
            CK(cudaMemcpy(dw[c], hd.data(), (size_t)lbytes, cudaMemcpyHostToDevice));
        }
        float *dout;
        CK(cudaMalloc(&dout, (size_t)total * 4 * 3));
        auto args = [&](int copy, float *out) {
            cu_mmv_args a;
            memset(&a, 0, sizeof a);
            a.nmat = sh.nmat;
            for (int m = 0; m < sh.nmat; m++) {
                a.w[m] = dw[copy] + (int64_t)m * mbytes;
                a.out[m] = out + (int64_t)m * sh.rows;
                a.rows[m] = sh.rows;
            }
            a.stride = stride;
            a.K = K;
            a.ncols = 1;
            a.q = q;
            a.ring_pre = S.tune.xst_pre;
            return a;
        };
        const int ref_rows[] = {0, 1, 17, total / 2, total / 2 + 5, total - 2, total - 1};
        const int nref = (int)(sizeof ref_rows / sizeof ref_rows[0]);
        std::vector<float> wr(K), rc(nref), rv(nref);
        for (int i = 0; i < nref; i++) {
            const int r = ref_rows[i];
            quant_dequantize_row(sh.type, hf.data() + (int64_t)r * fbytes, wr.data(), K);
            double sum = 0;
            for (int k = 0; k < K; k++) sum += (double)wr[k] * ((double)hq[k] * hdd[k / 32]);
            rc[i] = (float)sum;
        }
        std::vector<float> o1(total), ov(total), ov2(total);
        cudaEvent_t t0, t1;
        CK(cudaEventCreate(&t0));
        CK(cudaEventCreate(&t1));
        for (const variant &v : vars) {
            if (only_var && strcmp(v.name, only_var)) continue;
            /* parity: poison, run twice */
            CK(cudaMemset(dout, 0xff, (size_t)total * 4 * 3));
            cu_mmv_args a1 = args(0, dout), a2 = args(0, dout + total);
            gemv(&S, v, sh.type, &a1);
            gemv(&S, v, sh.type, &a2);
            CK(cudaStreamSynchronize(S.stream));
            CK(cudaGetLastError());
            CK(cudaMemcpy(ov.data(), dout, (size_t)total * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(ov2.data(), dout + total, (size_t)total * 4, cudaMemcpyDeviceToHost));
            if (&v == &vars[0] || (only_var && !strcmp(v.name, only_var))) o1 = ov;  /* parity base: v1 */
            const double ev1 = nerr(ov.data(), o1.data(), total);
            const bool det = memcmp(ov.data(), ov2.data(), (size_t)total * 4) == 0;
            for (int i = 0; i < nref; i++) rv[i] = ov[ref_rows[i]];
            const double ec = nerr(rv.data(), rc.data(), nref);
            bool ok = ev1 < 1e-5 && ec < 1e-5 && det;
            if (!ok) fails++;
            /* timing: eager, then one graph */
            std::vector<cu_mmv_args> A(NITER);
            for (int i = 0; i < NITER; i++) A[i] = args(i % ncopy, dout);
            for (int i = 0; i < 10; i++) gemv(&S, v, sh.type, &A[i]);  /* warm up */
            CK(cudaEventRecord(t0, S.stream));
            for (int i = 0; i < NITER; i++) gemv(&S, v, sh.type, &A[i]);
            CK(cudaEventRecord(t1, S.stream));
            CK(cudaEventSynchronize(t1));
            float ms;
            CK(cudaEventElapsedTime(&ms, t0, t1));
            const double us_e = 1000.0 * ms / NITER;
            const double us_g = graph_us(S.stream, NITER, true, [&] {
                for (int i = 0; i < NITER; i++) gemv(&S, v, sh.type, &A[i]);
            });
            const double gb = (double)lbytes / 1e3;  /* bytes / us / 1e3 = GB/s */
            printf("| %s | %s | %.1f | %s | %.1e%s | %.1e%s | %.2f | %.0f | %.2f | %.0f |\n", sh.name,
                   sh.type == QTYPE_Q4_K ? "q4_K" : "q6_K", lbytes / 1e6, v.name, ev1, det ? "" : " NONDET", ec,
                   ok ? "" : " FAIL", us_e, gb / us_e, us_g, gb / us_g);
            fflush(stdout);
        }
        CK(cudaEventDestroy(t0));
        CK(cudaEventDestroy(t1));
        for (int c = 0; c < ncopy; c++) CK(cudaFree(dw[c]));
        CK(cudaFree(dout));
        q8_free(q);
    }
    printf("cuda_gemv: %s (%d shape x variant(s) failed parity: vs v1 and vs cpu < 1e-5, deterministic)\n",
           fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}

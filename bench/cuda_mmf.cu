/* bench/cuda_mmf.cu - kernel lab for path mmf (src/cuda/mmf.cu: q4_K prefill GEMMs on
 * f16 tensor cores, the weights dequantized in registers from the fragment plane),
 * beside the int8 MMQ kernel (mmq.cu, on its W_dsc plane, the backend's tile choice) on
 * the same shapes and data, with both prepasses timed.
 *
 * The kernels are the main tree's (src/cuda/mmf.cu, #included, as cuda_mmq.cu does);
 * the variants are tile shapes of the same kernel. Per shape, n and variant: the time of
 * one launch (median of 7 x 10, cycling over > 400 MB of weight copies), TOP/s, and the
 * normalised error against an f32 reference GEMM (K <= 4096 only; -1 otherwise).
 *
 *   build/bench/cuda_mmf [SHAPE [N]]      (on the GPU machine) */
#include "../src/cuda/mmq.cu"
#include "../src/cuda/mmf.cu"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define LAB_NAME "cuda_mmf"
#include "cuda_check.h"
#include "lab_ctx.h"
#include "lab_util.h"

/* f32 reference: out[n][R] = x . dequant(W)^T, 16x16 tiles */
static __global__ void kernel_ref_deq(float *wf, const uint8_t *W, int64_t stride, int R, int K) {
    const int r = blockIdx.y, i = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= K) return;
    dq8<QTYPE_Q4_K>(W + (int64_t)r * stride, K / 256, i, wf + (int64_t)r * K + i);
}
static __global__ void kernel_ref_gemm(float *out, const float *x, const float *wf, int n, int R, int K) {
    __shared__ float xs[16][17], ws[16][17];
    const int tr = threadIdx.x, tt = threadIdx.y;
    const int r = blockIdx.x * 16 + tr, tok = blockIdx.y * 16 + tt;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        xs[tt][tr] = (blockIdx.y * 16 + tt < n) ? x[(int64_t)(blockIdx.y * 16 + tt) * K + k0 + tr] : 0.f;
        ws[tt][tr] = (blockIdx.x * 16 + tt < R) ? wf[(int64_t)(blockIdx.x * 16 + tt) * K + k0 + tr] : 0.f;
        __syncthreads();
        for (int k = 0; k < 16; k++) acc += xs[tt][k] * ws[tr][k];
        __syncthreads();
    }
    if (r < R && tok < n) out[(int64_t)tok * R + r] = acc;
}

typedef void (*mmf_fn)(cu_ctx *, float *, const uint8_t *, int, int, const __half *, int);
template <int WM, int WN, int NT, int ST, int LB>
static void lab_mmf(cu_ctx *S, float *out, const uint8_t *P, int R, int K, const __half *xh, int n) {
    mmf_launch<QTYPE_Q4_K, WM, WN, NT, ST, LB>(S, out, NULL, INT_MAX, R, P, R, K, xh, n, NULL, 0);
}
struct mvar {
    const char *name;
    mmf_fn f;
};
#define MV(wm, wn, nt, st, lb) {#wm "x" #wn " nt" #nt " st" #st " lb" #lb, lab_mmf<wm, wn, nt, st, lb>}
static const mvar mvars[] = {
    MV(4, 2, 8, 4, 1), MV(4, 2, 8, 3, 2), MV(4, 2, 8, 4, 2), MV(4, 2, 4, 4, 2), MV(2, 4, 4, 4, 2),
    MV(4, 1, 8, 4, 2), MV(2, 2, 8, 4, 2), MV(4, 4, 4, 3, 1),
};

/* the column kernel (n < 128): NT column tiles of 8, RT row tiles a warp, KS warps over
 * K, U chunks ahead */
template <int NT, int RT, int KS, int U>
static void lab_cols(cu_ctx *S, float *out, const uint8_t *P, int R, int K, const __half *xh, int n) {
    mmf_cols_launch<QTYPE_Q4_K, NT, RT, KS, U>(S, out, NULL, INT_MAX, R, P, R, K, xh, n, NULL, 0);
}
/* Experiment: the column kernel with a cp.async ring per warp instead of register
 * prefetch. Each warp streams its own K/32 chunks (RT records and the chunk's 8 token
 * rows of B, 64 bytes each, 16-byte pieces swizzled by (row >> 1) & 3 so ldmatrix's 8
 * rows fall in distinct bank groups) through ST shared-memory stages, ST-1 in flight,
 * without block barriers; the registers hold only the accumulators, so the bytes in
 * flight are bounded by shared memory (2 blocks of 16 warps a SM at ST 6, q4_K RT 2),
 * not by registers. Same records, arithmetic and warp-order sum as kernel_mmf_cols. */
template <int T, int RT, int KS, int ST>
static __global__ void __launch_bounds__(32 * KS)
kernel_mmf_ring(float *out, const uint8_t *P, int R, int K, const __half *xh, int n) {
    constexpr int REC = mmf_fmt<T>::rec, SC = mmf_fmt<T>::codes, QW = T == QTYPE_Q6_K ? 4 : 2;
    constexpr int AB = RT * REC, STAGE = AB + 512, NP = STAGE / 16, RP = REC / 16;
    extern __shared__ __align__(16) uint8_t ring_sh[];
    __shared__ float sum[RT * 4][32];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int rt0 = blockIdx.x * RT;
    const int KC = K / 32, n_rt = (R + 15) / 16, nrt = min(RT, n_rt - rt0);
    const int kc0 = (int)((int64_t)warp * KC / KS), kc1 = (int)((int64_t)(warp + 1) * KC / KS);
    uint8_t *ring = ring_sh + warp * ST * STAGE;
    auto issue = [&](int kc) {
        uint8_t *st = ring + ((kc - kc0) % ST) * STAGE;
#pragma unroll
        for (int p = lane; p < NP; p += 32) {
            if (p < AB / 16) {
                const int i = p / RP;
                if (i < nrt) cp_async16(st + p * 16, P + ((int64_t)(rt0 + i) * KC + kc) * REC + (p % RP) * 16, 16);
            } else {
                const int q = p - AB / 16, r = q >> 2, c = q & 3;
                cp_async16(st + AB + r * 64 + ((c ^ ((r >> 1) & 3)) << 4), xh + (int64_t)r * K + kc * 32 + c * 8, 16);
            }
        }
    };
    float acc[RT][4];
#pragma unroll
    for (int i = 0; i < RT; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    pdl_wait();
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (kc0 + s < kc1) issue(kc0 + s);
        cp_async_commit();
    }
    for (int kc = kc0; kc < kc1; kc++) {
        cp_async_wait<ST - 2>();
        __syncwarp(); /* chunk kc visible to the warp; the slot of kc - 1 free */
        if (kc + ST - 1 < kc1) issue(kc + ST - 1);
        cp_async_commit();
        const uint8_t *st = ring + ((kc - kc0) % ST) * STAGE;
        uint32_t b[4];
        {
            const int m = lane >> 3, r = lane & 7;
            ldsm_x4(b, st + AB + r * 64 + ((m ^ ((r >> 1) & 3)) << 4));
        }
#pragma unroll
        for (int i = 0; i < RT; i++) {
            if (i >= nrt) continue;
            const uint8_t *rec = st + i * REC;
            __align__(16) uint32_t q[4];
            if constexpr (QW == 4) *(uint4 *)q = *(const uint4 *)(rec + lane * 16);
            else *(uint2 *)q = *(const uint2 *)(rec + lane * 8);
            uint32_t af[2][4];
            mmf_rec_frags<T>(q, *(const __half2 *)(rec + SC + g * 4), *(const __half2 *)(rec + SC + (g + 8) * 4), af);
            mma_f16_16816(acc[i], af[0], b[0], b[1]);
            mma_f16_16816(acc[i], af[1], b[2], b[3]);
        }
    }
    cp_async_wait<0>();
    for (int w = 0; w < KS; w++) {
        if (warp == w) {
#pragma unroll
            for (int i = 0; i < RT; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float *d = &sum[i * 4 + e][lane];
                    *d = w ? *d + acc[i][e] : acc[i][e];
                }
        }
        __syncthreads();
    }
    for (int o = threadIdx.x; o < RT * 4 * 32; o += 32 * KS) {
        const int l = o % 32, c = o / 32, i = c / 4, e = c % 4;
        const int r = (rt0 + i) * 16 + (l >> 2) + (e >> 1) * 8, tk = 2 * (l & 3) + (e & 1);
        if (r < R && tk < n) out[(int64_t)tk * R + r] = sum[c][l];
    }
}
template <int RT, int KS, int ST>
static void lab_ring(cu_ctx *S, float *out, const uint8_t *P, int R, int K, const __half *xh, int n) {
    constexpr int smem = KS * ST * (RT * mmf_fmt<QTYPE_Q4_K>::rec + 512);
    static int attr_set = 0;
    if (!attr_set) {
        CK(cudaFuncSetAttribute(kernel_mmf_ring<QTYPE_Q4_K, RT, KS, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attr_set = 1;
    }
    dim3 grid(((R + 15) / 16 + RT - 1) / RT);
    cu_launch(S, "mmf_ring", kernel_mmf_ring<QTYPE_Q4_K, RT, KS, ST>, grid, dim3(32 * KS), smem, out, P, R, K, xh, n);
}

/* the product's TMA column kernel (sm_90) over its tile parameters */
template <int RT, int KS, int ST, int CH>
static void lab_tma(cu_ctx *S, float *out, const uint8_t *P, int R, int K, const __half *xh, int n) {
    mmf_cols_tma_launch<QTYPE_Q4_K, RT, KS, ST, CH>(S, out, NULL, INT_MAX, R, P, R, K, xh, n, NULL, 0);
}
#define TV(rt, ks, st, ch) {"tma rt" #rt " ks" #ks " st" #st " ch" #ch, lab_tma<rt, ks, st, ch>}
#define RV(rt, ks, st) {"ring rt" #rt " ks" #ks " st" #st, lab_ring<rt, ks, st>}
#define CV(nt, rt, ks, u) {"cols nt" #nt " rt" #rt " ks" #ks " u" #u, lab_cols<nt, rt, ks, u>}
static const mvar cvars8[] = {CV(1, 2, 16, 2), TV(2, 8, 4, 4),  TV(4, 8, 2, 2),  TV(2, 8, 2, 4), TV(2, 8, 2, 2),
                              TV(4, 4, 2, 2),  TV(2, 16, 2, 4), TV(2, 8, 5, 4),  TV(4, 8, 3, 2), TV(2, 4, 3, 4),
                              TV(2, 16, 3, 2), TV(1, 8, 4, 4)};
static const mvar cvars16[] = {CV(2, 2, 16, 2), CV(2, 2, 8, 2), CV(2, 4, 8, 2)};
static const mvar cvars32[] = {CV(4, 2, 8, 2), CV(4, 2, 16, 1), CV(4, 1, 16, 2)};
static const mvar cvars64[] = {CV(8, 2, 8, 1), CV(8, 1, 16, 1), CV(8, 4, 8, 1)};

struct shape {
    const char *name;
    int rows, K;
};
static const shape shapes[] = {
    {"7b.q|k|o 4096x4096", 4096, 4096},       {"7b.q+k 8192x4096", 8192, 4096},       {"7b.gate+up 22016x4096", 22016, 4096},
    {"7b.down 4096x11008", 4096, 11008 / 256 * 256}, {"8b.gate+up 28672x4096", 28672, 4096},
    {"8b.down 4096x14336", 4096, 14336},       {"8b.k|v 1024x4096", 1024, 4096},
};

int main(int argc, char **argv) {
    const char *want_shape = argc > 1 ? argv[1] : NULL;
    const int one_n = argc > 2 ? atoi(argv[2]) : 0;
    cu_ctx S_;
    cu_ctx *S = &S_;
    cudaDeviceProp prop;
    lab_ctx_base(S, &prop);
    printf("cuda_mmf: %s, %d SMs\n", prop.name, S->num_sms);
    const int ns_all[] = {8, 16, 32, 64, 512, 2048, 1266};
    const int NMAX = 2048, KMAX = 14336, RMAX = 28672;
    float *x, *out, *ref;
    __half *xh;
    CK(cudaMalloc(&x, sizeof(float) * (size_t)NMAX * KMAX));
    CK(cudaMalloc(&xh, sizeof(__half) * (size_t)NMAX * KMAX));
    CK(cudaMalloc(&out, sizeof(float) * (size_t)NMAX * RMAX));
    CK(cudaMalloc(&ref, sizeof(float) * (size_t)NMAX * RMAX));
    float *wf;
    CK(cudaMalloc(&wf, sizeof(float) * (size_t)RMAX * 4096));
    {
        std::vector<float> hx((size_t)NMAX * KMAX);
        for (auto &v : hx) v = (frnd() - 0.5f) * 4.0f;
        CK(cudaMemcpy(x, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    cu_mmq_act a;
    const int npad_max = cu_mmq_npad(NMAX);
    CK(cudaMalloc(&a.q, (size_t)npad_max * KMAX));
    CK(cudaMalloc(&a.d, sizeof(float) * (size_t)npad_max * (KMAX / 32)));
    CK(cudaMalloc(&a.s, sizeof(float) * (size_t)npad_max * (KMAX / 32)));
    CK(cudaMalloc(&a.is, sizeof(int) * (size_t)npad_max * (KMAX / 16)));
    a.part_cap = (int64_t)4 << 20;
    CK(cudaMalloc(&a.part, sizeof(float) * (size_t)a.part_cap));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("%-24s %5s %-20s %9s %8s %9s\n", "shape", "n", "variant", "us", "TOP/s", "err/f32");
    for (const shape &sh : shapes) {
        if (want_shape && !strstr(sh.name, want_shape)) continue;
        const int64_t stride = cu_row_stride(QTYPE_Q4_K, sh.K);
        const int64_t mbytes = stride * sh.rows;
        const int64_t pbytes = (int64_t)cu_mmf_plane_bytes(QTYPE_Q4_K, sh.rows, sh.K);
        const int64_t qbytes = (int64_t)cu_mmq_plane_bytes(QTYPE_Q4_K, sh.rows, sh.K);
        const int copies = (int)std::max<int64_t>(1, (400ll << 20) / (mbytes + pbytes + qbytes) + 1);
        std::vector<uint8_t> hw((size_t)mbytes);
        for (int64_t i = 0; i < mbytes; i++) hw[i] = (uint8_t)rnd();
        for (int r = 0; r < sh.rows; r++)
            for (int b = 0; b < sh.K / 256; b++) {
                const uint16_t d = f16bits(0.0005f + 0.002f * frnd()), dm = f16bits(0.0005f + 0.002f * frnd());
                memcpy(&hw[r * stride + b * 144], &d, 2);
                memcpy(&hw[r * stride + b * 144 + 2], &dm, 2);
            }
        uint8_t *w, *pl, *ql;
        CK(cudaMalloc(&w, (size_t)(mbytes * copies)));
        CK(cudaMalloc(&pl, (size_t)(pbytes * copies)));
        CK(cudaMalloc(&ql, (size_t)(qbytes * copies)));
        for (int c = 0; c < copies; c++) {
            CK(cudaMemcpy(w + c * mbytes, hw.data(), (size_t)mbytes, cudaMemcpyHostToDevice));
            cu_mmf_plane_build(S, QTYPE_Q4_K, pl + c * pbytes, w + c * mbytes, stride, sh.rows, sh.K);
            cu_mmq_plane_build(S, QTYPE_Q4_K, ql + c * qbytes, w + c * mbytes, stride, sh.rows, sh.K);
        }
        CK(cudaStreamSynchronize(S->stream));
        CK(cudaGetLastError());
        const int refK = sh.K <= 4096;
        if (refK) kernel_ref_deq<<<dim3(sh.K / 8 / 128, sh.rows), 128, 0, S->stream>>>(wf, w, stride, sh.rows, sh.K);
        for (int n : ns_all) {
            if (one_n && n != one_n) continue;
            const int64_t no = (int64_t)n * sh.rows;
            std::vector<float> href((size_t)no), hout((size_t)no);
            if (refK) {
                kernel_ref_gemm<<<dim3((sh.rows + 15) / 16, (n + 15) / 16), dim3(16, 16), 0, S->stream>>>(ref, x, wf, n,
                                                                                                       sh.rows, sh.K);
                CK(cudaStreamSynchronize(S->stream));
                CK(cudaMemcpy(href.data(), ref, sizeof(float) * (size_t)no, cudaMemcpyDeviceToHost));
            }
            /* prepasses */
            float t[7];
            auto time = [&](auto &&fn) {
                int c = 0;
                for (int rep = 0; rep < 7; rep++) {
                    CK(cudaEventRecord(e0, S->stream));
                    for (int it = 0; it < 10; it++, c = (c + 1) % copies) fn(c);
                    CK(cudaEventRecord(e1, S->stream));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&t[rep], e0, e1));
                }
                std::sort(t, t + 7);
                return 100.0 * t[3];
            };
            auto check = [&]() {
                if (!refK) return -1.0;
                CK(cudaMemcpy(hout.data(), out, sizeof(float) * (size_t)no, cudaMemcpyDeviceToHost));
                return nerr(hout.data(), href.data(), no);
            };
            const double ops = 2.0 * sh.rows * sh.K * n;
            double us = time([&](int) { cu_mmf_convert(S, xh, x, n, sh.K); });
            printf("%-24s %5d %-20s %9.1f\n", sh.name, n, "f16 prepass", us);
            us = time([&](int) { cu_mmq_quantize(S, x, n, sh.K, &a); });
            printf("%-24s %5d %-20s %9.1f\n", sh.name, n, "int8 prepass", us);
            CK(cudaMemset(out, 0xff, sizeof(float) * (size_t)no));
            mmq_pick<MMQ_Q4X>(S, out, sh.rows, w, stride, ql, sh.rows, sh.K, &a, n, NULL, 0, nullptr, INT_MAX);
            CK(cudaStreamSynchronize(S->stream));
            double err = check();
            us = time([&](int c) {
                mmq_pick<MMQ_Q4X>(S, out, sh.rows, w + c * mbytes, stride, ql + c * qbytes, sh.rows, sh.K, &a, n, NULL, 0,
                                  nullptr, INT_MAX);
            });
            printf("%-24s %5d %-20s %9.1f %8.1f %9.2g\n", sh.name, n, "mmq int8 (auto)", us, ops / us * 1e-6, err);
            cu_mmf_convert(S, xh, x, n, sh.K);
            /* (the column kernel's variants below 128 columns, by column group) */
            const std::vector<mvar> vs = n >= CU_MMF_MIN_N ? std::vector<mvar>(std::begin(mvars), std::end(mvars))
                                         : n <= 8  ? std::vector<mvar>(std::begin(cvars8), std::end(cvars8))
                                         : n <= 16 ? std::vector<mvar>(std::begin(cvars16), std::end(cvars16))
                                         : n <= 32 ? std::vector<mvar>(std::begin(cvars32), std::end(cvars32))
                                                   : std::vector<mvar>(std::begin(cvars64), std::end(cvars64));
            for (const mvar &v : vs) {
                CK(cudaMemset(out, 0xff, sizeof(float) * (size_t)no));
                v.f(S, out, pl, sh.rows, sh.K, xh, n);
                CK(cudaStreamSynchronize(S->stream));
                CK(cudaGetLastError());
                err = check();
                us = time([&](int c) { v.f(S, out, pl + c * pbytes, sh.rows, sh.K, xh, n); });
                printf("%-24s %5d %-20s %9.1f %8.1f %9.2g %7.0f GB/s\n", sh.name, n, v.name, us, ops / us * 1e-6, err,
                       (double)pbytes / us * 1e-3);
                fflush(stdout);
            }
        }
        CK(cudaFree(w));
        CK(cudaFree(pl));
        CK(cudaFree(ql));
    }
    return 0;
}

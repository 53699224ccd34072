/* bench/cuda_mmq.cu - kernel lab for the prefill MMQ GEMMs (src/cuda/mmq.cu): tile
 * shapes and pipeline depths side by side on the llama-2-7B / llama-3-8B GEMM shapes,
 * with the activation prepass timed beside them.
 *
 * A variant is one instantiation of the main tree's kernel_mmq<T, WM, WN, NT, ST>:
 * WM x WN warps, each 32 rows x 8*NT tokens, ST shared-memory stages (ST-1 k-tiles in
 * flight), split over K in up to KS blocks (ks8: up to 8; mmq_launch chooses), LB blocks
 * a SM resident (the register cap of __launch_bounds__). "auto"
 * is the backend's choice (mmq_pick); ko1/ko2/ko5 are the kernel's knockouts (mmq.cu KO). A q4_K
 * or q6_K shape runs every variant on the weights and again with their plane
 * (cu_mmq_plane_build; "plane": its err against auto without is 0 when the outputs are
 * bit-identical). Per shape, n and variant: the
 * output against "auto"'s (normalised error: the same arithmetic in the same order
 * per element, so 0 unless a tile drops or repeats work; split-K adds the partial sums
 * in another order, ~1e-7), then the time of one launch
 * as the median of 7 CUDA-event timings of 10 launches each, and TOP/s = 2 R K n / t.
 * The launches cycle over copies of the weights (> 200 MB in all) so the 60 MB L2
 * does not serve a matrix from the launch before (within a launch it does, as in the
 * model).
 *
 *   make bench/cuda-mmq && build/bench/cuda_mmq                 (on the GPU machine)
 *   build/bench/cuda_mmq SHAPE N [VARIANT]                       (shape substring, tokens)
 *
 * The kernels are the main tree's, compiled into this file (#include of mmq.cu) with a
 * launch context of its own, as bench/cuda_gemv.cu does. */
#include "../src/cuda/mmq.cu"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define LAB_NAME "cuda_mmq"
#include "cuda_check.h"
#include "lab_ctx.h"
#include "lab_util.h"

typedef void (*launch_fn)(cu_ctx *, float *, int, const uint8_t *, int64_t, const uint8_t *, int, int,
                          const cu_mmq_act *, int, const float *, int);
struct variant {
    const char *name;
    launch_fn f[5]; /* q4_K, q6_K, q8_0, q6_K on its plane (MMQ_Q6X), q4_K on its plane (MMQ_Q4X) */
    int smem[5];    /* their dynamic shared memory (0: auto, mmq_pick's) */
};
template <int T, int WM, int WN, int NT, int ST, int KO, int KS, int LB>
static void lab_launch(cu_ctx *S, float *out, int ldo, const uint8_t *W, int64_t stride, const uint8_t *P, int R,
                       int K, const cu_mmq_act *a, int n, const float *bias, int accum) {
    mmq_launch<T, WM, WN, NT, ST, KO, LB>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, KS);
}
template <int T>
static void lab_pick(cu_ctx *S, float *out, int ldo, const uint8_t *W, int64_t stride, const uint8_t *P, int R, int K,
                     const cu_mmq_act *a, int n, const float *bias, int accum) {
    mmq_pick<T>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, nullptr, INT_MAX);
}
#define MMQ_VAR(wm, wn, nt, st, ko, ks, lb)                                                                     \
    {                                                                                                            \
        #wm "x" #wn "w nt" #nt " st" #st " ko" #ko " ks" #ks " lb" #lb,                                          \
        {lab_launch<QTYPE_Q4_K, wm, wn, nt, st, ko, ks, lb>, lab_launch<QTYPE_Q6_K, wm, wn, nt, st, ko, ks, lb>, \
         lab_launch<QTYPE_Q8_0, wm, wn, nt, st, ko, ks, lb>, lab_launch<MMQ_Q6X, wm, wn, nt, st, ko, ks, lb>,    \
         lab_launch<MMQ_Q4X, wm, wn, nt, st, ko, ks, lb>},                                                       \
        {mmq_cfg<QTYPE_Q4_K, wm, wn, nt, st>::smem, mmq_cfg<QTYPE_Q6_K, wm, wn, nt, st>::smem,                  \
         mmq_cfg<QTYPE_Q8_0, wm, wn, nt, st>::smem, mmq_cfg<MMQ_Q6X, wm, wn, nt, st>::smem,                     \
         mmq_cfg<MMQ_Q4X, wm, wn, nt, st>::smem}                                                                 \
    }
static const variant variants[] = {
    {"auto", {lab_pick<QTYPE_Q4_K>, lab_pick<QTYPE_Q6_K>, lab_pick<QTYPE_Q8_0>, lab_pick<MMQ_Q6X>, lab_pick<MMQ_Q4X>},
     {0, 0, 0, 0, 0}},
    MMQ_VAR(4, 2, 4, 2, 0, 8, 1), MMQ_VAR(4, 2, 4, 2, 0, 8, 2), MMQ_VAR(4, 4, 4, 2, 0, 8, 1),
    MMQ_VAR(2, 4, 4, 2, 0, 8, 1), MMQ_VAR(2, 1, 4, 2, 0, 8, 1), MMQ_VAR(2, 1, 4, 2, 0, 8, 8),
    MMQ_VAR(1, 2, 2, 2, 0, 8, 8), MMQ_VAR(1, 1, 2, 6, 0, 1, 1), MMQ_VAR(1, 1, 2, 8, 0, 1, 1),
    MMQ_VAR(1, 1, 4, 6, 0, 1, 1), MMQ_VAR(2, 1, 4, 4, 0, 1, 1), MMQ_VAR(1, 2, 2, 6, 0, 1, 1),
    MMQ_VAR(1, 1, 2, 4, 0, 8, 1), MMQ_VAR(2, 1, 4, 4, 0, 8, 1), MMQ_VAR(4, 2, 4, 2, 1, 1, 2),
    MMQ_VAR(4, 2, 4, 2, 2, 1, 2), MMQ_VAR(4, 2, 4, 2, 5, 8, 2), MMQ_VAR(4, 4, 4, 2, 5, 8, 1),
};
static const int NVAR = sizeof variants / sizeof variants[0];

struct shape {
    const char *name;
    uint32_t type;
    int rows, K;
};
static const shape shapes[] = {
    {"7b.q|k|o 4096x4096 q4_K", QTYPE_Q4_K, 4096, 4096},
    {"7b.v 4096x4096 q6_K", QTYPE_Q6_K, 4096, 4096},
    {"7b.gate|up 11008x4096 q4_K", QTYPE_Q4_K, 11008, 4096},
    {"7b.gate+up 22016x4096 q4_K", QTYPE_Q4_K, 22016, 4096},
    {"7b.down 4096x11008 q6_K", QTYPE_Q6_K, 4096, 11008 / 256 * 256},
    {"7b.down 4096x11008 q4_K", QTYPE_Q4_K, 4096, 11008 / 256 * 256},
    {"7b.output 32000x4096 q6_K", QTYPE_Q6_K, 32000, 4096},
    {"8b.k|v 1024x4096 q4_K", QTYPE_Q4_K, 1024, 4096},
    {"8b.gate+up 28672x4096 q4_K", QTYPE_Q4_K, 28672, 4096},
    {"8b.down 4096x14336 q6_K", QTYPE_Q6_K, 4096, 14336},
    {"q8_0 4096x4096", QTYPE_Q8_0, 4096, 4096},
};

static void put_f16(uint8_t *p, float f) {
    const uint16_t h = f16bits(f);
    memcpy(p, &h, 2);
}

/* Random valid rows in the device layout (common.cuh): random bytes, finite scales. */
static void fill_rows(uint32_t type, uint8_t *w, int64_t rows, int K, int64_t stride) {
    for (int64_t i = 0; i < rows * stride; i++) w[i] = (uint8_t)rnd();
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *o = w + r * stride;
        if (type == QTYPE_Q4_K)
            for (int b = 0; b < K / 256; b++) {
                put_f16(o + b * 144, 0.0005f + 0.002f * frnd());
                put_f16(o + b * 144 + 2, 0.0005f + 0.002f * frnd());
            }
        else if (type == QTYPE_Q6_K)
            for (int b = 0; b < K / 256; b++) put_f16(o + (int64_t)K / 256 * 208 + 2 * b, 0.0002f + 0.001f * frnd());
        else
            for (int b = 0; b < K / 32; b++) put_f16(o + (int64_t)K / 32 * 32 + 2 * b, 0.001f + 0.004f * frnd());
    }
}

int main(int argc, char **argv) {
    const char *want_shape = argc > 1 ? argv[1] : NULL;
    const int one_n = argc > 2 ? atoi(argv[2]) : 0;
    const char *want_var = argc > 3 ? argv[3] : NULL;
    cu_ctx S_;
    cu_ctx *S = &S_;
    cudaDeviceProp prop;
    lab_ctx_base(S, &prop);
    printf("cuda_mmq: %s, %d SMs\n", prop.name, S->num_sms);
    const int ns_all[] = {16, 32, 64, 128, 256, 512, 3314};
    const int NMAX = 3314;
    float *x, *out, *ref;
    CK(cudaMalloc(&x, sizeof(float) * (size_t)NMAX * 14336));
    CK(cudaMalloc(&out, sizeof(float) * (size_t)NMAX * 32000));
    CK(cudaMalloc(&ref, sizeof(float) * (size_t)NMAX * 32000));
    {
        std::vector<float> hx((size_t)NMAX * 14336);
        for (auto &v : hx) v = (frnd() - 0.5f) * 4.0f;
        CK(cudaMemcpy(x, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    cu_mmq_act a;
    const int npad_max = cu_mmq_npad(NMAX);
    CK(cudaMalloc(&a.q, (size_t)npad_max * 14336));
    CK(cudaMalloc(&a.d, sizeof(float) * (size_t)npad_max * (14336 / 32)));
    CK(cudaMalloc(&a.s, sizeof(float) * (size_t)npad_max * (14336 / 32)));
    CK(cudaMalloc(&a.is, sizeof(int) * (size_t)npad_max * (14336 / 16)));
    a.part_cap = (int64_t)4 << 20; /* as the backend's */
    CK(cudaMalloc(&a.part, sizeof(float) * (size_t)a.part_cap));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("%-28s %5s %-16s %9s %8s %9s\n", "shape", "n", "variant", "us", "TOP/s", "err");
    for (const shape &sh : shapes) {
        if (want_shape && !strstr(sh.name, want_shape)) continue;
        const int64_t stride = cu_row_stride(sh.type, sh.K);
        const int64_t mbytes = stride * sh.rows;
        const int copies = (int)std::max<int64_t>(1, (200ll << 20) / mbytes + 1);
        std::vector<uint8_t> hw((size_t)mbytes);
        uint8_t *w;
        CK(cudaMalloc(&w, (size_t)(mbytes * copies)));
        fill_rows(sh.type, hw.data(), sh.rows, sh.K, stride);
        for (int c = 0; c < copies; c++) /* equal copies: only their addresses matter to the L2 */
            CK(cudaMemcpy(w + c * mbytes, hw.data(), (size_t)mbytes, cudaMemcpyHostToDevice));
        const int fi = sh.type == QTYPE_Q4_K ? 0 : sh.type == QTYPE_Q6_K ? 1 : 2;
        /* q4_K, q6_K: the plane too (as many copies), each variant run with and without */
        const int64_t pbytes = (int64_t)cu_mmq_plane_bytes(sh.type, sh.rows, sh.K);
        uint8_t *pl = NULL;
        if (pbytes) {
            CK(cudaMalloc(&pl, (size_t)(pbytes * copies)));
            for (int c = 0; c < copies; c++)
                cu_mmq_plane_build(S, sh.type, pl + c * pbytes, w + c * mbytes, stride, sh.rows, sh.K);
            CK(cudaStreamSynchronize(S->stream));
        }
        for (int n : ns_all) {
            if (one_n && n != one_n) continue;
            const int64_t no = (int64_t)n * sh.rows;
            cu_mmq_quantize(S, x, n, sh.K, &a);
            float tq[7];
            for (int rep = 0; rep < 7; rep++) {
                CK(cudaEventRecord(e0, S->stream));
                for (int it = 0; it < 10; it++) cu_mmq_quantize(S, x, n, sh.K, &a);
                CK(cudaEventRecord(e1, S->stream));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&tq[rep], e0, e1));
            }
            std::sort(tq, tq + 7);
            printf("%-28s %5d %-16s %9.1f %8s %9s\n", sh.name, n, "prepass", 100.0 * tq[3], "", "");
            std::vector<float> href((size_t)no), hout((size_t)no);
            for (int vp = 0; vp < (pbytes ? 2 : 1) * NVAR; vp++) {
                const int v = vp % NVAR, on_plane = vp >= NVAR;
                if (want_var && v && !strstr(variants[v].name, want_var)) continue;
                const int ff = on_plane ? (sh.type == QTYPE_Q6_K ? 3 : 4) : fi;
                if (variants[v].smem[ff] > (int)prop.sharedMemPerBlockOptin) continue;
                const launch_fn f = variants[v].f[ff];
                float *o = vp ? out : ref;
                CK(cudaMemset(o, 0xff, sizeof(float) * (size_t)no));
                f(S, o, sh.rows, w, stride, on_plane ? pl : NULL, sh.rows, sh.K, &a, n, NULL, 0);
                CK(cudaStreamSynchronize(S->stream));
                CK(cudaGetLastError());
                double err = 0;
                if (vp) {
                    CK(cudaMemcpy(hout.data(), out, sizeof(float) * (size_t)no, cudaMemcpyDeviceToHost));
                    err = nerr(hout.data(), href.data(), no);
                } else {
                    CK(cudaMemcpy(href.data(), ref, sizeof(float) * (size_t)no, cudaMemcpyDeviceToHost));
                }
                float t[7];
                int c = 0;
                for (int rep = 0; rep < 7; rep++) {
                    CK(cudaEventRecord(e0, S->stream));
                    for (int it = 0; it < 10; it++, c = (c + 1) % copies)
                        f(S, o, sh.rows, w + c * mbytes, stride, on_plane ? pl + c * pbytes : NULL, sh.rows, sh.K, &a, n,
                          NULL, 0);
                    CK(cudaEventRecord(e1, S->stream));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&t[rep], e0, e1));
                }
                std::sort(t, t + 7);
                const double us = 100.0 * t[3];
                printf("%-28s %5d %-16s%s %9.1f %8.1f %9.2g\n", sh.name, n, variants[v].name, on_plane ? " plane" : "", us,
                       2.0 * sh.rows * sh.K * n / us * 1e-6, err);
                fflush(stdout);
            }
        }
        CK(cudaFree(w));
        if (pl) CK(cudaFree(pl));
    }
    return 0;
}

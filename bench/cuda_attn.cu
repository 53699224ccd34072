/* bench/cuda_attn.cu - kernel lab for the prefill flash attention (src/cuda/attn_flash.cu
 * kernel_attn_flash<HD, NH, DB>, #included): the product's form beside the others of the
 * same template: NH query heads of one kv group a block (GQA), so each K/V tile is loaded
 * from the cache once for NH heads instead of once per head (issue 36: the 8B's 4 query
 * heads per kv head read every K/V tile 4 times from L2), and DB, the K/V tiles
 * double-buffered by cp.async.
 *
 * One sequence of N tokens (positions 0..N-1, its K/V in the cache), 64-query tiles
 * longest first as blocks.cu attn_run lists them; per shape and variant the time of one
 * launch (median of 7 x 5) and the normalised error of its output against the product
 * kernel's.
 *
 *   build/bench/cuda_attn [N]      (on the GPU machine; default 512 and 3314) */
#include "../src/cuda/attn_flash.cu"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define LAB_NAME "cuda_attn"
#include "cuda_check.h"
#include "lab_ctx.h"
#include "lab_util.h"

struct shape {
    const char *name;
    int n_head, n_kv;
};
static const shape shapes[] = {{"8b (32 heads, 8 kv heads)", 32, 8}, {"7b (32 heads, 32 kv heads)", 32, 32}};

int main(int argc, char **argv) {
    const int one_n = argc > 1 ? atoi(argv[1]) : 0;
    cu_ctx S_;
    cu_ctx *S = &S_;
    cudaDeviceProp prop;
    lab_ctx_base(S, &prop);
    S->on[CU_PATH_FLASH_DB] = S->on[CU_PATH_FLASH_GQA] = 1; /* cu_attn_flash: the product's choice of form */
    printf("cuda_attn: %s, %d SMs\n", prop.name, S->num_sms);
    const int hd = 128, ns[] = {512, 3314};
    printf("%-28s %5s %-22s %9s %8s %9s\n", "shape", "n", "variant", "us", "TFLOP/s", "err");
    for (const shape &sh : shapes) {
        for (int n : ns) {
            if (one_n && n != one_n) continue;
            const int n_ctx = n + 64, qd = sh.n_head * hd;
            const size_t kvn = (size_t)sh.n_kv * n_ctx * hd;
            std::vector<__half> hk(kvn), hv(kvn);
            for (size_t i = 0; i < kvn; i++) {
                hk[i] = __float2half((frnd() - 0.5f) * 2.0f);
                hv[i] = __float2half((frnd() - 0.5f) * 2.0f);
            }
            std::vector<float> hq((size_t)n * qd);
            for (auto &v : hq) v = (frnd() - 0.5f) * 2.0f;
            std::vector<int32_t> hpos(n), hseq(n, 0);
            for (int i = 0; i < n; i++) hpos[i] = i;
            /* 64-query tiles, longest (latest) first, as attn_run lists them */
            std::vector<int4> ht;
            for (int t = 0; t < n; t += 64) ht.push_back(make_int4(t, std::min(64, n - t), 0, std::min(t + 64, n) - 1));
            std::reverse(ht.begin(), ht.end());
            __half *kc, *vc;
            float *q, *out0, *out1;
            int32_t *pos, *seq;
            int4 *tiles;
            CK(cudaMalloc(&kc, kvn * sizeof(__half)));
            CK(cudaMalloc(&vc, kvn * sizeof(__half)));
            CK(cudaMalloc(&q, hq.size() * sizeof(float)));
            CK(cudaMalloc(&out0, hq.size() * sizeof(float)));
            CK(cudaMalloc(&out1, hq.size() * sizeof(float)));
            CK(cudaMalloc(&pos, n * sizeof(int32_t)));
            CK(cudaMalloc(&seq, n * sizeof(int32_t)));
            CK(cudaMalloc(&tiles, ht.size() * sizeof(int4)));
            CK(cudaMemcpy(kc, hk.data(), kvn * sizeof(__half), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(vc, hv.data(), kvn * sizeof(__half), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(q, hq.data(), hq.size() * sizeof(float), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(pos, hpos.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(seq, hseq.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(tiles, ht.data(), ht.size() * sizeof(int4), cudaMemcpyHostToDevice));
            cu_attn_args a;
            memset(&a, 0, sizeof a);
            a.n = n, a.n_head = sh.n_head, a.n_kv = sh.n_kv, a.hd = hd, a.n_ctx = n_ctx;
            a.pos = pos, a.seq = seq, a.kc = kc, a.vc = vc, a.seq1 = 1;
            const int nt = (int)ht.size();
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0));
            CK(cudaEventCreate(&e1));
            auto time = [&](auto &&fn) {
                float t[7];
                for (int rep = 0; rep < 7; rep++) {
                    CK(cudaEventRecord(e0, S->stream));
                    for (int it = 0; it < 5; it++) fn();
                    CK(cudaEventRecord(e1, S->stream));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&t[rep], e0, e1));
                }
                std::sort(t, t + 7);
                return 1000.0 * t[3] / 5;
            };
            std::vector<float> h0(hq.size()), h1(hq.size());
            CK(cudaMemset(out0, 0, hq.size() * sizeof(float)));
            cu_attn_flash(S, &a, q, out0, tiles, nt);
            CK(cudaStreamSynchronize(S->stream));
            CK(cudaGetLastError());
            CK(cudaMemcpy(h0.data(), out0, hq.size() * sizeof(float), cudaMemcpyDeviceToHost));
            double us = time([&] { cu_attn_flash(S, &a, q, out0, tiles, nt); });
            /* QK^T and PV over the causal keys: 4 hd flops a (query, head, key) */
            const double flop = 4.0 * hd * sh.n_head * ((double)n * (n + 1) / 2);
            printf("%-28s %5d %-22s %9.1f %8.1f %9s\n", sh.name, n, "product (its form)", us, flop / us * 1e-6, "-");
            auto variant = [&](const char *name, auto &&fn, int G_ok) {
                if (!G_ok) return;
                CK(cudaMemset(out1, 0xff, hq.size() * sizeof(float)));
                fn();
                CK(cudaStreamSynchronize(S->stream));
                CK(cudaGetLastError());
                CK(cudaMemcpy(h1.data(), out1, hq.size() * sizeof(float), cudaMemcpyDeviceToHost));
                const double err = nerr(h1.data(), h0.data(), (int64_t)h1.size());
                const double t = time(fn);
                printf("%-28s %5d %-22s %9.1f %8.1f %9.2g\n", sh.name, n, name, t, flop / t * 1e-6, err);
                fflush(stdout);
            };
            const int G = sh.n_head / sh.n_kv;
            variant("1 head, plain loads", [&] { attn_flash_launch<128, 1, 0, 0>(S, &a, q, out1, tiles, nt); }, 1);
            variant("K/V double-buffered", [&] { attn_flash_launch<128, 1, 1, 0>(S, &a, q, out1, tiles, nt); }, 1);
            variant("kv-shared 2 heads", [&] { attn_flash_launch<128, 2, 0, 0>(S, &a, q, out1, tiles, nt); }, G % 2 == 0);
            variant("kv-shared 2, db", [&] { attn_flash_launch<128, 2, 1, 0>(S, &a, q, out1, tiles, nt); }, G % 2 == 0);
            variant("kv-shared 4 heads", [&] { attn_flash_launch<128, 4, 0, 0>(S, &a, q, out1, tiles, nt); }, G % 4 == 0);
            variant("kv-shared 4, db", [&] { attn_flash_launch<128, 4, 1, 0>(S, &a, q, out1, tiles, nt); }, G % 4 == 0);
            cudaFree(kc), cudaFree(vc), cudaFree(q), cudaFree(out0), cudaFree(out1), cudaFree(pos), cudaFree(seq),
                cudaFree(tiles);
        }
    }
    return 0;
}

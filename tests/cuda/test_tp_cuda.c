/* test_tp_cuda.c MODEL [STEPS] - tensor parallelism (src/tp.h) on CUDA backends: the
 * model split over ranks with NCCL's all-reduce (src/cuda/tp_nccl.cu) against the same
 * model on one GPU: a 10-token prompt then STEPS (default 24) greedy steps, the tokens
 * (the first divergence and both sides' top-2 margin there if any) and the logits'
 * normalised error. Runs the split path with one rank on one GPU (every block's reduce
 * an all-reduce over one rank, the split's code path end to end), and over every GPU
 * present (up to 8, as the model's kv heads allow). Skips, saying why, without NCCL
 * (libnccl.so.2 on the library path: the GPU machines have PyTorch's nvidia-nccl wheel).
 * Passes when every split run gives the same tokens and its logits stay within 0.02. */
#include <stdlib.h>
#include <string.h>

#include "../context_greedy.h"
#include "../test.h"
#include "context.h"
#include "model.h"

enum { PROMPT = 10 };

/* n ranks (0: one plain backend; 1 + always: the split path on one GPU) */
static int run(mf_model *m, int n, int always, int steps, int32_t *toks, float *lg, mf_err *err) {
    mf_context_params cp;
    context_params_default(&cp);
    cp.device = "cuda";
    cp.n_ctx = 256;
    cp.n_gpus = n;
    cp.tp_always = always;
    return context_greedy(m, &cp, PROMPT, steps, toks, lg, err);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_tp_cuda MODEL [STEPS]\n");
        return 2;
    }
    const int steps = argc > 2 ? atoi(argv[2]) : 24;
    if (cuda_device_count() < 1) {
        SKIP("no CUDA device");
        return test_summary("tp_cuda");
    }
    mf_model m;
    mf_err err = { { 0 } };
    if (model_load(&m, argv[1], &err)) {
        CHECK(0, "%s: %s", argv[1], err.msg);
        return test_summary("tp_cuda");
    }
    const int nv = m.hp.n_vocab, T = PROMPT + steps;
    int32_t *t1 = malloc(sizeof(int32_t) * (size_t)T), *tn = malloc(sizeof(int32_t) * (size_t)T);
    float *l1 = malloc(sizeof(float) * (size_t)nv * (steps + 1)), *ln = malloc(sizeof(float) * (size_t)nv * (steps + 1));
    for (int i = 0; i < PROMPT; i++) t1[i] = (int32_t)(3 + (i * 37) % (nv - 3));
    if (run(&m, 0, 0, steps, t1, l1, &err)) {
        CHECK(0, "one GPU: %s", err.msg);
    } else {
        int ng = cuda_device_count();
        if (ng > MF_TP_MAX) ng = MF_TP_MAX;
        while (ng > 1 && m.hp.n_head_kv % ng) ng--;
        const int ranks[2] = { 1, ng };
        for (int k = 0; k < (ng > 1 ? 2 : 1); k++) {
            const int n = ranks[k];
            memcpy(tn, t1, sizeof(int32_t) * PROMPT);
            const int rc = run(&m, n, 1, steps, tn, ln, &err);
            if (rc && strstr(err.msg, "NCCL")) {
                SKIP("%s over %d rank%s: %s", argv[1], n, n == 1 ? "" : "s", err.msg);
                continue;
            }
            if (rc) {
                CHECK(0, "%s over %d ranks: %s", argv[1], n, err.msg);
                continue;
            }
            int first = -1;
            double worst = 0;
            for (int s = 0; s <= steps; s++) {
                const float *a = ln + (size_t)s * nv, *b = l1 + (size_t)s * nv;
                double num = 0, den = 0;
                for (int i = 0; i < nv; i++) {
                    const double d = fabs((double)a[i] - b[i]);
                    if (d > num) num = d;
                    if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
                }
                if (den > 0 && num / den > worst) worst = num / den;
                if (first < 0 && s < steps && tn[PROMPT + s] != t1[PROMPT + s]) first = s;
            }
            if (first >= 0) {
                float m1, mn;
                test_argmax(l1 + (size_t)first * nv, nv, &m1);
                test_argmax(ln + (size_t)first * nv, nv, &mn);
                printf("  %d rank%s: first divergence at step %d: one GPU %d (top-2 margin %.4f), split %d (%.4f)\n", n,
                       n == 1 ? "" : "s", first, t1[PROMPT + first], m1, tn[PROMPT + first], mn);
            }
            printf("  %d rank%s: %d greedy tokens %s, logits normalised error %.3g\n", n, n == 1 ? "" : "s", steps,
                   first < 0 ? "the same" : "differ", worst);
            CHECK(first < 0, "%s over %d rank%s: the same greedy tokens", argv[1], n, n == 1 ? "" : "s");
            CHECK(worst < 0.02, "%s over %d rank%s: logits error %.3g", argv[1], n, n == 1 ? "" : "s", worst);
        }
    }
    free(t1), free(tn), free(l1), free(ln);
    model_free(&m);
    return test_summary("tp_cuda");
}

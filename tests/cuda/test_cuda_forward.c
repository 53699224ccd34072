/* test_cuda_forward.c - whole-model parity: the CUDA backend against the CPU
 * backend on one GGUF, logits compared at every step.
 *
 *   test_cuda_forward MODEL [N_PROMPT] [N_GEN] [MAX_ERR]
 *
 * Prefill of N_PROMPT pseudo-random tokens (BOS first), then N_GEN greedy steps
 * teacher-forced by the CPU's argmax, so both backends always see the same
 * tokens. Reports, per step, the normalised logit error; the first position where
 * the argmaxes differ and the CPU's top-2 margin there (a divergence on a margin
 * below the numeric noise is expected of two correct implementations).
 * MINFER_TEST_ALL_LOGITS=1: the prefill asks logits at every prompt position and
 * reports over them the argmax agreement and the largest logit difference (issue 29's
 * accuracy of int8 prefill activations: compare a run with MINFER_CUDA_DISABLE=mmq).
 * MINFER_TEST_KV=q8_0 (or f16): both sides' KV caches of that type (-ctk/-ctv; the CPU's
 * default is f32, the GPU's f16).
 * Checks:
 * every logit finite, max error <= MAX_ERR (default 2e-2). The GPU's logits go to the
 * backend's host_alloc memory as a context's do (MINFER_TEST_HOST_LOGITS, below). */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "backend.h"
#include "cuda/backend_cuda.h"
#include "forward.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

static double nerr(const float *a, const float *ref, size_t n, int *finite) {
    double d = 0, r = 0;
    *finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (!(a[i] == a[i]) || a[i] - a[i] != 0.0f) *finite = 0;
        d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

typedef struct side {
    mf_backend *be;
    mf_forward fw;
} side;

static int side_init(side *s, mf_backend *be, mf_model *m, int n_ctx, int n_batch, mf_err *err) {
    s->be = be;
    if (!be) return -1;
    mf_kv_types kvt;
    if (kv_type_parse(getenv("MINFER_TEST_KV"), "MINFER_TEST_KV", &kvt.k, err)) return -1;
    kvt.v = kvt.k;
    if (be->init(be, m, n_ctx, 1, n_batch, &kvt, err)) return -1;
    return forward_init(&s->fw, be, m, n_ctx, 1, n_batch, err);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [N_PROMPT] [N_GEN] [MAX_ERR]\n", argv[0]);
        return 1;
    }
    const char *path = argv[1];
    int n_prompt = argc > 2 ? atoi(argv[2]) : 13;
    const int n_gen = argc > 3 ? atoi(argv[3]) : 32;
    const double max_err = argc > 4 ? atof(argv[4]) : 2e-2;
    if (!cuda_device_count()) {
        SKIP("no CUDA device");
        return test_summary("cuda_forward");
    }
    mf_err err = {{0}};
    mf_model m;
    if (model_load(&m, path, &err)) {
        CHECK(0, "load %s: %s", path, err.msg);
        return test_summary("cuda_forward");
    }
    /* MINFER_TEST_PROMPT: a text prompt (BOS + its tokens) instead of random ids */
    const char *prompt = getenv("MINFER_TEST_PROMPT");
    int32_t *ptoks = NULL;
    if (prompt && m.vocab) {
        int np = tok_encode(m.vocab, prompt, strlen(prompt), 1, 0, &ptoks, &err);
        if (np <= 0) {
            CHECK(0, "tokenize: %s", err.msg);
            return test_summary("cuda_forward");
        }
        n_prompt = np;
    }
    const int n_ctx = n_prompt + n_gen + 1, n_batch = n_prompt > 1 ? n_prompt : 1;
    const int nv = m.hp.n_vocab;
    side cpu = {0}, gpu = {0};
    if (side_init(&cpu, cpu_backend_new(mf_env_int("MINFER_TEST_THREADS", 0) > 0 ? mf_env_int("MINFER_TEST_THREADS", 0) : 8, &err), &m, n_ctx, n_batch, &err) ||
        side_init(&gpu, cuda_backend_new(0, &err), &m, n_ctx, n_batch, &err)) {
        CHECK(0, "init: %s", err.msg);
        return test_summary("cuda_forward");
    }
    int32_t *tok = malloc(sizeof(int32_t) * n_ctx), *pos = malloc(sizeof(int32_t) * n_ctx);
    int32_t *seq = calloc(n_ctx, sizeof(int32_t));
    mf_rng rng;
    mf_rng_seed(&rng, 7);
    const int32_t bos = m.vocab ? tok_bos(m.vocab) : -1;
    for (int i = 0; i < n_prompt; i++) {
        tok[i] = (int32_t)(mf_rng_u64(&rng) % nv);
        pos[i] = i;
    }
    if (bos >= 0) tok[0] = bos;
    if (ptoks) memcpy(tok, ptoks, sizeof(int32_t) * n_prompt);
    free(ptoks);
    /* The GPU's logits where a context keeps them, in the backend's host_alloc memory (the
     * decode graph downloads straight into it), every third step in a malloc'd buffer
     * instead (the graph's copy then goes on from the captured one); MINFER_TEST_HOST_LOGITS=0:
     * malloc'd only (the graph's pinned staging buffer and its copy-out) */
    const int host_logits = mf_env_int("MINFER_TEST_HOST_LOGITS", 1) == 1 && gpu.be->host_alloc;
    float *lc = malloc(sizeof(float) * nv), *lg_own = malloc(sizeof(float) * nv);
    float *lg_host = host_logits ? gpu.be->host_alloc(gpu.be, sizeof(float) * nv) : NULL;
    if (host_logits && !lg_host) {
        CHECK(0, "host_alloc of %d logits", nv);
        return test_summary("cuda_forward");
    }
    double worst = 0, sum = 0;
    int all_finite = 1, first_div = -1, agree = 0, steps = 0;
    float div_margin = 0, div_gmargin = 0;
    const double t0 = mf_time_s();
    double t_gpu = 0;
    const int all = mf_env_int("MINFER_TEST_ALL_LOGITS", 0) == 1;
    int8_t *want = NULL;
    float *lc_all = NULL, *lg_all = NULL;
    if (all) {
        want = malloc((size_t)n_prompt);
        memset(want, 1, (size_t)n_prompt);
        lc_all = malloc(sizeof(float) * (size_t)n_prompt * nv);
        lg_all = malloc(sizeof(float) * (size_t)n_prompt * nv);
    }
    for (int step = 0; step <= n_gen; step++) {
        mf_batch b;
        if (step == 0 && all) {
            b = (mf_batch){n_prompt, tok, pos, seq, want};
            const int r1 = forward_step(&cpu.fw, &b, lc_all, &err);
            CHECK(r1 == n_prompt, "cpu prefill (all logits): %d rows: %s", r1, err.msg);
            const int r2 = forward_step(&gpu.fw, &b, lg_all, &err);
            CHECK(r2 == n_prompt, "gpu prefill (all logits): %d rows: %s", r2, err.msg);
            if (r1 != n_prompt || r2 != n_prompt) break;
            int ag_all = 0, fin = 1;
            double dmax = 0, emax = 0, esum = 0;
            for (int t = 0; t < n_prompt; t++) {
                const float *c = lc_all + (size_t)t * nv, *g = lg_all + (size_t)t * nv;
                int f1;
                const double e = nerr(g, c, nv, &f1);
                fin &= f1;
                emax = e > emax ? e : emax;
                esum += e;
                for (int i = 0; i < nv; i++) {
                    const double d = fabs((double)g[i] - c[i]);
                    if (d > dmax) dmax = d;
                }
                ag_all += test_argmax(c, nv, NULL) == test_argmax(g, nv, NULL);
            }
            printf("prefill logits at all %d positions: argmax agree %d/%d, largest |logit diff| %.4g, err max %.3g "
                   "mean %.3g\n", n_prompt, ag_all, n_prompt, dmax, emax, esum / n_prompt);
            CHECK(fin, "non-finite prefill logits");
            CHECK(emax <= max_err, "prefill logit error %.3g > %.3g", emax, max_err);
            memcpy(lc, lc_all + (size_t)(n_prompt - 1) * nv, sizeof(float) * nv);
            tok[n_prompt] = test_argmax(lc, nv, NULL);
            steps++;
            agree += test_argmax(lg_all + (size_t)(n_prompt - 1) * nv, nv, NULL) == tok[n_prompt];
            continue;
        }
        if (step == 0) {
            b = (mf_batch){n_prompt, tok, pos, seq, NULL};
        } else {
            const int p = n_prompt + step - 1;
            pos[p] = p;
            b = (mf_batch){1, tok + p, pos + p, seq + p, NULL};
        }
        int rc1 = forward_step(&cpu.fw, &b, lc, &err);
        CHECK(rc1 == 1, "cpu step %d: %s", step, err.msg);
        float *lg = lg_host && step % 3 != 2 ? lg_host : lg_own;
        const double tg = mf_time_s();
        int rc2 = forward_step(&gpu.fw, &b, lg, &err);
        t_gpu += mf_time_s() - tg;
        CHECK(rc2 == 1, "gpu step %d: %s", step, err.msg);
        if (rc1 != 1 || rc2 != 1) break;
        int fin;
        const double e = nerr(lg, lc, nv, &fin);
        all_finite &= fin;
        if (e > worst) worst = e;
        sum += e;
        float mc, mg;
        const int ac = test_argmax(lc, nv, &mc), ag = test_argmax(lg, nv, &mg);
        steps++;
        if (ac == ag) agree++;
        else if (first_div < 0) {
            first_div = n_prompt + step - 1;
            div_margin = mc;
            div_gmargin = mg;
        }
        if (step < n_gen) tok[n_prompt + step] = ac;
    }
    printf("model %s: %d prompt + %d greedy steps: logit err max %.3g mean %.3g; argmax agree %d/%d; ", path,
           n_prompt, n_gen, worst, sum / (steps ? steps : 1), agree, steps);
    if (first_div >= 0)
        printf("first divergence at position %d (cpu top-2 margin %.4g, gpu %.4g)\n", first_div, div_margin,
               div_gmargin);
    else
        printf("no divergence\n");
    printf("gpu time %.3f s, total %.3f s\n", t_gpu, mf_time_s() - t0);
    uint64_t launches, replays, eager;
    cuda_backend_census(gpu.be, &launches, &replays, &eager);
    printf("census: %llu launches, %llu graph replays, %llu eager steps\n", (unsigned long long)launches,
           (unsigned long long)replays, (unsigned long long)eager);
    CHECK(all_finite, "non-finite logits");
    CHECK(worst <= max_err, "logit error %.3g > %.3g", worst, max_err);
    free(want);
    free(lc_all);
    free(lg_all);
    forward_free(&cpu.fw);
    forward_free(&gpu.fw);
    if (lg_host) gpu.be->host_free(gpu.be, lg_host);
    cpu.be->destroy(cpu.be);
    gpu.be->destroy(gpu.be);
    model_free(&m);
    free(tok); free(pos); free(seq); free(lc); free(lg_own);
    return test_summary("cuda_forward");
}

/* test_perplexity.c - src/perplexity.c: the nll of known distributions, the estimate and
 * its error against the formulas computed directly, and ppl_eval on a tiny gemma3 model
 * (tests/arch_models.h) against the same chunks scored by hand from forward_step's logits
 * (first token of each chunk replaced by BOS, logits of positions ctx/2 .. ctx-2 scored
 * against the next token); bad arguments are errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "forward.h"
#include "perplexity.h"
#include "test.h"
#include "arch_models.h"

static void test_math(void) {
    float lg[50];
    for (int i = 0; i < 50; i++) lg[i] = 3.0f;
    CHECK(fabs(ppl_nll(lg, 50, 7) - log(50.0)) < 1e-9, "uniform: nll %.12f, log 50 %.12f", ppl_nll(lg, 50, 7), log(50.0));
    /* two values a, b: nll of a = log(1 + e^(b-a)) */
    float two[2] = { 1.5f, -0.5f };
    CHECK(fabs(ppl_nll(two, 2, 0) - log(1 + exp(-2.0))) < 1e-7, "two-way nll");
    CHECK(fabs(ppl_nll(two, 2, 1) - log(1 + exp(2.0))) < 1e-6, "two-way nll of the smaller");
    /* large logits do not overflow */
    float big[3] = { 1e30f, 0.0f, -1e30f };
    CHECK(isfinite(ppl_nll(big, 3, 1)) && ppl_nll(big, 3, 0) == 0.0, "large logits: %g %g", ppl_nll(big, 3, 1),
          ppl_nll(big, 3, 0));
    ppl_acc a = { 0 };
    CHECK(ppl_value(&a) == 0 && ppl_error(&a) == 0, "empty accumulator");
    /* rows with known nll: 4 rows of a 4-way distribution */
    float rows[4][4];
    int32_t next[4] = { 0, 1, 2, 3 };
    double want[4], s = 0, s2 = 0;
    for (int r = 0; r < 4; r++) {
        for (int j = 0; j < 4; j++) rows[r][j] = (float)(0.3 * (r + 1) * j);
        double mx = rows[r][3], z = 0;
        for (int j = 0; j < 4; j++) z += exp(rows[r][j] - mx);
        want[r] = -(rows[r][next[r]] - mx - log(z));
        s += want[r];
        s2 += want[r] * want[r];
    }
    ppl_add(&a, &rows[0][0], 4, next, 4);
    const double mean = s / 4, var = s2 / 4 - mean * mean;
    CHECK(a.count == 4 && fabs(a.nll - s) < 1e-9 && fabs(a.nll2 - s2) < 1e-9, "sums %g %g", a.nll, a.nll2);
    CHECK(fabs(ppl_value(&a) - exp(mean)) < 1e-9, "PPL %g want %g", ppl_value(&a), exp(mean));
    CHECK(fabs(ppl_error(&a) - exp(mean) * sqrt(var / 3)) < 1e-9, "error %g want %g", ppl_error(&a),
          exp(mean) * sqrt(var / 3));
}

static void test_eval(void) {
    spec s = { "gemma3", 2, 2, 1, 32, 5, 2, 1e6f, 1e4f, 0, NULL, 32, 48, .rope_type = NULL };
    char path[] = "/tmp/minfer_test_ppl_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(write_model(path, &s) == 0, "write");
    mf_model m;
    mf_err err = { { 0 } };
    int rc = model_load(&m, path, &err);
    unlink(path);
    CHECK(rc == MF_OK, "load: %s", err.msg);
    if (rc) return;
    enum { CTX = 16, NT = 53 }; /* 3 chunks, 5 tokens left over */
    mf_context c;
    mf_context_params p;
    context_params_default(&p);
    p.n_ctx = CTX;
    p.n_batch = CTX;
    p.device = "cpu";
    p.n_threads = 1;
    rc = context_init(&c, &m, &p, &err);
    CHECK(rc == MF_OK, "context: %s", err.msg);
    if (rc) { model_free(&m); return; }
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = 3 + (i * 37) % (ARCH_NV - 3);
    ppl_acc a = { 0 };
    const int got = ppl_eval(&c, toks, NT, CTX, 1, 0, &a, NULL, NULL, &err);
    CHECK(got == 3, "chunks %d (%s)", got, err.msg);
    CHECK(a.count == 3 * (CTX - 1 - CTX / 2), "scored %lld", (long long)a.count);
    /* by hand */
    ppl_acc h = { 0 };
    float *lg = malloc(sizeof(float) * CTX * ARCH_NV);
    for (int ch = 0; ch < 3; ch++) {
        int32_t t[CTX], pos[CTX], seq[CTX] = { 0 };
        int8_t want[CTX];
        for (int i = 0; i < CTX; i++) {
            t[i] = i == 0 ? 1 : toks[ch * CTX + i];
            pos[i] = i;
            want[i] = 1;
        }
        const mf_batch b = { .n = CTX, .tok = t, .pos = pos, .seq = seq, .logits = want };
        CHECK(forward_step(&c.fw, &b, lg, &err) == CTX, "forward %s", err.msg);
        for (int i = CTX / 2; i < CTX - 1; i++) ppl_add(&h, lg + (int64_t)i * ARCH_NV, ARCH_NV, &toks[ch * CTX + i + 1], 1);
    }
    CHECK(h.count == a.count && fabs(ppl_value(&h) - ppl_value(&a)) < 1e-9 * ppl_value(&h) &&
              fabs(ppl_error(&h) - ppl_error(&a)) < 1e-9 * (1 + ppl_error(&h)),
          "ppl_eval %.9f +/- %.9f vs by hand %.9f +/- %.9f", ppl_value(&a), ppl_error(&a), ppl_value(&h), ppl_error(&h));
    CHECK(ppl_value(&a) > 1 && ppl_value(&a) < 1e4, "PPL %g in range", ppl_value(&a));
    /* --chunks caps */
    ppl_acc a2 = { 0 };
    CHECK(ppl_eval(&c, toks, NT, CTX, 1, 2, &a2, NULL, NULL, &err) == 2 && a2.count == 2 * (CTX - 1 - CTX / 2),
          "two chunks");
    /* errors */
    ppl_acc e = { 0 };
    CHECK(ppl_eval(&c, toks, CTX - 1, CTX, 1, 0, &e, NULL, NULL, &err) == MF_ERR_INPUT && strstr(err.msg, "fewer"),
          "too few tokens: %s", err.msg);
    CHECK(ppl_eval(&c, toks, NT, 3, 1, 0, &e, NULL, NULL, &err) == MF_ERR_INPUT, "ctx 3: %s", err.msg);
    CHECK(ppl_eval(&c, toks, NT, 2 * CTX, 1, 0, &e, NULL, NULL, &err) == MF_ERR_USAGE, "ctx above the context: %s",
          err.msg);
    CHECK(e.count == 0, "errors scored nothing");
    free(lg);
    context_free(&c);
    model_free(&m);
}

int main(void) {
    test_math();
    test_eval();
    return test_summary("test_perplexity");
}

/* test_cuda_batch.c - many sequences per decode step on the CUDA backend: N sequences
 * with different prompts decoded together (minfer_decode_batch) against each decoded
 * alone on the same device, for N = 8 (all 8 pairs in one call, and calls of 1..8
 * pairs) and for N in 1..64 (one call of N pairs a step).
 *
 *   test_cuda_batch MODEL [N_STEPS] [MAX_ERR] [SIZES]
 *
 * N_STEPS greedy steps (default 40); SIZES a comma list (default
 * 1,2,3,4,5,8,9,16,17,32,33,64). Per size one line: tokens identical, or the first
 * divergence (sequence, step) with the top-2 margins alone and batched there, and
 * whether the logits were bitwise equal or how far apart (the kernels for n columns
 * may sum in another order than the one-column ones; a divergence then falls on a
 * near-tie: the margin is at most twice the logit difference of that row).
 * Checks: every logit finite; every sequence holds its prompt + N_STEPS tokens; the
 * normalised row error batched vs alone <= MAX_ERR (default 2e-2) on every compared
 * row; with MINFER_TEST_BATCH_EXACT=1 also identical tokens at every size (for a
 * path meant to be exact). MINFER_TEST_DEVICE=cpu runs it all on the CPU (the
 * harness checked without a GPU; there every size is bitwise, tests/test_batch.c).
 * MINFER_TEST_BATCH_DUMP=FILE writes each run's batched tokens and an FNV-1a hash of
 * its logits' bits to FILE, for comparing two runs (tests/run_cuda.sh: a path meant to
 * give the same bits, on and off). */
#include <stdlib.h>
#include <string.h>

#include "../batch_check.h"
#include "../test.h"
#include "backend.h"
#include "minfer.h"
#include "util.h"

static minfer_ctx *ctx_new(minfer_model *m, const char *dev, int n_seq, int n_ctx) {
    char err[512] = "";
    const int th = mf_env_int("MINFER_TEST_THREADS", 0);
    minfer_ctx_params p = { .n_ctx = n_ctx, .n_seq = n_seq, .n_batch = 0, .device = dev, .n_threads = th > 0 ? th : 0 };
    minfer_ctx *c = minfer_ctx_new(m, &p, err, sizeof err);
    CHECK(c != NULL, "%s context of %d sequences x %d: %s", dev, n_seq, n_ctx, err);
    return c;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [N_STEPS] [MAX_ERR] [SIZES]\n", argv[0]);
        return 1;
    }
    const char *path = argv[1];
    const int n_steps = argc > 2 ? atoi(argv[2]) : 40;
    const double max_err = argc > 3 ? atof(argv[3]) : 2e-2;
    int sizes[32], n_sizes = 0;
    {
        const char *list = argc > 4 ? argv[4] : "1,2,3,4,5,8,9,16,17,32,33,64";
        for (const char *q = list; *q && n_sizes < 32;) {
            char *end;
            const long v = strtol(q, &end, 10);
            if (end == q || v < 1 || v > 64) {
                fprintf(stderr, "bad size list '%s' (1..64, comma separated)\n", list);
                return 1;
            }
            sizes[n_sizes++] = (int)v;
            q = *end == ',' ? end + 1 : end;
        }
    }
    if (n_steps < 1) {
        fprintf(stderr, "N_STEPS must be >= 1\n");
        return 1;
    }
    const char *env_dev = getenv("MINFER_TEST_DEVICE");
    const char *dev = env_dev && *env_dev ? env_dev : "cuda";
    if (!strncmp(dev, "cuda", 4) && !cuda_device_count()) {
        SKIP("no CUDA device (MINFER_TEST_DEVICE=cpu runs this check on the CPU)");
        return test_summary("cuda_batch");
    }
    const int exact = mf_env_int("MINFER_TEST_BATCH_EXACT", 0) == 1;
    char err[512] = "";
    minfer_model *m = minfer_model_load(path, err, sizeof err);
    if (!m) {
        CHECK(0, "load %s: %s", path, err);
        return test_summary("cuda_batch");
    }
    int n_max = 8;
    for (int i = 0; i < n_sizes; i++) n_max = MF_MAX(n_max, sizes[i]);
    static const char *const texts[8] = {
        "Once upon a time", "Lily and Tom went to the park.", "The cat sat", "One day, a little bird",
        "Max had a big red ball. He", "Sue was sad because", "The sun was hot and the", "Tim",
    };
    batch_prompts p;
    /* MINFER_TEST_TEXT_PROMPTS=1: the first 8 prompts are text (for a model with a real
     * vocabulary, stories260K); random ids otherwise */
    const int n_texts = mf_env_int("MINFER_TEST_TEXT_PROMPTS", 0) == 1 ? 8 : 0;
    if (batch_prompts_make(&p, m, n_max, texts, n_texts, 42)) {
        CHECK(0, "prompts");
        return test_summary("cuda_batch");
    }
    int max_len = 0;
    for (int i = 0; i < n_max; i++) max_len = MF_MAX(max_len, p.len[i]);
    const int n_ctx = max_len + n_steps + 1, nv = minfer_n_vocab(m);
    batch_trace solo, bt;
    if (batch_trace_init(&solo, n_max, n_steps, nv) || batch_trace_init(&bt, n_max, n_steps, nv)) {
        CHECK(0, "traces of %d x %d x %d logits", n_max, n_steps + 1, nv);
        return test_summary("cuda_batch");
    }
    printf("model %s, device %s, %d greedy steps, prompts of up to %d tokens, max normalised error %.3g%s\n", path, dev,
           n_steps, max_len, max_err, exact ? ", tokens must be identical" : "");
    /* the reference: every sequence alone, once, in a context of one slot */
    minfer_ctx *c1 = ctx_new(m, dev, 1, n_ctx);
    const double t0 = mf_time_s();
    int ok = c1 && batch_solo(c1, &p, &solo, err, sizeof err) == 0;
    CHECK(ok, "alone: %s", err);
    minfer_ctx_free(c1);
    printf("alone: %d sequences in %.2f s\n", n_max, mf_time_s() - t0);

    /* the runs: size 8 twice (one call a step; calls of 1..8 pairs), then each size */
    static const int one[] = { 0 }, mixed[] = { 8, 3, 5, 1, 4, 6, 7, 2 };
    typedef struct run_spec { int n; const int *sched; int n_sched; } run_spec;
    run_spec runs[40];
    int n_runs = 0;
    runs[n_runs++] = (run_spec){ 8, one, 1 };
    runs[n_runs++] = (run_spec){ 8, mixed, 8 };
    for (int i = 0; i < n_sizes; i++)
        if (sizes[i] != 8) runs[n_runs++] = (run_spec){ sizes[i], one, 1 };
    int n_identical = 0, n_bitwise = 0;
    const char *dump_path = getenv("MINFER_TEST_BATCH_DUMP");
    FILE *dump = dump_path && *dump_path ? fopen(dump_path, "w") : NULL;
    CHECK(!(dump_path && *dump_path) || dump, "open %s", dump_path);
    for (int ri = 0; ok && ri < n_runs; ri++) {
        const int n = runs[ri].n;
        int sched_buf[8];
        const int *sched = runs[ri].sched;
        if (sched == one) {
            sched_buf[0] = n;
            sched = sched_buf;
        }
        minfer_ctx *c = ctx_new(m, dev, n, n_ctx);
        if (!c) continue;
        batch_prompts pn = p;
        pn.n = n;  /* the first n prompts (their solo traces are rows 0..n-1) */
        memset(bt.logits, 0xff, sizeof(float) * (size_t)n_max * (n_steps + 1) * (size_t)nv);
        memset(bt.tok, 0xff, sizeof(int32_t) * (size_t)n_max * (n_steps + 1));
        batch_result r = { 0 };
        char label[96];
        snprintf(label, sizeof label, "%s, %d sequence%s, %s", dev, n, n == 1 ? "" : "s", runs[ri].n_sched > 1 ? "calls of 8,3,5,1,4,6,7,2" :
                 "one call a step");
        const double t1 = mf_time_s();
        const int rc = batch_run(c, &pn, &bt, sched, runs[ri].n_sched, &r, err, sizeof err);
        const double dt = mf_time_s() - t1;
        CHECK(rc == 0, "%s: %s", label, err);
        if (rc == 0) {
            batch_compare(&solo, &bt, n, &r);
            batch_report(stdout, label, n, &solo, &r);
            printf("  %.3f s (prefill + %d steps)\n", dt, n_steps);
            CHECK(r.finite, "%s: non-finite logits", label);
            CHECK(r.max_nerr <= max_err, "%s: normalised logit error %.3g > %.3g", label, r.max_nerr, max_err);
            if (exact) CHECK(r.seqs_diverged == 0, "%s: %d sequences diverge", label, r.seqs_diverged);
            int lens_ok = 1;
            for (int q = 0; q < n; q++) lens_ok &= minfer_seq_len(c, q) == p.len[q] + n_steps;
            CHECK(lens_ok, "%s: every sequence holds its prompt + %d tokens", label, n_steps);
            n_identical += r.seqs_diverged == 0;
            n_bitwise += r.bitwise;
            if (dump) {
                /* (rows of sequence q: q * (n_steps + 1) .. , as batch_trace_put stores them) */
                uint64_t h = 1469598103934665603ull;
                const unsigned char *lb = (const unsigned char *)bt.logits;
                const size_t nb = sizeof(float) * (size_t)n * (n_steps + 1) * (size_t)nv;
                for (size_t i = 0; i < nb; i++) h = (h ^ lb[i]) * 1099511628211ull;
                fprintf(dump, "%s: logits %016llx\n", label, (unsigned long long)h);
                for (int q = 0; q < n; q++) {
                    fprintf(dump, " seq %d:", q);
                    for (int k = 0; k <= n_steps; k++) fprintf(dump, " %d", bt.tok[q * (n_steps + 1) + k]);
                    fprintf(dump, "\n");
                }
            }
        }
        minfer_ctx_free(c);
    }
    if (dump) fclose(dump);
    printf("summary: %d of %d runs with every sequence's tokens identical to alone, %d bitwise\n", n_identical, n_runs,
           n_bitwise);
    batch_trace_free(&solo);
    batch_trace_free(&bt);
    batch_prompts_free(&p);
    minfer_model_free(m);
    return test_summary("cuda_batch");
}

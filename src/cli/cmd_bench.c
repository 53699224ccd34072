/* cmd_bench.c - `minfer bench`: prompt-processing (pp) and text-generation (tg)
 * throughput, mean and standard deviation over repetitions, like llama-bench.
 *
 * ppN: N random tokens evaluated from an empty cache in batches of n_batch.
 * tgN: N tokens decoded one at a time from an empty cache (llama-bench's tg).
 * One untimed warm-up of each test runs first. As in llama-bench, each test runs in
 * a context of its own length (n_prompt + n_gen; the weights stay loaded, the device
 * state is rebuilt), unless --ctx N gives one size for all: the context size sets
 * the attention grid of a decode step, so tg128 in a 3314-token context is a
 * different measurement. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "common.h"

static const char bench_usage[] =
    "usage: minfer bench -m MODEL [-p 512,3314] [-n 128] [-r 3] [-t THREADS] [--device D] [--ctx N] [-o md|json]\n"
    "  -p LIST     prompt lengths to test (comma separated; 0 = none; default 512)\n"
    "  -n LIST     generation lengths to test (default 128; 0 = none)\n"
    "  -r N        repetitions (default 3)\n"
    "  -b N        batch size for prefill (default 512)\n"
    "  -t N        CPU threads (default: all cores)\n"
    "  --device D  cpu | cuda | cuda:N | auto\n"
    "  --ctx N     one context size for every test (default: each test's own length, as llama-bench)\n"
    "  -o FMT      md (default) or json\n";

typedef struct bench_result {
    char test[32];
    int n_prompt, n_gen, n_ctx;
    double avg_ts, stddev_ts;
} bench_result;

static void random_tokens(int32_t *t, int n, int n_vocab, mf_rng *r) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(mf_rng_u64(r) % (uint64_t)n_vocab);
}

/* Runs one pp or tg test once; returns seconds, or -1 on error (message printed). */
static double run_once(mf_context *c, int n_prompt, int n_gen, mf_rng *rng) {
    mf_err err = { { 0 } };
    int n = n_prompt ? n_prompt : n_gen;
    int32_t *toks = mf_xmalloc(sizeof(int32_t) * (size_t)n);
    random_tokens(toks, n, c->m->hp.n_vocab, rng);
    kv_truncate(&c->kv, 0, 0);
    c->be->kv_truncate(c->be, 0, 0);
    const float *logits;
    double t0 = mf_time_s();
    int rc = 0;
    if (n_prompt) {
        rc = context_eval(c, 0, toks, n_prompt, &logits, &err);
    } else {
        for (int i = 0; i < n_gen && !rc; i++) rc = context_decode1(c, 0, toks[i], &logits, &err);
    }
    double dt = mf_time_s() - t0;
    free(toks);
    if (rc) {
        cli_error(cli_status_exit(rc), "bench: %s", err.msg);
        return -1;
    }
    return dt;
}

int cmd_bench(int argc, char **argv) {
    const char *model = NULL, *fmt = "md";
    int pp[16] = { 512 }, n_pp = 1, tg[16] = { 128 }, n_tg = 1, reps = 3;
    mf_context_params cp;
    context_params_default(&cp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(bench_usage, stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) bad = arg_value(argc, argv, &i, &model);
        else if (!strcmp(a, "-p")) bad = arg_int_list(argc, argv, &i, 0, 1 << 20, pp, 16, &n_pp);
        else if (!strcmp(a, "-n")) bad = arg_int_list(argc, argv, &i, 0, 1 << 20, tg, 16, &n_tg);
        else if (!strcmp(a, "-r")) bad = arg_int(argc, argv, &i, 1, 1000, &reps);
        else if (!strcmp(a, "-b")) bad = arg_int(argc, argv, &i, 1, 1 << 16, &cp.n_batch);
        else if (cli_context_opt(argc, argv, &i, &cp, &bad)) {}
        else if (!strcmp(a, "-o")) bad = arg_value(argc, argv, &i, &fmt);
        else return cli_error(1, "bench: unknown option '%s' (see minfer bench --help)", a);
        if (bad) return 1;
    }
    if (!model) return cli_error(1, "bench: -m MODEL is required");
    if (strcmp(fmt, "md") && strcmp(fmt, "json")) return cli_error(1, "bench: -o must be md or json");
    const int fixed_ctx = cp.n_ctx;  /* --ctx: one size for all (at least each test's length) */
    int first_len = 0;
    for (int i = 0; i < n_pp && !first_len; i++) first_len = pp[i];
    for (int i = 0; i < n_tg && !first_len; i++) first_len = tg[i];
    if (!first_len) return cli_error(1, "bench: no test (every -p and -n value is 0)");
    cp.n_ctx = MF_MAX(fixed_ctx, first_len);

    mf_model m;
    mf_context c;
    int rc = cli_load(model, &cp, &m, &c, 1);
    if (rc) return rc;
    bench_result res[32];
    int n_res = 0;
    mf_rng rng;
    mf_rng_seed(&rng, 1234);
    for (int pass = 0; pass < 2; pass++) {
        int cnt = pass == 0 ? n_pp : n_tg;
        for (int j = 0; j < cnt; j++) {
            int np = pass == 0 ? pp[j] : 0, ng = pass == 0 ? 0 : tg[j];
            if (np == 0 && ng == 0) continue;
            const int want_ctx = MF_MAX(fixed_ctx, np + ng);
            if (c.n_ctx != want_ctx) {
                /* a context of this test's size: the device state again, same weights */
                mf_err err = { { 0 } };
                context_free(&c);
                cp.n_ctx = want_ctx;
                const double t0 = mf_time_s();
                if ((rc = context_init(&c, &m, &cp, &err))) {
                    rc = cli_error(cli_status_exit(rc), "bench: context of %d tokens: %s", want_ctx, err.msg);
                    goto out;
                }
                mf_log("bench: context %d tokens for %s%d, ready in %.2f s", c.n_ctx, np ? "pp" : "tg", np ? np : ng,
                       mf_time_s() - t0);
            }
            if (run_once(&c, np ? MF_MIN(np, 16) : 0, ng ? MF_MIN(ng, 4) : 0, &rng) < 0) { rc = 2; goto out; }
            double sum = 0, sum2 = 0;
            for (int r = 0; r < reps; r++) {
                double dt = run_once(&c, np, ng, &rng);
                if (dt < 0) { rc = 2; goto out; }
                double ts = (np ? np : ng) / dt;
                sum += ts;
                sum2 += ts * ts;
            }
            bench_result *b = &res[n_res++];
            snprintf(b->test, sizeof b->test, "%s%d", np ? "pp" : "tg", np ? np : ng);
            b->n_prompt = np;
            b->n_gen = ng;
            b->n_ctx = c.n_ctx;
            b->avg_ts = sum / reps;
            b->stddev_ts = reps > 1 ? sqrt(fmax(0.0, (sum2 - sum * sum / reps) / (reps - 1))) : 0.0;
            if (ng)  /* decode reads every weight once per token: the bandwidth it achieves */
                mf_log("bench: %s %.2f +/- %.2f tok/s (%.0f GB/s of weights)", b->test, b->avg_ts, b->stddev_ts,
                       (double)m.weight_bytes * b->avg_ts / 1e9);
            else
                mf_log("bench: %s %.2f +/- %.2f tok/s", b->test, b->avg_ts, b->stddev_ts);
        }
    }
    if (!strcmp(fmt, "json")) {
        printf("[\n");
        for (int i = 0; i < n_res; i++)
            printf("  {\"model\": \"%s\", \"device\": \"%s\", \"n_threads\": %d, \"test\": \"%s\", \"n_prompt\": %d, "
                   "\"n_gen\": %d, \"n_ctx\": %d, \"avg_ts\": %.3f, \"stddev_ts\": %.3f}%s\n",
                   m.hp.arch_name, c.be->name, cp.n_threads, res[i].test, res[i].n_prompt, res[i].n_gen,
                   res[i].n_ctx, res[i].avg_ts, res[i].stddev_ts, i + 1 < n_res ? "," : "");
        printf("]\n");
    } else {
        printf("| model | size | params | device | test | t/s |\n|---|---:|---:|---|---:|---:|\n");
        uint64_t params = 0;
        for (uint64_t i = 0; i < m.gguf.n_tensors; i++) params += m.gguf.tensors[i].n_elements;
        for (int i = 0; i < n_res; i++)
            printf("| %s %s | %.2f GiB | %.2f B | %s | %s | %.2f ± %.2f |\n", m.hp.arch_name, model,
                   m.weight_bytes / 1073741824.0, params / 1e9, c.be->name, res[i].test, res[i].avg_ts,
                   res[i].stddev_ts);
    }
out:
    context_free(&c);
    model_free(&m);
    return rc;
}

/* cmd_bench.c - `minfer bench`: prompt-processing (pp) and text-generation (tg)
 * throughput, mean and standard deviation over repetitions, like llama-bench; and
 * with -s, several sequences decoded together, like llama.cpp's llama-batched-bench.
 *
 * ppN: N random tokens evaluated from an empty cache in batches of n_batch.
 * tgN: N tokens decoded one at a time from an empty cache (llama-bench's tg).
 * tgN@sS (-s S): S sequences, each first given its own prompt of -p random tokens
 *   (prefilled one sequence after another, each in batches of n_batch: not one batch
 *   of all S, and not in the decode figure), then N steps that each decode one random
 *   token of every sequence in one forward step (context_decode of S pairs). avg_ts is
 *   the aggregate S*N / decode time; the per-sequence rate is N / decode time. The test
 *   is called pp{P}+tg{N}@s{S} when the prompt P > 0.
 * One untimed warm-up of each test runs first. As in llama-bench, each test runs in
 * a context of its own length (n_prompt + n_gen positions per sequence; the weights
 * stay loaded, the device state is rebuilt), unless --ctx N gives one size for all:
 * then every test runs in exactly N positions and one that needs more is a usage
 * error before the model loads (the context size sets the attention grid of a decode
 * step, so tg128 in a 3314-token context is a different measurement). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "cpu/threads.h"
#include "opts.h"
#include "quant.h"

/* What one line per option cannot say; the options themselves come from the table
 * in cmd_bench. */
static const char bench_notes[] =
    "Tests: ppN evaluates N random tokens from an empty cache; tgN decodes N tokens one at a time.\n"
    "With -s, instead: for each S, S sequences decoded together, one token of each per step (like\n"
    "llama-batched-bench's -npl), every -p x -n x -s combination; each sequence is first prefilled\n"
    "with its own -p tokens, one sequence after another: prefill is per sequence and not timed into\n"
    "the decode figure. Reports the aggregate S*n/time and the per-sequence n/time tok/s (test names\n"
    "tg128@s8, pp512+tg128@s8). One untimed warm-up of each test runs first.\n"
    "\n";

enum { MAX_TESTS = 256 };

typedef struct bench_test {
    int n_prompt, n_gen, n_seq;  /* n_seq 0: a plain pp or tg test (one sequence) */
} bench_test;

typedef struct bench_result {
    char test[48];
    bench_test t;
    int n_ctx;
    double avg_ts, stddev_ts;    /* pp/tg: tok/s; -s: aggregate decode tok/s */
    double pp_avg_ts;            /* -s with a prompt: aggregate prefill tok/s (0: none) */
} bench_result;

static void random_tokens(int32_t *t, int n, int n_vocab, mf_rng *r) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(mf_rng_u64(r) % (uint64_t)n_vocab);
}

/* positions a test needs in each sequence's context */
static int test_len(const bench_test *t) { return t->n_prompt + t->n_gen; }

static void test_name(const bench_test *t, char *buf, size_t cap) {
    if (!t->n_seq) snprintf(buf, cap, "%s%d", t->n_prompt ? "pp" : "tg", t->n_prompt ? t->n_prompt : t->n_gen);
    else if (t->n_prompt) snprintf(buf, cap, "pp%d+tg%d@s%d", t->n_prompt, t->n_gen, t->n_seq);
    else snprintf(buf, cap, "tg%d@s%d", t->n_gen, t->n_seq);
}

/* Runs one pp or tg test once; returns seconds, or -1 on error (message printed). */
static double run_once(mf_context *c, int n_prompt, int n_gen, mf_rng *rng) {
    mf_err err = { { 0 } };
    int n = n_prompt ? n_prompt : n_gen;
    int32_t *toks = mf_xmalloc(sizeof(int32_t) * (size_t)n);
    random_tokens(toks, n, c->m->hp.n_vocab, rng);
    context_seq_clear(c, 0, &err);
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

/* Runs one -s test once: n_seq prompts of n_prompt tokens, one sequence after
 * another, then n_gen steps of n_seq pairs. *pp_s = prefill seconds; returns the
 * decode seconds, or -1 on error (message printed). */
static double run_seqs_once(mf_context *c, int n_seq, int n_prompt, int n_gen, mf_rng *rng, double *pp_s) {
    mf_err err = { { 0 } };
    const int nv = c->m->hp.n_vocab;
    int32_t *prompt = mf_xmalloc(sizeof(int32_t) * (size_t)MF_MAX(n_prompt, 1));
    int32_t *toks = mf_xmalloc(sizeof(int32_t) * (size_t)n_seq);
    int *seqs = mf_xmalloc(sizeof(int) * (size_t)n_seq);
    const float *logits;
    int rc = 0;
    for (int s = 0; s < n_seq && !rc; s++) {
        seqs[s] = s;
        rc = context_seq_clear(c, s, &err);
    }
    const double t0 = mf_time_s();
    for (int s = 0; s < n_seq && !rc && n_prompt; s++) {
        random_tokens(prompt, n_prompt, nv, rng);  /* each sequence its own prompt */
        rc = context_eval(c, s, prompt, n_prompt, &logits, &err);
    }
    const double t1 = mf_time_s();
    for (int k = 0; k < n_gen && !rc; k++) {
        random_tokens(toks, n_seq, nv, rng);
        rc = context_decode(c, seqs, toks, n_seq, &logits, &err);
    }
    const double t2 = mf_time_s();
    free(prompt);
    free(toks);
    free(seqs);
    if (rc) {
        cli_error(cli_status_exit(rc), "bench: %s", err.msg);
        return -1;
    }
    *pp_s = t1 - t0;
    return t2 - t1;
}

/* "1.12 MiB", "3.80 GiB": llama-bench prints GiB, which reads 0.00 for small models. */
static void fmt_size(double bytes, char *buf, size_t cap) {
    if (bytes >= 1073741824.0) snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    else if (bytes >= 1048576.0) snprintf(buf, cap, "%.2f MiB", bytes / 1048576.0);
    else snprintf(buf, cap, "%.2f KiB", bytes / 1024.0);
}

static void fmt_params(double n, char *buf, size_t cap) {
    if (n >= 1e9) snprintf(buf, cap, "%.2f B", n / 1e9);
    else if (n >= 1e6) snprintf(buf, cap, "%.2f M", n / 1e6);
    else snprintf(buf, cap, "%.2f K", n / 1e3);
}

int cmd_bench(int argc, char **argv) {
    const char *model = NULL, *fmt = "md";
    cli_int_list pp = { { 512 }, 1 }, tg = { { 128 }, 1 }, sqs = { { 0 }, 0 };
    int reps = 3, n_batch = 0, verbose = 1;
    mf_context_params cp;
    context_params_default(&cp);
    cli_opt opts[10 + CLI_OPTS_MAX_GROUP];
    int n = 0;
    opts[n++] = (cli_opt){ "-m, --model", "PATH", CLI_OPT_STR, &model, .help = "GGUF model file (required)", .dflt = "" };
    opts[n++] = (cli_opt){ "-p", "LIST", CLI_OPT_INT_LIST, &pp, 0, 1 << 20,
                           .help = "prompt lengths, comma separated (0 = none; with -s: each sequence's prompt)" };
    opts[n++] = (cli_opt){ "-n", "LIST", CLI_OPT_INT_LIST, &tg, 0, 1 << 20,
                           .help = "generation lengths, comma separated (0 = none)" };
    opts[n++] = (cli_opt){ "-s", "LIST", CLI_OPT_INT_LIST, &sqs, 1, 1024,
                           .help = "sequences decoded together, instead of the pp and tg tests (see above)",
                           .dflt = "none" };
    opts[n++] = (cli_opt){ "-r", "N", CLI_OPT_INT, &reps, 1, 1000, .help = "repetitions of each test" };
    opts[n++] = (cli_opt){ "-b", "N", CLI_OPT_INT, &n_batch, 1, 1 << 16,
                           .help = "batch size for prefill (with -s at least S)", .dflt = "512 on the CPU, 2048 on CUDA" };
    const int ctx_row = n;
    n += cli_opts_context(opts + n, &cp);
    /* bench's --ctx: no default size of its own (context_params_default's 0), each test
     * in its own length unless given */
    opts[ctx_row].help = "exactly N positions (per sequence) for every test; a longer test is an error";
    opts[ctx_row].dflt = "each test its own length, as llama-bench";
    opts[n++] = (cli_opt){ "-o", "FMT", CLI_OPT_CHOICE, &fmt, .help = "output format", .choices = "md|json" };
    n += cli_opts_verbosity(opts + n, &verbose);
    int prc = cli_parse("bench", "usage: minfer bench -m MODEL [options]", bench_notes, opts, n, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose; /* -q: the table (or JSON) on stdout, nothing on stderr but errors */
    if (!model) return cli_error(1, "bench: -m MODEL is required (see minfer bench --help)");
    if (cli_context_check(&cp)) return 1; /* device and threads, before the model loads */
    const int *sq = sqs.v, n_sq = sqs.n, n_pp = pp.n, n_tg = tg.n;

    /* the tests, in the order they run */
    bench_test tests[MAX_TESTS];
    int n_tests = 0;
    if (n_sq) {
        if (n_pp * n_tg * n_sq > MAX_TESTS)
            return cli_error(1, "bench: %d x %d x %d tests, more than %d", n_pp, n_tg, n_sq, MAX_TESTS);
        for (int a = 0; a < n_pp; a++)
            for (int g = 0; g < n_tg; g++)
                for (int s = 0; s < n_sq; s++)
                    if (tg.v[g] > 0) tests[n_tests++] = (bench_test){ pp.v[a], tg.v[g], sq[s] };
        if (!n_tests) return cli_error(1, "bench: -s needs a generation length above 0 (-n)");
    } else {
        for (int a = 0; a < n_pp; a++)
            if (pp.v[a]) tests[n_tests++] = (bench_test){ pp.v[a], 0, 0 };
        for (int g = 0; g < n_tg; g++)
            if (tg.v[g]) tests[n_tests++] = (bench_test){ 0, tg.v[g], 0 };
        if (!n_tests) return cli_error(1, "bench: no test (every -p and -n value is 0)");
    }
    const int fixed_ctx = cp.n_ctx;  /* --ctx: exactly this size for every test */
    for (int i = 0; fixed_ctx && i < n_tests; i++) {
        if (test_len(&tests[i]) > fixed_ctx) {
            char name[48];
            test_name(&tests[i], name, sizeof name);
            return cli_error(1, "bench: %s needs %d positions%s, above --ctx %d (every test runs in that one size)",
                             name, test_len(&tests[i]), tests[i].n_seq ? " per sequence" : "", fixed_ctx);
        }
    }
    /* the context a test runs in: its own length unless --ctx; -s: its sequences, and a
     * batch that holds one token of each */
    mf_context_params want = cp;
#define TEST_PARAMS(t) do { \
        want.n_ctx = fixed_ctx ? fixed_ctx : test_len(t); \
        want.n_seq = (t)->n_seq ? (t)->n_seq : 1; \
        want.n_batch = n_batch ? MF_MAX(n_batch, want.n_seq) : 0; } while (0)
    TEST_PARAMS(&tests[0]);

    mf_model m;
    mf_context c;
    int rc = cli_load(model, &want, &m, &c, verbose);
    if (rc) return rc;
    mf_context_params have = want;
    bench_result res[MAX_TESTS];
    int n_res = 0;
    mf_rng rng;
    mf_rng_seed(&rng, 1234);
    for (int j = 0; j < n_tests; j++) {
        const bench_test *t = &tests[j];
        TEST_PARAMS(t);
        if (want.n_ctx != have.n_ctx || want.n_seq != have.n_seq || want.n_batch != have.n_batch) {
            /* a context of this test's size: the device state again, same weights */
            mf_err err = { { 0 } };
            context_free(&c);
            const double t0 = mf_time_s();
            if ((rc = context_init(&c, &m, &want, &err))) {
                rc = cli_error(cli_status_exit(rc), "bench: context of %d tokens x %d sequences: %s", want.n_ctx,
                               want.n_seq, err.msg);
                goto out;
            }
            have = want;
            mf_log("bench: context %d tokens x %d sequence%s for test %d, ready in %.2f s", c.n_ctx, c.n_seq,
                   c.n_seq == 1 ? "" : "s", j + 1, mf_time_s() - t0);
        }
        bench_result *b = &res[n_res++];
        memset(b, 0, sizeof *b);
        test_name(t, b->test, sizeof b->test);
        b->t = *t;
        b->n_ctx = c.n_ctx;
        double sum = 0, sum2 = 0, pp_sum = 0, pp_s;
        if (t->n_seq) {
            if (run_seqs_once(&c, t->n_seq, MF_MIN(t->n_prompt, 16), MF_MIN(t->n_gen, 4), &rng, &pp_s) < 0) {
                rc = 2;
                goto out;
            }
            for (int r = 0; r < reps; r++) {
                const double dt = run_seqs_once(&c, t->n_seq, t->n_prompt, t->n_gen, &rng, &pp_s);
                if (dt < 0) { rc = 2; goto out; }
                const double ts = (double)t->n_seq * t->n_gen / dt;
                sum += ts;
                sum2 += ts * ts;
                if (t->n_prompt) pp_sum += (double)t->n_seq * t->n_prompt / pp_s;
            }
        } else {
            const int np = t->n_prompt, ng = t->n_gen;
            if (run_once(&c, np ? MF_MIN(np, 16) : 0, ng ? MF_MIN(ng, 4) : 0, &rng) < 0) { rc = 2; goto out; }
            for (int r = 0; r < reps; r++) {
                const double dt = run_once(&c, np, ng, &rng);
                if (dt < 0) { rc = 2; goto out; }
                const double ts = (np ? np : ng) / dt;
                sum += ts;
                sum2 += ts * ts;
            }
        }
        b->avg_ts = sum / reps;
        b->stddev_ts = reps > 1 ? sqrt(fmax(0.0, (sum2 - sum * sum / reps) / (reps - 1))) : 0.0;
        b->pp_avg_ts = pp_sum / reps;
        if (t->n_seq)  /* a step reads every weight once for all its sequences */
            mf_log("bench: %s %.2f +/- %.2f tok/s aggregate, %.2f per sequence (%.0f GB/s of weights)", b->test,
                   b->avg_ts, b->stddev_ts, b->avg_ts / t->n_seq,
                   (double)m.weight_bytes * b->avg_ts / t->n_seq / 1e9);
        else if (t->n_gen)  /* decode reads every weight once per token: the bandwidth it achieves */
            mf_log("bench: %s %.2f +/- %.2f tok/s (%.0f GB/s of weights)", b->test, b->avg_ts, b->stddev_ts,
                   (double)m.weight_bytes * b->avg_ts / 1e9);
        else
            mf_log("bench: %s %.2f +/- %.2f tok/s", b->test, b->avg_ts, b->stddev_ts);
        if (t->n_seq && t->n_prompt)
            mf_log("bench: %s prefill %d x %d tokens, one sequence after another: %.2f tok/s", b->test, t->n_seq,
                   t->n_prompt, b->pp_avg_ts);
    }
#undef TEST_PARAMS
    uint64_t params = 0;
    for (uint64_t i = 0; i < m.gguf.n_tensors; i++) params += m.gguf.tensors[i].n_elements;
    char size_s[32], params_s[32];
    fmt_size((double)m.weight_bytes, size_s, sizeof size_s);
    fmt_params((double)params, params_s, sizeof params_s);
    /* the pool's size, not the request (0 = all cores; more than the cores was capped) */
    const int n_threads = cp.n_threads > 0 ? cp.n_threads : cpu_count_cores();
    /* the KV cache's types; the md tables name them where -ctk / -ctv were given (llama-bench
     * shows type_k / type_v where they are not its default) */
    const char *type_k = qtype_name((uint32_t)c.be->kv_type_k), *type_v = qtype_name((uint32_t)c.be->kv_type_v);
    char dev_s[64];
    if (cp.cache_type_k || cp.cache_type_v) snprintf(dev_s, sizeof dev_s, "%s, KV %s/%s", c.be->name, type_k, type_v);
    else snprintf(dev_s, sizeof dev_s, "%s", c.be->name);
    if (!strcmp(fmt, "json")) {
        printf("[\n");
        for (int i = 0; i < n_res; i++) {
            const bench_result *r = &res[i];
            printf("  {\"model\": \"%s\", \"size\": %llu, \"params\": %llu, \"device\": \"%s\", \"n_threads\": %d, "
                   "\"test\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"n_seq\": %d, \"n_ctx\": %d, "
                   "\"type_k\": \"%s\", \"type_v\": \"%s\", \"avg_ts\": %.3f, \"stddev_ts\": %.3f",
                   m.hp.arch_name, (unsigned long long)m.weight_bytes, (unsigned long long)params, c.be->name,
                   n_threads, r->test, r->t.n_prompt, r->t.n_gen, r->t.n_seq ? r->t.n_seq : 1, r->n_ctx, type_k,
                   type_v, r->avg_ts, r->stddev_ts);
            if (r->t.n_seq)
                printf(", \"seq_avg_ts\": %.3f, \"seq_stddev_ts\": %.3f, \"prefill\": \"per sequence\", "
                       "\"pp_avg_ts\": %.3f", r->avg_ts / r->t.n_seq, r->stddev_ts / r->t.n_seq, r->pp_avg_ts);
            printf("}%s\n", i + 1 < n_res ? "," : "");
        }
        printf("]\n");
    } else if (n_sq) {
        printf("| model | size | params | device | test | n_seq | t/s (all sequences) | t/s (per sequence) | "
               "prefill t/s |\n|---|---:|---:|---|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < n_res; i++) {
            const bench_result *r = &res[i];
            printf("| %s %s | %s | %s | %s | %s | %d | %.2f ± %.2f | %.2f ± %.2f | ", m.hp.arch_name, model, size_s,
                   params_s, dev_s, r->test, r->t.n_seq, r->avg_ts, r->stddev_ts, r->avg_ts / r->t.n_seq,
                   r->stddev_ts / r->t.n_seq);
            if (r->t.n_prompt) printf("%.2f |\n", r->pp_avg_ts);
            else printf("- |\n");
        }
    } else {
        printf("| model | size | params | device | test | t/s |\n|---|---:|---:|---|---:|---:|\n");
        for (int i = 0; i < n_res; i++)
            printf("| %s %s | %s | %s | %s | %s | %.2f ± %.2f |\n", m.hp.arch_name, model, size_s, params_s,
                   dev_s, res[i].test, res[i].avg_ts, res[i].stddev_ts);
    }
out:
    context_free(&c);
    model_free(&m);
    return rc;
}

/* cmd_perplexity.c - `minfer perplexity -m MODEL -f TEXT [--ctx 512] [--chunks N]
 * [--device D] [-t N]`: the perplexity of a text as llama.cpp's llama-perplexity computes
 * it (src/perplexity.h: non-overlapping chunks of --ctx tokens, BOS first where the model
 * adds one, the second half of each chunk scored). stdout: the chunk count and the final
 * estimate with its standard error; stderr: llama.cpp-style progress ("[1]12.3456,"), one
 * chunk at a time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "opts.h"
#include "perplexity.h"
#include "tokenizer.h"
#include "util.h"

static void progress(void *ud, int chunk, int n_chunks, const ppl_acc *a, double seconds) {
    if (!*(const int *)ud) return; /* -q */
    if (chunk == 1) fprintf(stderr, "minfer: perplexity: %.2f s per chunk, about %.0f s in all\n", seconds,
                            seconds * n_chunks);
    fprintf(stderr, "[%d]%.4f,%s", chunk, ppl_value(a), chunk == n_chunks ? "\n" : "");
    fflush(stderr);
}

int cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    int chunks = 0, verbose = 1;
    mf_context_params cp;
    context_params_default(&cp);
    cp.n_ctx = 512;
    cli_opt opts[4 + CLI_OPTS_MAX_GROUP * 2];
    int n = 0;
    opts[n++] = (cli_opt){ "-m, --model", "PATH", CLI_OPT_STR, &model, .help = "GGUF model file (required)", .dflt = "" };
    opts[n++] = (cli_opt){ "-f, --file", "PATH", CLI_OPT_STR, &file, .help = "the text to score (required; -: standard input)", .dflt = "" };
    opts[n++] = (cli_opt){ "--chunks", "N", CLI_OPT_INT, &chunks, 0, 1 << 24,
                           .help = "score the first N chunks only (0 = all)" };
    const int ctx_row = n;
    n += cli_opts_context(opts + n, &cp);
    opts[ctx_row].help = "chunk size in tokens; the second half of each chunk is scored";
    opts[ctx_row].dflt = NULL;
    n += cli_opts_verbosity(opts + n, &verbose);
    int prc = cli_parse("perplexity", "usage: minfer perplexity -m MODEL -f TEXT [--ctx 512] [options]",
                        "  as llama.cpp's llama-perplexity: non-overlapping chunks of --ctx tokens, BOS first where\n"
                        "  the model adds one, the second half of each chunk scored; prints the chunk count, the\n"
                        "  estimate and its standard error\n",
                        opts, n, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose;
    if (!model) return cli_error(1, "perplexity: -m MODEL is required (see minfer perplexity --help)");
    if (!file) return cli_error(1, "perplexity: -f TEXT is required");
    if (cp.n_ctx < 4) return cli_error(1, "perplexity: --ctx %d is too small (4 at least)", cp.n_ctx);
    if (cli_context_check(&cp)) return 1;
    cp.n_batch = cp.n_ctx; /* a chunk is one forward step, as llama.cpp's default n_batch 2048 >= 512 */

    size_t len = 0;
    char *text = cli_read_file(file, &len);
    if (!text) return 2;
    mf_model m;
    mf_context c;
    int rc = cli_load(model, &cp, &m, &c, verbose);
    if (rc) { free(text); return rc; }
    mf_err err = { { 0 } };
    int32_t *ids = NULL;
    int exit_code = 0;
    const int n_ids = tok_encode(m.vocab, text, len, 1, 0, &ids, &err);
    free(text);
    if (n_ids < 0) { exit_code = cli_error(2, "tokenizer: %s", err.msg); goto out; }
    const int32_t bos = tok_add_bos(m.vocab) ? tok_bos(m.vocab) : -1;
    if (verbose)
        mf_log("perplexity: %s: %d tokens, chunks of %d (%d scored each)%s", file, n_ids, cp.n_ctx,
               cp.n_ctx - 1 - cp.n_ctx / 2, bos >= 0 ? ", BOS first" : "");
    ppl_acc a = { 0 };
    const double t0 = mf_time_s();
    const int got = ppl_eval(&c, ids, n_ids, cp.n_ctx, bos, chunks, &a, progress, &verbose, &err);
    if (got < 0) { exit_code = cli_error(cli_status_exit(got), "%s", err.msg); goto out; }
    const double dt = mf_time_s() - t0;
    printf("chunks: %d of %d tokens, %lld tokens scored\n", got, cp.n_ctx, (long long)a.count);
    printf("estimate: PPL = %.4f +/- %.5f\n", ppl_value(&a), ppl_error(&a));
    if (fflush(stdout) != 0) { exit_code = cli_error(2, "perplexity: error writing stdout"); goto out; }
    if (verbose)
        mf_log("perplexity: %d chunks in %.2f s (%.1f tok/s)", got, dt, (double)got * cp.n_ctx / (dt > 0 ? dt : 1e-9));
out:
    free(ids);
    context_free(&c);
    model_free(&m);
    return exit_code;
}

/* cmd_run.c - `minfer run`: generate text from a prompt. Only the generated text
 * goes to stdout; loading progress and timings go to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "common.h"
#include "sampler.h"
#include "tokenizer.h"

static const char run_usage[] =
    "usage: minfer run -m MODEL [-p PROMPT | -f FILE] [options]\n"
    "  -m, --model PATH      GGUF model file (required)\n"
    "  -p, --prompt TEXT     prompt text (default: empty = start from BOS)\n"
    "  -f, --file PATH       read the prompt from a file\n"
    "  -n, --n-predict N     tokens to generate (default 256; stops early at end-of-generation)\n"
    "  --temp T              temperature (default 0.8; 0 = greedy)\n"
    "  --top-k K             top-k filter (default 40; 0 = off)\n"
    "  --top-p P             top-p filter (default 0.95; 1 = off)\n"
    "  --min-p P             min-p filter (default 0.05; 0 = off)\n"
    "  --repeat-penalty R    repetition penalty over the last 64 tokens (default 1.0 = off)\n"
    "  --seed S              RNG seed (default: from the clock)\n"
    "  --ctx N               context size in tokens (default: min(model, 4096))\n"
    "  --device D            cpu | cuda | cuda:N | auto (default auto: cuda, GPU 0, when one is present)\n"
    "  -t, --threads N       CPU threads (default: all cores)\n"
    "  --special             recognise special-token text (e.g. <|im_start|>) in the prompt\n"
    "  --ignore-eos          keep generating past end-of-generation tokens\n"
    "  -v, --verbose         loading and timing details on stderr (default on; -q to silence)\n"
    "  -q, --quiet           no diagnostics except errors\n";

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    int n_predict = 256, special = 0, ignore_eos = 0, verbose = 1;
    mf_context_params cp;
    context_params_default(&cp);
    mf_sampler_params sp;
    sampler_params_default(&sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(run_usage, stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) bad = arg_value(argc, argv, &i, &model);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) bad = arg_value(argc, argv, &i, &prompt);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) bad = arg_value(argc, argv, &i, &file);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) bad = arg_int(argc, argv, &i, 0, 1 << 24, &n_predict);
        else if (cli_context_opt(argc, argv, &i, &cp, &bad) || cli_sampler_opt(argc, argv, &i, &sp, &bad)) {}
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) verbose = 0;
        else return cli_error(1, "run: unknown option '%s' (see minfer run --help)", a);
        if (bad) return 1;
    }
    if (!model) return cli_error(1, "run: -m MODEL is required (see minfer run --help)");
    if (prompt && file) return cli_error(1, "run: give either -p or -f, not both");

    char *text = NULL;
    size_t text_len = 0;
    if (file) {
        if (!(text = cli_read_file(file, &text_len))) return 2;
    } else {
        text = mf_xstrdup(prompt ? prompt : "");
        text_len = strlen(text);
    }

    mf_model m;
    mf_context c;
    int rc = cli_load(model, &cp, &m, &c, verbose);
    if (rc) { free(text); return rc; }

    mf_err err = { { 0 } };
    int32_t *ids = NULL;
    int n_ids = tok_encode(m.vocab, text, text_len, tok_add_bos(m.vocab), special, &ids, &err);
    free(text);
    int exit_code = 0;
    mf_sampler *smp = NULL;
    if (n_ids < 0) { exit_code = cli_error(2, "tokenizer: %s", err.msg); goto out; }
    if (n_ids == 0) { /* an empty prompt starts from BOS alone */
        int32_t bos = tok_bos(m.vocab);
        if (bos < 0) { exit_code = cli_error(2, "empty prompt and the vocabulary has no BOS token"); goto out; }
        free(ids);
        ids = mf_xmalloc(sizeof(int32_t));
        ids[0] = bos;
        n_ids = 1;
    }
    if (n_ids + n_predict > c.n_ctx) {
        if (n_ids >= c.n_ctx) {
            exit_code = cli_error(2, "prompt of %d tokens does not fit the context of %d tokens (use --ctx)", n_ids, c.n_ctx);
            goto out;
        }
        if (verbose) mf_log("generation capped at %d tokens by the context size %d", c.n_ctx - n_ids, c.n_ctx);
        n_predict = c.n_ctx - n_ids;
    }
    smp = sampler_new(&sp, m.hp.n_vocab, &err);
    if (!smp) { exit_code = cli_error(1, "sampler: %s", err.msg); goto out; }
    for (int i = 0; i < n_ids; i++) sampler_accept(smp, ids[i]);
    if (verbose) {
        if (sp.temp <= 0) mf_log("sampling: greedy");
        else mf_log("sampling: temp %.2f, top-k %d, top-p %.2f, min-p %.2f, seed %llu (--seed to repeat)", sp.temp,
                    sp.top_k, sp.top_p, sp.min_p, (unsigned long long)sampler_seed(smp));
    }

    double t0 = mf_time_s();
    const float *logits;
    if ((rc = context_eval(&c, 0, ids, n_ids, &logits, &err))) { exit_code = cli_error(cli_status_exit(rc), "%s", err.msg); goto out; }
    double t_prompt = mf_time_s() - t0;

    cli_gen g = { .n_max = n_predict, .ignore_eog = ignore_eos,
                  .strip_first = n_ids == 1 && ids[0] == tok_bos(m.vocab) };
    double t1 = mf_time_s();
    int n_gen = cli_generate(&c, smp, 0, logits, &g, &err);
    if (n_gen < 0) { exit_code = cli_error(cli_status_exit(n_gen), "%s", err.msg); goto out; }
    double t_gen = mf_time_s() - t1;
    if (verbose)
        mf_log("prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)", n_ids, t_prompt,
               n_ids / (t_prompt > 0 ? t_prompt : 1e-9), n_gen, t_gen, n_gen / (t_gen > 0 ? t_gen : 1e-9));
out:
    if (smp) sampler_free(smp);
    free(ids);
    context_free(&c);
    model_free(&m);
    return exit_code;
}

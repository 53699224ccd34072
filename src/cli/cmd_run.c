/* cmd_run.c - `minfer run`: generate text from a prompt. Only the generated text
 * goes to stdout; loading progress and timings go to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "opts.h"
#include "sampler.h"
#include "tokenizer.h"

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    int n_predict = 256, special = 0, ignore_eos = 0, verbose = 1;
    mf_context_params cp;
    context_params_default(&cp);
    mf_sampler_params sp;
    sampler_params_default(&sp);
    cli_constraint_opts co = { 0 };
    cli_opt opts[8 + 4 * CLI_OPTS_MAX_GROUP];
    int n = 0;
    opts[n++] = (cli_opt){ "-m, --model", "PATH", CLI_OPT_STR, &model, .help = "GGUF model file (required)", .dflt = "" };
    opts[n++] = (cli_opt){ "-p, --prompt", "TEXT", CLI_OPT_STR, &prompt, .help = "prompt text",
                           .dflt = "empty = start from BOS" };
    opts[n++] = (cli_opt){ "-f, --file", "PATH", CLI_OPT_STR, &file, .help = "read the prompt from a file (-: standard input)", .dflt = "" };
    opts[n++] = (cli_opt){ "-n, --n-predict", "N", CLI_OPT_INT, &n_predict, -1, 1 << 24,
                           .help = "tokens to generate (-1 = until end-of-generation or the context is full)" };
    n += cli_opts_sampler(opts + n, &sp);
    n += cli_opts_constraint(opts + n, &co);
    n += cli_opts_context(opts + n, &cp);
    opts[n++] = (cli_opt){ "--special", NULL, CLI_OPT_FLAG, &special, .set = 1,
                           .help = "recognise special-token text (e.g. <|im_start|>) in the prompt", .dflt = "" };
    opts[n++] = (cli_opt){ "--ignore-eos", NULL, CLI_OPT_FLAG, &ignore_eos, .set = 1,
                           .help = "keep generating past end-of-generation tokens", .dflt = "" };
    n += cli_opts_verbosity(opts + n, &verbose);
    int prc = cli_parse("run", "usage: minfer run -m MODEL [-p PROMPT | -f FILE] [options]", NULL, opts, n, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose;
    if (!model) return cli_error(1, "run: -m MODEL is required (see minfer run --help)");
    if (prompt && file) return cli_error(1, "run: give either -p or -f, not both");
    if (cli_context_check(&cp)) return 1;
    mf_err perr = { { 0 } };
    if (sampler_params_check(&sp, 1, &perr)) return cli_error(1, "%s", perr.msg); /* before the model loads */
    gram *gr = NULL; /* the output's grammar, when one was given */
    int crc = cli_constraint_compile(&co, &gr);
    if (crc) return crc;

    char *text = NULL;
    size_t text_len = 0;
    if (file) {
        if (!(text = cli_read_file(file, &text_len))) { gram_free(gr); return 2; }
    } else {
        text = mf_xstrdup(prompt ? prompt : "");
        text_len = strlen(text);
    }

    mf_model m;
    mf_context c;
    int rc = cli_load(model, &cp, &m, &c, verbose);
    if (rc) { free(text); gram_free(gr); return rc; }

    mf_err err = { { 0 } };
    int32_t *ids = NULL;
    int n_ids = tok_encode(m.vocab, text, text_len, tok_add_bos(m.vocab), special, &ids, &err);
    free(text);
    int exit_code = 0;
    mf_sampler *smp = NULL;
    gram_vocab *tv = NULL;
    mf_constraint *con = NULL;
    if (n_ids < 0) { exit_code = cli_error(2, "tokenizer: %s", err.msg); goto out; }
    if (n_ids == 0) { /* an empty prompt starts from BOS alone */
        int32_t bos = tok_bos(m.vocab);
        if (bos < 0) { exit_code = cli_error(2, "empty prompt and the vocabulary has no BOS token"); goto out; }
        free(ids);
        ids = mf_xmalloc(sizeof(int32_t));
        ids[0] = bos;
        n_ids = 1;
    }
    if (n_predict < 0) n_predict = c.n_ctx - MF_MIN(n_ids, c.n_ctx); /* -1: until the context is full */
    if (n_ids + n_predict > c.n_ctx) {
        if (n_ids >= c.n_ctx) {
            exit_code = cli_error(2, "prompt of %d tokens does not fit the context of %d tokens (use --ctx)", n_ids, c.n_ctx);
            goto out;
        }
        if (verbose) mf_log("generation capped at %d tokens by the context size %d", c.n_ctx - n_ids, c.n_ctx);
        n_predict = c.n_ctx - n_ids;
    }
    smp = sampler_new(&sp, m.hp.n_vocab, &err);
    if (!smp) { exit_code = cli_error(cli_status_exit(MF_ERR_USAGE), "%s", err.msg); goto out; } /* err says "sampler: ..." */
    for (int i = 0; i < n_ids; i++) sampler_accept(smp, ids[i]);
    if (verbose) {
        if (sp.temp <= 0) mf_log("sampling: greedy");
        else mf_log("sampling: temp %.2f, top-k %d, top-p %.2f, min-p %.2f, seed %llu (--seed to repeat)", sp.temp,
                    sp.top_k, sp.top_p, sp.min_p, (unsigned long long)sampler_seed(smp));
    }

    const int strip_first = n_ids == 1 && ids[0] == tok_bos(m.vocab);
    if (gr && (exit_code = cli_constraint_new(gr, &m, strip_first, &tv, &con))) goto out;

    double t0 = mf_time_s();
    const float *logits;
    if ((rc = context_eval(&c, 0, ids, n_ids, &logits, &err))) { exit_code = cli_error(cli_status_exit(rc), "%s", err.msg); goto out; }
    double t_prompt = mf_time_s() - t0;

    cli_gen g = { .n_max = n_predict, .ignore_eog = ignore_eos, .strip_first = strip_first, .con = con };
    double t1 = mf_time_s();
    int n_gen = cli_generate(&c, smp, 0, logits, &g, &err);
    if (n_gen < 0) { exit_code = cli_error(cli_status_exit(n_gen), "%s", err.msg); goto out; }
    double t_gen = mf_time_s() - t1;
    if (con && !constraint_is_complete(con))
        mf_log("warning: the output stopped after %d tokens, before the grammar's text was complete (-n)", n_gen);
    if (verbose)
        mf_log("prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)", n_ids, t_prompt,
               n_ids / (t_prompt > 0 ? t_prompt : 1e-9), n_gen, t_gen, n_gen / (t_gen > 0 ? t_gen : 1e-9));
out:
    constraint_free(con);
    gram_vocab_free(tv);
    gram_free(gr);
    if (smp) sampler_free(smp);
    free(ids);
    context_free(&c);
    model_free(&m);
    return exit_code;
}

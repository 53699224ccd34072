/* cmd_run.c - `minfer run`: generate text from a prompt. Only the generated text
 * goes to stdout; loading progress and timings go to stderr.
 *
 * A model with a chat template of its own gets the prompt as a user message rendered
 * through it (the model's turn opened after it), so an instruction-tuned model answers
 * a question (issue 53: a bare question to SmolLM2-Instruct printed nothing); --raw
 * gives the text to the model as it is. A model without a template is always raw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "jinja.h"
#include "opts.h"
#include "prompt.h"
#include "sampler.h"
#include "tokenizer.h"

/* The prompt as a user message (after the system message, if any) through the model's
 * chat template (or the one given), the model's turn opened. *text is replaced by the
 * rendered prompt and *templated set; a model without a template of its own keeps the
 * text as it is (plain completion). Returns 0 or an exit code. */
static int apply_template(const mf_model *m, char **text, size_t *len, int *add_bos, const char *system,
                          const char *file, const char *name, int verbose, char **templated) {
    prompt_tmpl p;
    int rc = cli_prompt_init(&p, &m->gguf, m->vocab, file, name, "run", 0);
    if (rc) return rc;
    if (!p.jinja && !name) { /* no template of the model's own: the text is a completion prompt */
        if (verbose) mf_log("run: plain completion (%s)", p.label);
        prompt_free(&p);
        return 0;
    }
    jinja_env *e = jinja_env_new();
    jinja_value *msgs = e ? jinja_list_new(e) : NULL, *um = e ? jinja_dict_new(e) : NULL, *sm = e ? jinja_dict_new(e) : NULL;
    char err[512] = "out of memory";
    char *out = NULL;
    size_t n = 0;
    if (msgs && um && sm && (!system || (!jinja_dict_set(e, sm, "role", jinja_string(e, "system")) &&
                                         !jinja_dict_set(e, sm, "content", jinja_string(e, system)) && !jinja_list_push(e, msgs, sm))) &&
        !jinja_dict_set(e, um, "role", jinja_string(e, "user")) && !jinja_dict_set(e, um, "content", jinja_string_n(e, *text, *len)) &&
        !jinja_list_push(e, msgs, um)) {
        prompt_request r = { .messages = msgs, .add_generation_prompt = 1 };
        out = prompt_render(&p, e, &r, &n, err, sizeof err);
    }
    if (!out) {
        rc = cli_error(2, "run: %s (--raw gives the prompt to the model as it is)", err);
    } else {
        if (verbose) mf_log("run: the prompt is a user message of %s (--raw: plain completion)", p.label);
        *add_bos = prompt_add_bos(&p, out, *add_bos);
        free(*text);
        *text = out;
        *len = n;
        *templated = out;
    }
    jinja_env_free(e);
    prompt_free(&p);
    return rc;
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL, *tmpl_file = NULL, *tmpl_name = NULL, *system = NULL;
    int n_predict = 256, special = 0, ignore_eos = 0, verbose = 1, raw = 0;
    mf_context_params cp;
    context_params_default(&cp);
    mf_sampler_params sp;
    sampler_params_default(&sp);
    cli_constraint_opts co = { 0 };
    cli_opt opts[12 + 4 * CLI_OPTS_MAX_GROUP];
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
    opts[n++] = (cli_opt){ "--raw", NULL, CLI_OPT_FLAG, &raw, .set = 1,
                           .help = "plain completion: the prompt as it is, not as a user message of the chat template",
                           .dflt = "the template applies where the model has one" };
    opts[n++] = (cli_opt){ "--system", "TEXT", CLI_OPT_STR, &system, .help = "a system message before the prompt (not with --raw)",
                           .dflt = "none (the template's own default, where it has one)" };
    opts[n++] = (cli_opt){ "--chat-template-file", "FILE", CLI_OPT_STR, &tmpl_file,
                           .help = "a Jinja chat template to use instead of the model's", .dflt = "the model's own" };
    opts[n++] = (cli_opt){ "--chat-template", "NAME", CLI_OPT_STR, &tmpl_name,
                           .help = "a built-in template family (chatml, llama3, ...) instead of the model's", .dflt = "" };
    opts[n++] = (cli_opt){ "--special", NULL, CLI_OPT_FLAG, &special, .set = 1,
                           .help = "recognise special-token text (e.g. <|im_start|>) in a --raw prompt (always, in a templated one)",
                           .dflt = "" };
    opts[n++] = (cli_opt){ "--ignore-eos", NULL, CLI_OPT_FLAG, &ignore_eos, .set = 1,
                           .help = "keep generating past end-of-generation tokens", .dflt = "" };
    n += cli_opts_verbosity(opts + n, &verbose);
    int prc = cli_parse("run", "usage: minfer run -m MODEL [-p PROMPT | -f FILE] [options]", NULL, opts, n, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose;
    if (!model) return cli_error(1, "run: -m MODEL is required (see minfer run --help)");
    if (prompt && file) return cli_error(1, "run: give either -p or -f, not both");
    if (tmpl_file && tmpl_name) return cli_error(1, "run: give --chat-template-file or --chat-template, not both");
    if (raw && (tmpl_file || tmpl_name || system))
        return cli_error(1, "run: --raw gives the prompt as it is: no --system, --chat-template or --chat-template-file");
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
    int exit_code = 0, add_bos = tok_add_bos(m.vocab);
    mf_sampler *smp = NULL;
    gram_vocab *tv = NULL;
    mf_constraint *con = NULL;
    if (!raw && text_len > 0) {
        char *templated = NULL;
        if ((exit_code = apply_template(&m, &text, &text_len, &add_bos, system, tmpl_file, tmpl_name, verbose, &templated))) {
            free(text);
            goto out;
        }
        if (templated) special = 1; /* the template writes the special tokens' text */
    }
    int n_ids = tok_encode(m.vocab, text, text_len, add_bos, special, &ids, &err);
    free(text);
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

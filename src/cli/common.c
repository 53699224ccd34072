/* common.c - see common.h. */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "quant.h"
#include "tokenizer.h"

int cli_load(const char *path, const mf_context_params *cp_in, mf_model *m, mf_context *c, int verbose) {
    mf_err err = { { 0 } };
    /* The device and thread checks before the (maybe long) load; run and chat have
     * made them already, right after parsing, and then this finds nothing to say. */
    mf_context_params cpl = *cp_in;
    const mf_context_params *cp = &cpl;
    if (cli_context_check(&cpl)) return 1;
    double t0 = mf_time_s();
    int rc = model_load(m, path, &err);
    if (rc) return cli_load_error(cli_status_exit(rc), path, err.msg);
    char desc[512];
    model_describe(m, desc, sizeof desc);
    if (verbose) mf_log("loaded %s in %.2f s: %s", path, mf_time_s() - t0, desc);
    if (verbose && m->unused_tensors)
        mf_log("warning: %d tensor(s) of the file are not used by architecture '%s': %s", m->n_unused_tensors,
               m->hp.arch_name, m->unused_tensors);
    /* Like llama.cpp ("n_ctx_seq > n_ctx_train -- possible training context overflow"),
     * a warning, not an error: the model runs, but its output past the trained length
     * is untested, and scripts written for llama.cpp pass such sizes. */
    if (cp->n_ctx > 0 && m->hp.n_ctx_train > 0 && cp->n_ctx > m->hp.n_ctx_train)
        mf_log("warning: --ctx %d is more than the %d tokens this model was trained on; past %d tokens its output "
               "may degrade", cp->n_ctx, m->hp.n_ctx_train, m->hp.n_ctx_train);
    double t1 = mf_time_s();
    rc = context_init(c, m, cp, &err);
    if (rc) {
        model_free(m);
        return cli_error(cli_status_exit(rc), "%s", err.msg);
    }
    if (verbose)
        mf_log("device %s, context %d tokens, batch %d, KV cache %s/%s, ready in %.2f s", c->be->name, c->n_ctx,
               c->n_batch, qtype_name((uint32_t)c->be->kv_type_k), qtype_name((uint32_t)c->be->kv_type_v),
               mf_time_s() - t1);
    if (c->tp > 1) {
        char plan[256];
        tp_describe(&c->plan, plan, sizeof plan);
        mf_log("tensor parallel over %d %s backends: %s", c->tp, c->be->name, plan);
    }
    return 0;
}

/* the text of token id (a control token's own text), NUL-terminated into buf; "" when none */
static const char *token_text(const mf_vocab *v, int32_t id, char *buf, size_t cap) {
    buf[0] = 0;
    size_t n = 0;
    const char *t = id >= 0 ? tok_text(v, id, &n) : NULL;
    if (t && n < cap && !memchr(t, 0, n)) {
        memcpy(buf, t, n);
        buf[n] = 0;
    }
    return buf;
}

int cli_prompt_init(prompt_tmpl *p, const gguf_file *g, const mf_vocab *v, const char *file, const char *name,
                    const char *cmd, int verbose) {
    gguf_str src = { 0 }, arch = { 0 };
    mf_err e;
    int have = gguf_get_str(g, "tokenizer.chat_template", &src, &e) == 0;
    char arch_name[64] = "";
    if (gguf_get_str(g, "general.architecture", &arch, &e) == 0 && arch.len < sizeof arch_name) {
        memcpy(arch_name, arch.ptr, arch.len);
        arch_name[arch.len] = 0;
    }
    char bos[64], eos[64];
    prompt_source s = { .src = have ? src.ptr : NULL, .len = have ? src.len : 0, .arch = arch_name,
                        .bos_text = token_text(v, tok_bos(v), bos, sizeof bos),
                        .eos_text = token_text(v, tok_eos(v), eos, sizeof eos), .file = file, .name = name };
    if (!s.bos_text[0]) s.bos_text = NULL;
    if (!s.eos_text[0]) s.eos_text = NULL;
    char err[512];
    int rc = prompt_init(p, &s, err, sizeof err);
    if (rc) return cli_error(rc, "%s: %s", cmd, err);
    char traits[160];
    if (verbose || (!p->jinja && have && !name)) /* a template of the model's own that minfer cannot use: always said */
        mf_log("%s%s: chat template: %s%s", !p->jinja && have && !name ? "warning: " : "", cmd, p->label,
               prompt_traits(p, traits, sizeof traits));
    return 0;
}

char *cli_read_file(const char *path, size_t *len) {
    const int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        cli_error(2, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    const char *name = is_stdin ? "standard input" : path;
    size_t cap = 1 << 16, n = 0;
    char *buf = mf_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) buf = mf_xrealloc(buf, cap *= 2);
    }
    const int bad = ferror(f), e = errno;
    if (!is_stdin) fclose(f);
    if (bad) {
        free(buf);
        cli_error(2, "error reading %s: %s", name, strerror(e));
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static void gen_keep(cli_gen *g, const char *s, int len) {
    if (!g->keep_text) return;
    if (g->len + (size_t)len + 1 > g->cap) g->text = mf_xrealloc(g->text, g->cap = 2 * (g->len + (size_t)len) + 64);
    memcpy(g->text + g->len, s, (size_t)len);
    g->len += (size_t)len;
    g->text[g->len] = 0;
}

/* Writes and flushes each piece as it comes (the reader sees tokens as they are made);
 * 0, or an errno: a full disk, a closed pipe (SIGPIPE ignored), a revoked terminal. */
static int gen_write(const char *s, int len) {
    errno = 0;
    if ((len > 0 && fwrite(s, 1, (size_t)len, stdout) != (size_t)len) || fflush(stdout) != 0 || ferror(stdout))
        return errno ? errno : EIO;
    return 0;
}

int cli_constraint_compile(const cli_constraint_opts *co, gram **g) {
    *g = NULL;
    const char *given[4] = { co->grammar, co->grammar_file, co->json_schema, co->json_schema_file };
    static const char *names[4] = { "--grammar", "--grammar-file", "--json-schema", "--json-schema-file" };
    int which = -1;
    for (int i = 0; i < 4; i++) {
        if (!given[i]) continue;
        if (which >= 0) return cli_error(1, "give one of %s and %s, not both", names[which], names[i]);
        which = i;
    }
    if (which < 0) return 0;
    size_t len;
    char *text;
    if (which == 1 || which == 3) {
        if (!(text = cli_read_file(given[which], &len))) return 2;
    } else {
        text = mf_xstrdup(given[which]);
        len = strlen(text);
    }
    mf_err err = { { 0 } };
    int rc = constraint_compile(g, which < 2 ? CONSTRAINT_GBNF : CONSTRAINT_JSON_SCHEMA, text, len, &err);
    free(text);
    if (rc) return cli_error(2, "%s%s%s", which == 1 || which == 3 ? given[which] : names[which], ": ", err.msg);
    return 0;
}

int cli_constraint_new(const gram *g, const mf_model *m, int strip_first, gram_vocab **tv, mf_constraint **con) {
    mf_err err = { { 0 } };
    *con = NULL;
    if (!*tv && !(*tv = constraint_vocab(m->vocab, &err))) return cli_error(2, "%s", err.msg);
    if (!(*con = constraint_new(g, *tv, strip_first, &err))) return cli_error(2, "%s", err.msg);
    return 0;
}

int cli_generate(mf_context *c, mf_sampler *smp, int seq, const float *logits, cli_gen *g, mf_err *err) {
    const mf_vocab *v = c->m->vocab;
    tok_stream ts;
    tok_stream_init(&ts);
    ts.first = g->strip_first;
    char out[1024];
    int n = 0, rc = MF_OK, werr = 0;
    gen_keep(g, "", 0);
    while (n < g->n_max) {
        if (g->stop && *g->stop) { g->stopped = 1; break; }
        if (g->decode_last && c->kv.seqs[seq].n >= c->n_ctx) { g->ctx_full = 1; break; }
        int32_t tok = -1;
        /* greedy: the model's best token, when the grammar allows it, is the best allowed one */
        if (g->con && sampler_greedy(smp) && !constraint_allows(g->con, tok = sampler_sample(smp, logits))) tok = -1;
        if (g->con && tok < 0) { /* the grammar's tokens only (every other logit -inf) */
            int n_allowed;
            const float *row = constraint_apply(g->con, logits, &n_allowed);
            if (n_allowed == 0) {
                rc = mf_fail(err, MF_ERR_INPUT, "grammar: no token of the model's vocabulary can continue the text "
                             "here%s", constraint_overflowed(g->con) ? " (a limit of the grammar engine was hit)" : "");
                break;
            }
            tok = sampler_sample(smp, row);
        } else if (!g->con) {
            tok = sampler_sample(smp, logits);
        }
        sampler_accept(smp, tok);
        if (g->con && (rc = constraint_accept(g->con, tok, err))) break;
        /* under a grammar an end-of-generation token comes only where its text is complete */
        if ((!g->ignore_eog || g->con) && tok_is_eog(v, tok)) break;
        n++;
        int len = tok_stream_push(&ts, v, tok, out, sizeof out);
        if ((werr = gen_write(out, len))) break; /* nobody reads the rest: stop generating (issue 56) */
        gen_keep(g, out, len);
        const int done = g->con && constraint_is_done(g->con); /* nothing can follow */
        if ((n == g->n_max || done) && !g->decode_last) break;
        /* on a GPU the next mask is made while the host waits for the forward step */
        const int overlap = g->con && !done && n < g->n_max && strcmp(c->be->name, "cpu") != 0;
        if (overlap) constraint_prefetch(g->con);
        rc = context_decode1(c, seq, tok, &logits, err);
        if (overlap) constraint_prefetch_wait(g->con);
        if (rc) break;
        if (g->toks) g->toks[g->n_toks++] = tok;
        if (done) break;
    }
    if (!werr) {
        int len = tok_stream_flush(&ts, out, sizeof out);
        werr = gen_write(out, len);
        /* the text line ends before any timing line on a shared terminal */
        if (!werr) werr = gen_write("\n", 1);
        if (!werr) gen_keep(g, out, len);
    }
    if (werr && !rc) rc = mf_fail(err, MF_ERR_IO, "writing the generated text to standard output: %s", strerror(werr));
    return rc ? rc : n;
}

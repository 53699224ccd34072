/* minfer.c - the public API (include/minfer.h) over the internal modules. */
#include "minfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "model.h"
#include "tokenizer.h"

struct minfer_model { mf_model m; };
struct minfer_ctx { mf_context c; };

static void copy_err(const mf_err *e, char *err, size_t cap) {
    if (err && cap) snprintf(err, cap, "%s", e->msg);
}

minfer_model *minfer_model_load(const char *path, char *err, size_t err_cap) {
    minfer_model *m = calloc(1, sizeof *m);
    mf_err e = { { 0 } };
    if (!m) { snprintf(err, err_cap, "out of memory"); return NULL; }
    if (model_load(&m->m, path, &e)) { copy_err(&e, err, err_cap); free(m); return NULL; }
    return m;
}

void minfer_model_free(minfer_model *m) {
    if (!m) return;
    model_free(&m->m);
    free(m);
}

int minfer_n_vocab(const minfer_model *m) { return m->m.hp.n_vocab; }
const char *minfer_model_unused_tensors(const minfer_model *m) { return m->m.unused_tensors; }
int32_t minfer_token_bos(const minfer_model *m) { return tok_bos(m->m.vocab); }
int minfer_token_is_eog(const minfer_model *m, int32_t tok) { return tok_is_eog(m->m.vocab, tok); }

int minfer_tokenize(const minfer_model *m, const char *text, size_t len, int add_bos, int parse_special,
                    int32_t *ids, int cap) {
    int32_t *tmp = NULL;
    mf_err e;
    int n = tok_encode(m->m.vocab, text, len, add_bos, parse_special, &tmp, &e);
    if (n < 0) return -1;
    memcpy(ids, tmp, sizeof(int32_t) * (size_t)(n < cap ? n : cap));
    free(tmp);
    return n;
}

int minfer_token_to_piece(const minfer_model *m, int32_t tok, char *buf, size_t cap) {
    return tok_piece(m->m.vocab, tok, 0, buf, cap);
}

int minfer_token_to_text(const minfer_model *m, int32_t tok, char *buf, size_t cap) {
    return tok_piece(m->m.vocab, tok, 1, buf, cap);
}

int32_t minfer_token_eos(const minfer_model *m) { return tok_eos(m->m.vocab); }

const char *minfer_model_meta_str(const minfer_model *m, const char *key, size_t *len) {
    gguf_str s = { 0 };
    mf_err e;
    if (gguf_get_str(&m->m.gguf, key, &s, &e)) return NULL;
    *len = (size_t)s.len;
    return s.ptr;
}

minfer_ctx *minfer_ctx_new(minfer_model *m, const minfer_ctx_params *p, char *err, size_t err_cap) {
    minfer_ctx *c = calloc(1, sizeof *c);
    mf_err e = { { 0 } };
    if (!c) { snprintf(err, err_cap, "out of memory"); return NULL; }
    mf_context_params cp;
    context_params_default(&cp);
    if (p) {
        cp.n_ctx = p->n_ctx;
        cp.n_seq = p->n_seq;
        cp.n_batch = p->n_batch;
        cp.device = p->device;
        cp.n_threads = p->n_threads;
        cp.n_gpus = p->n_gpus;
        cp.tensor_split = p->tensor_split;
    }
    if (context_init(&c->c, &m->m, &cp, &e)) { copy_err(&e, err, err_cap); free(c); return NULL; }
    return c;
}

void minfer_ctx_free(minfer_ctx *c) {
    if (!c) return;
    context_free(&c->c);
    free(c);
}

const float *minfer_eval(minfer_ctx *c, int seq, const int32_t *ids, int n, char *err, size_t err_cap) {
    const float *logits;
    mf_err e = { { 0 } };
    if (context_eval(&c->c, seq, ids, n, &logits, &e)) { copy_err(&e, err, err_cap); return NULL; }
    return logits;
}

const float *minfer_decode(minfer_ctx *c, int seq, int32_t tok, char *err, size_t err_cap) {
    const float *logits;
    mf_err e = { { 0 } };
    if (context_decode1(&c->c, seq, tok, &logits, &e)) { copy_err(&e, err, err_cap); return NULL; }
    return logits;
}

const float *minfer_decode_batch(minfer_ctx *c, const int *seqs, const int32_t *toks, int n, char *err,
                                 size_t err_cap) {
    const float *logits;
    mf_err e = { { 0 } };
    if (!seqs || !toks) {
        if (err && err_cap) snprintf(err, err_cap, "decode: NULL sequence or token array");
        return NULL;
    }
    if (context_decode(&c->c, seqs, toks, n, &logits, &e)) { copy_err(&e, err, err_cap); return NULL; }
    return logits;
}

int minfer_seq_len(const minfer_ctx *c, int seq) {
    return seq >= 0 && seq < c->c.n_seq ? c->c.kv.seqs[seq].n : -1;
}

int minfer_seq_clear(minfer_ctx *c, int seq, char *err, size_t err_cap) {
    mf_err e = { { 0 } };
    if (context_seq_clear(&c->c, seq, &e)) { copy_err(&e, err, err_cap); return -1; }
    return 0;
}

int minfer_ctx_n_seq(const minfer_ctx *c) { return c->c.n_seq; }
int minfer_ctx_n_batch(const minfer_ctx *c) { return c->c.n_batch; }
int minfer_ctx_n_ctx(const minfer_ctx *c) { return c->c.n_ctx; }

void minfer_ctx_last_eval(const minfer_ctx *c, int *reused, int *evaluated) {
    if (reused) *reused = c->c.last_reused;
    if (evaluated) *evaluated = c->c.last_evaluated;
}

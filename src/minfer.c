/* minfer.c - the public API (include/minfer.h) over the internal modules. */
#include "minfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "constraint.h"
#include "context.h"
#include "model.h"
#include "tokenizer.h"

struct minfer_model {
    mf_model m;
    gram_vocab *tv;          /* the vocabulary trie of constraints, made on first use */
    pthread_mutex_t tv_mu;   /* guards making it */
};
struct minfer_ctx { mf_context c; };
struct minfer_grammar {
    gram *g;
    const gram_vocab *tv;
};
struct minfer_constraint { mf_constraint *c; };

static void copy_err(const mf_err *e, char *err, size_t cap) {
    if (err && cap) snprintf(err, cap, "%s", e->msg);
}

minfer_model *minfer_model_load(const char *path, char *err, size_t err_cap) {
    minfer_model *m = calloc(1, sizeof *m);
    mf_err e = { { 0 } };
    if (!m) { snprintf(err, err_cap, "out of memory"); return NULL; }
    if (model_load(&m->m, path, &e)) { copy_err(&e, err, err_cap); free(m); return NULL; }
    pthread_mutex_init(&m->tv_mu, NULL);
    return m;
}

void minfer_model_free(minfer_model *m) {
    if (!m) return;
    gram_vocab_free(m->tv);
    pthread_mutex_destroy(&m->tv_mu);
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
        cp.cache_type_k = p->cache_type_k;
        cp.cache_type_v = p->cache_type_v;
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
int minfer_ctx_on_gpu(const minfer_ctx *c) { return strcmp(c->c.be->name, "cpu") != 0; }

void minfer_ctx_last_eval(const minfer_ctx *c, int *reused, int *evaluated) {
    if (reused) *reused = c->c.last_reused;
    if (evaluated) *evaluated = c->c.last_evaluated;
}

/* ---------------------------------------------------------------- structured output */

minfer_grammar *minfer_grammar_new(minfer_model *m, int kind, const char *text, size_t len, char *err, size_t err_cap) {
    mf_err e = { { 0 } };
    if (kind < MINFER_GRAMMAR_GBNF || kind > MINFER_GRAMMAR_JSON_OBJECT) {
        if (err && err_cap) snprintf(err, err_cap, "grammar: unknown kind %d", kind);
        return NULL;
    }
    if (!text && kind != MINFER_GRAMMAR_JSON_OBJECT) {
        if (err && err_cap) snprintf(err, err_cap, "grammar: no text");
        return NULL;
    }
    minfer_grammar *g = calloc(1, sizeof *g);
    if (!g) { if (err && err_cap) snprintf(err, err_cap, "out of memory"); return NULL; }
    if (constraint_compile(&g->g, (constraint_kind)kind, text, len, &e)) {
        copy_err(&e, err, err_cap);
        free(g);
        return NULL;
    }
    pthread_mutex_lock(&m->tv_mu);
    if (!m->tv) m->tv = constraint_vocab(m->m.vocab, &e);
    g->tv = m->tv;
    pthread_mutex_unlock(&m->tv_mu);
    if (!g->tv) {
        copy_err(&e, err, err_cap);
        minfer_grammar_free(g);
        return NULL;
    }
    return g;
}

void minfer_grammar_free(minfer_grammar *g) {
    if (!g) return;
    gram_free(g->g);
    free(g);
}

minfer_constraint *minfer_constraint_new(const minfer_grammar *g, char *err, size_t err_cap) {
    mf_err e = { { 0 } };
    minfer_constraint *k = calloc(1, sizeof *k);
    if (!k) { if (err && err_cap) snprintf(err, err_cap, "out of memory"); return NULL; }
    if (!(k->c = constraint_new(g->g, g->tv, 0, &e))) {
        copy_err(&e, err, err_cap);
        free(k);
        return NULL;
    }
    return k;
}

void minfer_constraint_free(minfer_constraint *k) {
    if (!k) return;
    constraint_free(k->c);
    free(k);
}

const float *minfer_constraint_apply(minfer_constraint *k, const float *logits, int *n_allowed) {
    return constraint_apply(k->c, logits, n_allowed);
}

int minfer_constraint_accept(minfer_constraint *k, int32_t tok, char *err, size_t err_cap) {
    mf_err e = { { 0 } };
    if (constraint_accept(k->c, tok, &e)) { copy_err(&e, err, err_cap); return -1; }
    return 0;
}

void minfer_constraint_prefetch(minfer_constraint *k) { constraint_prefetch(k->c); }
void minfer_constraint_prefetch_wait(minfer_constraint *k) { constraint_prefetch_wait(k->c); }
int minfer_constraint_allows(minfer_constraint *k, int32_t tok) { return constraint_allows(k->c, tok); }
int minfer_constraint_complete(const minfer_constraint *k) { return constraint_is_complete(k->c); }
int minfer_constraint_done(const minfer_constraint *k) { return constraint_is_done(k->c); }

/* context.h - an inference context: a model bound to a backend, its activation
 * scratch, and the KV cache with per-sequence bookkeeping. This is what the CLI,
 * the public API and the server drive. */
#ifndef MINFER_CONTEXT_H
#define MINFER_CONTEXT_H

#include "backend.h"
#include "forward.h"
#include "kv.h"
#include "model.h"

typedef struct mf_context_params {
    int n_ctx;          /* positions per sequence (0 = min(model's, 4096)) */
    int n_seq;          /* sequence slots (1 for the CLI) */
    int n_batch;        /* max tokens per forward step (0 = 512) */
    const char *device; /* "cpu", "cuda" (device 0), "cuda:N" or NULL/"auto" (cuda when available) */
    int n_threads;      /* CPU threads (0 = all cores) */
} mf_context_params;

typedef struct mf_context {
    mf_model *m;
    mf_backend *be;
    mf_forward fw;
    mf_kv kv;
    int n_ctx, n_seq, n_batch;
    float *logits;       /* [n_vocab] host: the last token's logits of the last step */
    int32_t *pos, *seq;  /* [n_batch] batch positions / sequence ids (scratch) */
    int last_reused;     /* tokens the last context_eval took from the cache */
    int last_evaluated;  /* tokens the last context_eval ran through the model */
} mf_context;

void context_params_default(mf_context_params *p);
int context_init(mf_context *c, mf_model *m, const mf_context_params *p, mf_err *err);
void context_free(mf_context *c);

/* Brings sequence `seq` to hold exactly toks[0..n) and returns the logits of the
 * last token (host, [n_vocab], valid until the next call). Reuses the cached
 * prefix; evaluates the rest in chunks of n_batch. n >= 1. */
int context_eval(mf_context *c, int seq, const int32_t *toks, int n, const float **logits, mf_err *err);
/* Appends one token to seq and returns its logits (decode step). */
int context_decode1(mf_context *c, int seq, int32_t tok, const float **logits, mf_err *err);

#endif

/* forward.h - backend-neutral transformer step over a batch. */
#ifndef MINFER_FORWARD_H
#define MINFER_FORWARD_H

#include "backend.h"
#include "model.h"

/* Rows of logits one output pass computes (forward_generic loops for more). */
#define FORWARD_LOGIT_ROWS 64

/* Activation scratch for batches of up to n_batch tokens, in backend memory. */
typedef struct mf_forward {
    mf_backend *be;
    const mf_model *m;
    int n_batch;    /* max tokens per batch */
    int n_ctx;      /* positions per sequence in the backend's KV cache */
    int n_seq;      /* sequence slots */
    float *x;       /* [n_batch][dim] residual stream */
    float *xb;      /* [n_batch][dim] normed input / attention output projection */
    float *q;       /* [n_batch][n_head*hd] */
    float *k, *v;   /* [n_batch][n_head_kv*hd] */
    float *att;     /* [n_batch][n_head*hd] attention output */
    float *hb;      /* [n_batch][n_ff] gate, then silu(gate)*up */
    float *hb2;     /* [n_batch][n_ff] up */
    float *xo;      /* [n_logit][dim] final-normed rows that want logits */
    /* a mixture of experts (desc.n_expert > 1): the router's scores [n_batch][n_expert], the
     * rows of each expert's tokens gathered [n_batch*k][dim], their hidden states
     * [n_batch*k][ff] x2 and outputs [n_batch*k][dim] (backend memory); the routing on the
     * host: scores, each token's experts (ids) and weights, and each (token, slot)'s row */
    float *moe_scores, *moe_x, *moe_h, *moe_h2, *moe_y;
    float *moe_host;
    int32_t *moe_ids, *moe_rows, *moe_tok;
    float *moe_w;
    float *logits;  /* [n_logit][n_vocab] backend memory */
    int n_logit;    /* rows of logits computed at a time: min(n_batch, FORWARD_LOGIT_ROWS) */
    /* Tensor parallelism (tp.h): x [n] (backend memory) = the sum of every rank's x, in
     * place, after each block's column-split projection (attn_output, ffn_down) and before
     * its post-norm and residual add; NULL on one backend. Set by the caller after
     * forward_init. */
    void (*reduce)(struct mf_forward *fw, float *x, int64_t n);
    void *reduce_ctx;
} mf_forward;

/* A mixture of experts' router on the host: scores [n][E] -> each token's k experts ids and
 * their weights w [n][k] (softmax, top k, renormalised; forward.c says how, as llama.cpp). */
void forward_moe_route(const float *scores, int n, int E, int k, int32_t *ids, float *w);
/* Allocates scratch in backend memory; be->init must have run with the same
 * n_ctx / n_seq / n_batch. */
int forward_init(mf_forward *fw, mf_backend *be, const mf_model *m, int n_ctx, int n_seq, int n_batch, mf_err *err);
void forward_free(mf_forward *fw);
/* Runs one batch; writes logits of the tokens that want them (b->logits, or the
 * last token when NULL), in batch order, to host memory logits[n_out][n_vocab].
 * Returns the number of logit rows or a negative mf_status. */
int forward_step(mf_forward *fw, const mf_batch *b, float *logits, mf_err *err);
/* The layer walk over the backend's blocks (what forward_step runs when be->forward is
 * NULL; a backend's forward may wrap it, e.g. under graph capture). */
int forward_generic(mf_forward *fw, const mf_batch *b, float *logits, mf_err *err);
/* Each block as the backend's primitive ops (be->blocks == NULL gets these; a backend's
 * own blocks may fall back to them). */
extern const mf_blocks forward_composed;
/* NULL when the backend's ops can run every feature the descriptor asks for through the
 * composed blocks, else the name of the first that it cannot. */
const char *forward_desc_missing(const mf_backend *be, const mf_arch_desc *d);
/* Rows of the batch that want logits (b->logits, or the last token when NULL), in
 * order, into idx[b->n]; returns their count. */
int forward_logit_rows(const mf_batch *b, int32_t *idx);

#endif

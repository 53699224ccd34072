/* tp.h - tensor parallelism: one model over N backends (one per GPU), Megatron style.
 *
 * Rank r holds the kv heads kv0[r] .. kv0[r+1]-1 with their query heads (GQA groups stay
 * whole) and the FFN rows ff0[r] .. ff0[r+1]-1:
 *   wq, wk, wv (+ biases), ffn.gate, ffn.up   split by rows (output features): row slices of
 *                                         the file's bytes, no copy
 *   wo, ffn.down                            split by columns (input features): each row's
 *                                         slice of blocks, repacked into a buffer of its own
 *   norms, q/k norms, embedding, output   whole on every rank
 * Each rank's wo and ffn.down produce a partial sum of the full output; the forward adds
 * the ranks' partials (an all-reduce, mf_forward.reduce) before the post-norm and the
 * residual add, so every rank holds the same residual stream and the same logits. The KV
 * cache of a rank holds its kv heads only.
 *
 * A column split must fall on block boundaries of the matrix's type (256 values for the
 * K-quants): the plan refuses, with a message, a split that does not. */
#ifndef MINFER_TP_H
#define MINFER_TP_H

#include "model.h"
#include "util.h"

#define MF_TP_MAX 8

typedef struct mf_tp_plan {
    int n;                  /* ranks, 1..MF_TP_MAX */
    int kv0[MF_TP_MAX + 1]; /* rank r: kv heads kv0[r] .. kv0[r+1]-1; kv0[n] = n_head_kv */
    int ff0[MF_TP_MAX + 1]; /* rank r: FFN rows ff0[r] .. ff0[r+1]-1; ff0[n] = n_ff */
} mf_tp_plan;

/* Splits m over n ranks, in proportion to split[0..n-1] (positive; NULL: evenly): kv
 * heads rounded to whole heads (at least one a rank), FFN rows to ffn.down's block size.
 * MF_ERR_USAGE with a message when n is out of range, exceeds the kv heads, or a
 * boundary falls inside a block of wo or ffn.down. */
int tp_plan(const mf_model *m, int n, const float *split, mf_tp_plan *p, mf_err *err);

/* Rank r's shard: a model whose hparams count its heads and FFN rows and whose layer
 * weights are its slices (tp.h's table); everything else is m's (the same gguf mapping,
 * vocab and whole tensors: m must outlive the shard). */
typedef struct mf_tp_shard {
    mf_model m;
    void **bufs; /* the repacked column slices, owned */
    int n_bufs;
} mf_tp_shard;
int tp_shard(const mf_model *m, const mf_tp_plan *p, int r, mf_tp_shard *s, mf_err *err);
void tp_shard_free(mf_tp_shard *s);

/* "kv heads 0-3 / 4-7, ffn rows 0-7167 / 7168-14335" */
void tp_describe(const mf_tp_plan *p, char *buf, size_t cap);

/* Parses a --tensor-split list "a,b,..." of n positive proportions into split[]. */
int tp_parse_split(const char *arg, int n, float *split, mf_err *err);

/* The step of N ranks in one process: one thread a rank runs forward_step on the rank's
 * forward (its backend, its shard), the ranks' logits identical (the residual stream is
 * the same on every rank), each into its own host buffer. */
struct mf_forward;
struct mf_batch;
typedef struct mf_tp_group mf_tp_group;
/* A group of n ranks whose reduce runs on host memory (the CPU backend's buffers): every
 * rank adds the n partial sums in rank order, so all ranks hold the same bits. Sets
 * fws[r]->reduce. NULL when out of memory. */
mf_tp_group *tp_host_group_new(int n, struct mf_forward **fws);
void tp_group_free(mf_tp_group *g);
/* Runs b on every rank (logits[r]: rank r's host logits); returns rank 0's logit rows, or
 * the first rank's error. */
int tp_step(int n, struct mf_forward **fws, const struct mf_batch *b, float **logits, mf_err *err);

#endif

/* context.h - an inference context: a model bound to a backend, its activation
 * scratch, and the KV cache with per-sequence bookkeeping. This is what the CLI,
 * the public API and the server drive. */
#ifndef MINFER_CONTEXT_H
#define MINFER_CONTEXT_H

#include "backend.h"
#include "forward.h"
#include "kv.h"
#include "model.h"
#include "tp.h"

typedef struct mf_context_params {
    int n_ctx;          /* positions per sequence (0 = min(model's, 4096)) */
    int n_seq;          /* sequence slots (1 for the CLI) */
    int n_batch;        /* max tokens per forward step (0 = 512) */
    const char *device; /* "cpu", "cuda" (device 0), "cuda:N" or NULL/"auto" (cuda when available) */
    int n_threads;      /* CPU threads (0 = all cores) */
    /* the KV cache's element types, K and V (kv.h: "f32", "f16", "q8_0"; NULL = the
     * backend's default: f32 on the CPU, f16 on CUDA); a type the backend cannot hold is
     * MF_ERR_USAGE at context_init */
    const char *cache_type_k, *cache_type_v;
    /* tensor parallelism (tp.h): the model split over n_gpus backends, GPUs cuda:N ..
     * cuda:N+n_gpus-1 (N from device); with device "cpu", n_gpus CPU backends sharing the
     * threads (the split's reference); 0 or 1: one backend */
    int n_gpus;
    const float *tensor_split; /* [n_gpus] proportions; NULL = even */
    const char *tensor_split_arg; /* the CLI's --tensor-split text, parsed by cli_context_check */
    int tp_always;                /* tests: the split path even for one rank (its reduce a no-op all-reduce) */
    float tensor_split_buf[MF_TP_MAX];
} mf_context_params;

/* Rank r >= 1 of a tensor-parallel context (rank 0 is the context's be / fw / logits). */
typedef struct mf_tp_rank {
    mf_tp_shard shard;
    mf_backend *be;
    mf_forward fw;
    float *logits; /* [n_logit][n_vocab] host: the rank's copy (the same values as rank 0's) */
} mf_tp_rank;

typedef struct mf_context {
    mf_model *m;
    mf_backend *be;
    mf_forward fw;
    /* tensor parallelism: tp ranks (1: none); rank 0's shard, ranks 1.. */
    int tp;
    mf_tp_plan plan;
    mf_tp_shard shard0;
    mf_tp_rank *ranks;            /* [tp], [0] unused */
    mf_forward *fws[MF_TP_MAX];   /* every rank's forward, for tp_step */
    float *tp_logits[MF_TP_MAX];  /* every rank's logits */
    struct mf_tp_group *group;    /* the host reduce (CPU ranks), else NULL */
    void *nccl;                   /* the CUDA ranks' NCCL group (cuda_tp_free), else NULL */
    mf_kv kv;
    mf_kv_types kv_types; /* as asked (MF_KV_DEFAULT: the backend's own) */
    int n_ctx, n_seq, n_batch;
    /* [n_logit][n_vocab] host (be->host_alloc: the CUDA decode graph writes there):
     * row i = logits of pair i of the last context_decode, row 0 of the last eval */
    float *logits;
    int n_logit;         /* rows of logits: min(n_seq, n_batch), the most one decode step can
                            ask for (one token a sequence); 1 for the CLI's one sequence */
    int32_t *pos, *seq;  /* [n_batch] batch positions / sequence ids (scratch) */
    int8_t *want;        /* [n_batch] logits flags of a decode step (scratch, all 1) */
    int last_reused;     /* tokens the last context_eval took from the cache */
    int last_evaluated;  /* tokens the last context_eval ran through the model */
} mf_context;

void context_params_default(mf_context_params *p);
/* Parses a device name (NULL/"auto", "cpu", "cuda", "cuda:N") and checks that this
 * build and machine can have it, without loading anything: MF_ERR_USAGE with a
 * message when not. *use_cuda and *gpu say what context_init will create. */
int context_device_check(const char *device, int *use_cuda, int *gpu, mf_err *err);
/* The same for a split over n_gpus > 1 backends: GPUs cuda:N .. cuda:N+n_gpus-1 present,
 * or device "cpu" asking for CPU ranks on purpose (auto on a machine without a GPU would
 * turn them into CPU backends nobody asked for). MF_ERR_USAGE with a message when not. */
int context_gpus_check(const char *device, int n_gpus, mf_err *err);
int context_init(mf_context *c, mf_model *m, const mf_context_params *p, mf_err *err);
void context_free(mf_context *c);

/* Brings sequence `seq` to hold exactly toks[0..n) and returns the logits of the
 * last token (host, [n_vocab], valid until the next call). Reuses the cached
 * prefix; evaluates the rest in chunks of n_batch. n >= 1. */
int context_eval(mf_context *c, int seq, const int32_t *toks, int n, const float **logits, mf_err *err);
/* Appends one token to seq and returns its logits (decode step): context_decode of
 * one pair. */
int context_decode1(mf_context *c, int seq, int32_t tok, const float **logits, mf_err *err);
/* One decode step over several sequences: toks[i] is appended to sequence seqs[i]
 * at that sequence's cached length, i < n, all in one forward step; *logits =
 * [n][n_vocab] host rows, row i for pair i (valid until the next call). Errors
 * (nothing evaluated, no sequence changed): n < 1 or n > n_batch, a sequence out
 * of range or named twice, a sequence whose context is full, a token out of range. */
int context_decode(mf_context *c, const int *seqs, const int32_t *toks, int n, const float **logits, mf_err *err);
/* Forgets every cached token of seq (its next token goes to position 0). */
int context_seq_clear(mf_context *c, int seq, mf_err *err);

#endif

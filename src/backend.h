/* backend.h - the interface a compute backend (CPU, CUDA) implements.
 *
 * forward.c walks the layers and calls a backend's *block ops* (embedding, attention
 * block, FFN block, logits: mf_blocks) over the model's architecture descriptor
 * (model.h mf_arch_desc). A backend without blocks of its own gets forward.c's
 * composed blocks, which run each block as the backend's *primitive ops* (mf_ops)
 * over backend buffers (host pointers for the CPU, device pointers for CUDA): that
 * is the CPU backend, and the reference. The CUDA backend writes each block's fused
 * launch sequence out plainly (src/cuda/blocks.cu) and may replace the whole step
 * (it captures decode steps as graphs by running forward_generic under stream
 * capture). No backend recognises fusions in a stream of ops. Activations are f32,
 * row-major [n_tokens][width]. The KV cache is owned by the backend: its element
 * types are the caller's choice (init's kvt: f32, f16 or q8_0), by default the backend's
 * (f32 on the CPU reference, f16 on CUDA).
 *
 * A batch holds tokens of one or more sequences; each token carries its position
 * and sequence slot. Attention for token t reads the cache of seq[t] at positions
 * 0..pos[t], after this batch's K/V have been stored, so a batch may hold a whole
 * prompt (causal inside the batch) or one token from each of several sequences. */
#ifndef MINFER_BACKEND_H
#define MINFER_BACKEND_H

#include <stdint.h>

#include "kv.h"
#include "model.h"
#include "util.h"

typedef struct mf_batch {
    int n;                 /* tokens in the batch */
    const int32_t *tok;    /* [n] token ids */
    const int32_t *pos;    /* [n] positions */
    const int32_t *seq;    /* [n] sequence slots, 0..n_seq-1 */
    const int8_t *logits;  /* [n] 1 = produce logits for this token; NULL = last token only */
} mf_batch;

typedef struct mf_backend mf_backend;
struct mf_forward;

/* Ops. Buffers are backend memory. `n` = tokens. All ops are enqueued in order;
 * only download() synchronises with the host. */
typedef struct mf_ops {
    /* out[n][dim] = rows tok[i] of the embedding table (any supported type). */
    void (*embed)(mf_backend *be, float *out, const mf_weight *w, const mf_batch *b);
    /* out[i] = x[i] / rms(x[i]) * w, rows of width dim. out may equal x. */
    void (*rmsnorm)(mf_backend *be, float *out, const float *x, const mf_weight *w, int n, int dim, float eps);
    /* out[n][w.rows] = x[n][w.cols] . W^T (+ bias if bias && bias->host). */
    void (*matmul)(mf_backend *be, float *out, const float *x, const mf_weight *w, const mf_weight *bias, int n);
    /* In-place RoPE r (its dims, mode, base and scaling: rope.h) on x[n][n_heads*head_dim]
     * at the batch positions. */
    void (*rope)(mf_backend *be, float *x, const mf_batch *b, int n_heads, int head_dim, const mf_rope *r);
    /* Stores k,v [n][n_head_kv*hd] into the cache of `layer` at (seq, pos), then
     * out[n][n_head*hd] = causal softmax(q k^T / sqrt(hd)) v with GQA. On a sliding layer
     * (model_layer_window(&m->desc, layer) = W > 0) token t reads positions
     * pos[t]-W+1 .. pos[t] only (llama.cpp's LLAMA_SWA_TYPE_STANDARD mask). */
    void (*attention)(mf_backend *be, float *out, const float *q, const float *k, const float *v,
                      int layer, const mf_batch *b);
    /* out[i] = silu(gate[i]) * up[i], i < n. out may equal gate. */
    void (*swiglu)(mf_backend *be, float *out, const float *gate, const float *up, int64_t n);
    /* x[i] += y[i], i < n. */
    void (*add)(mf_backend *be, float *x, const float *y, int64_t n);
    /* dst[j][:] = src[idx[j]][:] for j < n_idx (rows of width w); idx is host memory. */
    void (*get_rows)(mf_backend *be, float *dst, const float *src, const int32_t *idx, int n_idx, int width);
    /* The ops below serve descriptor features (model.h mf_arch_desc); a backend without
     * one (NULL) cannot run a model that needs it (forward_init says which). */
    /* out[i] = gelu_tanh(gate[i]) * up[i], i < n (GeGLU, gemma); out may equal gate.
     * gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). */
    void (*geglu)(mf_backend *be, float *out, const float *gate, const float *up, int64_t n);
    /* x[i] *= s, i < n (embedding scale, q scale). */
    void (*scale)(mf_backend *be, float *x, float s, int64_t n);
    /* x[i] = c * tanh(x[i] / c), i < n (logit soft-capping). */
    void (*softcap)(mf_backend *be, float *x, float c, int64_t n);
    /* Mixture of experts: out[t][:] = sum over j < k, in order, of w[t*k+j] * ys[rows[t*k+j]][:]
     * (each token's chosen experts' outputs, weighted; rows and w in host memory), t < n,
     * rows of width dim. */
    void (*moe_combine)(mf_backend *be, float *out, const float *ys, const int32_t *rows, const float *w, int n, int k,
                        int dim);
} mf_ops;

/* Blocks: whole pieces of the step over the forward's buffers (forward.h), for the
 * batch b. Each reads and writes fw->x, the residual stream [n][dim]. */
typedef struct mf_blocks {
    /* fw->x = the embedding rows of b's tokens (times the descriptor's embd_scale) */
    void (*embed)(mf_backend *be, struct mf_forward *fw, const mf_batch *b);
    /* fw->x += attention(norm(fw->x)) of layer l: q/k/v (+ biases), RoPE, the KV cache
     * store and the causal attention of each token over its sequence, the output
     * projection */
    void (*attn)(mf_backend *be, struct mf_forward *fw, int l, const mf_batch *b);
    /* fw->x += ffn(norm(fw->x)) of layer l: gate/up, the gated activation, down */
    void (*ffn)(mf_backend *be, struct mf_forward *fw, int l, const mf_batch *b);
    /* The logits of the rows of b that want them, in batch order, to host memory
     * logits[n_out][n_vocab]; returns n_out. */
    int (*logits)(mf_backend *be, struct mf_forward *fw, const mf_batch *b, float *logits);
} mf_blocks;

struct mf_backend {
    const char *name;          /* "cpu", "cuda" */
    const mf_ops *ops;
    const mf_blocks *blocks;   /* NULL: forward.c's composed blocks over ops */
    void *impl;                /* backend private state */
    int kv_type_k, kv_type_v;  /* set by init: the KV cache's element types (QTYPE_F32, _F16, _Q8_0) */

    /* Upload weights, allocate KV cache for n_seq slots of n_ctx positions, its K and V
     * element types kvt (kv.h; NULL = the backend's defaults), and scratch for batches of
     * up to n_batch tokens. A cache type the backend cannot hold: MF_ERR_USAGE, naming it. */
    int (*init)(mf_backend *be, mf_model *m, int n_ctx, int n_seq, int n_batch, const mf_kv_types *kvt, mf_err *err);
    void (*destroy)(mf_backend *be);
    void *(*alloc)(mf_backend *be, size_t nbytes);   /* NULL on failure */
    void (*release)(mf_backend *be, void *p);
    /* Device -> host copy; waits for all queued work. */
    void (*download)(mf_backend *be, void *dst_host, const void *src, size_t nbytes);
    /* Optional: run the whole step (NULL = forward_generic over ops). A backend
     * may wrap forward_generic, e.g. under CUDA graph capture. */
    int (*forward)(mf_backend *be, struct mf_forward *fw, const mf_batch *b, float *logits, mf_err *err);
    /* Drops cached positions >= from_pos of a sequence (no-op for storage; the
     * bookkeeping is in kv.c, attention only reads positions <= pos). */
    void (*kv_truncate)(mf_backend *be, int seq, int from_pos);
    /* Optional (NULL = malloc/free): host memory that download() reaches without a
     * staging copy (CUDA: pinned); the context's logits live there. NULL on failure;
     * host_free before destroy. */
    void *(*host_alloc)(mf_backend *be, size_t nbytes);
    void (*host_free)(mf_backend *be, void *p);
};

/* Backend constructors. cuda_backend_new returns NULL (with err) when no GPU or
 * when built with CUDA=0. */
mf_backend *cpu_backend_new(int n_threads, mf_err *err);
mf_backend *cuda_backend_new(int device, mf_err *err);
int cuda_device_count(void);  /* devices the CUDA runtime sees; 0 without CUDA or a GPU */
/* Prints the plan (src/cuda/plan.h) of an initialised CUDA backend to file (a FILE *), as
 * `minfer info --plan cuda` shows it; MF_ERR_DEVICE without CUDA. */
int cuda_plan_print(mf_backend *be, void *file, mf_err *err);
/* Tensor parallelism (tp.h) over the CUDA backends bes[0..n), one GPU each, initialised:
 * NCCL loaded at run time (src/cuda/nccl.h), one communicator a rank, and fws[r]->reduce
 * an all-reduce on rank r's stream. NULL with err (no NCCL, no CUDA). */
struct mf_forward;
void *cuda_tp_new(mf_backend **bes, struct mf_forward **fws, int n, mf_err *err);
void cuda_tp_free(void *group);

#endif

/* model.h - per-architecture hyperparameters and tensor binding.
 *
 * A model is a validated gguf_file plus typed views of its tensors. Weights stay in
 * the mmap'd file; a backend may keep its own copy (mf_weight.dev). */
#ifndef MINFER_MODEL_H
#define MINFER_MODEL_H

#include <stdint.h>

#include "gguf.h"
#include "rope.h"
#include "util.h"

typedef enum mf_arch {
    MF_ARCH_LLAMA = 0,  /* llama, mistral: RoPE on adjacent pairs */
    MF_ARCH_QWEN2,      /* neox RoPE, q/k/v biases */
    MF_ARCH_GEMMA3,     /* neox RoPE, GeGLU, q/k norms, pre- and post-norms, embedding scale,
                           sliding-window layers with their own RoPE base */
    MF_ARCH_QWEN3,      /* neox RoPE, q/k norms, no biases, head dim from attention.key_length */
} mf_arch;

/* The per-architecture descriptor: how a layer is put together, beyond the sizes in
 * mf_hparams (RoPE mode, base and dims are there, as the GGUF keys are). model.c fills
 * it from the architecture; forward.c's composed blocks and each backend's own blocks
 * read it, so a new architecture is a descriptor (and perhaps a new primitive), never
 * a new pattern to recognise. Every field's zero value is the llama behaviour, so a
 * zero-initialised descriptor is llama. */
typedef enum mf_act {
    MF_ACT_SILU = 0,   /* SwiGLU: silu(gate) * up */
    MF_ACT_GELU,       /* GeGLU: gelu_tanh(gate) * up (gemma) */
} mf_act;

typedef struct mf_arch_desc {
    int qkv_bias;        /* q/k/v projections have biases (qwen2) */
    int qk_norm;         /* RMSNorm over each head of q and k before RoPE (gemma3, qwen3) */
    int post_norm;       /* RMSNorm on each block's output before the residual add (gemma3) */
    mf_act act;          /* the FFN's gated activation */
    int sliding_window;  /* keys older than this many positions masked on sliding layers; 0: none */
    int swa_every;       /* with a window: every swa_every-th layer (l % swa_every == swa_every - 1) is
                            global, the others slide; 0: every layer slides (mistral) */
    float rope_base_swa; /* RoPE base of the sliding layers; 0: hp.rope_base */
    float embd_scale;    /* x = embedding * embd_scale (gemma: sqrt(n_embd)); 0: none */
    float logit_softcap; /* logits = c * tanh(logits / c); 0: none */
    float q_scale;       /* q *= q_scale before attention, whose own scale is 1/sqrt(head_dim): the
                            attention scale of a model that is not 1/sqrt(head_dim) (gemma3 27B);
                            0: none */
    int n_expert;        /* FFNs of this many experts (mf_ffn); 0 or 1: dense */
    int n_expert_used;   /* experts chosen a token */
} mf_arch_desc;

/* A weight tensor: ne0 = cols (input features, fastest), ne1 = rows (outputs).
 * 1-D tensors (norms, biases) have rows = 1. */
typedef struct mf_weight {
    uint32_t type;       /* qtype id */
    int64_t cols, rows;
    const void *host;    /* bytes in the mapping; NULL when the tensor is absent */
    uint64_t nbytes;
    void *dev;           /* backend-owned copy (CUDA device pointer), NULL on the CPU */
    void *dev_plane;     /* backend-owned derived form (CUDA: the q6_K MMQ plane, mmq.cu), else NULL */
    void *dev_mmf;       /* backend-owned (CUDA: the q4_K f16-fragment plane, mmf.cu), else NULL */
    const char *name;    /* tensor name, for messages */
    int64_t n_slices;    /* a 3-D tensor of experts: n_slices matrices of [rows][cols] one after
                            another, slice_bytes apart (host + e * slice_bytes); 1 for a matrix */
    uint64_t slice_bytes;
    uint64_t dev_slice_bytes; /* backend-owned: slice e of dev at dev + e * dev_slice_bytes */
} mf_weight;

/* A layer's FFN: a router over n_expert experts, each a gated FFN (gate, up: [dim] ->
 * [ff]; down: [ff] -> [dim]), n_used of them chosen per token by the router's top scores and
 * their outputs summed with those scores' softmax, renormalised over the chosen (qwen3moe,
 * Mixtral). A dense FFN is one expert of weight 1: n_expert = n_used = 1, no router, and
 * gate/up/down plain matrices (as calm reads them). Experts' matrices are the file's 3-D
 * tensors (ffn_gate_exps, ...): one mf_weight each of n_expert slices. */
typedef struct mf_ffn {
    int n_expert, n_used;
    mf_weight router;        /* [dim] -> [n_expert] (ffn_gate_inp); host NULL for a dense FFN */
    mf_weight gate, up;      /* [dim] -> [ff], n_expert slices */
    mf_weight down;          /* [ff] -> [dim], n_expert slices */
} mf_ffn;

typedef struct mf_layer {
    mf_weight attn_norm;             /* [dim] f32 */
    mf_weight wq, wk, wv;            /* [dim] -> [n_head*hd], [n_head_kv*hd] x2 */
    mf_weight bq, bk, bv;            /* qwen2 biases (host == NULL when absent) */
    mf_weight wo;                    /* [n_head*hd] -> [dim] */
    mf_weight ffn_norm;              /* [dim] f32 */
    mf_ffn ffn;                      /* dense: gate, up [dim] -> [n_ff], down [n_ff] -> [dim] */
    /* gemma3 (host == NULL when absent): */
    mf_weight attn_q_norm, attn_k_norm;      /* [head_dim] f32, RMSNorm of each q / k head */
    mf_weight attn_post_norm, ffn_post_norm; /* [dim] f32, RMSNorm of each block's output */
} mf_layer;

typedef struct mf_hparams {
    mf_arch arch;
    char arch_name[32];
    int n_vocab;
    int n_embd;          /* dim */
    int n_layer;
    int n_ff;
    int n_head;
    int n_head_kv;
    int head_dim;        /* n_embd / n_head unless key_length says otherwise */
    int rope_dim;        /* rotated dims per head (<= head_dim) */
    int n_ctx_train;
    float norm_eps;
    float rope_base;
    mf_rope_mode rope_mode;
} mf_hparams;

typedef struct mf_vocab mf_vocab;

typedef struct mf_model {
    gguf_file gguf;
    mf_hparams hp;
    mf_arch_desc desc;       /* how the layers are put together (above) */
    mf_weight tok_embd;      /* [n_vocab][dim] */
    mf_weight output_norm;   /* [dim] */
    mf_weight output;        /* [n_vocab][dim]; == tok_embd when tied */
    int tied_output;
    mf_layer *layers;        /* [n_layer] */
    mf_vocab *vocab;
    uint64_t weight_bytes;   /* sum of bound tensor sizes */
    /* The RoPE of the global layers and of the sliding ones (gemma3: a base of their own,
     * unscaled), with the file's scaling (rope.h); rope_freqs is the tensor of Llama 3.x's
     * per-frequency factors ([rope_dim/2] f32, host == NULL when absent). */
    mf_rope rope, rope_swa;
    mf_weight rope_freqs;
    /* Tensors of the file that no field above binds ("a, b, c"; NULL: none), as `minfer
     * info` lists them and model_load warns. */
    char *unused_tensors;
    int n_unused_tensors;
} mf_model;

/* Opens path, validates, binds tensors and loads the tokenizer. Errors are
 * MF_ERR_INPUT/MF_ERR_IO with a message naming the problem. */
int model_load(mf_model *m, const char *path, mf_err *err);
void model_free(mf_model *m);
/* The descriptor of an architecture (model_load fills m->desc with it). */
void model_arch_desc(mf_arch arch, mf_arch_desc *d);
/* NULL when every feature d asks for is one forward.c's composed blocks can run
 * (today: all of the descriptor's), else the name of the first that is not. */
const char *model_desc_unsupported(const mf_arch_desc *d);
/* Layer l slides (a window of desc.sliding_window positions) or attends to its whole
 * sequence (0). */
int model_layer_window(const mf_arch_desc *d, int l);
/* The RoPE base of layer l: desc.rope_base_swa on sliding layers where set, else hp.rope_base. */
float model_layer_rope_base(const mf_model *m, int l);
/* The RoPE of layer l (its base and the file's scaling): &m->rope_swa on sliding layers
 * with a base of their own, else &m->rope. */
const mf_rope *model_layer_rope(const mf_model *m, int l);
/* One line describing the model for stderr / `minfer info`. */
void model_describe(const mf_model *m, char *buf, size_t cap);

#endif

/* arch_models.h - tiny hand-made GGUF models of each architecture the descriptor covers
 * (gemma3, qwen2, qwen3, llama with a sliding window), f32 weights, for tests/test_arch.c (CPU
 * against a double reference) and tests/cuda/test_arch_cuda.c (CUDA against the CPU).
 * Norm weights are 1 + noise (as the gemma converter's 1 + w), the rest small noise. */
#ifndef MINFER_TESTS_ARCH_MODELS_H
#define MINFER_TESTS_ARCH_MODELS_H

#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "util.h"

enum { ARCH_NV = 300 };

typedef struct spec {
    const char *arch;
    int n_layer, n_head, n_kv, head_dim;  /* head_dim != dim / n_head for gemma3 (key_length) */
    int window, pattern;                  /* attention.sliding_window, sliding_window_pattern (0: key absent) */
    float base, base_swa;                 /* rope.freq_base, rope.freq_base_swa (0: absent) */
    float softcap;                        /* final_logit_softcapping (0: absent) */
    const char *skip_tensor;
    int dim, ff;                          /* 0: 32 and 48 */
    /* RoPE scaling: rope.scaling.type (NULL: absent), .factor, .original_context_length and
     * .attn_factor (0: absent); rope_freqs.weight [head_dim/2] (NULL: absent) */
    const char *rope_type;
    float rope_factor;
    int rope_orig;
    float rope_attn;
    const float *rope_freqs;
    const char *extra_tensor;             /* a [DIM] tensor no architecture reads (NULL: none) */
    /* experts (mf_ffn): n_expert > 1 writes a router and ffn_*_exps of ff_expert (0: FF) rows;
     * moe_tensor: one more tensor of each layer (blk.L.NAME, [DIM]); gating: expert_gating_func */
    int n_expert, n_expert_used, ff_expert, gating;
    const char *moe_tensor;
} spec;

typedef struct fill_ctx { int n; uint8_t is_norm[1024]; const float *fixed[1024]; } fill_ctx;

static int arch_fill(void *user, int i, void *dst, uint64_t nbytes) {
    const fill_ctx *f = user;
    mf_rng r;
    mf_rng_seed(&r, 1234 + (uint64_t)i);
    float *p = dst;
    if (f->fixed[i]) {
        memcpy(p, f->fixed[i], nbytes);
        return 0;
    }
    for (uint64_t k = 0; k < nbytes / 4; k++) {
        const float v = mf_rng_uniform(&r) - 0.5f;
        p[k] = f->is_norm[i] ? 1.0f + 0.5f * v : 0.5f * v;
    }
    return 0;
}

static int write_model(const char *path, const spec *s) {
    gguf_writer *w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    static fill_ctx fc;
    memset(&fc, 0, sizeof fc);
    char key[128], name[96];
    const char *a = s->arch;
    const int DIM = s->dim ? s->dim : 32, FF = s->ff ? s->ff : 48, NV = ARCH_NV;
    gguf_w_str(w, "general.architecture", a);
#define U32(k, v) do { snprintf(key, sizeof key, "%s." k, a); gguf_w_u32(w, key, (uint32_t)(v)); } while (0)
#define F32(k, v) do { snprintf(key, sizeof key, "%s." k, a); gguf_w_f32(w, key, (v)); } while (0)
    U32("embedding_length", DIM);
    U32("block_count", s->n_layer);
    U32("feed_forward_length", FF);
    U32("attention.head_count", s->n_head);
    U32("attention.head_count_kv", s->n_kv);
    U32("attention.key_length", s->head_dim);
    U32("attention.value_length", s->head_dim);
    U32("context_length", 256);
    F32("attention.layer_norm_rms_epsilon", 1e-6f);
    if (s->base) F32("rope.freq_base", s->base);
    if (s->window) U32("attention.sliding_window", s->window);
    if (s->pattern) U32("attention.sliding_window_pattern", s->pattern);
    if (s->base_swa) F32("rope.freq_base_swa", s->base_swa);
    if (s->softcap) F32("final_logit_softcapping", s->softcap);
    if (s->rope_type) {
        snprintf(key, sizeof key, "%s.rope.scaling.type", a);
        gguf_w_str(w, key, s->rope_type);
    }
    if (s->rope_factor) F32("rope.scaling.factor", s->rope_factor);
    if (s->rope_orig) U32("rope.scaling.original_context_length", s->rope_orig);
    if (s->rope_attn) F32("rope.scaling.attn_factor", s->rope_attn);
    if (s->n_expert) {
        U32("expert_count", s->n_expert);
        U32("expert_used_count", s->n_expert_used);
        if (s->ff_expert) U32("expert_feed_forward_length", s->ff_expert);
        if (s->gating) U32("expert_gating_func", s->gating);
    }
#undef U32
#undef F32
    static char bufs[ARCH_NV][16];
    gguf_str toks[ARCH_NV];
    float scores[ARCH_NV];
    int32_t types[ARCH_NV];
    for (int i = 0; i < NV; i++) {
        if (i < 3) snprintf(bufs[i], 16, "%s", (const char *[]){ "<unk>", "<s>", "</s>" }[i]);
        else if (i < 259) snprintf(bufs[i], 16, "<0x%02X>", i - 3);
        else snprintf(bufs[i], 16, "\xe2\x96\x81w%d", i);
        toks[i] = (gguf_str){ bufs[i], strlen(bufs[i]) };
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr(w, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, toks, NV);
    gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_F32, scores, NV);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, types, NV);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    const int gemma = !strcmp(a, "gemma3"), qwen = !strcmp(a, "qwen2"), qwen3 = !strcmp(a, "qwen3") || !strcmp(a, "qwen3moe");
    const int qd = s->n_head * s->head_dim, kvd = s->n_kv * s->head_dim;
#define TENSOR3(nm, c, r, e) do { \
            uint64_t ne[3] = { (c), (r), (e) }; \
            fc.is_norm[fc.n++] = 0; \
            gguf_w_tensor(w, nm, QTYPE_F32, 3, ne); } while (0)
#define TENSOR(nm, c, r, norm) do { \
        if (!s->skip_tensor || strcmp(s->skip_tensor, nm)) { \
            uint64_t ne[2] = { (c), (r) }; \
            fc.is_norm[fc.n++] = (norm); \
            gguf_w_tensor(w, nm, QTYPE_F32, (r) == 1 ? 1 : 2, ne); } } while (0)
    TENSOR("token_embd.weight", DIM, NV, 0);
    TENSOR("output_norm.weight", DIM, 1, 1);
    if (s->rope_freqs) {
        fc.fixed[fc.n] = s->rope_freqs;
        TENSOR("rope_freqs.weight", s->head_dim / 2, 1, 0);
    }
    if (s->extra_tensor) TENSOR(s->extra_tensor, DIM, 1, 0);
    for (int l = 0; l < s->n_layer; l++) {
#define T(sfx, c, r, norm) do { snprintf(name, sizeof name, "blk.%d." sfx, l); TENSOR(name, c, r, norm); } while (0)
        T("attn_norm.weight", DIM, 1, 1);
        T("attn_q.weight", DIM, qd, 0);
        T("attn_k.weight", DIM, kvd, 0);
        T("attn_v.weight", DIM, kvd, 0);
        if (qwen) {
            T("attn_q.bias", qd, 1, 0);
            T("attn_k.bias", kvd, 1, 0);
            T("attn_v.bias", kvd, 1, 0);
        }
        if (gemma || qwen3) {
            T("attn_q_norm.weight", s->head_dim, 1, 1);
            T("attn_k_norm.weight", s->head_dim, 1, 1);
        }
        if (gemma) {
            T("post_attention_norm.weight", DIM, 1, 1);
            T("post_ffw_norm.weight", DIM, 1, 1);
        }
        T("attn_output.weight", qd, DIM, 0);
        T("ffn_norm.weight", DIM, 1, 1);
        if (s->n_expert) {
            const int EF = s->ff_expert ? s->ff_expert : FF;
            T("ffn_gate_inp.weight", DIM, s->n_expert, 0);
            snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
            TENSOR3(name, DIM, EF, s->n_expert);
            snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
            TENSOR3(name, DIM, EF, s->n_expert);
            snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
            TENSOR3(name, EF, DIM, s->n_expert);
            if (s->moe_tensor) {
                snprintf(name, sizeof name, "blk.%d.%s", l, s->moe_tensor);
                TENSOR(name, DIM, 1, 0);
            }
        } else {
            T("ffn_gate.weight", DIM, FF, 0);
            T("ffn_up.weight", DIM, FF, 0);
            T("ffn_down.weight", FF, DIM, 0);
        }
#undef T
    }
#undef TENSOR
    mf_err err;
    int rc = gguf_writer_write(w, path, arch_fill, &fc, &err);
    gguf_writer_free(w);
    return rc;
}


#endif

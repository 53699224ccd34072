/* model.c - per-architecture hyperparameters and tensor binding. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "tokenizer.h"

/* Binds tensor `name` into w, checking its type is supported and its shape is
 * [cols, rows] (rows == 1 for 1-D tensors). optional: absence is not an error. */
/* Tensor `name` into w: a matrix [rows][cols] (n 0; rows 1: a vector, which must be
 * f32/f16/bf16), or a 3-D tensor of n matrices [rows][cols] (ne = [cols, rows, n]) as n
 * slices (a layer's experts). */
static int bind_tensor(mf_model *m, uint8_t *used, mf_weight *w, const char *name, int64_t cols, int64_t rows,
                       int64_t n, int optional, mf_err *err) {
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(&m->gguf, name);
    if (!t) {
        if (optional) return MF_OK;
        return mf_fail(err, MF_ERR_INPUT, "model: missing tensor '%s'", name);
    }
    used[t - m->gguf.tensors] = 1;
    if (n == 0) {
        int64_t t_rows = (int64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        if ((int64_t)t->ne[0] != cols || t_rows != rows || t->ne[2] != 1 || t->ne[3] != 1)
            return mf_fail(err, MF_ERR_INPUT,
                           "model: tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld]", name,
                           (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                           (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (long long)cols,
                           (long long)rows);
    } else if ((int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows || (int64_t)t->ne[2] != n || t->ne[3] != 1) {
        return mf_fail(err, MF_ERR_INPUT, "model: tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%lld, %lld, %lld]",
                       name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                       (unsigned long long)t->ne[3], (long long)cols, (long long)rows, (long long)n);
    }
    const qtype_traits *tr = qtype_get(t->type);
    if (!tr || !tr->supported)
        return mf_fail(err, MF_ERR_INPUT, "model: tensor '%s' has unsupported type %s", name,
                       qtype_name(t->type));
    if (n == 0 && rows == 1 && cols > 1 && t->type != QTYPE_F32 && t->type != QTYPE_F16 && t->type != QTYPE_BF16)
        return mf_fail(err, MF_ERR_INPUT, "model: 1-D tensor '%s' must be f32/f16/bf16, is %s", name,
                       qtype_name(t->type));
    w->type = t->type;
    w->cols = cols;
    w->rows = rows;
    w->host = t->data;
    w->nbytes = t->nbytes;
    w->name = t->cname;
    w->n_slices = n ? n : 1;
    w->slice_bytes = t->nbytes / (uint64_t)w->n_slices;
    return MF_OK;
}

static int bind(mf_model *m, uint8_t *used, mf_weight *w, const char *name, int64_t cols, int64_t rows,
                int optional, mf_err *err) {
    return bind_tensor(m, used, w, name, cols, rows, 0, optional, err);
}

static int get_hp(const gguf_file *f, const char *arch, const char *suffix, int *out, int required, mf_err *err);

/* Layer i's FFN: dense (ffn_gate/up/down) or, where the file has a router (ffn_gate_inp),
 * experts (ffn_{gate,up,down}_exps of expert_count slices of expert_feed_forward_length,
 * else feed_forward_length). Layouts minfer does not implement are errors naming them:
 * shared experts, expert biases, a gating function other than softmax. */
static int bind_ffn(mf_model *m, uint8_t *used, int i, mf_ffn *f, mf_err *err) {
    const mf_hparams *hp = &m->hp;
    const int dim = hp->n_embd;
    char name[96];
    int rc;
    memset(f, 0, sizeof *f);
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", i);
    if (!gguf_find_tensor(&m->gguf, name)) {
        f->n_expert = f->n_used = 1;
#define BINDF(field, suffix, c, r)                                             \
        snprintf(name, sizeof name, "blk.%d." suffix, i);                      \
        if ((rc = bind(m, used, &f->field, name, c, r, 0, err))) return rc;
        BINDF(gate, "ffn_gate.weight", dim, hp->n_ff);
        BINDF(up, "ffn_up.weight", dim, hp->n_ff);
        BINDF(down, "ffn_down.weight", hp->n_ff, dim);
#undef BINDF
        return MF_OK;
    }
    const char *a = hp->arch_name;
    const char *unsupported[][2] = {
        { "ffn_gate_shexp.weight", "shared experts (ffn_*_shexp)" },
        { "exp_probs_b.bias", "expert score biases (exp_probs_b)" },
    };
    for (size_t k = 0; k < MF_ARRAY_LEN(unsupported); k++) {
        snprintf(name, sizeof name, "blk.%d.%s", i, unsupported[k][0]);
        if (gguf_find_tensor(&m->gguf, name))
            return mf_fail(err, MF_ERR_INPUT, "model: %s: %s are not supported", name, unsupported[k][1]);
    }
    int n = 0, n_used = 0, ff = hp->n_ff, gating = 0;
    if ((rc = get_hp(&m->gguf, a, "expert_count", &n, 1, err))) return rc;
    if ((rc = get_hp(&m->gguf, a, "expert_used_count", &n_used, 1, err))) return rc;
    if (n_used > n) return mf_fail(err, MF_ERR_INPUT, "model: %d experts with %d used a token out of range", n, n_used);
    /* llama.cpp: qwen3moe's experts default to n_ff / n_used rows, Mixtral's to n_ff */
    if (!strcmp(a, "qwen3moe") && n_used > 0) ff = hp->n_ff / n_used;
    if ((rc = get_hp(&m->gguf, a, "expert_feed_forward_length", &ff, 0, err))) return rc;
    if ((rc = get_hp(&m->gguf, a, "expert_gating_func", &gating, 0, err))) return rc;
    /* llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE: 1 softmax (the default), 2 sigmoid */
    if (gating && gating != 1)
        return mf_fail(err, MF_ERR_INPUT, "model: %s.expert_gating_func %d: only softmax gating (1) is supported", a, gating);
    if (n > 4096 || n_used > n)
        return mf_fail(err, MF_ERR_INPUT, "model: %d experts with %d used a token out of range", n, n_used);
    f->n_expert = n;
    f->n_used = n_used;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", i);
    if ((rc = bind(m, used, &f->router, name, dim, n, 0, err))) return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", i);
    if ((rc = bind_tensor(m, used, &f->gate, name, dim, ff, n, 0, err))) return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", i);
    if ((rc = bind_tensor(m, used, &f->up, name, dim, ff, n, 0, err))) return rc;
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", i);
    if ((rc = bind_tensor(m, used, &f->down, name, ff, dim, n, 0, err))) return rc;
    if (f->gate.type != f->up.type)
        return mf_fail(err, MF_ERR_INPUT, "model: layer %d's gate and up experts of two types (%s, %s)", i,
                       qtype_name(f->gate.type), qtype_name(f->up.type));
    return MF_OK;
}

/* Reads a required u32 hyperparameter "{arch}.{suffix}" into *out (int). */
static int get_hp(const gguf_file *f, const char *arch, const char *suffix, int *out, int required,
                  mf_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    int rc = gguf_get_u32(f, key, &v, err);
    if (rc < 0) return rc;
    if (rc == 1) {
        if (required) return mf_fail(err, MF_ERR_INPUT, "model: missing metadata key '%s'", key);
        return MF_OK;
    }
    if (v == 0 || v > (1u << 30)) return mf_fail(err, MF_ERR_INPUT, "model: '%s' = %u out of range", key, v);
    *out = (int)v;
    return MF_OK;
}

static int load_hparams(mf_model *m, mf_err *err) {
    const gguf_file *f = &m->gguf;
    mf_hparams *hp = &m->hp;
    gguf_str arch;
    int rc = gguf_get_str(f, "general.architecture", &arch, err);
    if (rc < 0) return rc;
    if (rc == 1) return mf_fail(err, MF_ERR_INPUT, "model: missing general.architecture");
    if (arch.len >= sizeof hp->arch_name) return mf_fail(err, MF_ERR_INPUT, "model: architecture name too long");
    memcpy(hp->arch_name, arch.ptr, arch.len);
    hp->arch_name[arch.len] = 0;
    const char *a = hp->arch_name;
    if (!strcmp(a, "llama") || !strcmp(a, "mistral")) {
        hp->arch = MF_ARCH_LLAMA;
        hp->rope_mode = MF_ROPE_NORM;
    } else if (!strcmp(a, "qwen2")) {
        hp->arch = MF_ARCH_QWEN2;
        hp->rope_mode = MF_ROPE_NEOX;
    } else if (!strcmp(a, "gemma3")) {
        hp->arch = MF_ARCH_GEMMA3;
        hp->rope_mode = MF_ROPE_NEOX;
    } else if (!strcmp(a, "qwen3") || !strcmp(a, "qwen3moe")) {
        /* qwen3moe: qwen3's attention, FFNs of experts (bind_ffn) */
        hp->arch = MF_ARCH_QWEN3;
        hp->rope_mode = MF_ROPE_NEOX;
    } else if (!strcmp(a, "mixtral") || !strcmp(a, "deepseek2") || !strcmp(a, "gpt-oss")) {
        return mf_fail(err, MF_ERR_INPUT, "model: architecture '%s' is not supported (supported: llama and Mixtral's "
                       "llama files, mistral, qwen2, qwen3, qwen3moe, gemma3)", a);
    } else {
        return mf_fail(err, MF_ERR_INPUT, "model: unsupported architecture '%s' (supported: llama, mistral, qwen2, qwen3, "
                       "qwen3moe, gemma3)", a);
    }
    if ((rc = get_hp(f, a, "embedding_length", &hp->n_embd, 1, err))) return rc;
    if ((rc = get_hp(f, a, "block_count", &hp->n_layer, 1, err))) return rc;
    if ((rc = get_hp(f, a, "feed_forward_length", &hp->n_ff, 1, err))) return rc;
    if ((rc = get_hp(f, a, "attention.head_count", &hp->n_head, 1, err))) return rc;
    hp->n_head_kv = hp->n_head;
    if ((rc = get_hp(f, a, "attention.head_count_kv", &hp->n_head_kv, 0, err))) return rc;
    hp->n_ctx_train = 2048;
    if ((rc = get_hp(f, a, "context_length", &hp->n_ctx_train, 0, err))) return rc;
    if (hp->n_head % hp->n_head_kv)
        return mf_fail(err, MF_ERR_INPUT, "model: head_count %d not divisible by head_count_kv %d", hp->n_head, hp->n_head_kv);
    /* the head dim: attention.key_length where the file has it (gemma3, qwen3: independent
     * of n_embd / n_head), else n_embd / n_head */
    hp->head_dim = 0;
    if ((rc = get_hp(f, a, "attention.key_length", &hp->head_dim, 0, err))) return rc;
    if (!hp->head_dim) {
        if (hp->n_embd % hp->n_head)
            return mf_fail(err, MF_ERR_INPUT, "model: embedding_length %d not divisible by head_count %d", hp->n_embd, hp->n_head);
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    /* each factor is <= 2^30 (get_hp), their product must fit the ints the shapes are
     * computed in (2^30 heads of dim 2 overflowed; found by fuzz/fuzz_gguf.c) */
    if ((int64_t)hp->n_head * hp->head_dim > (1 << 30))
        return mf_fail(err, MF_ERR_INPUT, "model: head_count %d x key_length %d out of range", hp->n_head, hp->head_dim);
    hp->rope_dim = hp->head_dim;
    if ((rc = get_hp(f, a, "rope.dimension_count", &hp->rope_dim, 0, err))) return rc;
    if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2 || hp->head_dim % 2)
        return mf_fail(err, MF_ERR_INPUT, "model: rope.dimension_count %d invalid for head dim %d", hp->rope_dim, hp->head_dim);
    char key[128];
    hp->norm_eps = 1e-5f;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
    if ((rc = gguf_get_f32(f, key, &hp->norm_eps, err)) < 0) return rc;
    hp->rope_base = 10000.0f;
    snprintf(key, sizeof key, "%s.rope.freq_base", a);
    if ((rc = gguf_get_f32(f, key, &hp->rope_base, err)) < 0) return rc;
    if (!(hp->norm_eps > 0 && hp->norm_eps < 1)) return mf_fail(err, MF_ERR_INPUT, "model: rms epsilon %g out of range", hp->norm_eps);
    if (!(hp->rope_base > 1)) return mf_fail(err, MF_ERR_INPUT, "model: rope.freq_base %g out of range", hp->rope_base);
    return MF_OK;
}

void model_arch_desc(mf_arch arch, mf_arch_desc *d) {
    memset(d, 0, sizeof *d);
    switch (arch) {
    case MF_ARCH_LLAMA: /* llama, mistral: the zero descriptor (RoPE on adjacent pairs: hp) */
        break;
    case MF_ARCH_QWEN2: /* neox RoPE (hp), biases on q/k/v */
        d->qkv_bias = 1;
        break;
    case MF_ARCH_GEMMA3: /* neox RoPE (hp); the window, its pattern and RoPE base and the
                            embedding scale come from the file (arch_desc_from_file) */
        d->qk_norm = 1;
        d->post_norm = 1;
        d->act = MF_ACT_GELU;
        break;
    case MF_ARCH_QWEN3: /* neox RoPE (hp); q and k RMS-normed per head before RoPE (llama.cpp
                           src/models/qwen3.cpp), no biases */
        d->qk_norm = 1;
        break;
    }
}

/* The descriptor's fields that the GGUF sets, as llama.cpp reads them
 * (src/models/gemma3.cpp, llama-hparams.cpp): {arch}.attention.sliding_window (gemma3 and,
 * where set, mistral/llama), gemma3's sliding_window_pattern (default 6: every 6th layer
 * global), rope.freq_base_swa (default 10000, as llama.cpp's rope_freq_base_train_swa),
 * final_logit_softcapping; gemma3 scales embeddings by sqrt(n_embd) and, for the 27B (62
 * layers), attention by 1/sqrt(n_embd/n_head) instead of 1/sqrt(head_dim). The GGUF's gemma
 * norm weights already hold 1 + w (the converter adds the 1), so they are plain RMSNorms. */
static int arch_desc_from_file(mf_model *m, mf_err *err) {
    const gguf_file *f = &m->gguf;
    const mf_hparams *hp = &m->hp;
    mf_arch_desc *d = &m->desc;
    const char *a = hp->arch_name;
    char key[128];
    int rc;
    if ((rc = get_hp(f, a, "attention.sliding_window", &d->sliding_window, 0, err))) return rc;
    if (hp->arch != MF_ARCH_GEMMA3) return MF_OK; /* mistral: every layer slides (swa_every 0) */
    if (d->sliding_window) {
        d->swa_every = 6;
        if ((rc = get_hp(f, a, "attention.sliding_window_pattern", &d->swa_every, 0, err))) return rc;
        d->rope_base_swa = 10000.0f;
        snprintf(key, sizeof key, "%s.rope.freq_base_swa", a);
        if ((rc = gguf_get_f32(f, key, &d->rope_base_swa, err)) < 0) return rc;
        if (!(d->rope_base_swa > 1)) return mf_fail(err, MF_ERR_INPUT, "model: %s = %g out of range", key, d->rope_base_swa);
    }
    snprintf(key, sizeof key, "%s.final_logit_softcapping", a);
    if ((rc = gguf_get_f32(f, key, &d->logit_softcap, err)) < 0) return rc;
    if (!(d->logit_softcap >= 0 && d->logit_softcap < 1e6f))
        return mf_fail(err, MF_ERR_INPUT, "model: %s = %g out of range", key, d->logit_softcap);
    d->embd_scale = sqrtf((float)hp->n_embd);
    if (hp->n_layer == 62) d->q_scale = sqrtf((float)hp->head_dim) / sqrtf((float)(hp->n_embd / hp->n_head));
    return MF_OK;
}

const char *model_desc_unsupported(const mf_arch_desc *d) {
    if (d->sliding_window < 0 || d->swa_every < 0) return "a negative sliding window";
    return NULL;
}

int model_layer_window(const mf_arch_desc *d, int l) {
    if (d->sliding_window <= 0) return 0;
    if (d->swa_every <= 0) return d->sliding_window;
    return l % d->swa_every < d->swa_every - 1 ? d->sliding_window : 0;
}

float model_layer_rope_base(const mf_model *m, int l) {
    if (m->desc.rope_base_swa > 0 && model_layer_window(&m->desc, l)) return m->desc.rope_base_swa;
    return m->hp.rope_base;
}

const mf_rope *model_layer_rope(const mf_model *m, int l) {
    return m->desc.rope_base_swa > 0 && model_layer_window(&m->desc, l) ? &m->rope_swa : &m->rope;
}

/* The file's RoPE scaling, as llama.cpp's loader and context read it (llama-model.cpp
 * load_hparams, llama-context.cpp): {arch}.rope.scaling.type (none, linear, yarn; absent:
 * linear, which with no factor scales nothing), .rope.scaling.factor (or the older
 * .rope.scale_linear; 0 or absent: 1), .rope.scaling.attn_factor (1),
 * .rope.scaling.original_context_length (the training context); yarn extrapolates
 * (ext_factor 1) with llama.cpp's beta_fast 32 / beta_slow 1, which its loader never
 * reads from a file, so neither does this one. Llama 3.x's per-frequency factors are the
 * tensor rope_freqs.weight ([rope_dim/2] f32), on llama-architecture files as llama.cpp
 * binds it. gemma3's sliding layers rotate with their own base and no scaling factor
 * (llama.cpp's rope_freq_scale_train_swa, 1). Any other type (longrope, su, ...) is an
 * error naming it: running it unscaled would be wrong silently. */
static int load_rope(mf_model *m, uint8_t *used, mf_err *err) {
    const gguf_file *f = &m->gguf;
    const mf_hparams *hp = &m->hp;
    const char *a = hp->arch_name;
    char key[128];
    int rc;
    mf_rope *r = &m->rope;
    *r = rope_plain(hp->rope_dim, hp->rope_base, hp->rope_mode);
    r->scaling = MF_ROPE_SCALING_LINEAR;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    gguf_str type;
    if ((rc = gguf_get_str(f, key, &type, err)) < 0) return rc;
    if (rc == 0) {
        if (gguf_str_eq(type, "none")) r->scaling = MF_ROPE_SCALING_NONE;
        else if (gguf_str_eq(type, "linear")) r->scaling = MF_ROPE_SCALING_LINEAR;
        else if (gguf_str_eq(type, "yarn")) r->scaling = MF_ROPE_SCALING_YARN;
        else
            return mf_fail(err, MF_ERR_INPUT, "model: unsupported RoPE scaling type '%.*s' in %s (supported: none, linear, yarn)",
                           (int)(type.len < 64 ? type.len : 64), type.ptr, key);
    }
    float factor = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
    if ((rc = gguf_get_f32(f, key, &factor, err)) < 0) return rc;
    if (rc == 1) {
        snprintf(key, sizeof key, "%s.rope.scale_linear", a);
        if ((rc = gguf_get_f32(f, key, &factor, err)) < 0) return rc;
    }
    if (!(factor >= 0 && factor <= 1e6f)) return mf_fail(err, MF_ERR_INPUT, "model: %s = %g out of range", key, factor);
    r->freq_scale = factor == 0 ? 1.0f : 1.0f / factor;
    if (r->scaling == MF_ROPE_SCALING_NONE) r->freq_scale = 1.0f;
    if (r->freq_scale == 1.0f && r->scaling == MF_ROPE_SCALING_LINEAR) r->scaling = MF_ROPE_SCALING_NONE;
    float attn_factor = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", a);
    if ((rc = gguf_get_f32(f, key, &attn_factor, err)) < 0) return rc;
    if (!(attn_factor > 0 && attn_factor < 1e3f)) return mf_fail(err, MF_ERR_INPUT, "model: %s = %g out of range", key, attn_factor);
    r->n_ctx_orig = hp->n_ctx_train;
    if ((rc = get_hp(f, a, "rope.scaling.original_context_length", &r->n_ctx_orig, 0, err))) return rc;
    r->ext_factor = r->scaling == MF_ROPE_SCALING_YARN ? 1.0f : 0.0f;

    const gguf_tensor *t = gguf_find_tensor(f, "rope_freqs.weight");
    if (t && hp->arch == MF_ARCH_LLAMA) {
        if ((rc = bind(m, used, &m->rope_freqs, "rope_freqs.weight", hp->rope_dim / 2, 1, 0, err))) return rc;
        if (m->rope_freqs.type != QTYPE_F32)
            return mf_fail(err, MF_ERR_INPUT, "model: rope_freqs.weight must be f32, is %s", qtype_name(m->rope_freqs.type));
        const float *ff = m->rope_freqs.host;
        for (int i = 0; i < hp->rope_dim / 2; i++)
            if (!(ff[i] > 0 && ff[i] < 1e9f))
                return mf_fail(err, MF_ERR_INPUT, "model: rope_freqs.weight[%d] = %g out of range", i, ff[i]);
        r->freq_factors = ff;
    }
    const float model_factor = 1.0f / r->freq_scale;
    rope_finish(r, attn_factor, model_factor);
    m->rope_swa = *r;
    if (m->desc.rope_base_swa > 0) {
        m->rope_swa.base = m->desc.rope_base_swa;
        m->rope_swa.freq_scale = 1.0f;
        rope_finish(&m->rope_swa, attn_factor, model_factor);
    }
    return MF_OK;
}

/* The names of the file's tensors that nothing bound, into m->unused_tensors. */
static void list_unused(mf_model *m, const uint8_t *used) {
    size_t len = 0, cap = 0;
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++) {
        if (used[i]) continue;
        const char *name = m->gguf.tensors[i].cname;
        const size_t n = strlen(name);
        if (len + n + 3 > cap) {
            cap = (len + n + 3) * 2;
            m->unused_tensors = mf_xrealloc(m->unused_tensors, cap);
        }
        if (len) memcpy(m->unused_tensors + len, ", ", 2), len += 2;
        memcpy(m->unused_tensors + len, name, n + 1);
        len += n;
        m->n_unused_tensors++;
    }
}

int model_load(mf_model *m, const char *path, mf_err *err) {
    memset(m, 0, sizeof *m);
    int rc = gguf_open(&m->gguf, path, err);
    if (rc) return rc;
    uint8_t *used = mf_xcalloc(m->gguf.n_tensors + 1, 1);
    if ((rc = load_hparams(m, err))) goto fail;
    mf_hparams *hp = &m->hp;
    model_arch_desc(hp->arch, &m->desc);
    if ((rc = arch_desc_from_file(m, err))) goto fail;
    if ((rc = load_rope(m, used, err))) goto fail;

    const gguf_tensor *te = gguf_find_tensor(&m->gguf, "token_embd.weight");
    if (!te) { rc = mf_fail(err, MF_ERR_INPUT, "model: missing tensor 'token_embd.weight'"); goto fail; }
    if (te->ne[1] == 0 || te->ne[1] > (1u << 24)) { rc = mf_fail(err, MF_ERR_INPUT, "model: bad vocab size"); goto fail; }
    hp->n_vocab = (int)te->ne[1];
    int dim = hp->n_embd, q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    if ((rc = bind(m, used, &m->tok_embd, "token_embd.weight", dim, hp->n_vocab, 0, err))) goto fail;
    if ((rc = bind(m, used, &m->output_norm, "output_norm.weight", dim, 1, 0, err))) goto fail;
    if ((rc = bind(m, used, &m->output, "output.weight", dim, hp->n_vocab, 1, err))) goto fail;
    if (!m->output.host) {
        m->output = m->tok_embd;
        m->tied_output = 1;
    }
    /* block_count comes from the file (up to 2^30): a layer binds at least 9 tensors, so
     * more layers than n_tensors / 9 is an error before the per-layer array is allocated
     * (a 10 KB file claimed 2^30 layers, a 75 GB calloc; found by fuzz/fuzz_gguf.c) */
    if ((uint64_t)hp->n_layer > m->gguf.n_tensors / 9) {
        rc = mf_fail(err, MF_ERR_INPUT, "model: block_count %d but the file has only %llu tensors", hp->n_layer,
                     (unsigned long long)m->gguf.n_tensors);
        goto fail;
    }
    m->layers = mf_xcalloc((size_t)hp->n_layer, sizeof *m->layers);
    int with_bias = m->desc.qkv_bias;
    for (int i = 0; i < hp->n_layer; i++) {
        mf_layer *L = &m->layers[i];
        char name[96];
#define BIND(field, suffix, c, r, opt)                                   \
        snprintf(name, sizeof name, "blk.%d." suffix, i);               \
        if ((rc = bind(m, used, &L->field, name, c, r, opt, err))) goto fail;
        BIND(attn_norm, "attn_norm.weight", dim, 1, 0);
        BIND(wq, "attn_q.weight", dim, q_dim, 0);
        BIND(wk, "attn_k.weight", dim, kv_dim, 0);
        BIND(wv, "attn_v.weight", dim, kv_dim, 0);
        BIND(bq, "attn_q.bias", q_dim, 1, !with_bias);
        BIND(bk, "attn_k.bias", kv_dim, 1, !with_bias);
        BIND(bv, "attn_v.bias", kv_dim, 1, !with_bias);
        BIND(wo, "attn_output.weight", q_dim, dim, 0);
        BIND(ffn_norm, "ffn_norm.weight", dim, 1, 0);
        if ((rc = bind_ffn(m, used, i, &L->ffn, err))) goto fail;
        if (L->ffn.n_expert > 1) {
            m->desc.n_expert = L->ffn.n_expert;
            m->desc.n_expert_used = L->ffn.n_used;
        }
        BIND(attn_q_norm, "attn_q_norm.weight", hp->head_dim, 1, !m->desc.qk_norm);
        BIND(attn_k_norm, "attn_k_norm.weight", hp->head_dim, 1, !m->desc.qk_norm);
        BIND(attn_post_norm, "post_attention_norm.weight", dim, 1, !m->desc.post_norm);
        BIND(ffn_post_norm, "post_ffw_norm.weight", dim, 1, !m->desc.post_norm);
#undef BIND
    }
    for (uint64_t i = 0; i < m->gguf.n_tensors; i++) m->weight_bytes += m->gguf.tensors[i].nbytes;

    list_unused(m, used);
    free(used);
    used = NULL;
    if ((rc = tok_load(&m->vocab, &m->gguf, err))) goto fail;
    if (tok_n_vocab(m->vocab) > hp->n_vocab) {
        rc = mf_fail(err, MF_ERR_INPUT, "model: tokenizer has %d tokens but token_embd has %d rows",
                     tok_n_vocab(m->vocab), hp->n_vocab);
        goto fail;
    }
    return MF_OK;
fail:
    free(used);
    model_free(m);
    return rc;
}

void model_free(mf_model *m) {
    if (m->vocab) tok_free(m->vocab);
    free(m->unused_tensors);
    free(m->layers);
    gguf_close(&m->gguf);
    memset(m, 0, sizeof *m);
}

void model_describe(const mf_model *m, char *buf, size_t cap) {
    const mf_hparams *hp = &m->hp;
    snprintf(buf, cap,
             "%s: %d layers, dim %d, ff %d, heads %d/%d (kv), head dim %d, vocab %d, ctx %d, rope %s base %g, "
             "%s output, %.2f MiB",
             hp->arch_name, hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv, hp->head_dim,
             hp->n_vocab, hp->n_ctx_train, hp->rope_mode == MF_ROPE_NEOX ? "neox" : "norm", hp->rope_base,
             m->tied_output ? "tied" : "separate", (double)m->weight_bytes / (1024.0 * 1024.0));
    const mf_arch_desc *d = &m->desc;
    size_t len = strlen(buf);
    if (d->sliding_window && len < cap) {
        if (d->swa_every > 0)
            snprintf(buf + len, cap - len, ", window %d (layer l global where l %% %d = %d; sliding layers' rope base %g)",
                     d->sliding_window, d->swa_every, d->swa_every - 1,
                     d->rope_base_swa > 0 ? d->rope_base_swa : hp->rope_base);
        else
            snprintf(buf + len, cap - len, ", window %d (every layer)", d->sliding_window);
    }
    len = strlen(buf);
    if (d->logit_softcap != 0 && len < cap) snprintf(buf + len, cap - len, ", logit soft-cap %g", d->logit_softcap);
    len = strlen(buf);
    if (d->n_expert > 1 && len < cap && m->layers)
        snprintf(buf + len, cap - len, ", %d experts of ff %lld, %d used a token", d->n_expert,
                 (long long)m->layers[0].ffn.gate.rows, d->n_expert_used);
    len = strlen(buf);
    if (!rope_is_plain(&m->rope) && len < cap) {
        char rs[96];
        rope_describe(&m->rope, rs, sizeof rs);
        snprintf(buf + len, cap - len, ", rope scaling %s", rs);
    }
}

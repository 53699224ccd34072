/* cmd_synth.c - `minfer synth`: write a llama-shaped GGUF with random weights for
 * benchmarks (std about 0.02, deterministic by seed, any thread count).
 *
 * Each --quant follows llama.cpp's per-tensor mix for its file type (the table
 * above mix_type; q4_k_m: q6_K for output.weight, and for attn_v / ffn_down of
 * layer i when i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2; q4_K elsewhere); norms
 * f32. The tokenizer is a synthetic SPM vocabulary (control tokens, the 256 byte
 * tokens, filler pieces) unless --vocab copies a real one.
 *
 * --fast writes random codes under fixed scales instead of quantizing random floats
 * (the K-quant fit takes the time: 99-143 s for the 7b on 16 cores): the same
 * tensors and types, values of the same scale (std about 0.02, mean about 0, checked
 * by tests/e2e_cli.sh), different values. For benchmarks, whose kernels do the same
 * work whatever the values; the tests' models keep the default path. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "gguf.h"
#include "opts.h"
#include "quant.h"
#include "rope.h"

typedef struct synth_shape {
    const char *name;
    int dim, n_layer, n_ff, n_head, n_head_kv, n_vocab, n_ctx;
    float rope_base;
    int llama3_rope; /* rope_freqs.weight of Llama 3.1 (factor 8, low/high frequency factors 1 and 4,
                        original context 8192), as its converter writes into every 3.1/3.2/3.3 file */
    const char *arch;   /* general.architecture: llama, qwen3 (q/k norms, head dim of its own) or qwen3moe */
    int head_dim;       /* 0: dim / n_head */
    int n_expert, n_expert_used, n_ff_exp; /* an FFN of experts in every layer (0: dense) */
} synth_shape;

/* 7b: llama-2-7B; 8b: llama-3.1-8B (its RoPE factors and context); 70b: llama-2-70B (GQA 64/8; the multi-GPU benchmark's
 * model, ~39 GB at q4_k_m); 1b: TinyLlama-1.1B (llama-2 vocab); tiny: tests; tiny-mha:
 * tests, one kv head per query head at head dim 128 as the 7B has (the one-token attention's
 * paths for that group, attn.cu). qwen3-8b: Qwen3-8B; qwen3-30b-a3b: Qwen3-30B-A3B (128
 * experts of ff 768, 8 used; feed_forward_length 6144 as its file says); tiny-moe and
 * tiny-mixtral: tests (qwen3moe, and a llama file with experts as Mixtral's are). */
static const synth_shape shapes[] = {
    { "7b", 4096, 32, 11008, 32, 32, 32000, 4096, 10000.0f, 0, "llama", 0, 0, 0, 0 },
    { "8b", 4096, 32, 14336, 32, 8, 128256, 131072, 500000.0f, 1, "llama", 0, 0, 0, 0 },
    { "70b", 8192, 80, 28672, 64, 8, 32000, 4096, 10000.0f, 0, "llama", 0, 0, 0, 0 },
    { "1b", 2048, 22, 5632, 32, 4, 32000, 2048, 10000.0f, 0, "llama", 0, 0, 0, 0 },
    { "tiny", 256, 2, 768, 4, 2, 512, 2048, 10000.0f, 0, "llama", 0, 0, 0, 0 },
    { "tiny-mha", 256, 2, 768, 2, 2, 512, 2048, 10000.0f, 0, "llama", 0, 0, 0, 0 },
    { "qwen3-8b", 4096, 36, 12288, 32, 8, 151936, 40960, 1000000.0f, 0, "qwen3", 128, 0, 0, 0 },
    { "qwen3-30b-a3b", 2048, 48, 6144, 32, 4, 151936, 40960, 1000000.0f, 0, "qwen3moe", 128, 128, 8, 768 },
    { "tiny-moe", 256, 2, 1024, 4, 2, 512, 2048, 1000000.0f, 0, "qwen3moe", 64, 16, 4, 256 },
    { "tiny-mixtral", 256, 2, 512, 4, 2, 512, 2048, 10000.0f, 0, "llama", 0, 4, 2, 512 },
};

typedef struct synth_tensor {
    char name[64];
    uint32_t type;
    uint64_t ne[3]; /* ne[2]: experts of a 3-D tensor, else 0 */
    int is_norm;
    const float *values; /* f32 contents (rope_freqs), or NULL: random */
} synth_tensor;

typedef struct synth_job {
    const synth_tensor *tensors;
    uint64_t seed;
    int n_threads;
    int fast;
} synth_job;

typedef struct fill_task {
    const synth_tensor *t;
    uint64_t seed;
    int fast;
    int tensor_index;
    uint8_t *dst;
    uint64_t row_bytes;
    int64_t r0, r1;
} fill_task;

/* Irwin-Hall(4) approximation of a normal: cheap, bounded, std exactly 1. */
static inline float approx_normal(mf_rng *r) {
    float s = mf_rng_uniform(r) + mf_rng_uniform(r) + mf_rng_uniform(r) + mf_rng_uniform(r);
    return (s - 2.0f) * 1.7320508f;
}

/* --fast: one row of random codes under fixed scales, chosen so that the values
 * have std 0.02 (c = a block's scale code, q a code uniform over its range; rms(c)
 * is sqrt(E c^2) over the range, +- a random sign where the codes are not centred):
 *   q4_K  w = d*c*q - dmin*c = d*c*(q - 7.5) with sc = m = c in 40..63, dmin = 7.5 d;
 *         std d * 51.5 * 4.61 (the std of q in 0..15)
 *   q5_K  as q4_K with q in 0..31, dmin = 15.5 d: std d * 51.96 * 9.23
 *   q6_K  w = d*c*(q - 32), c in 8..15, q in 0..63: std d * 11.5 * 18.47
 *   q3_K  w = d*s*q, s in -32..31 and q in -4..3 (all random bytes): std d * 18.48 * 2.345
 *   q2_K  w = d*c*(q - 1.5), sc = m = c in 8..15, dmin = 1.5 d: std d * 11.73 * 1.118
 *   q8_0  w = d*q, q any int8: std d * 73.9
 *   q4_0  w = +-d*(q - 8): std d * 4.637
 *   iq4_nl  w = +-d*v, v a grid value: std d * 67.44 (the grid's rms)
 *   iq4_xs  w = d*(+-c)*v, c in 8..15: std d * 11.73 * 67.44
 *   f16, bf16, f32  uniform in +-0.02*sqrt(3) (f32: a router, ffn_gate_inp)
 * Other types (fallbacks of rows a block does not divide) take the default path. */
static int fill_fast_knows(uint32_t type) {
    switch (type) {
    case QTYPE_Q4_K: case QTYPE_Q5_K: case QTYPE_Q6_K: case QTYPE_Q3_K: case QTYPE_Q2_K: case QTYPE_Q8_0:
    case QTYPE_Q4_0: case QTYPE_IQ4_NL: case QTYPE_IQ4_XS: case QTYPE_F16: case QTYPE_BF16: case QTYPE_F32:
        return 1;
    default:
        return 0;
    }
}

static float rand_sign(mf_rng *rng) { return mf_rng_u64(rng) & 1 ? -1.0f : 1.0f; }

static void fill_row_fast(uint32_t type, uint8_t *dst, uint64_t row_bytes, int64_t cols, mf_rng *rng) {
    for (uint64_t o = 0; o < row_bytes; o += 8) {
        const uint64_t v = mf_rng_u64(rng);
        memcpy(dst + o, &v, MF_MIN(8, row_bytes - o));
    }
    switch (type) {
    case QTYPE_Q4_K: {
        const float d = 0.02f / (51.5f * 4.61f);
        for (block_q4_K *b = (block_q4_K *)dst; (uint8_t *)b < dst + row_bytes; b++) {
            b->d = mf_f32_to_f16(d);
            b->dmin = mf_f32_to_f16(7.5f * d);
            memset(b->scales, 0, sizeof b->scales);
            for (int j = 0; j < 8; j++) {
                const uint8_t c = (uint8_t)(40 + mf_rng_u64(rng) % 24);
                quant_put_scale_min_k4(j, b->scales, c, c);
            }
        }
        break;
    }
    case QTYPE_Q5_K: {
        const float d = 0.02f / (51.96f * 9.23f);
        for (block_q5_K *b = (block_q5_K *)dst; (uint8_t *)b < dst + row_bytes; b++) {
            b->d = mf_f32_to_f16(d);
            b->dmin = mf_f32_to_f16(15.5f * d);
            memset(b->scales, 0, sizeof b->scales);
            for (int j = 0; j < 8; j++) {
                const uint8_t c = (uint8_t)(40 + mf_rng_u64(rng) % 24);
                quant_put_scale_min_k4(j, b->scales, c, c);
            }
        }
        break;
    }
    case QTYPE_Q3_K:
        for (block_q3_K *b = (block_q3_K *)dst; (uint8_t *)b < dst + row_bytes; b++)
            b->d = mf_f32_to_f16(0.02f / (18.48f * 2.345f));
        break;
    case QTYPE_Q2_K: {
        const float d = 0.02f / (11.73f * 1.118f);
        for (block_q2_K *b = (block_q2_K *)dst; (uint8_t *)b < dst + row_bytes; b++) {
            b->d = mf_f32_to_f16(d);
            b->dmin = mf_f32_to_f16(1.5f * d);
            for (int j = 0; j < QK_K / 16; j++) {
                const uint8_t c = (uint8_t)(8 + mf_rng_u64(rng) % 8);
                b->scales[j] = (uint8_t)(c | c << 4);
            }
        }
        break;
    }
    case QTYPE_Q4_0:
        for (block_q4_0 *b = (block_q4_0 *)dst; (uint8_t *)b < dst + row_bytes; b++)
            b->d = mf_f32_to_f16(rand_sign(rng) * 0.02f / 4.637f);
        break;
    case QTYPE_IQ4_NL:
        for (block_iq4_nl *b = (block_iq4_nl *)dst; (uint8_t *)b < dst + row_bytes; b++)
            b->d = mf_f32_to_f16(rand_sign(rng) * 0.02f / 67.44f);
        break;
    case QTYPE_IQ4_XS:
        for (block_iq4_xs *b = (block_iq4_xs *)dst; (uint8_t *)b < dst + row_bytes; b++) {
            b->d = mf_f32_to_f16(0.02f / (11.73f * 67.44f));
            b->scales_h = 0;
            memset(b->scales_l, 0, sizeof b->scales_l);
            for (int j = 0; j < 8; j++) {
                const int sign = mf_rng_u64(rng) & 1 ? -1 : 1;
                const int c = 32 + sign * (int)(8 + mf_rng_u64(rng) % 8);
                b->scales_l[j / 2] |= (uint8_t)((c & 15) << (4 * (j % 2)));
                b->scales_h |= (uint16_t)((c >> 4) << (2 * j));
            }
        }
        break;
    case QTYPE_Q6_K:
        for (block_q6_K *b = (block_q6_K *)dst; (uint8_t *)b < dst + row_bytes; b++) {
            b->d = mf_f32_to_f16(0.02f / (11.5f * 18.47f));
            for (int j = 0; j < QK_K / 16; j++) b->scales[j] = (int8_t)(8 + mf_rng_u64(rng) % 8);
        }
        break;
    case QTYPE_Q8_0:
        for (block_q8_0 *b = (block_q8_0 *)dst; (uint8_t *)b < dst + row_bytes; b++) b->d = mf_f32_to_f16(0.02f / 73.9f);
        break;
    case QTYPE_F16:
    case QTYPE_BF16:
        for (int64_t c = 0; c < cols; c++) {
            const float v = 0.02f * 1.7320508f * (2.0f * mf_rng_uniform(rng) - 1.0f);
            const uint16_t h = type == QTYPE_F16 ? mf_f32_to_f16(v) : mf_f32_to_bf16(v);
            memcpy(dst + 2 * c, &h, 2);
        }
        break;
    case QTYPE_F32: /* (a router: ffn_gate_inp) */
        for (int64_t c = 0; c < cols; c++) {
            const float v = 0.02f * 1.7320508f * (2.0f * mf_rng_uniform(rng) - 1.0f);
            memcpy(dst + 4 * c, &v, 4);
        }
        break;
    default: /* fill_fast_knows says which types come here */
        break;
    }
}

static void *fill_rows(void *arg) {
    fill_task *ft = arg;
    int64_t cols = (int64_t)ft->t->ne[0];
    float *row = mf_xmalloc(sizeof(float) * (size_t)cols);
    for (int64_t r = ft->r0; r < ft->r1; r++) {
        /* Seeded per (seed, tensor, row): output independent of the thread split. */
        mf_rng rng;
        mf_rng_seed(&rng, ft->seed ^ ((uint64_t)ft->tensor_index << 40) ^ ((uint64_t)r * 0x9e3779b97f4a7c15ull));
        uint8_t *dst = ft->dst + (uint64_t)r * ft->row_bytes;
        if (ft->fast && !ft->t->is_norm && fill_fast_knows(ft->t->type)) {
            fill_row_fast(ft->t->type, dst, ft->row_bytes, cols, &rng);
            continue;
        }
        for (int64_t c = 0; c < cols; c++) row[c] = ft->t->is_norm ? 1.0f : 0.02f * approx_normal(&rng);
        quant_quantize_row(ft->t->type, row, dst, cols);
    }
    free(row);
    return NULL;
}

static int fill_tensor(void *user, int i, void *dst, uint64_t nbytes) {
    synth_job *job = user;
    const synth_tensor *t = &job->tensors[i];
    if (t->values) {
        memcpy(dst, t->values, nbytes);
        return 0;
    }
    int64_t rows = (int64_t)t->ne[1] * (t->ne[2] ? (int64_t)t->ne[2] : 1);
    int nt = (int)MF_MIN((int64_t)job->n_threads, rows);
    fill_task tasks[256];
    pthread_t th[256];
    if (nt > 256) nt = 256;
    for (int k = 0; k < nt; k++) {
        tasks[k] = (fill_task){ t, job->seed, job->fast, i, dst, qtype_row_size(t->type, t->ne[0]), rows * k / nt,
                                rows * (k + 1) / nt };
        if (k > 0 && pthread_create(&th[k], NULL, fill_rows, &tasks[k])) return -1;
    }
    fill_rows(&tasks[0]);
    for (int k = 1; k < nt; k++) pthread_join(th[k], NULL);
    (void)nbytes;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Quant mixes: llama.cpp's per-tensor types for the file types it writes     */
/* ------------------------------------------------------------------------- */

/* What llama-quantize writes for each --quant, without an importance matrix
 * (llama_tensor_get_type of src/llama-quant.cpp, llama.cpp d32676d), for the
 * tensors synth writes. Every 2-D weight gets the file type's own type except:
 *
 *   quant   file_type  base    output  attn_v                 ffn_down            attn_output
 *   q4_k_m  15         q4_K    q6_K    q6_K on more-bits      q6_K on more-bits   -
 *   q5_k_m  17         q5_K    q6_K    q6_K on more-bits      q6_K on more-bits   -
 *   q6_k    18         q6_K    q6_K    -                      -                   -
 *   q8_0     7         q8_0    q8_0    -                      -                   -
 *   q4_0     2         q4_0    q6_K    -                      -                   -
 *   iq4_xs  30         iq4_xs  q6_K    q5_K where gqa >= 4    q5_K for i < n/8    -
 *   iq4_nl  25         iq4_nl  q6_K    q5_K where gqa >= 4    q5_K for i < n/8    -
 *   q3_k_m  12         q3_K    q6_K    q5_K for i < 2, q4_K   q5_K i < n/16, q4_K q4_K
 *   q2_k    10         q2_K    q6_K    q4_K (gqa >= 4) q3_K   q3_K                q3_K
 *   f16      1         f16     f16     -                      -                   -
 *   bf16    32         bf16    bf16    -                      -                   -
 *
 * "more-bits" layers: i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2. On llama's 70B (80
 * layers, GQA) a q3_K or q4_K attn_v becomes q5_K (not in q4_k_m here: see mix_type), and
 * with 8 experts attn_v and attn_k are q8_0 and attn_output q5_K (q2_k, q3_k_m, q4_k_m,
 * iq4_xs, iq4_nl). Norms stay
 * f32, token_embd takes the base type (the output is never tied here). A row
 * length the type's block does not divide falls back as llama.cpp's
 * tensor_type_fallback: q2_K/q3_K -> q4_0, q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0,
 * iq4_xs -> iq4_nl; f16 if that does not divide either. */
typedef struct synth_quant {
    const char *name;     /* --quant */
    uint32_t file_type;   /* general.file_type: llama_ftype */
    uint32_t base;        /* the ftype's default tensor type */
} synth_quant;

enum { FT_F16 = 1, FT_Q4_0 = 2, FT_Q8_0 = 7, FT_Q2_K = 10, FT_Q3_K_M = 12, FT_Q4_K_M = 15, FT_Q5_K_M = 17,
       FT_Q6_K = 18, FT_IQ4_NL = 25, FT_IQ4_XS = 30, FT_BF16 = 32 };

static const synth_quant quants[] = {
    { "q4_k_m", FT_Q4_K_M, QTYPE_Q4_K }, { "q5_k_m", FT_Q5_K_M, QTYPE_Q5_K }, { "q6_k", FT_Q6_K, QTYPE_Q6_K },
    { "q8_0", FT_Q8_0, QTYPE_Q8_0 },     { "q4_0", FT_Q4_0, QTYPE_Q4_0 },     { "iq4_xs", FT_IQ4_XS, QTYPE_IQ4_XS },
    { "q3_k_m", FT_Q3_K_M, QTYPE_Q3_K }, { "q2_k", FT_Q2_K, QTYPE_Q2_K },     { "iq4_nl", FT_IQ4_NL, QTYPE_IQ4_NL },
    { "f16", FT_F16, QTYPE_F16 },        { "bf16", FT_BF16, QTYPE_BF16 },
};

/* The model facts the mix reads. */
typedef struct synth_mix {
    const synth_quant *q;
    int n_layer;
    int n_gqa;        /* n_head / n_head_kv */
    int n_expert;     /* 0 or 1: dense */
    int is_70b;       /* llama.cpp's LLM_TYPE_70B: 80 layers, n_head_kv < n_head */
} synth_mix;

/* The type placeholder of a tensor the mix types (by name, as llama.cpp). */
#define SYNTH_MIX UINT32_MAX

static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static uint32_t mix_fallback(uint32_t t, uint64_t ncols) {
    if (ncols % qtype_get(t)->blck == 0) return t;
    switch (t) {
    case QTYPE_IQ4_XS: t = QTYPE_IQ4_NL; break;
    case QTYPE_Q2_K: case QTYPE_Q3_K: t = QTYPE_Q4_0; break;
    case QTYPE_Q4_K: t = QTYPE_Q5_0; break;
    case QTYPE_Q5_K: t = QTYPE_Q5_1; break;
    case QTYPE_Q6_K: t = QTYPE_Q8_0; break;
    default: break;
    }
    return ncols % qtype_get(t)->blck ? QTYPE_F16 : t;
}

/* The type of the 2-D weight `name` with rows of ncols values. */
static uint32_t mix_type(const synth_mix *mx, const char *name, uint64_t ncols) {
    const uint32_t ft = mx->q->file_type, base = mx->q->base;
    if (base == QTYPE_F16 || base == QTYPE_BF16) return base; /* not a quantized file type: every weight */
    int layer = 0;
    sscanf(name, "blk.%d.", &layer);
    const int more = use_more_bits(layer, mx->n_layer), moe8 = mx->n_expert == 8;
    uint32_t t = base;
    if (!strcmp(name, "output.weight")) {
        t = ncols % qtype_get(base)->blck ? QTYPE_Q8_0 : base == QTYPE_Q8_0 ? QTYPE_Q8_0 : QTYPE_Q6_K;
    } else if (strstr(name, "attn_v.weight")) {
        /* llama.cpp counts attn_v tensors; one a layer here, so the count is the layer */
        if (ft == FT_Q2_K) t = mx->n_gqa >= 4 ? QTYPE_Q4_K : QTYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = layer < 2 ? QTYPE_Q5_K : QTYPE_Q4_K;
        else if ((ft == FT_IQ4_XS || ft == FT_IQ4_NL) && mx->n_gqa >= 4) t = QTYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && more) t = QTYPE_Q6_K;
        /* TODO: llama.cpp also bumps q4_k_m's 70B attn_v to q5_K; q4_k_m keeps the
         * mix its benchmark files were written with (identical bytes). */
        if (mx->is_70b && ft != FT_Q4_K_M && (t == QTYPE_Q3_K || t == QTYPE_Q4_K)) t = QTYPE_Q5_K;
        if (moe8) t = QTYPE_Q8_0;
    } else if (strstr(name, "attn_k.weight")) {
        if (moe8) t = QTYPE_Q8_0;
    } else if (strstr(name, "ffn_down")) {
        if (ft == FT_Q2_K) t = QTYPE_Q3_K;
        else if (ft == FT_Q3_K_M) t = layer < mx->n_layer / 16 ? QTYPE_Q5_K : QTYPE_Q4_K;
        else if (ft == FT_Q4_K_M && more) t = QTYPE_Q6_K;
        else if ((ft == FT_IQ4_XS || ft == FT_IQ4_NL) && layer < mx->n_layer / 8) t = QTYPE_Q5_K;
        else if (ft == FT_Q5_K_M && more) t = QTYPE_Q6_K;
    } else if (strstr(name, "attn_output.weight")) {
        if (moe8) {
            if (ft == FT_Q2_K || ft == FT_Q3_K_M || ft == FT_Q4_K_M || ft == FT_IQ4_XS || ft == FT_IQ4_NL) t = QTYPE_Q5_K;
        } else if (ft == FT_Q2_K) {
            t = QTYPE_Q3_K;
        } else if (ft == FT_Q3_K_M) {
            t = QTYPE_Q4_K;
        }
    }
    return mix_fallback(t, ncols);
}

static void add_synthetic_vocab(gguf_writer *w, int n_vocab) {
    gguf_str *toks = mf_xmalloc(sizeof(gguf_str) * (size_t)n_vocab);
    char **owned = mf_xcalloc((size_t)n_vocab, sizeof(char *));
    float *scores = mf_xmalloc(sizeof(float) * (size_t)n_vocab);
    int32_t *types = mf_xmalloc(sizeof(int32_t) * (size_t)n_vocab);
    for (int i = 0; i < n_vocab; i++) {
        char buf[32];
        if (i == 0) { strcpy(buf, "<unk>"); types[i] = 2; }
        else if (i == 1) { strcpy(buf, "<s>"); types[i] = 3; }
        else if (i == 2) { strcpy(buf, "</s>"); types[i] = 3; }
        else if (i < 3 + 256) { snprintf(buf, sizeof buf, "<0x%02X>", i - 3); types[i] = 6; }
        else { /* "\u2581" + base-26 letters: unique filler pieces */
            int k = i - 259, n = 0;
            char letters[16];
            do { letters[n++] = (char)('a' + k % 26); k /= 26; } while (k && n < 15);
            memcpy(buf, "\xe2\x96\x81", 3);
            for (int j = 0; j < n; j++) buf[3 + j] = letters[n - 1 - j];
            buf[3 + n] = 0;
            types[i] = 1;
        }
        owned[i] = mf_xstrdup(buf);
        toks[i] = (gguf_str){ owned[i], strlen(owned[i]) };
        scores[i] = i < 259 ? 0.0f : -(float)(i - 259);
    }
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_str(w, "tokenizer.ggml.pre", "default");
    gguf_w_arr(w, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, toks, (uint64_t)n_vocab);
    gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_F32, scores, (uint64_t)n_vocab);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, types, (uint64_t)n_vocab);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1);
    gguf_w_bool(w, "tokenizer.ggml.add_eos_token", 0);
    for (int i = 0; i < n_vocab; i++) free(owned[i]);
    free(owned);
    free(toks);
    free(scores);
    free(types);
}

/* Writes a scalar key of a read file with its own type (the reader widens integers to
 * 64 bits and floats to double). */
static void copy_scalar(gguf_writer *w, const char *key, const gguf_kv *kv) {
    union {
        uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
        int8_t i8; int16_t i16; int32_t i32; int64_t i64;
        float f32; double f64;
    } v;
    switch (kv->type) {
    case GGUF_VTYPE_BOOL: case GGUF_VTYPE_U8: v.u8 = (uint8_t)kv->v.u64; break;
    case GGUF_VTYPE_U16: v.u16 = (uint16_t)kv->v.u64; break;
    case GGUF_VTYPE_U32: v.u32 = (uint32_t)kv->v.u64; break;
    case GGUF_VTYPE_U64: v.u64 = kv->v.u64; break;
    case GGUF_VTYPE_I8: v.i8 = (int8_t)kv->v.i64; break;
    case GGUF_VTYPE_I16: v.i16 = (int16_t)kv->v.i64; break;
    case GGUF_VTYPE_I32: v.i32 = (int32_t)kv->v.i64; break;
    case GGUF_VTYPE_I64: v.i64 = kv->v.i64; break;
    case GGUF_VTYPE_F32: v.f32 = (float)kv->v.f64; break;
    case GGUF_VTYPE_F64: v.f64 = kv->v.f64; break;
    default: return;
    }
    gguf_w_scalar(w, key, kv->type, &v);
}

/* Copies every tokenizer.* key of a vocabulary GGUF; returns its token count or <0. */
static int copy_vocab(gguf_writer *w, const char *path) {
    gguf_file vf;
    mf_err err = { { 0 } };
    int rc = gguf_open(&vf, path, &err);
    if (rc) return cli_load_error(2, path, err.msg), -1;
    int n_vocab = -1;
    for (uint64_t i = 0; i < vf.n_kv; i++) {
        const gguf_kv *kv = &vf.kv[i];
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
        char *sval;
        switch (kv->type) {
        case GGUF_VTYPE_STRING:
            sval = mf_xmalloc(kv->v.str.len + 1);
            memcpy(sval, kv->v.str.ptr, kv->v.str.len);
            sval[kv->v.str.len] = 0;
            gguf_w_str(w, key, sval);
            free(sval);
            break;
        case GGUF_VTYPE_ARRAY:
            if (kv->arr_type == GGUF_VTYPE_STRING) gguf_w_arr(w, key, GGUF_VTYPE_STRING, kv->arr_strs, kv->arr_count);
            else gguf_w_arr(w, key, kv->arr_type, kv->arr_data, kv->arr_count);
            if (!strcmp(key, "tokenizer.ggml.tokens")) n_vocab = (int)kv->arr_count;
            break;
        default: copy_scalar(w, key, kv); break;
        }
    }
    gguf_close(&vf);
    if (n_vocab <= 0) return cli_error(2, "%s: no tokenizer.ggml.tokens array", path), -1;
    return n_vocab;
}

/* What one line per option cannot say; the options come from the table in cmd_synth. */
static const char synth_notes[] =
    "Shapes: 7b (llama-2-7B), 8b (llama-3.1-8B), 70b (llama-2-70B), 1b (TinyLlama-1.1B), qwen3-8b (Qwen3-8B),\n"
    "qwen3-30b-a3b (Qwen3-30B-A3B: 128 experts, 8 used), tiny, tiny-mha, tiny-moe (qwen3moe) and\n"
    "tiny-mixtral (a llama file with experts) for tests.\n"
    "Quants: q4_k_m, q5_k_m, q6_k, q8_0, q4_0, iq4_xs, q3_k_m, q2_k, iq4_nl, f16, bf16, each in\n"
    "llama.cpp's per-tensor mix (llama-quantize without an importance matrix: q6_K output, more\n"
    "bits for some attn_v/ffn_down/attn_output; experts' tensors as the dense FFN's, routers f32).\n"
    "--fast writes random codes under fixed scales instead of quantized random floats: the same\n"
    "tensors, types and scale (std ~0.02), seconds instead of minutes for 7b; for benchmarks.\n"
    "\n";

int cmd_synth(int argc, char **argv) {
    const char *shape_name = NULL, *quant = NULL, *vocab = NULL, *out = NULL;
    uint64_t seed = 1;
    int n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN), layers = 0, fast = 0;
    cli_opt opts[10];
    int n = 0;
    opts[n++] = (cli_opt){ "--shape", "SHAPE", CLI_OPT_CHOICE, &shape_name, .help = "model shape (required)",
                           .choices = "7b|8b|70b|1b|tiny|tiny-mha|qwen3-8b|qwen3-30b-a3b|tiny-moe|tiny-mixtral" };
    opts[n++] = (cli_opt){ "--quant", "QUANT", CLI_OPT_CHOICE, &quant, .help = "weight types (required)",
                           .choices = "q4_k_m|q5_k_m|q6_k|q8_0|q4_0|iq4_xs|q3_k_m|q2_k|iq4_nl|f16|bf16" };
    opts[n++] = (cli_opt){ "-o, --output", "PATH", CLI_OPT_STR, &out, .help = "output file (required)", .dflt = "" };
    opts[n++] = (cli_opt){ "--vocab", "PATH", CLI_OPT_STR, &vocab,
                           .help = "copy a (vocab-only) GGUF's tokenizer; the vocabulary size follows it",
                           .dflt = "synthetic SPM" };
    opts[n++] = (cli_opt){ "--layers", "N", CLI_OPT_INT, &layers, 1, 1024,
                           .help = "override the shape's layer count (quick experiments)", .dflt = "the shape's" };
    opts[n++] = (cli_opt){ "--seed", "S", CLI_OPT_U64, &seed, .help = "RNG seed" };
    opts[n++] = (cli_opt){ "--fast", NULL, CLI_OPT_FLAG, &fast, .set = 1,
                           .help = "random codes under fixed scales (see above)", .dflt = "" };
    opts[n++] = (cli_opt){ "-t, --threads", "N", CLI_OPT_INT, &n_threads, 1, 256,
                           .help = "threads; the output does not depend on it", .dflt = "all cores" };
    int prc = cli_parse("synth", "usage: minfer synth --shape SHAPE --quant QUANT -o OUT.gguf [options]", synth_notes,
                        opts, n, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    if (!shape_name || !quant || !out) return cli_error(1, "synth: --shape, --quant and -o are required");
    const synth_shape *sh = NULL;
    for (size_t i = 0; i < MF_ARRAY_LEN(shapes); i++)
        if (!strcmp(shapes[i].name, shape_name)) sh = &shapes[i];
    if (!sh) return cli_error(1, "synth: unknown shape '%s' (see --help)", shape_name);
    const synth_quant *sq = NULL;
    for (size_t i = 0; i < MF_ARRAY_LEN(quants); i++)
        if (!strcmp(quants[i].name, quant)) sq = &quants[i];
    if (!sq) return cli_error(1, "synth: unknown quant '%s'", quant);
    int n_layer = layers ? layers : sh->n_layer;
    if (n_threads < 1) n_threads = 1;

    gguf_writer *w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    const char *arch = sh->arch;
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_w_str(w, "general.architecture", arch);
    char gname[64];
    snprintf(gname, sizeof gname, "minfer-synth-%s-%s", sh->name, quant);
    gguf_w_str(w, "general.name", gname);
    gguf_w_u32(w, "general.file_type", sq->file_type);
    gguf_w_u32(w, "general.quantization_version", 2);
    const int head_dim = sh->head_dim ? sh->head_dim : sh->dim / sh->n_head;
    gguf_w_u32(w, KEY("context_length"), (uint32_t)sh->n_ctx);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)sh->dim);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)n_layer);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)sh->n_ff);
    gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)sh->n_head);
    gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)sh->n_head_kv);
    if (sh->head_dim) {
        gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)head_dim);
        gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)head_dim);
    }
    gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)head_dim);
    gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), sh->head_dim ? 1e-6f : 1e-5f);
    gguf_w_f32(w, KEY("rope.freq_base"), sh->rope_base);
    if (sh->n_expert) {
        gguf_w_u32(w, KEY("expert_count"), (uint32_t)sh->n_expert);
        gguf_w_u32(w, KEY("expert_used_count"), (uint32_t)sh->n_expert_used);
        gguf_w_u32(w, KEY("expert_feed_forward_length"), (uint32_t)sh->n_ff_exp);
    }
    int n_vocab = sh->n_vocab;
    if (vocab) {
        n_vocab = copy_vocab(w, vocab);
        if (n_vocab < 0) { gguf_writer_free(w); return 2; }
    } else {
        add_synthetic_vocab(w, n_vocab);
    }
    gguf_w_u32(w, KEY("vocab_size"), (uint32_t)n_vocab);
#undef KEY

    const int qk_norm = strcmp(arch, "llama") != 0, moe = sh->n_expert > 0;
    int n_tensors = 3 + (9 + 2 * qk_norm + moe) * n_layer + (sh->llama3_rope ? 1 : 0);
    synth_tensor *ts = mf_xcalloc((size_t)n_tensors, sizeof *ts);
    int k = 0;
    const int dim = sh->dim, q_dim = sh->n_head * head_dim, kv_dim = sh->n_head_kv * head_dim;
#define T3(fmt, idx, ty, c, r, e, norm) do { \
        snprintf(ts[k].name, sizeof ts[k].name, fmt, idx); \
        ts[k].type = (ty); ts[k].ne[0] = (uint64_t)(c); ts[k].ne[1] = (uint64_t)(r); ts[k].ne[2] = (uint64_t)(e); \
        ts[k].is_norm = (norm); k++; \
    } while (0)
#define T(fmt, idx, ty, c, r, norm) T3(fmt, idx, ty, c, r, 0, norm)
    T("token_embd.weight%.0s", "", SYNTH_MIX, dim, n_vocab, 0);
    T("output_norm.weight%.0s", "", QTYPE_F32, dim, 1, 1);
    T("output.weight%.0s", "", SYNTH_MIX, dim, n_vocab, 0);
    float rope_ff[256];
    if (sh->llama3_rope) {
        rope_llama3_factors(rope_ff, head_dim, sh->rope_base, 8.0f, 1.0f, 4.0f, 8192);
        T("rope_freqs.weight%.0s", "", QTYPE_F32, head_dim / 2, 1, 0);
        ts[k - 1].values = rope_ff;
    }
    for (int i = 0; i < n_layer; i++) {
        T("blk.%d.attn_norm.weight", i, QTYPE_F32, dim, 1, 1);
        T("blk.%d.attn_q.weight", i, SYNTH_MIX, dim, q_dim, 0);
        T("blk.%d.attn_k.weight", i, SYNTH_MIX, dim, kv_dim, 0);
        T("blk.%d.attn_v.weight", i, SYNTH_MIX, dim, kv_dim, 0);
        T("blk.%d.attn_output.weight", i, SYNTH_MIX, q_dim, dim, 0);
        if (qk_norm) {
            T("blk.%d.attn_q_norm.weight", i, QTYPE_F32, head_dim, 1, 1);
            T("blk.%d.attn_k_norm.weight", i, QTYPE_F32, head_dim, 1, 1);
        }
        T("blk.%d.ffn_norm.weight", i, QTYPE_F32, dim, 1, 1);
        if (moe) {
            /* the router stays f32 (llama.cpp never quantizes ffn_gate_inp); the experts take
             * the dense FFN's types by name (ffn_down_exps is an ffn_down to the mix) */
            const int E = sh->n_expert, ffe = sh->n_ff_exp;
            T("blk.%d.ffn_gate_inp.weight", i, QTYPE_F32, dim, E, 0);
            T3("blk.%d.ffn_gate_exps.weight", i, SYNTH_MIX, dim, ffe, E, 0);
            T3("blk.%d.ffn_up_exps.weight", i, SYNTH_MIX, dim, ffe, E, 0);
            T3("blk.%d.ffn_down_exps.weight", i, SYNTH_MIX, ffe, dim, E, 0);
        } else {
            T("blk.%d.ffn_gate.weight", i, SYNTH_MIX, dim, sh->n_ff, 0);
            T("blk.%d.ffn_up.weight", i, SYNTH_MIX, dim, sh->n_ff, 0);
            T("blk.%d.ffn_down.weight", i, SYNTH_MIX, sh->n_ff, dim, 0);
        }
    }
#undef T
#undef T3
    const synth_mix mix = { sq, n_layer, sh->n_head / sh->n_head_kv, sh->n_expert,
                            n_layer == 80 && sh->n_head_kv < sh->n_head };
    for (int i = 0; i < n_tensors; i++) {
        if (ts[i].type == SYNTH_MIX) ts[i].type = mix_type(&mix, ts[i].name, ts[i].ne[0]);
        uint32_t nd = ts[i].ne[2] ? 3 : ts[i].ne[1] == 1 ? 1 : 2;
        gguf_w_tensor(w, ts[i].name, ts[i].type, nd, ts[i].ne);
    }
    synth_job job = { ts, seed, n_threads, fast };
    mf_err err = { { 0 } };
    double t0 = mf_time_s();
    mf_log("synth: writing %s (%s, %s%s, %d layers, vocab %d) with %d threads", out, sh->name, quant,
           fast ? ", fast: random codes" : "", n_layer, n_vocab, n_threads);
    int rc = gguf_writer_write(w, out, fill_tensor, &job, &err);
    gguf_writer_free(w);
    free(ts);
    if (rc) return cli_error(2, "synth: %s", err.msg);
    mf_log("synth: done in %.1f s", mf_time_s() - t0);
    return 0;
}

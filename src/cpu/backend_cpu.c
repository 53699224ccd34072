/* backend_cpu.c - the CPU backend: mf_ops over host memory.
 *
 * KV cache: f32, per layer [n_seq][n_ctx][kv_dim]. Ops run the scalar reference
 * kernels of ref.c; faster kernels plug in here, per op, behind the same calls. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu.h"
#include "quant.h"

typedef struct cpu_state {
    int n_threads;
    const mf_model *m;
    int n_ctx, n_seq, n_batch;
    int kv_dim;
    float **k_cache, **v_cache;  /* [n_layer] -> [n_seq][n_ctx][kv_dim] */
    float *wrow;                 /* [max cols] dequantized weight row */
    float *att;                  /* [n_ctx] attention scores */
    float *normw;                /* [max dim] norm weight as f32 */
} cpu_state;

static cpu_state *st(mf_backend *be) { return be->impl; }

/* Norm and bias weights as f32: the mapping directly when already f32. */
static const float *weight_f32(cpu_state *s, const mf_weight *w) {
    if (w->type == QTYPE_F32) return w->host;
    cpu_weight_f32(w, s->normw);
    return s->normw;
}

static void op_embed(mf_backend *be, float *out, const mf_weight *w, const mf_batch *b) {
    const uint64_t row_bytes = qtype_row_size(w->type, (uint64_t)w->cols);
    for (int i = 0; i < b->n; i++)
        quant_dequantize_row(w->type, (const uint8_t *)w->host + (uint64_t)b->tok[i] * row_bytes,
                             out + (int64_t)i * w->cols, w->cols);
}

static void op_rmsnorm(mf_backend *be, float *out, const float *x, const mf_weight *w, int n, int dim, float eps) {
    cpu_ref_rmsnorm(out, x, weight_f32(st(be), w), n, dim, eps);
}

static void op_matmul(mf_backend *be, float *out, const float *x, const mf_weight *w, const mf_weight *bias, int n) {
    cpu_ref_matmul(out, (int)w->rows, x, w, bias, n, 0, w->rows, st(be)->wrow);
}

static void op_rope(mf_backend *be, float *x, const mf_batch *b, int n_heads, int head_dim, int rope_dim,
                    float base, mf_rope_mode mode) {
    cpu_ref_rope(x, b->pos, b->n, n_heads, head_dim, rope_dim, base, mode);
}

static void op_attention(mf_backend *be, float *out, const float *q, const float *k, const float *v, int layer,
                         const mf_batch *b) {
    cpu_state *s = st(be);
    const mf_hparams *hp = &s->m->hp;
    const int kv_dim = s->kv_dim, q_dim = hp->n_head * hp->head_dim;
    float *kc = s->k_cache[layer], *vc = s->v_cache[layer];
    /* Store first, so tokens of this batch see each other (causally, by pos). */
    for (int i = 0; i < b->n; i++) {
        int64_t row = (int64_t)b->seq[i] * s->n_ctx + b->pos[i];
        memcpy(kc + row * kv_dim, k + (int64_t)i * kv_dim, sizeof(float) * kv_dim);
        memcpy(vc + row * kv_dim, v + (int64_t)i * kv_dim, sizeof(float) * kv_dim);
    }
    for (int i = 0; i < b->n; i++) {
        int64_t base = (int64_t)b->seq[i] * s->n_ctx * kv_dim;
        cpu_ref_attention_token(out + (int64_t)i * q_dim, q + (int64_t)i * q_dim, kc + base, vc + base,
                                b->pos[i] + 1, hp->n_head, hp->n_head_kv, hp->head_dim, s->att);
    }
}

static void op_swiglu(mf_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    cpu_ref_swiglu(out, gate, up, n);
}

static void op_add(mf_backend *be, float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

static void op_get_rows(mf_backend *be, float *dst, const float *src, const int32_t *idx, int n_idx, int width) {
    for (int j = 0; j < n_idx; j++)
        memmove(dst + (int64_t)j * width, src + (int64_t)idx[j] * width, sizeof(float) * width);
}

static const mf_ops cpu_ops = {
    .embed = op_embed,
    .rmsnorm = op_rmsnorm,
    .matmul = op_matmul,
    .rope = op_rope,
    .attention = op_attention,
    .swiglu = op_swiglu,
    .add = op_add,
    .get_rows = op_get_rows,
};

static void *cpu_alloc(mf_backend *be, size_t nbytes) {
    size_t sz = (nbytes + 63) & ~(size_t)63;
    return aligned_alloc(64, sz ? sz : 64);
}

static void cpu_release(mf_backend *be, void *p) { free(p); }

static void cpu_download(mf_backend *be, void *dst, const void *src, size_t nbytes) {
    if (dst != src) memcpy(dst, src, nbytes);
}

static void free_caches(cpu_state *s) {
    if (!s->m) return;
    for (int l = 0; l < s->m->hp.n_layer; l++) {
        if (s->k_cache) free(s->k_cache[l]);
        if (s->v_cache) free(s->v_cache[l]);
    }
    free(s->k_cache);
    free(s->v_cache);
    free(s->wrow);
    free(s->att);
    free(s->normw);
    s->k_cache = s->v_cache = NULL;
    s->wrow = s->att = s->normw = NULL;
}

static int cpu_init(mf_backend *be, mf_model *m, int n_ctx, int n_seq, int n_batch, mf_err *err) {
    cpu_state *s = st(be);
    free_caches(s);
    const mf_hparams *hp = &m->hp;
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_seq = n_seq;
    s->n_batch = n_batch;
    s->kv_dim = hp->n_head_kv * hp->head_dim;
    uint64_t per_layer;
    if (mf_mul_u64((uint64_t)n_seq * (uint64_t)n_ctx, (uint64_t)s->kv_dim * sizeof(float), &per_layer))
        return mf_fail(err, MF_ERR_USAGE, "cpu: KV cache size overflows");
    s->k_cache = calloc((size_t)hp->n_layer, sizeof(float *));
    s->v_cache = calloc((size_t)hp->n_layer, sizeof(float *));
    int64_t max_cols = MF_MAX(MF_MAX(hp->n_embd, hp->n_ff), hp->n_head * hp->head_dim);
    s->wrow = malloc(sizeof(float) * (size_t)max_cols);
    s->normw = malloc(sizeof(float) * (size_t)max_cols);
    s->att = malloc(sizeof(float) * (size_t)n_ctx);
    if (!s->k_cache || !s->v_cache || !s->wrow || !s->normw || !s->att) goto oom;
    for (int l = 0; l < hp->n_layer; l++) {
        /* calloc: untouched pages cost nothing until a position is written. */
        s->k_cache[l] = calloc(1, per_layer);
        s->v_cache[l] = calloc(1, per_layer);
        if (!s->k_cache[l] || !s->v_cache[l]) goto oom;
    }
    return MF_OK;
oom:
    free_caches(s);
    return mf_fail(err, MF_ERR_NOMEM, "cpu: cannot allocate KV cache (%d layers x %llu bytes x 2)", hp->n_layer,
                   (unsigned long long)per_layer);
}

static void cpu_destroy(mf_backend *be) {
    if (!be) return;
    free_caches(st(be));
    free(be->impl);
    free(be);
}

static void cpu_kv_truncate(mf_backend *be, int seq, int from_pos) {}

mf_backend *cpu_backend_new(int n_threads, mf_err *err) {
    mf_backend *be = calloc(1, sizeof *be);
    cpu_state *s = calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        mf_fail(err, MF_ERR_NOMEM, "cpu: out of memory");
        return NULL;
    }
    s->n_threads = n_threads > 0 ? n_threads : 1;
    be->name = "cpu";
    be->ops = &cpu_ops;
    be->impl = s;
    be->init = cpu_init;
    be->destroy = cpu_destroy;
    be->alloc = cpu_alloc;
    be->release = cpu_release;
    be->download = cpu_download;
    be->forward = NULL;
    be->kv_truncate = cpu_kv_truncate;
    return be;
}

/* backend_cpu.c - the CPU backend: mf_ops over host memory.
 *
 * Paths, chosen once per backend from the table of paths_cpu.c and cpuid (one
 * stderr line names the kernel set that runs and the paths turned off):
 *   simd + packed   matmul: activations quantized to 8 bits (q8 blocks of 32 or
 *                   256, kernels.h), weights repacked at init into groups of 8
 *                   interleaved rows (pack.c), micro-kernels of 8 rows x 1-4 tokens
 *                   of the best kernel set the CPU has (avx512-vnni, avx512:
 *                   gemm_avx512*.c; avx2: gemm_avx2.c; all give the same bits);
 *                   for blocks of >= 8 tokens, q4_K/q5_K/q6_K groups are first
 *                   expanded once per block (the set's own expanded layout). f32/f16/bf16
 *                   weights use a 2 rows x 4 tokens float tile. Element-wise ops
 *                   and attention use the AVX2 kernels of ops_avx2.c.
 *   simd + rows     MINFER_CPU_DISABLE=repack: the same, but quantized weights
 *                   are read in place, one row x one token per dot (vdot_avx2.c).
 *   scalar          MINFER_CPU_DISABLE=avx2 (or all) or no AVX2/FMA/F16C: the
 *                   reference ops of ref.c (f32 activations), still threaded.
 * Every path splits work across the thread pool: matmuls by groups of output
 * rows (handed out dynamically), attention by (token, KV head), element-wise ops
 * by rows or elements. MINFER_CPU_PROFILE=1 prints time per op kind, the weight
 * bandwidth of the matmuls and a census of the matmul paths at exit.
 *
 * KV cache: per layer [n_seq][n_ctx] rows of kv_dim values, f32 by default; f16 or q8_0
 * (--cache-type-k / -v: cpu.h) are quantized at the store and dequantized a chunk of
 * rows at a time by the attention (the f32 arithmetic after that is the same). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend.h"
#include "cpu.h"
#include "kernels.h"
#include "paths_cpu.h"
#include "quant.h"
#include "threads.h"

/* Tokens per pass of the GEMM: the quantized activations of one pass (64 x cols
 * bytes) stay in L2 while a thread sweeps its row groups. */
#define GEMM_TOKEN_BLOCK 64
/* Element-wise work below this many values runs on the calling thread alone: a
 * dispatch costs about a microsecond, these ops cost less. */
#define SMALL_OP 16384

enum { PROF_MATMUL_1, PROF_MATMUL_N, PROF_ATTN, PROF_NORM, PROF_ROPE, PROF_SWIGLU, PROF_ADD, PROF_EMBED,
       PROF_COUNT };
static const char *const prof_name[PROF_COUNT] = { "matmul(n<4)", "matmul(n>=4)", "attention", "rmsnorm", "rope",
                                                   "swiglu", "add", "embed" };
#define PROF_BEGIN(s) const double prof_t0_ = (s)->profile ? mf_time_s() : 0.0
#define PROF_END(s, k) do { if ((s)->profile) { (s)->prof_s[k] += mf_time_s() - prof_t0_; (s)->prof_n[k]++; } } while (0)

/* Matmul paths, for the census: a fallback that is correct is invisible to a
 * parity test, so the profile counts which path each call took. */
enum { MM_PACKED, MM_EXPANDED, MM_ROWS_Q8, MM_ROWS_F, MM_SCALAR };
static const char *const mm_name[5] = { "x8-packed", "x8-packed+expanded (prefill)", "row dots q8",
                                        "float tiles", "scalar reference" };

/* Packed copies are keyed by the weight's bytes in the mapping (and checked
 * against its type and shape): weights are immutable while a backend lives. */
typedef struct packed_entry {
    const void *host;
    cpu_packed pk;
} packed_entry;

typedef struct cpu_state {
    int n_threads;
    cpu_pool *pool;
    int simd;                    /* 1: AVX2 kernels */
    int repack;                  /* 1: packed GEMM for quantized weights */
    const cpu_kernels *ks;       /* the packed GEMM kernel set (simd only) */
    const mf_model *m;
    int n_ctx, n_seq, n_batch;
    int kv_dim;
    int type_k, type_v;          /* cache element types: QTYPE_F32 (default), QTYPE_F16, QTYPE_Q8_0 */
    size_t row_k, row_v;         /* bytes of one position's K / V row (kv_dim values) */
    uint8_t **k_cache, **v_cache; /* [n_layer] -> [n_seq][n_ctx] rows of row_k / row_v bytes */
    float *kvbuf;                /* f16 / q8_0 caches: [n_threads][CPU_ATTN_CHUNK][head_dim] dequantized rows */
    int64_t max_cols;            /* widest activation row */
    float *wrow;                 /* [n_threads][max_cols] dequantized weight rows (scalar path) */
    float *att;                  /* [n_threads][group][n_ctx] attention scores */
    float *normw;                /* [max_cols] norm weight as f32 */
    float *bias_f32;             /* [bias_cap] a non-f32 bias as f32 */
    int64_t bias_cap;
    uint8_t *act;                /* quantized activations [n_batch][row bytes] */
    size_t act_cap;
    uint8_t *unp;                /* [n_threads][unp_stride] expanded weight groups (prefill) */
    size_t unp_stride;
    packed_entry *pk;            /* sorted by host */
    int n_pk, cap_pk;
    /* RoPE tables, one per RoPE (dims, base, scaling): two, as gemma3's sliding and
     * global layers alternate between two bases within a step */
    struct rope_tab {
        float *cs;               /* [n_ctx][rope_dim/2][2] cos, sin */
        uint8_t *ok;             /* [n_ctx] row computed */
        mf_rope r;               /* the RoPE it tabulates */
    } rope[2];
    int rope_next;               /* the slot the next new table replaces */
    int profile;                 /* MINFER_CPU_PROFILE=1: time per op kind, printed at destroy */
    double prof_s[PROF_COUNT];
    int64_t prof_n[PROF_COUNT];
    double prof_bytes;           /* weight bytes read by matmuls */
    int64_t census[5];           /* matmul calls per path (MM_*), printed with the profile */
} cpu_state;

static cpu_state *st(mf_backend *be) { return be->impl; }

/* ------------------------------------------------------------------------- */
/* Packed weights                                                            */
/* ------------------------------------------------------------------------- */

static packed_entry *pk_find(cpu_state *s, const void *host) {
    int lo = 0, hi = s->n_pk;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if ((uintptr_t)s->pk[mid].host < (uintptr_t)host) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->n_pk && s->pk[lo].host == host ? &s->pk[lo] : NULL;
}

typedef struct pack_task {
    const cpu_packed *pk;
    const void *host;
} pack_task;

static void pack_run(void *ctx, int ith, int nth) {
    const pack_task *t = ctx;
    int64_t g0, g1;
    cpu_split(t->pk->n_groups, 1, ith, nth, &g0, &g1);
    cpu_pack_groups(t->pk, t->host, g0, g1);
}

static const cpu_packed *pk_fill(cpu_state *s, packed_entry *e, const mf_weight *w);

/* The packed copy of w, created on first use; NULL when w has no packed layout
 * or memory ran out (then the caller takes the row path). */
static const cpu_packed *pk_get(cpu_state *s, const mf_weight *w) {
    if (!s->repack || !w->host || !s->ks->gemm(w->type) || w->rows < 1) return NULL;
    packed_entry *e = pk_find(s, w->host);
    if (e && e->pk.type == w->type && e->pk.rows == w->rows && e->pk.cols == w->cols)
        return e->pk.data ? &e->pk : NULL;
    if (e) {
        /* Same address, another tensor (a caller reused its buffer): repack. */
        free(e->pk.data);
        e->pk.data = NULL;
        if (cpu_pack_init(&e->pk, w->type, w->rows, w->cols) != 0) return NULL;
        return pk_fill(s, e, w);
    }
    if (s->n_pk == s->cap_pk) {
        s->cap_pk = s->cap_pk ? 2 * s->cap_pk : 64;
        s->pk = mf_xrealloc(s->pk, sizeof *s->pk * (size_t)s->cap_pk);
    }
    int pos = 0;
    while (pos < s->n_pk && (uintptr_t)s->pk[pos].host < (uintptr_t)w->host) pos++;
    memmove(&s->pk[pos + 1], &s->pk[pos], sizeof *s->pk * (size_t)(s->n_pk - pos));
    s->n_pk++;
    e = &s->pk[pos];
    e->host = w->host;
    if (cpu_pack_init(&e->pk, w->type, w->rows, w->cols) != 0) return NULL;
    return pk_fill(s, e, w);
}

static const cpu_packed *pk_fill(cpu_state *s, packed_entry *e, const mf_weight *w) {
    const size_t bytes = ((size_t)e->pk.n_groups * e->pk.group_bytes + 63) & ~(size_t)63;
    /* Decode streams every packed byte once per token: large copies are 2 MB
     * aligned and asked for 2 MB pages (fewer TLB misses). madvise needs a
     * page-aligned start: with the 64-byte alignment this used before, it failed
     * (EINVAL) and no weight got a huge page (AnonHugePages 0 kB, 1B model). */
    const size_t huge = (size_t)2 << 20;
    const int want_huge = bytes >= 2 * huge;
    e->pk.data = want_huge ? aligned_alloc(huge, (bytes + huge - 1) & ~(huge - 1)) : aligned_alloc(64, bytes);
    if (!e->pk.data) {
        mf_log_once(pk_oom, "cpu: cannot allocate %zu bytes to repack %s; using the row kernels for it", bytes,
                    w->name ? w->name : "a weight");
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (want_huge && madvise(e->pk.data, (bytes + huge - 1) & ~(huge - 1), MADV_HUGEPAGE) != 0)
        mf_log_once(pk_thp, "cpu: madvise(MADV_HUGEPAGE) on packed weights failed; 4 KB pages");
#endif
    pack_task t = { &e->pk, w->host };
    cpu_pool_run(s->pool, pack_run, &t, 0);
    return &e->pk;
}

static void pk_free_all(cpu_state *s) {
    for (int i = 0; i < s->n_pk; i++) free(s->pk[i].pk.data);
    free(s->pk);
    s->pk = NULL;
    s->n_pk = s->cap_pk = 0;
}

/* ------------------------------------------------------------------------- */
/* Matmul                                                                    */
/* ------------------------------------------------------------------------- */

typedef struct mm_task {
    cpu_state *s;
    float *out;
    const float *x;
    const mf_weight *w;
    const float *bias;           /* [rows] f32 or NULL */
    int n;
    const cpu_packed *pk;        /* packed path */
    cpu_gemm_fn gemm;
    cpu_gemm_fn gemm_unp;        /* pre-unpacked variant for blocks of >= ks->unpack_min tokens */
    const cpu_kernels *ks;       /* the set both belong to (its unpack_group) */
    int unp_nt;                  /* its tokens per call */
    int gemm_nt;                 /* tokens per call of the packed kernel */
    cpu_act act_kind;            /* activations to quantize (CPU_ACT_F32: none) */
    const uint8_t *act;
    size_t act_stride;
    int64_t chunk;               /* row groups per work item */
    _Atomic int64_t next;        /* next work item (dynamic schedule) */
} mm_task;

static void quantize_rows(const mm_task *t, int t0, int t1) {
    const int64_t cols = t->w->cols;
    for (int i = t0; i < t1; i++) {
        const float *x = t->x + (int64_t)i * cols;
        uint8_t *dst = (uint8_t *)t->act + (size_t)i * t->act_stride;
        if (t->act_kind == CPU_ACT_Q8A32) cpu_quantize_q8a32_avx2(x, (block_q8a32 *)dst, cols);
        else cpu_quantize_q8a256_avx2(x, (block_q8a256 *)dst, cols);
    }
}

/* The activations of a large batch are quantized by the pool in a task of their own,
 * before the matmul's task, not in the matmul task behind a barrier: a barrier makes
 * part 0 wait for every other part to be running, so on a shared machine each matmul
 * of a step waited for a preempted worker's next time slice (milliseconds), and the
 * pool's late-worker check never fired, since the wait happened inside part 0
 * (SmolLM2 Q4_1 pp16 beside 6 busy processes: 23.6 tok/s on 2 threads against 238 on
 * one; bench/RESULTS.md, 'CPU prefill under load'). */
static void mm_quant_task(void *ctx, int ith, int nth) {
    const mm_task *t = ctx;
    int64_t t0, t1;
    cpu_split(t->n, 1, ith, nth, &t0, &t1);
    quantize_rows(t, (int)t0, (int)t1);
}

/* Work items are (token block, chunk of row groups), handed out by an atomic
 * counter: a thread that runs ahead (the other core is busy with something else,
 * or its rows were cheaper) keeps streaming instead of waiting at the end. */
static void mm_packed(void *ctx, int ith, int nth) {
    mm_task *t = ctx;
    const cpu_packed *pk = t->pk;
    const int64_t rows = pk->rows, n_chunks = (pk->n_groups + t->chunk - 1) / t->chunk;
    const int64_t n_items = n_chunks * ((t->n + GEMM_TOKEN_BLOCK - 1) / GEMM_TOKEN_BLOCK);
    float tile[4][8];
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (item >= n_items) break;
        const int tb = (int)(item / n_chunks) * GEMM_TOKEN_BLOCK;
        const int te = MF_MIN(t->n, tb + GEMM_TOKEN_BLOCK);
        const int64_t g0 = (item % n_chunks) * t->chunk, g1 = MF_MIN(pk->n_groups, g0 + t->chunk);
        const int unpack = t->gemm_unp && te - tb >= t->ks->unpack_min;
        const int step = unpack ? t->unp_nt : t->gemm_nt;
        uint8_t *ub = unpack ? t->s->unp + (size_t)ith * t->s->unp_stride : NULL;
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t *gp = pk->data + (size_t)g * pk->group_bytes;
            const int nr = (int)MF_MIN(8, rows - 8 * g);
            if (unpack) t->ks->unpack_group(pk->type, gp, pk->cols, ub);
            for (int t0 = tb; t0 < te; t0 += step) {
                const int nt = MF_MIN(step, te - t0);
                if (unpack) t->gemm_unp(ub, pk->cols, t->act + (size_t)t0 * t->act_stride, t->act_stride, nt, tile);
                else t->gemm(gp, pk->cols, t->act + (size_t)t0 * t->act_stride, t->act_stride, nt, tile);
                for (int i = 0; i < nt; i++) {
                    float *o = t->out + (int64_t)(t0 + i) * rows + 8 * g;
                    if (t->bias)
                        for (int r = 0; r < nr; r++) o[r] = tile[i][r] + t->bias[8 * g + r];
                    else
                        memcpy(o, tile[i], sizeof(float) * (size_t)nr);
                }
            }
        }
    }
}

/* Row path: groups of 4 rows x 4 tokens; float weights through the float tile,
 * quantized ones through the row dot. */
static void mm_rows(void *ctx, int ith, int nth) {
    const mm_task *t = ctx;
    const mf_weight *w = t->w;
    const int64_t rows = w->rows, cols = w->cols;
    const uint64_t row_bytes = qtype_row_size(w->type, (uint64_t)cols);
    const cpu_vdot_fn vdot = cpu_vdot_avx2(w->type);
    int64_t r0, r1;
    cpu_split(rows, 4, ith, nth, &r0, &r1);
    for (int tb = 0; tb < t->n; tb += GEMM_TOKEN_BLOCK) {
        const int te = MF_MIN(t->n, tb + GEMM_TOKEN_BLOCK);
        for (int64_t r = r0; r < r1; r += 4) {
            const int nr = (int)MF_MIN(4, r1 - r);
            const uint8_t *wr = (const uint8_t *)w->host + (uint64_t)r * row_bytes;
            for (int t0 = tb; t0 < te; t0 += 4) {
                const int nt = MF_MIN(4, te - t0);
                float *o = t->out + (int64_t)t0 * rows + r;
                if (t->act_kind == CPU_ACT_F32) {
                    cpu_tile_float_avx2(w->type, cols, wr, row_bytes, nr, t->x + (int64_t)t0 * cols, cols, nt, o, rows);
                } else {
                    for (int i = 0; i < nt; i++)
                        for (int j = 0; j < nr; j++)
                            o[(int64_t)i * rows + j] = vdot(cols, wr + (uint64_t)j * row_bytes,
                                                            t->act + (size_t)(t0 + i) * t->act_stride);
                }
                if (t->bias)
                    for (int i = 0; i < nt; i++)
                        for (int j = 0; j < nr; j++) o[(int64_t)i * rows + j] += t->bias[r + j];
            }
        }
    }
}

static void mm_scalar(void *ctx, int ith, int nth) {
    const mm_task *t = ctx;
    int64_t r0, r1;
    cpu_split(t->w->rows, 1, ith, nth, &r0, &r1);
    if (r0 < r1)
        cpu_ref_matmul(t->out, (int)t->w->rows, t->x, t->w, NULL, t->n, r0, r1,
                       t->s->wrow + (int64_t)ith * t->s->max_cols);
    if (t->bias)
        for (int i = 0; i < t->n; i++)
            for (int64_t r = r0; r < r1; r++) t->out[(int64_t)i * t->w->rows + r] += t->bias[r];
}

static int ensure_act(cpu_state *s, size_t bytes) {
    if (bytes <= s->act_cap) return 0;
    uint8_t *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) return -1;
    free(s->act);
    s->act = p;
    s->act_cap = bytes;
    return 0;
}

static void matmul_run(cpu_state *s, float *out, const float *x, const mf_weight *w, const mf_weight *bias, int n);

/* Per-thread expansion scratch of at least `bytes` each. */
static int ensure_unp(cpu_state *s, size_t bytes) {
    if (bytes <= s->unp_stride) return 0;
    const size_t stride = (bytes + 63) & ~(size_t)63;
    uint8_t *p = aligned_alloc(64, stride * (size_t)cpu_pool_size(s->pool));
    if (!p) return -1;
    free(s->unp);
    s->unp = p;
    s->unp_stride = stride;
    return 0;
}

static void op_matmul(mf_backend *be, float *out, const float *x, const mf_weight *w, const mf_weight *bias, int n) {
    cpu_state *s = st(be);
    PROF_BEGIN(s);
    matmul_run(s, out, x, w, bias, n);
    PROF_END(s, n < 4 ? PROF_MATMUL_1 : PROF_MATMUL_N);
    if (s->profile) s->prof_bytes += (double)w->nbytes;
}

static void matmul_run(cpu_state *s, float *out, const float *x, const mf_weight *w, const mf_weight *bias, int n) {
    mm_task t = { .s = s, .out = out, .x = x, .w = w, .n = n };
    if (bias && bias->host && bias->cols < w->rows)
        mf_log_once(bias_short, "cpu: bias %s has %lld values for %lld rows; ignored", bias->name ? bias->name : "?",
                    (long long)bias->cols, (long long)w->rows);
    if (bias && bias->host && bias->cols >= w->rows) {
        if (bias->type == QTYPE_F32) {
            t.bias = bias->host;
        } else {
            /* Biases are small 1-D tensors: dequantized per call. */
            if (bias->cols > s->bias_cap) {
                float *p = realloc(s->bias_f32, sizeof(float) * (size_t)bias->cols);
                if (!p) mf_log_once(bias_oom, "cpu: cannot allocate a bias buffer; bias of %s ignored", w->name);
                else { s->bias_f32 = p; s->bias_cap = bias->cols; }
            }
            if (bias->cols <= s->bias_cap) {
                quant_dequantize_row(bias->type, bias->host, s->bias_f32, bias->cols);
                t.bias = s->bias_f32;
            }
        }
    }
    const int64_t work = (int64_t)n * w->rows * w->cols;
    const int nth = work < 65536 ? 1 : 0;
    if (!s->simd) {
        s->census[MM_SCALAR]++;
        cpu_pool_run(s->pool, mm_scalar, &t, nth);
        return;
    }
    t.act_kind = cpu_act_kind(w->type);
    if (t.act_kind != CPU_ACT_F32) {
        t.act_stride = cpu_act_row_size(t.act_kind, w->cols);
        if (ensure_act(s, t.act_stride * (size_t)n) != 0) {
            mf_log_once(act_oom, "cpu: cannot allocate activation scratch; using the scalar matmul");
            s->census[MM_SCALAR]++;
            cpu_pool_run(s->pool, mm_scalar, &t, nth);
            return;
        }
        t.act = s->act;
        /* Quantizing a few rows costs less than a dispatch; large batches share it. */
        if (n >= 8 && cpu_pool_size(s->pool) > 1 && nth == 0) cpu_pool_run(s->pool, mm_quant_task, &t, 0);
        else quantize_rows(&t, 0, n);
    }
    t.pk = pk_get(s, w);
    if (t.pk) {
        t.ks = s->ks;
        t.gemm = s->ks->gemm(w->type);
        t.gemm_nt = s->ks->gemm_nt(w->type);
        const size_t ub = s->ks->unpack_bytes(w->type, w->cols);
        /* Token blocks this long expand each weight group once (K-quants), where the
         * kernel set gains by it (cpu_kernels.unpack_min). */
        if (s->ks->unpack_min > 0 && n >= s->ks->unpack_min && ub && ensure_unp(s, ub) == 0) {
            t.gemm_unp = s->ks->gemm_unpacked(w->type);
            t.unp_nt = s->ks->gemm_unpacked_nt(w->type);
        }
        /* About 16 items per thread (but at least 64 KB of weights each) for
         * decode; prefill items are big anyway (a block of 64 tokens). */
        const int64_t nthr = cpu_pool_size(s->pool);
        const int64_t min_g = MF_MAX(1, (int64_t)(65536 / MF_MAX(1, (int64_t)t.pk->group_bytes)));
        t.chunk = MF_MAX(min_g, t.pk->n_groups / (16 * nthr));
        if (n >= 4) t.chunk = MF_MAX(1, t.pk->n_groups / (4 * nthr));
        s->census[t.gemm_unp ? MM_EXPANDED : MM_PACKED]++;
        cpu_pool_run(s->pool, mm_packed, &t, nth);
    } else if (t.act_kind == CPU_ACT_F32 || cpu_vdot_avx2(w->type)) {
        s->census[t.act_kind == CPU_ACT_F32 ? MM_ROWS_F : MM_ROWS_Q8]++;
        cpu_pool_run(s->pool, mm_rows, &t, nth);
    } else {
        s->census[MM_SCALAR]++;
        cpu_pool_run(s->pool, mm_scalar, &t, nth);
    }
}

/* ------------------------------------------------------------------------- */
/* Other ops                                                                 */
/* ------------------------------------------------------------------------- */

/* Norm and bias weights as f32: the mapping directly when already f32. */
static const float *weight_f32(cpu_state *s, const mf_weight *w) {
    if (w->type == QTYPE_F32) return w->host;
    cpu_weight_f32(w, s->normw);
    return s->normw;
}

static void op_embed(mf_backend *be, float *out, const mf_weight *w, const mf_batch *b) {
    PROF_BEGIN(st(be));
    const uint64_t row_bytes = qtype_row_size(w->type, (uint64_t)w->cols);
    for (int i = 0; i < b->n; i++)
        quant_dequantize_row(w->type, (const uint8_t *)w->host + (uint64_t)b->tok[i] * row_bytes,
                             out + (int64_t)i * w->cols, w->cols);
    PROF_END(st(be), PROF_EMBED);
}

typedef struct ew_task {
    cpu_state *s;
    float *out;
    const float *x, *y, *w;
    int n, dim;
    int64_t len;
    float eps;
} ew_task;

static void rmsnorm_run(void *ctx, int ith, int nth) {
    const ew_task *t = ctx;
    int64_t i0, i1;
    cpu_split(t->n, 1, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        if (t->s->simd)
            cpu_rmsnorm_avx2(t->out + i * t->dim, t->x + i * t->dim, t->w, t->dim, t->eps);
        else
            cpu_ref_rmsnorm(t->out + i * t->dim, t->x + i * t->dim, t->w, 1, t->dim, t->eps);
    }
}

static void op_rmsnorm(mf_backend *be, float *out, const float *x, const mf_weight *w, int n, int dim, float eps) {
    cpu_state *s = st(be);
    PROF_BEGIN(s);
    ew_task t = { .s = s, .out = out, .x = x, .w = weight_f32(s, w), .n = n, .dim = dim, .eps = eps };
    cpu_pool_run(s->pool, rmsnorm_run, &t, (int64_t)n * dim < SMALL_OP ? 1 : 0);
    PROF_END(s, PROF_NORM);
}

static void swiglu_run(void *ctx, int ith, int nth) {
    const ew_task *t = ctx;
    int64_t i0, i1;
    cpu_split(t->len, 64, ith, nth, &i0, &i1);
    if (i0 >= i1) return;
    if (t->s->simd) cpu_swiglu_avx2(t->out + i0, t->x + i0, t->y + i0, i1 - i0);
    else cpu_ref_swiglu(t->out + i0, t->x + i0, t->y + i0, i1 - i0);
}

static void op_swiglu(mf_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    cpu_state *s = st(be);
    PROF_BEGIN(s);
    ew_task t = { .s = s, .out = out, .x = gate, .y = up, .len = n };
    cpu_pool_run(s->pool, swiglu_run, &t, n < SMALL_OP ? 1 : 0);
    PROF_END(s, PROF_SWIGLU);
}

static void geglu_run(void *ctx, int ith, int nth) {
    const ew_task *t = ctx;
    int64_t i0, i1;
    cpu_split(t->len, 64, ith, nth, &i0, &i1);
    if (i0 >= i1) return;
    if (t->s->simd) cpu_geglu_avx2(t->out + i0, t->x + i0, t->y + i0, i1 - i0);
    else cpu_ref_geglu(t->out + i0, t->x + i0, t->y + i0, i1 - i0);
}

static void op_geglu(mf_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    cpu_state *s = st(be);
    PROF_BEGIN(s);
    ew_task t = { .s = s, .out = out, .x = gate, .y = up, .len = n };
    cpu_pool_run(s->pool, geglu_run, &t, n < SMALL_OP ? 1 : 0);
    PROF_END(s, PROF_SWIGLU);
}

/* Scale and soft-cap: once per step on the embeddings / logits (soft-capping 262k logits
 * costs ~2 ms of tanh), so plain loops on the calling thread. */
static void op_scale(mf_backend *be, float *x, float sc, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= sc;
}

static void op_softcap(mf_backend *be, float *x, float c, int64_t n) {
    const float inv = 1.0f / c;
    for (int64_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] * inv);
}

static void add_run(void *ctx, int ith, int nth) {
    const ew_task *t = ctx;
    int64_t i0, i1;
    cpu_split(t->len, 64, ith, nth, &i0, &i1);
    if (i0 >= i1) return;
    if (t->s->simd) {
        cpu_add_avx2(t->out + i0, t->y + i0, i1 - i0);
    } else {
        for (int64_t i = i0; i < i1; i++) t->out[i] += t->y[i];
    }
}

static void op_add(mf_backend *be, float *x, const float *y, int64_t n) {
    cpu_state *s = st(be);
    PROF_BEGIN(s);
    ew_task t = { .s = s, .out = x, .y = y, .len = n };
    cpu_pool_run(s->pool, add_run, &t, n < SMALL_OP ? 1 : 0);
    PROF_END(s, PROF_ADD);
}

/* RoPE: cos/sin per (position, pair) computed once by rope_cs, as cpu_ref_rope does,
 * cached per position (the same positions recur in every layer and every step). */
static const float *rope_row(struct rope_tab *r, int pos) {
    const int half = r->r.dim / 2;
    float *cs = r->cs + (int64_t)pos * r->r.dim;
    if (!r->ok[pos]) {
        for (int i = 0; i < half; i++) rope_cs(&r->r, pos, i, &cs[2 * i], &cs[2 * i + 1]);
        r->ok[pos] = 1;
    }
    return cs;
}

typedef struct rope_task {
    const struct rope_tab *r;
    float *x;
    const mf_batch *b;
    int n_heads, head_dim, rope_dim;
    mf_rope_mode mode;
} rope_task;

static void rope_run(void *ctx, int ith, int nth) {
    const rope_task *t = ctx;
    int64_t i0, i1;
    cpu_split(t->b->n, 1, ith, nth, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const float *cs = t->r->cs + (int64_t)t->b->pos[i] * t->rope_dim;
        for (int h = 0; h < t->n_heads; h++)
            cpu_rope_head_avx2(t->x + (i * t->n_heads + h) * t->head_dim, cs, t->rope_dim, t->mode == MF_ROPE_NEOX);
    }
}

static void rope_tab_free(struct rope_tab *r) {
    free(r->cs);
    free(r->ok);
    memset(r, 0, sizeof *r);
}

/* The table of RoPE rp, made in the older slot when neither holds it; NULL when memory
 * runs out (the caller takes the reference path). */
static struct rope_tab *rope_tab_get(cpu_state *s, const mf_rope *rp) {
    const int rope_dim = rp->dim;
    for (int i = 0; i < 2; i++)
        if (s->rope[i].cs && rope_equal(&s->rope[i].r, rp)) return &s->rope[i];
    struct rope_tab *r = &s->rope[s->rope_next];
    s->rope_next ^= 1;
    rope_tab_free(r);
    r->cs = malloc(sizeof(float) * (size_t)s->n_ctx * (size_t)rope_dim);
    r->ok = calloc((size_t)s->n_ctx, 1);
    if (!r->cs || !r->ok) {
        rope_tab_free(r);
        return NULL;
    }
    r->r = *rp;
    return r;
}

static void op_rope(mf_backend *be, float *x, const mf_batch *b, int n_heads, int head_dim, const mf_rope *rp) {
    cpu_state *s = st(be);
    PROF_BEGIN(s);
    struct rope_tab *r = s->simd && s->n_ctx > 0 ? rope_tab_get(s, rp) : NULL;
    int ok = r != NULL;
    for (int i = 0; ok && i < b->n; i++) ok = b->pos[i] >= 0 && b->pos[i] < s->n_ctx;
    if (!ok) {
        cpu_ref_rope(x, b->pos, b->n, n_heads, head_dim, rp);
    } else {
        for (int i = 0; i < b->n; i++) rope_row(r, b->pos[i]);
        rope_task t = { r, x, b, n_heads, head_dim, rp->dim, rp->mode };
        cpu_pool_run(s->pool, rope_run, &t, (int64_t)b->n * n_heads * head_dim < SMALL_OP ? 1 : 0);
    }
    PROF_END(s, PROF_ROPE);
}

typedef struct attn_task {
    cpu_state *s;
    float *out;
    const float *q;
    const mf_batch *b;
    int layer;
} attn_task;

static void attn_run(void *ctx, int ith, int nth) {
    const attn_task *t = ctx;
    cpu_state *s = t->s;
    const mf_hparams *hp = &s->m->hp;
    const int n_head = hp->n_head, hd = hp->head_dim, group = n_head / hp->n_head_kv;
    const int q_dim = n_head * hd;
    const uint8_t *kc = s->k_cache[t->layer], *vc = s->v_cache[t->layer];
    float *att = s->att + (int64_t)ith * s->n_ctx * group;
    float *buf = s->kvbuf ? s->kvbuf + (int64_t)ith * CPU_ATTN_CHUNK * hd : NULL;
    /* token i reads positions first(i) .. pos[i]: all of them, or the layer's window */
    const int win = model_layer_window(&s->m->desc, t->layer);
#define FIRST_POS(i) (win > 0 && t->b->pos[i] + 1 > win ? t->b->pos[i] + 1 - win : 0)
    if (!s->simd) {
        /* Reference: whole tokens. */
        int64_t i0, i1;
        cpu_split(t->b->n, 1, ith, nth, &i0, &i1);
        for (int64_t i = i0; i < i1; i++) {
            const int p0 = FIRST_POS(i);
            const int64_t row = (int64_t)t->b->seq[i] * s->n_ctx + p0;
            cpu_ref_attention_token_kv(t->out + i * q_dim, t->q + i * q_dim, kc + (size_t)row * s->row_k,
                                       vc + (size_t)row * s->row_v, s->type_k, s->type_v, t->b->pos[i] + 1 - p0,
                                       n_head, hp->n_head_kv, hd, att, buf);
        }
        return;
    }
    /* (token, KV head) items, each covering the group of query heads that share
     * the KV head; later tokens of a prompt attend to more positions, so items
     * are interleaved across threads rather than split in two halves. */
    const int n_kvh = hp->n_head_kv;
    const int64_t items = (int64_t)t->b->n * n_kvh;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t it = ith; it < items; it += nth) {
        const int64_t i = it / n_kvh;
        const int kh = (int)(it % n_kvh);
        const int p0 = FIRST_POS(i);
        const int64_t row = (int64_t)t->b->seq[i] * s->n_ctx + p0;
        const int64_t qo = i * q_dim + (int64_t)kh * group * hd;
        cpu_attn_group_kv_avx2(t->out + qo, t->q + qo, group, kc + (size_t)row * s->row_k, vc + (size_t)row * s->row_v,
                               s->type_k, s->type_v, s->row_k, s->row_v, kh * hd, t->b->pos[i] + 1 - p0, hd, scale, att,
                               buf);
    }
#undef FIRST_POS
}

static void op_attention(mf_backend *be, float *out, const float *q, const float *k, const float *v, int layer,
                         const mf_batch *b) {
    cpu_state *s = st(be);
    PROF_BEGIN(s);
    const int kv_dim = s->kv_dim;
    uint8_t *kc = s->k_cache[layer], *vc = s->v_cache[layer];
    /* Store first, so tokens of this batch see each other (causally, by pos). */
    for (int i = 0; i < b->n; i++) {
        const int64_t row = (int64_t)b->seq[i] * s->n_ctx + b->pos[i];
        cpu_kv_store_row(s->type_k, kc + (size_t)row * s->row_k, k + (int64_t)i * kv_dim, kv_dim);
        cpu_kv_store_row(s->type_v, vc + (size_t)row * s->row_v, v + (int64_t)i * kv_dim, kv_dim);
    }
    attn_task t = { s, out, q, b, layer };
    /* A single token with a short cache is cheaper alone than split. */
    int64_t work = 0;
    for (int i = 0; i < b->n; i++) work += (int64_t)(b->pos[i] + 1);
    work *= (int64_t)s->m->hp.n_head * s->m->hp.head_dim;
    cpu_pool_run(s->pool, attn_run, &t, work < SMALL_OP ? 1 : 0);
    PROF_END(s, PROF_ATTN);
}

static void op_get_rows(mf_backend *be, float *dst, const float *src, const int32_t *idx, int n_idx, int width) {
    for (int j = 0; j < n_idx; j++)
        memmove(dst + (int64_t)j * width, src + (int64_t)idx[j] * width, sizeof(float) * width);
}

/* out[t] = sum over slots j in order of w[t*k+j] * ys[rows[t*k+j]] (the product rounded to
 * f32 before each add, as ggml's mul then add) */
static void op_moe_combine(mf_backend *be, float *out, const float *ys, const int32_t *rows, const float *w, int n, int k,
                           int dim) {
    (void)be;
    for (int t = 0; t < n; t++) {
        float *o = out + (int64_t)t * dim;
        for (int j = 0; j < k; j++) {
            const float *y = ys + (int64_t)rows[t * k + j] * dim;
            const float wj = w[t * k + j];
            if (j == 0)
                for (int i = 0; i < dim; i++) o[i] = y[i] * wj;
            else
                for (int i = 0; i < dim; i++) {
                    const float p = y[i] * wj;
                    o[i] += p;
                }
        }
    }
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
    .geglu = op_geglu,
    .scale = op_scale,
    .softcap = op_softcap,
    .moe_combine = op_moe_combine,
};

/* ------------------------------------------------------------------------- */
/* Lifetime                                                                  */
/* ------------------------------------------------------------------------- */

static void *cpu_alloc(mf_backend *be, size_t nbytes) {
    size_t sz = (nbytes + 63) & ~(size_t)63;
    return aligned_alloc(64, sz ? sz : 64);
}

static void cpu_release(mf_backend *be, void *p) { free(p); }

static void cpu_download(mf_backend *be, void *dst, const void *src, size_t nbytes) {
    if (dst != src) memcpy(dst, src, nbytes);
}

static void free_caches(cpu_state *s) {
    if (s->m) {
        for (int l = 0; l < s->m->hp.n_layer; l++) {
            if (s->k_cache) free(s->k_cache[l]);
            if (s->v_cache) free(s->v_cache[l]);
        }
    }
    free(s->k_cache);
    free(s->v_cache);
    free(s->kvbuf);
    s->kvbuf = NULL;
    free(s->wrow);
    free(s->att);
    free(s->normw);
    free(s->bias_f32);
    s->bias_f32 = NULL;
    s->bias_cap = 0;
    free(s->act);
    free(s->unp);
    s->unp = NULL;
    s->unp_stride = 0;
    rope_tab_free(&s->rope[0]);
    rope_tab_free(&s->rope[1]);
    s->k_cache = s->v_cache = NULL;
    s->wrow = s->att = s->normw = NULL;
    s->act = NULL;
    s->act_cap = 0;
    pk_free_all(s);
}

/* Packs every matmul weight of the model up front (first use would otherwise
 * pay for it inside the first prompt). */
static void pack_model(cpu_state *s, const mf_model *m) {
    if (!s->repack) return;
    const double t0 = mf_time_s();
    uint64_t bytes = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const mf_layer *L = &m->layers[l];
        const mf_weight *ws[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn.gate, &L->ffn.up, &L->ffn.down };
        for (size_t i = 0; i < MF_ARRAY_LEN(ws); i++) {
            const cpu_packed *p = pk_get(s, ws[i]);
            if (p) bytes += (uint64_t)p->n_groups * p->group_bytes;
        }
    }
    const cpu_packed *p = pk_get(s, &m->output);
    if (p) bytes += (uint64_t)p->n_groups * p->group_bytes;
    if (mf_env_int("MINFER_VERBOSE", 0))
        fprintf(stderr, "minfer/cpu: repacked %.1f MB of weights in %.2f s\n", (double)bytes / 1e6, mf_time_s() - t0);
}

/* The cache type asked for K or V (MF_KV_DEFAULT: f32) -> *type and the bytes of a row of
 * kv_dim values; MF_ERR_USAGE where q8_0's blocks of 32 do not tile the row. */
static int kv_row_type(int want, const char *opt, int kv_dim, int *type, size_t *row, mf_err *err) {
    *type = want == MF_KV_DEFAULT ? QTYPE_F32 : want;
    if (*type != QTYPE_F32 && *type != QTYPE_F16 && *type != QTYPE_Q8_0)
        return mf_fail(err, MF_ERR_USAGE, "%s %s: not supported on the CPU backend (f32, f16 or q8_0)", opt,
                       kv_type_name(want));
    *row = (size_t)qtype_row_size((uint32_t)*type, (uint64_t)kv_dim);
    if (!*row)
        return mf_fail(err, MF_ERR_USAGE,
                       "%s %s: a cached row (the kv heads x head dim this backend holds: %d values) is not a "
                       "multiple of %u",
                       opt, kv_type_name(want), kv_dim, qtype_get((uint32_t)*type)->blck);
    return MF_OK;
}

static int cpu_init(mf_backend *be, mf_model *m, int n_ctx, int n_seq, int n_batch, const mf_kv_types *kvt,
                    mf_err *err) {
    cpu_state *s = st(be);
    free_caches(s);
    const mf_hparams *hp = &m->hp;
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_seq = n_seq;
    s->n_batch = n_batch;
    s->kv_dim = hp->n_head_kv * hp->head_dim;
    int rc;
    if ((rc = kv_row_type(kvt ? kvt->k : MF_KV_DEFAULT, "--cache-type-k", s->kv_dim, &s->type_k, &s->row_k, err)) ||
        (rc = kv_row_type(kvt ? kvt->v : MF_KV_DEFAULT, "--cache-type-v", s->kv_dim, &s->type_v, &s->row_v, err)))
        return rc;
    uint64_t per_layer_k, per_layer_v;
    if (mf_mul_u64((uint64_t)n_seq * (uint64_t)n_ctx, (uint64_t)s->row_k, &per_layer_k) ||
        mf_mul_u64((uint64_t)n_seq * (uint64_t)n_ctx, (uint64_t)s->row_v, &per_layer_v))
        return mf_fail(err, MF_ERR_USAGE, "cpu: KV cache size overflows");
    s->k_cache = calloc((size_t)hp->n_layer, sizeof(uint8_t *));
    s->v_cache = calloc((size_t)hp->n_layer, sizeof(uint8_t *));
    s->max_cols = MF_MAX(MF_MAX(hp->n_embd, hp->n_ff), hp->n_head * hp->head_dim);
    const size_t nt = (size_t)cpu_pool_size(s->pool);
    s->wrow = malloc(sizeof(float) * (size_t)s->max_cols * nt);
    s->normw = malloc(sizeof(float) * (size_t)s->max_cols);
    const int group = hp->n_head_kv > 0 ? hp->n_head / hp->n_head_kv : 1;
    s->att = malloc(sizeof(float) * (size_t)n_ctx * nt * (size_t)MF_MAX(group, 1));
    if (!s->k_cache || !s->v_cache || !s->wrow || !s->normw || !s->att) goto oom;
    if (s->type_k != QTYPE_F32 || s->type_v != QTYPE_F32) {
        s->kvbuf = malloc(sizeof(float) * CPU_ATTN_CHUNK * (size_t)MF_MAX(hp->head_dim, 1) * nt);
        if (!s->kvbuf) goto oom;
    }
    for (int l = 0; l < hp->n_layer; l++) {
        /* calloc: untouched pages cost nothing until a position is written. */
        s->k_cache[l] = calloc(1, per_layer_k);
        s->v_cache[l] = calloc(1, per_layer_v);
        if (!s->k_cache[l] || !s->v_cache[l]) goto oom;
    }
    if (s->simd && ensure_act(s, cpu_act_row_size(CPU_ACT_Q8A32, s->max_cols) * (size_t)MF_MAX(n_batch, 1)) != 0)
        goto oom;
    pack_model(s, m);
    be->kv_type_k = s->type_k;
    be->kv_type_v = s->type_v;
    if (mf_env_int("MINFER_VERBOSE", 0))
        fprintf(stderr, "minfer/cpu: KV cache K %s, V %s: %.1f MB\n", qtype_name((uint32_t)s->type_k),
                qtype_name((uint32_t)s->type_v), (double)(per_layer_k + per_layer_v) * hp->n_layer / 1e6);
    return MF_OK;
oom:
    free_caches(s);
    return mf_fail(err, MF_ERR_NOMEM, "cpu: cannot allocate KV cache (%d layers x %llu bytes K + %llu bytes V)",
                   hp->n_layer, (unsigned long long)per_layer_k, (unsigned long long)per_layer_v);
}

static void prof_print(const cpu_state *s) {
    double tot = 0.0;
    for (int k = 0; k < PROF_COUNT; k++) tot += s->prof_s[k];
    fprintf(stderr, "minfer/cpu: profile (%.3f s in ops)\n", tot);
    for (int k = 0; k < PROF_COUNT; k++)
        if (s->prof_n[k])
            fprintf(stderr, "minfer/cpu:   %-13s %8lld calls %9.3f s %5.1f%%  %8.1f us/call\n", prof_name[k],
                    (long long)s->prof_n[k], s->prof_s[k], 100.0 * s->prof_s[k] / (tot > 0 ? tot : 1),
                    1e6 * s->prof_s[k] / (double)s->prof_n[k]);
    for (int k = 0; k < 5; k++)
        if (s->census[k]) fprintf(stderr, "minfer/cpu:   matmul path %-28s %8lld calls\n", mm_name[k], (long long)s->census[k]);
    const double mt = s->prof_s[PROF_MATMUL_1] + s->prof_s[PROF_MATMUL_N];
    if (mt > 0) fprintf(stderr, "minfer/cpu:   matmul weight bytes %.2f GB, %.2f GB/s\n", s->prof_bytes / 1e9,
                        s->prof_bytes / mt / 1e9);
    const cpu_pool_stats ps = cpu_pool_get_stats(s->pool);
    fprintf(stderr,
            "minfer/cpu:   pool: %lld tasks split over the threads, %lld on the caller alone (%lld solo periods); "
            "%lld waits for a worker's part, %.3f s in all, %lld late\n",
            (long long)ps.parallel_tasks, (long long)ps.solo_tasks, (long long)ps.solo_periods, (long long)ps.waits,
            ps.wait_s, (long long)ps.late);
}

static void cpu_destroy(mf_backend *be) {
    if (!be) return;
    if (st(be)->profile) prof_print(st(be));
    free_caches(st(be));
    cpu_pool_free(st(be)->pool);
    free(be->impl);
    free(be);
}

static void cpu_kv_truncate(mf_backend *be, int seq, int from_pos) {}

mf_backend *cpu_backend_new(int n_threads, mf_err *err) {
    cpu_choice ch;
    if (cpu_choose(&ch, err) != MF_OK) return NULL;
    mf_backend *be = calloc(1, sizeof *be);
    cpu_state *s = calloc(1, sizeof *s);
    if (!be || !s) {
        free(be);
        free(s);
        mf_fail(err, MF_ERR_NOMEM, "cpu: out of memory");
        return NULL;
    }
    s->pool = cpu_pool_new(n_threads);
    s->n_threads = cpu_pool_size(s->pool);
    s->simd = ch.simd;
    s->repack = ch.repack;
    s->ks = ch.kernels;
    s->profile = mf_env_int("MINFER_CPU_PROFILE", 0) != 0;
    static int said;
    if (!said && !mf_log_quiet) { /* -q/--quiet: no notice line */
        said = 1;
        char off[160] = "";
        if (ch.disabled[0]) snprintf(off, sizeof off, ", disabled: %s", ch.disabled);
        /* The row path runs no packed kernel: its dots are AVX2 whatever the CPU. */
        char gemm[128] = "row dots, q8 activations";
        if (s->repack && s->ks->unpack_min > 0)
            snprintf(gemm, sizeof gemm, "x8-packed (8 rows x 1-4 tokens; q4_K/q5_K/q6_K expanded for >= %d tokens), q8 activations",
                     s->ks->unpack_min);
        else if (s->repack)
            snprintf(gemm, sizeof gemm, "x8-packed (8 rows x 1-4 tokens), q8 activations");
        if (s->simd)
            fprintf(stderr, "minfer/cpu: %s kernels, %d thread%s, gemm=%s%s\n", s->repack ? s->ks->name : "avx2",
                    s->n_threads, s->n_threads == 1 ? "" : "s", gemm, off);
        else
            fprintf(stderr, "minfer/cpu: scalar reference kernels, %d thread%s (%s)%s\n", s->n_threads,
                    s->n_threads == 1 ? "" : "s", ch.on[CPU_PATH_AVX2] ? "no AVX2/FMA/F16C on this CPU" : "avx2 off", off);
    }
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

/* plan.c - the CUDA blocks' planner (plan.h). Host-only C: every rule here is the one the
 * blocks used to evaluate on each call (blocks.cu before the plan); the launchers keep
 * only the refusals the plan names (cu_stage.may_refuse). */
#include "cuda/plan.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "util.h"

/* the GEMV's widest launch, the mmf thresholds (common.cuh: CU_MMV_MAXCOLS, CU_MMF_MIN_N,
 * CU_MMF_COLS_MIN/MAX; blocks.cu and tests/cuda check they agree) */
enum { GEMV_COLS = 8, MMF_MIN_N = 128, MMF_COLS_MIN = 8, MMF_COLS_MAX = 8 };

/* ------------------------------------------------------------------ buckets */

cu_bucket cu_bucket_of(int n) {
    return n <= 1 ? CU_BK_1 : n < 8 ? CU_BK_2_7 : n == 8 ? CU_BK_8 : n < MMF_MIN_N ? CU_BK_9_127 : CU_BK_128;
}

const char *cu_bucket_name(cu_bucket b) {
    static const char *names[CU_N_BUCKETS] = { "1", "2-7", "8", "9-127", "128+" };
    return b < CU_N_BUCKETS ? names[b] : "?";
}

int cu_bucket_width(cu_bucket b) {
    static const int w[CU_N_BUCKETS] = { 1, 2, 8, 9, MMF_MIN_N };
    return w[b];
}

/* ------------------------------------------------------------------ device classes */

/* Shared memory a block may opt in to: A100 163 KiB, H100 227 KiB, RTX 5090 99 KiB. */
static const cu_device_class classes[] = {
    { "sm_80", 800, 108, 166912 },
    { "sm_90", 900, 132, 232448 },
    { "sm_120", 1200, 170, 101376 },
};

const cu_device_class *cu_device_class_named(const char *name) {
    for (size_t i = 0; name && i < MF_ARRAY_LEN(classes); i++)
        if (!strcmp(classes[i].name, name)) return &classes[i];
    return NULL;
}

const char *cu_device_class_names(void) { return "sm_80, sm_90, sm_120"; }

/* measured from the tile templates (a host program calling cu_mmv_xst_smem_need,
 * cu_mmq_smem_need, cu_mmf_tma_smem_need, cu_attn_flash_smem_need(128, 1) and (256, 0));
 * the CUDA backend uses the launchers' own values and tests/cuda/test_cuda_ops.c checks
 * that these agree */
const cu_kernel_needs cu_kernel_needs_table = { 99328, 163840, 219136, 69632, 101376 };

/* ------------------------------------------------------------------ capabilities */

int cu_cap_mmq(uint32_t type, long long K) {
    return (type == QTYPE_Q4_K || type == QTYPE_Q6_K || type == QTYPE_Q8_0) && K > 0 && K % 256 == 0;
}

int cu_cap_mmf(uint32_t type, long long K) { return (type == QTYPE_Q4_K || type == QTYPE_Q6_K) && K > 0 && K % 256 == 0; }

int cu_cap_gemv_q8(uint32_t type) {
    switch (type) {
    case QTYPE_Q4_0: case QTYPE_Q4_1: case QTYPE_Q5_0: case QTYPE_Q5_1: case QTYPE_Q8_0:
    case QTYPE_Q4_K: case QTYPE_Q5_K: case QTYPE_Q6_K:
        return 1;
    default:
        return 0;
    }
}

int cu_cap_gemv_mixed(uint32_t t1, uint32_t t2) { return (t1 == QTYPE_Q4_K || t1 == QTYPE_Q5_K) && t2 == QTYPE_Q6_K; }

int cu_cap_attn_dec(const cu_plan_env *e, int hd, int group, int window) {
    if (hd == 64 || hd == 128) return window == 0 || e->on[CU_PATH_ATTN_DEC_WIDE];
    return hd == 256 && group <= 4 && e->on[CU_PATH_ATTN_DEC_WIDE];
}

int cu_cap_flash(const cu_plan_env *e, int hd) { return hd == 64 || hd == 128 || (hd == 256 && e->flash256); }

/* The weight types the CUDA kernels decode (dequant.cuh); a model holding another is
 * refused at upload with a message naming the tensor and its type. q2_K, q3_K, iq4_nl
 * and iq4_xs have no q8 GEMV or MMQ kernel yet: they take the generic paths (the f32
 * GEMV, the f16 GEMM of dequantized rows). */
static int cu_type_known(uint32_t type) {
    switch (type) {
    case QTYPE_F32: case QTYPE_F16: case QTYPE_BF16: case QTYPE_Q4_0: case QTYPE_Q4_1: case QTYPE_Q5_0:
    case QTYPE_Q5_1: case QTYPE_Q8_0: case QTYPE_Q4_K: case QTYPE_Q5_K: case QTYPE_Q6_K: case QTYPE_Q2_K:
    case QTYPE_Q3_K: case QTYPE_IQ4_NL: case QTYPE_IQ4_XS:
        return 1;
    default:
        return 0;
    }
}

long long cu_plan_row_stride(uint32_t type, long long K) {
    const qtype_traits *tr = qtype_get(type);
    if (!tr || !tr->supported || !cu_type_known(type) || K % tr->blck) return 0;
    const long long b = K / tr->blck * tr->type_size;
    return (b + 15) & ~15LL;
}

long long cu_plan_mmf_plane_bytes(uint32_t type, int rows, int K) {
    return (long long)((rows + 15) / 16) * (K / 32) * (type == QTYPE_Q6_K ? 576 : 320);
}

/* ------------------------------------------------------------------ environment */

void cu_plan_env_init(cu_plan_env *e, const unsigned char *on_in, const cu_device_class *d, const cu_kernel_needs *k,
                      const cu_tune *t) {
    memset(e, 0, sizeof *e);
    unsigned char *on = e->on;
    memcpy(on, on_in, CU_PATH_COUNT);
    e->code_arch = d->code_arch;
    e->pdl = on[CU_PATH_PDL] && d->code_arch >= 900;
    /* the TMA ring needs sm_90 code, room for its shared memory (not on 99 KB parts) and a
     * tuning row that measured it */
    e->xst_off = d->code_arch < 900 || d->smem_optin < k->xst_smem || t->xst_bytes < 0;
    if (e->xst_off) on[CU_PATH_TMA_RING] = on[CU_PATH_WIDE_RING] = 0;
    /* the MMQ tiles need ~110 KB a block: not on 99 KB parts (sm_120), labelled there */
    if (d->smem_optin < k->mmq_smem) {
        on[CU_PATH_MMQ] = 0;
        e->mmq_no_smem = 1;
    }
    if (!on[CU_PATH_TMA_RING]) on[CU_PATH_WIDE_RING] = 0;
    /* mmf's 8-column kernel on TMA rings (up to ~217 KB a block), else its register form */
    e->mmf_tma = d->code_arch >= 900 && d->smem_optin >= k->mmf_tma_smem;
    /* the fused launches (q8 stores, xstm, xsg, the folded add) exist only in the fused blocks */
    if (!on[CU_PATH_FUSED] || !on[CU_PATH_Q8]) on[CU_PATH_SWIGLU_GEMV] = on[CU_PATH_QKV_MIXED] = 0;
    if (!on[CU_PATH_FUSED]) on[CU_PATH_ADD_GEMV] = 0;
    if (!on[CU_PATH_TMA_RING]) on[CU_PATH_SWIGLU_GEMV] = on[CU_PATH_QKV_MIXED] = 0;
    if (!on[CU_PATH_SWIGLU_GEMV]) on[CU_PATH_XSG_SHARED] = 0;
    if (!on[CU_PATH_QKV_MIXED]) on[CU_PATH_XSTM_STAGED] = 0;
    if (!e->pdl) on[CU_PATH_ATTN_PRE] = 0; /* (only PDL makes reading early pay) */
    if (!on[CU_PATH_FLASH]) on[CU_PATH_FLASH_DB] = on[CU_PATH_FLASH_GQA] = 0;
    /* the double-buffered flash forms take 69.6 KB a block at head dim 128, head dim 256
     * 101 KB (not on 99 KB parts: sm_120; those layers run the split kernel, attn=split) */
    if (d->smem_optin < k->flash128_db_smem) on[CU_PATH_FLASH_DB] = 0;
    e->flash256 = d->smem_optin >= k->flash256_smem;
}

/* ------------------------------------------------------------------ the upload's decisions */

int cu_plan_mmq_plane_on(const unsigned char *on, uint32_t type) {
    return on[CU_PATH_MMQ] && ((type == QTYPE_Q4_K && on[CU_PATH_MMQ_DSC]) || (type == QTYPE_Q6_K && on[CU_PATH_MMQ_EXP]));
}

/* (experts' tensors get no planes: their GEMMs run grouped on the raw weights, moe.cu) */
int cu_plan_wants_mmq_plane(const cu_plan_env *e, const mf_weight *w) {
    return cu_plan_mmq_plane_on(e->on, w->type) && cu_cap_mmq(w->type, w->cols) && w->rows <= INT32_MAX &&
           w->n_slices <= 1;
}

int cu_plan_wants_mmf_plane(const cu_plan_env *e, const mf_weight *w) {
    return e->on[CU_PATH_MMF] && cu_cap_mmf(w->type, w->cols) && 2 * w->rows <= INT32_MAX && w->n_slices <= 1;
}

int cu_plan_gu_pairable(const cu_plan_env *e, const mf_layer *L, int adjacent) {
    const mf_weight *g = &L->ffn.gate, *u = &L->ffn.up;
    return e->on[CU_PATH_MMQ_GU] && adjacent && L->ffn.n_expert <= 1 && g->host && u->host && g->host != u->host && g->type == u->type &&
           g->rows == u->rows && g->cols == u->cols && cu_cap_mmq(g->type, g->cols) && 2 * g->rows <= INT32_MAX;
}

static const mf_weight *layer_w(const mf_layer *L, int i) {
    const mf_weight *ws[CU_W_COUNT] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn.gate, &L->ffn.up, &L->ffn.down };
    return ws[i];
}

void cu_plan_facts_assume(cu_plan_facts *f, cu_plan_env *e, const mf_model *m, int n_batch) {
    memset(f, 0, sizeof *f);
    const mf_hparams *hp = &m->hp;
    f->n_layer = hp->n_layer;
    f->n_batch = n_batch;
    f->layer = mf_xcalloc((size_t)(hp->n_layer > 0 ? hp->n_layer : 1), sizeof(cu_layer_facts));
    for (int l = 0; l < hp->n_layer; l++)
        for (int i = 0; i < CU_W_COUNT; i++) {
            const mf_weight *w = layer_w(&m->layers[l], i);
            if (w->host && w->type != QTYPE_F32 && w->type != QTYPE_F16 && w->type != QTYPE_BF16) f->any_quant = 1;
        }
    if (m->output.host && m->output.type != QTYPE_F32 && m->output.type != QTYPE_F16 && m->output.type != QTYPE_BF16)
        f->any_quant = 1;
    /* backend.cu's scratch: the f16 GEMM's and MMQ's only for batches wider than a GEMV */
    f->q8h = e->on[CU_PATH_SWIGLU_GEMV];
    if (n_batch > GEMV_COLS && e->on[CU_PATH_MMA]) f->x16 = 1;
    else e->on[CU_PATH_MMA] = 0;
    if (n_batch > GEMV_COLS && e->on[CU_PATH_MMQ]) {
        f->mq = 1;
        f->mh = f->mh8 = e->on[CU_PATH_MMF];
    } else {
        e->on[CU_PATH_MMQ] = 0;
    }
    if (!e->on[CU_PATH_MMQ]) e->on[CU_PATH_MMF] = 0;
    f->moe_mq = m->desc.n_expert > 1 && e->on[CU_PATH_MMQ];
    /* upload.cu: tensors in collect_weights order, each 256-aligned, gate right before up;
     * the planes in layer order q, k, v, o, gate(+up), down */
    for (int l = 0; l < hp->n_layer; l++) {
        const mf_layer *L = &m->layers[l];
        cu_layer_facts *lf = &f->layer[l];
        const long long gb = cu_plan_row_stride(L->ffn.gate.type, L->ffn.gate.cols) * L->ffn.gate.rows;
        lf->gu_on = e->on[CU_PATH_MMQ] && cu_plan_gu_pairable(e, L, gb % 256 == 0);
        for (int i = 0; i < CU_W_COUNT; i++) {
            const mf_weight *w = layer_w(L, i);
            const int pair = lf->gu_on && (i == CU_W_GATE || i == CU_W_UP);
            if (!w->host) continue;
            const int mmq = e->on[CU_PATH_MMQ] && cu_plan_wants_mmq_plane(e, w);
            const int mmf = cu_plan_wants_mmf_plane(e, w);
            if (pair) {
                if (i == CU_W_GATE) lf->gu_plane = (unsigned char)mmq, lf->gu_mmf = (unsigned char)mmf;
                continue;
            }
            lf->plane[i] = (unsigned char)mmq;
            lf->mmf[i] = (unsigned char)mmf;
        }
        const long long qb = cu_plan_mmf_plane_bytes(L->wq.type, (int)L->wq.rows, (int)L->wq.cols);
        lf->qk_adjacent = lf->mmf[CU_W_Q] && lf->mmf[CU_W_K] && qb % 256 == 0;
    }
}

void cu_plan_facts_free(cu_plan_facts *f) {
    free(f->layer);
    f->layer = NULL;
}

/* ------------------------------------------------------------------ the rules */

typedef struct planner {
    const mf_model *m;
    const cu_plan_env *e;
    const cu_plan_facts *f;
    cu_plan *p;
} planner;

static int q8_fits(const planner *P, long long K) {
    return P->e->on[CU_PATH_Q8] && P->f->any_quant && K % 32 == 0;
}

static int gemv_q8(const cu_plan_env *e, const mf_weight *w) { return e->on[CU_PATH_Q8] && cu_cap_gemv_q8(w->type); }

static int mmq_takes(const cu_plan_env *e, const cu_plan_facts *f, const mf_weight *w, int n) {
    return e->on[CU_PATH_MMQ] && f->mq && n > GEMV_COLS && cu_cap_mmq(w->type, w->cols);
}

static int mmf_wants(const cu_plan_env *e, const cu_plan_facts *f, const mf_weight *w, int n) {
    return e->on[CU_PATH_MMF] && f->mh && cu_cap_mmf(w->type, w->cols) &&
           (n >= MMF_MIN_N || (e->on[CU_PATH_MMF_COLS] && n >= MMF_COLS_MIN && n <= MMF_COLS_MAX));
}

cu_mm cu_plan_mm(const cu_plan_env *e, const cu_plan_facts *f, const mf_weight *w, int has_mmf, int has_plane, int n) {
    const int mmf = has_mmf && mmf_wants(e, f, w, n);
    if (n <= GEMV_COLS && !mmf) return gemv_q8(e, w) ? CU_MM_GEMV_Q8 : CU_MM_GEMV_F32;
    if (mmf) return CU_MM_MMF;
    if (mmq_takes(e, f, w, n)) return has_plane && cu_plan_mmq_plane_on(e->on, w->type) ? CU_MM_MMQ_PLANE : CU_MM_MMQ;
    /* f32 weights stay f32 in prefill too (the f16 GEMM would round them) */
    if (e->on[CU_PATH_MMA] && w->type != QTYPE_F32 && f->x16) return CU_MM_F16;
    return CU_MM_GEMV_GROUPS;
}

/* a matrix run alone: its own planes (a gate+up pair's matrices have none of their own) */
static int mm_of(const planner *P, int l, int i, int n) {
    const cu_layer_facts *lf = &P->f->layer[l];
    return cu_plan_mm(P->e, P->f, layer_w(&P->m->layers[l], i), lf->mmf[i], lf->plane[i], n);
}

/* every listed matrix runs on path mmf (each has its plane) */
static int mmf_all(const planner *P, int l, const int *ws, int nw, int n) {
    const cu_layer_facts *lf = &P->f->layer[l];
    for (int i = 0; i < nw; i++)
        if (!lf->mmf[ws[i]] || !mmf_wants(P->e, P->f, layer_w(&P->m->layers[l], ws[i]), n)) return 0;
    return 1;
}

/* a layer's blocks over n <= 8 columns run as prefill blocks on mmf's column kernel */
static int mmf_cols_layer(const planner *P, int l, int n) {
    if (n > GEMV_COLS) return 0;
    static const int ws[] = { CU_W_Q, CU_W_K, CU_W_V, CU_W_O, CU_W_DOWN };
    if (!mmf_all(P, l, ws, (int)MF_ARRAY_LEN(ws), n)) return 0;
    const cu_layer_facts *lf = &P->f->layer[l];
    const mf_layer *L = &P->m->layers[l];
    const int gu = lf->gu_on ? lf->gu_mmf : lf->mmf[CU_W_GATE] && lf->mmf[CU_W_UP];
    return gu && mmf_wants(P->e, P->f, &L->ffn.gate, n) && mmf_wants(P->e, P->f, &L->ffn.up, n);
}

static int gu_one_gemm(const planner *P, int l, int n) {
    const cu_layer_facts *lf = &P->f->layer[l];
    const mf_weight *g = &P->m->layers[l].ffn.gate;
    return lf->gu_on && ((lf->gu_mmf && mmf_wants(P->e, P->f, g, n)) || mmq_takes(P->e, P->f, g, n));
}

static int qk_one_gemm(const planner *P, int l, int n) {
    const cu_layer_facts *lf = &P->f->layer[l];
    const mf_layer *L = &P->m->layers[l];
    const mf_weight *q = &L->wq, *k = &L->wk;
    return P->e->on[CU_PATH_MMF_QK] && n < MMF_MIN_N && lf->mmf[CU_W_Q] && lf->mmf[CU_W_K] && q->type == k->type &&
           q->rows == k->rows && q->cols == k->cols && !L->bq.host && !L->bk.host && mmf_wants(P->e, P->f, q, n) &&
           2 * q->rows <= INT32_MAX && (q->rows % 16) == 0 && lf->qk_adjacent;
}

/* The prefill norm ahead of the GEMMs ws (norm_in_mq in blocks.cu): the int8 MMQ form where
 * any of them runs on the MMQ kernel (path mmq-norm), else the f16 form where all run on mmf
 * below 128 columns (path mmf-in), else f32. */
static cu_stage norm_gemm(const planner *P, int l, const int *ws, int nw, int mf, int n) {
    int any_mq = 0, all_mq = 1;
    for (int i = 0; i < nw; i++) {
        const mf_weight *w = layer_w(&P->m->layers[l], ws[i]);
        const int t = mmq_takes(P->e, P->f, w, n) && !mmf_wants(P->e, P->f, w, n);
        any_mq |= t;
        all_mq &= t;
    }
    cu_stage s = { CU_NORM_F32, CU_F_F32, 0, 0, 0 };
    if (!any_mq && mf && P->e->on[CU_PATH_MMF_IN] && n < MMF_MIN_N) {
        /* (the register-held norm refuses widths it does not fit: f32 then) */
        s = (cu_stage){ CU_NORM_MH, CU_F_F32 | CU_F_MH, 0, 1, CU_NORM_F32 };
    } else if (any_mq && P->e->on[CU_PATH_MMQ_NORM]) {
        /* (f32 too unless every GEMM reads int8; a width the fused kernel does not split:
         * the norm alone, the GEMMs' prepass after) */
        s = (cu_stage){ CU_NORM_MQ, (uint8_t)(CU_F_MQ | (all_mq ? 0 : CU_F_F32)), 0, 1, CU_NORM_F32 };
    }
    return s;
}

/* The norm ahead of GEMVs (and of the logits' matmul): its q8 too where it fits (up to 8
 * columns). (blocks.cu checked n * n_embd % 32; with any quantized matrix n_embd is a
 * multiple of 32, a row of one, so the two agree.) */
static cu_stage norm_gemv(const planner *P, int n) {
    const int q8 = n <= GEMV_COLS && q8_fits(P, P->m->hp.n_embd);
    return (cu_stage){ (uint8_t)(q8 ? CU_NORM_Q8 : CU_NORM_F32), (uint8_t)(CU_F_F32 | (q8 ? CU_F_Q8 : 0)), 0, 0, 0 };
}

/* what a GEMM stage converts itself: the form it reads where the producer wrote another */
static uint8_t converts(int mm, uint8_t have) {
    const int r = cu_mm_reads((cu_mm)mm);
    return (uint8_t)(have & r ? 0 : r);
}

/* A block's last product into the residual stream: into x in the GEMV's store where a
 * decode block has no post-norm and no ranks to sum first, else owed to the next norm
 * (with gemma3's post-norm folded in, or launched alone). */
static cu_res_kind residual(const planner *P, int decode, int post) {
    if (decode && !post && !P->f->tp) return P->e->on[CU_PATH_ADD_GEMV] ? CU_RES_IN_GEMV : CU_RES_OWED;
    if (post) return P->e->on[CU_PATH_POST_NORM_ADD] ? CU_RES_OWED_POST : CU_RES_POST_LAUNCH;
    return CU_RES_OWED;
}

static void plan_layer(const planner *P, int l, int n, cu_layer_plan *lp) {
    const mf_model *m = P->m;
    const mf_hparams *hp = &m->hp;
    const mf_arch_desc *d = &m->desc;
    const mf_layer *L = &m->layers[l];
    const cu_plan_env *e = P->e;
    const cu_layer_facts *lf = &P->f->layer[l];
    memset(lp, 0, sizeof *lp);
    const int decode = n <= GEMV_COLS && !mmf_cols_layer(P, l, n);
    lp->regime = decode ? CU_RG_GEMV : CU_RG_GEMM;
    for (int i = 0; i < CU_W_COUNT; i++) {
        lp->mm[i] = (uint8_t)mm_of(P, l, i, n);
        /* (8 columns of a layer that is not all on mmf's column kernel - an experts' layer -
         * run on the GEMVs, its matrices' planes unused) */
        if (decode && lp->mm[i] == CU_MM_MMF)
            lp->mm[i] = (uint8_t)cu_plan_mm(e, P->f, layer_w(L, i), 0, lf->plane[i], n);
    }
    const int hd = hp->head_dim, window = model_layer_window(d, l);
    const int post = d->post_norm, gelu = d->act == MF_ACT_GELU;

    /* ---- attention ---- */
    static const int qkv[3] = { CU_W_Q, CU_W_K, CU_W_V };
    lp->attn_norm = decode ? norm_gemv(P, n) : norm_gemm(P, l, qkv, 3, mmf_all(P, l, qkv, 3, n), n);
    const uint8_t xb = lp->attn_norm.writes;
    if (decode) {
        const int mixed = e->on[CU_PATH_QKV_MIXED] && n == 1 && gemv_q8(e, &L->wq) && gemv_q8(e, &L->wv) &&
                          L->wq.type == L->wk.type && L->wv.type != L->wq.type &&
                          cu_cap_gemv_mixed(L->wq.type, L->wv.type);
        lp->qkv.kind = mixed ? CU_QKV_MIXED : CU_QKV_RUNS;
        if (mixed) lp->mm[CU_W_V] = CU_MM_GEMV_Q8; /* (one launch: the run's form) */
        /* a run of one type reads the form of its first matrix (gemv_qkv) */
        if (!mixed) {
            if (L->wk.type == L->wq.type) lp->mm[CU_W_K] = lp->mm[CU_W_Q];
            if (L->wv.type == L->wk.type) lp->mm[CU_W_V] = lp->mm[CU_W_K];
        }
    } else {
        lp->qkv.kind = qk_one_gemm(P, l, n) ? CU_QKV_QK_ONE : CU_QKV_EACH;
    }
    lp->qkv.converts = (uint8_t)(converts(lp->mm[CU_W_Q], xb) | converts(lp->mm[CU_W_K], xb) | converts(lp->mm[CU_W_V], xb));
    lp->qkv.writes = CU_F_F32;
    /* (kernel_attn_dec reads the f16 cache only) */
    const int dec = n == 1 && !P->f->kv_q8 && cu_cap_attn_dec(e, hd, hp->n_head / hp->n_head_kv, window);
    lp->kv_q8 = (uint8_t)(P->f->kv_q8 != 0);
    lp->rope.kind = dec ? CU_ROPE_IN_ATTN : CU_ROPE_STORE;
    lp->qk_norm_in_attn = (uint8_t)(d->qk_norm && dec);
    const int att_q8 = decode && hd % 32 == 0 && q8_fits(P, (long long)hp->n_head * hd);
    static const int wo[1] = { CU_W_O };
    const int att_mh = !decode && n <= GEMV_COLS && e->on[CU_PATH_MMF_IN] && mmf_all(P, l, wo, 1, n);
    /* (the flash kernel serves prefill tiles; a decode graph of 9..64 sequences, captured,
     * runs the split kernel: blocks.cu attn_run) */
    lp->attn.kind = n > GEMV_COLS && e->on[CU_PATH_FLASH] && cu_cap_flash(e, hd) ? CU_ATT_FLASH : dec ? CU_ATT_DEC : CU_ATT_SPLIT;
    lp->attn.writes = (uint8_t)(CU_F_F32 | (att_q8 ? CU_F_Q8 : 0) | (att_mh ? CU_F_MH : 0));
    if (lp->attn.kind == CU_ATT_FLASH) lp->attn.may_refuse = 1, lp->attn.fallback = CU_ATT_SPLIT;
    /* the output projection and its residual add (down's the same) */
    const cu_res_kind res = residual(P, decode, post);
    lp->wo_res = (cu_stage){ (uint8_t)res, CU_F_F32, converts(lp->mm[CU_W_O], lp->attn.writes), 0, 0 };

    /* ---- FFN ---- */
    if (L->ffn.n_expert > 1) {
        /* experts (cu_plan_make sent what these kernels cannot take to the composed blocks):
         * the grouped MMQ from 128 columns where it takes both widths, else the GEMVs */
        const mf_ffn *F = &L->ffn;
        const int mmq = n >= MMF_MIN_N && e->on[CU_PATH_MMQ] && P->f->moe_mq && cu_cap_mmq(F->gate.type, F->gate.cols) &&
                        cu_cap_mmq(F->down.type, F->down.cols);
        lp->moe = (uint8_t)(mmq ? CU_MOE_MMQ : CU_MOE_GEMV);
        lp->mm[CU_W_GATE] = lp->mm[CU_W_UP] = lp->mm[CU_W_DOWN] = (uint8_t)(mmq ? CU_MM_MMQ : CU_MM_GEMV_Q8);
        lp->ffn_norm = decode ? norm_gemv(P, n) : (cu_stage){ CU_NORM_F32, CU_F_F32, 0, 0, 0 };
        lp->gu = (cu_stage){ (uint8_t)(mmq ? CU_GU_TWO_GEMM : CU_GU_PAIR_GEMV), CU_F_F32, 0, 0, 0 };
        lp->act = (cu_stage){ (uint8_t)(mmq ? CU_ACT_SWIGLU_MQ : CU_ACT_SWIGLU), (uint8_t)(mmq ? CU_F_MQ : CU_F_F32 | CU_F_Q8), 0, 0, 0 };
        /* (the weighted sum of each token's rows into a buffer: the add owed) */
        lp->down_res = (cu_stage){ (uint8_t)(res == CU_RES_IN_GEMV ? CU_RES_OWED : res), CU_F_F32, 0, 0, 0 };
        return;
    }
    const int gu1 = !decode && gu_one_gemm(P, l, n);
    static const int gu[2] = { CU_W_GATE, CU_W_UP };
    const int gu_mf = gu1 ? lf->gu_mmf && mmf_wants(e, P->f, &L->ffn.gate, n) : mmf_all(P, l, gu, 2, n);
    lp->ffn_norm = decode ? norm_gemv(P, n) : norm_gemm(P, l, gu, 2, gu_mf, n);
    const uint8_t xf = lp->ffn_norm.writes;
    const int ff = hp->n_ff;
    if (!decode) {
        const int down_mmf = lf->mmf[CU_W_DOWN] && mmf_wants(e, P->f, &L->ffn.down, n);
        if (gu1) /* one GEMM over the pair's planes */
            lp->mm[CU_W_GATE] = lp->mm[CU_W_UP] =
                (uint8_t)cu_plan_mm(e, P->f, &L->ffn.gate, lf->gu_mmf, lf->gu_plane, n);
        if (!gelu && n <= GEMV_COLS && gu1 && lf->gu_mmf && P->f->mh8 && e->on[CU_PATH_MMF_SWIGLU] &&
            mmf_wants(e, P->f, &L->ffn.gate, n) && down_mmf) {
            /* (the column kernel refuses without TMA rings, ff % 16, or a K it splits deep) */
            lp->gu = (cu_stage){ CU_GU_COLS_SWIGLU, CU_F_MH, converts(CU_MM_MMF, xf), 1, CU_GU_ONE_GEMM };
            lp->act = (cu_stage){ CU_ACT_IN_GU, CU_F_MH, 0, 1, CU_ACT_SWIGLU_MH };
        } else {
            lp->gu = (cu_stage){ (uint8_t)(gu1 ? CU_GU_ONE_GEMM : CU_GU_TWO_GEMM), CU_F_F32,
                                 (uint8_t)(converts(lp->mm[CU_W_GATE], xf) | converts(lp->mm[CU_W_UP], xf)), 0, 0 };
            if (gelu) lp->act = (cu_stage){ CU_ACT_GEGLU, CU_F_F32, 0, 0, 0 };
            else if (down_mmf) lp->act = (cu_stage){ CU_ACT_SWIGLU_MH, CU_F_MH, 0, 0, 0 };
            else if (mmq_takes(e, P->f, &L->ffn.down, n)) lp->act = (cu_stage){ CU_ACT_SWIGLU_MQ, CU_F_MQ, 0, 0, 0 };
            else lp->act = (cu_stage){ CU_ACT_SWIGLU, CU_F_F32, 0, 0, 0 };
        }
    } else {
        const int same = L->ffn.gate.type == L->ffn.up.type;
        const int h_q8 = q8_fits(P, ff);
        if (same) lp->mm[CU_W_UP] = lp->mm[CU_W_GATE]; /* (one launch: the gate's form) */
        const uint8_t hform = (uint8_t)(CU_F_F32 | (h_q8 ? CU_F_Q8 : 0));
        const uint8_t cv = (uint8_t)(converts(lp->mm[CU_W_GATE], xf) | converts(lp->mm[CU_W_UP], xf));
        if (!gelu && e->on[CU_PATH_SWIGLU_GEMV] && n == 1 && same && h_q8 && P->f->q8h && gemv_q8(e, &L->ffn.gate)) {
            /* (the launch refuses a bias, other shapes, launches below its ring's size:
             * the pair GEMV and the SwiGLU kernel then) */
            lp->gu = (cu_stage){ CU_GU_XSG, hform, cv, 1, CU_GU_PAIR_GEMV };
            lp->act = (cu_stage){ CU_ACT_IN_GU, hform, 0, 1, CU_ACT_SWIGLU };
        } else {
            lp->gu = (cu_stage){ (uint8_t)(same ? CU_GU_PAIR_GEMV : CU_GU_TWO_GEMV), CU_F_F32, cv, 0, 0 };
            lp->act = (cu_stage){ (uint8_t)(gelu ? CU_ACT_GEGLU : CU_ACT_SWIGLU), hform, 0, 0, 0 };
        }
    }
    lp->down_res = (cu_stage){ (uint8_t)res, CU_F_F32, converts(lp->mm[CU_W_DOWN], lp->act.writes), 0, 0 };
}

static void note(cu_plan *p, const char *fmt, const char *a) {
    const size_t len = strlen(p->fallbacks);
    if (len + 2 >= sizeof p->fallbacks) return;
    snprintf(p->fallbacks + len, sizeof p->fallbacks - len, fmt, a);
}

/* NULL when the experts' kernels (moe.cu) take every layer's experts, else why not: the
 * grouping kernel holds up to 256 experts and 32 chosen a token in a warp's registers; the
 * expert GEMVs read q8 (a type with a q8 GEMV, widths of whole 32-blocks). */
static const char *moe_refusal(const mf_model *m, const cu_plan_env *e, const cu_plan_facts *f) {
    if (m->desc.n_expert > 256 || m->desc.n_expert_used > 32) return "more than 256 experts or 32 used a token";
    if (f->tp) return "experts split over ranks";
    if (!e->on[CU_PATH_Q8]) return "experts without the q8 GEMV (path q8 off)";
    for (int l = 0; l < m->hp.n_layer; l++) {
        const mf_ffn *F = &m->layers[l].ffn;
        if (F->n_expert <= 1) continue;
        if (!cu_cap_gemv_q8(F->gate.type) || !cu_cap_gemv_q8(F->down.type)) return "experts of a type without a q8 GEMV";
        if (F->router.type != QTYPE_F32) return "a router not in f32";
        if (F->gate.cols % 32 || F->down.cols % 32) return "experts of widths that are not whole 32-value blocks";
    }
    return NULL;
}

void cu_plan_make(cu_plan *p, const mf_model *m, const cu_plan_env *e, const cu_plan_facts *f) {
    memset(p, 0, sizeof *p);
    p->n_layer = m->hp.n_layer;
    const mf_arch_desc *d = &m->desc;
    if (!e->on[CU_PATH_FUSED]) p->composed = "path fused off";
    else if (d->act != MF_ACT_SILU && d->act != MF_ACT_GELU) p->composed = "the model's FFN activation";
    else if (d->q_scale != 0) p->composed = "a q scale";
    else if (d->n_expert > 1) p->composed = moe_refusal(m, e, f);
    planner P = { m, e, f, p };
    for (int b = 0; b < CU_N_BUCKETS; b++) {
        const int n = cu_bucket_width((cu_bucket)b);
        p->live[b] = n <= (f->n_batch > 0 ? f->n_batch : 1);
        p->layer[b] = mf_xcalloc((size_t)(p->n_layer > 0 ? p->n_layer : 1), sizeof(cu_layer_plan));
        for (int l = 0; l < p->n_layer; l++) plan_layer(&P, l, n, &p->layer[b][l]);
        /* logits: the output matrix has no planes (one row a prompt on the GEMV) */
        cu_logits_plan *lg = &p->logits[b];
        lg->norm = norm_gemv(&P, n);
        lg->mm = (uint8_t)cu_plan_mm(e, f, &m->output, 0, 0, n);
    }
    if (e->mmq_no_smem) note(p, "%s", "mmq off: shared memory a block below the MMQ tiles' (prefill GEMMs on f16 tensor cores)\n");
    if (e->xst_off) note(p, "%s", "no TMA ring GEMVs (below sm_90 or too little shared memory): the register-fed GEMVs\n");
    if (!e->mmf_tma && e->on[CU_PATH_MMF]) note(p, "%s", "mmf's 8-column kernel in its register form (no TMA rings here)\n");
    if (!e->flash256 && m->hp.head_dim == 256) note(p, "%s", "head dim 256: the split attention in prefill (the flash kernel's 101 KB do not fit)\n");
    if (!e->on[CU_PATH_MMA] && f->n_batch > GEMV_COLS) note(p, "%s", "no f16 GEMM (path mma off)\n");
}

void cu_plan_free(cu_plan *p) {
    for (int b = 0; b < CU_N_BUCKETS; b++) {
        free(p->layer[b]);
        p->layer[b] = NULL;
    }
}

/* ------------------------------------------------------------------ printing */

const char *cu_mm_name(cu_mm k) {
    static const char *names[CU_MM_COUNT] = { "-", "gemv-q8", "gemv-f32", "mmf", "mmq", "mmq+plane", "f16-gemm", "gemv-f32x8" };
    return k < CU_MM_COUNT ? names[k] : "?";
}

int cu_mm_reads(cu_mm k) {
    switch (k) {
    case CU_MM_GEMV_Q8: return CU_F_Q8;
    case CU_MM_MMF: return CU_F_MH;
    case CU_MM_MMQ: case CU_MM_MMQ_PLANE: return CU_F_MQ;
    default: return CU_F_F32;
    }
}

static const char *forms(uint8_t f, char *buf) {
    buf[0] = 0;
    static const char *names[4] = { "f32", "q8", "mq", "mh" };
    for (int i = 0; i < 4; i++)
        if (f & (1 << i)) strcat(strcat(buf, buf[0] ? "+" : ""), names[i]);
    if (!buf[0]) strcpy(buf, "-");
    return buf;
}

static const char *norm_name(int k) { return (const char *[]){ "rmsnorm", "rmsnorm+q8", "rmsnorm+mmq-form", "rmsnorm+f16" }[k]; }
static const char *qkv_name(int k) { return (const char *[]){ "one xstm launch (mixed types)", "a GEMV launch per type run", "q+k one mmf launch, v", "three GEMMs" }[k]; }
static const char *att_name(int k) { return (const char *[]){ "one-token (dec)", "split", "flash" }[k]; }
static const char *res_name(int k) { return (const char *[]){ "add in the GEMV's store", "add owed to the next norm", "add and post-norm owed to the next norm", "post-norm launch, add owed" }[k]; }
static const char *gu_name(int k) { return (const char *[]){ "gate+up GEMV with SwiGLU in its store (xsg)", "gate+up one GEMV launch", "gate, up a GEMV each", "gate+up+SwiGLU one mmf column launch", "gate+up one GEMM", "gate, up a GEMM each" }[k]; }
static const char *act_name(int k) { return (const char *[]){ "in gate+up", "swiglu", "geglu", "swiglu+f16 prepass", "swiglu+mmq prepass" }[k]; }

static void print_attn(FILE *o, const cu_layer_plan *lp, const mf_layer *L) {
    char f1[32], f2[32], f3[32];
    fprintf(o, "      attn: %s -> %s | q/k/v %s/%s/%s, %s (%s, %s, %s)%s%s | rope %s%s | attn %s%s -> %s%s | wo %s, %s\n",
            norm_name(lp->attn_norm.kind), forms(lp->attn_norm.writes, f1), cu_mm_name(lp->mm[CU_W_Q]),
            cu_mm_name(lp->mm[CU_W_K]), cu_mm_name(lp->mm[CU_W_V]), qkv_name(lp->qkv.kind), qtype_name(L->wq.type),
            qtype_name(L->wk.type), qtype_name(L->wv.type), lp->qkv.converts ? ", converts to " : "",
            lp->qkv.converts ? forms(lp->qkv.converts, f2) : "",
            lp->rope.kind == CU_ROPE_IN_ATTN ? "in the attention kernel"
            : lp->kv_q8                      ? "a launch, then the q8_0 KV store"
                                             : "in the KV-store kernel",
            lp->qk_norm_in_attn ? " (q/k norms there too)" : "", att_name(lp->attn.kind),
            lp->kv_q8 ? " over q8_0 rows" : "", forms(lp->attn.writes, f3),
            lp->attn.may_refuse ? " (split when captured in a graph)" : "", cu_mm_name(lp->mm[CU_W_O]),
            res_name(lp->wo_res.kind));
}

static void print_ffn(FILE *o, const cu_layer_plan *lp, const mf_layer *L) {
    char f1[32], f2[32];
    if (lp->moe) {
        const mf_ffn *F = &L->ffn;
        fprintf(o, "      ffn:  %s -> %s | router gemv-f32 (%s) | top-%d of %d + grouping by expert (one kernel) | "
                   "experts: gate, up %s (%s), swiglu -> %s, down %s (%s), %s | weighted sum, %s\n",
                norm_name(lp->ffn_norm.kind), forms(lp->ffn_norm.writes, f1), qtype_name(F->router.type), F->n_used,
                F->n_expert, cu_mm_name(lp->mm[CU_W_GATE]), qtype_name(F->gate.type), forms(lp->act.writes, f2),
                cu_mm_name(lp->mm[CU_W_DOWN]), qtype_name(F->down.type),
                lp->moe == CU_MOE_MMQ ? "tiles of 64 rows of one expert" : "a block per (rows, expert), 8 columns a pass",
                res_name(lp->down_res.kind));
        return;
    }
    fprintf(o, "      ffn:  %s -> %s | %s, %s/%s (%s, %s)%s | act %s -> %s | down %s, %s\n", norm_name(lp->ffn_norm.kind),
            forms(lp->ffn_norm.writes, f1), gu_name(lp->gu.kind), cu_mm_name(lp->mm[CU_W_GATE]),
            cu_mm_name(lp->mm[CU_W_UP]), qtype_name(L->ffn.gate.type), qtype_name(L->ffn.up.type),
            !lp->gu.may_refuse ? ""
            : lp->gu.kind == CU_GU_XSG ? " (where it refuses: gate+up one GEMV launch, swiglu)"
                                       : " (where it refuses: gate+up one GEMM, swiglu+f16 prepass)",
            act_name(lp->act.kind), forms(lp->act.writes, f2), cu_mm_name(lp->mm[CU_W_DOWN]), res_name(lp->down_res.kind));
}

static void print_layer(FILE *o, const cu_layer_plan *lp, const mf_model *m, int l) {
    print_attn(o, lp, &m->layers[l]);
    print_ffn(o, lp, &m->layers[l]);
}

void cu_plan_print(const cu_plan *p, const mf_model *m, const cu_plan_env *e, const char *device, void *file) {
    FILE *o = file;
    fprintf(o, "plan for %s:\n", device);
    if (p->composed) {
        fprintf(o, "  forward.c's composed blocks, one kernel per op (%s)\n", p->composed);
        return;
    }
    char off[512];
    int on[CU_PATH_COUNT];
    for (int i = 0; i < CU_PATH_COUNT; i++) on[i] = e->on[i];
    if (paths_disabled(cu_paths, CU_PATH_COUNT, on, off, sizeof off)) fprintf(o, "  paths off: %s\n", off);
    for (int b = 0; b < CU_N_BUCKETS; b++) {
        fprintf(o, "  %s token%s%s:\n", cu_bucket_name((cu_bucket)b), b == CU_BK_1 ? "" : "s",
                p->live[b] ? "" : " (wider than the batch: not used)");
        if (!p->live[b]) continue;
        /* layers with the same plan printed once */
        for (int l = 0; l < p->n_layer; l++) {
            const cu_layer_plan *lp = &p->layer[b][l];
            int first = 1;
            for (int k = 0; k < l; k++)
                if (!memcmp(&p->layer[b][k], lp, sizeof *lp) && m->layers[k].wq.type == m->layers[l].wq.type &&
                    m->layers[k].wv.type == m->layers[l].wv.type && m->layers[k].ffn.down.type == m->layers[l].ffn.down.type)
                    first = 0;
            if (!first) continue;
            char ls[256];
            int len = 0;
            for (int k = l; k < p->n_layer && len < (int)sizeof ls - 8; k++)
                if (!memcmp(&p->layer[b][k], lp, sizeof *lp) && m->layers[k].wq.type == m->layers[l].wq.type &&
                    m->layers[k].wv.type == m->layers[l].wv.type && m->layers[k].ffn.down.type == m->layers[l].ffn.down.type)
                    len += snprintf(ls + len, sizeof ls - (size_t)len, "%s%d", len ? "," : "", k);
            fprintf(o, "    layers %s (%s):\n", ls, lp->regime == CU_RG_GEMV ? "GEMVs" : "GEMMs");
            print_layer(o, lp, m, l);
        }
        char b1[32];
        fprintf(o, "    logits: %s -> %s | output %s (%s)\n", norm_name(p->logits[b].norm.kind),
                forms(p->logits[b].norm.writes, b1), cu_mm_name(p->logits[b].mm), qtype_name(m->output.type));
    }
    if (p->fallbacks[0]) fprintf(o, "  fallbacks:\n%s", p->fallbacks);
}

void cu_plan_brief(const cu_plan *p, char *buf, int cap) {
    if (p->composed) {
        snprintf(buf, (size_t)cap, "composed (%s)", p->composed);
        return;
    }
    const cu_layer_plan *d = &p->layer[CU_BK_1][0], *g = &p->layer[CU_BK_128][0];
    const int live = p->live[CU_BK_128];
    snprintf(buf, (size_t)cap, "plan: decode %s/%s attn %s, prefill %s/%s%s attn %s (minfer info --plan)",
             cu_mm_name(d->mm[CU_W_Q]), d->moe ? "experts on grouped GEMVs" : gu_name(d->gu.kind), att_name(d->attn.kind),
             live ? cu_mm_name(g->mm[CU_W_Q]) : "-", live ? cu_mm_name(g->mm[CU_W_DOWN]) : "-",
             live && g->moe == CU_MOE_MMQ ? " (experts: grouped mmq)" : live && g->moe ? " (experts: grouped GEMVs)" : "",
             live ? att_name(g->attn.kind) : "-");
}

int cu_plan_print_for_class(const mf_model *m, const char *name, int n_batch, void *file, mf_err *err) {
    const cu_device_class *d = cu_device_class_named(name);
    if (!d) return mf_fail(err, MF_ERR_USAGE, "unknown device class '%s' (one of: %s)", name, cu_device_class_names());
    int on_int[CU_PATH_COUNT];
    int rc = paths_resolve(cu_paths, CU_PATH_COUNT, "MINFER_CUDA_DISABLE", on_int, err);
    if (rc) return rc;
    unsigned char on[CU_PATH_COUNT];
    for (int i = 0; i < CU_PATH_COUNT; i++) on[i] = (unsigned char)on_int[i];
    cu_plan_env e;
    cu_plan_env_init(&e, on, d, &cu_kernel_needs_table, cu_tune_for(d->code_arch));
    cu_plan_facts f;
    cu_plan_facts_assume(&f, &e, m, n_batch);
    cu_plan p;
    cu_plan_make(&p, m, &e, &f);
    char dev[192];
    snprintf(dev, sizeof dev, "%s (%d SMs, %lld KiB shared memory a block; batch %d; assumed: every allocation succeeds)",
             d->name, d->sms, d->smem_optin / 1024, n_batch);
    cu_plan_print(&p, m, &e, dev, file);
    cu_plan_free(&p);
    cu_plan_facts_free(&f);
    return 0;
}

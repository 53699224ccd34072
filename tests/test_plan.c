/* test_plan.c - the CUDA blocks' planner (src/cuda/plan.h), without a GPU: for each
 * architecture (llama, qwen2 with biases, gemma3 with head dim 256 and sliding layers) x
 * weight mix (q4_K_M's q4_K with q6_K v and down, q8_0, q4_0, f16, f32) x device class
 * (sm_80, sm_90, sm_120) x batch-width bucket, with every path on and with each path off:
 *   - the forms connect: every matrix reads a form its producer wrote, or makes it from an
 *     f32 copy the producer wrote (a GEMV's q8, an MMQ or mmf prepass);
 *   - the regimes follow the buckets (GEMVs up to 7 tokens, GEMMs from 9);
 *   - the choices follow the table of paths: a path turned off never appears, and the
 *     device-dependent ones only where the class takes them (no MMQ on sm_120's 99 KB,
 *     no TMA-ring launches below sm_90);
 *   - the fast paths appear where expected (a test that only checks absence could pass on
 *     an empty plan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/plan.h"
#include "model.h"
#include "quant.h"
#include "test.h"

enum { DIM = 2048, NL = 4 };

typedef struct mix {
    const char *name;
    uint32_t base, more; /* most matrices; v and down of every other layer (q4_K_M's q6_K), and output */
} mix;

static const mix MIXES[] = {
    { "q4_k_m", QTYPE_Q4_K, QTYPE_Q6_K }, { "q8_0", QTYPE_Q8_0, QTYPE_Q8_0 }, { "q4_0", QTYPE_Q4_0, QTYPE_Q6_K },
    { "f16", QTYPE_F16, QTYPE_F16 },       { "f32", QTYPE_F32, QTYPE_F32 },       { "q2_k", QTYPE_Q2_K, QTYPE_Q3_K },
    { "iq4_xs", QTYPE_IQ4_XS, QTYPE_Q6_K }, { "iq4_nl", QTYPE_IQ4_NL, QTYPE_Q6_K },
};

static char dummy[64];
static int n_dummy;

static void set_w(mf_weight *w, uint32_t type, int64_t cols, int64_t rows) {
    memset(w, 0, sizeof *w);
    w->type = type;
    w->cols = cols;
    w->rows = rows;
    w->host = dummy + n_dummy++ % 64; /* (distinct tensors: tied ones share their bytes) */
    w->name = "w";
}

/* An in-memory model of architecture arch (the planner reads the descriptor, the shapes
 * and the types only). */
static void make_model(mf_model *m, mf_arch arch, const mix *x) {
    memset(m, 0, sizeof *m);
    mf_hparams *hp = &m->hp;
    hp->arch = arch;
    hp->n_embd = DIM;
    hp->n_layer = NL;
    hp->n_ff = 5632;
    hp->n_vocab = 32000;
    const int gemma = arch == MF_ARCH_GEMMA3;
    hp->n_head = gemma ? 8 : 16;
    hp->n_head_kv = gemma || arch == MF_ARCH_QWEN2 ? 4 : 16; /* llama MHA (q and k of one shape), the others GQA */
    hp->head_dim = gemma ? 256 : 128;
    hp->rope_dim = hp->head_dim;
    hp->rope_base = 10000;
    model_arch_desc(arch, &m->desc);
    if (gemma) {
        m->desc.sliding_window = 512;
        m->desc.swa_every = 2;
    }
    m->layers = calloc(NL, sizeof(mf_layer));
    const int qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
    for (int l = 0; l < NL; l++) {
        mf_layer *L = &m->layers[l];
        const uint32_t v = l % 2 ? x->more : x->base;
        set_w(&L->wq, x->base, DIM, qd);
        set_w(&L->wk, x->base, DIM, kvd);
        set_w(&L->wv, v, DIM, kvd);
        set_w(&L->wo, x->base, qd, DIM);
        set_w(&L->ffn.gate, x->base, DIM, hp->n_ff);
        set_w(&L->ffn.up, x->base, DIM, hp->n_ff);
        set_w(&L->ffn.down, v, hp->n_ff, DIM);
        if (arch == MF_ARCH_QWEN2) {
            set_w(&L->bq, QTYPE_F32, qd, 1);
            set_w(&L->bk, QTYPE_F32, kvd, 1);
            set_w(&L->bv, QTYPE_F32, kvd, 1);
        }
    }
    set_w(&m->output, x->more, DIM, hp->n_vocab);
}

static const mf_weight *wof(const mf_layer *L, int i) {
    const mf_weight *ws[CU_W_COUNT] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn.gate, &L->ffn.up, &L->ffn.down };
    return ws[i];
}

/* the consumer reading form `reads` of a producer that wrote `writes` */
static int connects(int reads, int writes) { return (reads & writes) || (writes & CU_F_F32); }

typedef struct seen {
    int mm[CU_MM_COUNT], xsg, mixed, qk_one, cols_swiglu, gu_one, flash, dec, res_in_gemv, owed_post, norm_mq, norm_mh;
} seen;

static void check_plan(const char *what, const cu_plan *p, const mf_model *m, const cu_plan_env *e, seen *sn) {
    if (p->composed) return;
    int bad = 0;
    char where[160] = "";
    for (int b = 0; b < CU_N_BUCKETS; b++) {
        if (!p->live[b]) continue;
        const int n = cu_bucket_width((cu_bucket)b);
        for (int l = 0; l < p->n_layer; l++) {
            const cu_layer_plan *lp = &p->layer[b][l];
            const mf_layer *L = &m->layers[l];
#define BAD(...) do { if (!bad++) snprintf(where, sizeof where, __VA_ARGS__); } while (0)
            /* regimes */
            if (n < 8 && lp->regime != CU_RG_GEMV) BAD("bucket %s layer %d: GEMMs below 8 tokens", cu_bucket_name(b), l);
            if (n > 8 && lp->regime != CU_RG_GEMM) BAD("bucket %s layer %d: GEMVs above 8 tokens", cu_bucket_name(b), l);
            /* forms */
            for (int i = 0; i < 3; i++)
                if (!connects(cu_mm_reads((cu_mm)lp->mm[i]), lp->attn_norm.writes))
                    BAD("bucket %s layer %d: qkv[%d] %s after a norm writing %d", cu_bucket_name(b), l, i,
                        cu_mm_name((cu_mm)lp->mm[i]), lp->attn_norm.writes);
            if (!connects(cu_mm_reads((cu_mm)lp->mm[CU_W_O]), lp->attn.writes)) BAD("bucket %s layer %d: wo", cu_bucket_name(b), l);
            for (int i = CU_W_GATE; i <= CU_W_UP; i++)
                if (lp->gu.kind != CU_GU_COLS_SWIGLU && !connects(cu_mm_reads((cu_mm)lp->mm[i]), lp->ffn_norm.writes))
                    BAD("bucket %s layer %d: gate/up", cu_bucket_name(b), l);
            if (!connects(cu_mm_reads((cu_mm)lp->mm[CU_W_DOWN]), lp->act.writes))
                BAD("bucket %s layer %d: down %s after an activation writing %d", cu_bucket_name(b), l,
                    cu_mm_name((cu_mm)lp->mm[CU_W_DOWN]), lp->act.writes);
            /* an activation writing only its GEMM's form feeds a GEMM of that form */
            if (lp->act.kind == CU_ACT_SWIGLU_MH && lp->mm[CU_W_DOWN] != CU_MM_MMF) BAD("layer %d: f16 act, down not mmf", l);
            if (lp->act.kind == CU_ACT_SWIGLU_MQ && lp->mm[CU_W_DOWN] != CU_MM_MMQ && lp->mm[CU_W_DOWN] != CU_MM_MMQ_PLANE)
                BAD("layer %d: mmq act, down not mmq", l);
            /* the paths */
            for (int i = 0; i < CU_W_COUNT; i++) {
                const int k = lp->mm[i];
                sn->mm[k]++;
                if ((k == CU_MM_GEMV_Q8) && !e->on[CU_PATH_Q8]) BAD("gemv-q8 with path q8 off");
                if ((k == CU_MM_MMQ || k == CU_MM_MMQ_PLANE) && !e->on[CU_PATH_MMQ]) BAD("mmq with path mmq off");
                if (k == CU_MM_MMQ_PLANE && !cu_plan_mmq_plane_on(e->on, wof(L, i)->type)) BAD("mmq plane with its path off");
                if (k == CU_MM_MMF && !e->on[CU_PATH_MMF]) BAD("mmf with path mmf off");
                if (k == CU_MM_MMF && n == 8 && !e->on[CU_PATH_MMF_COLS]) BAD("mmf at 8 with mmf-cols off");
                if (k == CU_MM_F16 && !e->on[CU_PATH_MMA]) BAD("f16 gemm with path mma off");
                if (k == CU_MM_F16 && wof(L, i)->type == QTYPE_F32) BAD("f32 weights rounded to f16");
                if ((k == CU_MM_MMQ || k == CU_MM_MMQ_PLANE) && !cu_cap_mmq(wof(L, i)->type, wof(L, i)->cols))
                    BAD("mmq for %s", qtype_name(wof(L, i)->type));
                if (k == CU_MM_MMF && !cu_cap_mmf(wof(L, i)->type, wof(L, i)->cols)) BAD("mmf for %s", qtype_name(wof(L, i)->type));
                if (k == CU_MM_GEMV_Q8 && !cu_cap_gemv_q8(wof(L, i)->type)) BAD("q8 gemv for %s", qtype_name(wof(L, i)->type));
            }
            if (lp->gu.kind == CU_GU_XSG) {
                sn->xsg++;
                if (!e->on[CU_PATH_SWIGLU_GEMV] || !e->on[CU_PATH_TMA_RING] || n != 1 || m->desc.act != MF_ACT_SILU)
                    BAD("xsg where it cannot run");
            }
            if (lp->qkv.kind == CU_QKV_MIXED) {
                sn->mixed++;
                if (!e->on[CU_PATH_QKV_MIXED] || n != 1 || L->wq.type == L->wv.type) BAD("qkv-mixed where it cannot run");
            }
            if (lp->qkv.kind == CU_QKV_QK_ONE) {
                sn->qk_one++;
                if (!e->on[CU_PATH_MMF_QK] || lp->mm[CU_W_Q] != CU_MM_MMF || L->bq.host) BAD("mmf-qk where it cannot run");
            }
            if (lp->gu.kind == CU_GU_COLS_SWIGLU) {
                sn->cols_swiglu++;
                if (!e->on[CU_PATH_MMF_SWIGLU] || n != 8 || m->desc.act != MF_ACT_SILU) BAD("mmf-swiglu where it cannot run");
            }
            if (lp->gu.kind == CU_GU_ONE_GEMM) {
                sn->gu_one++;
                if (!e->on[CU_PATH_MMQ_GU] || L->ffn.gate.type != L->ffn.up.type) BAD("mmq-gu where it cannot run");
            }
            if (lp->attn.kind == CU_ATT_FLASH) {
                sn->flash++;
                if (!e->on[CU_PATH_FLASH] || n <= 8) BAD("flash where it cannot run");
            }
            if (lp->attn.kind == CU_ATT_DEC) {
                sn->dec++;
                if (n != 1 || (m->hp.head_dim == 256 && !e->on[CU_PATH_ATTN_DEC_WIDE])) BAD("dec where it cannot run");
            }
            if (lp->wo_res.kind == CU_RES_IN_GEMV || lp->down_res.kind == CU_RES_IN_GEMV) {
                sn->res_in_gemv++;
                if (!e->on[CU_PATH_ADD_GEMV] || m->desc.post_norm) BAD("add-in-gemv where it cannot run");
            }
            if (lp->wo_res.kind == CU_RES_OWED_POST) {
                sn->owed_post++;
                if (!e->on[CU_PATH_POST_NORM_ADD] || !m->desc.post_norm) BAD("post-norm-add where it cannot run");
            }
            if (m->desc.post_norm && lp->wo_res.kind != CU_RES_OWED_POST && lp->wo_res.kind != CU_RES_POST_LAUNCH)
                BAD("gemma3's post-norm skipped");
            if (lp->attn_norm.kind == CU_NORM_MQ || lp->ffn_norm.kind == CU_NORM_MQ) {
                sn->norm_mq++;
                if (!e->on[CU_PATH_MMQ_NORM]) BAD("mmq-norm where it is off");
            }
            if (lp->attn_norm.kind == CU_NORM_MH || lp->ffn_norm.kind == CU_NORM_MH || (lp->attn.writes & CU_F_MH)) {
                sn->norm_mh++;
                if (!e->on[CU_PATH_MMF_IN]) BAD("mmf-in where it is off");
            }
            if ((lp->attn.writes | lp->attn_norm.writes | lp->act.writes) & CU_F_Q8 && !e->on[CU_PATH_Q8]) BAD("q8 form with q8 off");
#undef BAD
        }
    }
    CHECK(bad == 0, "%s: %d defects, the first: %s", what, bad, where);
}

/* The env, facts and plan of model m in class d with paths `off` (NULL: all on), batch 512. */
static void plan_for(const mf_model *m, const cu_device_class *d, const char *off, cu_plan_env *e, cu_plan_facts *f,
                     cu_plan *p) {
    int on_i[CU_PATH_COUNT];
    mf_err err = { { 0 } };
    CHECK(paths_parse(cu_paths, CU_PATH_COUNT, off, "MINFER_CUDA_DISABLE", on_i, &err) == 0, "paths: %s", err.msg);
    unsigned char on[CU_PATH_COUNT];
    for (int i = 0; i < CU_PATH_COUNT; i++) on[i] = (unsigned char)on_i[i];
    cu_plan_env_init(e, on, d, &cu_kernel_needs_table, cu_tune_for(d->code_arch));
    cu_plan_facts_assume(f, e, m, 512);
    cu_plan_make(p, m, e, f);
}

/* One plan for arch x mix x class with paths `off` (NULL: all on); returns what it saw. */
static void one(mf_arch arch, const mix *x, const cu_device_class *d, const char *off, seen *sn) {
    mf_model m;
    make_model(&m, arch, x);
    cu_plan_env e;
    cu_plan_facts f;
    cu_plan p;
    plan_for(&m, d, off, &e, &f, &p);
    char what[160];
    snprintf(what, sizeof what, "%s %s %s, %s off", arch == MF_ARCH_LLAMA ? "llama" : arch == MF_ARCH_QWEN2 ? "qwen2" : "gemma3",
             x->name, d->name, off ? off : "nothing");
    check_plan(what, &p, &m, &e, sn);
    /* the device-dependent choices */
    if (d->code_arch >= 1200) CHECK(!e.on[CU_PATH_MMQ] && e.mmq_no_smem, "%s: mmq on a 99 KB part", what);
    if (d->code_arch < 900) CHECK(!e.on[CU_PATH_TMA_RING] && !e.on[CU_PATH_SWIGLU_GEMV] && !e.pdl, "%s: sm_90 paths below it", what);
    if (!off) CHECK(p.live[CU_BK_128] && p.live[CU_BK_1], "%s: buckets", what);
    cu_plan_free(&p);
    cu_plan_facts_free(&f);
    free(m.layers);
}

/* A qwen3moe-shaped model of mix x (128 experts of ff 768, 8 used, f32 routers) in class d
 * with paths `off`: quantized experts run on the experts' kernels - the grouped GEMVs below
 * 128 tokens, the grouped MMQ from 128 where path mmq is on - whose add is owed (never in a
 * GEMV's store); f16/f32 experts (no q8 GEMV) and path q8 off go to the composed blocks,
 * named. Returns 1 when the grouped MMQ appeared. */
enum { MOE_E = 128, MOE_K = 8, MOE_FF = 768 };

/* make_model's qwen3 with an FFN of MOE_E experts of MOE_FF (MOE_K used, f32 routers) in mix x */
static void make_moe_model(mf_model *m, const mix *x) {
    make_model(m, MF_ARCH_QWEN3, x);
    m->desc.n_expert = MOE_E;
    m->desc.n_expert_used = MOE_K;
    for (int l = 0; l < NL; l++) {
        mf_ffn *F = &m->layers[l].ffn;
        F->n_expert = MOE_E;
        F->n_used = MOE_K;
        set_w(&F->router, QTYPE_F32, DIM, MOE_E);
        set_w(&F->gate, x->base, DIM, MOE_FF);
        set_w(&F->up, x->base, DIM, MOE_FF);
        set_w(&F->down, l % 2 ? x->more : x->base, MOE_FF, DIM);
        F->gate.n_slices = F->up.n_slices = F->down.n_slices = MOE_E;
    }
}

static int moe_one(const mix *x, const cu_device_class *d, const char *off) {
    mf_model m;
    make_moe_model(&m, x);
    const int FF = MOE_FF;
    cu_plan_env e;
    cu_plan_facts f;
    cu_plan p;
    plan_for(&m, d, off, &e, &f, &p);
    char what[160];
    snprintf(what, sizeof what, "qwen3moe %s %s, %s off", x->name, d->name, off ? off : "nothing");
    seen sn;
    memset(&sn, 0, sizeof sn);
    check_plan(what, &p, &m, &e, &sn);
    const int quant = cu_cap_gemv_q8(x->base) && cu_cap_gemv_q8(x->more);
    int mmq_seen = 0;
    if (!e.on[CU_PATH_FUSED] || !quant || !e.on[CU_PATH_Q8]) {
        CHECK(p.composed != NULL, "%s: composed blocks expected", what);
    } else {
        CHECK(p.composed == NULL, "%s: composed (%s)", what, p.composed ? p.composed : "");
        for (int b = 0; !p.composed && b < CU_N_BUCKETS; b++) {
            if (!p.live[b]) continue;
            const int n = cu_bucket_width((cu_bucket)b);
            for (int l = 0; l < NL; l++) {
                const cu_layer_plan *lp = &p.layer[b][l];
                const int mmq = n >= 128 && e.on[CU_PATH_MMQ] && f.moe_mq && cu_cap_mmq(x->base, DIM) &&
                                cu_cap_mmq(l % 2 ? x->more : x->base, FF);
                mmq_seen |= lp->moe == CU_MOE_MMQ;
                CHECK(lp->moe == (mmq ? CU_MOE_MMQ : CU_MOE_GEMV), "%s: bucket %s layer %d: moe kind %d", what,
                      cu_bucket_name((cu_bucket)b), l, lp->moe);
                CHECK(lp->mm[CU_W_GATE] == (mmq ? CU_MM_MMQ : CU_MM_GEMV_Q8) && lp->mm[CU_W_DOWN] == lp->mm[CU_W_GATE],
                      "%s: bucket %s layer %d: experts' kinds %d/%d", what, cu_bucket_name((cu_bucket)b), l,
                      lp->mm[CU_W_GATE], lp->mm[CU_W_DOWN]);
                CHECK(lp->down_res.kind != CU_RES_IN_GEMV, "%s: bucket %s: the experts' add in a GEMV's store", what,
                      cu_bucket_name((cu_bucket)b));
            }
        }
    }
    cu_plan_free(&p);
    cu_plan_facts_free(&f);
    free(m.layers);
    return mmq_seen;
}

/* A q8_0 KV cache (cu_plan_facts.kv_q8, --cache-type-k/-v q8_0): every layer at every
 * width stores through the store launches (RoPE before them, never inside the one-token
 * kernel, which reads f16 rows only) and attends with the split or flash kernel; the
 * printed plan says so. */
static void kvq8_one(mf_arch arch, const mix *x, const cu_device_class *d) {
    mf_model m;
    make_model(&m, arch, x);
    unsigned char on[CU_PATH_COUNT];
    for (int i = 0; i < CU_PATH_COUNT; i++) on[i] = 1;
    cu_plan_env e;
    cu_plan_env_init(&e, on, d, &cu_kernel_needs_table, cu_tune_for(d->code_arch));
    cu_plan_facts f;
    cu_plan_facts_assume(&f, &e, &m, 512);
    f.kv_q8 = 1;
    cu_plan p;
    cu_plan_make(&p, &m, &e, &f);
    int bad = 0, split1 = 0;
    for (int b = 0; b < CU_N_BUCKETS; b++)
        for (int l = 0; p.live[b] && !p.composed && l < m.hp.n_layer; l++) {
            const cu_layer_plan *lp = &p.layer[b][l];
            bad += lp->rope.kind != CU_ROPE_STORE || lp->attn.kind == CU_ATT_DEC || !lp->kv_q8 || lp->qk_norm_in_attn;
            split1 += b == CU_BK_1 && lp->attn.kind == CU_ATT_SPLIT;
        }
    CHECK(bad == 0 && (p.composed || split1 == m.hp.n_layer),
          "q8_0 KV %s %s %s: %d layer plans with the one-token kernel or its RoPE; %d split at one token",
          arch == MF_ARCH_LLAMA ? "llama" : arch == MF_ARCH_QWEN2 ? "qwen2" : "gemma3", x->name, d->name, bad, split1);
    char *buf = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&buf, &len);
    cu_plan_print(&p, &m, &e, "test", o);
    fclose(o);
    CHECK(p.composed || (buf && strstr(buf, "rope a launch, then the q8_0 KV store") && strstr(buf, "over q8_0 rows")),
          "q8_0 KV %s: the printed plan names the q8_0 store and rows", d->name);
    free(buf);
    cu_plan_free(&p);
    cu_plan_facts_free(&f);
    free(m.layers);
}

int main(void) {
    const char *classes[] = { "sm_80", "sm_90", "sm_120" };
    const mf_arch archs[] = { MF_ARCH_LLAMA, MF_ARCH_QWEN2, MF_ARCH_GEMMA3 };
    seen all[3];
    memset(all, 0, sizeof all);
    for (size_t c = 0; c < MF_ARRAY_LEN(classes); c++) {
        const cu_device_class *d = cu_device_class_named(classes[c]);
        CHECK(d != NULL, "class %s", classes[c]);
        if (!d) continue;
        for (size_t a = 0; a < MF_ARRAY_LEN(archs); a++)
            for (size_t x = 0; x < MF_ARRAY_LEN(MIXES); x++) {
                one(archs[a], &MIXES[x], d, NULL, &all[c]);
                /* each path off in turn: never in the plan (check_plan), the rest connects */
                for (int i = 0; i < CU_PATH_COUNT; i++) {
                    seen s;
                    memset(&s, 0, sizeof s);
                    one(archs[a], &MIXES[x], d, cu_paths[i].name, &s);
                }
                seen s;
                memset(&s, 0, sizeof s);
                one(archs[a], &MIXES[x], d, "all", &s);
            }
    }
    /* the fast paths are there where the classes take them (q4_K_M on sm_90: all of them) */
    const seen *h = &all[1];
    CHECK(h->xsg && h->mixed && h->qk_one && h->cols_swiglu && h->gu_one && h->flash && h->dec && h->res_in_gemv &&
              h->owed_post && h->norm_mq && h->norm_mh && h->mm[CU_MM_MMF] && h->mm[CU_MM_MMQ_PLANE] && h->mm[CU_MM_GEMV_Q8] &&
              h->mm[CU_MM_F16] && h->mm[CU_MM_GEMV_GROUPS],
          "sm_90: xsg %d mixed %d qk_one %d cols_swiglu %d gu_one %d flash %d dec %d add-in-gemv %d post %d norm-mq %d "
          "norm-mh %d mmf %d mmq+plane %d gemv-q8 %d f16 %d f32 groups %d",
          h->xsg, h->mixed, h->qk_one, h->cols_swiglu, h->gu_one, h->flash, h->dec, h->res_in_gemv, h->owed_post,
          h->norm_mq, h->norm_mh, h->mm[CU_MM_MMF], h->mm[CU_MM_MMQ_PLANE], h->mm[CU_MM_GEMV_Q8], h->mm[CU_MM_F16],
          h->mm[CU_MM_GEMV_GROUPS]);
    CHECK(all[2].mm[CU_MM_MMQ] == 0 && all[2].mm[CU_MM_MMQ_PLANE] == 0 && all[2].mm[CU_MM_F16] > 0 && all[2].xsg == 0,
          "sm_120: mmq %d, f16 gemm %d, xsg %d", all[2].mm[CU_MM_MMQ] + all[2].mm[CU_MM_MMQ_PLANE], all[2].mm[CU_MM_F16],
          all[2].xsg);
    CHECK(all[0].xsg == 0 && all[0].mixed == 0 && all[0].mm[CU_MM_MMQ_PLANE] > 0, "sm_80: xsg %d mixed %d mmq+plane %d",
          all[0].xsg, all[0].mixed, all[0].mm[CU_MM_MMQ_PLANE]);
    /* the buckets */
    CHECK(cu_bucket_of(1) == CU_BK_1 && cu_bucket_of(2) == CU_BK_2_7 && cu_bucket_of(7) == CU_BK_2_7 &&
              cu_bucket_of(8) == CU_BK_8 && cu_bucket_of(9) == CU_BK_9_127 && cu_bucket_of(127) == CU_BK_9_127 &&
              cu_bucket_of(128) == CU_BK_128 && cu_bucket_of(4096) == CU_BK_128,
          "bucket edges");
    CHECK(cu_device_class_named("sm_75") == NULL, "unknown class");
    /* experts (issue 51) */
    int moe_mmq = 0;
    for (size_t c = 0; c < MF_ARRAY_LEN(classes); c++) {
        const cu_device_class *d = cu_device_class_named(classes[c]);
        for (size_t x = 0; d && x < MF_ARRAY_LEN(MIXES); x++) {
            moe_mmq += moe_one(&MIXES[x], d, NULL) && c == 1;
            for (int i = 0; i < CU_PATH_COUNT; i++) moe_one(&MIXES[x], d, cu_paths[i].name);
            moe_one(&MIXES[x], d, "all");
        }
    }
    CHECK(moe_mmq > 0, "sm_90: no grouped MMQ for quantized experts");
    {
        /* the notice's line names the experts' kernels */
        mf_model m;
        make_moe_model(&m, &MIXES[0]);
        cu_plan_env e;
        cu_plan_facts f;
        cu_plan p;
        plan_for(&m, cu_device_class_named("sm_90"), NULL, &e, &f, &p);
        char brief[256];
        cu_plan_brief(&p, brief, sizeof brief);
        CHECK(strstr(brief, "experts on grouped GEMVs") && strstr(brief, "experts: grouped mmq"), "brief: %s", brief);
        cu_plan_free(&p);
        cu_plan_facts_free(&f);
        free(m.layers);
    }
    /* device rows: the file's row padded to 16 bytes; none for a type the kernels lack (the
     * upload refuses the model, naming the tensor) */
    CHECK(cu_plan_row_stride(QTYPE_Q4_K, 4096) == 2304 && cu_plan_row_stride(QTYPE_Q8_0, 4096) == 4352 &&
              cu_plan_row_stride(QTYPE_Q2_K, 256) == 96 && cu_plan_row_stride(QTYPE_Q3_K, 4096) == 1760 &&
              cu_plan_row_stride(QTYPE_IQ4_NL, 32) == 32 && cu_plan_row_stride(QTYPE_IQ4_XS, 256) == 144 &&
              cu_plan_row_stride(QTYPE_Q8_K, 256) == 0 && cu_plan_row_stride(QTYPE_Q8_1, 32) == 0,
          "device row strides (q4_K, q8_0, q2_K, q3_K, iq4_nl, iq4_xs; none for q8_K, q8_1)");
    /* the q8_0 KV cache */
    for (size_t c = 0; c < MF_ARRAY_LEN(classes); c++) {
        const cu_device_class *d = cu_device_class_named(classes[c]);
        for (size_t a = 0; d && a < MF_ARRAY_LEN(archs); a++) kvq8_one(archs[a], &MIXES[0], d);
    }
    return test_summary("test_plan");
}

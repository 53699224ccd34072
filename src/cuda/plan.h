/* plan.h - what the CUDA blocks run, decided once per model, device and batch width.
 *
 * The fused blocks (blocks.cu) execute a plan instead of deciding on every call. For each
 * batch-width bucket (1, 2-7, 8, 9-127 and 128+ tokens) and each layer, the planner says
 * which kernel runs each stage (the norms, q/k/v, RoPE and the KV store, the attention,
 * the output projection and its residual add, gate/up, the activation, down, the logits)
 * and in which forms each producer writes its activations (f32, the GEMV's q8, the MMQ
 * GEMM's int8 form, the mmf GEMM's f16 form) for the consumers after it.
 *
 * Host-only C, in every build: `minfer info --plan` prints the plan for the GPU present or
 * for a named device class (sm_80, sm_90, sm_120) on a machine without one, and
 * tests/test_plan.c checks plans over architectures, weight mixes, classes and buckets.
 *
 * Its inputs: the model (descriptor, weight types and shapes), the device class (compute
 * capability, SMs, shared memory a block), the table of paths (MINFER_CUDA_DISABLE), and
 * the facts of the upload (which matrices got their planes, which gate+up pairs share
 * one; cu_plan_facts_assume gives what the upload makes when every allocation succeeds).
 * Kernels that can still refuse a launch at run time (widths their tiles do not split)
 * are named in the plan as such (cu_stage.may_refuse), with the form that runs instead. */
#ifndef MINFER_CUDA_PLAN_H
#define MINFER_CUDA_PLAN_H

#include <stdint.h>

#include "cuda/paths.h"
#include "cuda/tune.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- batch-width buckets ---- */
typedef enum cu_bucket { CU_BK_1, CU_BK_2_7, CU_BK_8, CU_BK_9_127, CU_BK_128, CU_N_BUCKETS } cu_bucket;
cu_bucket cu_bucket_of(int n);
const char *cu_bucket_name(cu_bucket b); /* "1", "2-7", "8", "9-127", "128+" */
/* The width the planner plans a bucket at (every width of a bucket plans alike: the
 * thresholds of the kernels lie on the buckets' edges). */
int cu_bucket_width(cu_bucket b);

/* ---- the device class ---- */
typedef struct cu_device_class {
    const char *name;     /* "sm_90" or the device's name */
    int code_arch;        /* the SASS the device runs: 800, 900, 1200 (__CUDA_ARCH__) */
    int sms;
    long long smem_optin; /* shared memory a block may opt in to, bytes */
} cu_device_class;
/* The classes `minfer info --plan` knows without a GPU: sm_80 (A100), sm_90 (H100),
 * sm_120 (RTX 5090); NULL for another name. */
const cu_device_class *cu_device_class_named(const char *name);
const char *cu_device_class_names(void); /* "sm_80, sm_90, sm_120" */

/* Shared memory the kernels' largest configurations take (bytes): the launchers compute
 * them from their tile templates (mmq.cu, mmf.cu, mmv_q.cu, attn_flash.cu); these are the
 * same numbers for planning without a GPU, and the CUDA suite checks they agree
 * (tests/cuda/test_cuda_ops.c). */
typedef struct cu_kernel_needs {
    long long xst_smem, mmq_smem, mmf_tma_smem, flash128_db_smem, flash256_smem;
} cu_kernel_needs;
extern const cu_kernel_needs cu_kernel_needs_table;

/* ---- the environment: the paths after what the device cannot take ---- */
typedef struct cu_plan_env {
    unsigned char on[CU_PATH_COUNT];
    int code_arch;
    int pdl;          /* programmatic dependent launch (path pdl, sm_90+) */
    int mmq_no_smem;  /* path mmq off for shared memory (labelled) */
    int mmf_tma;      /* mmf's 8-column kernel on TMA rings */
    int flash256;     /* the flash kernel takes head dim 256 */
    int xst_off;      /* no TMA ring GEMVs (below sm_90 or too little shared memory) */
} cu_plan_env;
/* The paths `on` (MINFER_CUDA_DISABLE applied) as the device class d, whose tuning row is t
 * (cu_tune_for: a row without the TMA ring turns its paths off), can run them: each
 * path it cannot take turned off, once, so the plan, the notice and the launchers see one
 * answer. */
void cu_plan_env_init(cu_plan_env *e, const unsigned char *on, const cu_device_class *d, const cu_kernel_needs *k,
                      const struct cu_tune *t);

/* ---- the facts of the upload and the scratch ---- */
enum { CU_W_Q, CU_W_K, CU_W_V, CU_W_O, CU_W_GATE, CU_W_UP, CU_W_DOWN, CU_W_COUNT };
typedef struct cu_layer_facts {
    unsigned char mmf[CU_W_COUNT];   /* the matrix has its own f16-fragment plane */
    unsigned char plane[CU_W_COUNT]; /* the matrix has its own MMQ plane */
    unsigned char gu_on;             /* gate and up run as one GEMM over both (path mmq-gu) */
    unsigned char gu_mmf, gu_plane;  /* ... with an f16-fragment / MMQ plane over both */
    unsigned char qk_adjacent;       /* k's mmf plane lies right after q's */
} cu_layer_facts;
typedef struct cu_plan_facts {
    int n_layer;
    cu_layer_facts *layer;  /* [n_layer] */
    int any_quant;          /* a quantized matrix: the q8 GEMVs can serve */
    int n_batch;            /* the widest batch (scratch is sized for it) */
    int mq, mh, mh8, q8h, x16; /* scratch present: MMQ int8 activations, mmf f16 ones (n and
                                  8 columns), the gate+up launch's second q8, the f16 GEMM's */
    int tp;                 /* the model split over ranks (a reduce after each block) */
    int moe_mq;             /* the experts' grouped MMQ scratch (moe.cu) is present */
    int kv_q8;              /* the KV cache is q8_0 (--cache-type-k/-v): RoPE and the store in the
                               store launches, the split kernel for decode (not kernel_attn_dec) */
} cu_plan_facts;
/* What the upload and the scratch make of model m in env e with n_batch when every
 * allocation succeeds; e's paths that need scratch the batch does not get are turned off
 * (path mma and mmq below 9 columns, mmf without mmq). Free with cu_plan_facts_free. */
void cu_plan_facts_assume(cu_plan_facts *f, cu_plan_env *e, const mf_model *m, int n_batch);
void cu_plan_facts_free(cu_plan_facts *f);
/* The upload's decisions, one definition for it and for cu_plan_facts_assume: w gets an
 * MMQ plane / an f16-fragment plane; L's gate and up run as one GEMM (adjacent: up's
 * bytes follow gate's in the weight allocation). */
int cu_plan_mmq_plane_on(const unsigned char *on, uint32_t type); /* on: a path table (env.on, cu_state.on) */
int cu_plan_wants_mmq_plane(const cu_plan_env *e, const mf_weight *w);
int cu_plan_wants_mmf_plane(const cu_plan_env *e, const mf_weight *w);
int cu_plan_gu_pairable(const cu_plan_env *e, const mf_layer *L, int adjacent);
/* Bytes of a device row and of the planes (the layouts of common.cuh, mmq.cu, mmf.cu). */
long long cu_plan_row_stride(uint32_t type, long long K);
long long cu_plan_mmf_plane_bytes(uint32_t type, int rows, int K);

/* Kernel capabilities by weight type and K (the launchers take what these say). */
int cu_cap_mmq(uint32_t type, long long K);   /* the int8 MMQ GEMM */
int cu_cap_mmf(uint32_t type, long long K);   /* the f16-fragment plane GEMM */
int cu_cap_gemv_q8(uint32_t type);            /* the q8 GEMV */
int cu_cap_gemv_mixed(uint32_t t1, uint32_t t2); /* one xstm launch over t1, t1, t2 */
int cu_cap_attn_dec(const cu_plan_env *e, int hd, int group, int window); /* the one-token attention */
int cu_cap_flash(const cu_plan_env *e, int hd);

/* ---- the plan ---- */
/* Activation forms, as bits: what a producer writes, what a consumer reads. */
enum { CU_F_F32 = 1, CU_F_Q8 = 2, CU_F_MQ = 4, CU_F_MH = 8 };

/* How one matrix product runs. */
typedef enum cu_mm {
    CU_MM_NONE = 0,
    CU_MM_GEMV_Q8,     /* GEMV on q8 activations (dp4a), up to 8 columns */
    CU_MM_GEMV_F32,    /* GEMV on f32 activations, up to 8 columns */
    CU_MM_MMF,         /* f16 tensor cores on the f16-fragment plane (128+: 128x64 tiles; 8: column kernel) */
    CU_MM_MMQ,         /* int8 tensor cores, scales decoded in the kernel */
    CU_MM_MMQ_PLANE,   /* int8 tensor cores on the registration-time plane */
    CU_MM_F16,         /* f16 tensor cores over dequantized row chunks (fallback) */
    CU_MM_GEMV_GROUPS, /* f32 GEMVs 8 columns at a time (f32 weights, no tensor-core path) */
    CU_MM_COUNT
} cu_mm;
const char *cu_mm_name(cu_mm k);
int cu_mm_reads(cu_mm k); /* the form it reads: CU_F_Q8, CU_F_MQ, CU_F_MH or CU_F_F32 */

/* One stage's kernel choice (names below), the forms it writes and reads, and what it
 * does when a kernel refuses at run time. */
typedef struct cu_stage {
    uint8_t kind;       /* the stage's enum value */
    uint8_t writes;     /* CU_F_* forms of its output */
    uint8_t converts;   /* forms of its input it makes itself when the producer did not (a prepass) */
    uint8_t may_refuse; /* 1: the kernel may refuse a launch; `fallback` then runs */
    uint8_t fallback;
} cu_stage;

typedef enum cu_norm_kind { CU_NORM_F32, CU_NORM_Q8, CU_NORM_MQ, CU_NORM_MH } cu_norm_kind;
typedef enum cu_qkv_kind {
    CU_QKV_MIXED,   /* one xstm launch over q, k (one type) and v (another) */
    CU_QKV_RUNS,    /* one GEMV launch per run of one type */
    CU_QKV_QK_ONE,  /* q and k one column-kernel launch over both planes, v after */
    CU_QKV_EACH,    /* three GEMMs */
} cu_qkv_kind;
typedef enum cu_rope_kind { CU_ROPE_IN_ATTN, CU_ROPE_STORE } cu_rope_kind;
typedef enum cu_attn_kind { CU_ATT_DEC, CU_ATT_SPLIT, CU_ATT_FLASH } cu_attn_kind;
typedef enum cu_res_kind {
    CU_RES_IN_GEMV,      /* x += W in in the GEMV's store (path add-in-gemv) */
    CU_RES_OWED,         /* into a buffer; the next norm adds it (its add+norm kernel) */
    CU_RES_OWED_POST,    /* the same, and the next norm applies the post-norm too (post-norm-add) */
    CU_RES_POST_LAUNCH,  /* the post-norm launched alone, the add owed */
} cu_res_kind;
typedef enum cu_gu_kind {
    CU_GU_XSG,         /* gate+up GEMV with the SwiGLU and its q8 in the store */
    CU_GU_PAIR_GEMV,   /* gate and up in one GEMV launch */
    CU_GU_TWO_GEMV,    /* a GEMV each (two types) */
    CU_GU_COLS_SWIGLU, /* 8 columns: one mmf column-kernel launch over both, SwiGLU in its store */
    CU_GU_ONE_GEMM,    /* one GEMM over both (adjacent in memory) */
    CU_GU_TWO_GEMM,    /* a GEMM each */
} cu_gu_kind;
typedef enum cu_act_kind {
    CU_ACT_IN_GU,      /* done by the gate+up launch */
    CU_ACT_SWIGLU,     /* its own launch, f32 (+ q8 where writes says) */
    CU_ACT_GEGLU,
    CU_ACT_SWIGLU_MH,  /* with the down GEMM's f16 prepass (mmf) */
    CU_ACT_SWIGLU_MQ,  /* with the down GEMM's int8 prepass (mmq) */
} cu_act_kind;
typedef enum cu_regime { CU_RG_GEMV, CU_RG_GEMM } cu_regime;
/* A layer's FFN of experts (moe.cu): the router's GEMV (f32 weights), one kernel for the
 * softmax, each token's top k and the grouping of the (token, slot) rows by expert, then
 * the experts' gate+up over their rows, the SwiGLU, down, and the weighted sum of each
 * token's rows. */
typedef enum cu_moe_kind {
    CU_MOE_NONE,  /* a dense FFN */
    CU_MOE_GEMV,  /* q8 GEMVs, a block per (rows, expert) over that expert's rows, 8 columns a pass */
    CU_MOE_MMQ,   /* int8 MMQ GEMMs over tiles of 64 rows of one expert (tiles listed by the grouping) */
} cu_moe_kind;

typedef struct cu_layer_plan {
    uint8_t regime;                 /* GEMVs (decode) or GEMMs (prefill, and 8 columns on mmf-cols) */
    cu_stage attn_norm, qkv, rope, attn, wo_res;
    uint8_t mm[CU_W_COUNT];         /* cu_mm of each matrix */
    uint8_t qk_norm_in_attn;        /* gemma3's q/k norms inside the attention kernel */
    uint8_t kv_q8;                  /* a q8_0 cache: RoPE its own launch, then the q8_0 store
                                       (rope.kind CU_ROPE_STORE); split or flash over q8_0 rows */
    cu_stage ffn_norm, gu, act, down_res;
    uint8_t moe;                    /* cu_moe_kind: the FFN's experts (gu/act unused then) */
} cu_layer_plan;

typedef struct cu_logits_plan {
    cu_stage norm;
    uint8_t mm;
} cu_logits_plan;

typedef struct cu_plan {
    int n_layer;
    const char *composed;                 /* non-NULL: forward.c's composed blocks run, and why */
    int live[CU_N_BUCKETS];               /* the bucket's width fits the batch */
    cu_layer_plan *layer[CU_N_BUCKETS];   /* [n_layer] each */
    cu_logits_plan logits[CU_N_BUCKETS];
    char fallbacks[512];                  /* why each fallback was taken (one line each) */
} cu_plan;

/* Makes p for model m in env e with facts f (out of memory: exits, as mf_xcalloc). */
void cu_plan_make(cu_plan *p, const mf_model *m, const cu_plan_env *e, const cu_plan_facts *f);
void cu_plan_free(cu_plan *p);
/* The plan of layer l at width n. */
static inline const cu_layer_plan *cu_plan_at(const cu_plan *p, int l, int n) { return &p->layer[cu_bucket_of(n)][l]; }
/* How one matrix product of w over n columns runs outside the blocks (the primitive ops):
 * the same rule as the plan's. */
cu_mm cu_plan_mm(const cu_plan_env *e, const cu_plan_facts *f, const mf_weight *w, int has_mmf, int has_plane, int n);

/* The plan as `minfer info --plan` prints it (file: a FILE *), and one line for the notice. */
void cu_plan_print(const cu_plan *p, const mf_model *m, const cu_plan_env *e, const char *device, void *file);
void cu_plan_brief(const cu_plan *p, char *buf, int cap);
/* `minfer info --plan CLASS` without a GPU: env, facts and plan for class name (NULL: an
 * error in err naming the classes). */
int cu_plan_print_for_class(const mf_model *m, const char *name, int n_batch, void *file, mf_err *err);

#ifdef __cplusplus
}
#endif
#endif

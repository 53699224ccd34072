/* backend_cuda.cu - the CUDA backend: mf_backend glue, weight upload, KV cache,
 * scratch, op dispatch with small-op fusion, and the decode step as a CUDA graph.
 *
 * Device memory: the weights (uploaded once, rows 16-byte aligned, some formats
 * repacked planar: common.cuh), the f16 KV cache, and scratch (q8 activations,
 * attention partials, the prefill GEMM's f16 operands, plus what forward.c asks
 * for through alloc). The notice printed at the first step gives the breakdown.
 *
 * Fusion (MINFER_CUDA_FUSE=0 turns it off; the arithmetic is the same either way,
 * so the tokens are too). Ops are issued in order, but three kinds are held back
 * one op so they can merge with the next:
 *   add(x, y) + rmsnorm(., x)       -> one add+norm kernel (+ q8 of the output)
 *   matmul x3 on one input (GEMV)   -> one launch over the stacked rows (q/k/v, gate/up)
 *   rope(q) + rope(k) + attention   -> RoPE inside the KV-store kernel
 * and every producer of a GEMV input (norm, swiglu, attention) also writes its q8
 * quantization (and its lane-major copies, common.cuh), so no GEMV quantizes its own
 * input. Any other op flushes what is
 * held back first, and download() flushes everything.
 *
 * Graph (MINFER_CUDA_GRAPH=0 turns it off): a batch of one token is captured once
 * per forward scratch and replayed. Every kernel reads token/position/sequence
 * from device memory, filled by the graph's first node (a memcpy from pinned host
 * memory the host rewrites before each replay); the attention grid covers the
 * whole context with early exit. Logit downloads inside the capture go straight to
 * the context's logits where be_host_alloc pinned them (a kernel storing there,
 * cu_store_host), else to pinned staging memory, copied out after the replay.
 *
 * PDL (MINFER_CUDA_PDL=0 turns it off): kernels are launched with programmatic
 * stream serialization; see common.cuh for the rule every kernel follows.
 *
 * Other switches: MINFER_CUDA_DP4A=0 (GEMV on f32 activations, no q8),
 * MINFER_CUDA_FLASH=0 (prefill attention through the split kernel),
 * MINFER_CUDA_MMA=0 (prefill matmuls through the GEMV, 8 tokens at a time),
 * MINFER_CUDA_GEMV=1|2|3 (the decode GEMV: 1 = v1, one row per warp; 2 = pp, persistent
 * ping-pong; 3 = xs, x-stationary persistent warps, switching to xst, xs fed by a
 * TMA ring (sm_90+ code), for launches of MINFER_CUDA_XST_MB (8) MB or more: the
 * default; 4 = xst wherever it applies; mmv.cuh) and
 * MINFER_CUDA_GEMV_PERSM=N (cap on the persistent grids' blocks per SM),
 * MINFER_CUDA_GEMV_WIDE=0|1 (one-column rows too wide for xs, the 11008-wide
 * ffn_down: by default xst2 where xst would run (sm_90+), else xs2; 1 xs2 only,
 * 0 pp instead of xs2),
 * MINFER_CUDA_XST_DEPTH=N (xst ring rows in flight per warp, 2..16; default 2),
 * MINFER_CUDA_XST_PRE=N (of those, the rows each ring requests before the kernel's
 * wait, 0..16; default 1; mmv.cuh ring_first_rows),
 * MINFER_CUDA_XST_PRE_ATTN=N (the same for the GEMV right after a one-token attention,
 * which leaves 100 of 132 SMs idle; default XST_PRE),
 * MINFER_CUDA_XSG_PRE=N (the same for the gate+up launch with the SwiGLU; default 2),
 * MINFER_CUDA_ATTN_WARPS=4 (the one-token attention's warps per block instead of 8;
 * attn.cu),
 * MINFER_CUDA_NORM_THREADS=256|512 (the one-pass RMSNorm's block at most that wide
 * instead of 1024, where a row is one block: NORM_SPLIT=1, or a row that does not split;
 * norm.cu),
 * MINFER_CUDA_NORM_SPLIT=1|2|8 (the one-pass RMSNorm's row over that many blocks, each
 * summing the whole row and writing its part, instead of 4; norm.cu),
 * MINFER_CUDA_NORM_WARPS=0 (the one-token RMSNorm of a 2048- or 4096-wide row as
 * NORM_SPLIT's blocks instead of one-warp blocks that each sum the row; norm.cu),
 * MINFER_CUDA_SWIGLU_THREADS=64..1024 (the q8 SwiGLU's block width, default 256;
 * elementwise.cu),
 * MINFER_CUDA_ATTN_TRIGGER=0|2|3 (the one-token attention lets the GEMV after it launch
 * at its start, after its q/k/v, after its tile loop, instead of after its wait; attn.cu),
 * MINFER_CUDA_GEMV_MIXED=0 (q and k of q4_K/q5_K and a v of q6_K as two launches
 * instead of one xstm launch; mmv.cuh),
 * MINFER_CUDA_XSTM_STAGE=0 (xstm's warps load the second type's activations from the L2
 * where they meet its first row, instead of from a copy each block makes in shared
 * memory after its wait; mmv.cuh),
 * MINFER_CUDA_SWIGLU_GEMV=0 (the one-token SwiGLU as its own kernel after the gate+up
 * GEMV instead of in that GEMV's store, xsg; mmv.cuh),
 * MINFER_CUDA_XSG_SHARED=0 (that gate+up launch with a ring per warp, each warp its own
 * rows, instead of one ring per block whose rows any free warp takes, where that ring
 * fits; mmv.cuh, xsgs; MINFER_CUDA_VERBOSE=1 counts the launches of each),
 * MINFER_CUDA_RING_PAIRS=0..15 (which ring GEMVs' loops take two rows a step, bits: 1
 * xsg (gate+up; xsgs always takes two), 2 xst (q/k/v, wo), 4 xstm (q/k/v with a v of
 * another type), 8 xst2 (ffn_down); default 15, all four; 0: one row a step in every
 * per-warp and per-pair ring; mmv.cuh),
 * MINFER_CUDA_ATTN_PRE=0 (the one-token attention kernel waits for the kernel before
 * it before reading anything; attn.cu),
 * MINFER_CUDA_ATTN_FAST=0 (the one-token attention reads the RoPE row at pos from the
 * table, after pos, instead of from the copy the step's embedding kernel makes: the
 * notice's "+rope-row"; attn.cu, `fast`),
 * MINFER_CUDA_ADD_GEMV=0 (the residual add x += W a as part of the norm kernel after
 * the GEMV instead of folded into the GEMV's store, mmv.cuh),
 * MINFER_CUDA_ATTN_FIT=0 (the one-token attention kernel's head-group arrays at
 * ATT_MAXG instead of sized to the model's group; attn.cu),
 * MINFER_CUDA_ATTN_CHUNK=N (positions per attention chunk, a multiple of 64;
 * default: the context in at most 16 chunks, 128 positions at least),
 * MINFER_CUDA_SKIP=name,... (timing experiments only: drops the launches of those
 * kernels, so the output is wrong; the notice says so; "download": the decode graph's
 * logits download),
 * MINFER_CUDA_HOST_STORE=0 (the decode graph downloads the logits into the context's
 * pinned host_alloc memory by a copy node instead of a kernel storing there, the
 * notice's "+host-store"; elementwise.cu),
 * MINFER_CUDA_SYNC=1 (synchronise and check after every launch, for debugging),
 * MINFER_CUDA_VERBOSE=1 (scratch breakdown),
 * MINFER_CUDA_TRACE=FILE (a build with -DMINFER_CUDA_TRACE=1 only: the block timeline
 * of every kernel, written at exit for bench/trace_step.py; trace.cu). The one-line notice at the first step
 * names the paths in use and the device memory (weights, KV, scratch). */
#include "common.cuh"
#include "backend_cuda.h"

#include <stdlib.h>
#include <string.h>

#define CU_MAX_GEMV_COLS CU_MMV_MAXCOLS

struct cu_alloc_rec {
    void *p;
    size_t n;
};

enum cu_pend_kind { PEND_NONE = 0, PEND_ADD, PEND_MMV, PEND_ROPE, PEND_ATTN };

struct cu_pend {
    int kind;
    /* add */
    float *ax;
    const float *ay;
    int64_t an;
    /* gemv group */
    uint32_t mtype;
    int mq8, mn, mK, mnmat;
    const float *mx;
    float *mout[CU_MMV_MAXMAT];
    const mf_weight *mw[CU_MMV_MAXMAT];
    const float *mbias[CU_MMV_MAXMAT];
    /* the add x += out[0] that followed (op_add): macc = x. If the next op is the
     * norm that overwrites out[0], the GEMV adds into x instead (maccum); otherwise
     * it runs as issued, then the add. */
    float *macc;
    int maccum;
    /* the last matrix is of type mtype2 (MINFER_CUDA_GEMV_MIXED: one xstm launch) */
    int mmixed;
    uint32_t mtype2;
    /* rope */
    cu_rope_job rj[2];
    int rnj;
    const mf_batch *rb;
    int rhd, rdim, rmode;
    float rbase;
    /* a one-token attention the fused path may take (attn_wo.cu): held for the
     * o-projection that reads its output (awo, into awo_out), the add x += awo_out after
     * that (ares) and the norm that overwrites awo_out; anything else launches it as issued
     * (attn_demote) */
    cu_attn_args aa;
    int alayer;
    const mf_batch *ab;
    const float *aq;
    float *aout;
    const mf_weight *awo;
    float *awo_out;
    float *ares;
};

struct cu_copy {
    int rel;            /* 1: dst = logits + off (the forward's logits argument) */
    char *dst;
    size_t off;
    size_t pin_off;
    size_t bytes;
    char *direct;       /* non-NULL: the graph copies straight to this pinned host_alloc memory
                           (the captured destination), not through the staging buffer */
};

/* Host memory from be_host_alloc (the context's logits): pinned where the runtime gives it,
 * so the decode graph's logits download lands there directly. Copying them out of the
 * staging buffer cost 5.4 us of a 1,482 us step (7B, H200, bench/RESULTS.md 2026-11-30). */
#define CU_HOST_MAX 8
struct cu_host_buf {
    void *p;
    size_t bytes;
    int pinned;
    void *dev; /* its device address (mapped), NULL if the runtime gives none */
};

#define CU_GRAPH_MAXCOPY 8
#define CU_GRAPH_PINNED (1u << 20)

struct cu_graph_rec {
    int valid;
    const mf_forward *fw;
    const float *fw_x;
    int n_out;
    cudaGraphExec_t exec;
    uint8_t *pinned;     /* graph-owned staging: meta at 0, then idx uploads and downloads */
    size_t pinned_cap, pinned_used;
    cu_copy copies[CU_GRAPH_MAXCOPY];
    int ncopies;
};

struct cu_state {
    int device;
    cudaDeviceProp prop;
    cudaStream_t stream;
    mf_model *m;
    mf_hparams hp;
    int n_ctx, n_seq, n_batch;
    /* switches */
    int f_graph, f_pdl, f_fuse, f_dp4a, f_flash, f_mma, f_sync, verbose;
    int f_host_store;      /* graph downloads into pinned host memory by a kernel (MINFER_CUDA_HOST_STORE) */
    int f_xstm_stage;      /* xstm's second type's activations via shared memory (MINFER_CUDA_XSTM_STAGE) */
    /* x += the GEMV before it, folded into that GEMV's store (MINFER_CUDA_ADD_GEMV) */
    int f_add_gemv;
    /* q/k of one K-quant and v of q6_K as one launch (MINFER_CUDA_GEMV_MIXED=0 turns it off) */
    int f_gemv_mixed;
    /* the one-token SwiGLU in the gate+up GEMV's store (MINFER_CUDA_SWIGLU_GEMV=0 turns it off) */
    int f_swiglu_gemv;
    int f_xsg_shared; /* that launch with one ring per block shared by its warps where it fits (MINFER_CUDA_XSG_SHARED; mmv.cuh, xsgs) */
    int f_gemv;            /* GEMV variant: 1 v1, 2 pp, 3 xs (mmv.cuh) */
    char skip[256];        /* MINFER_CUDA_SKIP: ",name,name," */
    int f_attn_pre;        /* decode attention reads its first K/V tile before pdl_wait (attn.cu) */
    int f_attn_fast;       /* its RoPE row from the embedding kernel: on (MINFER_CUDA_ATTN_FAST) and the
                              model one the fast store takes (be_init; attn.cu `fast`) */
    int f_attn_fit;        /* decode attention's head-group arrays fitted to the model (attn.cu) */
    int f_attn_wo;         /* the one-token attention fused with wo and the add (attn_wo.cu): on
                              (MINFER_CUDA_ATTN_WO) and the model one it takes (be_init) */
    int attn_wo_c;         /* its blocks per head, 4 or 8 (MINFER_CUDA_ATTN_WO_C) */
    long long *wo_acc;     /* its 32.32 fixed-point sums [n_embd], zero between uses */
    float *wo_part;        /* its blocks' partials */
    unsigned *wo_bar;      /* its heads' barriers (count, generation), zero at init */
    uint8_t *wo_plane;     /* its copy of every layer's wo (cu_attn_wo_plane), wo_plane_layer bytes each */
    size_t wo_plane_layer;
    int attn_warps;        /* decode attention's warps per block, 8 or 4 (MINFER_CUDA_ATTN_WARPS) */
    int attn_trigger;      /* where decode attention lets the GEMV after it launch, 0..3 (MINFER_CUDA_ATTN_TRIGGER) */
    int norm_threads;      /* one-pass RMSNorm block width at most: 256, 512 or 1024 (MINFER_CUDA_NORM_THREADS) */
    int norm_split;        /* one-pass RMSNorm blocks per row: 1, 2, 4, 8 (MINFER_CUDA_NORM_SPLIT) */
    int norm_warps;        /* the one-token norm by one-warp blocks, each summing the row (MINFER_CUDA_NORM_WARPS) */
    int swiglu_threads;    /* q8 SwiGLU block width: 64..1024 (MINFER_CUDA_SWIGLU_THREADS) */
    int gemv_per_sm;       /* cap on blocks per SM of the persistent variants (0: none) */
    int gemv_wide;         /* rows of 129..256 units: 0 pp, 1 xs2, 2 xst2 (cu_gemv_wide, mmv.cuh) */
    int xs_wide_mats;      /* quantized matrices too wide for xs (to xs2 or pp) */
    int64_t xst_bytes;     /* variant 3: xst for launches of at least this many bytes */
    int xst_depth;         /* xst ring rows per warp (MINFER_CUDA_XST_DEPTH; mmv.cuh) */
    int xsg_depth;         /* the same for xsg, the gate+up launch with the SwiGLU (MINFER_CUDA_XSG_DEPTH) */
    int ring_pairs;        /* ring loops taking two rows a step: 1 xsg, 2 xst, 4 xstm, 8 xst2 (MINFER_CUDA_RING_PAIRS) */
    int xst_pre;           /* of those, requested before the wait (MINFER_CUDA_XST_PRE; ring_first_rows) */
    int xst_pre_attn;      /* the same for the GEMV after a one-token attention (MINFER_CUDA_XST_PRE_ATTN) */
    int after_attn;        /* the last kernel launched was the one-token attention (cu_launch_check) */
    int xst_pre_swiglu;    /* the same for the GEMV after the gate+up launch with the SwiGLU, xsg
                              (MINFER_CUDA_XST_PRE_SWIGLU) */
    int after_xsg;         /* the last kernel launched was xsg (cu_launch_check) */
    int xsg_pre;           /* the same for the gate+up launch with the SwiGLU (MINFER_CUDA_XSG_PRE) */
    int code_arch;         /* __CUDA_ARCH__ of the code the device runs */
    int any_quant;
    /* memory */
    void *wbuf;
    size_t wbytes;
    void *kvbuf;
    size_t kvbytes;
    size_t own_scratch, fw_scratch;
    __half **kc, **vc;
    /* batch metadata [tok n_batch][pos n_batch][seq n_batch] */
    int32_t *d_meta, *d_idx;
    int4 *d_tiles;
    int32_t *h_meta;
    int4 *h_tiles;
    int in_forward, meta_valid;
    const mf_batch *meta_b;
    /* q8 activations + what they hold; q8h: the fused SwiGLU's output (op_swiglu), swapped
     * with q8 after its launch, which still reads q8 */
    cu_q8 q8, q8h;
    int64_t q8_cap;
    const float *q8_src;
    int64_t q8_n;
    int q8_valid;
    /* RoPE (cos, sin) table [n_ctx][rope_dim/2] of the model's rope_dim/base */
    float2 *rope_cs;
    float2 *cs_now;        /* the table's row at the step's position (cu_embed), for the attention */
    int cs_now_ok;         /* cs_now written by this forward's embedding (one token) */
    /* attention partials */
    float *att_part;
    int *att_count;   /* [8][n_kv * head groups] arrival counters of kernel_attn_dec */
    int att_chunk, att_nchunks;
    /* prefill GEMM scratch */
    __half *x16, *w16;
    int64_t x16_cap, w16_cap;
    int kmax;  /* widest matmul input */
    /* fusion */
    cu_pend pend;
    /* graph */
    int capturing;
    cu_graph_rec graph;
    int graph_failed;
    float *cap_logits;
    size_t cap_logits_bytes;
    cu_host_buf host[CU_HOST_MAX];
    /* errors */
    int err;
    char errmsg[MF_ERR_LEN];
    /* be->alloc and test uploads */
    cu_alloc_rec *allocs;
    int nallocs, capallocs;
    void **extra;
    int nextra;
    int notice_done;
    /* census */
    uint64_t launches, replays, eager;
    uint64_t n_xst2; /* kernel_mmv_xst2 launches (eager or captured) */
    uint64_t n_add_gemv; /* GEMV launches with the residual add folded in */
    uint64_t n_xstm;     /* kernel_mmv_xstm launches (two block types in one launch) */
    uint64_t n_swiglu_gemv; /* kernel_mmv_xsg and kernel_mmv_xsgs launches (gate+up with the SwiGLU) */
    uint64_t n_xsg_shared;  /* of them, kernel_mmv_xsgs (one ring per block) */
    uint64_t n_pairs;       /* ring GEMV launches whose loop takes two rows a step */
    uint64_t n_host_store;  /* graph downloads captured as a kernel storing to pinned host memory */
    uint64_t n_copy_node;   /* graph downloads captured as a copy node */
    uint64_t n_attn_wo;  /* kernel_attn_wo launches (attention, wo and the add in one) */
    /* MINFER_CUDA_STEPTIME=1: where a replayed step's wall time goes (step_replay; the
     * summary goes to stderr at destroy). gpu: event before the graph launch to event after
     * it (the graph's run plus the launch's submission); call: step_replay's own wall time
     * (launch, sync, copy-out); copy: the copy-out alone; wall: one step_replay's start to
     * the next's (the caller's loop included) */
    struct {
        int on;
        cudaEvent_t e0, e1;
        uint64_t n, nwall;
        double gpu_ms, call_s, copy_s, wall_s, t_prev;
    } st;
    cu_trace *trace;     /* MINFER_CUDA_TRACE=FILE on a trace build (trace.cu) */
};

/* ------------------------------------------------------------------------- */
/* State accessors used by the launchers                                     */
/* ------------------------------------------------------------------------- */
cudaStream_t cu_stream(const cu_state *S) { return S->stream; }
int cu_pdl(const cu_state *S) { return S->f_pdl; }
int cu_norm_threads(const cu_state *S) { return S->norm_threads; }
int cu_norm_split(const cu_state *S) { return S->norm_split; }
int cu_norm_warps(const cu_state *S) { return S->norm_warps; }
int cu_swiglu_threads(const cu_state *S) { return S->swiglu_threads; }
int cu_num_sms(const cu_state *S) { return S->prop.multiProcessorCount > 0 ? S->prop.multiProcessorCount : 1; }
int cu_gemv_wide(const cu_state *S) { return S->gemv_wide; }
void cu_count_xst2(cu_state *S) { S->n_xst2++; }
void cu_count_xstm(cu_state *S) { S->n_xstm++; }
int cu_xst_depth(const cu_state *S) { return S->xst_depth; }
int cu_xsg_depth(const cu_state *S) { return S->xsg_depth; }
int cu_ring_pairs(const cu_state *S) { return S->ring_pairs; }
int cu_xstm_stage(const cu_state *S) { return S->f_xstm_stage; }
int cu_xsg_shared(const cu_state *S) { return S->f_xsg_shared; }
void cu_count_pairs(cu_state *S) { S->n_pairs++; }
int cu_gemv_variant(const cu_state *S, int *per_sm_cap, int64_t *xst_bytes) {
    *per_sm_cap = S->gemv_per_sm;
    *xst_bytes = S->xst_bytes;
    return S->f_gemv;
}

void cu_record(cu_state *S, cudaError_t e, const char *expr, const char *file, int line) {
    if (S->err) return;
    S->err = 1;
    const char *f = strrchr(file, '/');
    snprintf(S->errmsg, sizeof S->errmsg, "cuda: %s: %s (%s:%d)", expr, cudaGetErrorString(e), f ? f + 1 : file, line);
    (void)cudaGetLastError(); /* clear non-sticky errors */
}

void cu_launch_check(cu_state *S, const char *what, const char *file, int line) {
    S->launches++;
    S->after_attn = strncmp(what, "attn_dec", 8) == 0; /* the one-token attention's names */
    S->after_xsg = strstr(what, "+swiglu") != NULL;      /* (cu_mmv_q8_swiglu's) */
    if (S->capturing) cu_trace_launch(S->trace, what);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) cu_record(S, e, what, file, line);
    if (S->f_sync && !S->capturing) {
        e = cudaStreamSynchronize(S->stream);
        if (e != cudaSuccess) cu_record(S, e, what, file, line);
    }
}

int cu_skipped(cu_state *S, const char *what) {
    if (!S->skip[0]) return 0;
    char key[80];
    snprintf(key, sizeof key, ",%s,", what);
    return strstr(S->skip, key) != NULL;
}

static cu_state *ST(mf_backend *be) { return (cu_state *)be->impl; }

#define TRY(S, x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { cu_record((S), e_, #x, __FILE__, __LINE__); return -1; } } while (0)

static void *dev_alloc(cu_state *S, size_t n, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n ? n : 16);
    if (e != cudaSuccess) {
        cu_record(S, e, what, __FILE__, __LINE__);
        return NULL;
    }
    return p;
}

/* ------------------------------------------------------------------------- */
/* q8 cache bookkeeping                                                      */
/* ------------------------------------------------------------------------- */
static void q8_touch(cu_state *S, const void *p, size_t nbytes) {
    if (!S->q8_valid) return;
    const char *a = (const char *)p, *b = (const char *)S->q8_src;
    if (a < b + S->q8_n * 4 && b < a + nbytes) S->q8_valid = 0;
}
static void q8_set(cu_state *S, const float *src, int64_t n) {
    S->q8_src = src;
    S->q8_n = n;
    S->q8_valid = 1;
}
/* q8 output for a producer of n values, or NULL when it would not fit / not help. */
static const cu_q8 *q8_for(cu_state *S, int64_t n) {
    if (!S->f_fuse || !S->f_dp4a || !S->any_quant || n % 32 || n > S->q8_cap) return NULL;
    return &S->q8;
}

/* ------------------------------------------------------------------------- */
/* Batch metadata and host->device staging                                   */
/* ------------------------------------------------------------------------- */
/* Graph-owned pinned bytes (capture only); NULL when full. */
static uint8_t *cap_pinned(cu_state *S, size_t n, size_t *off) {
    cu_graph_rec *g = &S->graph;
    size_t o = (g->pinned_used + 255) & ~(size_t)255;
    if (o + n > g->pinned_cap) {
        cu_record(S, cudaErrorMemoryAllocation, "graph staging full", __FILE__, __LINE__);
        return NULL;
    }
    g->pinned_used = o + n;
    *off = o;
    return g->pinned + o;
}

static void upload_meta(cu_state *S, const mf_batch *b) {
    const int nb = S->n_batch;
    int n = b->n;
    if (n > nb) {
        cu_record(S, cudaErrorInvalidValue, "batch wider than n_batch", __FILE__, __LINE__);
        n = nb;
    }
    int32_t *h = S->capturing ? (int32_t *)S->graph.pinned : S->h_meta;
    for (int i = 0; i < n; i++) {
        h[i] = b->tok ? b->tok[i] : 0;
        h[nb + i] = b->pos ? b->pos[i] : i;
        h[2 * nb + i] = b->seq ? b->seq[i] : 0;
    }
    /* pageable source in eager mode: cudaMemcpyAsync returns once the source has
     * been staged, so h_meta may be rewritten right away */
    CU_CHECK(S, cudaMemcpyAsync(S->d_meta, h, (size_t)3 * nb * sizeof(int32_t), cudaMemcpyHostToDevice, S->stream));
    S->meta_b = b;
    S->meta_valid = S->in_forward;
}

static const int32_t *meta_tok(cu_state *S, const mf_batch *b) {
    if (!(S->meta_valid && S->meta_b == b)) upload_meta(S, b);
    return S->d_meta;
}
static const int32_t *meta_pos(cu_state *S, const mf_batch *b) { return meta_tok(S, b) + S->n_batch; }
static const int32_t *meta_seq(cu_state *S, const mf_batch *b) { return meta_tok(S, b) + 2 * S->n_batch; }

/* Copies n bytes of host data to dst through the right staging. */
static void upload_small(cu_state *S, void *dst, const void *src, size_t n) {
    if (S->capturing) {
        size_t off;
        uint8_t *p = cap_pinned(S, n, &off);
        if (!p) return;
        memcpy(p, src, n);
        CU_CHECK(S, cudaMemcpyAsync(dst, p, n, cudaMemcpyHostToDevice, S->stream));
    } else {
        CU_CHECK(S, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, S->stream));
    }
}

/* ------------------------------------------------------------------------- */
/* Held-back ops                                                             */
/* ------------------------------------------------------------------------- */
/* The held GEMV group's launch arguments; with q8 on, its input quantized first unless
 * the q8 buffer already holds it. */
static void mmv_args(cu_state *S, cu_mmv_args *ap) {
    cu_pend *p = &S->pend;
    cu_mmv_args &a = *ap;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < p->mnmat; i++) {
        a.w[i] = (const uint8_t *)p->mw[i]->dev;
        a.out[i] = p->mout[i];
        a.bias[i] = p->mbias[i];
        a.rows[i] = (int)p->mw[i]->rows;
    }
    a.nmat = p->mnmat;
    a.stride = cu_row_stride(p->mtype, p->mK);
    a.K = p->mK;
    a.ncols = p->mn;
    a.x = p->mx;
    a.accum = p->maccum;
    a.ring_pre = S->after_attn ? S->xst_pre_attn : S->after_xsg ? S->xst_pre_swiglu : S->xst_pre;
    const int64_t nx = (int64_t)p->mn * p->mK;
    if (p->mq8) {
        if (!(S->q8_valid && S->q8_src == p->mx && S->q8_n == nx)) {
            cu_quantize_q8(S, p->mx, nx, &S->q8);
            q8_set(S, p->mx, nx);
        }
        a.q = S->q8;
    }
}

static void run_mmv(cu_state *S) {
    cu_pend *p = &S->pend;
    cu_mmv_args a;
    mmv_args(S, &a);
    if (a.accum) S->n_add_gemv++;
    if (p->mq8) {
        if (p->mmixed) {
            a.stride2 = cu_row_stride(p->mtype2, p->mK);
            cu_mmv_q8_mixed(S, p->mtype, p->mtype2, &a);
        } else {
            cu_mmv_q8(S, p->mtype, &a);
        }
    } else {
        cu_mmv_f(S, p->mtype, &a);
    }
    for (int i = 0; i < p->mnmat; i++) q8_touch(S, p->mout[i], (size_t)p->mn * a.rows[i] * 4);
}

/* The precomputed table when the op's parameters are the model's and every
 * position of the batch is inside it (forward_step guarantees < n_ctx; a direct
 * op call need not), else NULL: computed in the kernel, rounded the same way. */
static const float2 *rope_table(cu_state *S, int rope_dim, float base, const mf_batch *b) {
    if (!S->rope_cs || rope_dim != S->hp.rope_dim || base != S->hp.rope_base) return NULL;
    for (int i = 0; i < b->n; i++)
        if (b->pos[i] < 0 || b->pos[i] >= S->n_ctx) return NULL;
    return S->rope_cs;
}

static void attn_run(cu_state *S, const cu_attn_args *a, const float *q, float *out, const mf_batch *b);
static void attn_demote(cu_state *S);

static void flush(cu_state *S) {
    cu_pend *p = &S->pend;
    if (p->kind == PEND_ATTN) attn_demote(S); /* (then its GEMV, if one was held with it) */
    switch (p->kind) {
    case PEND_ADD:
        cu_add(S, p->ax, p->ay, p->an);
        break;
    case PEND_MMV:
        run_mmv(S);
        if (p->macc) { /* the add that followed, not folded in */
            cu_add(S, p->macc, p->mout[0], (int64_t)p->mn * p->mw[0]->rows);
            q8_touch(S, p->macc, (size_t)p->mn * p->mw[0]->rows * 4);
        }
        break;
    case PEND_ROPE:
        cu_rope(S, p->rj, p->rnj, meta_pos(S, p->rb), p->rb->n, p->rhd, p->rdim, p->rbase, p->rmode,
                rope_table(S, p->rdim, p->rbase, p->rb));
        break;
    default:
        break;
    }
    p->kind = PEND_NONE;
}

static int overlaps(const void *a, size_t na, const void *b, size_t nb) {
    const char *x = (const char *)a, *y = (const char *)b;
    return x < y + nb && y < x + na;
}

/* ------------------------------------------------------------------------- */
/* Ops                                                                       */
/* ------------------------------------------------------------------------- */
static void op_embed(mf_backend *be, float *out, const mf_weight *w, const mf_batch *b) {
    cu_state *S = ST(be);
    flush(S);
    /* one token: the embedding kernel also copies the RoPE table's row at pos for the
     * attention kernels of the step (cu_attn_args.cs_now) */
    const int cs = b->n == 1 && S->f_attn_fast;
    cu_embed(S, out, w, meta_tok(S, b), b->n, S->rope_cs, S->hp.rope_dim / 2, meta_pos(S, b),
             cs ? S->cs_now : NULL);
    S->cs_now_ok = cs;
    q8_touch(S, out, (size_t)b->n * w->cols * 4);
}

static void op_rmsnorm(mf_backend *be, float *out, const float *x, const mf_weight *w, int n, int dim, float eps) {
    cu_state *S = ST(be);
    cu_pend *p = &S->pend;
    const float *y = NULL;
    const int64_t total = (int64_t)n * dim;
    if (p->kind == PEND_ATTN) {
        const cu_q8 *q = q8_for(S, total);
        if (p->awo && p->ares == x && p->awo_out == out && n == 1 && dim == p->awo->rows && q &&
            cu_rmsnorm_acc_fits(dim)) {
            /* attention, o-projection, x += it and this norm (which overwrites the
             * projection's output, so that is never written): two launches (attn_wo.cu) */
            cu_attn_wo_args wa;
            wa.a = p->aa;
            wa.q = p->aq;
            wa.out = p->aout;
            wa.plane = S->wo_plane + (size_t)p->alayer * S->wo_plane_layer;
            wa.part = S->wo_part;
            wa.bar = S->wo_bar;
            wa.rows = (int)p->awo->rows;
            wa.acc = S->wo_acc;
            wa.abl = cu_skipped(S, "attn_wo_red") ? 1 : cu_skipped(S, "attn_wo_slice") ? 2 : 0;
            p->kind = PEND_NONE;
            cu_attn_wo(S, &wa, S->attn_wo_c);
            S->n_attn_wo++;
            q8_touch(S, p->aout, (size_t)p->awo->cols * 4);
            cu_rmsnorm_acc(S, out, (float *)x, S->wo_acc, (const float *)w->dev, dim, eps, q);
            q8_touch(S, x, (size_t)total * 4);
            q8_set(S, out, total);
            return;
        }
        attn_demote(S); /* (its add may still fold into its GEMV, below) */
    }
    if (p->kind == PEND_ADD && p->ax == x && p->an == total) {
        y = p->ay;
        p->kind = PEND_NONE;
    } else if (p->kind == PEND_MMV && p->macc == x && p->mout[0] == out && (int64_t)p->mn * p->mw[0]->rows == total) {
        /* GEMV into out, x += out, then this norm overwrites out: the GEMV adds into
         * x directly and out is never written */
        p->mout[0] = p->macc;
        p->macc = NULL;
        p->maccum = 1;
        flush(S);
    } else {
        flush(S);
    }
    const cu_q8 *q = n <= CU_MAX_GEMV_COLS ? q8_for(S, total) : NULL;
    cu_rmsnorm(S, out, (float *)x, y, (const float *)w->dev, n, dim, eps, q);
    if (y) q8_touch(S, x, (size_t)total * 4);
    if (q) q8_set(S, out, total);
    else q8_touch(S, out, (size_t)total * 4);
}

static void matmul_gemm(cu_state *S, float *out, const float *x, const mf_weight *w, const float *bias, int n) {
    const int K = (int)w->cols, R = (int)w->rows;
    const int Kp = (K + 31) & ~31;
    cu_to_f16(S, S->x16, x, n, K, Kp);
    int64_t rpc = S->w16_cap / Kp;
    rpc = rpc / 128 * 128;
    if (rpc > 65408) rpc = 65408;
    if (rpc < 128) rpc = 128;
    for (int64_t r0 = 0; r0 < R; r0 += rpc) {
        const int64_t nr = R - r0 < rpc ? R - r0 : rpc;
        cu_dequant_f16(S, S->w16, w, r0, nr, Kp);
        cu_gemm_f16(S, out + r0, R, S->x16, S->w16, bias ? bias + r0 : NULL, n, (int)nr, Kp);
    }
}

/* 1 when a GEMV of w over n columns reads q8 activations (a dp4a kernel for the type, and
 * room for them), else f32. */
static int mmv_takes_q8(const cu_state *S, const mf_weight *w, int n) {
    return S->f_dp4a && cu_mmv_q8_supported(w->type) && (int64_t)n * w->cols <= S->q8_cap;
}

/* A new held GEMV group on input x (no matrices yet, no fusions). */
static void pend_mmv_start(cu_pend *p, uint32_t type, int q8, int n, int K, const float *x) {
    p->kind = PEND_MMV;
    p->mtype = type;
    p->mq8 = q8;
    p->mn = n;
    p->mK = K;
    p->mx = x;
    p->mnmat = 0;
    p->macc = NULL;
    p->maccum = 0;
    p->mmixed = 0;
}

static void op_matmul(mf_backend *be, float *out, const float *x, const mf_weight *w, const mf_weight *bias, int n) {
    cu_state *S = ST(be);
    const float *bd = bias && bias->host ? (const float *)bias->dev : NULL;
    const int K = (int)w->cols, R = (int)w->rows;
    if (n > S->n_batch || K > S->kmax || !w->dev) {
        cu_record(S, cudaErrorInvalidValue, "matmul: batch wider than n_batch, input wider than the model's, or weight not on the device", __FILE__, __LINE__);
        return;
    }
    /* f32 weights stay f32 in prefill too (the f16 GEMM would round them; f32
     * models are the tiny ones) */
    cu_pend *p = &S->pend;
    if (p->kind == PEND_ATTN) {
        /* the o-projection of the held attention joins it (attn_wo.cu takes q4_K wo of
         * the model's shape); anything else launches the attention first */
        if (!p->awo && n == 1 && x == p->aout && w->type == QTYPE_Q4_K && !bd && K == p->aa.n_head * p->aa.hd &&
            R == S->hp.n_embd && !overlaps(out, (size_t)R * 4, x, (size_t)K * 4)) {
            p->awo = w;
            p->awo_out = out;
            q8_touch(S, out, (size_t)R * 4);
            return;
        }
        flush(S);
    }
    if (n <= CU_MAX_GEMV_COLS || !S->f_mma || w->type == QTYPE_F32) {
        const int q8 = mmv_takes_q8(S, w, n);
        if (n > CU_MAX_GEMV_COLS) {
            /* no tensor-core path: GEMV over groups of 8 tokens (MINFER_CUDA_MMA=0) */
            flush(S);
            for (int t0 = 0; t0 < n; t0 += CU_MAX_GEMV_COLS) {
                const int nc = n - t0 < CU_MAX_GEMV_COLS ? n - t0 : CU_MAX_GEMV_COLS;
                pend_mmv_start(p, w->type, 0, nc, K, x + (int64_t)t0 * K);
                p->mnmat = 1;
                p->mout[0] = out + (int64_t)t0 * R;
                p->mw[0] = w;
                p->mbias[0] = bd;
                flush(S);
            }
            q8_touch(S, out, (size_t)n * R * 4);
            return;
        }
        /* a third matrix of another type joins two as the mixed launch's last (xstm) */
        const int mixed = S->f_gemv_mixed && p->kind == PEND_MMV && p->mtype != w->type && q8 && n == 1 &&
                          p->mnmat == CU_MMV_MAXMAT - 1 && cu_mmv_mixed_supported(p->mtype, w->type);
        const int join = S->f_fuse && p->kind == PEND_MMV && (p->mtype == w->type || mixed) && p->mq8 == q8 &&
                         p->mn == n && p->mK == K && p->mx == x && p->mnmat < CU_MMV_MAXMAT && !p->macc &&
                         !p->mmixed && !overlaps(out, (size_t)n * R * 4, x, (size_t)n * K * 4);
        int ok = join;
        for (int i = 0; ok && i < p->mnmat; i++)
            if (overlaps(out, (size_t)n * R * 4, p->mout[i], (size_t)n * p->mw[i]->rows * 4)) ok = 0;
        if (!ok) {
            flush(S);
            pend_mmv_start(p, w->type, q8, n, K, x);
        } else if (p->mtype != w->type) {
            p->mmixed = 1;
            p->mtype2 = w->type;
        }
        p->mout[p->mnmat] = out;
        p->mw[p->mnmat] = w;
        p->mbias[p->mnmat] = bd;
        p->mnmat++;
        if (!S->f_fuse) flush(S);
        return;
    }
    flush(S);
    matmul_gemm(S, out, x, w, bd, n);
    q8_touch(S, out, (size_t)n * R * 4);
}

static void op_rope(mf_backend *be, float *x, const mf_batch *b, int n_heads, int head_dim, int rope_dim, float base,
                    mf_rope_mode mode) {
    cu_state *S = ST(be);
    cu_pend *p = &S->pend;
    if (S->f_fuse && p->kind == PEND_ROPE && p->rnj == 1 && p->rb == b && p->rhd == head_dim && p->rdim == rope_dim &&
        p->rbase == base && p->rmode == (int)mode && p->rj[0].x != x) {
        p->rj[1].x = x;
        p->rj[1].n_heads = n_heads;
        p->rnj = 2;
    } else {
        flush(S);
        p->kind = PEND_ROPE;
        p->rj[0].x = x;
        p->rj[0].n_heads = n_heads;
        p->rnj = 1;
        p->rb = b;
        p->rhd = head_dim;
        p->rdim = rope_dim;
        p->rbase = base;
        p->rmode = (int)mode;
        if (!S->f_fuse) flush(S);
    }
    q8_touch(S, x, (size_t)b->n * n_heads * head_dim * 4);
}

static void op_attention(mf_backend *be, float *out, const float *q, const float *k, const float *v, int layer,
                         const mf_batch *b) {
    cu_state *S = ST(be);
    const mf_hparams *hp = &S->hp;
    cu_pend *p = &S->pend;
    int rope = 0, rdim = 0, rmode = 0;
    float rbase = 0.0f;
    if (p->kind == PEND_ROPE && p->rnj == 2 && p->rb == b && p->rhd == hp->head_dim && p->rj[0].x == q &&
        p->rj[0].n_heads == hp->n_head && p->rj[1].x == k && p->rj[1].n_heads == hp->n_head_kv) {
        rope = 1;
        rdim = p->rdim;
        rbase = p->rbase;
        rmode = p->rmode;
        p->kind = PEND_NONE;
    } else {
        flush(S);
    }
    const int n = b->n, hd = hp->head_dim;
    cu_attn_args a;
    a.n = n;
    a.n_head = hp->n_head;
    a.n_kv = hp->n_head_kv;
    a.hd = hd;
    a.n_ctx = S->n_ctx;
    a.pos = meta_pos(S, b);
    a.seq = meta_seq(S, b);
    a.kc = S->kc[layer];
    a.vc = S->vc[layer];
    a.kin = a.vin = NULL;
    a.pre = 0;
    a.cs_now = NULL;
    a.seq1 = S->n_seq == 1;
    a.fit = S->f_attn_fit;
    a.warps = S->attn_warps;
    a.trigger = S->attn_trigger;
    a.abl = cu_skipped(S, "attn_dec_wait") ? 2 : cu_skipped(S, "attn_dec_store") ? 1 : cu_skipped(S, "attn_dec_out") ? 3 : 0;
    a.rope = 0;
    a.rope_dim = rdim;
    a.rope_mode = rmode;
    a.rope_base = rbase;
    a.rope_cs = rope ? rope_table(S, rdim, rbase, b) : NULL;
    if (n == 1 && S->f_fuse && cu_attn_dec_supported(hd)) {
        /* one token: RoPE and the cache store happen inside the attention kernel
         * (q and k in memory stay unrotated; nothing reads them after) */
        a.kin = k;
        a.vin = v;
        a.rope = rope;
        a.pre = S->f_attn_pre;
        if (S->cs_now_ok && a.rope_cs == S->rope_cs) a.cs_now = S->cs_now;
    } else {
        cu_kv_store(S, &a, (float *)q, (float *)k, v, rope, rdim, rbase, rmode, a.rope_cs);
    }
    if (n == 1 && S->f_attn_wo && a.cs_now && a.kin && a.rope && a.pre && a.seq1 && !a.abl) {
        /* held: the o-projection and the add after it may join it (attn_wo.cu) */
        p->kind = PEND_ATTN;
        p->aa = a;
        p->alayer = layer;
        p->ab = b;
        p->aq = q;
        p->aout = out;
        p->awo = NULL;
        p->awo_out = NULL;
        p->ares = NULL;
    } else {
        attn_run(S, &a, q, out, b);
    }
    q8_touch(S, q, (size_t)n * hp->n_head * hd * 4);
    q8_touch(S, k, (size_t)n * hp->n_head_kv * hd * 4);
}

/* Launches the attention op_attention prepared (a) as issued. */
static void attn_run(cu_state *S, const cu_attn_args *ap, const float *q, float *out, const mf_batch *b) {
    const cu_attn_args &a = *ap;
    const int n = a.n, hd = a.hd;
    const int64_t qd = (int64_t)a.n_head * hd;
    if (n > CU_MAX_GEMV_COLS && S->f_flash && cu_attn_flash_supported(hd) && !S->capturing) {
        /* tiles of <= 64 consecutive tokens of one sequence */
        int nt = 0;
        for (int t = 0; t < n;) {
            const int seq = b->seq ? b->seq[t] : 0;
            int cnt = 0, kmax = 0;
            while (t + cnt < n && cnt < 64 && (b->seq ? b->seq[t + cnt] : 0) == seq) {
                const int pp = b->pos ? b->pos[t + cnt] : t + cnt;
                if (pp > kmax) kmax = pp;
                cnt++;
            }
            S->h_tiles[nt++] = make_int4(t, cnt, seq, kmax);
            t += cnt;
        }
        upload_small(S, S->d_tiles, S->h_tiles, (size_t)nt * sizeof(int4));
        cu_attn_flash(S, &a, q, out, S->d_tiles, nt);
        q8_touch(S, out, (size_t)n * qd * 4);
    } else {
        for (int t0 = 0; t0 < n; t0 += CU_MAX_GEMV_COLS) {
            cu_attn_args g = a;
            g.n = n - t0 < CU_MAX_GEMV_COLS ? n - t0 : CU_MAX_GEMV_COLS;
            g.pos = a.pos + t0;
            g.seq = a.seq + t0;
            const cu_q8 *q8 = n <= CU_MAX_GEMV_COLS ? q8_for(S, (int64_t)n * qd) : NULL;
            cu_attn_split(S, &g, q + t0 * qd, out + t0 * qd, S->att_part, S->att_count, S->att_chunk,
                          S->att_nchunks, q8 && hd % 32 == 0 ? q8 : NULL);
            if (q8 && hd % 32 == 0) q8_set(S, out, (int64_t)n * qd);
            else q8_touch(S, out, (size_t)n * qd * 4);
        }
    }
}

/* The held attention launched as issued; an o-projection held with it becomes a held
 * GEMV again (with its add), as op_matmul and op_add would have left it. */
static void attn_demote(cu_state *S) {
    cu_pend *p = &S->pend;
    p->kind = PEND_NONE;
    attn_run(S, &p->aa, p->aq, p->aout, p->ab);
    if (!p->awo) return;
    const mf_weight *w = p->awo;
    pend_mmv_start(p, w->type, mmv_takes_q8(S, w, 1), 1, (int)w->cols, p->aout);
    p->mnmat = 1;
    p->mout[0] = p->awo_out;
    p->mw[0] = w;
    p->mbias[0] = NULL;
    p->macc = p->ares;
}

static void op_swiglu(mf_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    cu_state *S = ST(be);
    cu_pend *p = &S->pend;
    const cu_q8 *q = q8_for(S, n);
    if (S->f_swiglu_gemv && q && p->kind == PEND_MMV && p->mq8 && !p->mmixed && !p->macc && p->mn == 1 &&
        p->mnmat == 2 && p->mout[0] == gate && p->mout[1] == up && p->mw[0]->rows == n && p->mw[1]->rows == n &&
        !overlaps(out, (size_t)n * 4, p->mx, (size_t)p->mK * 4) &&
        !overlaps(out, (size_t)n * 4, up, (size_t)n * 4) && (out == gate || !overlaps(out, (size_t)n * 4, gate, (size_t)n * 4))) {
        /* the held gate+up launch with the SwiGLU in its store (mmv.cuh, xsg, which refuses
         * what it cannot take: a bias, other shapes): its q8 goes to q8h, which then becomes
         * the q8 buffer */
        cu_mmv_args a;
        mmv_args(S, &a);
        a.ring_pre = S->xsg_pre;
        const int form = cu_mmv_q8_swiglu(S, p->mtype, &a, out, &S->q8h);
        if (form) {
            p->kind = PEND_NONE;
            S->n_swiglu_gemv++;
            S->n_xsg_shared += form == 2;
            const cu_q8 t = S->q8;
            S->q8 = S->q8h;
            S->q8h = t;
            q8_set(S, out, n);
            return;
        }
    }
    flush(S);
    cu_swiglu(S, out, gate, up, n, q);
    if (q) q8_set(S, out, n);
    else q8_touch(S, out, (size_t)n * 4);
}

static void op_add(mf_backend *be, float *x, const float *y, int64_t n) {
    cu_state *S = ST(be);
    cu_pend *p = &S->pend;
    if (p->kind == PEND_ATTN && p->awo && !p->ares && y == p->awo_out && n == p->awo->rows &&
        !overlaps(x, (size_t)n * 4, p->aout, (size_t)p->awo->cols * 4)) {
        /* x += the held attention's o-projection: held with them */
        p->ares = x;
        q8_touch(S, x, (size_t)n * 4);
        return;
    }
    /* x += the held one-matrix GEMV's output: held with it (op_rmsnorm may fold it in) */
    if (S->f_add_gemv && p->kind == PEND_MMV && !p->macc && !p->maccum && p->mnmat == 1 && p->mout[0] == y &&
        (int64_t)p->mn * p->mw[0]->rows == n && !overlaps(x, (size_t)n * 4, p->mx, (size_t)p->mn * p->mK * 4)) {
        p->macc = x;
        q8_touch(S, x, (size_t)n * 4);
        return;
    }
    flush(S);
    q8_touch(S, x, (size_t)n * 4);
    if (S->f_fuse) {
        S->pend.kind = PEND_ADD;
        S->pend.ax = x;
        S->pend.ay = y;
        S->pend.an = n;
    } else {
        cu_add(S, x, y, n);
    }
}

static void op_get_rows(mf_backend *be, float *dst, const float *src, const int32_t *idx, int n_idx, int width) {
    cu_state *S = ST(be);
    flush(S);
    if (n_idx <= 0) return;
    if (n_idx > S->n_batch) {
        cu_record(S, cudaErrorInvalidValue, "get_rows: more rows than n_batch", __FILE__, __LINE__);
        return;
    }
    upload_small(S, S->d_idx, idx, (size_t)n_idx * sizeof(int32_t));
    cu_get_rows(S, dst, src, S->d_idx, n_idx, width);
    q8_touch(S, dst, (size_t)n_idx * width * 4);
}

static const mf_ops cuda_ops = {
    op_embed, op_rmsnorm, op_matmul, op_rope, op_attention, op_swiglu, op_add, op_get_rows,
};

/* ------------------------------------------------------------------------- */
/* alloc / release / download                                                */
/* ------------------------------------------------------------------------- */
static void *be_alloc(mf_backend *be, size_t nbytes) {
    cu_state *S = ST(be);
    void *p = NULL;
    if (cudaMalloc(&p, nbytes ? nbytes : 16) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (S->nallocs == S->capallocs) {
        S->capallocs = S->capallocs ? 2 * S->capallocs : 32;
        S->allocs = (cu_alloc_rec *)mf_xrealloc(S->allocs, S->capallocs * sizeof *S->allocs);
    }
    S->allocs[S->nallocs].p = p;
    S->allocs[S->nallocs].n = nbytes;
    S->nallocs++;
    S->fw_scratch += nbytes;
    return p;
}

static void be_release(mf_backend *be, void *p) {
    cu_state *S = ST(be);
    if (!p) return;
    flush(S);
    cudaStreamSynchronize(S->stream);
    for (int i = 0; i < S->nallocs; i++)
        if (S->allocs[i].p == p) {
            S->fw_scratch -= S->allocs[i].n;
            S->allocs[i] = S->allocs[--S->nallocs];
            break;
        }
    /* a graph captured over this memory is stale now */
    if (S->graph.valid) {
        cudaGraphExecDestroy(S->graph.exec);
        S->graph.valid = 0;
    }
    S->q8_valid = 0;
    cudaFree(p);
}

/* The be_host_alloc buffer that holds [p, p + n) if it is pinned, else NULL */
static const cu_host_buf *host_pinned(const cu_state *S, const void *p, size_t n) {
    const char *c = (const char *)p;
    for (int i = 0; i < CU_HOST_MAX; i++) {
        const char *b = (const char *)S->host[i].p;
        if (b && S->host[i].pinned && c >= b && c + n <= b + S->host[i].bytes) return &S->host[i];
    }
    return NULL;
}

static void *be_host_alloc(mf_backend *be, size_t nbytes) {
    cu_state *S = ST(be);
    cudaSetDevice(S->device); /* (the device address below is this device's) */
    int i = 0;
    while (i < CU_HOST_MAX && S->host[i].p) i++;
    void *p = NULL;
    int pinned = 0;
    if (i < CU_HOST_MAX && cudaMallocHost(&p, nbytes) == cudaSuccess) {
        pinned = 1;
    } else {
        (void)cudaGetLastError();
        p = malloc(nbytes); /* (pageable: downloads go through the staging buffer as before) */
    }
    void *dev = NULL;
    if (pinned && cudaHostGetDevicePointer(&dev, p, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        dev = NULL;
    }
    if (p && i < CU_HOST_MAX) S->host[i] = (cu_host_buf){p, nbytes, pinned, dev};
    return p;
}

/* Frees a recorded host buffer and clears its record */
static void host_buf_free(cu_host_buf *b) {
    if (b->pinned) cudaFreeHost(b->p);
    else free(b->p);
    *b = (cu_host_buf){NULL, 0, 0, NULL};
}

static void be_host_free(mf_backend *be, void *p) {
    cu_state *S = ST(be);
    if (!p) return;
    for (int i = 0; i < CU_HOST_MAX; i++)
        if (S->host[i].p == p) {
            host_buf_free(&S->host[i]);
            return;
        }
    free(p); /* (allocated past CU_HOST_MAX records: malloc'd) */
}

static void be_download(mf_backend *be, void *dst, const void *src, size_t nbytes) {
    cu_state *S = ST(be);
    flush(S);
    if (S->capturing) {
        cu_graph_rec *g = &S->graph;
        size_t off;
        uint8_t *p = cap_pinned(S, nbytes, &off);
        if (!p || g->ncopies == CU_GRAPH_MAXCOPY) {
            cu_record(S, cudaErrorNotSupported, "download inside graph capture", __FILE__, __LINE__);
            return;
        }
        const cu_host_buf *hb = host_pinned(S, dst, nbytes);
        char *direct = hb ? (char *)dst : NULL;
        /* into pinned host_alloc memory by a kernel where it can (MINFER_CUDA_HOST_STORE) */
        const int store = hb && hb->dev && S->f_host_store && nbytes % 16 == 0 && (uintptr_t)dst % 16 == 0 &&
                          (uintptr_t)src % 16 == 0;
        if (cu_skipped(S, "download")) {
            /* (timing only: the price of the download) */
        } else if (store) {
            cu_store_host(S, (char *)hb->dev + ((const char *)dst - (const char *)hb->p), src, nbytes);
            S->n_host_store++;
        } else {
            CU_CHECK(S, cudaMemcpyAsync(direct ? (void *)direct : (void *)p, src, nbytes, cudaMemcpyDeviceToHost,
                                        S->stream));
            if (S->f_host_store && !S->n_copy_node)
                fprintf(stderr, "minfer/cuda: the decode graph downloads %zu bytes by a copy node, not the host-store "
                                "kernel (%s)\n",
                        nbytes, !hb        ? "the destination is not pinned host_alloc memory"
                                : !hb->dev ? "the runtime gave no device address for it"
                                           : "not 16-byte aligned");
            S->n_copy_node++;
        }
        cu_copy *c = &g->copies[g->ncopies++];
        c->pin_off = off;
        c->bytes = nbytes;
        c->direct = direct;
        const char *d = (const char *)dst, *l = (const char *)S->cap_logits;
        if (l && d >= l && d + nbytes <= l + S->cap_logits_bytes) {
            c->rel = 1;
            c->off = (size_t)(d - l);
        } else {
            c->rel = 0;
            c->dst = (char *)dst;
        }
        return;
    }
    CU_CHECK(S, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, S->stream));
    CU_CHECK(S, cudaStreamSynchronize(S->stream));
}

static void be_kv_truncate(mf_backend *be, int seq, int from_pos) {
    (void)be;
    (void)seq;
    (void)from_pos;
}

/* ------------------------------------------------------------------------- */
/* Weight upload                                                             */
/* ------------------------------------------------------------------------- */
static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static int weight_dev_bytes(const mf_weight *w, size_t *out) {
    const int64_t rs = cu_row_stride(w->type, w->cols);
    if (rs <= 0) return -1;
    *out = (size_t)rs * (size_t)w->rows;
    return 0;
}

/* Copies one tensor from the file mapping into its device slot (repacked). */
static int upload_one(cu_state *S, const mf_weight *w, void *dst, void *tmp, size_t tmp_cap, mf_err *err) {
    const qtype_traits *tr = qtype_get(w->type);
    const size_t file_row = (size_t)(w->cols / tr->blck) * tr->type_size;
    const size_t dev_row = (size_t)cu_row_stride(w->type, w->cols);
    if (!cu_type_planar(w->type) && file_row == dev_row) {
        TRY(S, cudaMemcpyAsync(dst, w->host, file_row * w->rows, cudaMemcpyHostToDevice, S->stream));
        return 0;
    }
    int64_t rows_per = (int64_t)(tmp_cap / file_row);
    if (rows_per > 65535) rows_per = 65535;
    if (rows_per < 1) return mf_fail(err, MF_ERR_DEVICE, "cuda: row of %s too large for the upload buffer", w->name);
    for (int64_t r0 = 0; r0 < w->rows; r0 += rows_per) {
        const int64_t nr = w->rows - r0 < rows_per ? w->rows - r0 : rows_per;
        TRY(S, cudaMemcpyAsync(tmp, (const uint8_t *)w->host + r0 * file_row, nr * file_row, cudaMemcpyHostToDevice,
                               S->stream));
        cu_repack(S, (uint8_t *)dst + r0 * dev_row, tmp, w->type, w->cols, nr);
        TRY(S, cudaStreamSynchronize(S->stream));
        if (S->err) return -1;
    }
    return 0;
}

static int collect_weights(mf_model *m, mf_weight **list, int cap) {
    int n = 0;
    list[n++] = &m->tok_embd;
    list[n++] = &m->output_norm;
    list[n++] = &m->output;
    for (int l = 0; l < m->hp.n_layer; l++) {
        mf_layer *L = &m->layers[l];
        mf_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->bq, &L->bk,
                           &L->bv, &L->wo, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < MF_ARRAY_LEN(ws) && n < cap; i++) list[n++] = ws[i];
    }
    return n;
}

/* __CUDA_ARCH__ of the code this device runs (the binary's SASS, or PTX JIT-compiled
 * from an older target): the TMA kernels need the former to be >= 900. */
static __global__ void kernel_code_arch(int *out) {
#if defined(__CUDA_ARCH__)
    *out = __CUDA_ARCH__;
#endif
}
/* An integer switch in lo..hi: outside it, a line says so and dflt is used. */
static int env_in_range(const char *name, int dflt, int lo, int hi) {
    const int v = mf_env_int(name, dflt);
    if (v >= lo && v <= hi) return v;
    mf_log("minfer/cuda: %s=%d is outside %d..%d; using %d", name, v, lo, hi, dflt);
    return dflt;
}

/* An env switch that takes one of n values; unset: dflt; anything else is named and
 * dflt used. */
static int env_one_of(const char *name, int dflt, const int *ok, int n) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    const int v = mf_env_int(name, dflt);
    for (int i = 0; i < n; i++)
        if (v == ok[i]) return v;
    char list[64] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? ", " : "", ok[i]);
    mf_log("minfer/cuda: %s=%s is not one of %s; using the default", name, e, list);
    return dflt;
}

static int cu_code_arch(void) {
    int *d = NULL, h = 0;
    if (cudaMalloc((void **)&d, sizeof(int)) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    kernel_code_arch<<<1, 1>>>(d);
    if (cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) {
        (void)cudaGetLastError();
        h = 0;
    }
    cudaFree(d);
    return h;
}

/* Quantized matrices the xs GEMV (variant 3) cannot take (rows too wide for its
 * register-held activations: xs2 or pp take them); the notice says how many. */
static int count_xs_wide(const mf_model *m) {
    int n = 0;
    const mf_weight *top = &m->output;
    if (top->host && cu_mmv_q8_supported(top->type) && !cu_mmv_xs_takes(top->type, (int)top->cols)) n++;
    for (int l = 0; l < m->hp.n_layer && m->layers; l++) {
        const mf_layer *L = &m->layers[l];
        const mf_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < MF_ARRAY_LEN(ws); i++)
            if (ws[i]->host && cu_mmv_q8_supported(ws[i]->type) && !cu_mmv_xs_takes(ws[i]->type, (int)ws[i]->cols))
                n++;
    }
    return n;
}

static int upload_weights(cu_state *S, mf_model *m, mf_err *err) {
    const int cap = 3 + 12 * m->hp.n_layer;
    mf_weight **list = (mf_weight **)mf_xmalloc(sizeof(mf_weight *) * cap);
    size_t *off = (size_t *)mf_xcalloc(cap, sizeof(size_t));
    int *owner = (int *)mf_xmalloc(sizeof(int) * cap);
    const int n = collect_weights(m, list, cap);
    size_t total = 0, tmp_need = 0;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        mf_weight *w = list[i];
        owner[i] = -1;
        w->dev = NULL;
        if (!w->host) continue;
        for (int j = 0; j < i; j++)
            if (list[j]->host == w->host && list[j]->type == w->type && list[j]->nbytes == w->nbytes) {
                owner[i] = j;
                break;
            }
        if (owner[i] >= 0) continue;
        size_t nb;
        if (weight_dev_bytes(w, &nb)) {
            rc = mf_fail(err, MF_ERR_INPUT, "cuda: tensor %s: type %s with %lld columns is not supported", w->name,
                         qtype_name(w->type), (long long)w->cols);
            break;
        }
        off[i] = total;
        total += align256(nb);
        const qtype_traits *tr = qtype_get(w->type);
        const size_t file_row = (size_t)(w->cols / tr->blck) * tr->type_size;
        const size_t fb = file_row * (size_t)w->rows;
        if (cu_type_planar(w->type) || file_row % 16) tmp_need = fb > tmp_need ? fb : tmp_need;
    }
    if (rc == 0) {
        S->wbuf = dev_alloc(S, total, "cudaMalloc(weights)");
        if (!S->wbuf) rc = mf_fail(err, MF_ERR_DEVICE, "cuda: cannot allocate %.2f GiB for the weights: %s",
                                   total / 1073741824.0, S->errmsg);
        S->wbytes = total;
    }
    void *tmp = NULL;
    size_t tmp_cap = tmp_need < ((size_t)256 << 20) ? tmp_need : ((size_t)256 << 20);
    if (rc == 0 && tmp_need) {
        tmp = dev_alloc(S, tmp_cap, "cudaMalloc(upload)");
        if (!tmp) rc = mf_fail(err, MF_ERR_DEVICE, "cuda: cannot allocate the upload buffer: %s", S->errmsg);
    }
    for (int i = 0; i < n && rc == 0; i++) {
        mf_weight *w = list[i];
        if (!w->host || owner[i] >= 0) continue;
        w->dev = (uint8_t *)S->wbuf + off[i];
        if (upload_one(S, w, w->dev, tmp, tmp_cap, err)) {
            if (!err->msg[0] || S->err) mf_fail(err, MF_ERR_DEVICE, "cuda: upload of %s: %s", w->name, S->errmsg);
            rc = MF_ERR_DEVICE;
        }
    }
    for (int i = 0; i < n && rc == 0; i++)
        if (owner[i] >= 0) list[i]->dev = list[owner[i]]->dev;
    if (tmp) cudaFree(tmp);
    free(list);
    free(off);
    free(owner);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* init / destroy                                                            */
/* ------------------------------------------------------------------------- */
static int check_model(cu_state *S, const mf_model *m, mf_err *err) {
    const mf_hparams *hp = &m->hp;
    if (hp->head_dim % 8 || hp->head_dim > 256 || hp->head_dim <= 0)
        return mf_fail(err, MF_ERR_INPUT, "cuda: head_dim %d unsupported (needs a multiple of 8, <= 256)", hp->head_dim);
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
        return mf_fail(err, MF_ERR_INPUT, "cuda: n_head %d not a multiple of n_head_kv %d", hp->n_head, hp->n_head_kv);
    if (hp->rope_dim % 2 || hp->rope_dim > hp->head_dim)
        return mf_fail(err, MF_ERR_INPUT, "cuda: rope_dim %d unsupported", hp->rope_dim);
    const mf_weight *fl[] = {&m->output_norm};
    for (size_t i = 0; i < MF_ARRAY_LEN(fl); i++)
        if (fl[i]->host && fl[i]->type != QTYPE_F32)
            return mf_fail(err, MF_ERR_INPUT, "cuda: %s must be f32 (is %s)", fl[i]->name, qtype_name(fl[i]->type));
    for (int l = 0; l < hp->n_layer; l++) {
        const mf_layer *L = &m->layers[l];
        const mf_weight *vs[] = {&L->attn_norm, &L->ffn_norm, &L->bq, &L->bk, &L->bv};
        for (size_t i = 0; i < MF_ARRAY_LEN(vs); i++)
            if (vs[i]->host && vs[i]->type != QTYPE_F32)
                return mf_fail(err, MF_ERR_INPUT, "cuda: %s must be f32 (is %s)", vs[i]->name,
                               qtype_name(vs[i]->type));
        const mf_weight *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < MF_ARRAY_LEN(ms); i++) {
            if (!ms[i]->host) continue;
            if (cu_type_is_quant(ms[i]->type)) S->any_quant = 1;
            if (ms[i]->cols > S->kmax) S->kmax = (int)ms[i]->cols;
        }
    }
    if (m->output.host) {
        if (cu_type_is_quant(m->output.type)) S->any_quant = 1;
        if (m->output.cols > S->kmax) S->kmax = (int)m->output.cols;
    }
    if (hp->n_embd > S->kmax) S->kmax = hp->n_embd;
    if (hp->n_ff > S->kmax) S->kmax = hp->n_ff;
    if (hp->n_head * hp->head_dim > S->kmax) S->kmax = hp->n_head * hp->head_dim;
    return 0;
}

static void free_state(cu_state *S) {
    /* the launch counts of paths tests/run_cuda.sh checks ran (xst2, the folded add, xstm) */
    if (S->verbose)
        fprintf(stderr,
                "minfer/cuda: xst2 launches %llu, add-in-gemv launches %llu, xstm launches %llu, attn-wo launches %llu, "
                "swiglu-gemv launches %llu (shared ring %llu), ring-pairs launches %llu, graph downloads: host-store %llu, "
                "copy-node %llu\n",
                (unsigned long long)S->n_xst2, (unsigned long long)S->n_add_gemv, (unsigned long long)S->n_xstm,
                (unsigned long long)S->n_attn_wo, (unsigned long long)S->n_swiglu_gemv,
                (unsigned long long)S->n_xsg_shared, (unsigned long long)S->n_pairs,
                (unsigned long long)S->n_host_store, (unsigned long long)S->n_copy_node);
    cu_trace_close(S->trace);
    if (S->graph.valid) cudaGraphExecDestroy(S->graph.exec);
    if (S->graph.pinned) cudaFreeHost(S->graph.pinned);
    for (int i = 0; i < CU_HOST_MAX; i++) /* (what the caller did not give back) */
        if (S->host[i].p) host_buf_free(&S->host[i]);
    void *dev[] = {S->wbuf, S->kvbuf, S->d_meta, S->d_idx, S->d_tiles, S->q8.qs, S->q8.d, S->q8.s, S->q8.xl4, S->q8.xl6,
                   S->q8h.qs, S->q8h.d, S->q8h.s, S->q8h.xl4, S->q8h.xl6,
                   S->att_part, S->x16, S->w16, S->rope_cs, S->cs_now, S->att_count, S->wo_acc, S->wo_plane,
                   S->wo_part, S->wo_bar};
    for (size_t i = 0; i < MF_ARRAY_LEN(dev); i++)
        if (dev[i]) cudaFree(dev[i]);
    for (int i = 0; i < S->nallocs; i++) cudaFree(S->allocs[i].p);
    for (int i = 0; i < S->nextra; i++) cudaFree(S->extra[i]);
    free(S->allocs);
    free(S->extra);
    free(S->kc);
    free(S->vc);
    free(S->h_meta);
    free(S->h_tiles);
}

static int be_init(mf_backend *be, mf_model *m, int n_ctx, int n_seq, int n_batch, mf_err *err) {
    cu_state *S = ST(be);
    cudaError_t e;
    if ((e = cudaSetDevice(S->device)) != cudaSuccess)
        return mf_fail(err, MF_ERR_DEVICE, "cuda: cudaSetDevice(%d): %s", S->device, cudaGetErrorString(e));
    S->m = m;
    S->hp = m->hp;
    S->n_ctx = n_ctx > 0 ? n_ctx : 1;
    S->n_seq = n_seq > 0 ? n_seq : 1;
    S->n_batch = n_batch > 0 ? n_batch : 1;
    S->f_graph = mf_env_int("MINFER_CUDA_GRAPH", 1);
    S->f_pdl = mf_env_int("MINFER_CUDA_PDL", 1) && S->prop.major >= 9;
    S->f_fuse = mf_env_int("MINFER_CUDA_FUSE", 1);
    S->f_add_gemv = mf_env_int("MINFER_CUDA_ADD_GEMV", 1) == 1 && S->f_fuse;
    S->f_gemv_mixed = mf_env_int("MINFER_CUDA_GEMV_MIXED", 1) == 1 && S->f_fuse;
    S->f_dp4a = mf_env_int("MINFER_CUDA_DP4A", 1);
    S->f_swiglu_gemv = mf_env_int("MINFER_CUDA_SWIGLU_GEMV", 1) == 1 && S->f_fuse && S->f_dp4a;
    S->f_xsg_shared = mf_env_int("MINFER_CUDA_XSG_SHARED", 1) == 1;
    S->f_host_store = mf_env_int("MINFER_CUDA_HOST_STORE", 1) == 1;
    S->f_xstm_stage = mf_env_int("MINFER_CUDA_XSTM_STAGE", 1) == 1;
    S->f_flash = mf_env_int("MINFER_CUDA_FLASH", 1);
    S->f_mma = mf_env_int("MINFER_CUDA_MMA", 1);
    S->f_sync = mf_env_int("MINFER_CUDA_SYNC", 0);
    S->verbose = mf_env_int("MINFER_CUDA_VERBOSE", 0);
    S->st.on = mf_env_int("MINFER_CUDA_STEPTIME", 0) == 1 && cudaEventCreate(&S->st.e0) == cudaSuccess &&
               cudaEventCreate(&S->st.e1) == cudaSuccess;
    {
        const char *tp = getenv("MINFER_CUDA_TRACE");
        if (tp && *tp) S->trace = cu_trace_open(tp);
    }
    S->code_arch = cu_code_arch();
    S->f_gemv = mf_env_int("MINFER_CUDA_GEMV", 3);
    if (S->f_gemv < 1 || S->f_gemv > 4) S->f_gemv = 3;
    if (S->f_gemv == 4 && S->code_arch < 900) {
        mf_log("minfer/cuda: MINFER_CUDA_GEMV=4 needs sm_90+ code (this device runs sm_%d code); using 3",
               S->code_arch / 10);
        S->f_gemv = 3;
    }
    /* 8 MB: the 7B's wo (9.4 MB) on xst. With the decode attention triggering after its
     * wait (attn.cu) that measured faster: tg128 633.90 / 634.65 / 634.63 and 633.38 /
     * 633.54 / 635.08 vs 627.37 / 627.03 / 629.87 and 627.54 / 630.18 / 628.03 with 16 MB;
     * in a 3314 context 632.42 vs 629.63 (H200, 2026-11-30, bench/RESULTS.md calls 32-33).
     * With the attention triggering at its start it had measured slower (601.9 vs 605.9,
     * call 13). */
    S->xst_bytes = (int64_t)mf_env_int("MINFER_CUDA_XST_MB", 8) << 20;  /* negative: never */
    if (S->code_arch < 900) S->xst_bytes = -1;
    if (S->prop.sharedMemPerBlockOptin < (size_t)cu_mmv_xst_smem_need()) {
        /* the ring does not fit (e.g. 99 KB parts); xs everywhere */
        S->xst_bytes = -1;
        if (S->f_gemv == 4) S->f_gemv = 3;
    }
    S->xst_pre = env_in_range("MINFER_CUDA_XST_PRE", MMV_XST_PRE_DEFAULT, 0, 16);
    S->xst_pre_attn = env_in_range("MINFER_CUDA_XST_PRE_ATTN", S->xst_pre, 0, 16);
    /* after xsg every ring row ahead of the wait (the xsg launch's last third runs on the
     * ~80 SMs whose blocks own a third group, each bound by its own rows in flight, not by
     * the DRAM: the rows of the GEMV after it can come in meanwhile; H200 tg128 7B, with
     * xsg's ring at 3 rows: 698.6-701.0 vs 691.1-695.4 at 1 row and depth 2; bench/RESULTS.md) */
    S->xst_pre_swiglu = env_in_range("MINFER_CUDA_XST_PRE_SWIGLU", 16, 0, 16);
    /* the gate+up launch (xsgs: 16 warps, one ring of 48 rows per block) asks for 2 rows a
     * warp, 32 of its 48, before its wait, not XST_PRE's 1 (a setting it inherited from xst
     * unpriced): more of its ring in flight across the norm before it pays, all of it less.
     * tg128, 7B q4_k_m, H200, 2026-12-02, four rounds: 741.66 / 741.48
     * / 740.23 / 734.51 tok/s against 722.23 / 727.94 / 724.48 / 724.49 with 1 row and
     * 730.22 / 726.26 / 728.30 / 727.14 with all 3 (bench/RESULTS.md) */
    S->xsg_pre = env_in_range("MINFER_CUDA_XSG_PRE", 2, 0, 16);
    {
        static const int widths[] = {256, 512, 1024};
        S->norm_threads = env_one_of("MINFER_CUDA_NORM_THREADS", 1024, widths, 3);
        static const int splits[] = {1, 2, 4, 8};
        S->norm_split = env_one_of("MINFER_CUDA_NORM_SPLIT", 4, splits, 4);
        S->norm_warps = mf_env_int("MINFER_CUDA_NORM_WARPS", 1) == 1;
        static const int sw[] = {64, 128, 256, 512, 1024};
        S->swiglu_threads = env_one_of("MINFER_CUDA_SWIGLU_THREADS", 256, sw, 5);
    }
    S->attn_trigger = env_in_range("MINFER_CUDA_ATTN_TRIGGER", 1, 0, 3); /* (attn.cu says why 1) */
    S->xst_depth = env_in_range("MINFER_CUDA_XST_DEPTH", cu_mmv_xst_depth_default(), 2, 16);
    S->xsg_depth = env_in_range("MINFER_CUDA_XSG_DEPTH", MMV_XSG_DEPTH, 2, 16);
    /* (mmv.cuh says why; tg128 7B q4_k_m, H200, 2026-11-30: 706.32-707.19 vs 695.94-697.85
     * with neither, 704.39-704.59 with xst only; then 711.74-712.46 with xstm too against
     * 709.66-710.41 without, another call; xst2 too, 2026-12-01: 725.60 / 726.80 / 727.20
     * against 716.82 / 721.44 / 720.00 with RING_PAIRS=7, one call) */
    S->ring_pairs = env_in_range("MINFER_CUDA_RING_PAIRS", 15, 0, 15);
    S->f_attn_pre = mf_env_int("MINFER_CUDA_ATTN_PRE", 1) == 1 && S->f_pdl;  /* (only PDL makes it pay) */
    S->f_attn_fit = mf_env_int("MINFER_CUDA_ATTN_FIT", 1) == 1;
    {
        /* decode attention warps per block (attn.cu says why): 8 unless
         * MINFER_CUDA_ATTN_WARPS says 4 */
        static const int warps[] = {4, 8};
        S->attn_warps = env_one_of("MINFER_CUDA_ATTN_WARPS", 8, warps, 2);
    }
    {
        const char *sk = getenv("MINFER_CUDA_SKIP");
        if (sk && *sk) snprintf(S->skip, sizeof S->skip, ",%s,", sk);
    }
    S->gemv_per_sm = mf_env_int("MINFER_CUDA_GEMV_PERSM", 0);
    /* 2 (xst2) needs the TMA ring (sm_90+ code, 97 KB of shared memory per block): 1 without it */
    S->gemv_wide = env_in_range("MINFER_CUDA_GEMV_WIDE", 2, 0, 2);
    if (S->gemv_wide == 2 && S->xst_bytes < 0) S->gemv_wide = 1;
    if (S->gemv_per_sm < 0) S->gemv_per_sm = 0;
    int rc = check_model(S, m, err);
    if (rc) return rc;
    rc = upload_weights(S, m, err);
    if (rc) return rc;

    /* KV cache: per layer K then V, [n_seq][n_kv][n_ctx][hd] f16, zeroed so no
     * position ever holds NaN bits */
    const mf_hparams *hp = &S->hp;
    const size_t per = (size_t)S->n_seq * hp->n_head_kv * S->n_ctx * hp->head_dim;
    S->kvbytes = per * 2 * sizeof(__half) * hp->n_layer;
    S->kvbuf = dev_alloc(S, S->kvbytes, "cudaMalloc(kv cache)");
    if (!S->kvbuf)
        return mf_fail(err, MF_ERR_DEVICE, "cuda: cannot allocate %.2f GiB of KV cache (%d x %d positions): %s",
                       S->kvbytes / 1073741824.0, S->n_seq, S->n_ctx, S->errmsg);
    /* on S->stream: a legacy-stream memset would not be ordered before the
     * first kv_store on the non-blocking stream */
    if ((e = cudaMemsetAsync(S->kvbuf, 0, S->kvbytes, S->stream)) != cudaSuccess)
        return mf_fail(err, MF_ERR_DEVICE, "cuda: cudaMemsetAsync(kv cache): %s", cudaGetErrorString(e));
    S->kc = (__half **)mf_xcalloc(hp->n_layer > 0 ? hp->n_layer : 1, sizeof(__half *));
    S->vc = (__half **)mf_xcalloc(hp->n_layer > 0 ? hp->n_layer : 1, sizeof(__half *));
    for (int l = 0; l < hp->n_layer; l++) {
        S->kc[l] = (__half *)S->kvbuf + (size_t)l * 2 * per;
        S->vc[l] = S->kc[l] + per;
    }

    /* scratch */
    const int nb = S->n_batch;
    size_t own = 0;
#define SCRATCH(ptr, type, count)                                                         \
    do {                                                                                  \
        size_t bytes_ = sizeof(type) * (size_t)(count);                                   \
        ptr = (type *)dev_alloc(S, bytes_, "cudaMalloc(" #ptr ")");                        \
        if (!ptr) return mf_fail(err, MF_ERR_DEVICE, "cuda: scratch: %s", S->errmsg);     \
        own += bytes_;                                                                    \
    } while (0)
    SCRATCH(S->d_meta, int32_t, 3 * nb);
    SCRATCH(S->d_idx, int32_t, nb);
    SCRATCH(S->d_tiles, int4, nb);
    S->q8_cap = (int64_t)CU_MAX_GEMV_COLS * ((S->kmax + 31) & ~31);
    /* (with the lane-major copies, which the x-stationary GEMVs of q4_K, q5_K, q6_K read:
     * common.cuh) */
#define SCRATCH_Q8(q)                                          \
    do {                                                       \
        SCRATCH((q).qs, int8_t, S->q8_cap + 16);               \
        SCRATCH((q).d, float, S->q8_cap / 32 + 1);             \
        SCRATCH((q).s, float, S->q8_cap / 16 + 1);             \
        SCRATCH((q).xl4, uint8_t, cu_xl_bytes(S->q8_cap));     \
        SCRATCH((q).xl6, uint8_t, cu_xl_bytes(S->q8_cap));     \
    } while (0)
    SCRATCH_Q8(S->q8);
    if (S->f_swiglu_gemv) SCRATCH_Q8(S->q8h);
#undef SCRATCH_Q8
    /* attention chunks: multiples of 64 positions, at most 16 per head: the grid
     * covers the whole context, and every early-exit block still costs a slot
     * (64 chunks x 32 heads measured 10 us for one position; ncu, H200, when the
     * blocks left after pdl_wait); and at least 128, because a token whose position
     * lies past the first chunk pays the merge of partials (a write, an arrival
     * atomic and a read back) on its critical path, which costs more than a second
     * 64-position tile in the same block: tg128 on the 7B (positions 0..127, H200,
     * 2026-11-29) 547.34 with chunks of 128 vs 541.72 with 64 (bench/RESULTS.md).
     * MINFER_CUDA_ATTN_CHUNK=N (a multiple of 64) sets it, for measuring. */
    const int tiles = (S->n_ctx + 63) / 64;
    S->att_chunk = 64 * ((tiles + 15) / 16);
    if (S->att_chunk < 128) S->att_chunk = 128;
    {
        const int want = mf_env_int("MINFER_CUDA_ATTN_CHUNK", 0);
        if (want > 0 && want % 64 == 0) S->att_chunk = want;
        else if (want != 0) mf_log("minfer/cuda: MINFER_CUDA_ATTN_CHUNK=%d is not a positive multiple of 64; "
                                   "using %d", want, S->att_chunk);
    }
    S->att_nchunks = (S->n_ctx + S->att_chunk - 1) / S->att_chunk;
    {
        const int G = hp->n_head / hp->n_head_kv, nsub = (G + 7) / 8;
        const size_t nc = (size_t)CU_MAX_GEMV_COLS * hp->n_head_kv * nsub;
        SCRATCH(S->att_count, int, nc);
        if ((e = cudaMemsetAsync(S->att_count, 0, nc * sizeof(int), S->stream)) != cudaSuccess)
            return mf_fail(err, MF_ERR_DEVICE, "cuda: cudaMemsetAsync(counters): %s", cudaGetErrorString(e));
    }
    if (hp->rope_dim > 0) {
        SCRATCH(S->rope_cs, float2, (size_t)S->n_ctx * (hp->rope_dim / 2));
        SCRATCH(S->cs_now, float2, (size_t)hp->rope_dim / 2);
        cu_rope_table(S, S->rope_cs, S->n_ctx, hp->rope_dim, hp->rope_base);
    }
    /* the one-token attention's fast store (attn.cu `fast`): the model decides it once
     * here, for the embedding kernel's copy of the RoPE row, the attention's argument and
     * the notice's "+rope-row" alike */
    S->f_attn_fast = mf_env_int("MINFER_CUDA_ATTN_FAST", 1) == 1 && S->f_attn_pre && S->f_fuse && S->cs_now &&
                     S->n_seq == 1 && hp->n_head == hp->n_head_kv && hp->rope_mode == MF_ROPE_NORM &&
                     hp->head_dim == 128 && hp->rope_dim == 128;
    /* that attention fused with wo and the add after it (attn_wo.cu; an experiment, off by
     * default: MINFER_CUDA_ATTN_WO=1): sm_90+ (the slice's bulk copies, the norm's
     * cluster), the model's width split over C blocks per head and over the norm's blocks */
    S->attn_wo_c = mf_env_int("MINFER_CUDA_ATTN_WO_C", 4) == 8 ? 8 : 4;
    const int want_wo = mf_env_int("MINFER_CUDA_ATTN_WO", 0) == 1;
    if (want_wo && S->code_arch >= 900) cu_attn_wo_prepare(); /* (before cu_attn_wo_fits asks for its occupancy) */
    S->f_attn_wo = want_wo && S->f_attn_fast && S->code_arch >= 900 &&
                   cu_attn_wo_fits(S, hp->n_embd, hp->n_head, S->attn_wo_c) && cu_rmsnorm_acc_fits(hp->n_embd);
    for (int l = 0; l < hp->n_layer && S->f_attn_wo; l++) {
        const mf_weight *wo = &m->layers[l].wo;
        S->f_attn_wo = wo->type == QTYPE_Q4_K && wo->dev && wo->cols == (int64_t)hp->n_head * 128 &&
                       wo->rows == hp->n_embd;
    }
    if (want_wo && !S->f_attn_wo)
        mf_log("minfer/cuda: MINFER_CUDA_ATTN_WO=1 not taken: it needs sm_90+, the attention's fast store "
               "(one query head per kv head, head dim 128), q4_K wo, and its %d x %d blocks resident at once",
               hp->n_head, S->attn_wo_c);
    if (S->f_attn_wo) {
        /* the wo plane: a derived copy of the weights, reported apart (print_notice) */
        S->wo_plane_layer = cu_attn_wo_plane_bytes(hp->n_embd, hp->n_head);
        S->wo_plane = (uint8_t *)dev_alloc(S, S->wo_plane_layer * hp->n_layer, "cudaMalloc(wo plane)");
        if (!S->wo_plane) return mf_fail(err, MF_ERR_DEVICE, "cuda: %s", S->errmsg);
        for (int l = 0; l < hp->n_layer; l++) {
            const mf_weight *wo = &m->layers[l].wo;
            cu_attn_wo_plane(S, S->wo_plane + (size_t)l * S->wo_plane_layer, (const uint8_t *)wo->dev,
                             cu_row_stride(wo->type, wo->cols), hp->n_embd, hp->n_head);
        }
        /* (attn_wo reads the plane ahead of its wait, as weights: made before any step) */
        if ((e = cudaStreamSynchronize(S->stream)) != cudaSuccess || S->err)
            return mf_fail(err, MF_ERR_DEVICE, "cuda: wo plane: %s", S->err ? S->errmsg : cudaGetErrorString(e));
        SCRATCH(S->wo_acc, long long, hp->n_embd);
        SCRATCH(S->wo_part, float, (size_t)hp->n_head * S->attn_wo_c * (128 + 2));
        SCRATCH(S->wo_bar, unsigned, 2 * (size_t)hp->n_head);
        if ((e = cudaMemsetAsync(S->wo_bar, 0, sizeof(unsigned) * 2 * hp->n_head, S->stream)) != cudaSuccess)
            return mf_fail(err, MF_ERR_DEVICE, "cuda: cudaMemsetAsync(wo barriers): %s", cudaGetErrorString(e));
        if ((e = cudaMemsetAsync(S->wo_acc, 0, sizeof(long long) * hp->n_embd, S->stream)) != cudaSuccess)
            return mf_fail(err, MF_ERR_DEVICE, "cuda: cudaMemsetAsync(wo sums): %s", cudaGetErrorString(e));
    }
    SCRATCH(S->att_part, float, (size_t)CU_MAX_GEMV_COLS * hp->n_head * S->att_nchunks * (hp->head_dim + 2));
    if (nb > CU_MAX_GEMV_COLS) {
        const int64_t kp = (S->kmax + 31) & ~31;
        S->x16_cap = (int64_t)nb * kp;
        /* f16 weight scratch: the largest matrix, capped at 32M values (64 MiB) */
        int64_t wmax = 0;
        for (int l = 0; l < hp->n_layer; l++) {
            const mf_layer *L = &m->layers[l];
            const mf_weight *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            for (size_t i = 0; i < MF_ARRAY_LEN(ms); i++)
                if (ms[i]->host && ms[i]->rows * kp > wmax) wmax = ms[i]->rows * kp;
        }
        if (m->output.host && m->output.rows * kp > wmax) wmax = m->output.rows * kp;
        if (wmax > ((int64_t)32 << 20)) wmax = (int64_t)32 << 20;
        if (wmax < 128 * kp) wmax = 128 * kp;
        S->w16_cap = wmax;
        SCRATCH(S->x16, __half, S->x16_cap);
        SCRATCH(S->w16, __half, S->w16_cap);
    } else {
        S->f_mma = 0;
    }
#undef SCRATCH
    S->own_scratch = own;
    S->h_meta = (int32_t *)mf_xcalloc((size_t)3 * nb, sizeof(int32_t));
    S->h_tiles = (int4 *)mf_xcalloc((size_t)nb, sizeof(int4));
    if (S->f_graph) {
        S->graph.pinned_cap = CU_GRAPH_PINNED + (size_t)8 * hp->n_vocab * sizeof(float) + (size_t)3 * nb * 4;
        if (cudaMallocHost((void **)&S->graph.pinned, S->graph.pinned_cap) != cudaSuccess) {
            (void)cudaGetLastError();
            S->graph.pinned = NULL;
            S->f_graph = 0;
            mf_log("minfer/cuda: no pinned memory for the decode graph; graphs off");
        }
    }
    cu_mmv_prepare(S->f_gemv);
    if (S->f_gemv >= 3) S->xs_wide_mats = count_xs_wide(m);
    /* every upload copy and memset complete (all on S->stream; device-wide to be sure) */
    if ((e = cudaDeviceSynchronize()) != cudaSuccess)
        return mf_fail(err, MF_ERR_DEVICE, "cuda: init: %s", cudaGetErrorString(e));
    if (S->err) return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
    return 0;
}

static void be_destroy(mf_backend *be) {
    if (!be) return;
    cu_state *S = ST(be);
    if (S) {
        cudaStreamSynchronize(S->stream);
        if (S->st.on) {
            const double n = S->st.n ? (double)S->st.n : 1.0;
            fprintf(stderr,
                    "minfer/cuda: steptime: %llu replays, us per step: gpu %.2f, call %.2f (copy-out %.2f), "
                    "wall %.2f (%llu intervals)\n",
                    (unsigned long long)S->st.n, S->st.gpu_ms * 1e3 / n, S->st.call_s * 1e6 / n, S->st.copy_s * 1e6 / n,
                    S->st.nwall ? S->st.wall_s * 1e6 / (double)S->st.nwall : 0.0, (unsigned long long)S->st.nwall);
            cudaEventDestroy(S->st.e0);
            cudaEventDestroy(S->st.e1);
        }
        if (S->m) {
            mf_model *m = S->m;
            m->tok_embd.dev = m->output_norm.dev = m->output.dev = NULL;
            for (int l = 0; l < m->hp.n_layer && m->layers; l++) {
                mf_layer *L = &m->layers[l];
                mf_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->bq, &L->bk,
                                   &L->bv, &L->wo, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
                for (size_t i = 0; i < MF_ARRAY_LEN(ws); i++) ws[i]->dev = NULL;
            }
        }
        free_state(S);
        if (S->stream) cudaStreamDestroy(S->stream);
        free(S);
    }
    free(be);
}

/* ------------------------------------------------------------------------- */
/* The step: eager, or captured once and replayed                            */
/* ------------------------------------------------------------------------- */
static void print_notice(cu_state *S) {
    if (S->notice_done) return;
    S->notice_done = 1;
    const double gib = 1073741824.0;
    /* the prefill GEMM's f16 weight tile is a derived copy of weights (a plane):
     * reported apart from the working scratch, which is held to 10% of weights + KV */
    const size_t plane = (size_t)S->w16_cap * sizeof(__half);
    const size_t scratch = S->own_scratch + S->fw_scratch - plane;
    const double base = (double)S->wbytes + (double)S->kvbytes;
    char gemv_name[320], xs_name[160], ring[96] = "", wo_plane[48] = "";
    if (S->wo_plane)
        snprintf(wo_plane, sizeof wo_plane, " wo-plane=%.2f GiB",
                 (double)S->wo_plane_layer * S->hp.n_layer / gib);
    if (S->xst_depth != cu_mmv_xst_depth_default() || S->xst_pre != MMV_XST_PRE_DEFAULT ||
        S->xst_pre_attn != S->xst_pre)
        snprintf(ring, sizeof ring, "[depth %d, %d before the wait, %d after attention]", S->xst_depth,
                 S->xst_pre < S->xst_depth ? S->xst_pre : S->xst_depth,
                 S->xst_pre_attn < S->xst_depth ? S->xst_pre_attn : S->xst_depth);
    const char *mixed = !(S->f_gemv_mixed && S->xst_bytes >= 0) ? "" : S->f_xstm_stage ? "+xstm-staged" : "+xstm";
    const char *pairs = S->ring_pairs && S->xst_bytes >= 0 ? "+pairs" : "";
    if (S->f_gemv == 4) snprintf(xs_name, sizeof xs_name, "xst%s%s%s", ring, mixed, pairs);
    else if (S->xst_bytes >= 0)
        snprintf(xs_name, sizeof xs_name, "xs+xst%s%s%s>=%lldMB", ring, mixed, pairs, (long long)(S->xst_bytes >> 20));
    else snprintf(xs_name, sizeof xs_name, "xs");
    if (!S->f_dp4a) snprintf(gemv_name, sizeof gemv_name, "f32");
    else if (S->f_gemv == 2) snprintf(gemv_name, sizeof gemv_name, "q8-dp4a-pp");
    else if (S->f_gemv == 3 && S->xs_wide_mats)
        snprintf(gemv_name, sizeof gemv_name, "q8-dp4a-%s(%s for %d wide matrices, v1 for batches)", xs_name,
                 S->gemv_wide == 2   ? "xst2 from the xst size, else xs2 where 3 blocks fit per SM, else pp"
                 : S->gemv_wide == 1 ? "xs2 where 3 blocks fit per SM, else pp"
                                     : "pp",
                 S->xs_wide_mats);
    else if (S->f_gemv >= 3) snprintf(gemv_name, sizeof gemv_name, "q8-dp4a-%s(v1 for batches)", xs_name);
    else snprintf(gemv_name, sizeof gemv_name, "q8-dp4a-v1");
    fprintf(stderr,
            "minfer/cuda: %s (sm_%d%d, %.0f GiB): gemv=%s%s graph=%s pdl=%s fuse=%s%s%s prefill=%s attn=%s%s%s%s%s%s%s%s%s; "
            "mem weights=%.2f GiB kv=%.2f GiB scratch=%.2f GiB (+%.1f%%) f16-plane=%.2f GiB%s\n",
            S->prop.name, S->prop.major, S->prop.minor, S->prop.totalGlobalMem / gib,
            gemv_name, MINFER_CUDA_L2_HINT ? "+l2-evict-first" : "",
            S->f_graph && !S->graph_failed ? (S->f_host_store ? "on+host-store" : "on") : "off",
            S->f_pdl ? "on" : "off", !S->f_fuse ? "off" : S->f_add_gemv ? "on+add-in-gemv" : "on",
            S->f_swiglu_gemv && S->xst_bytes >= 0 ? (S->f_xsg_shared ? "+swiglu-gemv(shared-ring-where-it-fits)" : "+swiglu-gemv") : "",
            S->skip[0] ? " SKIPPING-KERNELS(output-invalid)" : "",
            S->f_mma ? "mma-f16" : "gemv",
            S->f_flash && cu_attn_flash_supported(S->hp.head_dim) ? "flash+split" : "split",
            S->f_attn_pre && S->f_fuse && cu_attn_dec_supported(S->hp.head_dim) ? "+pre" : "",
            S->f_attn_fit && cu_attn_dec_supported(S->hp.head_dim) ? "+fit" : "",
            S->attn_warps == 4 && cu_attn_dec_supported(S->hp.head_dim) ? "+4warps" : "",
            S->f_attn_fast ? (S->f_attn_wo ? (S->attn_wo_c == 8 ? "+rope-row+wo(8-block heads)" : "+rope-row+wo")
                                           : "+rope-row")
                           : "",
            S->attn_trigger == 0 ? "+trigger-at-start" : S->attn_trigger == 2 ? "+trigger-after-qkv"
            : S->attn_trigger == 3 ? "+trigger-after-tiles" : "",
            S->norm_threads == 256 ? " norm=256-threads" : S->norm_threads == 512 ? " norm=512-threads" : "",
            S->norm_split == 1 ? " norm-split=1" : S->norm_split == 2 ? " norm-split=2" : S->norm_split == 8 ? " norm-split=8" : "",
            S->norm_warps ? " norm=warps(2048/4096-wide)" : "",
            S->wbytes / gib,
            S->kvbytes / gib, scratch / gib, base > 0 ? 100.0 * scratch / base : 0.0, plane / gib, wo_plane);
    if (S->verbose)
        fprintf(stderr, "minfer/cuda: scratch: backend %.1f MiB (q8 %lld values, attn %d chunks of %d, gemm f16 %lld+%lld), "
                "forward %.1f MiB\n", S->own_scratch / 1048576.0, (long long)S->q8_cap, S->att_nchunks, S->att_chunk,
                (long long)S->x16_cap, (long long)S->w16_cap, S->fw_scratch / 1048576.0);
}

static int step_eager(cu_state *S, mf_forward *fw, const mf_batch *b, float *logits, mf_err *err) {
    S->eager++;
    return forward_generic(fw, b, logits, err);
}

static int graph_capture(cu_state *S, mf_forward *fw, const mf_batch *b, float *logits, mf_err *err) {
    cu_graph_rec *g = &S->graph;
    if (g->valid) {
        cudaGraphExecDestroy(g->exec);
        g->valid = 0;
    }
    g->pinned_used = (size_t)3 * S->n_batch * sizeof(int32_t);
    g->ncopies = 0;
    S->cap_logits = logits;
    S->cap_logits_bytes = (size_t)S->hp.n_vocab * sizeof(float);
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture(S->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cu_record(S, e, "cudaStreamBeginCapture", __FILE__, __LINE__);
        return -1;
    }
    S->capturing = 1;
    cu_trace_capture_begin(S->trace);
    upload_meta(S, b);
    mf_err ferr;
    ferr.msg[0] = 0;
    const int rc = forward_generic(fw, b, logits, &ferr);
    flush(S);
    e = cudaStreamEndCapture(S->stream, &graph);
    S->capturing = 0;
    if (e != cudaSuccess && !S->err) cu_record(S, e, "cudaStreamEndCapture", __FILE__, __LINE__);
    if (rc < 0 || S->err) {
        if (graph) cudaGraphDestroy(graph);
        if (rc < 0 && !S->err) snprintf(S->errmsg, sizeof S->errmsg, "%s", ferr.msg);
        (void)err;
        return -1;
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        cu_record(S, e, "cudaGraphInstantiate", __FILE__, __LINE__);
        return -1;
    }
    g->valid = 1;
    g->fw = fw;
    g->fw_x = fw->x;
    g->n_out = rc;
    return 0;
}

static int step_replay(cu_state *S, const mf_batch *b, float *logits) {
    cu_graph_rec *g = &S->graph;
    int32_t *h = (int32_t *)g->pinned;
    const int nb = S->n_batch;
    h[0] = b->tok ? b->tok[0] : 0;
    h[nb] = b->pos ? b->pos[0] : 0;
    h[2 * nb] = b->seq ? b->seq[0] : 0;
    const double t0 = S->st.on ? mf_time_s() : 0.0;
    if (S->st.on) CU_CHECK(S, cudaEventRecord(S->st.e0, S->stream));
    CU_CHECK(S, cudaGraphLaunch(g->exec, S->stream));
    if (S->st.on) CU_CHECK(S, cudaEventRecord(S->st.e1, S->stream));
    CU_CHECK(S, cudaStreamSynchronize(S->stream));
    const double t1 = S->st.on ? mf_time_s() : 0.0;
    for (int i = 0; i < g->ncopies; i++) {
        const cu_copy *c = &g->copies[i];
        char *dst = c->rel ? (char *)logits + c->off : c->dst;
        if (!c->direct) memcpy(dst, g->pinned + c->pin_off, c->bytes);
        else if (dst != c->direct) memcpy(dst, c->direct, c->bytes); /* (another buffer than at capture) */
    }
    if (S->st.on) {
        const double t2 = mf_time_s();
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, S->st.e0, S->st.e1) == cudaSuccess) S->st.gpu_ms += ms;
        S->st.call_s += t2 - t0;
        S->st.copy_s += t2 - t1;
        if (S->st.t_prev > 0.0) {
            S->st.wall_s += t0 - S->st.t_prev;
            S->st.nwall++;
        }
        S->st.t_prev = t0;
        S->st.n++;
    }
    S->replays++;
    return g->n_out;
}

static int be_forward(mf_backend *be, mf_forward *fw, const mf_batch *b, float *logits, mf_err *err) {
    cu_state *S = ST(be);
    if (b->n <= 0 || b->n > S->n_batch)
        return mf_fail(err, MF_ERR_USAGE, "cuda: batch of %d tokens (n_batch %d)", b->n, S->n_batch);
    cudaSetDevice(S->device);
    S->in_forward = 1;
    S->meta_valid = 0;
    S->q8_valid = 0;
    S->cs_now_ok = 0;
    flush(S);
    int rc;
    const int eligible = S->f_graph && !S->graph_failed && b->n == 1 && (!b->logits || b->logits[0]);
    if (eligible) {
        cu_graph_rec *g = &S->graph;
        if (!(g->valid && g->fw == fw && g->fw_x == fw->x)) {
            if (graph_capture(S, fw, b, logits, err)) {
                /* capture is an optimisation: say why once, then run eagerly for good */
                fprintf(stderr, "minfer/cuda: decode graph capture failed (%s); graphs off\n", S->errmsg);
                S->graph_failed = 1;
                S->err = 0;
                S->errmsg[0] = 0;
                (void)cudaGetLastError();
                cudaStreamSynchronize(S->stream);
                (void)cudaGetLastError();
                S->meta_valid = 0;
                S->q8_valid = 0;
                S->pend.kind = PEND_NONE;
                rc = step_eager(S, fw, b, logits, err);
                goto done;
            }
        }
        rc = step_replay(S, b, logits);
    } else {
        rc = step_eager(S, fw, b, logits, err);
    }
done:
    flush(S);
    S->in_forward = 0;
    S->meta_valid = 0;
    print_notice(S);
    if (S->err) {
        S->err = 0;
        return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
    }
    return rc;
}

/* ------------------------------------------------------------------------- */
/* Public entry points                                                       */
/* ------------------------------------------------------------------------- */
extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" mf_backend *cuda_backend_new(int device, mf_err *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        mf_fail(err, MF_ERR_DEVICE, "cuda: no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    if (device < 0 || device >= n) {
        mf_fail(err, MF_ERR_USAGE, "cuda: device %d out of range (%d devices)", device, n);
        return NULL;
    }
    cu_state *S = (cu_state *)mf_xcalloc(1, sizeof(cu_state));
    S->device = device;
    if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaGetDeviceProperties(&S->prop, device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&S->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        mf_fail(err, MF_ERR_DEVICE, "cuda: device %d: %s", device, cudaGetErrorString(e));
        free(S);
        return NULL;
    }
    if (S->prop.major < 8) {
        mf_fail(err, MF_ERR_DEVICE, "cuda: %s is sm_%d%d; minfer needs sm_80 or newer", S->prop.name, S->prop.major,
                S->prop.minor);
        cudaStreamDestroy(S->stream);
        free(S);
        return NULL;
    }
    mf_backend *be = (mf_backend *)mf_xcalloc(1, sizeof(mf_backend));
    be->name = "cuda";
    be->ops = &cuda_ops;
    be->impl = S;
    be->init = be_init;
    be->destroy = be_destroy;
    be->alloc = be_alloc;
    be->release = be_release;
    be->download = be_download;
    be->forward = be_forward;
    be->kv_truncate = be_kv_truncate;
    be->host_alloc = be_host_alloc;
    be->host_free = be_host_free;
    return be;
}

extern "C" int cuda_backend_status(mf_backend *be, mf_err *err) {
    cu_state *S = ST(be);
    flush(S);
    cudaError_t e = cudaStreamSynchronize(S->stream);
    if (e != cudaSuccess) cu_record(S, e, "cudaStreamSynchronize", __FILE__, __LINE__);
    if (!S->err) return MF_OK;
    S->err = 0;
    return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
}

extern "C" int cuda_backend_upload(mf_backend *be, mf_weight *w, mf_err *err) {
    cu_state *S = ST(be);
    size_t nb;
    if (weight_dev_bytes(w, &nb))
        return mf_fail(err, MF_ERR_INPUT, "cuda: type %s with %lld columns unsupported", qtype_name(w->type),
                       (long long)w->cols);
    if (cu_type_is_quant(w->type)) S->any_quant = 1; /* as a model with it would be */
    void *d = dev_alloc(S, nb, "cudaMalloc(test weight)");
    if (!d) return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
    S->extra = (void **)mf_xrealloc(S->extra, sizeof(void *) * (S->nextra + 1));
    S->extra[S->nextra++] = d;
    const qtype_traits *tr = qtype_get(w->type);
    const size_t file_row = (size_t)(w->cols / tr->blck) * tr->type_size;
    void *tmp = dev_alloc(S, file_row * w->rows, "cudaMalloc(test upload)");
    if (!tmp) return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
    int rc = upload_one(S, w, d, tmp, file_row * w->rows, err);
    cudaFree(tmp);
    if (rc) return mf_fail(err, MF_ERR_DEVICE, "cuda: upload: %s", S->errmsg);
    w->dev = d;
    return 0;
}

extern "C" void cuda_backend_h2d(mf_backend *be, void *dst, const void *src, size_t nbytes) {
    cu_state *S = ST(be);
    flush(S);
    CU_CHECK(S, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, S->stream));
    CU_CHECK(S, cudaStreamSynchronize(S->stream));
    S->q8_valid = 0;
}

extern "C" void cuda_backend_memory(mf_backend *be, uint64_t *weights, uint64_t *kv, uint64_t *scratch) {
    cu_state *S = ST(be);
    *weights = S->wbytes;
    *kv = S->kvbytes;
    *scratch = S->own_scratch + S->fw_scratch;
}

extern "C" void cuda_backend_census(mf_backend *be, uint64_t *launches, uint64_t *graph_replays,
                                    uint64_t *eager_steps) {
    cu_state *S = ST(be);
    *launches = S->launches;
    *graph_replays = S->replays;
    *eager_steps = S->eager;
}

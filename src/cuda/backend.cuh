/* backend.cuh - the CUDA backend's own state and the functions its files share
 * (backend.cu: glue and init; upload.cu: weights; blocks.cu: primitive ops and the
 * fused blocks; graph.cu: decode-graph capture and replay; notice.cu: the notice
 * line). Launchers see only the cu_ctx part (common.cuh). */
#ifndef MINFER_CUDA_BACKEND_CUH
#define MINFER_CUDA_BACKEND_CUH

#include "common.cuh"

#define CU_MAX_GEMV_COLS CU_MMV_MAXCOLS

struct cu_alloc_rec {
    void *p;
    size_t n;
};

/* One download captured in a decode graph, redone by the host after each replay. */
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

/* A layer's gate and up as one MMQ GEMM: where upload placed them one after the other
 * (upload.cu gu_pairable), the prefill launches 2 x n_ff rows once, the rows past n_ff
 * written to up's output (cu_mmq out2). plane: the pair's own MMQ plane or NULL. */
struct cu_gu_pair {
    int on;
    const uint8_t *plane;
    const uint8_t *mmf; /* the pair's f16-fragment plane (mmf.cu) or NULL */
};

#define CU_GRAPH_MAXCOPY 8
#define CU_GRAPH_PINNED (1u << 20)
/* Decode graphs are kept per batch size: a step of n tokens (one token of each of n
 * sequences, every row wanting logits) replays the graph captured at its first step of
 * that size, for n up to CU_GRAPH_MAXN (the server's and bench -s's many-sequence
 * decode); larger batches run eagerly. Each graph owns pinned staging of its size. */
#define CU_GRAPH_MAXN 64

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

struct cu_state : cu_ctx {
    int device;
    /* tensor parallelism (tp_nccl.cu): this rank's NCCL and communicator, else NULL */
    const struct mf_nccl *tp_nccl;
    void *tp_comm;
    cudaDeviceProp prop;
    mf_model *m;
    mf_hparams hp;
    int n_ctx, n_seq, n_batch;
    int verbose;           /* MINFER_VERBOSE=1: scratch breakdown and path census at exit */
    int census;            /* MINFER_CENSUS=1: the launch census (fast paths and fallbacks) at exit */
    int any_quant;
    int kmax;              /* widest matmul input */
    /* paths decided from the model at init (the path table says which may run) */
    int rope_row;          /* the one-token attention's RoPE row from the embedding kernel (attn.cu `fast`) */
    int xs_wide_mats;      /* quantized matrices too wide for xs (to xst2, xs2 or pp) */
    /* memory */
    void *wbuf;
    size_t wbytes;
    void *kvbuf;
    size_t kvbytes;
    void *planebuf;        /* the MMQ planes (upload.cu cu_build_planes), NULL when none */
    cu_gu_pair *gu;        /* per layer: gate+up as one MMQ GEMM (upload.cu gu_pairable); NULL: none */
    size_t planebytes;
    int nplanes;
    void *mmfbuf;          /* the q4_K f16-fragment planes (mmf.cu), NULL when none */
    size_t mmfbytes;
    int nmmf;
    __half *mh;            /* prefill activations in f16 for path mmf [n_pad][kmax], or NULL */
    __half *mh8;           /* the fused SwiGLU's f16 output at 8 columns [8][kmax] (path mmf-swiglu), or NULL */
    size_t own_scratch, fw_scratch;
    __half **kc, **vc;     /* [n_layer] the f16 cache's K and V (NULL entries with a q8_0 cache) */
    uint8_t **kq, **vq;    /* [n_layer] the q8_0 cache's (--cache-type-k/-v q8_0), or NULL: attn.cu */
    /* batch metadata [tok n_batch][pos n_batch][seq n_batch] */
    int32_t *d_meta, *d_idx;
    int4 *d_tiles;
    int32_t *h_meta;
    int4 *h_tiles;
    int in_forward, meta_valid;
    const mf_batch *meta_b;
    /* q8 activations: q8 holds the input of the next GEMV (written by the kernel that
     * produced it); q8h the gate+up launch's SwiGLU output, swapped with q8 after it */
    cu_q8 q8, q8h;
    int64_t q8_cap;
    /* the residual add still owed (blocks.cu): res_x[res_n] += res_y, done by the next
     * norm's add+norm kernel, or by cu_settle; res_pn: the post-norm weights that res_y
     * is to be RMS-normed by first (gemma3, path post-norm-add), or NULL */
    float *res_x;
    float *res_y;
    int64_t res_n;
    const float *res_pn;
    /* RoPE (cos, sin) table [n_ctx][rope_dim/2] of the model's RoPE (m->rope: rope_dim,
     * base, scaling) */
    float2 *rope_cs;
    float2 *rope_cs_swa;   /* the same for the sliding layers' RoPE m->rope_swa (gemma3), or NULL */
    float rope_base_swa;
    float *rope_ff;        /* [rope_dim/2] the per-frequency factors (m->rope_freqs), or NULL */
    float2 *cs_now;        /* the table's row at the step's position (cu_embed), for the attention */
    int cs_now_ok;         /* cs_now written by this forward's embedding (one token) */
    /* attention partials */
    float *att_part;
    int *att_count;        /* [8][n_kv * head groups] arrival counters of kernel_attn_dec */
    int att_chunk, att_nchunks;
    /* prefill GEMM scratch */
    __half *x16, *w16;
    int64_t x16_cap, w16_cap;
    /* int8 MMQ activations (mmq.cu), for n_batch tokens of kmax values */
    cu_mmq_act mq;
    /* a model with experts (moe.cu): the grouping's buffers for n_batch tokens of k slots, the
     * experts' GEMV activations (x [n][dim] or the SwiGLU [n*k][ff], q8) and their MMQ ones
     * (n_batch * k rows and a tile, of max(dim, ff); NULL below 9 columns or path mmq off) */
    cu_moe_buf moe;
    cu_q8 moe_q8;
    cu_mmq_act moe_mq;
    unsigned mmq_said;     /* the weight types whose MMQ label was printed (bit = type) */
    unsigned mmq_plane_said; /* the same for MMQ on a plane */
    unsigned mmf_said;     /* the weight types whose mmf label was printed (bit = type) */
    /* the plan (plan.h): the device and paths as the planner sees them (env.on follows
     * on[] where the scratch or the planes turn a path off), the upload's facts, and the
     * plan itself, made at the first forward step (fw->reduce: split over ranks or not) */
    cu_plan_env env;
    cu_plan_facts facts;
    cu_plan plan;
    int plan_made, plan_tp;
    int mmq_no_smem;       /* path mmq off for want of shared memory a block (cu_mmq_smem_need) */
    unsigned f16_said;     /* the same for the f16 fallback */
    /* graphs: graphs[n - 1] replays steps of n tokens; graph is the one being captured */
    cu_graph_rec graphs[CU_GRAPH_MAXN];
    cu_graph_rec *graph;
    int graph_failed;
    float *cap_logits;
    size_t cap_logits_bytes;
    cu_host_buf host[CU_HOST_MAX];
    /* be->alloc and test uploads */
    cu_alloc_rec *allocs;
    int nallocs, capallocs;
    void **extra;
    int nextra;
    int notice_done;
    /* census */
    uint64_t replays, eager;
    /* MINFER_CUDA_STEPTIME=1: where a replayed step's wall time goes (graph.cu; the
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
};

static inline cu_state *cu_st(mf_backend *be) { return (cu_state *)be->impl; }

#define CU_TRY(S, x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { cu_record((S), e_, #x, __FILE__, __LINE__); return -1; } } while (0)

/* backend.cu */
void *cu_dev_alloc(cu_state *S, size_t n, const char *what);
/* The be_host_alloc buffer that holds [p, p + n) if it is pinned, else NULL */
const cu_host_buf *cu_host_pinned(const cu_state *S, const void *p, size_t n);

/* upload.cu */
int cu_check_model(cu_state *S, const mf_model *m, mf_err *err);
int cu_upload_weights(cu_state *S, mf_model *m, mf_err *err);
/* The layer matrices' MMQ planes (paths mmq-dsc for q4_K, mmq-exp for q6_K), in one
 * allocation; when it fails, one message and the GEMMs decode in the kernel (no error). */
void cu_build_planes(cu_state *S, mf_model *m);
void cu_build_mmf_planes(cu_state *S, mf_model *m);
int cu_mmq_plane_on(const cu_state *S, uint32_t type); /* the type gets a plane (paths on) */
int cu_upload_one(cu_state *S, const mf_weight *w, void *dst, void *tmp, size_t tmp_cap, mf_err *err);
int cu_weight_dev_bytes(const mf_weight *w, size_t *out);
int cu_count_xs_wide(const mf_model *m);

/* moe.cu: a layer's experts on n tokens of x [n][dim] (f32 on the device; qx: its q8 where
 * the norm wrote one, else NULL), by kind (plan.h cu_moe_kind), into out [n][dim] (may be
 * x); scratch of n_batch * k rows: scores [n][E], h, h2 [n*k][ff], y [n*k][dim]. */
struct cu_moe_scratch {
    float *scores, *h, *h2, *y;
};
void cu_moe_ffn(cu_state *S, const mf_ffn *F, int kind, const float *x, const cu_q8 *qx, int n, const cu_moe_scratch *sc,
                float *out);

/* blocks.cu */
extern const mf_ops cu_ops;
extern const mf_blocks cu_blocks;
/* Graph-owned pinned bytes (capture only); NULL when full. */
uint8_t *cu_cap_pinned(cu_state *S, size_t n, size_t *off);
void cu_upload_meta(cu_state *S, const mf_batch *b);
/* Settles what the step still owes (the residual add) before the step ends. */
void cu_settle(cu_state *S);
/* The plan (plan.h) for this backend: made at the first call, remade where tp (the model
 * split over ranks) differs from the plan's (blocks.cu). */
const cu_plan *cu_plan_of(cu_state *S, int tp);
/* NULL when the fused blocks run the descriptor; else the first feature they lack. */
const char *cu_blocks_unfused(const mf_arch_desc *d);

/* graph.cu */
int cu_be_forward(mf_backend *be, mf_forward *fw, const mf_batch *b, float *logits, mf_err *err);
void cu_be_download(mf_backend *be, void *dst, const void *src, size_t nbytes);

/* notice.cu */
void cu_print_notice(cu_state *S);
void cu_print_census(const cu_state *S);

#endif

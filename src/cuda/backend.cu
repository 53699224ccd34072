/* backend.cu - the CUDA backend's glue: mf_backend entry points, init (device,
 * paths, tuning row, KV cache, scratch) and destroy, device and pinned host memory,
 * error recording. The step itself: blocks.cu (ops and blocks) and graph.cu (capture
 * and replay); weights: upload.cu; the notice line: notice.cu.
 *
 * Device memory: the weights (uploaded once, rows 16-byte aligned, some formats
 * repacked planar: common.cuh), the f16 KV cache, and scratch (q8 activations,
 * attention partials, the prefill GEMM's f16 operands, plus what forward.c asks
 * for through alloc). The notice printed at the first step gives the breakdown.
 *
 * Optional paths: the table in paths.c, turned off by MINFER_CUDA_DISABLE=name,...
 * Tuning numbers: tune.c. Diagnostics (the only other variables read here):
 * MINFER_CUDA_SYNC=1 (synchronise and check after every eager launch),
 * MINFER_VERBOSE=1 (scratch breakdown, launch census at exit; MINFER_CENSUS=1: the census only),
 * MINFER_CUDA_STEPTIME=1 (where a replayed decode step's wall time goes, at exit),
 * MINFER_CUDA_PROFILE=1 (every eager launch's GPU time by kernel and tensor, at exit;
 * launch-serialized; profile.cu),
 * MINFER_CUDA_TRACE=FILE (a build with -DMINFER_CUDA_TRACE=1 only: the block timeline
 * of every kernel, for bench/trace_step.py; trace.cu). */
#include "backend.cuh"
#include "backend_cuda.h"

#include <stdlib.h>
#include <string.h>

void cu_record(cu_ctx *S, cudaError_t e, const char *expr, const char *file, int line) {
    if (S->err) return;
    S->err = 1;
    const char *f = strrchr(file, '/');
    snprintf(S->errmsg, sizeof S->errmsg, "cuda: %s: %s (%s:%d)", expr, cudaGetErrorString(e), f ? f + 1 : file, line);
    (void)cudaGetLastError(); /* clear non-sticky errors */
}

void cu_launch_check(cu_ctx *S, const char *what, const char *file, int line) {
    S->n.launches++;
    if (S->capturing) cu_trace_launch(S->trace, what);
    else if (S->prof) cu_prof_end(S, what);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) cu_record(S, e, what, file, line);
    if (S->sync && !S->capturing) {
        e = cudaStreamSynchronize(S->stream);
        if (e != cudaSuccess) cu_record(S, e, what, file, line);
    }
}

void *cu_dev_alloc(cu_state *S, size_t n, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n ? n : 16);
    if (e != cudaSuccess) {
        cu_record(S, e, what, __FILE__, __LINE__);
        return NULL;
    }
    return p;
}

static void *be_alloc(mf_backend *be, size_t nbytes) {
    cu_state *S = cu_st(be);
    void *p = NULL;
    cudaSetDevice(S->device); /* (every entry point: a process may drive several GPUs, tp.h) */
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
    cu_state *S = cu_st(be);
    if (!p) return;
    cudaSetDevice(S->device);
    cu_settle(S);
    cudaStreamSynchronize(S->stream);
    for (int i = 0; i < S->nallocs; i++)
        if (S->allocs[i].p == p) {
            S->fw_scratch -= S->allocs[i].n;
            S->allocs[i] = S->allocs[--S->nallocs];
            break;
        }
    /* a graph captured over this memory is stale now */
    for (int i = 0; i < CU_GRAPH_MAXN; i++)
        if (S->graphs[i].valid) {
            cudaGraphExecDestroy(S->graphs[i].exec);
            S->graphs[i].valid = 0;
        }
    cudaFree(p);
}

/* The be_host_alloc buffer that holds [p, p + n) if it is pinned, else NULL */
const cu_host_buf *cu_host_pinned(const cu_state *S, const void *p, size_t n) {
    const char *c = (const char *)p;
    for (int i = 0; i < CU_HOST_MAX; i++) {
        const char *b = (const char *)S->host[i].p;
        if (b && S->host[i].pinned && c >= b && c + n <= b + S->host[i].bytes) return &S->host[i];
    }
    return NULL;
}

static void *be_host_alloc(mf_backend *be, size_t nbytes) {
    cu_state *S = cu_st(be);
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
    cu_state *S = cu_st(be);
    if (!p) return;
    for (int i = 0; i < CU_HOST_MAX; i++)
        if (S->host[i].p == p) {
            host_buf_free(&S->host[i]);
            return;
        }
    free(p); /* (allocated past CU_HOST_MAX records: malloc'd) */
}

static void be_kv_truncate(mf_backend *be, int seq, int from_pos) {
    (void)be;
    (void)seq;
    (void)from_pos;
}

/* __CUDA_ARCH__ of the code this device runs (the binary's SASS, or PTX JIT-compiled
 * from an older target): the TMA kernels need the former to be >= 900. */
static __global__ void kernel_code_arch(int *out) {
#if defined(__CUDA_ARCH__)
    *out = __CUDA_ARCH__;
#endif
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

static void free_state(cu_state *S) {
    if (S->verbose || S->census) cu_print_census(S);
    cu_trace_close(S->trace);
    cu_prof_close(S);
    for (int i = 0; i < CU_GRAPH_MAXN; i++) {
        if (S->graphs[i].valid) cudaGraphExecDestroy(S->graphs[i].exec);
        if (S->graphs[i].pinned) cudaFreeHost(S->graphs[i].pinned);
    }
    for (int i = 0; i < CU_HOST_MAX; i++) /* (what the caller did not give back) */
        if (S->host[i].p) host_buf_free(&S->host[i]);
    void *dev[] = {S->wbuf, S->kvbuf, S->d_meta, S->d_idx, S->d_tiles, S->q8.qs, S->q8.d, S->q8.s, S->q8.xl4, S->q8.xl6,
                   S->q8h.qs, S->q8h.d, S->q8h.s, S->q8h.xl4, S->q8h.xl6,
                   S->att_part, S->x16, S->w16, S->rope_cs, S->rope_cs_swa, S->rope_ff, S->cs_now, S->att_count,
                   S->mq.q, S->mq.d, S->mq.s, S->mq.is, S->mq.part, S->planebuf, S->mh, S->mh8, S->mmfbuf,
                   S->moe.ids, S->moe.w, S->moe.pos, S->moe.src, S->moe.groups, S->moe.tiles, S->moe_q8.qs,
                   S->moe_q8.d, S->moe_q8.s, S->moe_q8.xl4, S->moe_q8.xl6, S->moe_mq.q, S->moe_mq.d, S->moe_mq.s,
                   S->moe_mq.is};
    for (size_t i = 0; i < MF_ARRAY_LEN(dev); i++)
        if (dev[i]) cudaFree(dev[i]);
    for (int i = 0; i < S->nallocs; i++) cudaFree(S->allocs[i].p);
    for (int i = 0; i < S->nextra; i++) cudaFree(S->extra[i]);
    free(S->allocs);
    free(S->extra);
    free(S->gu);
    free(S->kc);
    free(S->vc);
    free(S->kq);
    free(S->vq);
    free(S->h_meta);
    free(S->h_tiles);
}

/* The optional paths (MINFER_CUDA_DISABLE) and the tuning row for this device; the
 * paths the device or the model cannot take are turned off here, once, so the notice,
 * the blocks and the launchers see one answer. */
extern "C" void cuda_kernel_needs(cu_kernel_needs *k) {
    *k = (cu_kernel_needs){ cu_mmv_xst_smem_need(), cu_mmq_smem_need(), cu_mmf_tma_smem_need(),
                            (long long)cu_attn_flash_smem_need(128, 1), (long long)cu_attn_flash_smem_need(256, 0) };
}

static int resolve_paths(cu_state *S, mf_err *err) {
    int on[CU_PATH_COUNT];
    int rc = paths_resolve(cu_paths, CU_PATH_COUNT, "MINFER_CUDA_DISABLE", on, err);
    if (rc) return rc;
    unsigned char asked[CU_PATH_COUNT];
    for (int i = 0; i < CU_PATH_COUNT; i++) asked[i] = (unsigned char)on[i];
    S->code_arch = cu_code_arch();
    S->tune = *cu_tune_for(S->code_arch);
    S->num_sms = S->prop.multiProcessorCount;
    /* the device as the planner sees it; the kernels' shared memory from the launchers */
    const cu_device_class d = { S->prop.name, S->code_arch, S->num_sms, (long long)S->prop.sharedMemPerBlockOptin };
    cu_kernel_needs k;
    cuda_kernel_needs(&k);
    cu_plan_env_init(&S->env, asked, &d, &k, &S->tune);
    memcpy(S->on, S->env.on, sizeof S->env.on);
    S->pdl = S->env.pdl;
    if (S->env.xst_off) S->tune.xst_bytes = -1;
    S->mmq_no_smem = S->env.mmq_no_smem;
    S->mmf_tma = S->env.mmf_tma;
    S->flash256 = S->env.flash256;
    return MF_OK;
}

static int be_init(mf_backend *be, mf_model *m, int n_ctx, int n_seq, int n_batch, const mf_kv_types *kvt,
                   mf_err *err) {
    cu_state *S = cu_st(be);
    cudaError_t e;
    /* the cache: f16 (the default) or q8_0, K and V alike (head dims a multiple of 32);
     * anything else is refused before anything loads */
    const int tk = kvt && kvt->k != MF_KV_DEFAULT ? kvt->k : QTYPE_F16;
    const int tv = kvt && kvt->v != MF_KV_DEFAULT ? kvt->v : QTYPE_F16;
    for (int i = 0; i < 2; i++) {
        const int t = i ? tv : tk;
        if (t != QTYPE_F16 && t != QTYPE_Q8_0)
            return mf_fail(err, MF_ERR_USAGE, "%s %s: not supported on the CUDA backend (f16 or q8_0)",
                           i ? "--cache-type-v" : "--cache-type-k", kv_type_name(t));
    }
    if (tk != tv)
        return mf_fail(err, MF_ERR_USAGE, "--cache-type-k %s with --cache-type-v %s: the CUDA backend takes f16 or "
                       "q8_0 for both, not a mix", kv_type_name(tk), kv_type_name(tv));
    const int kv_q8 = tk == QTYPE_Q8_0;
    if (kv_q8 && m->hp.head_dim % 32)
        return mf_fail(err, MF_ERR_USAGE, "--cache-type-k q8_0: the CUDA backend needs a head dim that is a multiple "
                       "of 32 (this model's: %d)", m->hp.head_dim);
    be->kv_type_k = be->kv_type_v = tk;
    if ((e = cudaSetDevice(S->device)) != cudaSuccess)
        return mf_fail(err, MF_ERR_DEVICE, "cuda: cudaSetDevice(%d): %s", S->device, cudaGetErrorString(e));
    S->m = m;
    S->hp = m->hp;
    S->n_ctx = n_ctx > 0 ? n_ctx : 1;
    S->n_seq = n_seq > 0 ? n_seq : 1;
    S->n_batch = n_batch > 0 ? n_batch : 1;
    int rc = resolve_paths(S, err);
    if (rc) return rc;
    S->sync = mf_env_int("MINFER_CUDA_SYNC", 0) == 1;
    S->verbose = mf_env_int("MINFER_VERBOSE", 0) == 1;
    S->census = mf_env_int("MINFER_CENSUS", 0) == 1;
    S->st.on = mf_env_int("MINFER_CUDA_STEPTIME", 0) == 1 && cudaEventCreate(&S->st.e0) == cudaSuccess &&
               cudaEventCreate(&S->st.e1) == cudaSuccess;
    {
        const char *tp = getenv("MINFER_CUDA_TRACE");
        if (tp && *tp) S->trace = cu_trace_open(tp);
    }
    rc = cu_check_model(S, m, err);
    if (rc) return rc;
    rc = cu_upload_weights(S, m, err);
    if (rc) return rc;

    /* KV cache: per layer K then V, [n_seq][n_kv][n_ctx] rows of hd values, f16 or q8_0
     * (hd / 32 blocks of 34 bytes a row), zeroed so no position ever holds NaN bits */
    const mf_hparams *hp = &S->hp;
    const size_t rows = (size_t)S->n_seq * hp->n_head_kv * S->n_ctx;
    const size_t per = rows * (kv_q8 ? (size_t)hp->head_dim / 32 * sizeof(block_q8_0) : hp->head_dim * sizeof(__half));
    S->kvbytes = per * 2 * hp->n_layer;
    S->kvbuf = cu_dev_alloc(S, S->kvbytes, "cudaMalloc(kv cache)");
    if (!S->kvbuf)
        return mf_fail(err, MF_ERR_DEVICE, "cuda: cannot allocate %.2f GiB of KV cache (%d x %d positions): %s",
                       S->kvbytes / 1073741824.0, S->n_seq, S->n_ctx, S->errmsg);
    /* on S->stream: a legacy-stream memset would not be ordered before the
     * first kv_store on the non-blocking stream */
    if ((e = cudaMemsetAsync(S->kvbuf, 0, S->kvbytes, S->stream)) != cudaSuccess)
        return mf_fail(err, MF_ERR_DEVICE, "cuda: cudaMemsetAsync(kv cache): %s", cudaGetErrorString(e));
    S->kc = (__half **)mf_xcalloc(hp->n_layer > 0 ? hp->n_layer : 1, sizeof(__half *));
    S->vc = (__half **)mf_xcalloc(hp->n_layer > 0 ? hp->n_layer : 1, sizeof(__half *));
    if (kv_q8) {
        S->kq = (uint8_t **)mf_xcalloc(hp->n_layer > 0 ? hp->n_layer : 1, sizeof(uint8_t *));
        S->vq = (uint8_t **)mf_xcalloc(hp->n_layer > 0 ? hp->n_layer : 1, sizeof(uint8_t *));
    }
    for (int l = 0; l < hp->n_layer; l++) {
        uint8_t *kl = (uint8_t *)S->kvbuf + (size_t)l * 2 * per;
        if (kv_q8) {
            S->kq[l] = kl;
            S->vq[l] = kl + per;
        } else {
            S->kc[l] = (__half *)kl;
            S->vc[l] = (__half *)(kl + per);
        }
    }

    /* scratch */
    const int nb = S->n_batch;
    size_t own = 0;
#define SCRATCH(ptr, type, count)                                                         \
    do {                                                                                  \
        size_t bytes_ = sizeof(type) * (size_t)(count);                                   \
        ptr = (type *)cu_dev_alloc(S, bytes_, "cudaMalloc(" #ptr ")");                     \
        if (!ptr) return mf_fail(err, MF_ERR_DEVICE, "cuda: scratch: %s", S->errmsg);     \
        own += bytes_;                                                                    \
    } while (0)
    SCRATCH(S->d_meta, int32_t, 3 * nb);
    SCRATCH(S->d_idx, int32_t, nb);
    SCRATCH(S->d_tiles, int4, nb);
    S->q8_cap = (int64_t)CU_MAX_GEMV_COLS * ((S->kmax + 31) & ~31);
    /* (with the lane-major copies, which the x-stationary GEMVs of q4_K, q5_K, q6_K read:
     * common.cuh) */
#define SCRATCH_Q8(q, cap)                                     \
    do {                                                       \
        SCRATCH((q).qs, int8_t, (cap) + 16);                   \
        SCRATCH((q).d, float, (cap) / 32 + 1);                 \
        SCRATCH((q).s, float, (cap) / 16 + 1);                 \
        SCRATCH((q).xl4, uint8_t, cu_xl_bytes(cap));           \
        SCRATCH((q).xl6, uint8_t, cu_xl_bytes(cap));           \
    } while (0)
    /* int8 MMQ activations of np (padded) rows of kq values (mmq.cu cu_mmq_act) */
#define SCRATCH_MQ(a, np, kq)                                  \
    do {                                                       \
        SCRATCH((a).q, int8_t, (np) * (kq));                   \
        SCRATCH((a).d, float, (np) * ((kq) / 32));             \
        SCRATCH((a).s, float, (np) * ((kq) / 32));             \
        SCRATCH((a).is, int, (np) * ((kq) / 16));              \
    } while (0)
    SCRATCH_Q8(S->q8, S->q8_cap);
    if (S->on[CU_PATH_SWIGLU_GEMV]) SCRATCH_Q8(S->q8h, S->q8_cap);
    /* attention chunks: multiples of 64 positions, at most 16 per head: the grid
     * covers the whole context, and every early-exit block still costs a slot
     * (64 chunks x 32 heads measured 10 us for one position; ncu, H200, when the
     * blocks left after pdl_wait); and at least 128, because a token whose position
     * lies past the first chunk pays the merge of partials (a write, an arrival
     * atomic and a read back) on its critical path, which costs more than a second
     * 64-position tile in the same block: tg128 on the 7B (positions 0..127, H200,
     * 2026-11-29) 547.34 with chunks of 128 vs 541.72 with 64 (bench/RESULTS.md). */
    const int tiles = (S->n_ctx + 63) / 64;
    S->att_chunk = 64 * ((tiles + 15) / 16);
    if (S->att_chunk < 128) S->att_chunk = 128;
    S->att_nchunks = (S->n_ctx + S->att_chunk - 1) / S->att_chunk;
    {
        /* a counter per (token, block row of the grid): at most a row per query head
         * (cu_attn_split: n_kv x head groups) */
        const size_t nc = (size_t)CU_MAX_GEMV_COLS * hp->n_head;
        SCRATCH(S->att_count, int, nc);
        if ((e = cudaMemsetAsync(S->att_count, 0, nc * sizeof(int), S->stream)) != cudaSuccess)
            return mf_fail(err, MF_ERR_DEVICE, "cuda: cudaMemsetAsync(counters): %s", cudaGetErrorString(e));
    }
    if (hp->rope_dim > 0) {
        SCRATCH(S->rope_cs, float2, (size_t)S->n_ctx * (hp->rope_dim / 2));
        SCRATCH(S->cs_now, float2, (size_t)hp->rope_dim / 2);
        if (m->rope.freq_factors) {
            const size_t ffb = sizeof(float) * (size_t)(hp->rope_dim / 2);
            SCRATCH(S->rope_ff, float, hp->rope_dim / 2);
            if ((e = cudaMemcpyAsync(S->rope_ff, m->rope.freq_factors, ffb, cudaMemcpyHostToDevice, S->stream)) !=
                cudaSuccess)
                return mf_fail(err, MF_ERR_DEVICE, "cuda: cudaMemcpyAsync(rope factors): %s", cudaGetErrorString(e));
        }
        cu_rope_table(S, S->rope_cs, S->n_ctx, &m->rope, S->rope_ff);
        /* gemma3's sliding layers rotate by a base of their own: a table for it too (without
         * one, rope_cs computes each pair's theta in double precision: the 36 kv_store
         * launches of a gemma-3-270M pp512 took 40 us each) */
        const float swa = m->desc.rope_base_swa;
        if (swa > 0 && !rope_equal(&m->rope_swa, &m->rope)) {
            SCRATCH(S->rope_cs_swa, float2, (size_t)S->n_ctx * (hp->rope_dim / 2));
            cu_rope_table(S, S->rope_cs_swa, S->n_ctx, &m->rope_swa, S->rope_ff);
            S->rope_base_swa = swa;
        }
    }
    /* the one-token attention's RoPE row from the embedding kernel (attn.cu `fast`): the
     * model decides it once here, for the embedding kernel's copy, the attention's
     * argument and the notice alike */
    S->rope_row = S->on[CU_PATH_ROPE_ROW] && S->on[CU_PATH_ATTN_PRE] && S->on[CU_PATH_FUSED] && S->cs_now &&
                  S->n_seq == 1 && hp->n_head == hp->n_head_kv && hp->rope_mode == MF_ROPE_NORM &&
                  hp->head_dim == 128 && hp->rope_dim == 128;
    SCRATCH(S->att_part, float, (size_t)CU_MAX_GEMV_COLS * hp->n_head * S->att_nchunks * (hp->head_dim + 2));
    if (nb > CU_MAX_GEMV_COLS && S->on[CU_PATH_MMA]) {
        const int64_t kp = (S->kmax + 31) & ~31;
        S->x16_cap = (int64_t)nb * kp;
        /* f16 weight scratch: the largest matrix, capped at 32M values (64 MiB) */
        int64_t wmax = 0;
        for (int l = 0; l < hp->n_layer; l++) {
            const mf_layer *L = &m->layers[l];
            const mf_weight *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn.gate, &L->ffn.up, &L->ffn.down};
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
        S->on[CU_PATH_MMA] = 0;
    }
    if (nb > CU_MAX_GEMV_COLS && S->on[CU_PATH_MMQ]) {
        /* (sized for K rounded up to 256; cu_mmq_supported takes only K % 256 == 0) */
        const int64_t np = cu_mmq_npad(nb), kq = (S->kmax + 255) & ~255;
        SCRATCH_MQ(S->mq, np, kq);
        /* split-K partial sums (mmq.cu): 16 MiB, four 4096-row splits of 256 tokens */
        S->mq.part_cap = (int64_t)4 << 20;
        SCRATCH(S->mq.part, float, S->mq.part_cap);
        /* path mmf's f16 activations (n_pad % CU_MMF_NPAD == 0) */
        if (S->on[CU_PATH_MMF]) SCRATCH(S->mh, __half, (int64_t)cu_mmf_npad(nb) * kq);
        if (S->on[CU_PATH_MMF]) SCRATCH(S->mh8, __half, (int64_t)CU_MAX_GEMV_COLS * kq);
    } else {
        S->on[CU_PATH_MMQ] = 0;
    }
    if (!S->on[CU_PATH_MMQ]) S->on[CU_PATH_MMF] = 0; /* (it serves inside the MMQ route) */
    if (m->desc.n_expert > 1 && m->desc.n_expert_used > 0) {
        /* the experts' grouping and activations (moe.cu; every layer's experts have the
         * first's shape: model.c bind_ffn) */
        const int E = m->desc.n_expert, k = m->desc.n_expert_used, dim = hp->n_embd;
        const int ff = (int)m->layers[0].ffn.gate.rows;
        cu_moe_buf *r = &S->moe;
        r->cap = nb * k;
        r->groups_cap = cu_moe_groups(nb, k, E);
        r->tiles_cap = cu_moe_tiles(nb, k, E);
        SCRATCH(r->ids, int32_t, r->cap);
        SCRATCH(r->w, float, r->cap);
        SCRATCH(r->pos, int32_t, r->cap);
        SCRATCH(r->src, int32_t, r->cap);
        SCRATCH(r->groups, int4, r->groups_cap);
        SCRATCH(r->tiles, int4, r->tiles_cap);
        int64_t qc = (int64_t)r->cap * ff > (int64_t)nb * dim ? (int64_t)r->cap * ff : (int64_t)nb * dim;
        qc = (qc + 31) & ~(int64_t)31;
        SCRATCH_Q8(S->moe_q8, qc);
        if (S->on[CU_PATH_MMQ]) {
            const int64_t np = cu_mmq_npad(r->cap + CU_MOE_TILE), kq = ((dim > ff ? dim : ff) + 255) & ~255;
            SCRATCH_MQ(S->moe_mq, np, kq);
        }
    }
#undef SCRATCH_Q8
#undef SCRATCH_MQ
#undef SCRATCH
    if (S->on[CU_PATH_MMQ]) cu_build_planes(S, m);
    cu_build_mmf_planes(S, m);
    S->own_scratch = own;
    S->h_meta = (int32_t *)mf_xcalloc((size_t)3 * nb, sizeof(int32_t));
    S->h_tiles = (int4 *)mf_xcalloc((size_t)nb, sizeof(int4));
    cu_mmv_prepare();
    S->xs_wide_mats = cu_count_xs_wide(m);
    /* every upload copy and memset complete (all on S->stream; device-wide to be sure) */
    if ((e = cudaDeviceSynchronize()) != cudaSuccess)
        return mf_fail(err, MF_ERR_DEVICE, "cuda: init: %s", cudaGetErrorString(e));
    if (S->err) return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
    /* (after the upload: the profile counts the steps' launches) */
    if (mf_env_int("MINFER_CUDA_PROFILE", 0) == 1) cu_prof_start(S);
    return 0;
}

static void be_destroy(mf_backend *be) {
    if (!be) return;
    cu_state *S = cu_st(be);
    if (S) {
        cudaSetDevice(S->device);
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
            m->tok_embd.dev_plane = m->output.dev_plane = NULL;
            for (int l = 0; l < m->hp.n_layer && m->layers; l++) {
                mf_layer *L = &m->layers[l];
                mf_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->bq, &L->bk,
                                   &L->bv, &L->wo, &L->ffn_norm, &L->ffn.gate, &L->ffn.up, &L->ffn.down,
                                   &L->attn_q_norm, &L->attn_k_norm, &L->attn_post_norm, &L->ffn_post_norm};
                for (size_t i = 0; i < MF_ARRAY_LEN(ws); i++) ws[i]->dev = ws[i]->dev_plane = ws[i]->dev_mmf = NULL;
            }
        }
        if (S->plan_made) cu_plan_free(&S->plan);
        cu_plan_facts_free(&S->facts);
        free_state(S);
        if (S->stream) cudaStreamDestroy(S->stream);
        free(S);
    }
    free(be);
}

/* ------------------------------------------------------------------------- */
/* Public entry points                                                       */
/* ------------------------------------------------------------------------- */
extern "C" int cuda_plan_print(mf_backend *be, void *file, mf_err *err) {
    cu_state *S = cu_st(be);
    if (!S || !S->m) return mf_fail(err, MF_ERR_DEVICE, "cuda: the backend has no model");
    const cu_plan *p = cu_plan_of(S, 0);
    char dev[192];
    snprintf(dev, sizeof dev, "%.80s (sm_%d code, %d SMs, %zu KiB shared memory a block; batch %d)", S->prop.name,
             S->code_arch / 10, S->num_sms, (size_t)S->prop.sharedMemPerBlockOptin / 1024, S->n_batch);
    cu_plan_print(p, S->m, &S->env, dev, file);
    return 0;
}

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
    be->ops = &cu_ops;
    be->blocks = &cu_blocks;
    be->impl = S;
    be->init = be_init;
    be->destroy = be_destroy;
    be->alloc = be_alloc;
    be->release = be_release;
    be->download = cu_be_download;
    be->forward = cu_be_forward;
    be->kv_truncate = be_kv_truncate;
    be->host_alloc = be_host_alloc;
    be->host_free = be_host_free;
    return be;
}

extern "C" int cuda_backend_status(mf_backend *be, mf_err *err) {
    cu_state *S = cu_st(be);
    cu_settle(S);
    cudaError_t e = cudaStreamSynchronize(S->stream);
    if (e != cudaSuccess) cu_record(S, e, "cudaStreamSynchronize", __FILE__, __LINE__);
    if (!S->err) return MF_OK;
    S->err = 0;
    return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
}

/* Device memory for a test-uploaded tensor or its plane, freed with the backend (S->extra). */
static void *test_alloc(cu_state *S, size_t nb, const char *what) {
    void *p = cu_dev_alloc(S, nb, what);
    if (!p) return NULL;
    S->extra = (void **)mf_xrealloc(S->extra, sizeof(void *) * (S->nextra + 1));
    S->extra[S->nextra++] = p;
    return p;
}

extern "C" int cuda_backend_upload(mf_backend *be, mf_weight *w, mf_err *err) {
    cu_state *S = cu_st(be);
    size_t nb;
    if (cu_weight_dev_bytes(w, &nb))
        return mf_fail(err, MF_ERR_INPUT, "cuda: type %s with %lld columns unsupported", qtype_name(w->type),
                       (long long)w->cols);
    if (cu_type_is_quant(w->type)) S->any_quant = 1; /* as a model with it would be */
    void *d = test_alloc(S, nb, "cudaMalloc(test weight)");
    if (!d) return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
    const qtype_traits *tr = qtype_get(w->type);
    const size_t file_row = (size_t)(w->cols / tr->blck) * tr->type_size;
    void *tmp = cu_dev_alloc(S, file_row * w->rows, "cudaMalloc(test upload)");
    if (!tmp) return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
    int rc = cu_upload_one(S, w, d, tmp, file_row * w->rows, err);
    cudaFree(tmp);
    if (rc) return mf_fail(err, MF_ERR_DEVICE, "cuda: upload: %s", S->errmsg);
    w->dev = d;
    w->dev_plane = NULL;
    /* the MMQ plane, as cu_build_planes makes it for a model's layer matrices */
    if (cu_mmq_plane_on(S, w->type) && cu_mmq_supported(w->type, w->cols)) {
        void *p = test_alloc(S, cu_mmq_plane_bytes(w->type, (int)w->rows, (int)w->cols), "cudaMalloc(test plane)");
        if (!p) return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
        cu_mmq_plane_build(S, w->type, (uint8_t *)p, (const uint8_t *)d, cu_row_stride(w->type, w->cols), (int)w->rows,
                           (int)w->cols);
        if (cudaStreamSynchronize(S->stream) != cudaSuccess || S->err)
            return mf_fail(err, MF_ERR_DEVICE, "cuda: plane: %s", S->errmsg);
        w->dev_plane = p;
    }
    w->dev_mmf = NULL;
    if (S->on[CU_PATH_MMF] && cu_mmf_supported(w->type, w->cols)) {
        void *p = test_alloc(S, cu_mmf_plane_bytes(w->type, (int)w->rows, (int)w->cols), "cudaMalloc(test mmf plane)");
        if (!p) return mf_fail(err, MF_ERR_DEVICE, "%s", S->errmsg);
        cu_mmf_plane_build(S, w->type, (uint8_t *)p, (const uint8_t *)d, cu_row_stride(w->type, w->cols), (int)w->rows,
                           (int)w->cols);
        if (cudaStreamSynchronize(S->stream) != cudaSuccess || S->err)
            return mf_fail(err, MF_ERR_DEVICE, "cuda: mmf plane: %s", S->errmsg);
        w->dev_mmf = p;
    }
    return 0;
}

extern "C" void cuda_backend_h2d(mf_backend *be, void *dst, const void *src, size_t nbytes) {
    cu_state *S = cu_st(be);
    cu_settle(S);
    CU_CHECK(S, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, S->stream));
    CU_CHECK(S, cudaStreamSynchronize(S->stream));
}

extern "C" void cuda_backend_memory(mf_backend *be, uint64_t *weights, uint64_t *kv, uint64_t *scratch) {
    cu_state *S = cu_st(be);
    *weights = S->wbytes;
    *kv = S->kvbytes;
    *scratch = S->own_scratch + S->fw_scratch;
}

extern "C" void cuda_backend_census(mf_backend *be, uint64_t *launches, uint64_t *graph_replays,
                                    uint64_t *eager_steps) {
    cu_state *S = cu_st(be);
    *launches = S->n.launches;
    *graph_replays = S->replays;
    *eager_steps = S->eager;
}

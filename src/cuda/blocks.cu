/* blocks.cu - the CUDA backend's step: its primitive ops (mf_ops, each one launch or
 * a few, run as issued) and its blocks (mf_blocks), each block's fused launch
 * sequence written out plainly.
 *
 * The decode blocks (n <= 8 tokens) with every path on:
 *   attn:   [x += res] rmsnorm + q8 of xb -> one GEMV launch of q/k/v (xst, or xstm when
 *           v is of another type) -> attention with RoPE and the KV store inside, q8 of
 *           its output -> wo GEMV adding into x (add-in-gemv)
 *   ffn:    rmsnorm + q8 -> gate+up GEMV with the SwiGLU and its q8 in its store (xsg,
 *           one token) -> ffn_down GEMV adding into x
 *   logits: rmsnorm + q8 -> output GEMV -> download (in a graph: a kernel storing into
 *           the pinned logits)
 * Every producer of a GEMV input writes that input's q8 (and its lane-major copies,
 * common.cuh), so no GEMV quantizes its own input. Prefill blocks (n > 8, and 8 where
 * path mmf-cols takes every matrix of the layer: mmf_cols_layer): rmsnorm
 * with the residual add still owed -> f16 tensor-core GEMMs -> KV store with RoPE ->
 * flash attention. Path "fused" off: forward.c's composed blocks over the primitive
 * ops below (one kernel per op), the reference the fused blocks are tested against.
 *
 * The ring GEMVs ask for some of their first weight rows before their wait
 * (cu_mmv_args.ring_pre); how many depends on the kernel ahead of them, which each
 * block knows: cu_tune's xst_pre after a norm, xst_pre_attn after the one-token
 * attention, xst_pre_swiglu after the gate+up launch with the SwiGLU. */
#include "backend.cuh"

#include <string.h>

/* ------------------------------------------------------------------------- */
/* Batch metadata and host->device staging                                   */
/* ------------------------------------------------------------------------- */
uint8_t *cu_cap_pinned(cu_state *S, size_t n, size_t *off) {
    cu_graph_rec *g = S->graph;
    size_t o = (g->pinned_used + 255) & ~(size_t)255;
    if (o + n > g->pinned_cap) {
        cu_record(S, cudaErrorMemoryAllocation, "graph staging full", __FILE__, __LINE__);
        return NULL;
    }
    g->pinned_used = o + n;
    *off = o;
    return g->pinned + o;
}

void cu_upload_meta(cu_state *S, const mf_batch *b) {
    const int nb = S->n_batch;
    int n = b->n;
    if (n > nb) {
        cu_record(S, cudaErrorInvalidValue, "batch wider than n_batch", __FILE__, __LINE__);
        n = nb;
    }
    int32_t *h = S->capturing ? (int32_t *)S->graph->pinned : S->h_meta;
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
    if (!(S->meta_valid && S->meta_b == b)) cu_upload_meta(S, b);
    return S->d_meta;
}
static const int32_t *meta_pos(cu_state *S, const mf_batch *b) { return meta_tok(S, b) + S->n_batch; }
static const int32_t *meta_seq(cu_state *S, const mf_batch *b) { return meta_tok(S, b) + 2 * S->n_batch; }

/* Copies n bytes of host data to dst through the right staging. */
static void upload_small(cu_state *S, void *dst, const void *src, size_t n) {
    if (S->capturing) {
        size_t off;
        uint8_t *p = cu_cap_pinned(S, n, &off);
        if (!p) return;
        memcpy(p, src, n);
        CU_CHECK(S, cudaMemcpyAsync(dst, p, n, cudaMemcpyHostToDevice, S->stream));
    } else {
        CU_CHECK(S, cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, S->stream));
    }
}

/* The precomputed table when the op's RoPE is the model's and every position of the
 * batch is inside it (forward_step guarantees < n_ctx; a direct op call need not), else
 * NULL: computed in the kernel from (dim, base), rounded the same way, which only an
 * unscaled RoPE can be (rope_cs); a scaled one without its table is an error, never an
 * unscaled rotation. */
static const float2 *rope_table(cu_state *S, const mf_rope *r, const mf_batch *b) {
    const mf_model *m = S->m;
    const float2 *t = NULL;
    if (m && rope_equal(r, &m->rope)) t = S->rope_cs;
    else if (m && rope_equal(r, &m->rope_swa)) t = S->rope_cs_swa ? S->rope_cs_swa : S->rope_cs;
    for (int i = 0; t && i < b->n; i++)
        if (b->pos[i] < 0 || b->pos[i] >= S->n_ctx) t = NULL;
    if (!t && !rope_is_plain(r) && !S->err) {
        S->err = 1;
        snprintf(S->errmsg, sizeof S->errmsg, "cuda: a scaled RoPE without its table (positions past n_ctx %d)",
                 S->n_ctx);
    }
    return t;
}

/* ------------------------------------------------------------------------- */
/* Matmul pieces shared by the ops and the blocks                            */
/* ------------------------------------------------------------------------- */
/* The plan (plan.h), made at the first forward step from the upload's facts, remade only
 * where the model turns out split over ranks (tp: a reduce after each block). */
static void plan_facts(cu_state *S, int tp) {
    const mf_model *m = S->m;
    cu_plan_facts *f = &S->facts;
    cu_plan_facts_free(f);
    memset(f, 0, sizeof *f);
    f->n_layer = m->hp.n_layer;
    f->layer = (cu_layer_facts *)mf_xcalloc((size_t)(f->n_layer > 0 ? f->n_layer : 1), sizeof(cu_layer_facts));
    for (int l = 0; l < f->n_layer; l++) {
        const mf_layer *L = &m->layers[l];
        cu_layer_facts *lf = &f->layer[l];
        const mf_weight *ws[CU_W_COUNT] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn.gate, &L->ffn.up, &L->ffn.down};
        for (int i = 0; i < CU_W_COUNT; i++) {
            lf->mmf[i] = ws[i]->dev_mmf != NULL;
            lf->plane[i] = ws[i]->dev_plane != NULL;
        }
        lf->gu_on = S->gu && S->gu[l].on;
        lf->gu_mmf = lf->gu_on && S->gu[l].mmf;
        lf->gu_plane = lf->gu_on && S->gu[l].plane;
        lf->qk_adjacent = L->wq.dev_mmf && L->wk.dev_mmf &&
                          (const uint8_t *)L->wk.dev_mmf ==
                              (const uint8_t *)L->wq.dev_mmf + cu_mmf_plane_bytes(L->wq.type, (int)L->wq.rows, (int)L->wq.cols);
    }
    f->any_quant = S->any_quant;
    f->n_batch = S->n_batch;
    f->mq = S->mq.q != NULL;
    f->mh = S->mh != NULL;
    f->mh8 = S->mh8 != NULL;
    f->q8h = S->q8h.qs != NULL;
    f->x16 = S->x16 != NULL;
    f->tp = tp;
    f->moe_mq = S->moe_mq.q != NULL;
    f->kv_q8 = S->kq != NULL;
}

const cu_plan *cu_plan_of(cu_state *S, int tp) {
    if (S->plan_made && S->plan_tp == tp) return &S->plan;
    if (S->plan_made) cu_plan_free(&S->plan);
    memcpy(S->env.on, S->on, sizeof S->env.on);
    plan_facts(S, tp);
    cu_plan_make(&S->plan, S->m, &S->env, &S->facts);
    S->plan_made = 1;
    S->plan_tp = tp;
    return &S->plan;
}

/* The launch arguments of a GEMV over nmat matrices on x [n][K] (bias: NULL, or one per
 * matrix, each absent or not). */
static cu_mmv_args mmv_args(const mf_weight *const *w, float *const *out, const mf_weight *const *bias, int nmat,
                            const float *x, int n, int accum, int ring_pre) {
    cu_mmv_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < nmat; i++) {
        a.w[i] = (const uint8_t *)w[i]->dev;
        a.out[i] = out[i];
        a.bias[i] = bias && bias[i] && bias[i]->host ? (const float *)bias[i]->dev : NULL;
        a.rows[i] = (int)w[i]->rows;
    }
    a.nmat = nmat;
    a.K = (int)w[0]->cols;
    a.stride = cu_row_stride(w[0]->type, a.K);
    a.ncols = n;
    a.x = x;
    a.accum = accum;
    a.ring_pre = ring_pre;
    return a;
}

/* One GEMV launch over up to three matrices on the same input x [n][K], n <= 8: all of
 * w[0].type, or (mixed) the last of another type (xstm). q8: the launch reads q8 (the
 * plan's gemv-q8), else f32. have_q8: S->q8 already holds x's q8 (else it is quantized
 * here). accum: out[0] += W x. Returns 1 when x's q8 is in S->q8 afterwards. */
static int gemv(cu_state *S, const mf_weight *const *w, float *const *out, const mf_weight *const *bias, int nmat,
                int mixed, const float *x, int n, int q8, int have_q8, int accum, int ring_pre) {
    cu_mmv_args a = mmv_args(w, out, bias, nmat, x, n, accum, ring_pre);
    if (accum) S->n.add_gemv++;
    if (!q8) {
        cu_mmv_f(S, w[0]->type, &a);
        return have_q8;
    }
    if (!have_q8) cu_quantize_q8(S, x, (int64_t)n * a.K, &S->q8);
    a.q = S->q8;
    if (mixed) {
        a.stride2 = cu_row_stride(w[nmat - 1]->type, a.K);
        cu_mmv_q8_mixed(S, w[0]->type, w[nmat - 1]->type, &a);
    } else {
        cu_mmv_q8(S, w[0]->type, &a);
    }
    return 1;
}

/* Prefill GEMM on f16 tensor cores: x and w rounded to f16 (w in row chunks through
 * the f16 weight scratch), f32 accumulation. */
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

/* The label of the GEMM path a weight type took, once per type (DESIGN.md item 5: a
 * correct fallback is invisible to parity). */
static void gemm_label(cu_state *S, const mf_weight *w, int mmq, int plane) {
    unsigned *said = mmq ? plane ? &S->mmq_plane_said : &S->mmq_said : &S->f16_said;
    const unsigned bit = 1u << (w->type & 31);
    if (*said & bit) return;
    *said |= bit;
    if (mmq && plane)
        fprintf(stderr, "minfer/cuda: %s mmq: A=cp.async(prepass int8) DSC=f32-plane B=%s\n", qtype_name(w->type),
                w->type == QTYPE_Q6_K ? "W_exp" : "raw");
    else if (mmq)
        fprintf(stderr, "minfer/cuda: %s mmq: A=cp.async(prepass int8) DSC=in-kernel B=raw%s\n", qtype_name(w->type),
                w->type != QTYPE_Q6_K && w->type != QTYPE_Q4_K ? ""
                : !cu_mmq_plane_on(S, w->type)                ? (w->type == QTYPE_Q6_K ? " (path mmq-exp off)" : " (path mmq-dsc off)")
                                                              : " (no plane)");
    else if (w->type != QTYPE_F32)
        fprintf(stderr, "minfer/cuda: %s gemm: f16 fallback (%s)\n", qtype_name(w->type),
                S->mmq_no_smem ? "shared memory a block below the MMQ tiles'" : !S->on[CU_PATH_MMQ] ? "path mmq off" : cu_mmq_supported(w->type, w->cols) ? "no MMQ scratch" : "no MMQ kernel for this type or K");
}

/* Which forms of a prefill GEMM's input are made (the "have" bits the block code passes
 * from GEMM to GEMM): HAVE_MQ, S->mq holds its int8 MMQ form; HAVE_MH, S->mh its f16. */
#define HAVE_MQ 1
#define HAVE_MH 2

/* The GEMM of kind mm (the plan's mmf, mmq or mmq+plane). x is converted to the form the
 * kernel reads unless `have` says it is made already. rows from w's first: w.rows, or
 * with out2 also the matrices stored after it (a gate+up pair, planes over all of them or
 * NULL), their rows to out2, [n][w.rows] too. Returns have with the form this GEMM read. */
static int matmul_mmq(cu_state *S, int mm, float *out, const float *x, const mf_weight *w, const float *bias, int n,
                      int have, int accum, int rows, const uint8_t *plane, float *out2, const uint8_t *fplane) {
    const int K = (int)w->cols;
    if (mm == CU_MM_MMF) {
        if (!(have & HAVE_MH)) cu_mmf_convert(S, S->mh, x, n, K);
        cu_mmf(S, w->type, out, (int)w->rows, fplane, rows, K, S->mh, n, bias, accum, out2, (int)w->rows);
        S->n.mmf[w->type == QTYPE_Q6_K]++;
        S->n.mmf_cols += n < CU_MMF_MIN_N;
        if (!(S->mmf_said & (1u << (w->type & 31)))) {
            S->mmf_said |= 1u << (w->type & 31);
            fprintf(stderr, "minfer/cuda: %s mmf: A=cp.async(prepass f16) B=f16-fragment plane, dequantized in "
                            "registers (%d+ columns: 128x64 tiles; %s)\n", qtype_name(w->type), CU_MMF_MIN_N,
                    !S->on[CU_PATH_MMF_COLS] ? "path mmf-cols off"
                    : S->mmf_tma ? "8 columns: 16-row tiles split over K, TMA rings, path mmf-cols"
                                 : "8 columns: 32-row tiles split over K, register prefetch (no TMA ring: below sm_90 or too "
                                   "little shared memory), path mmf-cols");
        }
        return have | HAVE_MH;
    }
    if (!(have & HAVE_MQ)) cu_mmq_quantize(S, x, n, K, &S->mq);
    if (mm != CU_MM_MMQ_PLANE) plane = NULL;
    cu_mmq(S, out, (int)w->rows, (const uint8_t *)w->dev, cu_row_stride(w->type, K), w->type, rows, K, &S->mq, n, bias,
           accum, plane, out2, (int)w->rows);
    const int f = w->type == QTYPE_Q4_K ? 0 : w->type == QTYPE_Q6_K ? 1 : 2;
    S->n.mmq[f]++;
    S->n.mmq_plane += plane != NULL;
    gemm_label(S, w, 1, plane != NULL);
    return have | HAVE_MQ;
}

/* out [n][w.rows] = x [n][w.cols] . W^T (+ bias) as the plan's kind mm says (cu_mm).
 * have: up to 8 columns, x's q8 is in S->q8; above, HAVE_MQ / HAVE_MH. Returns the same
 * for afterwards. */
static int matmul_run(cu_state *S, int mm, float *out, const float *x, const mf_weight *w, const mf_weight *bias, int n,
                      int have, int ring_pre) {
    const int K = (int)w->cols, R = (int)w->rows;
    if (n > S->n_batch || K > S->kmax || !w->dev) {
        cu_record(S, cudaErrorInvalidValue, "matmul: batch wider than n_batch, input wider than the model's, or weight not on the device", __FILE__, __LINE__);
        return 0;
    }
    const float *bd = bias && bias->host ? (const float *)bias->dev : NULL;
    switch (mm) {
    case CU_MM_GEMV_Q8:
    case CU_MM_GEMV_F32:
        return gemv(S, &w, &out, &bias, 1, 0, x, n, mm == CU_MM_GEMV_Q8, have, 0, ring_pre);
    case CU_MM_MMF:
    case CU_MM_MMQ:
    case CU_MM_MMQ_PLANE:
        return matmul_mmq(S, mm, out, x, w, bd, n, have, 0, R, (const uint8_t *)w->dev_plane, NULL,
                          (const uint8_t *)w->dev_mmf);
    case CU_MM_F16:
        gemm_label(S, w, 0, 0);
        S->n.mm_f16++;
        matmul_gemm(S, out, x, w, bd, n);
        return have;
    default:
        /* no tensor-core path: f32 GEMVs over groups of 8 tokens */
        for (int t0 = 0; t0 < n; t0 += CU_MAX_GEMV_COLS) {
            const int nc = n - t0 < CU_MAX_GEMV_COLS ? n - t0 : CU_MAX_GEMV_COLS;
            float *o = out + (int64_t)t0 * R;
            const cu_mmv_args a = mmv_args(&w, &o, &bias, 1, x + (int64_t)t0 * K, nc, 0, 0);
            cu_mmv_f(S, w->type, &a);
        }
        return 0;
    }
}

/* (the launches of a matmul carry its tensor's name into the launch profile, profile.cu) */
static int matmul(cu_state *S, int mm, float *out, const float *x, const mf_weight *w, const mf_weight *bias, int n,
                  int have, int ring_pre) {
    S->prof_tag = w->name;
    S->prof_type = w->type;
    const int r = matmul_run(S, mm, out, x, w, bias, n, have, ring_pre);
    S->prof_tag = NULL;
    return r;
}

/* ------------------------------------------------------------------------- */
/* Attention pieces                                                          */
/* ------------------------------------------------------------------------- */
static cu_attn_args attn_args(cu_state *S, int layer, const mf_batch *b) {
    const mf_hparams *hp = &S->hp;
    cu_attn_args a;
    memset(&a, 0, sizeof a);
    a.n = b->n;
    a.n_head = hp->n_head;
    a.n_kv = hp->n_head_kv;
    a.hd = hp->head_dim;
    a.n_ctx = S->n_ctx;
    a.pos = meta_pos(S, b);
    a.seq = meta_seq(S, b);
    a.kc = S->kc[layer];
    a.vc = S->vc[layer];
    a.kq = S->kq ? S->kq[layer] : NULL;
    a.vq = S->vq ? S->vq[layer] : NULL;
    a.seq1 = S->n_seq == 1;
    a.fit = S->on[CU_PATH_ATTN_FIT];
    a.warps = S->tune.attn_warps;
    a.trigger = S->tune.attn_trigger;
    a.rope_dim = hp->rope_dim;
    a.rope_mode = (int)hp->rope_mode;
    a.rope_base = hp->rope_base;
    a.window = S->m ? model_layer_window(&S->m->desc, layer) : 0;
    return a;
}

/* The attention over the cache (k/v stored already, or by the kernel: a.kin): flash
 * for prefill (tiles of <= 64 consecutive tokens of one sequence), else the split
 * kernel 8 tokens at a time, writing q8 of its output when q8 (n <= 8). */
/* flash: the plan's flash kernel (prefill tiles; a captured decode graph of 9..64
 * sequences runs the split kernel) */
static void attn_run(cu_state *S, const cu_attn_args *ap, const float *q, float *out, const mf_batch *b, int q8, int flash) {
    const cu_attn_args &a = *ap;
    const int n = a.n, hd = a.hd;
    const int64_t qd = (int64_t)a.n_head * hd;
    /* (a sliding layer's window is the flash kernel's too: a.window) */
    if (flash && !S->capturing) {
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
        /* the longest tiles (latest positions) first: the launch (cu_attn_flash) sends all
         * heads of a tile before the next, so the last wave is the shortest work */
        for (int i = 0, j = nt - 1; i < j; i++, j--) {
            const int4 tmp = S->h_tiles[i];
            S->h_tiles[i] = S->h_tiles[j];
            S->h_tiles[j] = tmp;
        }
        upload_small(S, S->d_tiles, S->h_tiles, (size_t)nt * sizeof(int4));
        cu_attn_flash(S, &a, q, out, S->d_tiles, nt);
        return;
    }
    for (int t0 = 0; t0 < n; t0 += CU_MAX_GEMV_COLS) {
        cu_attn_args g = a;
        g.n = n - t0 < CU_MAX_GEMV_COLS ? n - t0 : CU_MAX_GEMV_COLS;
        g.pos = a.pos + t0;
        g.seq = a.seq + t0;
        if (a.oh) g.oh = a.oh + t0 * qd;
        cu_attn_split(S, &g, q + t0 * qd, out + t0 * qd, S->att_part, S->att_count, S->att_chunk, S->att_nchunks,
                      q8 && n <= CU_MAX_GEMV_COLS ? &S->q8 : NULL);
    }
}

/* ------------------------------------------------------------------------- */
/* Primitive ops: each as issued (path "fused" off, and the op tests)        */
/* ------------------------------------------------------------------------- */
/* The embedding rows times scale (1: none). */
static void embed_scaled(mf_backend *be, float *out, const mf_weight *w, const mf_batch *b, float scale) {
    cu_state *S = cu_st(be);
    /* one token: the embedding kernel also copies the RoPE table's row at pos for the
     * attention kernel of the step (cu_attn_args.cs_now) */
    const int cs = b->n == 1 && S->rope_row;
    cu_embed(S, out, w, meta_tok(S, b), b->n, S->rope_cs, S->hp.rope_dim / 2, meta_pos(S, b), cs ? S->cs_now : NULL,
             scale);
    S->cs_now_ok = cs;
}

static void op_embed(mf_backend *be, float *out, const mf_weight *w, const mf_batch *b) {
    embed_scaled(be, out, w, b, 1.0f);
}

static void op_rmsnorm(mf_backend *be, float *out, const float *x, const mf_weight *w, int n, int dim, float eps) {
    cu_rmsnorm(cu_st(be), out, (float *)x, NULL, (const float *)w->dev, n, dim, eps, NULL);
}

/* (the primitive op decides per call, by the plan's rule: the blocks read the plan) */
static void op_matmul(mf_backend *be, float *out, const float *x, const mf_weight *w, const mf_weight *bias, int n) {
    cu_state *S = cu_st(be);
    cu_plan_of(S, S->plan_made ? S->plan_tp : 0);
    const cu_mm mm = cu_plan_mm(&S->env, &S->facts, w, w->dev_mmf != NULL, w->dev_plane != NULL, n);
    matmul(S, mm, out, x, w, bias, n, 0, S->tune.xst_pre);
}

static void op_rope(mf_backend *be, float *x, const mf_batch *b, int n_heads, int head_dim, const mf_rope *r) {
    cu_state *S = cu_st(be);
    cu_rope_job j = {x, n_heads};
    cu_rope(S, &j, 1, meta_pos(S, b), b->n, head_dim, r->dim, r->base, (int)r->mode, rope_table(S, r, b));
}

static void op_attention(mf_backend *be, float *out, const float *q, const float *k, const float *v, int layer,
                         const mf_batch *b) {
    cu_state *S = cu_st(be);
    cu_attn_args a = attn_args(S, layer, b);
    cu_kv_store(S, &a, (float *)q, (float *)k, v, 0, 0, 0.0f, 0, NULL);
    attn_run(S, &a, q, out, b, 0, b->n > CU_MAX_GEMV_COLS && S->on[CU_PATH_FLASH] && cu_attn_flash_supported(S, a.hd));
}

static void op_swiglu(mf_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    cu_swiglu(cu_st(be), out, gate, up, n, NULL);
}

static void op_add(mf_backend *be, float *x, const float *y, int64_t n) { cu_add(cu_st(be), x, y, n); }

static void op_get_rows(mf_backend *be, float *dst, const float *src, const int32_t *idx, int n_idx, int width) {
    cu_state *S = cu_st(be);
    if (n_idx <= 0) return;
    if (n_idx > S->n_batch) {
        cu_record(S, cudaErrorInvalidValue, "get_rows: more rows than n_batch", __FILE__, __LINE__);
        return;
    }
    upload_small(S, S->d_idx, idx, (size_t)n_idx * sizeof(int32_t));
    cu_get_rows(S, dst, src, S->d_idx, n_idx, width);
}

static void op_geglu(mf_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    cu_geglu(cu_st(be), out, gate, up, n, NULL);
}

static void op_scale(mf_backend *be, float *x, float s, int64_t n) { cu_scale(cu_st(be), x, s, n); }

static void op_softcap(mf_backend *be, float *x, float c, int64_t n) { cu_softcap(cu_st(be), x, c, n); }

/* (the composed blocks' experts: rows and weights from the host's routing, into the
 * grouping's buffers, which the fused blocks do not use meanwhile) */
static void op_moe_combine(mf_backend *be, float *out, const float *ys, const int32_t *rows, const float *w, int n, int k,
                           int dim) {
    cu_state *S = cu_st(be);
    if ((int64_t)n * k > S->moe.cap) {
        cu_record(S, cudaErrorInvalidValue, "moe_combine: more rows than n_batch x experts used", __FILE__, __LINE__);
        return;
    }
    upload_small(S, S->moe.pos, rows, sizeof(int32_t) * (size_t)n * k);
    upload_small(S, S->moe.w, w, sizeof(float) * (size_t)n * k);
    cu_moe_combine(S, out, ys, S->moe.pos, S->moe.w, n, k, dim);
}

const mf_ops cu_ops = {
    op_embed, op_rmsnorm, op_matmul, op_rope, op_attention, op_swiglu, op_add, op_get_rows,
    op_geglu, op_scale, op_softcap, op_moe_combine,
};

/* ------------------------------------------------------------------------- */
/* Blocks                                                                    */
/* ------------------------------------------------------------------------- */
/* NULL when the fused blocks below can run the model's descriptor: the llama / qwen2
 * layer (biases allowed) and gemma3's pieces (q/k norms, post-norms, GeGLU, embedding
 * scale, soft-cap, sliding windows with their own RoPE base), each written into the
 * blocks as the launches it needs; else the first feature they lack, for the notice line
 * (a q scale other than 1/sqrt(head_dim), gemma3 27B: forward.c's composed blocks over
 * the ops above, one kernel per op). */
const char *cu_blocks_unfused(const mf_arch_desc *d) {
    if (d->act != MF_ACT_SILU && d->act != MF_ACT_GELU) return "the model's FFN activation";
    if (d->q_scale != 0) return "a q scale";
    return NULL;
}

/* The owed add's post-norm, done now in a launch of its own (res_y normed in place). */
static void settle_post(cu_state *S) {
    if (!S->res_y || !S->res_pn) return;
    const int dim = S->hp.n_embd;
    cu_rmsnorm(S, S->res_y, S->res_y, NULL, S->res_pn, (int)(S->res_n / dim), dim, S->hp.norm_eps, NULL);
    S->res_pn = NULL;
}

void cu_settle(cu_state *S) {
    if (!S->res_y) return;
    settle_post(S);
    cu_add(S, S->res_x, S->res_y, S->res_n);
    S->res_y = NULL;
}

/* The residual add owed to x (total values) for the norm about to read x to do (it is
 * no longer owed), or NULL after settling whatever other add was owed. pn: where the
 * caller's kernel applies the add's post-norm itself, its weights (else NULL), or NULL
 * where it cannot (the post-norm is launched first). */
static float *take_owed_add(cu_state *S, const float *x, int64_t total, const float **pn) {
    float *y = NULL;
    if (S->res_y && S->res_x == x && S->res_n == total) {
        if (!pn) settle_post(S);
        y = S->res_y;
    } else {
        cu_settle(S);
    }
    if (pn) *pn = y ? S->res_pn : NULL;
    S->res_y = NULL;
    S->res_pn = NULL;
    return y;
}

/* out = rmsnorm(x (+ the residual add still owed)) * w over n rows of dim, writing its q8
 * into S->q8 too where q8 (the plan's rmsnorm+q8). */
static void norm_in(cu_state *S, float *out, float *x, const mf_weight *w, int n, int q8) {
    const int dim = S->hp.n_embd;
    const int64_t total = (int64_t)n * dim;
    const cu_q8 *q = q8 ? &S->q8 : NULL;
    const float *pn;
    float *y = take_owed_add(S, x, total, &pn);
    if (pn) cu_rmsnorm_post(S, out, x, y, pn, (const float *)w->dev, n, dim, S->hp.norm_eps, q);
    else cu_rmsnorm(S, out, x, y, (const float *)w->dev, n, dim, S->hp.norm_eps, q);
}

/* The prefill norm st (the plan's attn_norm or ffn_norm in the GEMM regime): out =
 * rmsnorm(x (+ the add owed)) * w, with the int8 MMQ form into S->mq (rmsnorm+mmq-form;
 * out only where st writes f32 too) or the f16 form into S->mh (rmsnorm+f16), each
 * falling back to the f32 norm where its kernel refuses the width. Returns HAVE_MQ or
 * HAVE_MH for the form S->mq / S->mh holds. */
static int norm_gemm(cu_state *S, const cu_stage *st, float *out, float *x, const mf_weight *w, int n) {
    const int dim = S->hp.n_embd;
    if (st->kind == CU_NORM_MH) {
        const float *y = take_owed_add(S, x, (int64_t)n * dim, NULL);
        if (cu_rmsnorm_h(S, out, S->mh, x, y, (const float *)w->dev, n, dim, S->hp.norm_eps)) {
            S->n.mmf_norm++;
            return HAVE_MH;
        }
        cu_rmsnorm(S, out, x, y, (const float *)w->dev, n, dim, S->hp.norm_eps, NULL);
        return 0;
    }
    if (st->kind != CU_NORM_MQ) {
        norm_in(S, out, x, w, n, 0);
        return 0;
    }
    const float *y = take_owed_add(S, x, (int64_t)n * dim, NULL);
    if (!cu_rmsnorm_mq(S, st->writes & CU_F_F32 ? out : NULL, x, y, (const float *)w->dev, n, dim, S->hp.norm_eps, &S->mq)) {
        /* (a width the fused kernel does not split: the norm alone, the GEMMs' prepass after) */
        cu_rmsnorm(S, out, x, y, (const float *)w->dev, n, dim, S->hp.norm_eps, NULL);
        return 0;
    }
    S->n.mmq_norm++;
    return HAVE_MQ;
}

/* x += y (RMS-normed by pn first where pn), owed: the next norm adds it (its add+norm
 * kernel). */
static void owe_add(cu_state *S, float *x, float *y, int64_t n, const float *pn) {
    cu_settle(S);
    S->res_x = x;
    S->res_y = y;
    S->res_n = n;
    S->res_pn = pn;
}

/* A block's output y [n][n_embd] into the residual stream x as the plan's res says: the
 * ranks' partial sums added (fw->reduce, tp.h), gemma3's post-norm (norm NULL: none)
 * launched alone (post-norm-launch) or left to the next norm (owed-post), then x += y
 * owed (the next norm adds it). */
static void block_add(cu_state *S, mf_forward *fw, int res, float *x, float *y, int n, const mf_weight *norm) {
    const int64_t total = (int64_t)n * S->hp.n_embd;
    if (fw->reduce) fw->reduce(fw, y, total);
    const float *pn = norm ? (const float *)norm->dev : NULL;
    if (pn && res == CU_RES_POST_LAUNCH) {
        cu_rmsnorm(S, y, y, NULL, pn, n, S->hp.n_embd, S->hp.norm_eps, NULL);
        pn = NULL;
    }
    owe_add(S, x, y, total, pn);
}

/* A decode block's last GEMV (wo, ffn_down: kind mm) and its residual add: into x in the
 * GEMV's store (add-in-gemv), else into tmp and block_add. */
static void block_out(cu_state *S, mf_forward *fw, int res, int mm, const mf_weight *w, float *x, float *tmp,
                      const float *in, int n, int have_q8, int ring_pre, const mf_weight *norm) {
    const int q8 = mm == CU_MM_GEMV_Q8;
    if (res == CU_RES_IN_GEMV) {
        cu_settle(S);
        gemv(S, &w, &x, NULL, 1, 0, in, n, q8, have_q8, 1, ring_pre);
        return;
    }
    gemv(S, &w, &tmp, NULL, 1, 0, in, n, q8, have_q8, 0, ring_pre);
    block_add(S, fw, res, x, tmp, n, norm);
}

static void blk_embed(mf_backend *be, mf_forward *fw, const mf_batch *b) {
    cu_state *S = cu_st(be);
    if (cu_plan_of(S, fw->reduce != NULL)->composed) return forward_composed.embed(be, fw, b);
    cu_settle(S);
    const float es = fw->m->desc.embd_scale;
    embed_scaled(be, fw->x, &fw->m->tok_embd, b, es != 0 ? es : 1.0f);
}

/* q, k, v = xb Wq, Wk, Wv (+ biases) over n <= 8 columns: one launch (qkv mixed: q and k
 * of one type, v of the type xstm pairs with them), else a launch per run of one type,
 * each reading the form of its first matrix. */
static int gemv_qkv(cu_state *S, const cu_layer_plan *P, const mf_layer *L, mf_forward *fw, int n, int have_q8) {
    const mf_weight *w[3] = {&L->wq, &L->wk, &L->wv};
    float *out[3] = {fw->q, fw->k, fw->v};
    const mf_weight *bias[3] = {&L->bq, &L->bk, &L->bv};
    const int pre = S->tune.xst_pre;
    if (P->qkv.kind == CU_QKV_MIXED) return gemv(S, w, out, bias, 3, 1, fw->xb, n, 1, have_q8, 0, pre);
    for (int i = 0; i < 3;) {
        int j = i + 1;
        while (j < 3 && w[j]->type == w[i]->type) j++;
        have_q8 = gemv(S, w + i, out + i, bias + i, j - i, 0, fw->xb, n, P->mm[CU_W_Q + i] == CU_MM_GEMV_Q8, have_q8, 0, pre);
        i = j;
    }
    return have_q8;
}

static void blk_attn(mf_backend *be, mf_forward *fw, int l, const mf_batch *b) {
    cu_state *S = cu_st(be);
    const cu_plan *plan = cu_plan_of(S, fw->reduce != NULL);
    if (plan->composed) return forward_composed.attn(be, fw, l, b);
    const mf_layer *L = &fw->m->layers[l];
    const mf_hparams *hp = &S->hp;
    const int n = b->n, hd = hp->head_dim;
    const cu_layer_plan *P = cu_plan_at(plan, l, n);
    const int decode = P->regime == CU_RG_GEMV;
    const mf_arch_desc *d = &fw->m->desc;
    const mf_weight *post = d->post_norm ? &L->attn_post_norm : NULL;
    int have;
    if (decode) {
        have = P->attn_norm.kind == CU_NORM_Q8;
        norm_in(S, fw->xb, fw->x, &L->attn_norm, n, have);
    } else {
        have = norm_gemm(S, &P->attn_norm, fw->xb, fw->x, &L->attn_norm, n);
    }
    if (decode) {
        gemv_qkv(S, P, L, fw, n, have);
    } else if (P->qkv.kind == CU_QKV_QK_ONE) {
        /* q and k in one column-kernel launch over both planes (they lie one after the
         * other: upload.cu), rows from wq.rows to fw->k */
        S->prof_tag = "attn_q+k (one GEMM)";
        S->prof_type = L->wq.type;
        const int mq = matmul_mmq(S, CU_MM_MMF, fw->q, fw->xb, &L->wq, NULL, n, have, 0, 2 * (int)L->wq.rows, NULL, fw->k,
                                  (const uint8_t *)L->wq.dev_mmf);
        S->prof_tag = NULL;
        S->n.mmf_qk++;
        matmul(S, P->mm[CU_W_V], fw->v, fw->xb, &L->wv, &L->bv, n, mq, 0);
    } else {
        /* (one MMQ form of xb serves all three) */
        int mq = matmul(S, P->mm[CU_W_Q], fw->q, fw->xb, &L->wq, &L->bq, n, have, 0);
        mq = matmul(S, P->mm[CU_W_K], fw->k, fw->xb, &L->wk, &L->bk, n, mq, 0);
        matmul(S, P->mm[CU_W_V], fw->v, fw->xb, &L->wv, &L->bv, n, mq, 0);
    }
    /* RoPE and the KV store (and gemma3's q/k norms): inside the one-token attention
     * kernel (q and k in memory stay as the GEMV wrote them; nothing reads them after),
     * else the norm launches, then the store kernel rotates q and k */
    cu_attn_args a = attn_args(S, l, b);
    const mf_rope *rope = model_layer_rope(fw->m, l);
    const float base = rope->base;
    a.rope = 1;
    a.rope_base = base;
    a.rope_cs = rope_table(S, rope, b);
    const int dec = P->rope.kind == CU_ROPE_IN_ATTN;
    if (P->qk_norm_in_attn) {
        a.qn = (const float *)L->attn_q_norm.dev;
        a.kn = (const float *)L->attn_k_norm.dev;
        a.norm_eps = hp->norm_eps;
    } else if (d->qk_norm) {
        /* gemma3: each head of q and k RMS-normed before RoPE */
        cu_rmsnorm(S, fw->q, fw->q, NULL, (const float *)L->attn_q_norm.dev, n * hp->n_head, hd, hp->norm_eps, NULL);
        cu_rmsnorm(S, fw->k, fw->k, NULL, (const float *)L->attn_k_norm.dev, n * hp->n_head_kv, hd, hp->norm_eps, NULL);
    }
    if (dec) {
        a.kin = fw->k;
        a.vin = fw->v;
        a.pre = S->on[CU_PATH_ATTN_PRE] && S->pdl;
        if (S->cs_now_ok && a.rope_cs == S->rope_cs) a.cs_now = S->cs_now;
    } else {
        cu_kv_store(S, &a, fw->q, fw->k, fw->v, 1, hp->rope_dim, base, (int)hp->rope_mode, a.rope_cs);
        a.rope = 0;
    }
    const int att_q8 = (P->attn.writes & CU_F_Q8) != 0;
    /* 8 columns on path mmf-cols: the attention writes wo's f16 input too (path mmf-in) */
    const int att_mh = (P->attn.writes & CU_F_MH) != 0;
    if (att_mh) a.oh = S->mh;
    attn_run(S, &a, fw->q, fw->att, b, att_q8, P->attn.kind == CU_ATT_FLASH);
    if (decode) {
        /* the kernel ahead of wo: the one-token attention (kernel_attn_dec) where dec */
        const int pre = dec ? S->tune.xst_pre_attn : S->tune.xst_pre;
        block_out(S, fw, P->wo_res.kind, P->mm[CU_W_O], &L->wo, fw->x, fw->xb, fw->att, n, att_q8, pre, post);
    } else {
        matmul(S, P->mm[CU_W_O], fw->xb, fw->att, &L->wo, NULL, n, att_mh ? HAVE_MH : 0, 0);
        block_add(S, fw, P->wo_res.kind, fw->x, fw->xb, n, post);
    }
    S->n.fused_blocks++;
}

/* A layer's FFN of experts as the plan's P->moe says (moe.cu cu_moe_ffn): the norm, the
 * experts' sum into xb, its add owed. */
static void blk_moe(cu_state *S, mf_forward *fw, const mf_layer *L, const cu_layer_plan *P, int n, const mf_weight *pn) {
    const int have_q8 = P->regime == CU_RG_GEMV && P->ffn_norm.kind == CU_NORM_Q8;
    norm_in(S, fw->xb, fw->x, &L->ffn_norm, n, have_q8);
    const cu_moe_scratch sc = {fw->moe_scores, fw->moe_h, fw->moe_h2, fw->moe_y};
    cu_moe_ffn(S, &L->ffn, P->moe, fw->xb, have_q8 ? &S->q8 : NULL, n, &sc, fw->xb);
    block_add(S, fw, P->down_res.kind, fw->x, fw->xb, n, pn);
    S->n.fused_blocks++;
}

static void blk_ffn(mf_backend *be, mf_forward *fw, int l, const mf_batch *b) {
    cu_state *S = cu_st(be);
    const cu_plan *plan = cu_plan_of(S, fw->reduce != NULL);
    if (plan->composed) return forward_composed.ffn(be, fw, l, b);
    const mf_layer *L = &fw->m->layers[l];
    const mf_hparams *hp = &S->hp;
    const int n = b->n, ff = hp->n_ff;
    const cu_layer_plan *P = cu_plan_at(plan, l, n);
    const int decode = P->regime == CU_RG_GEMV;
    const mf_weight *pn = fw->m->desc.post_norm ? &L->ffn_post_norm : NULL;
    if (P->moe) return blk_moe(S, fw, L, P, n, pn);
    if (!decode) {
        int have = norm_gemm(S, &P->ffn_norm, fw->xb, fw->x, &L->ffn_norm, n);
        if (P->gu.kind == CU_GU_COLS_SWIGLU) {
            /* 8 columns (path mmf-swiglu): gate+up with the SwiGLU in its store, its f16 into
             * mh8, which the down GEMM then reads as its mh */
            const int K = (int)L->ffn.gate.cols;
            if (!(have & HAVE_MH)) cu_mmf_convert(S, S->mh, fw->xb, n, K);
            S->prof_tag = "ffn_gate+up+swiglu (one GEMM)";
            S->prof_type = L->ffn.gate.type;
            if (cu_mmf_cols_swiglu(S, L->ffn.gate.type, S->mh8, S->gu[l].mmf, ff, K, S->mh, n)) {
                S->prof_tag = NULL;
                S->n.mmf[L->ffn.gate.type == QTYPE_Q6_K]++;
                S->n.mmf_cols++;
                S->n.mmq_gu++;
                S->n.mmf_swiglu++;
                __half *mh = S->mh;
                S->mh = S->mh8;
                matmul(S, P->mm[CU_W_DOWN], fw->xb, fw->hb, &L->ffn.down, NULL, n, HAVE_MH, 0);
                S->mh = mh;
                block_add(S, fw, P->down_res.kind, fw->x, fw->xb, n, pn);
                S->n.fused_blocks++;
                return;
            }
            /* (refused: the plan's fallback, gate+up one GEMM and the SwiGLU with the f16 prepass) */
            S->prof_tag = NULL;
            have |= HAVE_MH;
        }
        if (P->gu.kind == CU_GU_ONE_GEMM || P->gu.kind == CU_GU_COLS_SWIGLU) {
            /* gate and up in one launch over both (upload.cu gu_pairable): the same
             * arithmetic per output, one tail wave instead of two */
            S->prof_tag = "ffn_gate+up (one GEMM)";
            S->prof_type = L->ffn.gate.type;
            matmul_mmq(S, P->mm[CU_W_GATE], fw->hb, fw->xb, &L->ffn.gate, NULL, n, have, 0, 2 * (int)L->ffn.gate.rows,
                       S->gu[l].plane, fw->hb2, S->gu[l].mmf);
            S->n.mmq_gu++;
            S->prof_tag = NULL;
        } else {
            const int mq = matmul(S, P->mm[CU_W_GATE], fw->hb, fw->xb, &L->ffn.gate, NULL, n, have, 0);
            matmul(S, P->mm[CU_W_UP], fw->hb2, fw->xb, &L->ffn.up, NULL, n, mq, 0);
        }
        /* MMQ or mmf down: SwiGLU and the prepass in one kernel (the f32 product unstored);
         * GeGLU: its own launch, the down GEMM's prepass after */
        int hv = 0;
        const int act = P->gu.kind == CU_GU_COLS_SWIGLU ? P->act.fallback : P->act.kind;
        if (act == CU_ACT_GEGLU) {
            cu_geglu(S, fw->hb, fw->hb, fw->hb2, (int64_t)n * ff, NULL);
        } else if (act == CU_ACT_SWIGLU_MH) {
            cu_mmf_swiglu(S, S->mh, fw->hb, fw->hb2, n, ff);
            hv = HAVE_MH;
        } else if (act == CU_ACT_SWIGLU_MQ) {
            cu_mmq_quantize_swiglu(S, fw->hb, fw->hb2, n, ff, &S->mq);
            hv = HAVE_MQ;
        } else {
            cu_swiglu(S, fw->hb, fw->hb, fw->hb2, (int64_t)n * ff, NULL);
        }
        matmul(S, P->mm[CU_W_DOWN], fw->xb, fw->hb, &L->ffn.down, NULL, n, hv, 0);
        block_add(S, fw, P->down_res.kind, fw->x, fw->xb, n, pn);
        S->n.fused_blocks++;
        return;
    }
    int have_q8 = P->ffn_norm.kind == CU_NORM_Q8;
    norm_in(S, fw->xb, fw->x, &L->ffn_norm, n, have_q8);
    const mf_weight *w[2] = {&L->ffn.gate, &L->ffn.up};
    float *out[2] = {fw->hb, fw->hb2};
    const int h_q8 = (P->act.writes & CU_F_Q8) != 0;
    int down_pre = S->tune.xst_pre;
    int done = 0;
    if (P->gu.kind == CU_GU_XSG) {
        /* gate+up with the SwiGLU in its store (mmv_xsg.cuh xsg/xsgs; it refuses what it cannot
         * take: a bias, other shapes, launches below the ring's size): its q8 goes to q8h,
         * which then becomes the q8 buffer */
        if (!have_q8) cu_quantize_q8(S, fw->xb, hp->n_embd, &S->q8);
        cu_mmv_args a = mmv_args(w, out, NULL, 2, fw->xb, 1, 0, S->tune.xsg_pre);
        a.q = S->q8;
        const int form = cu_mmv_q8_swiglu(S, w[0]->type, &a, fw->hb, &S->q8h);
        if (form) {
            S->n.swiglu_gemv++;
            S->n.xsg_shared += form == 2;
            const cu_q8 t = S->q8;
            S->q8 = S->q8h;
            S->q8h = t;
            down_pre = S->tune.xst_pre_swiglu;
            done = 1;
        } else {
            have_q8 = 1; /* (refused: the plan's fallback, one GEMV launch and the SwiGLU) */
        }
    }
    if (!done) {
        const int q8 = P->mm[CU_W_GATE] == CU_MM_GEMV_Q8;
        if (P->gu.kind != CU_GU_TWO_GEMV) {
            gemv(S, w, out, NULL, 2, 0, fw->xb, n, q8, have_q8, 0, S->tune.xst_pre);
        } else {
            have_q8 = gemv(S, w, out, NULL, 1, 0, fw->xb, n, q8, have_q8, 0, S->tune.xst_pre);
            gemv(S, w + 1, out + 1, NULL, 1, 0, fw->xb, n, P->mm[CU_W_UP] == CU_MM_GEMV_Q8, have_q8, 0, S->tune.xst_pre);
        }
        if (P->act.kind == CU_ACT_GEGLU) cu_geglu(S, fw->hb, fw->hb, fw->hb2, (int64_t)n * ff, h_q8 ? &S->q8 : NULL);
        else cu_swiglu(S, fw->hb, fw->hb, fw->hb2, (int64_t)n * ff, h_q8 ? &S->q8 : NULL);
    }
    block_out(S, fw, P->down_res.kind, P->mm[CU_W_DOWN], &L->ffn.down, fw->x, fw->xb, fw->hb, n, h_q8, down_pre, pn);
    S->n.fused_blocks++;
}

static int blk_logits(mf_backend *be, mf_forward *fw, const mf_batch *b, float *logits) {
    cu_state *S = cu_st(be);
    const cu_plan *plan = cu_plan_of(S, fw->reduce != NULL);
    if (plan->composed) return forward_composed.logits(be, fw, b, logits);
    const mf_model *m = fw->m;
    const mf_hparams *hp = &S->hp;
    const int n = b->n, dim = hp->n_embd, nv = hp->n_vocab;
    int32_t idx_small[64];
    int32_t *idx = n <= 64 ? idx_small : (int32_t *)mf_xmalloc(sizeof(int32_t) * (size_t)n);
    const int n_out = forward_logit_rows(b, idx);
    if (n_out == n && n <= fw->n_logit) {
        /* every row wants logits (decode steps): no row gather, the norm straight from x */
        const cu_logits_plan *P = &plan->logits[cu_bucket_of(n)];
        const int q8 = P->norm.kind == CU_NORM_Q8;
        norm_in(S, fw->xb, fw->x, &m->output_norm, n, q8);
        matmul(S, P->mm, fw->logits, fw->xb, &m->output, NULL, n, q8, S->tune.xst_pre);
        if (m->desc.logit_softcap != 0) cu_softcap(S, fw->logits, m->desc.logit_softcap, (int64_t)n * nv);
        be->download(be, logits, fw->logits, sizeof(float) * (size_t)n * nv);
    } else {
        cu_settle(S);
        for (int c0 = 0; c0 < n_out; c0 += fw->n_logit) {
            const int nc = n_out - c0 < fw->n_logit ? n_out - c0 : fw->n_logit;
            const cu_logits_plan *P = &plan->logits[cu_bucket_of(nc)];
            const int q8 = P->norm.kind == CU_NORM_Q8;
            op_get_rows(be, fw->xo, fw->x, idx + c0, nc, dim);
            cu_rmsnorm(S, fw->xo, fw->xo, NULL, (const float *)m->output_norm.dev, nc, dim, hp->norm_eps, q8 ? &S->q8 : NULL);
            matmul(S, P->mm, fw->logits, fw->xo, &m->output, NULL, nc, q8, S->tune.xst_pre);
            if (m->desc.logit_softcap != 0) cu_softcap(S, fw->logits, m->desc.logit_softcap, (int64_t)nc * nv);
            be->download(be, logits + (size_t)c0 * nv, fw->logits, sizeof(float) * (size_t)nc * nv);
        }
    }
    if (idx != idx_small) free(idx);
    return n_out;
}

const mf_blocks cu_blocks = { blk_embed, blk_attn, blk_ffn, blk_logits };

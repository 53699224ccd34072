/* upload.cu - the weights to the device: one allocation for every bound tensor, each
 * row 16-byte aligned and some formats repacked planar (common.cuh), tied tensors
 * uploaded once; then the registration-time planes of the prefill design (mmq.cu:
 * q4_K's W_dsc, q6_K's W_exp with its W_dsc). Also the model checks the backend makes first. */
#include "backend.cuh"

#include <stdlib.h>
#include <string.h>

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Rows of a tensor: a matrix's, or every expert's of a 3-D one (one after another). */
static int64_t all_rows(const mf_weight *w) { return w->rows * (w->n_slices > 1 ? w->n_slices : 1); }

int cu_weight_dev_bytes(const mf_weight *w, size_t *out) {
    const int64_t rs = cu_row_stride(w->type, w->cols);
    if (rs <= 0) return -1;
    *out = (size_t)rs * (size_t)all_rows(w);
    return 0;
}

int cu_mmq_plane_on(const cu_state *S, uint32_t type) { return cu_plan_mmq_plane_on(S->on, type); }

/* 1 when layer L's gate and up lie one after the other in the weight allocation
 * (cu_upload_weights lays tensors out in collect_weights order, gate then up, each
 * 256-aligned), with one type and shape: the prefill runs them as one MMQ GEMM of 2 x
 * n_ff rows (path mmq-gu; the planner's rule, plan.c). */
static int gu_pairable(const cu_state *S, const mf_layer *L) {
    const mf_weight *g = &L->ffn.gate, *u = &L->ffn.up;
    const int adjacent = g->dev && u->dev && g->dev != u->dev &&
                         (const uint8_t *)u->dev == (const uint8_t *)g->dev + cu_row_stride(g->type, g->cols) * g->rows;
    return cu_plan_gu_pairable(&S->env, L, adjacent);
}

/* The two sets of registration-time planes: the int8 MMQ kernels' (mmq_plane.cu: q4_K's
 * W_dsc, q6_K's W_exp + W_dsc) and path mmf's f16-fragment planes (mmf.cu: q4_K, q6_K). */
enum plane_set { PLANES_MMQ, PLANES_MMF };

static int plane_takes(const cu_state *S, int set, const mf_weight *w) {
    return set == PLANES_MMQ ? cu_plan_wants_mmq_plane(&S->env, w) : cu_plan_wants_mmf_plane(&S->env, w);
}

/* One allocation for a set's n planes; 0, with one message, where it fails, or for the
 * mmf planes where they would leave less than 1 GiB or 5% of the device free (they are
 * built after the weights, KV cache and scratch: the forward's own buffers and other
 * processes need the rest). The MMQ kernels then decode their scales (and q6_K codes) in
 * the kernel; without its planes path mmf is off. */
static int plane_set_alloc(cu_state *S, int set, void **buf, size_t total, int n) {
    const double gib = total / 1073741824.0;
    if (set == PLANES_MMF) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
            const size_t keep = tot / 20 > ((size_t)1 << 30) ? tot / 20 : (size_t)1 << 30;
            if (total + keep > fr) {
                S->on[CU_PATH_MMF] = 0;
                fprintf(stderr, "minfer/cuda: mmf planes: %.2f GiB for %d matrices would leave less than %.2f GiB of "
                        "the %.2f GiB free: q4_K/q6_K prefill GEMMs stay on the int8 MMQ kernel (path mmf off)\n",
                        gib, n, keep / 1073741824.0, fr / 1073741824.0);
                return 0;
            }
        }
    }
    if (cudaMalloc(buf, total) == cudaSuccess) return 1;
    (void)cudaGetLastError();
    *buf = NULL;
    if (set == PLANES_MMQ) {
        fprintf(stderr, "minfer/cuda: mmq planes: cannot allocate %.2f GiB for %d matrices: their GEMMs "
                "decode the weights' scales (and q6_K codes) in the kernel\n", gib, n);
    } else {
        S->on[CU_PATH_MMF] = 0;
        fprintf(stderr, "minfer/cuda: mmf planes: cannot allocate %.2f GiB for %d matrices: q4_K/q6_K prefill "
                "GEMMs stay on the int8 MMQ kernel (path mmf off)\n", gib, n);
    }
    return 0;
}

/* A set's planes are built for the layer matrices (what prefill GEMMs read; the output
 * matrix serves one row a prompt, on the GEMV, except in perplexity runs), each once
 * where matrices are tied; a gate+up pair (gu_pairable) gets one plane over its 2 x
 * n_ff rows (S->gu[l].plane, .mmf) and its two matrices none of their own. Two passes:
 * the sizes, then one allocation and each plane built into it. */
static void build_plane_set(cu_state *S, mf_model *m, int set) {
    void **buf = set == PLANES_MMQ ? &S->planebuf : &S->mmfbuf;
    size_t total = 0;
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        for (int l = 0; l < m->hp.n_layer; l++) {
            mf_layer *L = &m->layers[l];
            mf_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn.gate, &L->ffn.up, &L->ffn.down};
            for (size_t i = 0; i < MF_ARRAY_LEN(ws); i++) {
                mf_weight *w = ws[i];
                const int pair = S->gu && S->gu[l].on && (w == &L->ffn.gate || w == &L->ffn.up);
                if (pair && w == &L->ffn.up) continue; /* (in the gate's plane) */
                if (!w->dev || !plane_takes(S, set, w)) continue;
                const int rows = (int)(pair ? 2 * w->rows : w->rows), K = (int)w->cols;
                const size_t nb = align256(set == PLANES_MMQ ? cu_mmq_plane_bytes(w->type, rows, K)
                                                             : cu_mmf_plane_bytes(w->type, rows, K));
                if (pass == 0) {
                    total += nb;
                    n++;
                    continue;
                }
                uint8_t *plane = (uint8_t *)*buf + off;
                const uint8_t *W = (const uint8_t *)w->dev;
                const int64_t stride = cu_row_stride(w->type, w->cols);
                if (set == PLANES_MMQ) {
                    if (pair) S->gu[l].plane = plane;
                    else w->dev_plane = plane;
                    cu_mmq_plane_build(S, w->type, plane, W, stride, rows, K);
                } else {
                    if (pair) S->gu[l].mmf = plane;
                    else w->dev_mmf = plane;
                    cu_mmf_plane_build(S, w->type, plane, W, stride, rows, K);
                }
                off += nb;
            }
        }
        if (pass == 0) {
            if (!n || !plane_set_alloc(S, set, buf, total, n)) return;
            if (set == PLANES_MMQ) S->planebytes = total, S->nplanes = n;
            else S->mmfbytes = total, S->nmmf = n;
        }
    }
}

/* The MMQ planes, after deciding which layers' gate and up run as one GEMM. */
void cu_build_planes(cu_state *S, mf_model *m) {
    memcpy(S->env.on, S->on, sizeof S->env.on);
    S->gu = (cu_gu_pair *)mf_xcalloc((size_t)m->hp.n_layer, sizeof(cu_gu_pair));
    for (int l = 0; l < m->hp.n_layer; l++) S->gu[l].on = gu_pairable(S, &m->layers[l]);
    build_plane_set(S, m, PLANES_MMQ);
}

/* Path mmf's planes (after the MMQ planes: a gate+up pair's is over both, as theirs). */
void cu_build_mmf_planes(cu_state *S, mf_model *m) {
    memcpy(S->env.on, S->on, sizeof S->env.on);
    if (S->on[CU_PATH_MMF]) build_plane_set(S, m, PLANES_MMF);
}

/* Copies one tensor from the file mapping into its device slot (repacked). */
int cu_upload_one(cu_state *S, const mf_weight *w, void *dst, void *tmp, size_t tmp_cap, mf_err *err) {
    const qtype_traits *tr = qtype_get(w->type);
    const size_t file_row = (size_t)(w->cols / tr->blck) * tr->type_size;
    const size_t dev_row = (size_t)cu_row_stride(w->type, w->cols);
    const int64_t rows = all_rows(w);
    if (!cu_type_planar(w->type) && file_row == dev_row) {
        CU_TRY(S, cudaMemcpyAsync(dst, w->host, file_row * rows, cudaMemcpyHostToDevice, S->stream));
        return 0;
    }
    int64_t rows_per = (int64_t)(tmp_cap / file_row);
    if (rows_per > 65535) rows_per = 65535;
    if (rows_per < 1) return mf_fail(err, MF_ERR_DEVICE, "cuda: row of %s too large for the upload buffer", w->name);
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per) {
        const int64_t nr = rows - r0 < rows_per ? rows - r0 : rows_per;
        CU_TRY(S, cudaMemcpyAsync(tmp, (const uint8_t *)w->host + r0 * file_row, nr * file_row, cudaMemcpyHostToDevice,
                               S->stream));
        cu_repack(S, (uint8_t *)dst + r0 * dev_row, tmp, w->type, w->cols, nr);
        CU_TRY(S, cudaStreamSynchronize(S->stream));
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
                           &L->bv, &L->wo, &L->ffn_norm, &L->ffn.gate, &L->ffn.up, &L->ffn.down,
                           &L->attn_q_norm, &L->attn_k_norm, &L->attn_post_norm, &L->ffn_post_norm, &L->ffn.router};
        for (size_t i = 0; i < MF_ARRAY_LEN(ws) && n < cap; i++) list[n++] = ws[i];
    }
    return n;
}

/* Quantized matrices the xs GEMV cannot take (rows too wide for its register-held
 * activations: xst2, xs2 or pp take them); the notice says how many. */
int cu_count_xs_wide(const mf_model *m) {
    int n = 0;
    const mf_weight *top = &m->output;
    if (top->host && cu_mmv_q8_supported(top->type) && !cu_mmv_xs_takes(top->type, (int)top->cols)) n++;
    for (int l = 0; l < m->hp.n_layer && m->layers; l++) {
        const mf_layer *L = &m->layers[l];
        const mf_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn.gate, &L->ffn.up, &L->ffn.down};
        for (size_t i = 0; i < MF_ARRAY_LEN(ws); i++)
            if (ws[i]->host && cu_mmv_q8_supported(ws[i]->type) && !cu_mmv_xs_takes(ws[i]->type, (int)ws[i]->cols))
                n++;
    }
    return n;
}

int cu_upload_weights(cu_state *S, mf_model *m, mf_err *err) {
    const int cap = 3 + 17 * m->hp.n_layer; /* collect_weights: 17 a layer */
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
        if (cu_weight_dev_bytes(w, &nb)) {
            rc = mf_fail(err, MF_ERR_INPUT, "cuda: tensor %s: type %s with %lld columns is not supported", w->name,
                         qtype_name(w->type), (long long)w->cols);
            break;
        }
        off[i] = total;
        total += align256(nb);
        const qtype_traits *tr = qtype_get(w->type);
        const size_t file_row = (size_t)(w->cols / tr->blck) * tr->type_size;
        const size_t fb = file_row * (size_t)all_rows(w);
        if (cu_type_planar(w->type) || file_row % 16) tmp_need = fb > tmp_need ? fb : tmp_need;
    }
    if (rc == 0) {
        S->wbuf = cu_dev_alloc(S, total, "cudaMalloc(weights)");
        if (!S->wbuf) rc = mf_fail(err, MF_ERR_DEVICE, "cuda: cannot allocate %.2f GiB for the weights: %s",
                                   total / 1073741824.0, S->errmsg);
        S->wbytes = total;
    }
    void *tmp = NULL;
    size_t tmp_cap = tmp_need < ((size_t)256 << 20) ? tmp_need : ((size_t)256 << 20);
    if (rc == 0 && tmp_need) {
        tmp = cu_dev_alloc(S, tmp_cap, "cudaMalloc(upload)");
        if (!tmp) rc = mf_fail(err, MF_ERR_DEVICE, "cuda: cannot allocate the upload buffer: %s", S->errmsg);
    }
    for (int i = 0; i < n && rc == 0; i++) {
        mf_weight *w = list[i];
        if (!w->host || owner[i] >= 0) continue;
        w->dev = (uint8_t *)S->wbuf + off[i];
        w->dev_slice_bytes = (uint64_t)cu_row_stride(w->type, w->cols) * (uint64_t)w->rows;
        if (cu_upload_one(S, w, w->dev, tmp, tmp_cap, err)) {
            if (!err->msg[0] || S->err) mf_fail(err, MF_ERR_DEVICE, "cuda: upload of %s: %s", w->name, S->errmsg);
            rc = MF_ERR_DEVICE;
        }
    }
    for (int i = 0; i < n && rc == 0; i++)
        if (owner[i] >= 0) list[i]->dev = list[owner[i]]->dev, list[i]->dev_slice_bytes = list[owner[i]]->dev_slice_bytes;
    if (tmp) cudaFree(tmp);
    free(list);
    free(off);
    free(owner);
    return rc;
}

int cu_check_model(cu_state *S, const mf_model *m, mf_err *err) {
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
        const mf_weight *vs[] = {&L->attn_norm, &L->ffn_norm, &L->bq, &L->bk, &L->bv, &L->attn_q_norm,
                                 &L->attn_k_norm, &L->attn_post_norm, &L->ffn_post_norm};
        for (size_t i = 0; i < MF_ARRAY_LEN(vs); i++)
            if (vs[i]->host && vs[i]->type != QTYPE_F32)
                return mf_fail(err, MF_ERR_INPUT, "cuda: %s must be f32 (is %s)", vs[i]->name,
                               qtype_name(vs[i]->type));
        const mf_weight *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn.gate, &L->ffn.up, &L->ffn.down};
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


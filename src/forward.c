/* forward.c - backend-neutral transformer step over a batch: the layer walk over a
 * backend's blocks (backend.h mf_blocks), and the composed blocks, which run each
 * block as the backend's primitive ops (the CPU backend's step, and the reference):
 *
 *   embed:   x = embed(tok) (* embd_scale)
 *   attn:    xb = rmsnorm(x);  q,k,v = xb Wq,Wk,Wv (+bias);  (q,k = rmsnorm per head: qk_norm)
 *            rope(q,k) (the layer's base);  att = attention(q, k, v | kv cache, the layer's window)
 *            xb = att Wo  (xb = rmsnorm(xb): post_norm);  x += xb
 *   ffn:     xb = rmsnorm(x);  h = act(xb Wgate) * xb Wup (silu or gelu_tanh);  xb = h Wdown
 *            (xb = rmsnorm(xb): post_norm);  x += xb
 *   logits:  rmsnorm(x[rows wanting logits]) Wout  (c tanh(./c): logit_softcap)
 * The optional steps are the descriptor's (model.h mf_arch_desc).
 */
#include "forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *forward_desc_missing(const mf_backend *be, const mf_arch_desc *d) {
    const char *missing = model_desc_unsupported(d);
    if (missing) return missing;
    const mf_ops *op = be->ops;
    if (d->n_expert > 1 && !op->moe_combine) return "a mixture-of-experts FFN";
    if (d->act == MF_ACT_GELU && !op->geglu) return "GeGLU";
    if (((d->embd_scale != 0 && d->embd_scale != 1) || d->q_scale != 0) && !op->scale) return "scaling";
    if (d->logit_softcap != 0 && !op->softcap) return "logit soft-capping";
    return NULL;
}

static void free_bufs(mf_forward *fw) {
    float **bufs[] = { &fw->x,     &fw->xb,         &fw->q,     &fw->k,     &fw->v,     &fw->att,  &fw->hb,
                       &fw->hb2,   &fw->xo,         &fw->logits, &fw->moe_scores, &fw->moe_x, &fw->moe_h,
                       &fw->moe_h2, &fw->moe_y };
    free(fw->moe_host);
    free(fw->moe_ids);
    free(fw->moe_rows);
    free(fw->moe_tok);
    free(fw->moe_w);
    fw->moe_host = fw->moe_w = NULL;
    fw->moe_ids = fw->moe_rows = fw->moe_tok = NULL;
    for (size_t i = 0; i < MF_ARRAY_LEN(bufs); i++) {
        if (*bufs[i]) fw->be->release(fw->be, *bufs[i]);
        *bufs[i] = NULL;
    }
}

int forward_init(mf_forward *fw, mf_backend *be, const mf_model *m, int n_ctx, int n_seq, int n_batch, mf_err *err) {
    memset(fw, 0, sizeof *fw);
    fw->be = be;
    fw->m = m;
    fw->n_batch = n_batch;
    fw->n_ctx = n_ctx;
    fw->n_seq = n_seq;
    const mf_hparams *hp = &m->hp;
    const char *missing = forward_desc_missing(be, &m->desc);
    if (missing)
        return mf_fail(err, MF_ERR_INPUT, "forward: %s (architecture %s) is not implemented %s%s", missing,
                       hp->arch_name, model_desc_unsupported(&m->desc) ? "yet" : "on the backend ",
                       model_desc_unsupported(&m->desc) ? "" : be->name);
    /* logits are computed FORWARD_LOGIT_ROWS rows at a time: a batch of 512 would
     * otherwise hold 512 x n_vocab floats (65 MB at 32k) for the rare caller that
     * wants every row's logits */
    fw->n_logit = n_batch < FORWARD_LOGIT_ROWS ? n_batch : FORWARD_LOGIT_ROWS;
    size_t nl = (size_t)fw->n_logit;
    size_t nb = (size_t)n_batch, q_dim = (size_t)hp->n_head * hp->head_dim, kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    struct fw_buf { float **p; size_t n; } want[] = {
        { &fw->x, nb * hp->n_embd }, { &fw->xb, nb * hp->n_embd }, { &fw->q, nb * q_dim },
        { &fw->k, nb * kv_dim },     { &fw->v, nb * kv_dim },      { &fw->att, nb * q_dim },
        { &fw->hb, nb * hp->n_ff },  { &fw->hb2, nb * hp->n_ff },  { &fw->xo, nl * hp->n_embd },
        { &fw->logits, nl * hp->n_vocab },
        { NULL, 0 }, { NULL, 0 }, { NULL, 0 }, { NULL, 0 }, { NULL, 0 },
    };
    const mf_arch_desc *d = &m->desc;
    if (d->n_expert > 1) {
        /* (every layer's experts have the first's ff: bind_ffn reads one key for all) */
        const size_t E = (size_t)d->n_expert, K = (size_t)d->n_expert_used, ff = (size_t)m->layers[0].ffn.gate.rows;
        want[MF_ARRAY_LEN(want) - 5] = (struct fw_buf){ &fw->moe_scores, nb * E };
        want[MF_ARRAY_LEN(want) - 4] = (struct fw_buf){ &fw->moe_x, nb * K * hp->n_embd };
        want[MF_ARRAY_LEN(want) - 3] = (struct fw_buf){ &fw->moe_h, nb * K * ff };
        want[MF_ARRAY_LEN(want) - 2] = (struct fw_buf){ &fw->moe_h2, nb * K * ff };
        want[MF_ARRAY_LEN(want) - 1] = (struct fw_buf){ &fw->moe_y, nb * K * hp->n_embd };
        fw->moe_host = mf_xmalloc(sizeof(float) * nb * E);
        fw->moe_ids = mf_xmalloc(sizeof(int32_t) * nb * K);
        fw->moe_rows = mf_xmalloc(sizeof(int32_t) * nb * K);
        fw->moe_tok = mf_xmalloc(sizeof(int32_t) * nb * K);
        fw->moe_w = mf_xmalloc(sizeof(float) * nb * K);
    }
    size_t total = 0;
    for (size_t i = 0; i < MF_ARRAY_LEN(want); i++) {
        if (!want[i].p) continue;
        *want[i].p = be->alloc(be, want[i].n * sizeof(float));
        total += want[i].n * sizeof(float);
        if (!*want[i].p) {
            free_bufs(fw);
            return mf_fail(err, MF_ERR_NOMEM, "forward: cannot allocate %zu bytes of activations on %s",
                           want[i].n * sizeof(float), be->name);
        }
    }
    return MF_OK;
}

void forward_free(mf_forward *fw) {
    if (fw->be) free_bufs(fw);
    memset(fw, 0, sizeof *fw);
}

int forward_logit_rows(const mf_batch *b, int32_t *idx) {
    int n = 0;
    for (int i = 0; i < b->n; i++)
        if (b->logits ? b->logits[i] : i == b->n - 1) idx[n++] = i;
    return n;
}

/* ---- the composed blocks ---- */
static void composed_embed(mf_backend *be, mf_forward *fw, const mf_batch *b) {
    const mf_arch_desc *d = &fw->m->desc;
    be->ops->embed(be, fw->x, &fw->m->tok_embd, b);
    if (d->embd_scale != 0 && d->embd_scale != 1)
        be->ops->scale(be, fw->x, d->embd_scale, (int64_t)b->n * fw->m->hp.n_embd);
}

static void composed_attn(mf_backend *be, mf_forward *fw, int l, const mf_batch *b) {
    const mf_ops *op = be->ops;
    const mf_hparams *hp = &fw->m->hp;
    const mf_layer *L = &fw->m->layers[l];
    const int n = b->n, dim = hp->n_embd;
    op->rmsnorm(be, fw->xb, fw->x, &L->attn_norm, n, dim, hp->norm_eps);
    op->matmul(be, fw->q, fw->xb, &L->wq, &L->bq, n);
    op->matmul(be, fw->k, fw->xb, &L->wk, &L->bk, n);
    op->matmul(be, fw->v, fw->xb, &L->wv, &L->bv, n);
    const mf_arch_desc *d = &fw->m->desc;
    if (d->qk_norm) {
        op->rmsnorm(be, fw->q, fw->q, &L->attn_q_norm, n * hp->n_head, hp->head_dim, hp->norm_eps);
        op->rmsnorm(be, fw->k, fw->k, &L->attn_k_norm, n * hp->n_head_kv, hp->head_dim, hp->norm_eps);
    }
    const mf_rope *rope = model_layer_rope(fw->m, l);
    op->rope(be, fw->q, b, hp->n_head, hp->head_dim, rope);
    op->rope(be, fw->k, b, hp->n_head_kv, hp->head_dim, rope);
    if (d->q_scale != 0) op->scale(be, fw->q, d->q_scale, (int64_t)n * hp->n_head * hp->head_dim);
    op->attention(be, fw->att, fw->q, fw->k, fw->v, l, b);
    op->matmul(be, fw->xb, fw->att, &L->wo, NULL, n);
    if (fw->reduce) fw->reduce(fw, fw->xb, (int64_t)n * dim);
    if (d->post_norm) op->rmsnorm(be, fw->xb, fw->xb, &L->attn_post_norm, n, dim, hp->norm_eps);
    op->add(be, fw->x, fw->xb, (int64_t)n * dim);
}

/* Slice e of an experts' tensor as a matrix of its own. */
static mf_weight expert(const mf_weight *w, int e) {
    mf_weight v = *w;
    v.host = (const uint8_t *)w->host + (uint64_t)e * w->slice_bytes;
    if (w->dev) v.dev = (uint8_t *)w->dev + (uint64_t)e * w->dev_slice_bytes;
    v.nbytes = w->slice_bytes;
    v.n_slices = 1;
    return v;
}

/* The router of n tokens on the host (scores [n][E] -> ids, w [n][k]), as llama.cpp's
 * build_moe_ffn with softmax gating and normalised weights (qwen3moe, Mixtral): the softmax
 * of each token's scores (the exponentials summed in double, as ggml_vec_soft_max_f32), its k
 * largest (ties: the lower id), the chosen probabilities divided by their f32 sum. */
void forward_moe_route(const float *scores, int n, int E, int k, int32_t *ids, float *w) {
    for (int t = 0; t < n; t++) {
        const float *s = scores + (int64_t)t * E;
        float mx = -INFINITY;
        for (int e = 0; e < E; e++) mx = s[e] > mx ? s[e] : mx;
        double sum = 0;
        float p[4096];
        for (int e = 0; e < E; e++) sum += (double)(p[e] = expf(s[e] - mx));
        const float inv = (float)(1.0 / sum);
        for (int e = 0; e < E; e++) p[e] *= inv;
        int32_t *id = ids + (int64_t)t * k;
        float *wt = w + (int64_t)t * k;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= id[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            id[j] = best;
            wt[j] = p[best];
        }
        float ws = 0;
        for (int j = 0; j < k; j++) ws += wt[j];
        for (int j = 0; j < k; j++) wt[j] /= ws;
    }
}

/* A layer's FFN of experts: the router's scores, each token's k experts (forward_moe_route),
 * then expert by expert its tokens' rows gathered (each expert's weights read once a batch),
 * gate/up, SwiGLU, down, and each token's outputs summed in its slots' order with their
 * weights (moe_combine) into xb. */
static void composed_moe(mf_backend *be, mf_forward *fw, const mf_layer *L, int n) {
    const mf_ops *op = be->ops;
    const mf_hparams *hp = &fw->m->hp;
    const mf_ffn *f = &L->ffn;
    const int dim = hp->n_embd, E = f->n_expert, k = f->n_used, ff = (int)f->gate.rows;
    op->matmul(be, fw->moe_scores, fw->xb, &f->router, NULL, n);
    be->download(be, fw->moe_host, fw->moe_scores, sizeof(float) * (size_t)n * E);
    forward_moe_route(fw->moe_host, n, E, k, fw->moe_ids, fw->moe_w);
    /* each expert's (token, slot) rows, tokens in order: a counting sort over the
     * choices (start[e] .. start[e + 1] are expert e's rows), one pass, not one per expert */
    int start[4096 + 1] = { 0 }, next[4096];
    for (int i = 0; i < n * k; i++) start[fw->moe_ids[i] + 1]++;
    for (int e = 0; e < E; e++) start[e + 1] += start[e], next[e] = start[e];
    for (int i = 0; i < n * k; i++) {
        const int r = next[fw->moe_ids[i]]++;
        fw->moe_tok[r] = i / k;
        fw->moe_rows[i] = r;
    }
    for (int e = 0; e < E; e++) {
        const int r0 = start[e], ne = start[e + 1] - r0;
        if (!ne) continue;
        const mf_weight g = expert(&f->gate, e), u = expert(&f->up, e), d = expert(&f->down, e);
        float *xe = fw->moe_x + (int64_t)r0 * dim, *he = fw->moe_h + (int64_t)r0 * ff, *he2 = fw->moe_h2 + (int64_t)r0 * ff;
        op->get_rows(be, xe, fw->xb, fw->moe_tok + r0, ne, dim);
        op->matmul(be, he, xe, &g, NULL, ne);
        op->matmul(be, he2, xe, &u, NULL, ne);
        op->swiglu(be, he, he, he2, (int64_t)ne * ff);
        op->matmul(be, fw->moe_y + (int64_t)r0 * dim, he, &d, NULL, ne);
    }
    op->moe_combine(be, fw->xb, fw->moe_y, fw->moe_rows, fw->moe_w, n, k, dim);
}

static void composed_ffn(mf_backend *be, mf_forward *fw, int l, const mf_batch *b) {
    const mf_ops *op = be->ops;
    const mf_hparams *hp = &fw->m->hp;
    const mf_layer *L = &fw->m->layers[l];
    const int n = b->n, dim = hp->n_embd;
    op->rmsnorm(be, fw->xb, fw->x, &L->ffn_norm, n, dim, hp->norm_eps);
    if (L->ffn.n_expert > 1) {
        composed_moe(be, fw, L, n);
        if (fw->reduce) fw->reduce(fw, fw->xb, (int64_t)n * dim);
        if (fw->m->desc.post_norm) op->rmsnorm(be, fw->xb, fw->xb, &L->ffn_post_norm, n, dim, hp->norm_eps);
        op->add(be, fw->x, fw->xb, (int64_t)n * dim);
        return;
    }
    op->matmul(be, fw->hb, fw->xb, &L->ffn.gate, NULL, n);
    op->matmul(be, fw->hb2, fw->xb, &L->ffn.up, NULL, n);
    if (fw->m->desc.act == MF_ACT_GELU) op->geglu(be, fw->hb, fw->hb, fw->hb2, (int64_t)n * hp->n_ff);
    else op->swiglu(be, fw->hb, fw->hb, fw->hb2, (int64_t)n * hp->n_ff);
    op->matmul(be, fw->xb, fw->hb, &L->ffn.down, NULL, n);
    if (fw->reduce) fw->reduce(fw, fw->xb, (int64_t)n * dim);
    if (fw->m->desc.post_norm) op->rmsnorm(be, fw->xb, fw->xb, &L->ffn_post_norm, n, dim, hp->norm_eps);
    op->add(be, fw->x, fw->xb, (int64_t)n * dim);
}

static int composed_logits(mf_backend *be, mf_forward *fw, const mf_batch *b, float *logits) {
    const mf_ops *op = be->ops;
    const mf_model *m = fw->m;
    const mf_hparams *hp = &m->hp;
    const int n = b->n, dim = hp->n_embd;
    int32_t idx_small[64];
    int32_t *idx = n <= 64 ? idx_small : mf_xmalloc(sizeof(int32_t) * (size_t)n);
    const int n_out = forward_logit_rows(b, idx);
    for (int c0 = 0; c0 < n_out; c0 += fw->n_logit) {
        const int nc = n_out - c0 < fw->n_logit ? n_out - c0 : fw->n_logit;
        op->get_rows(be, fw->xo, fw->x, idx + c0, nc, dim);
        op->rmsnorm(be, fw->xo, fw->xo, &m->output_norm, nc, dim, hp->norm_eps);
        op->matmul(be, fw->logits, fw->xo, &m->output, NULL, nc);
        if (m->desc.logit_softcap != 0)
            op->softcap(be, fw->logits, m->desc.logit_softcap, (int64_t)nc * hp->n_vocab);
        be->download(be, logits + (size_t)c0 * hp->n_vocab, fw->logits, sizeof(float) * (size_t)nc * hp->n_vocab);
    }
    if (idx != idx_small) free(idx);
    return n_out;
}

const mf_blocks forward_composed = { composed_embed, composed_attn, composed_ffn, composed_logits };

int forward_generic(mf_forward *fw, const mf_batch *b, float *logits, mf_err *err) {
    mf_backend *be = fw->be;
    const mf_blocks *B = be->blocks ? be->blocks : &forward_composed;
    B->embed(be, fw, b);
    for (int l = 0; l < fw->m->hp.n_layer; l++) {
        B->attn(be, fw, l, b);
        B->ffn(be, fw, l, b);
    }
    (void)err; /* blocks report device failures through the backend's own checks */
    return B->logits(be, fw, b, logits);
}

int forward_step(mf_forward *fw, const mf_batch *b, float *logits, mf_err *err) {
    if (b->n < 1 || b->n > fw->n_batch)
        return mf_fail(err, MF_ERR_USAGE, "forward: batch of %d tokens (1..%d allowed)", b->n, fw->n_batch);
    for (int i = 0; i < b->n; i++) {
        if (b->tok[i] < 0 || b->tok[i] >= fw->m->hp.n_vocab)
            return mf_fail(err, MF_ERR_INPUT, "forward: token id %d out of range [0, %d)", b->tok[i], fw->m->hp.n_vocab);
        if (b->pos[i] < 0 || b->pos[i] >= fw->n_ctx)
            return mf_fail(err, MF_ERR_INPUT, "forward: position %d outside the context (%d)", b->pos[i], fw->n_ctx);
        if (b->seq[i] < 0 || b->seq[i] >= fw->n_seq)
            return mf_fail(err, MF_ERR_USAGE, "forward: sequence %d out of range [0, %d)", b->seq[i], fw->n_seq);
    }
    if (fw->be->forward) return fw->be->forward(fw->be, fw, b, logits, err);
    return forward_generic(fw, b, logits, err);
}

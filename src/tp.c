/* tp.c - see tp.h. */
#define _POSIX_C_SOURCE 200809L
#include "tp.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "quant.h"

static int blck(uint32_t type) {
    const qtype_traits *t = qtype_get(type);
    return t && t->blck ? (int)t->blck : 1;
}

int tp_parse_split(const char *arg, int n, float *split, mf_err *err) {
    const char *s = arg;
    for (int i = 0; i < n; i++) {
        char *end;
        const double v = strtod(s, &end);
        if (end == s || !(v > 0) || !isfinite(v))
            return mf_fail(err, MF_ERR_USAGE, "--tensor-split '%s': want %d positive numbers, comma separated", arg, n);
        split[i] = (float)v;
        s = end;
        if (i < n - 1) {
            if (*s != ',')
                return mf_fail(err, MF_ERR_USAGE, "--tensor-split '%s': want %d numbers (one a GPU), found %d", arg, n,
                               i + 1);
            s++;
        }
    }
    if (*s) return mf_fail(err, MF_ERR_USAGE, "--tensor-split '%s': want %d numbers (one a GPU), found more", arg, n);
    return MF_OK;
}

void tp_describe(const mf_tp_plan *p, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "kv heads");
    for (int r = 0; r < p->n; r++)
        o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "%s%d-%d", r ? " / " : " ", p->kv0[r], p->kv0[r + 1] - 1);
    o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, ", ffn rows");
    for (int r = 0; r < p->n; r++)
        o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, "%s%d-%d", r ? " / " : " ", p->ff0[r], p->ff0[r + 1] - 1);
}

/* Boundaries b[0] = 0 < b[1] < ... < b[n] = total in units of `unit`, rank r's share in
 * proportion to w[r], each at least one unit; -1 when total / unit < n. */
static int split_units(int total, int unit, int n, const float *w, int *b) {
    const int units = total / unit;
    if (units < n) return -1;
    double sum = 0, acc = 0;
    for (int r = 0; r < n; r++) sum += w ? w[r] : 1.0;
    b[0] = 0;
    for (int r = 1; r < n; r++) {
        acc += w ? w[r - 1] : 1.0;
        int u = (int)lround(acc / sum * units);
        if (u > units - (n - r)) u = units - (n - r); /* a unit for every rank after */
        if (u <= b[r - 1] / unit) u = b[r - 1] / unit + 1; /* and at least one for rank r - 1 */
        b[r] = u * unit;
    }
    b[n] = total;
    return 0;
}

int tp_plan(const mf_model *m, int n, const float *split, mf_tp_plan *p, mf_err *err) {
    const mf_hparams *hp = &m->hp;
    memset(p, 0, sizeof *p);
    if (n < 1 || n > MF_TP_MAX) return mf_fail(err, MF_ERR_USAGE, "--gpus %d: 1 to %d", n, MF_TP_MAX);
    if (n > hp->n_head_kv)
        return mf_fail(err, MF_ERR_USAGE, "--gpus %d: the model has %d kv heads; each GPU needs at least one", n,
                       hp->n_head_kv);
    if (n > 1 && m->desc.n_expert > 1)
        return mf_fail(err, MF_ERR_USAGE, "--gpus %d: a model of experts is not split over devices yet (one device)", n);
    p->n = n;
    const int G = hp->n_head / hp->n_head_kv;
    /* FFN rows in whole blocks of every layer's ffn.down (the column split) */
    int fu = 1;
    for (int l = 0; l < hp->n_layer; l++) {
        const int bd = blck(m->layers[l].ffn.down.type);
        if (bd > fu) fu = bd;
    }
    if (split_units(hp->n_head_kv, 1, n, split, p->kv0) || split_units(hp->n_ff, fu, n, split, p->ff0))
        return mf_fail(err, MF_ERR_USAGE, "--gpus %d: the FFN's %d rows do not make %d slices of whole %d-value blocks", n,
                       hp->n_ff, n, fu);
    /* wo's columns: rank r's query heads times head_dim, on wo's blocks */
    for (int l = 0; l < hp->n_layer; l++) {
        const int bo = blck(m->layers[l].wo.type);
        for (int r = 1; r < n; r++) {
            const int c = p->kv0[r] * G * hp->head_dim;
            if (c % bo)
                return mf_fail(err, MF_ERR_USAGE, "--gpus %d: layer %d's attn_output (%s) splits at column %d, inside a "
                               "block of %d values", n, l, qtype_name(m->layers[l].wo.type), c, bo);
        }
    }
    return MF_OK;
}

/* rows r0 .. r0+nr-1 of w (no copy) */
static mf_weight rows_of(const mf_weight *w, int64_t r0, int64_t nr) {
    mf_weight s = *w;
    if (!w->host) return s;
    const uint64_t rb = qtype_row_size(w->type, (uint64_t)w->cols);
    s.rows = nr;
    s.host = (const uint8_t *)w->host + (uint64_t)r0 * rb;
    s.nbytes = (uint64_t)nr * rb;
    s.dev = s.dev_plane = s.dev_mmf = NULL;
    return s;
}

/* columns c0 .. c0+nc-1 of every row of w, repacked into a new buffer (kept in s) */
static int cols_of(mf_tp_shard *s, const mf_weight *w, int64_t c0, int64_t nc, mf_weight *out, mf_err *err) {
    *out = *w;
    out->dev = out->dev_plane = out->dev_mmf = NULL;
    if (!w->host) return MF_OK;
    const int bs = blck(w->type);
    const uint64_t rb = qtype_row_size(w->type, (uint64_t)w->cols), sb = qtype_row_size(w->type, (uint64_t)nc);
    if (c0 % bs || nc % bs || !sb)
        return mf_fail(err, MF_ERR_USAGE, "tensor %s: columns %lld..%lld are not whole %d-value blocks", w->name,
                       (long long)c0, (long long)(c0 + nc - 1), bs);
    const uint64_t off = qtype_row_size(w->type, (uint64_t)c0);
    uint8_t *buf = malloc(sb * (uint64_t)w->rows);
    void **nb = realloc(s->bufs, sizeof(void *) * (size_t)(s->n_bufs + 1));
    if (!buf || !nb) {
        free(buf);
        if (nb) s->bufs = nb;
        return mf_fail(err, MF_ERR_IO, "tensor %s: out of memory for its %llu-byte slice", w->name,
                       (unsigned long long)(sb * (uint64_t)w->rows));
    }
    s->bufs = nb;
    s->bufs[s->n_bufs++] = buf;
    for (int64_t r = 0; r < w->rows; r++) memcpy(buf + (uint64_t)r * sb, (const uint8_t *)w->host + (uint64_t)r * rb + off, sb);
    out->cols = nc;
    out->host = buf;
    out->nbytes = sb * (uint64_t)w->rows;
    return MF_OK;
}

int tp_shard(const mf_model *m, const mf_tp_plan *p, int r, mf_tp_shard *s, mf_err *err) {
    memset(s, 0, sizeof *s);
    if (r < 0 || r >= p->n) return mf_fail(err, MF_ERR_USAGE, "tp_shard: rank %d of %d", r, p->n);
    const mf_hparams *hp = &m->hp;
    const int G = hp->n_head / hp->n_head_kv, hd = hp->head_dim;
    const int k0 = p->kv0[r], nk = p->kv0[r + 1] - k0, f0 = p->ff0[r], nf = p->ff0[r + 1] - f0;
    s->m = *m;
    s->m.hp.n_head_kv = nk;
    s->m.hp.n_head = nk * G;
    s->m.hp.n_ff = nf;
    s->m.layers = calloc((size_t)hp->n_layer, sizeof(mf_layer));
    if (!s->m.layers) return mf_fail(err, MF_ERR_IO, "tp_shard: out of memory");
    uint64_t bytes = 0; /* the shard's layer bytes less the whole model's */
    for (int l = 0; l < hp->n_layer; l++) {
        const mf_layer *L = &m->layers[l];
        mf_layer *D = &s->m.layers[l];
        *D = *L;
        D->wq = rows_of(&L->wq, (int64_t)k0 * G * hd, (int64_t)nk * G * hd);
        D->wk = rows_of(&L->wk, (int64_t)k0 * hd, (int64_t)nk * hd);
        D->wv = rows_of(&L->wv, (int64_t)k0 * hd, (int64_t)nk * hd);
        D->ffn.gate = rows_of(&L->ffn.gate, f0, nf);
        D->ffn.up = rows_of(&L->ffn.up, f0, nf);
        /* (the biases, 1-row tensors of the outputs: their slices are columns) */
        int rc = cols_of(s, &L->bq, (int64_t)k0 * G * hd, (int64_t)nk * G * hd, &D->bq, err);
        if (!rc) rc = cols_of(s, &L->bk, (int64_t)k0 * hd, (int64_t)nk * hd, &D->bk, err);
        if (!rc) rc = cols_of(s, &L->bv, (int64_t)k0 * hd, (int64_t)nk * hd, &D->bv, err);
        if (!rc) rc = cols_of(s, &L->wo, (int64_t)k0 * G * hd, (int64_t)nk * G * hd, &D->wo, err);
        if (!rc) rc = cols_of(s, &L->ffn.down, f0, nf, &D->ffn.down, err);
        if (rc) {
            tp_shard_free(s);
            return rc;
        }
        const mf_weight *ws[] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->ffn.gate, &D->ffn.up, &D->ffn.down};
        const mf_weight *wl[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn.gate, &L->ffn.up, &L->ffn.down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) bytes += ws[i]->nbytes - wl[i]->nbytes;
    }
    s->m.weight_bytes = m->weight_bytes + bytes; /* (unsigned wrap: the sum comes out right) */
    return MF_OK;
}

void tp_shard_free(mf_tp_shard *s) {
    for (int i = 0; i < s->n_bufs; i++) free(s->bufs[i]);
    free(s->bufs);
    free(s->m.layers);
    memset(s, 0, sizeof *s);
}

/* ---- the step: one thread a rank ---- */
/* The ranks start together or not at all: a rank missing from a reduce would leave the
 * others waiting in it, so every thread is created first and waits at the gate. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go; /* 0 waiting, 1 run, -1 give up */
} tp_gate;

typedef struct {
    tp_gate *gate;
    mf_forward *fw;
    const mf_batch *b;
    float *logits;
    int rc;
    mf_err err;
} tp_job;

static void *tp_run(void *arg) {
    tp_job *j = arg;
    pthread_mutex_lock(&j->gate->mu);
    while (j->gate->go == 0) pthread_cond_wait(&j->gate->cv, &j->gate->mu);
    const int go = j->gate->go;
    pthread_mutex_unlock(&j->gate->mu);
    if (go > 0) j->rc = forward_step(j->fw, j->b, j->logits, &j->err);
    return NULL;
}

static void gate_open(tp_gate *g, int go) {
    pthread_mutex_lock(&g->mu);
    g->go = go;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int tp_step(int n, mf_forward **fws, const mf_batch *b, float **logits, mf_err *err) {
    tp_job job[MF_TP_MAX];
    pthread_t th[MF_TP_MAX];
    tp_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    if (n < 1 || n > MF_TP_MAX) return mf_fail(err, MF_ERR_USAGE, "tp_step: %d ranks", n);
    for (int r = 0; r < n; r++) {
        memset(&job[r], 0, sizeof job[r]);
        job[r].gate = &gate, job[r].fw = fws[r], job[r].b = b, job[r].logits = logits[r];
    }
    /* ranks 1.. in threads of their own, rank 0 in this one */
    int started = 1;
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, tp_run, &job[started]) != 0) break;
    gate_open(&gate, started == n ? 1 : -1);
    if (started == n) tp_run(&job[0]);
    for (int r = 1; r < started; r++) pthread_join(th[r], NULL);
    if (started < n) return mf_fail(err, MF_ERR_NOMEM, "tp_step: cannot start the thread of rank %d", started);
    for (int r = 0; r < n; r++) {
        if (job[r].rc < 0) {
            if (err) *err = job[r].err;
            return job[r].rc;
        }
    }
    for (int r = 1; r < n; r++)
        if (job[r].rc != job[0].rc)
            return mf_fail(err, MF_ERR_DEVICE, "tp_step: rank %d returned %d logit rows, rank 0 %d", r, job[r].rc,
                           job[0].rc);
    return job[0].rc;
}

/* ---- the reduce on host memory ---- */
struct mf_tp_group {
    int n;
    pthread_barrier_t bar;
    float *x[MF_TP_MAX];   /* the rank's buffer of the reduce in flight */
    float *sum[MF_TP_MAX]; /* the rank's sum, then copied into x */
    int64_t cap[MF_TP_MAX];
    struct tp_rank { mf_tp_group *g; int r; } rank[MF_TP_MAX];
};

static void host_reduce(mf_forward *fw, float *x, int64_t n) {
    struct tp_rank *me = fw->reduce_ctx;
    mf_tp_group *g = me->g;
    const int r = me->r;
    if (n > g->cap[r]) {
        /* (each rank's own buffer, grown before anyone reads it: the first barrier below;
         * n is at most n_batch x n_embd, sizes the program chose) */
        g->sum[r] = mf_xrealloc(g->sum[r], sizeof(float) * (size_t)n);
        g->cap[r] = n;
    }
    g->x[r] = x;
    pthread_barrier_wait(&g->bar); /* every rank's partial is in place */
    float *s = g->sum[r];
    memcpy(s, g->x[0], sizeof(float) * (size_t)n);
    for (int q = 1; q < g->n; q++) {
        const float *y = g->x[q];
        for (int64_t i = 0; i < n; i++) s[i] += y[i];
    }
    pthread_barrier_wait(&g->bar); /* every rank has read every partial */
    memcpy(x, s, sizeof(float) * (size_t)n);
}

mf_tp_group *tp_host_group_new(int n, mf_forward **fws) {
    if (n < 1 || n > MF_TP_MAX) return NULL;
    mf_tp_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->n = n;
    if (pthread_barrier_init(&g->bar, NULL, (unsigned)n) != 0) {
        free(g);
        return NULL;
    }
    for (int r = 0; r < n; r++) {
        g->rank[r].g = g, g->rank[r].r = r;
        fws[r]->reduce = host_reduce;
        fws[r]->reduce_ctx = &g->rank[r];
    }
    return g;
}

void tp_group_free(mf_tp_group *g) {
    if (!g) return;
    pthread_barrier_destroy(&g->bar);
    for (int r = 0; r < g->n; r++) free(g->sum[r]);
    free(g);
}

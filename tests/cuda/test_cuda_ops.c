/* test_cuda_ops.c - every CUDA op against the CPU reference backend's op
 * (cpu_backend_new with MINFER_CPU_DISABLE=avx2: scalar, double accumulation) on fresh
 * random inputs, including tail shapes; outputs are poisoned (NaN) first so an
 * unwritten element fails. Error = ||gpu - ref|| / ||ref||.
 *
 * Tolerances: the q8-dp4a GEMV quantizes activations to 8 bits (~0.5% per dot),
 * the prefill GEMM rounds both operands to f16 (~5e-4), the KV cache is f16.
 * Under MINFER_CUDA_DP4A=0 the GEMV is f32 and the bound tightens. */
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "backend.h"
#include "cuda/backend_cuda.h"
#include "model.h"
#include "quant.h"
#include "util.h"

static mf_rng rng;
static int dp4a_on;

static float *rand_vec(size_t n, float scale) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = mf_rng_normal(&rng) * scale;
    return v;
}

static double nerr(const float *a, const float *ref, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(a[i] == a[i]) || a[i] - a[i] != 0.0f) return 1e30; /* NaN/Inf: unwritten or broken */
        d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* ---- two backends over one fake model (hyperparameters only) ---- */
typedef struct env {
    mf_model m;
    mf_backend *cpu, *gpu;
} env;

static int env_init(env *e, int n_embd, int n_ff, int n_head, int n_kv, int hd, int n_ctx, int n_seq, int n_batch) {
    memset(e, 0, sizeof *e);
    mf_hparams *hp = &e->m.hp;
    hp->arch = MF_ARCH_LLAMA;
    snprintf(hp->arch_name, sizeof hp->arch_name, "llama");
    hp->n_vocab = 1000;
    hp->n_embd = n_embd;
    hp->n_layer = 1;
    hp->n_ff = n_ff;
    hp->n_head = n_head;
    hp->n_head_kv = n_kv;
    hp->head_dim = hd;
    hp->rope_dim = hd;
    hp->n_ctx_train = n_ctx;
    hp->norm_eps = 1e-5f;
    hp->rope_base = 10000.0f;
    e->m.layers = calloc(1, sizeof(mf_layer));
    mf_err err = {{0}};
    e->cpu = cpu_backend_new(mf_env_int("MINFER_TEST_THREADS", 4), &err);
    e->gpu = cuda_backend_new(0, &err);
    if (!e->cpu || !e->gpu) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return -1;
    }
    if (e->cpu->init(e->cpu, &e->m, n_ctx, n_seq, n_batch, &err) ||
        e->gpu->init(e->gpu, &e->m, n_ctx, n_seq, n_batch, &err)) {
        fprintf(stderr, "init: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void env_free(env *e) {
    if (e->cpu) e->cpu->destroy(e->cpu);
    if (e->gpu) e->gpu->destroy(e->gpu);
    free(e->m.layers);
}

static float *dev_from(env *e, const float *h, size_t n) {
    float *d = e->gpu->alloc(e->gpu, n * sizeof(float));
    cuda_backend_h2d(e->gpu, d, h, n * sizeof(float));
    return d;
}
static float *dev_poison(env *e, size_t n) {
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    float *d = dev_from(e, h, n);
    free(h);
    return d;
}
static float *host_of(env *e, const float *d, size_t n) {
    float *h = malloc(n * sizeof(float));
    e->gpu->download(e->gpu, h, d, n * sizeof(float));
    return h;
}
static int gpu_ok(env *e, const char *what) {
    mf_err err = {{0}};
    int rc = cuda_backend_status(e->gpu, &err);
    CHECK(rc == 0, "%s: %s", what, err.msg);
    return rc == 0;
}

/* A random weight [rows][cols] of type t (f32 master quantized by the reference). */
static mf_weight make_weight(uint32_t t, int64_t rows, int64_t cols, float scale) {
    mf_weight w;
    memset(&w, 0, sizeof w);
    w.type = t;
    w.rows = rows;
    w.cols = cols;
    w.name = "test.weight";
    const uint64_t rb = qtype_row_size(t, (uint64_t)cols);
    uint8_t *buf = malloc(rb * rows);
    float *src = rand_vec((size_t)cols, scale);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) src[c] = mf_rng_normal(&rng) * scale;
        quant_quantize_row(t, src, buf + rb * r, cols);
    }
    free(src);
    w.host = buf;
    w.nbytes = rb * rows;
    return w;
}

/* ------------------------------------------------------------------------- */
/* One matmul per weight in w[0..nm) on the same input (nm = 3: the GEMV group
 * path), against the reference. */
static void run_matmul(env *e, mf_weight *w, int nm, const mf_weight *bias, int n) {
    const uint32_t t = w[0].type;
    const int K = (int)w[0].cols;
    float *x = rand_vec((size_t)n * K, 1.0f);
    float *xd = dev_from(e, x, (size_t)n * K);
    float *od[3], *ref[3];
    for (int i = 0; i < nm; i++) {
        const size_t no = (size_t)n * w[i].rows;
        ref[i] = malloc(no * sizeof(float));
        e->cpu->ops->matmul(e->cpu, ref[i], x, &w[i], bias, n);
        od[i] = dev_poison(e, no);
    }
    for (int i = 0; i < nm; i++) e->gpu->ops->matmul(e->gpu, od[i], xd, &w[i], bias, n);
    for (int i = 0; i < nm; i++) {
        const size_t no = (size_t)n * w[i].rows;
        float *got = host_of(e, od[i], no);
        double er = nerr(got, ref[i], no);
        const int gemm = n > 8;
        const int q8 = !gemm && dp4a_on && t != QTYPE_F32 && t != QTYPE_F16 && t != QTYPE_BF16;
        const double tol = gemm ? 4e-3 : q8 ? 2e-2 : 2e-5;
        CHECK(er < tol, "matmul %s rows %d K %d n %d bias %d group %d: err %.3g (tol %.1g)", qtype_name(w[i].type),
              (int)w[i].rows, K, n, bias != NULL, nm, er, tol);
        free(got);
        free(ref[i]);
        e->gpu->release(e->gpu, od[i]);
    }
    gpu_ok(e, "matmul");
    e->gpu->release(e->gpu, xd);
    free(x);
}

/* Weights of type t, rows x K (nm of them, rows + 3i), tested at each n of ns. */
static void test_matmul(env *e, uint32_t t, int rows, int K, const int *ns, int nn, int group) {
    mf_err err = {{0}};
    const int nm = group ? 3 : 1;
    mf_weight w[3], bias = make_weight(QTYPE_F32, 1, rows + 6, 0.5f);
    CHECK(cuda_backend_upload(e->gpu, &bias, &err) == 0, "upload bias: %s", err.msg);
    for (int i = 0; i < nm; i++) {
        w[i] = make_weight(t, rows + i * 3, K, 0.05f);
        CHECK(cuda_backend_upload(e->gpu, &w[i], &err) == 0, "upload %s: %s", qtype_name(t), err.msg);
    }
    for (int i = 0; i < nn; i++) run_matmul(e, w, nm, i % 3 == 0 ? &bias : NULL, ns[i]);
    for (int i = 0; i < nm; i++) free((void *)w[i].host);
    free((void *)bias.host);
}

/* q, k of type t1 and v of type t2 on one input, as forward.c issues them (the
 * attention projections of a q4_k_m layer whose attn_v is q6_K): one launch with
 * MINFER_CUDA_GEMV_MIXED (xstm) for one column, else one per type. */
static void test_matmul_mixed(env *e, uint32_t t1, uint32_t t2, int rows, int K, const int *ns, int nn) {
    mf_err err = {{0}};
    mf_weight w[3], bias = make_weight(QTYPE_F32, 1, rows + 6, 0.5f);
    CHECK(cuda_backend_upload(e->gpu, &bias, &err) == 0, "upload bias: %s", err.msg);
    for (int i = 0; i < 3; i++) {
        w[i] = make_weight(i < 2 ? t1 : t2, rows + i * 3, K, 0.05f);
        CHECK(cuda_backend_upload(e->gpu, &w[i], &err) == 0, "upload %s: %s", qtype_name(w[i].type), err.msg);
    }
    for (int i = 0; i < nn; i++) run_matmul(e, w, 3, i % 2 ? &bias : NULL, ns[i]);
    for (int i = 0; i < 3; i++) free((void *)w[i].host);
    free((void *)bias.host);
}

/* The one-token attention-output pattern: y = W1 a; x += y; xb = rmsnorm(x) * g;
 * o = W2 xb (the add folded into W1's GEMV, or with MINFER_CUDA_ADD_GEMV=0 held into
 * the norm kernel), against the CPU. */
static void test_chain(env *e, uint32_t t, int dim, int k1, int r2) {
    mf_err err = {{0}};
    mf_weight w1 = make_weight(t, dim, k1, 0.05f), w2 = make_weight(t, r2, dim, 0.05f);
    mf_weight g = make_weight(QTYPE_F32, 1, dim, 1.0f);
    CHECK(cuda_backend_upload(e->gpu, &w1, &err) == 0 && cuda_backend_upload(e->gpu, &w2, &err) == 0 &&
              cuda_backend_upload(e->gpu, &g, &err) == 0,
          "upload chain weights: %s", err.msg);
    float *a = rand_vec((size_t)k1, 1.0f), *x = rand_vec((size_t)dim, 1.0f);
    float *y = malloc(sizeof(float) * dim), *xb = malloc(sizeof(float) * dim), *o = malloc(sizeof(float) * r2);
    e->cpu->ops->matmul(e->cpu, y, a, &w1, NULL, 1);
    float *xd = dev_from(e, x, (size_t)dim), *ad = dev_from(e, a, (size_t)k1);
    e->cpu->ops->add(e->cpu, x, y, dim);
    e->cpu->ops->rmsnorm(e->cpu, xb, x, &g, 1, dim, 1e-5f);
    e->cpu->ops->matmul(e->cpu, o, xb, &w2, NULL, 1);
    /* one buffer for y and xb, as forward.c has it: the GPU then folds the add into
     * the first GEMV's store (MINFER_CUDA_ADD_GEMV) and never writes y */
    float *xbd = dev_poison(e, (size_t)dim), *od = dev_poison(e, (size_t)r2);
    e->gpu->ops->matmul(e->gpu, xbd, ad, &w1, NULL, 1);
    e->gpu->ops->add(e->gpu, xd, xbd, dim);
    e->gpu->ops->rmsnorm(e->gpu, xbd, xd, &g, 1, dim, 1e-5f);
    e->gpu->ops->matmul(e->gpu, od, xbd, &w2, NULL, 1);
    float *go = host_of(e, od, (size_t)r2), *gx = host_of(e, xd, (size_t)dim), *gxb = host_of(e, xbd, (size_t)dim);
    const double eo = nerr(go, o, (size_t)r2), ex = nerr(gx, x, (size_t)dim), exb = nerr(gxb, xb, (size_t)dim);
    const double tol = dp4a_on ? 2e-2 : 2e-5;
    CHECK(eo < tol && ex < tol && exb < tol, "chain %s dim %d k1 %d rows %d: err out %.3g x %.3g xb %.3g (tol %.1g)",
          qtype_name(t), dim, k1, r2, eo, ex, exb, tol);
    gpu_ok(e, "chain");
    e->gpu->release(e->gpu, xd);
    e->gpu->release(e->gpu, ad);
    e->gpu->release(e->gpu, xbd);
    e->gpu->release(e->gpu, od);
    free(a); free(x); free(y); free(xb); free(o); free(go); free(gx); free(gxb);
    free((void *)w1.host); free((void *)w2.host); free((void *)g.host);
}

/* The one-token FFN as forward.c issues it: g = Wg xb (+ bias), u = Wu xb,
 * g = silu(g) * u (in place), o = Wd g (gate and up stacked into one launch, the
 * swiglu writing the q8 the down GEMV reads), against the CPU; g (holding the
 * swiglu output) and o are compared. */
static void test_ffn(env *e, uint32_t t, int dim, int ff, int with_bias) {
    mf_err err = {{0}};
    mf_weight wg = make_weight(t, ff, dim, 0.05f), wu = make_weight(t, ff, dim, 0.05f);
    mf_weight wd = make_weight(t, dim, ff, 0.05f), bias = make_weight(QTYPE_F32, 1, ff, 0.5f);
    CHECK(cuda_backend_upload(e->gpu, &wg, &err) == 0 && cuda_backend_upload(e->gpu, &wu, &err) == 0 &&
              cuda_backend_upload(e->gpu, &wd, &err) == 0 && cuda_backend_upload(e->gpu, &bias, &err) == 0,
          "upload ffn weights: %s", err.msg);
    const mf_weight *bg = with_bias ? &bias : NULL;
    float *xb = rand_vec((size_t)dim, 1.0f);
    float *g = malloc(sizeof(float) * ff), *u = malloc(sizeof(float) * ff), *o = malloc(sizeof(float) * dim);
    e->cpu->ops->matmul(e->cpu, g, xb, &wg, bg, 1);
    e->cpu->ops->matmul(e->cpu, u, xb, &wu, NULL, 1);
    e->cpu->ops->swiglu(e->cpu, g, g, u, ff);
    e->cpu->ops->matmul(e->cpu, o, g, &wd, NULL, 1);
    float *xbd = dev_from(e, xb, (size_t)dim);
    float *gd = dev_poison(e, (size_t)ff), *ud = dev_poison(e, (size_t)ff), *od = dev_poison(e, (size_t)dim);
    e->gpu->ops->matmul(e->gpu, gd, xbd, &wg, bg, 1);
    e->gpu->ops->matmul(e->gpu, ud, xbd, &wu, NULL, 1);
    e->gpu->ops->swiglu(e->gpu, gd, gd, ud, ff);
    e->gpu->ops->matmul(e->gpu, od, gd, &wd, NULL, 1);
    float *go = host_of(e, od, (size_t)dim), *gg = host_of(e, gd, (size_t)ff);
    const double eo = nerr(go, o, (size_t)dim), eg = nerr(gg, g, (size_t)ff);
    const double tol = dp4a_on ? 2e-2 : 2e-5;
    CHECK(eo < tol && eg < tol, "ffn %s dim %d ff %d bias %d: err swiglu %.3g out %.3g (tol %.1g)", qtype_name(t),
          dim, ff, with_bias, eg, eo, tol);
    gpu_ok(e, "ffn");
    /* The same on the GPU twice more, into a separate output: once with gate and up as
     * two launches (an empty get_rows between them flushes the held GEMV, so they do not
     * stack and no SwiGLU joins them), once as above (stacked; the SwiGLU in the GEMV's
     * store where xsg takes it, mmv.cuh). Every path sums each row the same way, so gate,
     * up, the SwiGLU and the down projection must agree bit for bit. */
    float *d2[4], *d3[4], *h2[4], *h3[4]; /* gate, up, out, down */
    for (int k = 0; k < 4; k++) {
        d2[k] = dev_poison(e, (size_t)(k == 3 ? dim : ff));
        d3[k] = dev_poison(e, (size_t)(k == 3 ? dim : ff));
    }
    e->gpu->ops->matmul(e->gpu, d2[0], xbd, &wg, bg, 1);
    e->gpu->ops->get_rows(e->gpu, d2[1], d2[1], NULL, 0, 1);
    e->gpu->ops->matmul(e->gpu, d2[1], xbd, &wu, NULL, 1);
    e->gpu->ops->swiglu(e->gpu, d2[2], d2[0], d2[1], ff);
    e->gpu->ops->matmul(e->gpu, d2[3], d2[2], &wd, NULL, 1);
    e->gpu->ops->matmul(e->gpu, d3[0], xbd, &wg, bg, 1);
    e->gpu->ops->matmul(e->gpu, d3[1], xbd, &wu, NULL, 1);
    e->gpu->ops->swiglu(e->gpu, d3[2], d3[0], d3[1], ff);
    e->gpu->ops->matmul(e->gpu, d3[3], d3[2], &wd, NULL, 1);
    int same = 1;
    for (int k = 0; k < 4; k++) {
        const size_t nk = (size_t)(k == 3 ? dim : ff);
        h2[k] = host_of(e, d2[k], nk);
        h3[k] = host_of(e, d3[k], nk);
        if (memcmp(h2[k], h3[k], nk * sizeof(float))) same = 0;
    }
    CHECK(same && !memcmp(h3[2], gg, sizeof(float) * ff) && !memcmp(h3[3], go, sizeof(float) * dim),
          "ffn %s dim %d ff %d bias %d: gate, up, swiglu and down identical with gate/up in one launch and in two",
          qtype_name(t), dim, ff, with_bias);
    gpu_ok(e, "ffn (two ways)");
    for (int k = 0; k < 4; k++) {
        e->gpu->release(e->gpu, d2[k]);
        e->gpu->release(e->gpu, d3[k]);
        free(h2[k]);
        free(h3[k]);
    }
    e->gpu->release(e->gpu, xbd);
    e->gpu->release(e->gpu, gd);
    e->gpu->release(e->gpu, ud);
    e->gpu->release(e->gpu, od);
    free(xb); free(g); free(u); free(o); free(go); free(gg);
    free((void *)wg.host); free((void *)wu.host); free((void *)wd.host); free((void *)bias.host);
}

static void test_embed(env *e, uint32_t t, int vocab, int dim, int n) {
    mf_err err = {{0}};
    mf_weight w = make_weight(t, vocab, dim, 1.0f);
    CHECK(cuda_backend_upload(e->gpu, &w, &err) == 0, "upload: %s", err.msg);
    int32_t tok[64], pos[64], seq[64];
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(mf_rng_u64(&rng) % vocab);
        pos[i] = i;
        seq[i] = 0;
    }
    tok[n - 1] = vocab - 1;  /* last row of the table */
    mf_batch b = {n, tok, pos, seq, NULL};
    float *ref = malloc(sizeof(float) * n * dim);
    e->cpu->ops->embed(e->cpu, ref, &w, &b);
    float *od = dev_poison(e, (size_t)n * dim);
    e->gpu->ops->embed(e->gpu, od, &w, &b);
    float *got = host_of(e, od, (size_t)n * dim);
    double er = nerr(got, ref, (size_t)n * dim);
    CHECK(er < 1e-6, "embed %s dim %d n %d: err %.3g", qtype_name(t), dim, n, er);
    gpu_ok(e, "embed");
    e->gpu->release(e->gpu, od);
    free(got);
    free(ref);
    free((void *)w.host);
}

static void test_norm(env *e, int n, int dim, int with_add) {
    mf_err err = {{0}};
    mf_weight w = make_weight(QTYPE_F32, 1, dim, 1.0f);
    CHECK(cuda_backend_upload(e->gpu, &w, &err) == 0, "upload: %s", err.msg);
    float *x = rand_vec((size_t)n * dim, 3.0f), *y = rand_vec((size_t)n * dim, 1.0f);
    float *xr = malloc(sizeof(float) * n * dim), *ref = malloc(sizeof(float) * n * dim);
    memcpy(xr, x, sizeof(float) * n * dim);
    if (with_add) e->cpu->ops->add(e->cpu, xr, y, (int64_t)n * dim);
    e->cpu->ops->rmsnorm(e->cpu, ref, xr, &w, n, dim, 1e-5f);
    float *xd = dev_from(e, x, (size_t)n * dim), *yd = dev_from(e, y, (size_t)n * dim);
    float *od = dev_poison(e, (size_t)n * dim);
    if (with_add) e->gpu->ops->add(e->gpu, xd, yd, (int64_t)n * dim);
    e->gpu->ops->rmsnorm(e->gpu, od, xd, &w, n, dim, 1e-5f);
    float *got = host_of(e, od, (size_t)n * dim), *gx = host_of(e, xd, (size_t)n * dim);
    double er = nerr(got, ref, (size_t)n * dim), ex = nerr(gx, xr, (size_t)n * dim);
    CHECK(er < 1e-6 && ex < 1e-7, "rmsnorm n %d dim %d add %d: err %.3g x err %.3g", n, dim, with_add, er, ex);
    gpu_ok(e, "rmsnorm");
    e->gpu->release(e->gpu, od);
    e->gpu->release(e->gpu, xd);
    e->gpu->release(e->gpu, yd);
    free(x); free(y); free(xr); free(ref); free(got); free(gx);
    free((void *)w.host);
}

static void test_rope(env *e, int n, int n_heads, int hd, int rope_dim, int mode, int maxpos) {
    const size_t len = (size_t)n * n_heads * hd;
    float *x = rand_vec(len, 1.0f), *xr = malloc(len * sizeof(float));
    memcpy(xr, x, len * sizeof(float));
    int32_t tok[64] = {0}, pos[64], seq[64] = {0};
    for (int i = 0; i < n; i++) pos[i] = (int32_t)(mf_rng_u64(&rng) % (maxpos + 1));
    mf_batch b = {n, tok, pos, seq, NULL};
    e->cpu->ops->rope(e->cpu, xr, &b, n_heads, hd, rope_dim, 10000.0f, mode);
    float *xd = dev_from(e, x, len);
    e->gpu->ops->rope(e->gpu, xd, &b, n_heads, hd, rope_dim, 10000.0f, mode);
    float *got = host_of(e, xd, len);
    double er = nerr(got, xr, len);
    CHECK(er < 1e-6, "rope n %d heads %d hd %d dim %d mode %d: err %.3g", n, n_heads, hd, rope_dim, mode, er);
    gpu_ok(e, "rope");
    e->gpu->release(e->gpu, xd);
    free(x); free(xr); free(got);
}

static void test_elementwise(env *e, int64_t n) {
    float *g = rand_vec(n, 2.0f), *u = rand_vec(n, 1.0f);
    float *ref = malloc(n * sizeof(float));
    e->cpu->ops->swiglu(e->cpu, ref, g, u, n);
    float *gd = dev_from(e, g, n), *ud = dev_from(e, u, n), *od = dev_poison(e, n);
    e->gpu->ops->swiglu(e->gpu, od, gd, ud, n);
    float *got = host_of(e, od, n);
    double er = nerr(got, ref, n);
    CHECK(er < 1e-6, "swiglu n %lld: err %.3g", (long long)n, er);
    free(got);
    /* in place, like forward.c */
    e->gpu->ops->swiglu(e->gpu, gd, gd, ud, n);
    got = host_of(e, gd, n);
    er = nerr(got, ref, n);
    CHECK(er < 1e-6, "swiglu in place n %lld: err %.3g", (long long)n, er);
    free(got);
    /* add */
    memcpy(ref, g, n * sizeof(float));
    e->cpu->ops->add(e->cpu, ref, u, n);
    cuda_backend_h2d(e->gpu, gd, g, n * sizeof(float));
    e->gpu->ops->add(e->gpu, gd, ud, n);
    got = host_of(e, gd, n);
    er = nerr(got, ref, n);
    CHECK(er == 0, "add n %lld: err %.3g", (long long)n, er);
    free(got);
    gpu_ok(e, "elementwise");
    e->gpu->release(e->gpu, gd);
    e->gpu->release(e->gpu, ud);
    e->gpu->release(e->gpu, od);
    free(g); free(u); free(ref);
}

static void test_get_rows(env *e, int rows, int width, int n_idx) {
    float *src = rand_vec((size_t)rows * width, 1.0f);
    int32_t idx[64];
    for (int i = 0; i < n_idx; i++) idx[i] = (int32_t)(mf_rng_u64(&rng) % rows);
    float *ref = malloc(sizeof(float) * n_idx * width);
    e->cpu->ops->get_rows(e->cpu, ref, src, idx, n_idx, width);
    float *sd = dev_from(e, src, (size_t)rows * width), *od = dev_poison(e, (size_t)n_idx * width);
    e->gpu->ops->get_rows(e->gpu, od, sd, idx, n_idx, width);
    float *got = host_of(e, od, (size_t)n_idx * width);
    CHECK(nerr(got, ref, (size_t)n_idx * width) == 0, "get_rows %d x %d", n_idx, width);
    gpu_ok(e, "get_rows");
    e->gpu->release(e->gpu, sd);
    e->gpu->release(e->gpu, od);
    free(src); free(ref); free(got);
}

/* One attention batch of n tokens (pos, seq set by the caller) with fresh random
 * q/k/v through both backends (RoPE first when with_rope, as forward.c does); returns
 * the normalised error of the outputs. */
struct attn_io {
    env *e;
    int n_head, n_kv, hd;
    float *q, *k, *v, *ref, *qd, *kd, *vd, *od;
    int32_t *tok, *pos, *seq;
};
static double attn_batch(struct attn_io *io, int n, int with_rope) {
    env *e = io->e;
    const int qd = io->n_head * io->hd, kvd = io->n_kv * io->hd;
    for (int i = 0; i < n * qd; i++) io->q[i] = mf_rng_normal(&rng);
    for (int i = 0; i < n * kvd; i++) io->k[i] = mf_rng_normal(&rng), io->v[i] = mf_rng_normal(&rng);
    mf_batch b = {n, io->tok, io->pos, io->seq, NULL};
    cuda_backend_h2d(e->gpu, io->qd, io->q, sizeof(float) * n * qd);
    cuda_backend_h2d(e->gpu, io->kd, io->k, sizeof(float) * n * kvd);
    cuda_backend_h2d(e->gpu, io->vd, io->v, sizeof(float) * n * kvd);
    float *poison = malloc(sizeof(float) * n * qd);
    for (int i = 0; i < n * qd; i++) poison[i] = NAN;
    cuda_backend_h2d(e->gpu, io->od, poison, sizeof(float) * n * qd);
    free(poison);
    if (with_rope) {
        /* forward.c's sequence: rope(q), rope(k), attention (fused on the GPU) */
        e->cpu->ops->rope(e->cpu, io->q, &b, io->n_head, io->hd, io->hd, 10000.0f, MF_ROPE_NORM);
        e->cpu->ops->rope(e->cpu, io->k, &b, io->n_kv, io->hd, io->hd, 10000.0f, MF_ROPE_NORM);
        e->gpu->ops->rope(e->gpu, io->qd, &b, io->n_head, io->hd, io->hd, 10000.0f, MF_ROPE_NORM);
        e->gpu->ops->rope(e->gpu, io->kd, &b, io->n_kv, io->hd, io->hd, 10000.0f, MF_ROPE_NORM);
    }
    e->cpu->ops->attention(e->cpu, io->ref, io->q, io->k, io->v, 0, &b);
    e->gpu->ops->attention(e->gpu, io->od, io->qd, io->kd, io->vd, 0, &b);
    float *got = host_of(e, io->od, (size_t)n * qd);
    const double er = nerr(got, io->ref, (size_t)n * qd);
    free(got);
    return er;
}

/* Attention: fills the cache of each sequence with start[s] positions of random k/v
 * (prefill chunks of up to n_batch through the op, checked too), then runs test
 * batches on that prefix. One sequence: a batch of cnt[v] tokens at start[0] for each
 * v < nvar, all on the one prefix (each batch rewrites the positions it attends to
 * before reading them: a token at p reads positions <= p only), so the CPU reference
 * fills a 3000-position prefix once, not once per batch. Several sequences: one batch
 * of cnt[s] tokens per sequence (sequence 0's first); nvar must be 1. */
static void test_attention(int n_head, int n_kv, int hd, int n_seq, const int *start, const int *cnt, int nvar,
                           int with_rope) {
    env e;
    const int n_ctx = 4096, n_batch = 512;
    if (env_init(&e, 256, 256, n_head, n_kv, hd, n_ctx, n_seq, n_batch)) {
        CHECK(0, "attention env");
        env_free(&e);
        return;
    }
    const int qd = n_head * hd, kvd = n_kv * hd;
    struct attn_io io = {.e = &e, .n_head = n_head, .n_kv = n_kv, .hd = hd};
    io.q = malloc(sizeof(float) * n_batch * qd);
    io.k = malloc(sizeof(float) * n_batch * kvd);
    io.v = malloc(sizeof(float) * n_batch * kvd);
    io.ref = malloc(sizeof(float) * n_batch * qd);
    io.qd = e.gpu->alloc(e.gpu, sizeof(float) * n_batch * qd);
    io.kd = e.gpu->alloc(e.gpu, sizeof(float) * n_batch * kvd);
    io.vd = e.gpu->alloc(e.gpu, sizeof(float) * n_batch * kvd);
    io.od = e.gpu->alloc(e.gpu, sizeof(float) * n_batch * qd);
    io.tok = calloc(n_batch, 4);
    io.pos = calloc(n_batch, 4);
    io.seq = calloc(n_batch, 4);
    const char *desc = n_seq > 1 ? " (+seq 1)" : "";
    /* the prefixes, in chunks */
    double worst = 0;
    int s = 0, p = 0;
    for (;;) {
        int n = 0;
        while (n < n_batch && s < n_seq) {
            if (p >= start[s]) {
                s++;
                p = 0;
                continue;
            }
            io.pos[n] = p++;
            io.seq[n] = s;
            n++;
        }
        if (n == 0) break;
        const double er = attn_batch(&io, n, 0);
        if (er > worst) worst = er;
    }
    int any_prefix = 0;
    for (int t = 0; t < n_seq; t++) any_prefix |= start[t] > 0;
    if (any_prefix)
        CHECK(worst < 4e-3, "attention heads %d/%d hd %d seqs %d: prefix of %d%s: err %.3g", n_head, n_kv, hd, n_seq,
              start[0], desc, worst);
    for (int v = 0; v < nvar; v++) {
        int n = 0;
        for (int t = 0; t < n_seq; t++) {
            const int c = n_seq == 1 ? cnt[v] : cnt[t];
            for (int i = 0; i < c; i++) {
                io.pos[n] = start[t] + i;
                io.seq[n] = t;
                n++;
            }
        }
        const double er = attn_batch(&io, n, with_rope);
        CHECK(er < 4e-3, "attention heads %d/%d hd %d seqs %d start %d n %d%s%s: err %.3g", n_head, n_kv, hd, n_seq,
              start[0], n_seq == 1 ? cnt[v] : cnt[0], desc, with_rope ? " rope" : "", er);
    }
    gpu_ok(&e, "attention");
    free(io.q); free(io.k); free(io.v); free(io.ref); free(io.tok); free(io.pos); free(io.seq);
    env_free(&e);
}

int main(void) {
    setenv("MINFER_CPU_DISABLE", "avx2", 1);  /* the CPU reference: scalar, double accumulation */
    mf_rng_seed(&rng, (uint64_t)mf_env_int("MINFER_TEST_SEED", 20261129));
    dp4a_on = mf_env_int("MINFER_CUDA_DP4A", 1);
    /* MINFER_TEST_OPS=matmul: the matmul checks only (the GEMV variants' runs);
     * =attention: the attention checks only (the attention switches' runs);
     * =ffn: the one-token FFN checks only (a quick run after a change to them) */
    const char *only = getenv("MINFER_TEST_OPS");
    const int do_matmul = !only || !strcmp(only, "matmul"), do_attn = !only || !strcmp(only, "attention");
    const int do_ffn = do_matmul || (only && !strcmp(only, "ffn"));
    if (only && !do_ffn && !do_attn) {
        CHECK(0, "MINFER_TEST_OPS=%s: expected matmul, attention or ffn", only);
        return test_summary("cuda_ops");
    }
    if (!cuda_device_count()) {
        SKIP("no CUDA device");
        return test_summary("cuda_ops");
    }
    env e;
    if (env_init(&e, 4096, 11008, 32, 8, 128, 1024, 1, 256)) {
        CHECK(0, "env");
        return test_summary("cuda_ops");
    }
    /* GEMV (n <= 8) and GEMM (n > 8) for every weight type; tails in rows and n */
    const uint32_t types[] = {QTYPE_F32, QTYPE_F16, QTYPE_BF16, QTYPE_Q4_0, QTYPE_Q4_1, QTYPE_Q5_0,
                              QTYPE_Q5_1, QTYPE_Q8_0, QTYPE_Q4_K, QTYPE_Q5_K, QTYPE_Q6_K};
    for (size_t ti = 0; do_matmul && ti < MF_ARRAY_LEN(types); ti++) {
        const uint32_t t = types[ti];
        const int kq = qtype_get(t)->blck == 256;
        const int ns[] = {1, 2, 3, 5, 8, 9, 13, 64}, n1[] = {1, 13}, ng[] = {1, 4}, nm[] = {130};
        test_matmul(&e, t, 37, kq ? 256 : 96, ns, 8, 0);
        test_matmul(&e, t, 37, kq ? 2816 : 544, ns, 8, 0);
        test_matmul(&e, t, 300, 4096, ns, 8, 0);
        test_matmul(&e, t, 300, 11008, n1, 2, 0);
        test_matmul(&e, t, 129, kq ? 2816 : 544, ng, 2, 1); /* stacked q/k/v-style group */
        test_matmul(&e, t, 257, 4096, nm, 1, 0);            /* GEMM with M and N tails */
        /* one column over many rows: the persistent GEMVs (xs, xst, pp) give each
         * warp several rows, and xst refills its ring slots (16 slots per warp at
         * these widths, ~1056 warps) */
        if (t != QTYPE_F32 && t != QTYPE_F16 && t != QTYPE_BF16) test_matmul(&e, t, 17000, kq ? 256 : 96, n1, 1, 0);
        /* 11008-wide rows (xs2, or pp with MINFER_CUDA_GEMV_WIDE=0) over enough rows that
         * every warp pair takes several */
        if (t == QTYPE_Q4_K || t == QTYPE_Q6_K) test_matmul(&e, t, 1600, 11008, n1, 1, 0);
    }
    if (do_ffn) {
        /* the one-token FFN: gate+up of 50 MB on xst (sm_90) or, with the SwiGLU in its
         * store, xsg; down (25-37 MB) on xst2 (or xs2 for q4_K, pp for q6_K); 8.6 MB on xs;
         * a bias on gate; ff 96 (down 96 wide) */
        test_ffn(&e, QTYPE_Q4_K, 4096, 11008, 0);
        test_ffn(&e, QTYPE_Q6_K, 4096, 11008, 0);
        test_ffn(&e, QTYPE_Q5_K, 4096, 5632, 0);
        test_ffn(&e, QTYPE_Q4_K, 4096, 1024, 0);
        test_ffn(&e, QTYPE_Q8_0, 2048, 5632, 1);
        test_ffn(&e, QTYPE_Q8_0, 256, 96, 1);
    }
    if (do_matmul) {
        /* q, k q4_K (or q5_K) with v q6_K: 33 MB (xstm by size) and 1.2 MB (xstm only
         * with MINFER_CUDA_GEMV=4), one and two columns (two: a launch per type) */
        const int nmx[] = {1, 2, 1};
        test_matmul_mixed(&e, QTYPE_Q4_K, QTYPE_Q6_K, 4096, 4096, nmx, 3);
        test_matmul_mixed(&e, QTYPE_Q5_K, QTYPE_Q6_K, 4096, 4096, nmx, 2);
        test_matmul_mixed(&e, QTYPE_Q4_K, QTYPE_Q6_K, 300, 2048, nmx, 3);
        /* the one-token add/norm chain; k1 11008 puts the first GEMV on xst2 (or xs2,
         * pp), 4096 on xst (9.4-17.8 MB, from the 8 MB xst size on sm_90; else xs), the
         * 2048-wide q4_0 on xs */
        test_chain(&e, QTYPE_Q4_K, 4096, 4096, 300);
        test_chain(&e, QTYPE_Q4_K, 4096, 11008, 4096);
        test_chain(&e, QTYPE_Q6_K, 4096, 4096, 257);
        test_chain(&e, QTYPE_Q8_0, 4096, 4096, 33);
        test_chain(&e, QTYPE_Q4_0, 2048, 2048, 1000);
        /* second GEMVs of 18 and 20 MB: xst (sm_90) */
        test_chain(&e, QTYPE_Q4_K, 4096, 4096, 8000);
        test_chain(&e, QTYPE_Q6_K, 4096, 11008, 6000);
    }
    if (!only) { /* embedding, norms, rope, elementwise */
        const int n172[] = {1, 11}, n3[] = {3};
        test_matmul(&e, QTYPE_F32, 77, 172, n172, 2, 0); /* stories260K's ffn_down width */
        test_matmul(&e, QTYPE_F32, 64, 64, n3, 1, 1);
        /* embedding gather, every type */
        for (size_t ti = 0; ti < MF_ARRAY_LEN(types); ti++) {
            const int kq = qtype_get(types[ti])->blck == 256;
            test_embed(&e, types[ti], 300, kq ? 512 : 96, 1);
            test_embed(&e, types[ti], 300, kq ? 4096 : 4064, 13);
        }
        test_embed(&e, QTYPE_F32, 512, 64, 7);
        test_embed(&e, QTYPE_F32, 50, 100, 3);
        /* norm (+ fused residual add), rope, elementwise */
        const int dims[] = {64, 100, 2048, 4096};
        for (size_t di = 0; di < MF_ARRAY_LEN(dims); di++)
            for (int n = 1; n <= 13; n += 4) {
                test_norm(&e, n, dims[di], 0);
                test_norm(&e, n, dims[di], 1);
            }
        for (int mode = 0; mode < 2; mode++) {
            test_rope(&e, 1, 32, 128, 128, mode, 3000);
            test_rope(&e, 13, 8, 64, 64, mode, 4095);
            test_rope(&e, 5, 8, 8, 8, mode, 2047);
            test_rope(&e, 3, 4, 64, 32, mode, 100);  /* partial rotation */
        }
        test_elementwise(&e, 11008);
        test_elementwise(&e, 13 * 5632);
        test_elementwise(&e, 172 * 3);
        test_get_rows(&e, 13, 4096, 1);
        test_get_rows(&e, 64, 64, 7);
    }
    env_free(&e);
    if (!do_attn) return test_summary("cuda_ops");

    /* attention: decode (split) and prefill (flash for hd 64/128), GQA groups
     * 1..16, two sequences, long contexts; one query head per kv head at hd 128 and
     * 64 (the one-token kernel's 128-row tiles on 8 warps) */
    struct { int nh, nkv, hd; } cfg[] = {{8, 4, 8}, {32, 8, 64}, {32, 32, 128}, {14, 2, 64}, {32, 2, 128}, {12, 4, 96},
                                         {16, 8, 128}, {16, 16, 64}};
    for (size_t ci = 0; ci < MF_ARRAY_LEN(cfg); ci++) {
        const int nh = cfg[ci].nh, nkv = cfg[ci].nkv, hd = cfg[ci].hd, big = ci == 1 || ci == 2;
        const int s0[] = {0}, c_new[] = {1, 13, 100};
        test_attention(nh, nkv, hd, 1, s0, c_new, 3, 0);
        /* a 3000-position prefix: 1 and 5 tokens (100 for two head configurations) */
        const int s3000[] = {3000}, c_long[] = {1, 5, 100};
        test_attention(nh, nkv, hd, 1, s3000, c_long, big ? 3 : 2, 0);
        /* 700 positions, with RoPE (the one-token fused store): 1, 5 (and 13) tokens */
        const int s700[] = {700}, c_rope[] = {1, 5, 13};
        test_attention(nh, nkv, hd, 1, s700, c_rope, big ? 3 : 2, 1);
        /* one token with the fused store where pos lies in its chunk's first tile
         * (the decode kernel preloads that tile before the wait and reads row pos
         * again after its store): in the only chunk (30) and in a later one (520:
         * chunks of 256 positions at n_ctx 4096) */
        const int s30[] = {30}, s520[] = {520}, c1[] = {1};
        test_attention(nh, nkv, hd, 1, s30, c1, 1, 1);
        test_attention(nh, nkv, hd, 1, s520, c1, 1, 1);
        if (big) {
            const int s2[] = {700, 129}, n2[] = {3, 70};
            test_attention(nh, nkv, hd, 2, s2, n2, 1, 0);
            const int s3[] = {10, 1000}, n3[] = {1, 1};
            test_attention(nh, nkv, hd, 2, s3, n3, 1, 1);
        }
    }
    return test_summary("cuda_ops");
}

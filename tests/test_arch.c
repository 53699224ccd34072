/* test_arch.c - the per-architecture pieces against scalar references written here:
 *   - GeGLU (gelu_tanh): the AVX2 kernel against the double oracle, every tail length,
 *     saturated inputs; soft-capping and scaling through the CPU backend's ops;
 *   - the descriptor from GGUF keys (gemma3 window, pattern, RoPE base of the sliding
 *     layers, soft-cap, embedding scale; defaults where absent; mistral's window) and the
 *     layer pattern (model_layer_window, model_layer_rope_base);
 *   - whole forward steps of tiny hand-made gemma3, qwen2 and sliding-window llama models
 *     (f32 weights) on the CPU backend, prefill and one token at a time, SIMD and scalar
 *     ops, against a double-precision forward written out below from the formulas
 *     (gemma3: (1+w)-free RMSNorms as the GGUF holds them, q/k norms per head, post-norms,
 *     sqrt(n_embd) embedding scale, GeGLU, sliding layers with their window and RoPE base,
 *     neox RoPE, soft-capped logits; qwen2: q/k/v biases; llama+window: every layer slides);
 *   - a gemma3 file without a gemma3 tensor is refused with its name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "cpu/kernels.h"
#include "forward.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "test.h"
#include "arch_models.h"

/* ------------------------------------------------------------------ kernels */

static double gelu_tanh_d(double g) { return 0.5 * g * (1.0 + tanh(0.79788456080286535588 * g * (1.0 + 0.044715 * g * g))); }

static void test_geglu_kernel(void) {
    float gate[64], up[64], out[64], ref[64];
    mf_rng r;
    mf_rng_seed(&r, 5);
    for (int n = 1; n <= 40; n++) {
        for (int i = 0; i < n; i++) {
            gate[i] = 12.0f * (mf_rng_uniform(&r) - 0.5f);
            up[i] = 2.0f * (mf_rng_uniform(&r) - 0.5f);
        }
        cpu_geglu_avx2(out, gate, up, n);
        cpu_ref_geglu(ref, gate, up, n);
        double worst = 0;
        int bad = 0;
        for (int i = 0; i < n; i++) {
            const double want = gelu_tanh_d(gate[i]) * up[i];
            if (fabs(ref[i] - want) > 1e-6 * (1 + fabs(want))) bad++;
            const double e = fabs(out[i] - want) / (1e-6 + fabs(want));
            if (e > worst && fabs(want) > 1e-4) worst = e;
            if (fabs(out[i] - want) > 2e-6 + 2e-5 * fabs(want)) bad++;
        }
        CHECK(bad == 0, "geglu n=%d: %d values off (worst relative %.3g)", n, bad, worst);
    }
    /* saturation: exp overflow / underflow must give g and 0, never NaN */
    const float big[8] = { 30.0f, 200.0f, 1e30f, -30.0f, -200.0f, -1e30f, 0.0f, -0.0f };
    const float one[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    cpu_geglu_avx2(out, big, one, 8);
    CHECK(out[0] == 30.0f && out[1] == 200.0f && out[2] == 1e30f, "geglu large: %g %g %g", out[0], out[1], out[2]);
    CHECK(out[3] == 0.0f && out[4] == 0.0f && out[5] == 0.0f, "geglu very negative: %g %g %g", out[3], out[4], out[5]);
    CHECK(out[6] == 0.0f && out[7] == 0.0f, "geglu(0) = %g %g", out[6], out[7]);
    /* known values: gelu_tanh(1) = 0.8411920, gelu_tanh(-1) = -0.1588080 */
    const float g2[2] = { 1.0f, -1.0f }, u2[2] = { 1.0f, 2.0f };
    cpu_geglu_avx2(out, g2, u2, 2);
    CHECK(fabs(out[0] - 0.8411920f) < 2e-6 && fabs(out[1] + 2 * 0.1588080f) < 4e-6, "geglu(1), 2 geglu(-1): %.7f %.7f",
          out[0], out[1]);
}

static void test_backend_ops(void) {
    mf_err err = { { 0 } };
    mf_backend *be = cpu_backend_new(2, &err);
    CHECK(be != NULL, "cpu backend: %s", err.msg);
    if (!be) return;
    CHECK(be->ops->geglu && be->ops->scale && be->ops->softcap, "cpu backend has geglu/scale/softcap");
    enum { N = 20000 }; /* above SMALL_OP: the threaded path */
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N), *o = malloc(sizeof(float) * N);
    mf_rng r;
    mf_rng_seed(&r, 9);
    for (int i = 0; i < N; i++) {
        g[i] = 10.0f * (mf_rng_uniform(&r) - 0.5f);
        u[i] = mf_rng_uniform(&r) - 0.5f;
    }
    be->ops->geglu(be, o, g, u, N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        const double want = gelu_tanh_d(g[i]) * u[i];
        if (fabs(o[i] - want) > 2e-6 + 2e-5 * fabs(want)) bad++;
    }
    CHECK(bad == 0, "op geglu over %d values: %d off", N, bad);
    for (int i = 0; i < N; i++) o[i] = 200.0f * (mf_rng_uniform(&r) - 0.5f);
    memcpy(g, o, sizeof(float) * N);
    be->ops->softcap(be, o, 30.0f, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        const double want = 30.0 * tanh(g[i] / 30.0);
        if (fabs(o[i] - want) > 1e-5 * (1 + fabs(want)) || fabs(o[i]) > 30.0f) bad++;
    }
    CHECK(bad == 0, "op softcap(30): %d of %d off", bad, N);
    memcpy(o, g, sizeof(float) * N);
    be->ops->scale(be, o, 0.25f, N);
    bad = 0;
    for (int i = 0; i < N; i++) bad += o[i] != g[i] * 0.25f;
    CHECK(bad == 0, "op scale: %d off", bad);
    free(g);
    free(u);
    free(o);
    be->destroy(be);
}

/* ------------------------------------------------------------------ tiny models */

enum { DIM = 32, FF = 48, NV = ARCH_NV, NCTX = 64 };

/* ------------------------------------------------------------------ the reference forward */

typedef struct ref_state {
    const mf_model *m;
    double *kc, *vc; /* [n_layer][NCTX][kv_dim] */
    const spec *s;   /* the file's RoPE scaling, read from the spec, not from the model */
} ref_state;

static const float *W(const mf_weight *w) { return w->host; }

static void ref_rmsnorm(double *out, const double *x, const float *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double sc = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * sc * w[i];
}

/* out[r] = W[r] . x (+ b[r]) */
static void ref_mv(double *out, const mf_weight *w, const mf_weight *b, const double *x) {
    const float *p = W(w);
    for (int64_t r = 0; r < w->rows; r++) {
        double acc = 0;
        for (int64_t c = 0; c < w->cols; c++) acc += (double)p[r * w->cols + c] * x[c];
        out[r] = acc + (b && b->host ? (double)W(b)[r] : 0.0);
    }
}

/* The RoPE scalings from their definitions (llama.cpp's llama_rope_scaling_type and
 * ggml's rope_yarn), in double: per-pair divisors ff, linear positions times 1/factor,
 * YaRN's NTK-by-parts mix of the two between the pairs whose wavelength spans 32 and 1
 * turns of the original context, and its attention temperature 1 + 0.1 ln(factor).
 * scaled 0: the sliding layers of gemma3, which rotate unscaled. */
static void ref_rope(double *v, int pos, int hd, double base, int neox, const spec *s, int scaled) {
    const int yarn = scaled && s->rope_type && !strcmp(s->rope_type, "yarn");
    const double factor = scaled && s->rope_factor && !(s->rope_type && !strcmp(s->rope_type, "none")) ? s->rope_factor : 1.0;
    double lo = 0, hi = 0, msc = s->rope_attn ? s->rope_attn : 1.0;
    if (yarn) {
        const int orig = s->rope_orig ? s->rope_orig : 256; /* context_length */
        lo = fmax(0, floor(hd * log(orig / (32 * 2 * M_PI)) / (2 * log(base))));
        hi = fmin(hd - 1, ceil(hd * log(orig / (1 * 2 * M_PI)) / (2 * log(base))));
        msc *= 1 + 0.1 * log(factor);
    }
    for (int i = 0; i < hd / 2; i++) {
        double ext = pos * pow(base, -2.0 * i / hd);
        if (s->rope_freqs) ext /= s->rope_freqs[i];
        double th = ext / factor;
        if (yarn) {
            const double ramp = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
            th = th * (1 - ramp) + ext * ramp;
        }
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + hd / 2 : 2 * i + 1;
        const double a = v[i0], b = v[i1], c = cos(th) * msc, sn = sin(th) * msc;
        v[i0] = a * c - b * sn;
        v[i1] = a * sn + b * c;
    }
}

/* A mixture of experts from its definition (llama.cpp's build_moe_ffn, softmax gating,
 * normalised weights): softmax of the router's scores, the k largest, their probabilities
 * renormalised, the weighted sum of those experts' SwiGLU FFNs. */
static void ref_moe(double *o, const mf_ffn *f, const double *h) {
    const int E = f->n_expert, k = f->n_used, ff = (int)f->gate.rows;
    double sc[64], p[64], mx = -1e300, sum = 0, hsum = 0;
    int chosen[64] = { 0 }, id[8];
    ref_mv(sc, &f->router, NULL, h);
    for (int e = 0; e < E; e++) mx = fmax(mx, sc[e]);
    for (int e = 0; e < E; e++) sum += p[e] = exp(sc[e] - mx);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!chosen[e] && (best < 0 || p[e] > p[best])) best = e;
        chosen[best] = 1;
        id[j] = best;
        hsum += p[best] / sum;
    }
    for (int i = 0; i < DIM; i++) o[i] = 0;
    for (int j = 0; j < k; j++) {
        const int e = id[j];
        const double wj = p[e] / sum / hsum;
        const float *G = W(&f->gate) + (int64_t)e * ff * DIM, *U = W(&f->up) + (int64_t)e * ff * DIM;
        const float *D = W(&f->down) + (int64_t)e * DIM * ff;
        double a[64];
        for (int r = 0; r < ff; r++) {
            double gg = 0, uu = 0;
            for (int c = 0; c < DIM; c++) gg += (double)G[r * DIM + c] * h[c], uu += (double)U[r * DIM + c] * h[c];
            a[r] = gg / (1 + exp(-gg)) * uu;
        }
        for (int r = 0; r < DIM; r++) {
            double y = 0;
            for (int c = 0; c < ff; c++) y += (double)D[r * ff + c] * a[c];
            o[r] += wj * y;
        }
    }
}

/* The logits of token tok at position pos (positions fed in order from 0). */
static void ref_step(ref_state *R, int tok, int pos, double *logits) {
    const mf_model *m = R->m;
    const mf_hparams *hp = &m->hp;
    const int gemma = hp->arch == MF_ARCH_GEMMA3;
    const int nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim, qd = nh * hd, kvd = nkv * hd;
    double x[DIM], h[DIM], o[DIM], q[256], k[256], v[256], att[256], g[FF], u[FF], sc[NCTX];
    for (int i = 0; i < DIM; i++) x[i] = W(&m->tok_embd)[(int64_t)tok * DIM + i] * (gemma ? sqrt((double)DIM) : 1.0);
    for (int l = 0; l < hp->n_layer; l++) {
        const mf_layer *L = &m->layers[l];
        /* gemma3: layers l % pattern < pattern - 1 slide (their own RoPE base); llama with a
         * window: every layer slides */
        int win = 0, scaled = 1;
        double base = hp->rope_base;
        if (m->desc.sliding_window) {
            const int pat = m->desc.swa_every;
            if (pat == 0 || l % pat < pat - 1) {
                win = m->desc.sliding_window;
                if (m->desc.rope_base_swa) base = m->desc.rope_base_swa, scaled = 0;
            }
        }
        ref_rmsnorm(h, x, W(&L->attn_norm), DIM, hp->norm_eps);
        ref_mv(q, &L->wq, &L->bq, h);
        ref_mv(k, &L->wk, &L->bk, h);
        ref_mv(v, &L->wv, &L->bv, h);
        for (int hh = 0; hh < nh; hh++) {
            if (m->desc.qk_norm) ref_rmsnorm(q + hh * hd, q + hh * hd, W(&L->attn_q_norm), hd, hp->norm_eps);
            ref_rope(q + hh * hd, pos, hd, base, hp->rope_mode == MF_ROPE_NEOX, R->s, scaled);
        }
        for (int hh = 0; hh < nkv; hh++) {
            if (m->desc.qk_norm) ref_rmsnorm(k + hh * hd, k + hh * hd, W(&L->attn_k_norm), hd, hp->norm_eps);
            ref_rope(k + hh * hd, pos, hd, base, hp->rope_mode == MF_ROPE_NEOX, R->s, scaled);
        }
        double *kc = R->kc + (int64_t)l * NCTX * kvd, *vc = R->vc + (int64_t)l * NCTX * kvd;
        memcpy(kc + (int64_t)pos * kvd, k, sizeof(double) * kvd);
        memcpy(vc + (int64_t)pos * kvd, v, sizeof(double) * kvd);
        const int p0 = win && pos - win + 1 > 0 ? pos - win + 1 : 0;
        for (int hh = 0; hh < nh; hh++) {
            const int kh = hh / (nh / nkv);
            double mx = -1e300, sum = 0;
            for (int j = p0; j <= pos; j++) {
                double s = 0;
                for (int i = 0; i < hd; i++) s += q[hh * hd + i] * kc[(int64_t)j * kvd + kh * hd + i];
                sc[j] = s / sqrt((double)hd);
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = p0; j <= pos; j++) sum += (sc[j] = exp(sc[j] - mx));
            for (int i = 0; i < hd; i++) {
                double a = 0;
                for (int j = p0; j <= pos; j++) a += sc[j] / sum * vc[(int64_t)j * kvd + kh * hd + i];
                att[hh * hd + i] = a;
            }
        }
        (void)qd;
        ref_mv(o, &L->wo, NULL, att);
        if (gemma) ref_rmsnorm(o, o, W(&L->attn_post_norm), DIM, hp->norm_eps);
        for (int i = 0; i < DIM; i++) x[i] += o[i];
        ref_rmsnorm(h, x, W(&L->ffn_norm), DIM, hp->norm_eps);
        if (L->ffn.n_expert > 1) {
            ref_moe(o, &L->ffn, h);
        } else {
            ref_mv(g, &L->ffn.gate, NULL, h);
            ref_mv(u, &L->ffn.up, NULL, h);
            for (int i = 0; i < FF; i++) g[i] = (gemma ? gelu_tanh_d(g[i]) : g[i] / (1 + exp(-g[i]))) * u[i];
            ref_mv(o, &L->ffn.down, NULL, g);
        }
        if (gemma) ref_rmsnorm(o, o, W(&L->ffn_post_norm), DIM, hp->norm_eps);
        for (int i = 0; i < DIM; i++) x[i] += o[i];
    }
    ref_rmsnorm(h, x, W(&m->output_norm), DIM, hp->norm_eps);
    ref_mv(logits, &m->output, NULL, h);
    if (m->desc.logit_softcap)
        for (int i = 0; i < NV; i++) logits[i] = m->desc.logit_softcap * tanh(logits[i] / m->desc.logit_softcap);
}

static double max_rel(const float *got, const double *want, int n) {
    double mx = 0, scale = 0;
    for (int i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int i = 0; i < n; i++) mx = fmax(mx, fabs(got[i] - want[i]) / (scale > 0 ? scale : 1));
    return mx;
}

enum { T = 24 };

/* The model of spec s on the CPU (disable: MINFER_CPU_DISABLE value or NULL) against
 * ref_step at every position, prefill (all rows' logits) and one token a step. */
static void run_forward(const char *what, const spec *s, const char *disable) {
    char path[] = "/tmp/minfer_test_arch_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(write_model(path, s) == 0, "%s: writing the file", what);
    mf_model m;
    mf_err err = { { 0 } };
    int rc = model_load(&m, path, &err);
    CHECK(rc == MF_OK, "%s: model_load: %s", what, err.msg);
    unlink(path);
    if (rc) return;
    if (disable) setenv("MINFER_CPU_DISABLE", disable, 1);
    else unsetenv("MINFER_CPU_DISABLE");
    mf_context c;
    mf_context_params p;
    context_params_default(&p);
    p.n_ctx = NCTX;
    p.n_batch = T;
    p.device = "cpu";
    p.n_threads = 2;
    rc = context_init(&c, &m, &p, &err);
    unsetenv("MINFER_CPU_DISABLE");
    CHECK(rc == MF_OK, "%s: context_init: %s", what, err.msg);
    if (rc) { model_free(&m); return; }

    int32_t toks[T], pos[T], seq[T] = { 0 };
    int8_t want[T];
    mf_rng r;
    mf_rng_seed(&r, 42);
    for (int i = 0; i < T; i++) {
        toks[i] = 3 + (int32_t)(mf_rng_u64(&r) % (NV - 3));
        pos[i] = i;
        want[i] = 1;
    }
    ref_state R = { &m, calloc((size_t)s->n_layer * NCTX * 256, sizeof(double)),
                    calloc((size_t)s->n_layer * NCTX * 256, sizeof(double)), s };
    double *ref = malloc(sizeof(double) * T * NV);
    for (int i = 0; i < T; i++) ref_step(&R, toks[i], i, ref + (int64_t)i * NV);

    /* prefill: the whole prompt in one batch, every row's logits */
    float *got = malloc(sizeof(float) * T * NV);
    const mf_batch b = { .n = T, .tok = toks, .pos = pos, .seq = seq, .logits = want };
    const int n_out = forward_step(&c.fw, &b, got, &err);
    CHECK(n_out == T, "%s: prefill gave %d rows (%s)", what, n_out, err.msg);
    double worst = 0;
    for (int i = 0; i < T && n_out == T; i++) worst = fmax(worst, max_rel(got + (int64_t)i * NV, ref + (int64_t)i * NV, NV));
    /* f32 weights, f32 activations (float tiles): float rounding of the sums only */
    CHECK(worst < 2e-4, "%s: prefill logits vs the reference: max error %.3g of the largest logit", what, worst);

    /* one token a step, after clearing the sequence */
    CHECK(context_seq_clear(&c, 0, &err) == MF_OK, "%s: clear", what);
    worst = 0;
    for (int i = 0; i < T; i++) {
        const float *lg;
        rc = i == 0 ? context_eval(&c, 0, toks, 1, &lg, &err) : context_decode1(&c, 0, toks[i], &lg, &err);
        if (rc) break;
        worst = fmax(worst, max_rel(lg, ref + (int64_t)i * NV, NV));
    }
    CHECK(rc == MF_OK, "%s: decode: %s", what, err.msg);
    CHECK(worst < 2e-4, "%s: decode logits vs the reference: max error %.3g", what, worst);
    if (s->softcap) {
        float mx = 0;
        for (int i = 0; i < NV; i++) mx = fmaxf(mx, fabsf(got[i]));
        CHECK(mx <= s->softcap, "%s: |logit| %g above the cap %g", what, mx, s->softcap);
    }
    free(got);
    free(ref);
    free(R.kc);
    free(R.vc);
    context_free(&c);
    model_free(&m);
}

/* The logits of the last of 12 tokens (position 11) of spec s's model on the CPU. */
static int logits_at_11(const spec *s, float *out) {
    char path[] = "/tmp/minfer_test_arch_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    write_model(path, s);
    mf_model m;
    mf_err err = { { 0 } };
    if (model_load(&m, path, &err)) { CHECK(0, "load: %s", err.msg); unlink(path); return -1; }
    unlink(path);
    mf_context c;
    mf_context_params p;
    context_params_default(&p);
    p.n_ctx = NCTX;
    p.device = "cpu";
    p.n_threads = 2;
    if (context_init(&c, &m, &p, &err)) { CHECK(0, "init: %s", err.msg); model_free(&m); return -1; }
    int32_t toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 10 + 7 * i;
    const float *lg;
    const int rc = context_eval(&c, 0, toks, 12, &lg, &err);
    CHECK(rc == MF_OK, "eval: %s", err.msg);
    if (rc == MF_OK) memcpy(out, lg, sizeof(float) * NV);
    context_free(&c);
    model_free(&m);
    return rc;
}

/* 1 when a's and b's logits at position 11 differ by more than 1e-3. */
static int logits_differ(const spec *a, const spec *b, double *d) {
    float la[NV], lb[NV];
    *d = 0;
    if (logits_at_11(a, la) || logits_at_11(b, lb)) return 0;
    for (int i = 0; i < NV; i++) *d = fmax(*d, fabs(la[i] - lb[i]));
    return *d > 1e-3;
}

/* The same model without the window: its logits must differ past the window (the window is
 * live in the test, not a no-op that both sides skip). */
static void window_matters(void) {
    spec a = { "gemma3", 3, 2, 1, 32, 4, 3, 1e6f, 1e4f, 0, NULL, 0, 0, .rope_type = NULL };
    spec b = a;
    b.window = 0;
    b.pattern = 0;
    b.base_swa = 0;
    double d;
    CHECK(logits_differ(&a, &b, &d), "window 4 vs none at position 11: logits differ by %g only", d);
}

/* Each scaling is live: the same weights without it give other logits (so that the
 * reference comparison above cannot pass by both sides ignoring it). */
static void scaling_matters(const char *what, const spec *scaled) {
    spec plain = *scaled;
    plain.rope_type = NULL;
    plain.rope_factor = 0;
    plain.rope_freqs = NULL;
    plain.rope_attn = 0;
    double d;
    CHECK(logits_differ(scaled, &plain, &d), "%s vs unscaled at position 11: logits differ by %g only", what, d);
}

/* ------------------------------------------------------------------ descriptor */

static int load_spec(const spec *s, mf_model *m, mf_err *err) {
    char path[] = "/tmp/minfer_test_arch_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    if (write_model(path, s)) { unlink(path); return -99; }
    int rc = model_load(m, path, err);
    unlink(path);
    return rc;
}

static void test_descriptor(void) {
    mf_model m;
    mf_err err = { { 0 } };
    /* gemma3 with every key */
    spec g = { "gemma3", 7, 2, 1, 32, 8, 3, 1e6f, 5e3f, 30.0f, NULL, 0, 0, .rope_type = NULL };
    CHECK(load_spec(&g, &m, &err) == MF_OK, "gemma3 load: %s", err.msg);
    if (!err.msg[0]) {
        const mf_arch_desc *d = &m.desc;
        CHECK(d->qk_norm && d->post_norm && d->act == MF_ACT_GELU && !d->qkv_bias, "gemma3 flags");
        CHECK(d->sliding_window == 8 && d->swa_every == 3 && d->rope_base_swa == 5e3f, "gemma3 window %d/%d base %g",
              d->sliding_window, d->swa_every, d->rope_base_swa);
        CHECK(d->logit_softcap == 30.0f, "softcap %g", d->logit_softcap);
        CHECK(fabsf(d->embd_scale - sqrtf(DIM)) < 1e-6f, "embd_scale %g", d->embd_scale);
        CHECK(d->q_scale == 0, "q_scale %g (only the 62-layer 27B has one)", d->q_scale);
        CHECK(m.hp.rope_mode == MF_ROPE_NEOX && m.hp.head_dim == 32, "neox, head dim %d", m.hp.head_dim);
        /* pattern 3: layers 2 and 5 global, the others slide with base 5000 */
        const int want_win[7] = { 8, 8, 0, 8, 8, 0, 8 };
        int ok = 1;
        for (int l = 0; l < 7; l++) {
            ok &= model_layer_window(d, l) == want_win[l];
            ok &= model_layer_rope_base(&m, l) == (want_win[l] ? 5e3f : 1e6f);
        }
        CHECK(ok, "gemma3 layer pattern (window, base) per layer");
        model_free(&m);
    }
    /* gemma3 with the optional keys absent: llama.cpp's defaults (pattern 6, base 10000, no cap) */
    spec g2 = { "gemma3", 7, 2, 1, 32, 8, 0, 1e6f, 0, 0, NULL, 0, 0, .rope_type = NULL };
    CHECK(load_spec(&g2, &m, &err) == MF_OK, "gemma3 (defaults) load: %s", err.msg);
    if (m.layers) {
        CHECK(m.desc.swa_every == 6 && m.desc.rope_base_swa == 1e4f && m.desc.logit_softcap == 0,
              "defaults: pattern %d, base %g, cap %g", m.desc.swa_every, m.desc.rope_base_swa, m.desc.logit_softcap);
        CHECK(model_layer_window(&m.desc, 5) == 0 && model_layer_window(&m.desc, 4) == 8 &&
                  model_layer_window(&m.desc, 6) == 8,
              "pattern 6: layer 5 global, 4 and 6 slide");
        model_free(&m);
    }
    /* gemma3 without a window: every layer global, one base */
    spec g3 = { "gemma3", 2, 2, 1, 32, 0, 0, 1e6f, 0, 0, NULL, 0, 0, .rope_type = NULL };
    CHECK(load_spec(&g3, &m, &err) == MF_OK, "gemma3 (no window) load: %s", err.msg);
    if (m.layers) {
        CHECK(model_layer_window(&m.desc, 0) == 0 && model_layer_rope_base(&m, 0) == 1e6f, "no window");
        model_free(&m);
    }
    /* llama with a window (mistral): every layer slides, one base */
    spec l = { "llama", 2, 4, 2, 8, 5, 0, 1e4f, 0, 0, NULL, 0, 0, .rope_type = NULL };
    CHECK(load_spec(&l, &m, &err) == MF_OK, "llama+window load: %s", err.msg);
    if (m.layers) {
        CHECK(model_layer_window(&m.desc, 0) == 5 && model_layer_window(&m.desc, 1) == 5 &&
                  model_layer_rope_base(&m, 1) == 1e4f && m.desc.embd_scale == 0 && m.desc.act == MF_ACT_SILU,
              "llama window on every layer");
        model_free(&m);
    }
    /* a missing gemma3 tensor is named */
    spec bad = g;
    bad.skip_tensor = "blk.1.post_ffw_norm.weight";
    int rc = load_spec(&bad, &m, &err);
    CHECK(rc == MF_ERR_INPUT && strstr(err.msg, "blk.1.post_ffw_norm.weight"), "missing post_ffw_norm: %d %s", rc,
          err.msg);
    bad.skip_tensor = "blk.0.attn_k_norm.weight";
    rc = load_spec(&bad, &m, &err);
    CHECK(rc == MF_ERR_INPUT && strstr(err.msg, "attn_k_norm"), "missing attn_k_norm: %d %s", rc, err.msg);
}

/* RoPE scaling (issue 57): Llama 3.x per-pair factors, linear and YaRN (with an attention
 * factor, on qwen2's neox rotation), gemma3's linear scaling of its global layers only:
 * each forward against the reference and each live; refused and reported defects. */
static void test_rope_scaling(void) {
    /* head dim 8: 4 pairs; factors as Llama 3.1's formula gives for a short original
     * context (pair 0 kept, the slowest divided by 8) */
    static const float ff8[4] = { 1.0f, 1.5f, 4.0f, 8.0f };
    static const float ff32[16] = { 1, 1, 1, 1, 1, 1, 1.25f, 1.5f, 2, 3, 4, 5, 6, 7, 8, 8 };
    spec l3 = { "llama", 2, 4, 2, 8, 0, 0, 1e4f, 0, 0, NULL, 0, 0, .rope_freqs = ff8 };
    spec lin = { "llama", 2, 4, 2, 8, 0, 0, 1e4f, 0, 0, NULL, 0, 0, .rope_type = "linear", .rope_factor = 4 };
    spec yarn = { "llama", 2, 4, 2, 8, 0, 0, 1e4f, 0, 0, NULL, 0, 0, .rope_type = "yarn", .rope_factor = 4,
                  .rope_orig = 64 };
    spec qyarn = { "qwen2", 2, 4, 2, 32, 0, 0, 1e6f, 0, 0, NULL, 0, 0, .rope_type = "yarn", .rope_factor = 8,
                   .rope_orig = 64, .rope_attn = 0.9f };
    spec glin = { "gemma3", 3, 2, 1, 32, 5, 3, 1e6f, 1e4f, 30.0f, NULL, 0, 0, .rope_type = "linear", .rope_factor = 8 };
    spec l3big = { "llama", 2, 1, 1, 32, 0, 0, 5e5f, 0, 0, NULL, 0, 0, .rope_freqs = ff32 };
    const struct { const char *what; const spec *s; } cases[] = {
        { "llama3 factors", &l3 }, { "linear x4", &lin }, { "yarn x4", &yarn },
        { "qwen2 yarn x8 attn 0.9", &qyarn }, { "gemma3 linear x8", &glin }, { "llama3 factors hd 32", &l3big },
    };
    for (size_t i = 0; i < MF_ARRAY_LEN(cases); i++) {
        char what[96];
        run_forward(cases[i].what, cases[i].s, NULL);
        snprintf(what, sizeof what, "%s scalar ops", cases[i].what);
        run_forward(what, cases[i].s, "avx2");
        scaling_matters(cases[i].what, cases[i].s);
    }

    mf_model m;
    mf_err err = { { 0 } };
    /* what the loader made of each */
    if (load_spec(&yarn, &m, &err) == MF_OK) {
        char d[128];
        rope_describe(&m.rope, d, sizeof d);
        CHECK(m.rope.scaling == MF_ROPE_SCALING_YARN && m.rope.freq_scale == 0.25f && m.rope.n_ctx_orig == 64 &&
                  strstr(d, "yarn x4"),
              "yarn read as %s", d);
        model_free(&m);
    } else CHECK(0, "yarn load: %s", err.msg);
    if (load_spec(&l3, &m, &err) == MF_OK) {
        CHECK(m.rope.freq_factors && m.rope.freq_factors[3] == 8.0f && !m.unused_tensors, "rope_freqs bound");
        model_free(&m);
    } else CHECK(0, "llama3 load: %s", err.msg);
    /* the scaling none: a factor in the file is ignored, as llama.cpp does */
    spec none = lin;
    none.rope_type = "none";
    if (load_spec(&none, &m, &err) == MF_OK) {
        CHECK(rope_is_plain(&m.rope), "type none with a factor: unscaled");
        model_free(&m);
    } else CHECK(0, "none load: %s", err.msg);

    /* an unknown type is refused, naming it and the key */
    spec bad = lin;
    bad.rope_type = "longrope";
    int rc = load_spec(&bad, &m, &err);
    CHECK(rc == MF_ERR_INPUT && strstr(err.msg, "'longrope'") && strstr(err.msg, "llama.rope.scaling.type"),
          "unknown scaling type: %d %s", rc, err.msg);
    if (rc == MF_OK) model_free(&m);
    /* factors out of range, or of the wrong length */
    static const float ffbad[4] = { 1.0f, 0.0f, 4.0f, 8.0f };
    bad = l3;
    bad.rope_freqs = ffbad;
    rc = load_spec(&bad, &m, &err);
    CHECK(rc == MF_ERR_INPUT && strstr(err.msg, "rope_freqs.weight[1]"), "zero factor: %d %s", rc, err.msg);
    if (rc == MF_OK) model_free(&m);
    /* a tensor that nothing reads is listed, never dropped silently */
    spec extra = l3;
    extra.extra_tensor = "blk.0.attn_sinks.weight";
    if (load_spec(&extra, &m, &err) == MF_OK) {
        CHECK(m.n_unused_tensors == 1 && m.unused_tensors && !strcmp(m.unused_tensors, "blk.0.attn_sinks.weight"),
              "unused tensors: %d '%s'", m.n_unused_tensors, m.unused_tensors ? m.unused_tensors : "(null)");
        model_free(&m);
    } else CHECK(0, "extra load: %s", err.msg);
}

/* The FFN of experts (issues 50, 51): a qwen3moe and a Mixtral-style llama file bind their
 * router and 3-D expert tensors as slices, describe themselves, and run on the CPU against
 * the double reference; layouts minfer does not implement are refused naming them. */
static void test_experts(void) {
    mf_model m;
    mf_err err = { { 0 } };
    spec moe = { "qwen3", 2, 4, 2, 16, 0, 0, 1e6f, 0, 0, NULL, 0, 0, .n_expert = 8, .n_expert_used = 2, .ff_expert = 24 };
    moe.arch = "qwen3moe";
    int rc = load_spec(&moe, &m, &err);
    CHECK(rc == MF_OK, "qwen3moe load: %s", err.msg);
    if (rc == MF_OK) {
        const mf_ffn *f = &m.layers[1].ffn;
        CHECK(f->n_expert == 8 && f->n_used == 2 && f->router.rows == 8 && f->gate.n_slices == 8 && f->gate.rows == 24 &&
                  f->down.cols == 24 && f->down.slice_bytes * 8 == f->down.nbytes && !m.unused_tensors,
              "qwen3moe experts: %d/%d, router %lld rows, gate %lld slices of %lld rows", f->n_expert, f->n_used,
              (long long)f->router.rows, (long long)f->gate.n_slices, (long long)f->gate.rows);
        char d[512];
        model_describe(&m, d, sizeof d);
        CHECK(strstr(d, "8 experts of ff 24, 2 used a token") != NULL, "describe: %s", d);
        model_free(&m);
    }
    /* the forward (issue 51, CPU): prefill and decode against the reference above */
    run_forward("qwen3moe 8 experts, 2 used", &moe, NULL);
    run_forward("qwen3moe scalar ops", &moe, "avx2");
    spec moe4 = moe;
    moe4.n_expert_used = 4;
    moe4.n_expert = 6;
    run_forward("qwen3moe 6 experts, 4 used", &moe4, NULL);
    spec mix = { "llama", 2, 4, 2, 8, 0, 0, 1e4f, 0, 0, NULL, 0, 0, .n_expert = 4, .n_expert_used = 2 };
    rc = load_spec(&mix, &m, &err);
    CHECK(rc == MF_OK && m.layers[0].ffn.n_expert == 4 && m.layers[0].ffn.gate.rows == 48, "mixtral-style load: %d %s", rc,
          err.msg);
    if (rc == MF_OK) model_free(&m);
    run_forward("mixtral-style 4 experts, 2 used", &mix, NULL);
    spec dense = mix;
    dense.n_expert = 0;
    rc = load_spec(&dense, &m, &err);
    CHECK(rc == MF_OK && m.layers[0].ffn.n_expert == 1 && m.layers[0].ffn.n_used == 1 && !m.layers[0].ffn.router.host &&
              m.layers[0].ffn.gate.n_slices == 1 && m.desc.n_expert == 0,
          "a dense FFN is one expert: %d %s", rc, err.msg);
    if (rc == MF_OK) model_free(&m);
    spec shared = moe;
    shared.moe_tensor = "ffn_gate_shexp.weight";
    rc = load_spec(&shared, &m, &err);
    CHECK(rc == MF_ERR_INPUT && strstr(err.msg, "shared experts"), "shared experts: %d %s", rc, err.msg);
    if (rc == MF_OK) model_free(&m);
    spec sig = moe;
    sig.gating = 2;
    rc = load_spec(&sig, &m, &err);
    CHECK(rc == MF_ERR_INPUT && strstr(err.msg, "expert_gating_func"), "sigmoid gating: %d %s", rc, err.msg);
    if (rc == MF_OK) model_free(&m);
    spec many = moe;
    many.n_expert_used = 9;
    rc = load_spec(&many, &m, &err);
    CHECK(rc == MF_ERR_INPUT && strstr(err.msg, "9 used"), "more used than experts: %d %s", rc, err.msg);
    if (rc == MF_OK) model_free(&m);
}

int main(void) {
    test_geglu_kernel();
    test_backend_ops();
    test_descriptor();
    /* gemma3: 3 layers, pattern 3 (layers 0, 1 slide with window 5 and base 10000; layer 2
     * global, base 1e6), head dim 32 with 2 q heads and 1 kv head (q dim 64 != DIM), cap 30 */
    spec gemma = { "gemma3", 3, 2, 1, 32, 5, 3, 1e6f, 1e4f, 30.0f, NULL, 0, 0, .rope_type = NULL };
    spec qwen = { "qwen2", 2, 4, 2, 8, 0, 0, 1e6f, 0, 0, NULL, 0, 0, .rope_type = NULL };
    spec mistral = { "llama", 2, 4, 2, 8, 6, 0, 1e4f, 0, 0, NULL, 0, 0, .rope_type = NULL };
    run_forward("gemma3", &gemma, NULL);
    run_forward("gemma3 scalar ops", &gemma, "avx2");
    run_forward("gemma3 rows", &gemma, "repack");
    run_forward("qwen2", &qwen, NULL);
    run_forward("qwen2 scalar ops", &qwen, "avx2");
    /* qwen3: q/k norms, neox RoPE, head dim 16 from key_length with 4 heads over DIM 32 (q dim
     * 64 != DIM), GQA 4/2, no biases */
    spec qwen3 = { "qwen3", 2, 4, 2, 16, 0, 0, 1e6f, 0, 0, NULL, 0, 0, .rope_type = NULL };
    run_forward("qwen3", &qwen3, NULL);
    run_forward("qwen3 scalar ops", &qwen3, "avx2");
    spec qwen3y = qwen3;
    qwen3y.rope_type = "yarn";
    qwen3y.rope_factor = 4;
    qwen3y.rope_orig = 64;
    run_forward("qwen3 yarn x4", &qwen3y, NULL);
    run_forward("llama+window", &mistral, NULL);
    run_forward("llama+window scalar ops", &mistral, "avx2");
    window_matters();
    test_rope_scaling();
    test_experts();
    return test_summary("test_arch");
}

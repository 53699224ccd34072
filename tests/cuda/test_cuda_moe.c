/* test_cuda_moe.c - the experts' kernels (src/cuda/moe.cu) against scalar references.
 *
 *   test_cuda_moe MODEL      (MODEL: a q4_k_m synth with experts: tiny-moe, tiny-mixtral)
 *
 * Route: each token's softmax, its k largest (ties: the lower expert, as the CPU's
 * forward_moe_route and llama.cpp's CPU argsort), the weights renormalised, then the grouping:
 * pos a permutation, src[pos[i]] = i's token, the groups in expert order with their first
 * rows and counts, tiles of at most 60 rows covering each group in order, the padding zero.
 * Cases: random scores (E 128 k 8, E 8 k 2, E 100 k 3: not whole warps of experts, E 256),
 * exact ties everywhere, every token to the same k experts (the others get no row; 150
 * tokens: three tiles of one expert), one token, and a column of -inf.
 * FFN: the model's layer-0 experts on random x, by the grouped GEMVs (1, 5 and 40 tokens)
 * and the grouped MMQ (200 tokens), against a double reference over the dequantized
 * weights with the reference's routing; once with the model's router and once with a router
 * whose rows for experts 1 and k+1 take every token and whose zero rows tie for the rest
 * (the lowest: every token goes to the same k experts, the others get none). The GPU's
 * activations are q8 / int8, hence a bound of 3% on the normalised error. Skips without a
 * GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "backend.h"
#include "cuda/backend_cuda.h"
#include "cuda/plan.h"
#include "forward.h"
#include "model.h"
#include "quant.h"
#include "util.h"

enum { TILE_ROWS = 60 }; /* common.cuh CU_MOE_TILE_ROWS */

static void route_case(mf_backend *be, const char *what, const float *scores, int n, int E, int k) {
    const int nr = n * k, ng = nr < E ? nr : E, nt = (nr + TILE_ROWS - 1) / TILE_ROWS + ng;
    int32_t *ids = malloc(sizeof(int32_t) * nr), *pos = malloc(sizeof(int32_t) * nr), *src = malloc(sizeof(int32_t) * nr);
    int32_t *rid = malloc(sizeof(int32_t) * nr), *grp = malloc(sizeof(int32_t) * 4 * ng), *til = malloc(sizeof(int32_t) * 4 * nt);
    float *w = malloc(sizeof(float) * nr), *rw = malloc(sizeof(float) * nr);
    mf_err err = { { 0 } };
    int rc = cuda_moe_route_test(be, scores, n, E, k, ids, w, pos, src, grp, til, &err);
    CHECK(rc == MF_OK, "%s: route: %s", what, err.msg);
    if (rc == MF_OK) {
        forward_moe_route(scores, n, E, k, rid, rw);
        int bad_id = 0, bad_w = 0, bad_perm = 0, bad_grp = 0, bad_tile = 0;
        double worst = 0;
        for (int i = 0; i < nr; i++) {
            bad_id += ids[i] != rid[i];
            const double d = fabs((double)w[i] - rw[i]);
            worst = fmax(worst, d);
            bad_w += d > 1e-6 * fmax(1.0, fabs(rw[i]));
        }
        /* pos a permutation with src its tokens; rows of one expert contiguous, experts in order */
        char *hit = calloc((size_t)nr, 1);
        for (int i = 0; i < nr; i++) {
            if (pos[i] < 0 || pos[i] >= nr || hit[pos[i]]) { bad_perm++; continue; }
            hit[pos[i]] = 1;
            bad_perm += src[pos[i]] != i / k;
        }
        free(hit);
        int *cnt = calloc((size_t)E, sizeof(int));
        for (int i = 0; i < nr; i++) cnt[rid[i]]++;
        int g = 0, row = 0, t = 0;
        for (int e = 0; e < E; e++) {
            if (!cnt[e]) continue;
            if (g >= ng || grp[4 * g] != e || grp[4 * g + 1] != row || grp[4 * g + 2] != cnt[e]) bad_grp++;
            for (int i = 0; i < nr; i++)
                if (rid[i] == e && (pos[i] < row || pos[i] >= row + cnt[e])) bad_grp++;
            for (int o = 0; o < cnt[e]; o += TILE_ROWS, t++) {
                const int want = cnt[e] - o < TILE_ROWS ? cnt[e] - o : TILE_ROWS;
                if (t >= nt || til[4 * t] != e || til[4 * t + 1] != row + o || til[4 * t + 2] != want) bad_tile++;
            }
            row += cnt[e];
            g++;
        }
        for (; g < ng; g++) bad_grp += grp[4 * g + 2] != 0;
        for (; t < nt; t++) bad_tile += til[4 * t + 2] != 0;
        free(cnt);
        CHECK(bad_id == 0, "%s: %d of %d slots chose another expert than the CPU's", what, bad_id, nr);
        CHECK(bad_w == 0, "%s: %d weights off (worst %.3g)", what, bad_w, worst);
        CHECK(bad_perm == 0, "%s: rows: %d defects of the permutation", what, bad_perm);
        CHECK(bad_grp == 0, "%s: %d defects of the groups", what, bad_grp);
        CHECK(bad_tile == 0, "%s: %d defects of the tiles", what, bad_tile);
        printf("route %s: n %d E %d k %d: ids equal %s, weights within %.2g\n", what, n, E, k, bad_id ? "NO" : "yes", worst);
    }
    free(ids), free(pos), free(src), free(rid), free(grp), free(til), free(w), free(rw);
}

static void route_tests(mf_backend *be) {
    mf_rng r;
    mf_rng_seed(&r, 11);
    static const int shapes[][3] = { { 37, 128, 8 }, { 64, 8, 2 }, { 50, 100, 3 }, { 9, 256, 8 }, { 1, 128, 8 } };
    for (size_t s = 0; s < MF_ARRAY_LEN(shapes); s++) {
        const int n = shapes[s][0], E = shapes[s][1], k = shapes[s][2];
        float *sc = malloc(sizeof(float) * (size_t)n * E);
        for (int i = 0; i < n * E; i++) sc[i] = 3.0f * (mf_rng_uniform(&r) - 0.5f);
        char what[64];
        snprintf(what, sizeof what, "random %d/%d", E, k);
        route_case(be, what, sc, n, E, k);
        /* ties: every score equal (the first k experts), then pairs of equal scores */
        for (int i = 0; i < n * E; i++) sc[i] = 0.5f;
        snprintf(what, sizeof what, "all tied %d/%d", E, k);
        route_case(be, what, sc, n, E, k);
        for (int i = 0; i < n * E; i++) sc[i] = (float)((i % E) / 2 % 5);
        snprintf(what, sizeof what, "tied pairs %d/%d", E, k);
        route_case(be, what, sc, n, E, k);
        free(sc);
    }
    /* every token to experts 3, 7, ... (150 tokens: three tiles each), the rest none */
    const int n = 150, E = 64, k = 4;
    float *sc = malloc(sizeof(float) * n * E);
    for (int t = 0; t < n; t++)
        for (int e = 0; e < E; e++) sc[t * E + e] = e % 4 == 3 && e < 16 ? 5.0f + 0.1f * e : mf_rng_uniform(&r);
    route_case(be, "every token to the same 4", sc, n, E, k);
    for (int t = 0; t < n; t++) sc[t * E + 5] = -INFINITY;
    route_case(be, "a column of -inf", sc, n, E, k);
    free(sc);
}

/* out [n][dim] by the reference: routing by forward_moe_route on double router scores
 * rounded to f32, each chosen expert's SwiGLU FFN in double over the dequantized weights */
static void ffn_ref(const mf_ffn *F, const float *x, int n, float *out) {
    const int dim = (int)F->gate.cols, ff = (int)F->gate.rows, E = F->n_expert, k = F->n_used;
    float *wr = malloc(sizeof(float) * (size_t)E * dim), *row = malloc(sizeof(float) * (size_t)(dim > ff ? dim : ff));
    float *sc = malloc(sizeof(float) * (size_t)n * E), *wt = malloc(sizeof(float) * (size_t)n * k);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * k);
    double *h = malloc(sizeof(double) * ff);
    memcpy(wr, F->router.host, sizeof(float) * (size_t)E * dim);
    for (int t = 0; t < n; t++)
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int i = 0; i < dim; i++) s += (double)wr[(size_t)e * dim + i] * x[(size_t)t * dim + i];
            sc[(size_t)t * E + e] = (float)s;
        }
    forward_moe_route(sc, n, E, k, ids, wt);
    const qtype_traits *tg = qtype_get(F->gate.type), *td = qtype_get(F->down.type);
    const size_t grow = (size_t)(dim / tg->blck) * tg->type_size, drow = (size_t)(ff / td->blck) * td->type_size;
    for (int t = 0; t < n; t++) {
        double *acc = calloc((size_t)dim, sizeof(double));
        for (int j = 0; j < k; j++) {
            const int e = ids[t * k + j];
            const uint8_t *g = (const uint8_t *)F->gate.host + (size_t)e * F->gate.slice_bytes;
            const uint8_t *u = (const uint8_t *)F->up.host + (size_t)e * F->up.slice_bytes;
            const uint8_t *d = (const uint8_t *)F->down.host + (size_t)e * F->down.slice_bytes;
            for (int r = 0; r < ff; r++) {
                double gv = 0, uv = 0;
                quant_dequantize_row(F->gate.type, g + r * grow, row, dim);
                for (int i = 0; i < dim; i++) gv += (double)row[i] * x[(size_t)t * dim + i];
                quant_dequantize_row(F->up.type, u + r * grow, row, dim);
                for (int i = 0; i < dim; i++) uv += (double)row[i] * x[(size_t)t * dim + i];
                h[r] = gv / (1.0 + exp(-gv)) * uv;
            }
            for (int r = 0; r < dim; r++) {
                double y = 0;
                quant_dequantize_row(F->down.type, d + r * drow, row, ff);
                for (int i = 0; i < ff; i++) y += (double)row[i] * h[i];
                acc[r] += wt[t * k + j] * y;
            }
        }
        for (int r = 0; r < dim; r++) out[(size_t)t * dim + r] = (float)acc[r];
        free(acc);
    }
    free(wr), free(row), free(sc), free(wt), free(ids), free(h);
}

static void ffn_case(mf_backend *be, const char *what, const mf_ffn *F, int kind, int n) {
    const int dim = (int)F->gate.cols;
    float *x = malloc(sizeof(float) * (size_t)n * dim), *got = malloc(sizeof(float) * (size_t)n * dim);
    float *want = malloc(sizeof(float) * (size_t)n * dim);
    mf_rng r;
    mf_rng_seed(&r, 5 + (uint64_t)n);
    for (int i = 0; i < n * dim; i++) x[i] = 2.0f * (mf_rng_uniform(&r) - 0.3f); /* (mostly positive: the crafted router) */
    mf_err err = { { 0 } };
    int rc = cuda_moe_ffn_test(be, F, kind, x, n, got, &err);
    CHECK(rc == MF_OK, "%s: %s", what, err.msg);
    if (rc == MF_OK) {
        ffn_ref(F, x, n, want);
        double d = 0, s = 0;
        int finite = 1;
        for (int i = 0; i < n * dim; i++) {
            finite &= isfinite(got[i]) != 0;
            d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
            s += (double)want[i] * want[i];
        }
        const double e = s > 0 ? sqrt(d / s) : sqrt(d);
        CHECK(finite, "%s: non-finite outputs", what);
        CHECK(e < 0.03, "%s: normalised error %.4f", what, e);
        printf("ffn %s, %d tokens: normalised error %.4f\n", what, n, e);
    }
    free(x), free(got), free(want);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL\n", argv[0]);
        return 1;
    }
    if (!cuda_device_count()) {
        SKIP("no CUDA device");
        return test_summary("cuda_moe");
    }
    mf_err err = { { 0 } };
    mf_model m;
    if (model_load(&m, argv[1], &err)) {
        CHECK(0, "load %s: %s", argv[1], err.msg);
        return test_summary("cuda_moe");
    }
    CHECK(m.desc.n_expert > 1, "%s: a model with experts", argv[1]);
    mf_backend *be = cuda_backend_new(0, &err);
    if (!be || be->init(be, &m, 256, 1, 256, NULL, &err)) {
        CHECK(0, "init: %s", err.msg);
        return test_summary("cuda_moe");
    }
    route_tests(be);
    if (m.desc.n_expert > 1) {
        mf_ffn F = m.layers[0].ffn;
        ffn_case(be, "grouped GEMVs", &F, CU_MOE_GEMV, 1);
        ffn_case(be, "grouped GEMVs", &F, CU_MOE_GEMV, 5);
        ffn_case(be, "grouped GEMVs", &F, CU_MOE_GEMV, 40);
        ffn_case(be, "grouped MMQ", &F, CU_MOE_MMQ, 200);
        /* a router whose rows 1 and k+1 take every token (x mostly positive), the rest zero */
        const int dim = (int)F.gate.cols, E = F.n_expert;
        float *wr = calloc((size_t)E * dim, sizeof(float));
        for (int i = 0; i < dim; i++) wr[(size_t)1 * dim + i] = wr[(size_t)(F.n_used + 1) * dim + i] = 1.0f;
        mf_weight router = F.router;
        router.host = wr;
        router.dev = NULL;
        CHECK(cuda_backend_upload(be, &router, &err) == MF_OK, "router upload: %s", err.msg);
        F.router = router;
        ffn_case(be, "grouped GEMVs, two experts take every token", &F, CU_MOE_GEMV, 40);
        ffn_case(be, "grouped MMQ, two experts take every token", &F, CU_MOE_MMQ, 200);
        free(wr);
    }
    be->destroy(be);
    model_free(&m);
    return test_summary("cuda_moe");
}

/* test_sampler.c - the sampler against a brute-force reference.
 *
 * The reference (ref_dist) computes the exact distribution the chain should draw
 * from with the plainest possible code: full sort, double arithmetic. Sampling tests
 * then draw many times with a fixed seed and check that no token outside the
 * reference support ever appears and that the counts pass a chi-square test against
 * the reference probabilities. Fixed seeds make every run identical. */
#include "test.h"

#include <float.h>
#include <stdint.h>

#include "sampler.h"
#include "util.h"

/* ---------------------------------------------------------------- reference */

typedef struct ref_item { double logit; int id; } ref_item;

static int ref_cmp(const void *pa, const void *pb) {
    const ref_item *a = pa, *b = pb;
    if (a->logit > b->logit) return -1;
    if (a->logit < b->logit) return 1;
    return a->id - b->id;
}

/* Exact draw distribution prob[n] for logits, params and accepted history. */
static void ref_dist(const float *logits, int n, const mf_sampler_params *p, const int32_t *hist,
                     int n_hist, double *prob) {
    ref_item *it = malloc((size_t)n * sizeof *it);
    float *l = malloc((size_t)n * sizeof *l);
    memcpy(l, logits, (size_t)n * sizeof *l);
    int pen = p->repeat_last_n != 0 && (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f ||
                                        p->presence_penalty != 0.0f);
    if (pen) {
        int from = p->repeat_last_n < 0 || p->repeat_last_n > n_hist ? 0 : n_hist - p->repeat_last_n;
        for (int t = 0; t < n; t++) {
            int c = 0;
            for (int i = from; i < n_hist; i++) c += hist[i] == t;
            if (!c) continue;
            float x = l[t];
            x = x <= 0.0f ? x * p->repeat_penalty : x / p->repeat_penalty;
            l[t] = x - ((float)c * p->frequency_penalty + p->presence_penalty);
        }
    }
    for (int i = 0; i < n; i++) {
        double x = isnan(l[i]) ? -INFINITY : l[i] > FLT_MAX ? FLT_MAX : l[i];
        it[i] = (ref_item){ x, i };
    }
    qsort(it, (size_t)n, sizeof *it, ref_cmp);
    for (int i = 0; i < n; i++) prob[i] = 0.0;
    if (p->temp <= 0.0f || it[0].logit == -INFINITY) {
        prob[it[0].id] = 1.0;
        free(it); free(l);
        return;
    }
    int keep = n;
    if (p->top_k > 0 && p->top_k < keep) keep = p->top_k;
    double max = it[0].logit;
    if (p->top_p < 1.0f) {
        double sum = 0.0, cum = 0.0;
        for (int i = 0; i < keep; i++) sum += exp(it[i].logit - max);
        for (int i = 0; i < keep; i++) {
            cum += exp(it[i].logit - max) / sum;
            if (cum >= p->top_p) { keep = i + 1; break; }
        }
    }
    if (p->min_p > 0.0f) {
        double thr = max + log(p->min_p);
        int k = 1;
        while (k < keep && it[k].logit >= thr) k++;
        keep = k;
    }
    double sum = 0.0;
    for (int i = 0; i < keep; i++) sum += exp((it[i].logit - max) / p->temp);
    for (int i = 0; i < keep; i++) prob[it[i].id] = exp((it[i].logit - max) / p->temp) / sum;
    free(it); free(l);
}

/* Draws n_draw tokens and compares the counts with the reference distribution.
 * Returns the number of draws that fell outside the reference support. */
static int check_draws(mf_sampler *s, const float *logits, int n, const mf_sampler_params *p,
                       const int32_t *hist, int n_hist, int n_draw, const char *what) {
    double *prob = malloc((size_t)n * sizeof *prob);
    long *cnt = calloc((size_t)n, sizeof *cnt);
    ref_dist(logits, n, p, hist, n_hist, prob);
    int outside = 0, bad_id = 0;
    for (int d = 0; d < n_draw; d++) {
        int32_t t = sampler_sample(s, logits);
        if (t < 0 || t >= n) { bad_id++; continue; }
        cnt[t]++;
        if (prob[t] == 0.0) outside++;
    }
    CHECK(bad_id == 0, "%s: %d ids out of range", what, bad_id);
    CHECK(outside == 0, "%s: %d draws outside the reference support", what, outside);
    /* Chi-square over the support; tokens with a tiny expected count are pooled. */
    double chi2 = 0.0, pool_e = 0.0, pool_o = 0.0;
    int dof = -1;
    for (int i = 0; i < n; i++) {
        if (prob[i] == 0.0) continue;
        double e = prob[i] * n_draw;
        if (e < 5.0) { pool_e += e; pool_o += (double)cnt[i]; continue; }
        chi2 += ((double)cnt[i] - e) * ((double)cnt[i] - e) / e;
        dof++;
    }
    if (pool_e > 0.0) { chi2 += (pool_o - pool_e) * (pool_o - pool_e) / fmax(pool_e, 5.0); dof++; }
    if (dof > 0) {
        double limit = dof + 6.0 * sqrt(2.0 * dof) + 10.0; /* p-value well below 1e-4 */
        CHECK(chi2 < limit, "%s: chi2 %.2f over %d dof (limit %.2f)", what, chi2, dof, limit);
    }
    free(prob);
    free(cnt);
    return outside;
}

static mf_sampler_params params_plain(float temp, uint64_t seed) {
    mf_sampler_params p;
    sampler_params_default(&p);
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

static mf_sampler *new_or_fail(const mf_sampler_params *p, int n) {
    mf_err err = { { 0 } };
    mf_sampler *s = sampler_new(p, n, &err);
    CHECK(s != NULL, "sampler_new: %s", err.msg);
    return s;
}

/* ---------------------------------------------------------------- tests */

static void test_defaults(void) {
    mf_sampler_params p;
    sampler_params_default(&p);
    CHECK(p.temp == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f &&
          p.repeat_penalty == 1.0f && p.repeat_last_n == 64 && p.presence_penalty == 0.0f &&
          p.frequency_penalty == 0.0f && p.seed == SAMPLER_SEED_RANDOM, "defaults");
    mf_sampler *s = new_or_fail(&p, 10);
    if (!s) return;
    CHECK(sampler_seed(s) != SAMPLER_SEED_RANDOM, "random seed resolved: %llu",
          (unsigned long long)sampler_seed(s));
    sampler_free(s);
    sampler_free(NULL);
}

static void test_bad_params(void) {
    mf_sampler_params p = params_plain(1.0f, 1);
    mf_err err = { { 0 } };
    CHECK(sampler_new(&p, 0, &err) == NULL && strstr(err.msg, "n_vocab"), "n_vocab 0: %s", err.msg);
    p.temp = NAN;
    CHECK(sampler_new(&p, 10, &err) == NULL && strstr(err.msg, "temp"), "temp NaN: %s", err.msg);
    p = params_plain(1.0f, 1);
    p.repeat_penalty = 0.0f;
    CHECK(sampler_new(&p, 10, &err) == NULL && strstr(err.msg, "repeat_penalty"), "penalty 0: %s",
          err.msg);
    p = params_plain(1.0f, 1);
    p.top_p = NAN;
    CHECK(sampler_new(&p, 10, NULL) == NULL, "top_p NaN, NULL err");
    p = params_plain(1.0f, 1);
    p.frequency_penalty = INFINITY;
    CHECK(sampler_params_check(&p, 10, &err) == MF_ERR_USAGE, "frequency inf");
}

static void test_greedy(void) {
    mf_sampler_params p;
    sampler_params_default(&p);
    p.temp = 0.0f;
    p.seed = 7;
    mf_sampler *s = new_or_fail(&p, 5);
    if (!s) return;
    const float a[5] = { 1.0f, 3.0f, 2.0f, 3.0f, -1.0f };
    CHECK(sampler_sample(s, a) == 1, "argmax, tie -> lowest id");
    const float b[5] = { NAN, -INFINITY, 0.5f, NAN, 0.25f };
    CHECK(sampler_sample(s, b) == 2, "NaN and -inf never win");
    const float c[5] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    CHECK(sampler_sample(s, c) == 0, "all masked -> 0");
    const float d[5] = { 1e30f, 2.0f, INFINITY, INFINITY, 3.0f };
    CHECK(sampler_sample(s, d) == 2, "+inf wins, tie -> lowest id");
    const float e[5] = { -5.0f, -4.0f, -4.0f, -7.0f, -6.0f };
    CHECK(sampler_sample(s, e) == 1, "negative logits");
    sampler_free(s);
    /* Negative temperature is greedy too, and the logits are not modified. */
    p.temp = -1.0f;
    s = new_or_fail(&p, 5);
    if (!s) return;
    float f[5] = { 0.0f, 0.0f, 0.0f, 9.0f, 0.0f };
    float f0[5];
    memcpy(f0, f, sizeof f);
    for (int i = 0; i < 10; i++) CHECK(sampler_sample(s, f) == 3, "temp < 0 greedy");
    CHECK(memcmp(f, f0, sizeof f) == 0, "logits untouched");
    sampler_free(s);
    /* A tiny positive temperature behaves as greedy (no NaN from 0 * (1/temp)). */
    p.temp = 1e-38f;
    p.top_k = 0; p.top_p = 1.0f; p.min_p = 0.0f;
    s = new_or_fail(&p, 5);
    if (!s) return;
    int ok = 1;
    for (int i = 0; i < 1000; i++) {
        int32_t t = sampler_sample(s, a);
        ok &= t == 1 || t == 3;
    }
    CHECK(ok, "tiny temp picks only the top tokens");
    sampler_free(s);
}

static void test_seed(void) {
    enum { N = 100, DRAWS = 2000 };
    float l[N];
    mf_rng r;
    mf_rng_seed(&r, 1234);
    for (int i = 0; i < N; i++) l[i] = mf_rng_normal(&r);
    mf_sampler_params p = params_plain(1.0f, 42);
    mf_sampler *a = new_or_fail(&p, N), *b = new_or_fail(&p, N);
    p.seed = 43;
    mf_sampler *c = new_or_fail(&p, N);
    if (!a || !b || !c) return;
    CHECK(sampler_seed(a) == 42, "seed reported");
    int same_ab = 1, diff_ac = 0;
    for (int i = 0; i < DRAWS; i++) {
        int32_t ta = sampler_sample(a, l), tb = sampler_sample(b, l), tc = sampler_sample(c, l);
        same_ab &= ta == tb;
        diff_ac += ta != tc;
    }
    CHECK(same_ab, "same seed -> same stream");
    CHECK(diff_ac > DRAWS / 2, "different seed -> different stream (%d of %d differ)", diff_ac, DRAWS);
    /* A reset forgets penalties only: the stream goes on. */
    sampler_reset(a);
    sampler_reset(b);
    CHECK(sampler_sample(a, l) == sampler_sample(b, l), "after reset");
    sampler_free(a); sampler_free(b); sampler_free(c);
}

static void test_top_k(void) {
    const float l[5] = { 2.0f, 1.5f, 1.4f, 0.0f, -1.0f };
    mf_sampler_params p = params_plain(1.0f, 5);
    p.top_k = 2;
    mf_sampler *s = new_or_fail(&p, 5);
    if (!s) return;
    long cnt[5] = { 0 };
    for (int i = 0; i < 10000; i++) cnt[sampler_sample(s, l)]++;
    CHECK(cnt[2] == 0 && cnt[3] == 0 && cnt[4] == 0, "top-k 2 never draws the 3rd token (%ld %ld %ld)",
          cnt[2], cnt[3], cnt[4]);
    CHECK(cnt[0] > 0 && cnt[1] > 0, "both kept tokens drawn");
    check_draws(s, l, 5, &p, NULL, 0, 20000, "top-k 2");
    sampler_free(s);
    /* Ties at the cut: lower id wins the last place. */
    const float t[6] = { 1.0f, 3.0f, 1.0f, 1.0f, 3.0f, 1.0f };
    p.top_k = 3;
    s = new_or_fail(&p, 6);
    if (!s) return;
    long ct[6] = { 0 };
    for (int i = 0; i < 5000; i++) ct[sampler_sample(s, t)]++;
    CHECK(ct[0] > 0 && ct[2] == 0 && ct[3] == 0 && ct[5] == 0, "top-k tie -> lowest id kept");
    sampler_free(s);
    /* The selection itself on a larger vocabulary: at a high temperature every one
     * of the top k is drawn often, so the drawn set must be exactly the top k. */
    enum { V = 1000 };
    float *v = malloc(V * sizeof *v);
    double *prob = malloc(V * sizeof *prob);
    mf_rng r;
    mf_rng_seed(&r, 8);
    for (int i = 0; i < V; i++) v[i] = mf_rng_normal(&r);
    v[15] = v[31] = 9.0f; /* ties at the top, at the end of a 16-block */
    const int kk[] = { 1, 2, 7, 16, 33 };
    for (size_t c = 0; c < sizeof kk / sizeof kk[0]; c++) {
        mf_sampler_params q = params_plain(1000.0f, 40 + c);
        q.top_k = kk[c];
        ref_dist(v, V, &q, NULL, 0, prob);
        mf_sampler *sk = new_or_fail(&q, V);
        if (!sk) break;
        int *seen = calloc(V, sizeof *seen);
        for (int i = 0; i < 300 * kk[c]; i++) seen[sampler_sample(sk, v)] = 1;
        int wrong = 0;
        for (int i = 0; i < V; i++) wrong += seen[i] != (prob[i] > 0.0);
        CHECK(wrong == 0, "top-k %d on %d tokens: drawn set differs from the top k in %d ids",
              kk[c], V, wrong);
        free(seen);
        sampler_free(sk);
    }
    free(v);
    free(prob);
    /* k >= n is off. */
    p.top_k = 99;
    s = new_or_fail(&p, 5);
    if (!s) return;
    check_draws(s, l, 5, &p, NULL, 0, 20000, "top-k > n");
    sampler_free(s);
}

static void test_top_p(void) {
    /* probabilities 0.5, 0.3, 0.15, 0.05 (in a shuffled id order) */
    const float l[4] = { logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f) };
    const struct { float p; int keep[4]; } cases[] = {
        { 0.40f, { 0, 1, 0, 0 } },  /* {0.5} */
        { 0.75f, { 0, 1, 0, 1 } },  /* {0.5, 0.3} */
        { 0.85f, { 1, 1, 0, 1 } },  /* {0.5, 0.3, 0.15} */
        { 0.99f, { 1, 1, 1, 1 } },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mf_sampler_params p = params_plain(1.0f, 11 + c);
        p.top_p = cases[c].p;
        mf_sampler *s = new_or_fail(&p, 4);
        if (!s) return;
        long cnt[4] = { 0 };
        for (int i = 0; i < 10000; i++) cnt[sampler_sample(s, l)]++;
        for (int t = 0; t < 4; t++)
            CHECK((cnt[t] > 0) == cases[c].keep[t], "top-p %.2f: token %d drawn %ld times", cases[c].p,
                  t, cnt[t]);
        char what[64];
        snprintf(what, sizeof what, "top-p %.2f", cases[c].p);
        check_draws(s, l, 4, &p, NULL, 0, 20000, what);
        sampler_free(s);
    }
    /* No top-k and a flat distribution: the best 256 tokens do not reach top_p, so
     * the histogram fallback runs. */
    enum { N = 600 };
    float *f = malloc(N * sizeof *f);
    mf_rng r;
    mf_rng_seed(&r, 99);
    for (int i = 0; i < N; i++) f[i] = 0.1f * mf_rng_normal(&r);
    mf_sampler_params p = params_plain(1.0f, 21);
    p.top_p = 0.9f;
    mf_sampler *s = new_or_fail(&p, N);
    if (s) check_draws(s, f, N, &p, NULL, 0, 20000, "top-p flat 600");
    sampler_free(s);
    /* ...and a peaked one where 256 suffice. */
    for (int i = 0; i < N; i++) f[i] = 4.0f * mf_rng_normal(&r);
    s = new_or_fail(&p, N);
    if (s) check_draws(s, f, N, &p, NULL, 0, 20000, "top-p peaked 600");
    sampler_free(s);
    free(f);
}

static void test_min_p(void) {
    const float l[4] = { logf(0.05f), logf(0.3f), logf(0.5f), logf(0.15f) };
    const struct { float m; int keep[4]; } cases[] = {
        { 0.2f, { 0, 1, 1, 1 } },  /* threshold 0.1 */
        { 0.5f, { 0, 1, 1, 0 } },  /* threshold 0.25 */
        { 0.9f, { 0, 0, 1, 0 } },
        { 1.5f, { 0, 0, 1, 0 } },  /* above 1: the best token survives */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int k = 0; k <= 4; k += 4) { /* unsorted path (no top-k) and sorted path */
            mf_sampler_params p = params_plain(1.0f, 31 + c);
            p.min_p = cases[c].m;
            p.top_k = k;
            mf_sampler *s = new_or_fail(&p, 4);
            if (!s) return;
            long cnt[4] = { 0 };
            for (int i = 0; i < 10000; i++) cnt[sampler_sample(s, l)]++;
            for (int t = 0; t < 4; t++)
                CHECK((cnt[t] > 0) == cases[c].keep[t], "min-p %.2f top-k %d: token %d drawn %ld",
                      cases[c].m, k, t, cnt[t]);
            char what[64];
            snprintf(what, sizeof what, "min-p %.2f top-k %d", cases[c].m, k);
            check_draws(s, l, 4, &p, NULL, 0, 20000, what);
            sampler_free(s);
        }
    }
}

static void test_temperature(void) {
    const float l[5] = { 1.0f, 0.5f, -0.3f, 2.0f, 0.0f };
    const float temps[] = { 0.7f, 1.0f, 1.8f };
    for (size_t i = 0; i < sizeof temps / sizeof temps[0]; i++) {
        mf_sampler_params p = params_plain(temps[i], 100 + i);
        mf_sampler *s = new_or_fail(&p, 5);
        if (!s) return;
        char what[64];
        snprintf(what, sizeof what, "temperature %.1f, 200k draws", temps[i]);
        check_draws(s, l, 5, &p, NULL, 0, 200000, what);
        sampler_free(s);
    }
}

/* Random logits (some masked) and random parameter combinations. */
static void test_chain_random(void) {
    enum { N = 50 };
    mf_rng r;
    mf_rng_seed(&r, 2024);
    for (int trial = 0; trial < 40; trial++) {
        float l[N];
        for (int i = 0; i < N; i++) {
            l[i] = 1.5f * mf_rng_normal(&r);
            if (mf_rng_uniform(&r) < 0.1f) l[i] = -INFINITY;
        }
        mf_sampler_params p = params_plain(0.3f + 1.7f * mf_rng_uniform(&r), 500 + trial);
        p.top_k = (int)(mf_rng_u64(&r) % 12);
        p.top_p = mf_rng_uniform(&r) < 0.3f ? 1.0f : 0.5f + 0.49f * mf_rng_uniform(&r);
        p.min_p = mf_rng_uniform(&r) < 0.3f ? 0.0f : 0.3f * mf_rng_uniform(&r);
        p.repeat_penalty = mf_rng_uniform(&r) < 0.5f ? 1.0f : 1.0f + mf_rng_uniform(&r);
        p.frequency_penalty = mf_rng_uniform(&r) < 0.5f ? 0.0f : 0.5f * mf_rng_uniform(&r);
        p.presence_penalty = mf_rng_uniform(&r) < 0.5f ? 0.0f : 0.5f * mf_rng_uniform(&r);
        p.repeat_last_n = (int)(mf_rng_u64(&r) % 8) - 1; /* -1 .. 6 */
        mf_sampler *s = new_or_fail(&p, N);
        if (!s) return;
        int32_t hist[10];
        for (int i = 0; i < 10; i++) {
            hist[i] = (int32_t)(mf_rng_u64(&r) % N);
            sampler_accept(s, hist[i]);
        }
        char what[160];
        snprintf(what, sizeof what,
                 "trial %d (temp %.2f k %d p %.3f min_p %.3f rep %.2f freq %.2f pres %.2f last_n %d)",
                 trial, p.temp, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.frequency_penalty,
                 p.presence_penalty, p.repeat_last_n);
        check_draws(s, l, N, &p, hist, 10, 20000, what);
        sampler_free(s);
    }
}

static void test_penalties(void) {
    mf_sampler_params p = params_plain(1.0f, 1);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.repeat_last_n = 64;
    mf_sampler *s = new_or_fail(&p, 6);
    if (!s) return;
    const int32_t acc[] = { 1, 2, 2, 5, -1, 6, 99 }; /* the last three are ignored */
    for (size_t i = 0; i < sizeof acc / sizeof acc[0]; i++) sampler_accept(s, acc[i]);
    float x[6] = { 1.0f, 2.0f, -2.0f, 0.0f, 3.0f, 4.0f };
    sampler_penalize(s, x);
    const float want[6] = { 1.0f, 2.0f / 2 - 0.75f, -2.0f * 2 - 1.25f, 0.0f, 3.0f, 4.0f / 2 - 0.75f };
    for (int i = 0; i < 6; i++) CHECK(x[i] == want[i], "penalty token %d: %g want %g", i, x[i], want[i]);
    /* Penalising twice from the same state gives the same result (scratch restored). */
    float y[6] = { 1.0f, 2.0f, -2.0f, 0.0f, 3.0f, 4.0f };
    sampler_penalize(s, y);
    CHECK(memcmp(x, y, sizeof x) == 0, "penalize repeatable");
    sampler_reset(s);
    float z[6] = { 1.0f, 2.0f, -2.0f, 0.0f, 3.0f, 4.0f };
    sampler_penalize(s, z);
    CHECK(z[1] == 2.0f && z[2] == -2.0f && z[5] == 4.0f, "reset clears history");
    sampler_free(s);

    /* Window of 2: after 1, 2, 2, 5 only {2, 5} count, once each. */
    p.repeat_last_n = 2;
    s = new_or_fail(&p, 6);
    if (!s) return;
    for (int i = 0; i < 4; i++) sampler_accept(s, acc[i]);
    float w[6] = { 1.0f, 2.0f, -2.0f, 0.0f, 3.0f, 4.0f };
    sampler_penalize(s, w);
    CHECK(w[1] == 2.0f && w[2] == -2.0f * 2 - 0.75f && w[5] == 4.0f / 2 - 0.75f,
          "window 2: %g %g %g", w[1], w[2], w[5]);
    sampler_free(s);

    /* last_n 0 is off. */
    p.repeat_last_n = 0;
    s = new_or_fail(&p, 6);
    if (!s) return;
    for (int i = 0; i < 4; i++) sampler_accept(s, acc[i]);
    float o[6] = { 1.0f, 2.0f, -2.0f, 0.0f, 3.0f, 4.0f };
    sampler_penalize(s, o);
    CHECK(o[1] == 2.0f && o[2] == -2.0f && o[5] == 4.0f, "last_n 0 off");
    sampler_free(s);

    /* Long histories through the compaction, window 3 and unbounded, against
     * counting by hand. */
    const int wins[] = { 3, 1, -1 };
    for (size_t k = 0; k < sizeof wins / sizeof wins[0]; k++) {
        enum { V = 7, H = 1000 };
        p.repeat_penalty = 1.5f;
        p.frequency_penalty = 0.125f;
        p.presence_penalty = 0.0f;
        p.repeat_last_n = wins[k];
        s = new_or_fail(&p, V);
        if (!s) return;
        int32_t *h = malloc(H * sizeof *h);
        mf_rng r;
        mf_rng_seed(&r, 77 + k);
        int bad = 0;
        for (int i = 0; i < H; i++) {
            h[i] = (int32_t)(mf_rng_u64(&r) % V);
            sampler_accept(s, h[i]);
            float a[V], b[V];
            for (int t = 0; t < V; t++) a[t] = b[t] = (float)t - 3.0f;
            sampler_penalize(s, a);
            int from = wins[k] < 0 ? 0 : MF_MAX(0, i + 1 - wins[k]);
            for (int t = 0; t < V; t++) {
                int c = 0;
                for (int j = from; j <= i; j++) c += h[j] == t;
                if (c) {
                    b[t] = b[t] <= 0.0f ? b[t] * 1.5f : b[t] / 1.5f;
                    b[t] -= (float)c * 0.125f;
                }
            }
            bad += memcmp(a, b, sizeof a) != 0;
        }
        CHECK(bad == 0, "window %d over %d tokens: %d mismatches", wins[k], H, bad);
        free(h);
        sampler_free(s);
    }

    /* Penalties change the greedy choice: 2.0 / 1.1 < 1.9, and -1.0 * 1.1 < -1.05. */
    p = params_plain(0.0f, 1);
    p.repeat_penalty = 1.1f;
    s = new_or_fail(&p, 2);
    if (!s) return;
    const float g1[2] = { 2.0f, 1.9f }, g2[2] = { -1.0f, -1.05f };
    CHECK(sampler_sample(s, g1) == 0 && sampler_sample(s, g2) == 0, "greedy before accept");
    sampler_accept(s, 0);
    CHECK(sampler_sample(s, g1) == 1, "penalised positive logit loses");
    CHECK(sampler_sample(s, g2) == 1, "penalised negative logit loses");
    sampler_free(s);
}

static void test_masked(void) {
    enum { N = 10 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = -INFINITY;
    l[2] = 0.5f; l[5] = 0.1f; l[7] = -0.2f; l[8] = NAN;
    const int ks[] = { 0, 2, 5, 20 };
    const float ps[] = { 1.0f, 0.9f }, ms[] = { 0.0f, 0.3f };
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 2; b++)
            for (size_t c = 0; c < 2; c++) {
                mf_sampler_params p = params_plain(1.3f, 900 + a * 4 + b * 2 + c);
                p.top_k = ks[a]; p.top_p = ps[b]; p.min_p = ms[c];
                p.repeat_penalty = 1.3f;
                p.presence_penalty = 0.5f;
                mf_sampler *s = new_or_fail(&p, N);
                if (!s) return;
                int32_t hist[2] = { 0, 5 }; /* penalising a masked token keeps it masked */
                sampler_accept(s, hist[0]);
                sampler_accept(s, hist[1]);
                char what[96];
                snprintf(what, sizeof what, "masked k %d p %.1f min_p %.1f", ks[a], ps[b], ms[c]);
                check_draws(s, l, N, &p, hist, 2, 5000, what);
                sampler_free(s);
            }
    mf_sampler_params p;
    sampler_params_default(&p);
    p.seed = 3;
    mf_sampler *s = new_or_fail(&p, N);
    if (!s) return;
    float all[N];
    for (int i = 0; i < N; i++) all[i] = i % 2 ? -INFINITY : NAN;
    CHECK(sampler_sample(s, all) == 0, "all masked -> 0");
    float inf[N];
    for (int i = 0; i < N; i++) inf[i] = (float)i;
    inf[6] = INFINITY;
    int ok = 1;
    for (int i = 0; i < 1000; i++) ok &= sampler_sample(s, inf) == 6;
    CHECK(ok, "+inf logit always drawn");
    sampler_free(s);
    /* repeat_penalty < 1 on a huge logit must not produce inf - inf. */
    p.repeat_penalty = 0.5f;
    s = new_or_fail(&p, N);
    if (!s) return;
    float big[N];
    for (int i = 0; i < N; i++) big[i] = 0.0f;
    big[4] = 3e38f;
    sampler_accept(s, 4);
    ok = 1;
    for (int i = 0; i < 100; i++) ok &= sampler_sample(s, big) == 4;
    CHECK(ok, "penalty overflow to +inf still draws the best token");
    sampler_free(s);
}

/* A Qwen2-sized vocabulary with llama.cpp's defaults, and with top-k off (the
 * adaptive top-p path): every draw must be in the reference support. */
static void test_large_vocab(void) {
    enum { N = 151936, DRAWS = 100 };
    float *l = malloc(N * sizeof *l);
    double *prob = malloc(N * sizeof *prob);
    mf_rng r;
    mf_rng_seed(&r, 5);
    for (int i = 0; i < N; i++) l[i] = 2.5f * mf_rng_normal(&r);
    for (int k = 40; k >= 0; k -= 40) {
        mf_sampler_params p;
        sampler_params_default(&p);
        p.seed = 17;
        p.top_k = k;
        mf_sampler *s = new_or_fail(&p, N);
        if (!s) break;
        ref_dist(l, N, &p, NULL, 0, prob);
        int outside = 0;
        double t0 = mf_time_s();
        for (int i = 0; i < DRAWS; i++) {
            int32_t t = sampler_sample(s, l);
            outside += t < 0 || t >= N || prob[t] == 0.0;
        }
        double dt = mf_time_s() - t0;
        CHECK(outside == 0, "vocab %d top-k %d: %d draws outside the support", N, k, outside);
        printf("vocab %d, top-k %d: %.3f ms per sample (sanitizer build)\n", N, k, 1e3 * dt / DRAWS);
        sampler_free(s);
    }
    free(l);
    free(prob);
}

/* sampler_logprobs against a double-precision log-softmax written out plainly. */
static void test_logprobs(void) {
    enum { N = 1000 };
    float *l = malloc(N * sizeof *l);
    mf_rng r;
    mf_rng_seed(&r, 11);
    for (int i = 0; i < N; i++) l[i] = 3.0f * mf_rng_normal(&r);
    l[17] = l[18] = 20.0f; /* a tie at the top: lower id first */
    l[5] = NAN;            /* never drawn: -inf */
    mf_sampler_params p = params_plain(0.7f, 3);
    p.top_k = 5; /* filters do not change the reported distribution */
    mf_sampler *s = new_or_fail(&p, N);
    if (!s) { free(l); return; }
    double max = -INFINITY, sum = 0.0;
    for (int i = 0; i < N; i++) if (!isnan(l[i]) && l[i] > max) max = l[i];
    for (int i = 0; i < N; i++) if (!isnan(l[i])) sum += exp(l[i] - max);
    double lse = max + log(sum);
    sampler_logprob top[8];
    float lp = 0.0f;
    int got = sampler_logprobs(s, l, 123, 8, &lp, top);
    CHECK(got == 8, "k written %d", got);
    CHECK(fabs(lp - (l[123] - lse)) < 1e-5, "token 123: %g want %g", lp, l[123] - lse);
    CHECK(top[0].id == 17 && top[1].id == 18, "tie order %d %d", top[0].id, top[1].id);
    int sorted = 1, exact = 1;
    for (int i = 0; i < 8; i++) {
        if (i && top[i].logprob > top[i - 1].logprob) sorted = 0;
        if (fabs(top[i].logprob - (l[top[i].id] - lse)) > 1e-5) exact = 0;
    }
    CHECK(sorted && exact, "top-8 sorted %d, values %d", sorted, exact);
    /* the 8th best is not beaten by any token outside the list */
    int beaten = 0;
    for (int i = 0; i < N; i++) {
        int in = 0;
        for (int j = 0; j < 8; j++) in |= top[j].id == i;
        if (!in && !isnan(l[i]) && l[i] > l[top[7].id]) beaten++;
    }
    CHECK(beaten == 0, "%d tokens outside the top-8 beat its last", beaten);
    sampler_logprobs(s, l, 5, 0, &lp, NULL);
    CHECK(lp == -INFINITY, "NaN logit: %g", lp);
    double mass = 0.0;
    for (int i = 0; i < N; i++) {
        float li;
        sampler_logprobs(s, l, i, 0, &li, NULL);
        mass += exp(li);
    }
    CHECK(fabs(mass - 1.0) < 1e-4, "probabilities sum to %.6f", mass);
    /* k above the vocabulary is clamped; a draw after logprobs is as without them */
    sampler_logprob all[6];
    float small[6] = { 0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f };
    mf_sampler *t = new_or_fail(&p, 6);
    if (t) {
        CHECK(sampler_logprobs(t, small, 0, 100, NULL, all) == 6, "k clamped to n_vocab");
        CHECK(all[0].id == 5 && all[5].id == 0, "order %d..%d", all[0].id, all[5].id);
        sampler_free(t);
    }
    mf_sampler *a = new_or_fail(&p, N), *b = new_or_fail(&p, N);
    if (a && b) {
        int same = 1;
        for (int i = 0; i < 50; i++) {
            sampler_logprobs(a, l, i, 8, &lp, top);
            int32_t ta = sampler_sample(a, l), tb = sampler_sample(b, l);
            same &= ta == tb;
        }
        CHECK(same, "draws unchanged by logprobs calls");
    }
    sampler_free(a);
    sampler_free(b);
    /* penalties are in: presence 2 lowers token 17 below 18 */
    mf_sampler_params q = params_plain(1.0f, 1);
    q.presence_penalty = 2.0f;
    q.repeat_last_n = -1;
    mf_sampler *pp = new_or_fail(&q, N);
    if (pp) {
        sampler_accept(pp, 17);
        sampler_logprobs(pp, l, 17, 2, &lp, top);
        /* 20 - 2 = 18 is still above every random logit (3 sigma of 1000 draws is < 12) */
        CHECK(top[0].id == 18 && top[1].id == 17, "penalised top: %d %d", top[0].id, top[1].id);
        double lse2 = 0.0, m2 = 20.0;
        for (int i = 0; i < N; i++) if (!isnan(l[i])) lse2 += exp((i == 17 ? l[i] - 2.0 : l[i]) - m2);
        lse2 = m2 + log(lse2);
        CHECK(fabs(lp - (18.0 - lse2)) < 1e-5 && fabs(top[0].logprob - (20.0 - lse2)) < 1e-5,
              "penalised logprob %g want %g; best %g want %g", lp, 18.0 - lse2, top[0].logprob, 20.0 - lse2);
        sampler_free(pp);
    }
    /* every token masked */
    float masked[4] = { -INFINITY, NAN, -INFINITY, -INFINITY };
    mf_sampler *m4 = new_or_fail(&p, 4);
    if (m4) {
        sampler_logprobs(m4, masked, 1, 2, &lp, top);
        CHECK(lp == -INFINITY && top[0].logprob == -INFINITY, "all masked");
        sampler_free(m4);
    }
    sampler_free(s);
    free(l);
}

int main(void) {
    test_defaults();
    test_bad_params();
    test_greedy();
    test_seed();
    test_top_k();
    test_top_p();
    test_min_p();
    test_temperature();
    test_chain_random();
    test_penalties();
    test_masked();
    test_large_vocab();
    test_logprobs();
    return test_summary("test_sampler");
}

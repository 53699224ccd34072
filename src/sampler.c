/* sampler.c - greedy and llama.cpp-style chained sampling (see sampler.h for the
 * exact definitions of each stage).
 *
 * Cost per call, n = n_vocab (150k for Qwen2), k = top_k: one O(n) pass to copy
 * and penalise, an O(n) scan with a k-entry heap for top-k (almost every token is
 * rejected by one comparison with the heap's root), then O(k) for the rest. Without
 * top-k, top-p first tries the best 256 tokens and sorts everything only when their
 * mass falls short of top_p (llama.cpp's adaptive trick). sampler_sample allocates
 * nothing; only an unbounded penalty window grows its history in sampler_accept. */
#include "sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct sampler_cand {
    float logit;
    int32_t id;
} sampler_cand;

struct mf_sampler {
    mf_sampler_params p;
    int n_vocab;
    uint64_t seed;         /* the seed actually used */
    mf_rng rng;
    float *work;           /* [n_vocab] penalised, sanitised logits of this call */
    float *weight;         /* [n_vocab] exp((logit - max) / temp) of the candidates */
    sampler_cand *cand;    /* [n_vocab] explicit candidates, best first when sorted */
    int32_t *count;        /* [n_vocab] occurrences inside the penalty window */
    int32_t *hist;         /* [hist_cap] accepted tokens, oldest first */
    size_t hist_len, hist_cap;
};

void sampler_params_default(mf_sampler_params *p) {
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->seed = SAMPLER_SEED_RANDOM;
}

int sampler_params_check(const mf_sampler_params *p, int n_vocab, mf_err *err) {
    if (n_vocab <= 0) return mf_fail(err, MF_ERR_USAGE, "sampler: n_vocab %d, want > 0", n_vocab);
    if (!isfinite(p->temp)) return mf_fail(err, MF_ERR_USAGE, "sampler: temp %g is not finite", p->temp);
    if (isnan(p->top_p)) return mf_fail(err, MF_ERR_USAGE, "sampler: top_p is NaN");
    if (isnan(p->min_p)) return mf_fail(err, MF_ERR_USAGE, "sampler: min_p is NaN");
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
        return mf_fail(err, MF_ERR_USAGE, "sampler: repeat_penalty %g, want a finite value > 0",
                       p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return mf_fail(err, MF_ERR_USAGE, "sampler: presence/frequency penalty not finite");
    return MF_OK;
}

/* A clock- and pid-derived seed; mf_rng_seed's splitmix64 spreads its bits. */
static uint64_t seed_from_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40);
}

mf_sampler *sampler_new(const mf_sampler_params *p, int n_vocab, mf_err *err) {
    if (sampler_params_check(p, n_vocab, err) != MF_OK) return NULL;
    mf_sampler *s = calloc(1, sizeof *s);
    if (!s) {
        mf_fail(err, MF_ERR_NOMEM, "sampler: out of memory");
        return NULL;
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->work = malloc(n * sizeof *s->work);
    s->weight = malloc(n * sizeof *s->weight);
    s->cand = malloc(n * sizeof *s->cand);
    s->count = calloc(n, sizeof *s->count);
    /* A finite window keeps at most 2 * last_n tokens (compacted in sampler_accept);
     * an unbounded or very long one starts small and grows. */
    s->hist_cap = p->repeat_last_n > 0 && p->repeat_last_n <= 65536 ? 2 * (size_t)p->repeat_last_n : 256;
    s->hist = malloc(s->hist_cap * sizeof *s->hist);
    if (!s->work || !s->weight || !s->cand || !s->count || !s->hist) {
        sampler_free(s);
        mf_fail(err, MF_ERR_NOMEM, "sampler: out of memory for n_vocab %d", n_vocab);
        return NULL;
    }
    s->seed = p->seed == SAMPLER_SEED_RANDOM ? seed_from_clock() : p->seed;
    mf_rng_seed(&s->rng, s->seed);
    return s;
}

void sampler_free(mf_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->weight);
    free(s->cand);
    free(s->count);
    free(s->hist);
    free(s);
}

uint64_t sampler_seed(const mf_sampler *s) { return s->seed; }

/* ---------------------------------------------------------------- penalties */

static int penalties_on(const mf_sampler_params *p) {
    return p->repeat_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

void sampler_accept(mf_sampler *s, int32_t tok) {
    if (tok < 0 || tok >= s->n_vocab || s->p.repeat_last_n == 0) return;
    size_t last_n = s->p.repeat_last_n > 0 ? (size_t)s->p.repeat_last_n : 0;
    if (s->hist_len == s->hist_cap) {
        if (last_n && s->hist_cap >= 2 * last_n) {
            /* Keep the last last_n entries: the oldest of them leaves the window
             * with this token (its count drops below), the rest stay in it. */
            memmove(s->hist, s->hist + s->hist_len - last_n, last_n * sizeof *s->hist);
            s->hist_len = last_n;
        } else {
            s->hist_cap *= 2;
            s->hist = mf_xrealloc(s->hist, s->hist_cap * sizeof *s->hist);
        }
    }
    s->hist[s->hist_len++] = tok;
    s->count[tok]++;
    if (last_n && s->hist_len > last_n) s->count[s->hist[s->hist_len - 1 - last_n]]--;
}

void sampler_reset(mf_sampler *s) {
    for (size_t i = 0; i < s->hist_len; i++) s->count[s->hist[i]] = 0;
    s->hist_len = 0;
}

void sampler_penalize(mf_sampler *s, float *logits) {
    if (!penalties_on(&s->p)) return;
    size_t w = s->hist_len;
    if (s->p.repeat_last_n > 0 && (size_t)s->p.repeat_last_n < w) w = (size_t)s->p.repeat_last_n;
    const int32_t *win = s->hist + s->hist_len - w;
    /* Each distinct token is penalised once: its count is negated while visited
     * and restored afterwards, which needs no extra workspace. */
    for (size_t i = 0; i < w; i++) {
        int32_t t = win[i];
        int32_t c = s->count[t];
        if (c <= 0) continue;
        float l = logits[t];
        l = l <= 0.0f ? l * s->p.repeat_penalty : l / s->p.repeat_penalty;
        logits[t] = l - ((float)c * s->p.frequency_penalty + s->p.presence_penalty);
        s->count[t] = -c;
    }
    for (size_t i = 0; i < w; i++)
        if (s->count[win[i]] < 0) s->count[win[i]] = -s->count[win[i]];
}

/* ---------------------------------------------------------------- selection */

/* The order every stage agrees on: larger logit first, lower id on ties. */
static inline int cand_better(sampler_cand a, sampler_cand b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/* Heap with the worst candidate at the root. */
static void heap_sift_down(sampler_cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_better(h[w], h[l])) w = l;
        if (r < n && cand_better(h[w], h[r])) w = r;
        if (w == i) return;
        sampler_cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

static void heap_sift_up(sampler_cand *h, int i) {
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_better(h[p], h[i])) return;
        sampler_cand t = h[i]; h[i] = h[p]; h[p] = t;
        i = p;
    }
}

/* Writes the best m of x[0..n) to out[0..m), best first (1 <= m <= n). */
static void select_top(const float *x, int n, int m, sampler_cand *out) {
    int h = 0;
    for (int i = 0; i < n; i++) {
        sampler_cand c = { x[i], i };
        if (h < m) {
            out[h] = c;
            heap_sift_up(out, h++);
        } else if (cand_better(c, out[0])) {
            out[0] = c;
            heap_sift_down(out, m, 0);
        }
    }
    /* Heap sort: the worst goes last, leaving the array best first. */
    for (int end = m - 1; end > 0; end--) {
        sampler_cand t = out[0]; out[0] = out[end]; out[end] = t;
        heap_sift_down(out, end, 0);
    }
}

/* ---------------------------------------------------------------- sampling */

/* The candidate set between stages: either every token (all = 1, logits in work[])
 * or the explicit list cand[0..n), best first when sorted. */
typedef struct cand_set {
    int all, sorted, n;
} cand_set;

static inline float cs_logit(const mf_sampler *s, const cand_set *cs, int i) {
    return cs->all ? s->work[i] : s->cand[i].logit;
}

static inline int32_t cs_id(const mf_sampler *s, const cand_set *cs, int i) {
    return cs->all ? i : s->cand[i].id;
}

static float cs_max(const mf_sampler *s, const cand_set *cs) {
    if (!cs->all && cs->sorted) return s->cand[0].logit;
    float m = -INFINITY;
    for (int i = 0; i < cs->n; i++) m = fmaxf(m, cs_logit(s, cs, i));
    return m;
}

/* Keeps the smallest best-first prefix of cs whose probability mass is >= top_p. */
static void apply_top_p(mf_sampler *s, cand_set *cs, float top_p) {
    float max = cs_max(s, cs);
    double sum = 0.0;
    for (int i = 0; i < cs->n; i++) sum += expf(cs_logit(s, cs, i) - max);
    if (cs->all) {
        /* Usually a few hundred tokens hold the mass; sort everything only if not. */
        int m = MF_MIN(256, cs->n);
        for (;;) {
            select_top(s->work, s->n_vocab, m, s->cand);
            double cum = 0.0;
            int keep = 0;
            for (int i = 0; i < m; i++) {
                cum += expf(s->cand[i].logit - max) / sum;
                if (cum >= top_p) { keep = i + 1; break; }
            }
            if (keep || m == cs->n) {
                *cs = (cand_set){ .all = 0, .sorted = 1, .n = keep ? keep : m };
                return;
            }
            m = cs->n;
        }
    }
    double cum = 0.0;
    for (int i = 0; i < cs->n; i++) {
        cum += expf(s->cand[i].logit - max) / sum;
        if (cum >= top_p) { cs->n = i + 1; return; }
    }
}

/* Keeps tokens with logit >= max + log(min_p) (always the best one). */
static void apply_min_p(mf_sampler *s, cand_set *cs, float min_p) {
    float max = cs_max(s, cs);
    float thr = max + logf(min_p);
    if (thr > max) thr = max;
    if (!cs->all && cs->sorted) {
        int i = 1;
        while (i < cs->n && s->cand[i].logit >= thr) i++;
        cs->n = i;
        return;
    }
    int k = 0;
    for (int i = 0; i < cs->n; i++) {
        float l = cs_logit(s, cs, i);
        if (l >= thr) s->cand[k++] = (sampler_cand){ l, cs_id(s, cs, i) };
    }
    *cs = (cand_set){ .all = 0, .sorted = 0, .n = k };
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_unit(mf_rng *r) { return (double)(mf_rng_u64(r) >> 11) * 0x1.0p-53; }

int32_t sampler_sample(mf_sampler *s, const float *logits) {
    const int n = s->n_vocab;
    float *w = s->work;
    memcpy(w, logits, (size_t)n * sizeof *w);
    sampler_penalize(s, w);
    /* NaN can never win; +inf becomes the largest finite value so that
     * (logit - max) stays finite for the best tokens. */
    for (int i = 0; i < n; i++) {
        if (isnan(w[i])) w[i] = -INFINITY;
        else if (w[i] > FLT_MAX) w[i] = FLT_MAX;
    }

    if (s->p.temp <= 0.0f) {
        int32_t best = 0;
        for (int i = 1; i < n; i++)
            if (w[i] > w[best]) best = i;
        return best;
    }

    cand_set cs = { .all = 1, .sorted = 0, .n = n };
    if (cs_max(s, &cs) == -INFINITY) return 0; /* every token masked */

    if (s->p.top_k > 0 && s->p.top_k < n) {
        select_top(w, n, s->p.top_k, s->cand);
        cs = (cand_set){ .all = 0, .sorted = 1, .n = s->p.top_k };
    }
    if (s->p.top_p < 1.0f) apply_top_p(s, &cs, s->p.top_p);
    if (s->p.min_p > 0.0f) apply_min_p(s, &cs, s->p.min_p);

    /* Temperature and the draw. The best candidate has weight 1, so sum >= 1. */
    float max = cs_max(s, &cs);
    float temp = s->p.temp;
    double sum = 0.0;
    for (int i = 0; i < cs.n; i++) {
        /* Divide rather than multiply by 1/temp: for a tiny temp 1/temp is inf and
         * the best token's 0 * inf would be NaN. */
        s->weight[i] = expf((cs_logit(s, &cs, i) - max) / temp);
        sum += s->weight[i];
    }
    double target = rng_unit(&s->rng) * sum, cum = 0.0;
    int last = 0;
    for (int i = 0; i < cs.n; i++) {
        if (s->weight[i] <= 0.0f) continue;
        cum += s->weight[i];
        last = i;
        /* Strictly greater: a zero-weight token can never be chosen. */
        if (cum > target) return cs_id(s, &cs, i);
    }
    return cs_id(s, &cs, last); /* rounding left target at the very end */
}

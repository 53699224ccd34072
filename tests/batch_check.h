/* batch_check.h - the check behind tests/test_batch.c (CPU) and
 * tests/cuda/test_cuda_batch.c (CUDA): N sequences with different prompts decoded
 * together through minfer_decode_batch against each sequence decoded alone.
 *
 *   batch_solo()  the reference: one context of one sequence slot; per sequence,
 *                 clear, minfer_eval of its prompt, then greedy minfer_decode steps.
 *                 Keeps every step's logits, greedy token and top-2 margin.
 *   batch_run()   one context of n sequence slots; minfer_eval of each prompt, then
 *                 per step every sequence gets its next greedy token in calls of
 *                 `chunk` pairs (the chunk size cycles through a list, the pair
 *                 order rotates every step), so one run sees several batch shapes.
 *
 * A sequence's comparison stops at its first token divergence (its inputs differ
 * from then on); the result names the first one (step, solo top-2 margin there)
 * and whether every logit before it was bitwise equal. Uses only include/minfer.h (and
 * test.h's test_argmax). */
#ifndef MINFER_TESTS_BATCH_CHECK_H
#define MINFER_TESTS_BATCH_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer.h"
#include "test.h"

typedef struct batch_prompts {
    int n;          /* sequences */
    int32_t **ids;  /* [n][len[i]] prompt ids */
    int *len;       /* [n] */
} batch_prompts;

/* Greedy steps kept per sequence: tok[s][k], k = 0..n_steps; tok[s][0] is the
 * argmax of the prompt's logits, tok[s][k] that of decode step k. */
typedef struct batch_trace {
    int n_seq, n_steps, n_vocab;
    int32_t *tok;    /* [n_seq][n_steps + 1] */
    float *margin;   /* [n_seq][n_steps + 1] top-2 margin of those logits */
    float *logits;   /* [n_seq][n_steps + 1][n_vocab] */
} batch_trace;

typedef struct batch_result {
    int seqs_diverged;       /* sequences whose greedy tokens differ from alone */
    int first_seq, first_k;  /* earliest divergence (smallest step; -1 = none) */
    int32_t tok_solo, tok_batch;
    float margin_solo, margin_batch;
    int bitwise;             /* 1: every compared logit bitwise equal */
    double max_diff;         /* largest |logit difference| over the compared steps */
    double max_abs;          /* largest |logit| over the same steps (scale of max_diff) */
    double max_nerr;         /* largest normalised row error |b - a| / |a| (2-norms) over them */
    int finite;              /* 1: every batched logit compared was finite */
    int calls;               /* minfer_decode_batch calls */
    int shapes_seen[1025];   /* [n] = 1 when a call had n pairs (n <= 1024) */
} batch_result;

/* Prompts: texts[i] tokenized (with BOS) for i < n_texts, then pseudo-random ids
 * (BOS first) of 3 + (i * 7) % 19 tokens. Returns 0, or -1 with a message. */
static inline int batch_prompts_make(batch_prompts *p, const minfer_model *m, int n, const char *const *texts,
                                     int n_texts, uint64_t seed) {
    p->n = n;
    p->ids = calloc((size_t)n, sizeof *p->ids);
    p->len = calloc((size_t)n, sizeof *p->len);
    if (!p->ids || !p->len) return -1;
    const int nv = minfer_n_vocab(m);
    const int32_t bos = minfer_token_bos(m);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        if (i < n_texts) {
            int32_t buf[512];
            const int len = minfer_tokenize(m, texts[i], strlen(texts[i]), 1, 0, buf, 512);
            if (len < 1 || len > 512) { fprintf(stderr, "tokenize '%s': %d tokens\n", texts[i], len); return -1; }
            p->ids[i] = malloc(sizeof(int32_t) * (size_t)len);
            if (!p->ids[i]) return -1;
            memcpy(p->ids[i], buf, sizeof(int32_t) * (size_t)len);
            p->len[i] = len;
            continue;
        }
        const int len = 3 + (i * 7) % 19;
        p->ids[i] = malloc(sizeof(int32_t) * (size_t)len);
        if (!p->ids[i]) return -1;
        for (int j = 0; j < len; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;  /* xorshift64 */
            p->ids[i][j] = (int32_t)(x % (uint64_t)nv);
        }
        if (bos >= 0 && bos < nv) p->ids[i][0] = bos;
        p->len[i] = len;
    }
    return 0;
}

static inline void batch_prompts_free(batch_prompts *p) {
    for (int i = 0; p->ids && i < p->n; i++) free(p->ids[i]);
    free(p->ids);
    free(p->len);
    memset(p, 0, sizeof *p);
}

static inline int batch_trace_init(batch_trace *t, int n_seq, int n_steps, int n_vocab) {
    t->n_seq = n_seq, t->n_steps = n_steps, t->n_vocab = n_vocab;
    const size_t rows = (size_t)n_seq * (size_t)(n_steps + 1);
    t->tok = malloc(sizeof(int32_t) * rows);
    t->margin = malloc(sizeof(float) * rows);
    t->logits = malloc(sizeof(float) * rows * (size_t)n_vocab);
    return t->tok && t->margin && t->logits ? 0 : -1;
}

static inline void batch_trace_free(batch_trace *t) {
    free(t->tok);
    free(t->margin);
    free(t->logits);
    memset(t, 0, sizeof *t);
}

static inline void batch_trace_put(batch_trace *t, int s, int k, const float *lg) {
    const size_t row = (size_t)s * (size_t)(t->n_steps + 1) + (size_t)k;
    memcpy(t->logits + row * (size_t)t->n_vocab, lg, sizeof(float) * (size_t)t->n_vocab);
    t->tok[row] = test_argmax(lg, t->n_vocab, &t->margin[row]);
}

/* The reference: each sequence alone in ctx (one slot), cleared first. */
static inline int batch_solo(minfer_ctx *c, const batch_prompts *p, batch_trace *t, char *err, size_t cap) {
    for (int s = 0; s < p->n; s++) {
        if (minfer_seq_clear(c, 0, err, cap)) return -1;
        const float *lg = minfer_eval(c, 0, p->ids[s], p->len[s], err, cap);
        if (!lg) return -1;
        batch_trace_put(t, s, 0, lg);
        for (int k = 1; k <= t->n_steps; k++) {
            lg = minfer_decode(c, 0, t->tok[(size_t)s * (t->n_steps + 1) + k - 1], err, cap);
            if (!lg) return -1;
            batch_trace_put(t, s, k, lg);
        }
    }
    return 0;
}

/* All p->n sequences in ctx (at least p->n slots): prompts by minfer_eval, then
 * n_steps steps; step k's calls hold chunks[(k-1) % n_chunks] pairs (the last call
 * of a step fewer), pairs in the order seq (k + i) % n. */
static inline int batch_run(minfer_ctx *c, const batch_prompts *p, batch_trace *t, const int *chunks, int n_chunks,
                            batch_result *r, char *err, size_t cap) {
    const int n = p->n, st = t->n_steps + 1;
    int *seqs = malloc(sizeof(int) * (size_t)n);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n);
    if (!seqs || !toks) { free(seqs); free(toks); snprintf(err, cap, "out of memory"); return -1; }
    int rc = 0;
    for (int s = 0; s < n && !rc; s++) {
        if (minfer_seq_clear(c, s, err, cap)) { rc = -1; break; }
        const float *lg = minfer_eval(c, s, p->ids[s], p->len[s], err, cap);
        if (!lg) rc = -1;
        else batch_trace_put(t, s, 0, lg);
    }
    for (int k = 1; k <= t->n_steps && !rc; k++) {
        const int chunk = chunks[(k - 1) % n_chunks];
        for (int i0 = 0; i0 < n && !rc; i0 += chunk) {
            const int nb = n - i0 < chunk ? n - i0 : chunk;
            for (int i = 0; i < nb; i++) {
                seqs[i] = (k + i0 + i) % n;
                toks[i] = t->tok[(size_t)seqs[i] * st + k - 1];
            }
            const float *lg = minfer_decode_batch(c, seqs, toks, nb, err, cap);
            if (!lg) { rc = -1; break; }
            r->calls++;
            if (nb <= 1024) r->shapes_seen[nb] = 1;
            for (int i = 0; i < nb; i++) batch_trace_put(t, seqs[i], k, lg + (size_t)i * t->n_vocab);
        }
    }
    free(seqs);
    free(toks);
    return rc;
}

/* Compares sequences 0..n-1 of a batched trace to the solo one (see batch_result);
 * the traces may hold more sequences (a solo trace made once for the largest n). */
static inline void batch_compare(const batch_trace *solo, const batch_trace *bt, int n, batch_result *r) {
    const int st = solo->n_steps + 1, nv = solo->n_vocab;
    r->seqs_diverged = 0;
    r->first_seq = r->first_k = -1;
    r->bitwise = r->finite = 1;
    r->max_diff = r->max_abs = r->max_nerr = 0;
    for (int s = 0; s < n; s++) {
        for (int k = 0; k < st; k++) {
            const size_t row = (size_t)s * st + k;
            const float *a = solo->logits + row * nv, *b = bt->logits + row * nv;
            if (memcmp(a, b, sizeof(float) * (size_t)nv)) r->bitwise = 0;
            double dd = 0, aa = 0;
            for (int v = 0; v < nv; v++) {
                const double d = fabs((double)a[v] - b[v]);
                if (!isfinite(b[v])) r->finite = 0;
                if (d > r->max_diff || d != d) r->max_diff = d;
                if (fabs(a[v]) > r->max_abs) r->max_abs = fabs(a[v]);
                dd += d * d;
                aa += (double)a[v] * a[v];
            }
            const double ne = aa > 0 ? sqrt(dd / aa) : sqrt(dd);
            if (ne > r->max_nerr || ne != ne) r->max_nerr = ne;
            if (solo->tok[row] != bt->tok[row]) {
                r->seqs_diverged++;
                if (r->first_k < 0 || k < r->first_k) {
                    r->first_seq = s, r->first_k = k;
                    r->tok_solo = solo->tok[row], r->tok_batch = bt->tok[row];
                    r->margin_solo = solo->margin[row], r->margin_batch = bt->margin[row];
                }
                break;  /* the next step's inputs differ */
            }
        }
    }
}

/* One line: the calls' sizes, tokens identical or the first divergence (with the
 * top-2 margins there), bitwise or the size of the logit differences. */
static inline void batch_report(FILE *f, const char *what, int n, const batch_trace *solo, const batch_result *r) {
    fprintf(f, "%s: %d x %d steps, %d calls of", what, n, solo->n_steps, r->calls);
    for (int i = 1; i <= 1024; i++)
        if (r->shapes_seen[i]) fprintf(f, " %d", i);
    fprintf(f, " pairs: ");
    if (r->seqs_diverged == 0) fprintf(f, "tokens identical to alone");
    else
        fprintf(f, "%d sequence%s diverge; first: sequence %d at step %d (alone %d, batched %d; top-2 margin alone %.4g, "
                "batched %.4g)", r->seqs_diverged, r->seqs_diverged == 1 ? "" : "s", r->first_seq, r->first_k,
                r->tok_solo, r->tok_batch, r->margin_solo, r->margin_batch);
    fprintf(f, "; logits %s (max |diff| %.3g of max |logit| %.3g, normalised row error max %.3g)%s\n",
            r->bitwise ? "bitwise equal" : "differ", r->max_diff, r->max_abs, r->max_nerr,
            r->finite ? "" : "; NON-FINITE logits");
}

#endif

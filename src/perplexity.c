/* perplexity.c - see perplexity.h. */
#include "perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"

double ppl_nll(const float *logits, int n_vocab, int32_t tok) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - mx));
    return -((double)(logits[tok] - mx) - log(sum));
}

void ppl_add(ppl_acc *a, const float *logits, int n_vocab, const int32_t *next, int n) {
    for (int i = 0; i < n; i++) {
        const double v = ppl_nll(logits + (int64_t)i * n_vocab, n_vocab, next[i]);
        a->nll += v;
        a->nll2 += v * v;
        a->count++;
    }
}

double ppl_value(const ppl_acc *a) { return a->count ? exp(a->nll / (double)a->count) : 0.0; }

double ppl_error(const ppl_acc *a) {
    if (a->count < 2) return 0.0;
    const double mean = a->nll / (double)a->count;
    const double var = a->nll2 / (double)a->count - mean * mean;
    if (!(var > 0)) return 0.0;
    return sqrt(var / (double)(a->count - 1)) * exp(mean);
}

int ppl_eval(mf_context *c, const int32_t *toks, int n_tok, int n_ctx, int32_t bos, int n_chunks_max, ppl_acc *a,
             ppl_progress_fn progress, void *ud, mf_err *err) {
    if (n_ctx < 4) return mf_fail(err, MF_ERR_INPUT, "perplexity: a context of %d tokens (4 at least)", n_ctx);
    if (n_ctx > c->n_batch || n_ctx > c->n_ctx)
        return mf_fail(err, MF_ERR_USAGE, "perplexity: chunks of %d tokens need a context and batch of as many (%d, %d)",
                       n_ctx, c->n_ctx, c->n_batch);
    int n_chunks = n_tok / n_ctx;
    if (n_chunks < 1)
        return mf_fail(err, MF_ERR_INPUT, "perplexity: %d tokens, fewer than one chunk of %d (use a smaller --ctx)",
                       n_tok, n_ctx);
    if (n_chunks_max > 0 && n_chunks > n_chunks_max) n_chunks = n_chunks_max;
    const int first = n_ctx / 2, n_score = n_ctx - 1 - first, n_vocab = c->m->hp.n_vocab;
    int32_t *tok = mf_xmalloc(sizeof(int32_t) * (size_t)n_ctx);
    int32_t *pos = mf_xmalloc(sizeof(int32_t) * (size_t)n_ctx);
    int32_t *seq = mf_xcalloc((size_t)n_ctx, sizeof(int32_t));
    int8_t *want = mf_xcalloc((size_t)n_ctx, 1);
    /* only the scored rows' logits are computed and kept: n_score x n_vocab floats
     * (256 x 262144 x 4 = 268 MB for gemma3 at --ctx 512) */
    float *logits = malloc(sizeof(float) * (size_t)n_score * (size_t)n_vocab);
    int rc = 0;
    if (!logits) {
        rc = mf_fail(err, MF_ERR_NOMEM, "perplexity: cannot allocate %zu bytes of logits",
                     sizeof(float) * (size_t)n_score * (size_t)n_vocab);
        goto out;
    }
    for (int i = 0; i < n_ctx; i++) {
        pos[i] = i;
        want[i] = i >= first && i < first + n_score;
    }
    const double t0 = mf_time_s();
    for (int ch = 0; ch < n_chunks; ch++) {
        const int32_t *src = toks + (int64_t)ch * n_ctx;
        memcpy(tok, src, sizeof(int32_t) * (size_t)n_ctx);
        if (bos >= 0) tok[0] = bos;
        /* a chunk starts from an empty cache: positions 0.. overwrite the last chunk's, and
         * attention reads positions <= pos only; the context's bookkeeping is reset too */
        if ((rc = context_seq_clear(c, 0, err))) goto out;
        const mf_batch b = { .n = n_ctx, .tok = tok, .pos = pos, .seq = seq, .logits = want };
        const int got = forward_step(&c->fw, &b, logits, err);
        if (got < 0) { rc = got; goto out; }
        if (got != n_score) {
            rc = mf_fail(err, MF_ERR_DEVICE, "perplexity: %d rows of logits, expected %d", got, n_score);
            goto out;
        }
        ppl_add(a, logits, n_vocab, src + first + 1, n_score);
        if (progress) progress(ud, ch + 1, n_chunks, a, mf_time_s() - t0);
    }
    rc = n_chunks;
out:
    free(logits);
    free(tok);
    free(pos);
    free(seq);
    free(want);
    return rc;
}

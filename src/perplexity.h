/* perplexity.h - perplexity as llama.cpp's llama-perplexity computes it
 * (tools/perplexity/perplexity.cpp, perplexity()): the text is tokenized whole (BOS first
 * where the vocab adds one), cut into floor(n_tokens / n_ctx) non-overlapping chunks of
 * n_ctx tokens; each chunk is evaluated from an empty cache, its first token replaced by
 * BOS where the vocab adds one; the logits at positions n_ctx/2 .. n_ctx-2 of each chunk
 * are scored against the token that follows (the second half: every scored token sees at
 * least n_ctx/2 tokens of context). With nll_i = -log softmax(logits_i)[next_i] over all
 * scored tokens, PPL = exp(mean nll) and its error exp(mean nll) * sqrt(var(nll) / (N - 1)),
 * var(nll) = mean(nll^2) - mean(nll)^2 (llama.cpp's "+/-"). */
#ifndef MINFER_PERPLEXITY_H
#define MINFER_PERPLEXITY_H

#include <stdint.h>

#include "context.h"
#include "util.h"

typedef struct ppl_acc {
    double nll, nll2;  /* sums of nll and nll^2 */
    int64_t count;     /* tokens scored */
} ppl_acc;

/* -log softmax(logits)[tok] over n_vocab values: llama.cpp's log_softmax (max in float, the
 * sum of exp(l - max) in double). */
double ppl_nll(const float *logits, int n_vocab, int32_t tok);
/* Adds rows i < n of logits [n][n_vocab] scored against next[i]. */
void ppl_add(ppl_acc *a, const float *logits, int n_vocab, const int32_t *next, int n);
/* exp(mean nll) so far; 0 before any token. */
double ppl_value(const ppl_acc *a);
/* The standard error of the estimate as llama.cpp prints it (0 when count < 2 or the
 * variance is not positive). */
double ppl_error(const ppl_acc *a);

/* Chunks of the token stream toks[0..n_tok) (see above) through seq 0 of the context c
 * (c->n_batch >= n_ctx, c->n_ctx >= n_ctx); bos >= 0 replaces each chunk's first token.
 * n_chunks_max > 0 caps the chunks. progress, when non-NULL, is called after each chunk.
 * Returns the number of chunks evaluated (>= 1) or a negative status with err filled
 * (fewer than n_ctx tokens, or n_ctx < 4: MF_ERR_INPUT). */
typedef void (*ppl_progress_fn)(void *ud, int chunk, int n_chunks, const ppl_acc *a, double seconds);
int ppl_eval(mf_context *c, const int32_t *toks, int n_tok, int n_ctx, int32_t bos, int n_chunks_max, ppl_acc *a,
             ppl_progress_fn progress, void *ud, mf_err *err);

#endif

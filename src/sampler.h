/* sampler.h - next-token choice from a row of logits: greedy, or llama.cpp's default
 * chain (penalties -> top-k -> top-p -> min-p -> temperature -> seeded draw).
 *
 * Definitions (all filters see the penalised logits at temperature 1, as in
 * llama.cpp, where temperature is applied after the filters):
 *   penalties  for each distinct token among the last repeat_last_n accepted ones,
 *              seen c times: logit /= repeat_penalty if logit > 0, else
 *              logit *= repeat_penalty; then logit -= c * frequency_penalty +
 *              presence_penalty.
 *   top-k      keep the k largest logits (ties: lower id first).
 *   top-p      softmax over what is left, sort descending, keep the smallest prefix
 *              whose cumulative probability is >= top_p (at least one token).
 *   min-p      keep tokens with p >= min_p * p_max, i.e. logit >= max_logit +
 *              log(min_p), over what is left.
 *   draw       softmax of (logit / temp) over what is left, one uniform draw.
 * A logit that is NaN counts as -inf (never drawn); +inf counts as the largest
 * finite float. If every logit is -inf or NaN the result is token 0. */
#ifndef MINFER_SAMPLER_H
#define MINFER_SAMPLER_H

#include <stdint.h>

#include "util.h"

/* seed value meaning "seed from the clock and pid"; sampler_seed() reports it. */
#define SAMPLER_SEED_RANDOM UINT64_MAX

typedef struct mf_sampler_params {
    float temp;              /* <= 0: greedy (argmax of the penalised logits, ties -> lowest id) */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off; must be > 0 */
    int repeat_last_n;       /* tokens of history the penalties look at; 0 off, < 0 all */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    uint64_t seed;           /* SAMPLER_SEED_RANDOM: from the clock */
} mf_sampler_params;

typedef struct mf_sampler mf_sampler;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1
 * (off), repeat_last_n 64, presence/frequency 0, seed SAMPLER_SEED_RANDOM. */
void sampler_params_default(mf_sampler_params *p);

/* Checks p (finite values, repeat_penalty > 0, top_p and min_p not NaN, n_vocab > 0).
 * Returns MF_OK or MF_ERR_USAGE with a message naming the bad field. */
int sampler_params_check(const mf_sampler_params *p, int n_vocab, mf_err *err);

/* Allocates the sampler and all its workspace (about 20 bytes per vocab entry), so
 * sampling itself never allocates. Returns NULL with err set for bad parameters
 * (sampler_params_check) or when memory runs out. */
mf_sampler *sampler_new(const mf_sampler_params *p, int n_vocab, mf_err *err);
void sampler_free(mf_sampler *s);

/* Chooses the next token from logits[n_vocab] (not modified). Does not record the
 * token: call sampler_accept with the token actually used. */
int32_t sampler_sample(mf_sampler *s, const float *logits);

/* Records tok in the penalty history (ids outside [0, n_vocab) are ignored). Prompt
 * tokens may be accepted too, as llama.cpp does, so they count for the penalties. */
void sampler_accept(mf_sampler *s, int32_t tok);

/* Forgets the penalty history (a new conversation); the random stream continues. */
void sampler_reset(mf_sampler *s);

/* Applies the penalties to logits[n_vocab] in place, exactly as sampler_sample does
 * (exposed for tests and for reporting adjusted logits). s is used as scratch but
 * left as it was. */
void sampler_penalize(mf_sampler *s, float *logits);

/* Log-probabilities for reporting (the OpenAI API's logprobs/top_logprobs): the
 * log-softmax of the penalised, sanitised logits at temperature 1 - the distribution
 * every filter sees - so they do not depend on temp, top-k, top-p or min-p (as
 * llama.cpp's server and OpenAI report them). Writes log p(tok) into *tok_lp and the
 * k most likely tokens, best first (ties: lower id first), into top[0..k); k is
 * clamped to [0, n_vocab]. Returns the number written. A token masked to -inf (or
 * every token, when all are) gets -INFINITY. Uses the sampler's workspace only, so a
 * draw before or after is unaffected; logits is not modified. */
typedef struct sampler_logprob {
    int32_t id;
    float logprob;
} sampler_logprob;
int sampler_logprobs(mf_sampler *s, const float *logits, int32_t tok, int k, float *tok_lp, sampler_logprob *top);

/* 1 when the sampler is greedy (temp <= 0): its choice is the argmax of the
 * penalised logits, and drawing consumes no randomness. */
int sampler_greedy(const mf_sampler *s);

/* The seed actually used (the clock-derived one when SAMPLER_SEED_RANDOM was asked),
 * so a run can be repeated. */
uint64_t sampler_seed(const mf_sampler *s);

#endif

/* constraint.h - constrained sampling: a grammar held over a model's vocabulary for
 * one sequence. Each step turns a row of logits into the row the grammar allows
 * (every other token -inf), which the ordinary sampler then draws from, and advances
 * over the token drawn. Without a constraint nothing here runs: the sampler sees the
 * model's logits untouched.
 *
 *   gram_vocab *tv = constraint_vocab(m->vocab, &err);                  once per model
 *   gram *g; constraint_compile(&g, CONSTRAINT_JSON_SCHEMA, text, len, &err);
 *   mf_constraint *c = constraint_new(g, tv, strip_first, &err);        g, tv borrowed
 *   per step:  const float *row = constraint_apply(c, logits, &n_allowed);
 *              tok = sampler_sample(smp, row);  constraint_accept(c, tok);
 *
 * Masks are cached per constraint, keyed by the matcher's whole state, so a state
 * that repeats (inside a string, between the items of an array) costs one lookup. */
#ifndef MINFER_CONSTRAINT_H
#define MINFER_CONSTRAINT_H

#include <stddef.h>
#include <stdint.h>

#include "grammar.h"
#include "tokenizer.h"
#include "util.h"

typedef enum constraint_kind {
    CONSTRAINT_GBNF = 0,        /* text: a GBNF grammar (llama.cpp's dialect) */
    CONSTRAINT_JSON_SCHEMA = 1, /* text: a JSON schema (json_schema.h says what is supported) */
    CONSTRAINT_JSON_OBJECT = 2, /* any JSON object (OpenAI's response_format json_object); text unused */
} constraint_kind;

/* The vocabulary trie of v: each token's output bytes (tok_piece, control tokens
 * empty and so never allowed), end-of-generation tokens apart. Shared read-only by
 * any number of constraints and threads. */
gram_vocab *constraint_vocab(const mf_vocab *v, mf_err *err);

/* Compiles a constraint's text into a grammar: *out, or MF_ERR_INPUT with a message
 * that names the problem (a GBNF line and column, a schema keyword and its path). */
int constraint_compile(gram **out, constraint_kind kind, const char *text, size_t len, mf_err *err);

typedef struct mf_constraint mf_constraint;

/* A matcher at the start of g over tv; g and tv must outlive it (one compiled
 * grammar may serve many constraints). strip_first: the first non-empty token's
 * leading space is not output (SPM after BOS alone: cli_gen's strip_first), so it is
 * not matched either. NULL with err on failure. */
mf_constraint *constraint_new(const gram *g, const gram_vocab *tv, int strip_first, mf_err *err);
void constraint_free(mf_constraint *c);
/* Back to the start of the grammar (a new answer); the mask cache stays. MF_OK or
 * MF_ERR_NOMEM. */
int constraint_reset(mf_constraint *c, int strip_first, mf_err *err);

/* logits[n_vocab] with every token the grammar does not allow next set to -inf, in
 * a buffer the constraint owns (valid until the next call); *n_allowed = how many
 * are allowed. 0 allowed means the grammar cannot go on with this vocabulary (a
 * dead end, or a limit hit: constraint_overflowed): the caller stops with an error.
 * An end-of-generation token is allowed only where the text so far is complete. */
const float *constraint_apply(mf_constraint *c, const float *logits, int *n_allowed);
/* The allowed-token bitset of the current state (gram_mask_words(tv) words, valid
 * until the next call), or NULL when memory ran out; *n_allowed as above. */
const uint32_t *constraint_mask(mf_constraint *c, int *n_allowed);
/* Advances over tok: MF_OK, or MF_ERR_INPUT when the grammar does not allow it (the
 * state is then unchanged). An end-of-generation token is accepted where the text is
 * complete and changes nothing. */
int constraint_accept(mf_constraint *c, int32_t tok, mf_err *err);
/* Would constraint_accept take tok? (State unchanged.) For greedy decoding: when
 * the model's own best token is allowed it is also the best allowed one, and no mask
 * needs making. */
int constraint_allows(mf_constraint *c, int32_t tok);
/* The text so far is complete (end of generation allowed). */
int constraint_is_complete(const mf_constraint *c);
/* Nothing more can follow: generation should end here. */
int constraint_is_done(const mf_constraint *c);
/* Steps refused because a matcher limit was hit (grammar.h). */
int constraint_overflowed(const mf_constraint *c);
/* Starts making the current state's mask on a helper thread (into the cache), so
 * that it overlaps what the caller does next, typically the forward step of the
 * token just accepted (on a GPU the host only waits there). The caller must not touch
 * c until constraint_prefetch_wait, which every prefetch must be followed by. Where
 * the thread cannot start, the mask is simply made later, on demand. */
void constraint_prefetch(mf_constraint *c);
void constraint_prefetch_wait(mf_constraint *c);
/* Mask cache figures: lookups that hit, masks computed. */
void constraint_stats(const mf_constraint *c, uint64_t *hits, uint64_t *misses);

#endif

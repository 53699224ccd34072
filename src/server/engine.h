/* engine.h - the server's scheduler: one thread owns the minfer_ctx and its n_seq
 * slots; HTTP threads submit jobs and wait on (or stream from) them.
 *
 * Each engine step decodes one token of every generating slot together
 * (minfer_decode_batch), then runs one chunk of one waiting prompt (minfer_eval of a
 * prefix that grows by `chunk` tokens a step), so running streams keep flowing while
 * a long prompt is read. A queued job takes the free slot whose cached tokens share
 * the longest prefix with its prompt (the prompt cache); jobs wait in FIFO order while
 * every slot is busy and are never dropped. A cancelled job (its client left) frees
 * its slot before the next step. */
#ifndef MINFER_SERVER_ENGINE_H
#define MINFER_SERVER_ENGINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer.h"
#include "sampler.h"
#include "server/text.h"

typedef enum srv_finish {
    SRV_RUNNING = 0,
    SRV_FINISH_STOP,      /* end-of-generation token or a stop string */
    SRV_FINISH_LENGTH,    /* max_tokens, or the context is full */
    SRV_FINISH_ERROR,     /* the engine failed; err says why */
    SRV_FINISH_CANCELLED, /* the client left, or the server shut down */
} srv_finish;

/* One generated token, for logprobs. */
typedef struct srv_tok {
    int32_t id;
    float logprob;
    size_t text_end;       /* bytes of the job's text once this token is decoded */
    int n_top;
    sampler_logprob *top;  /* [n_top] */
} srv_tok;

/* Special tokens a job may render as their text (a tool-call format's markers). */
#define SRV_MAX_KEEP 24

typedef struct srv_job {
    /* set by the submitter, read-only afterwards */
    int32_t *prompt;       /* owned */
    int n_prompt;
    int max_tokens;        /* >= 1 */
    mf_sampler_params sp;
    int logprobs, top_logprobs;
    char *stop[4];         /* owned, n_stop non-empty strings */
    int n_stop;
    int32_t keep[SRV_MAX_KEEP]; /* special tokens whose text goes into text (the parser reads them) */
    int n_keep;
    /* structured output: when set, only tokens it allows are sampled and the job
     * finishes (stop) where nothing more can follow. Owned; the tools issue's
     * constrained calls put a grammar here too (json_tool_call_gbnf, then
     * minfer_grammar_new with MINFER_GRAMMAR_GBNF). */
    minfer_grammar *grammar;
    double t_submit;

    /* shared: read and written under the engine's mutex */
    char *text;            /* decoded text; after the finish, the final text */
    size_t text_len, text_cap;
    size_t safe_len;       /* bytes of text that can be sent: no stop string can claim them */
    srv_tok *toks;         /* generated tokens (when logprobs) */
    int n_toks, toks_cap;
    int n_gen;             /* tokens generated (the end-of-generation token not counted) */
    int n_reused;          /* prompt tokens taken from the slot's cache */
    int n_prefilled;       /* prompt tokens evaluated */
    srv_finish finish;
    char err[256];
    int cancelled;         /* set by the HTTP side: stop and free the slot */
    double t_first;        /* first token time (0 until then) */
    pthread_cond_t cond;   /* signalled whenever the above change */

    /* the engine's own */
    int slot;              /* -1 while queued */
    int pos;               /* prompt tokens in the slot so far (prefill) */
    int32_t next;          /* sampled token to feed at the next decode step */
    mf_sampler *smp;
    minfer_constraint *con; /* the grammar's matcher (srv_engine_submit makes it) */
    int refs;              /* submitter + engine */
    struct srv_job *qnext; /* queue link */
    srv_utf8_dec dec;      /* token bytes -> UTF-8 (an incomplete character held) */
} srv_job;

typedef struct srv_metrics {
    uint64_t prompt_tokens, generated_tokens, prefilled_tokens, reused_tokens, cache_hits;
    uint64_t jobs_done, jobs_cancelled;
    double prefill_s, decode_s; /* time in minfer_eval / minfer_decode_batch */
    uint64_t decode_steps, decode_rows;
    int queue_depth, busy_slots, n_slots;
} srv_metrics;

typedef struct srv_engine srv_engine;

/* Takes c (owned by the engine thread from now on; freed by the caller after
 * srv_engine_free). chunk: prompt tokens per prefill step. */
srv_engine *srv_engine_new(minfer_model *m, minfer_ctx *c, int chunk, char *err, size_t cap);
/* Stops the thread (cancelling whatever is left) and frees the engine. */
void srv_engine_free(srv_engine *e);

/* A new job for the prompt ids[0..n) (copied); the caller fills max_tokens, sp,
 * logprobs, stop before srv_engine_submit. */
srv_job *srv_job_new(const int32_t *ids, int n);
/* Queues the job (the engine takes its own reference). 0, or -1 when the engine is
 * shutting down (the job is then not queued). */
int srv_engine_submit(srv_engine *e, srv_job *j);
/* Asks the engine to stop the job; it finishes with SRV_FINISH_CANCELLED unless it
 * finished already. */
void srv_engine_cancel(srv_engine *e, srv_job *j);
/* Drops the submitter's reference (after cancelling or reading the result). */
void srv_job_release(srv_engine *e, srv_job *j);

/* The lock that guards every job's shared fields; wait on j->cond under it. */
void srv_engine_lock(srv_engine *e);
void srv_engine_unlock(srv_engine *e);
/* pthread_cond_timedwait on j->cond for up to ms milliseconds (lock held). */
void srv_engine_wait(srv_engine *e, srv_job *j, int ms);

void srv_engine_metrics(srv_engine *e, srv_metrics *out);
/* Refuses new jobs from now on; jobs already accepted keep running. */
void srv_engine_drain(srv_engine *e);
/* Cancels every queued and running job. */
void srv_engine_cancel_all(srv_engine *e);
/* Jobs queued or running. */
int srv_engine_active(srv_engine *e);

#endif

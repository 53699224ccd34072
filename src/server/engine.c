/* engine.c - see engine.h. One mutex guards the queue, the slot table and every
 * job's shared fields; the engine thread drops it around the forward passes
 * (minfer_decode_batch, minfer_eval) and the sampling, so HTTP threads only ever
 * wait for bookkeeping, never for the model. */
#include "server/engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

struct srv_engine {
    minfer_model *m;
    minfer_ctx *c;
    int n_slots, n_ctx, n_vocab, chunk;
    int on_gpu;           /* masks of constrained jobs are made during the decode step */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* the engine thread waits here when there is nothing to do */
    srv_job *qhead, *qtail;
    int qlen;
    srv_job **slot_job;   /* [n_slots] the job in each slot, or NULL */
    int32_t **slot_toks;  /* [n_slots][n_ctx] the tokens the slot's cache holds, mirrored */
    int *slot_n;
    uint64_t *slot_used;  /* when each slot was last given a job (a counter) */
    uint64_t use_clock;
    int draining, quit;
    srv_metrics met;
    int *seqs;            /* [n_slots] decode step scratch */
    int32_t *step_toks;
    srv_job **rows;
};

void srv_engine_lock(srv_engine *e) { pthread_mutex_lock(&e->mu); }
void srv_engine_unlock(srv_engine *e) { pthread_mutex_unlock(&e->mu); }

void srv_engine_wait(srv_engine *e, srv_job *j, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cond, &e->mu, &ts);
}

srv_job *srv_job_new(const int32_t *ids, int n) {
    srv_job *j = mf_xmalloc(sizeof *j);
    memset(j, 0, sizeof *j);
    j->prompt = mf_xmalloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (n > 0) memcpy(j->prompt, ids, sizeof(int32_t) * (size_t)n);
    j->n_prompt = n;
    j->slot = -1;
    j->refs = 1;
    j->text_cap = 256;
    j->text = mf_xmalloc(j->text_cap);
    j->text[0] = 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* srv_engine_wait's deadlines */
    pthread_cond_init(&j->cond, &ca);
    pthread_condattr_destroy(&ca);
    return j;
}

static void job_free(srv_job *j) {
    free(j->prompt);
    free(j->text);
    for (int i = 0; i < j->n_toks; i++) free(j->toks[i].top);
    free(j->toks);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    sampler_free(j->smp);
    minfer_constraint_free(j->con);
    minfer_grammar_free(j->grammar);
    pthread_cond_destroy(&j->cond);
    free(j);
}

/* lock held */
static void job_unref(srv_job *j) {
    if (--j->refs == 0) job_free(j);
}

void srv_job_release(srv_engine *e, srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&e->mu);
    job_unref(j);
    pthread_mutex_unlock(&e->mu);
}

/* lock held: the job ends; its slot (if any) becomes free, its cache kept. */
static void job_finish(srv_engine *e, srv_job *j, srv_finish f, const char *err) {
    if (j->finish != SRV_RUNNING) return;
    {
        /* what the decoder holds back ends the text (a cut character: U+FFFD); after
         * a stop string the caller has emptied it */
        char tail[16];
        size_t n = srv_utf8_flush(&j->dec, tail);
        if (j->text_len + n + 1 > j->text_cap) j->text = mf_xrealloc(j->text, j->text_cap = j->text_len + n + 64);
        memcpy(j->text + j->text_len, tail, n);
        j->text_len += n;
        j->text[j->text_len] = 0;
    }
    j->finish = f;
    j->safe_len = j->text_len;
    if (err) snprintf(j->err, sizeof j->err, "%.255s", err);
    if (f == SRV_FINISH_CANCELLED) e->met.jobs_cancelled++;
    else e->met.jobs_done++;
    if (j->slot >= 0) {
        e->slot_job[j->slot] = NULL;
        e->met.busy_slots--;
        j->slot = -1;
    }
    pthread_cond_broadcast(&j->cond);
    job_unref(j); /* the engine's reference */
}

int srv_engine_submit(srv_engine *e, srv_job *j) {
    mf_err err = { { 0 } };
    j->smp = sampler_new(&j->sp, e->n_vocab, &err);
    if (!j->smp) {
        snprintf(j->err, sizeof j->err, "%.255s", err.msg);
        return -1;
    }
    if (j->grammar && !(j->con = minfer_constraint_new(j->grammar, j->err, sizeof j->err))) return -1;
    j->t_submit = mf_time_s();
    pthread_mutex_lock(&e->mu);
    if (e->draining || e->quit) {
        pthread_mutex_unlock(&e->mu);
        snprintf(j->err, sizeof j->err, "the server is shutting down");
        return -1;
    }
    j->refs++;
    j->qnext = NULL;
    if (e->qtail) e->qtail->qnext = j;
    else e->qhead = j;
    e->qtail = j;
    e->qlen++;
    e->met.queue_depth = e->qlen;
    e->met.prompt_tokens += (uint64_t)j->n_prompt;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void srv_engine_cancel(srv_engine *e, srv_job *j) {
    pthread_mutex_lock(&e->mu);
    if (j->finish == SRV_RUNNING) {
        j->cancelled = 1;
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->mu);
}

void srv_engine_metrics(srv_engine *e, srv_metrics *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->met;
    pthread_mutex_unlock(&e->mu);
}

void srv_engine_drain(srv_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->draining = 1;
    pthread_mutex_unlock(&e->mu);
}

void srv_engine_cancel_all(srv_engine *e) {
    pthread_mutex_lock(&e->mu);
    for (srv_job *j = e->qhead; j; j = j->qnext) j->cancelled = 1;
    for (int s = 0; s < e->n_slots; s++)
        if (e->slot_job[s]) e->slot_job[s]->cancelled = 1;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
}

int srv_engine_active(srv_engine *e) {
    pthread_mutex_lock(&e->mu);
    int n = e->qlen + e->met.busy_slots;
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* ---------------------------------------------------------------- the step */

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* lock held: cancelled jobs leave; queued jobs take free slots, FIFO, each the free
 * slot with the longest cached prefix of its prompt (ties: the least recently used,
 * so an empty slot is taken before another job's cache is overwritten). */
static void schedule(srv_engine *e) {
    for (int s = 0; s < e->n_slots; s++) {
        srv_job *j = e->slot_job[s];
        if (j && j->cancelled) job_finish(e, j, SRV_FINISH_CANCELLED, "cancelled");
    }
    for (srv_job **pp = &e->qhead; *pp;) {
        srv_job *j = *pp;
        if (!j->cancelled) { pp = &j->qnext; continue; }
        *pp = j->qnext;
        e->qlen--;
        job_finish(e, j, SRV_FINISH_CANCELLED, "cancelled");
    }
    e->qtail = NULL;
    for (srv_job *j = e->qhead; j; j = j->qnext) e->qtail = j;
    while (e->qhead) {
        int best = -1, best_lcp = -1;
        for (int s = 0; s < e->n_slots; s++) {
            if (e->slot_job[s]) continue;
            int lcp = common_prefix(e->slot_toks[s], e->slot_n[s], e->qhead->prompt, e->qhead->n_prompt);
            /* a match that would throw away more of the slot's cache than it reuses
             * (a shared BOS or system line in front of another conversation) counts
             * as none: then the least recently used slot goes, keeping the others */
            if (2 * lcp < e->slot_n[s]) lcp = 0;
            if (lcp > best_lcp || (lcp == best_lcp && e->slot_used[s] < e->slot_used[best])) {
                best = s;
                best_lcp = lcp;
            }
        }
        if (best < 0) break; /* every slot busy: the rest wait */
        srv_job *j = e->qhead;
        e->qhead = j->qnext;
        if (!e->qhead) e->qtail = NULL;
        e->qlen--;
        j->slot = best;
        /* the last prompt token is always evaluated: its logits start the generation */
        j->pos = best_lcp < j->n_prompt ? best_lcp : j->n_prompt - 1;
        j->n_reused = -1; /* set by the first prefill chunk */
        e->slot_job[best] = j;
        e->slot_used[best] = ++e->use_clock;
        e->met.busy_slots++;
    }
    e->met.queue_depth = e->qlen;
}

/* The sampled token of one job, taken outside the lock. */
typedef struct sampled {
    int32_t tok;
    int eog;
    float lp;
    sampler_logprob *top; /* malloc'd [n_top] or NULL */
    int n_top;
    char piece[256];
    int piece_len;
    char *big;            /* a piece longer than 256 bytes */
    int done;             /* the job's grammar is done: nothing can follow this token */
    int failed;           /* the grammar cannot go on: err says why */
    char err[200];
} sampled;

static void sample(srv_engine *e, srv_job *j, const float *logits, sampled *o) {
    memset(o, 0, sizeof *o);
    /* greedy without logprobs: the model's best token, when the grammar allows it, is the
     * best allowed one, and no mask is needed */
    int32_t best = -1;
    if (j->con && !j->logprobs && sampler_greedy(j->smp) &&
        !minfer_constraint_allows(j->con, best = sampler_sample(j->smp, logits)))
        best = -1;
    if (j->con && best < 0) { /* the grammar's tokens only: the others -inf (logprobs are of this row too) */
        int n_allowed;
        logits = minfer_constraint_apply(j->con, logits, &n_allowed);
        if (n_allowed == 0) {
            o->failed = 1;
            snprintf(o->err, sizeof o->err, "the grammar cannot go on: no token of this model's vocabulary continues "
                                            "the text");
            return;
        }
    }
    o->tok = best >= 0 ? best : sampler_sample(j->smp, logits);
    if (j->logprobs) {
        o->n_top = j->top_logprobs;
        o->top = o->n_top ? mf_xmalloc(sizeof *o->top * (size_t)o->n_top) : NULL;
        o->n_top = sampler_logprobs(j->smp, logits, o->tok, o->n_top, &o->lp, o->top);
    }
    sampler_accept(j->smp, o->tok);
    if (j->con) {
        if (minfer_constraint_accept(j->con, o->tok, o->err, sizeof o->err)) {
            o->failed = 1;
            free(o->top);
            o->top = NULL;
            return;
        }
        o->done = minfer_constraint_done(j->con);
    }
    o->eog = minfer_token_is_eog(e->m, o->tok);
    if (!o->eog) {
        int special = 0;
        for (int k = 0; k < j->n_keep && !special; k++) special = j->keep[k] == o->tok;
        int (*piece)(const minfer_model *, int32_t, char *, size_t) = special ? minfer_token_to_text : minfer_token_to_piece;
        int n = piece(e->m, o->tok, o->piece, sizeof o->piece);
        if (n > (int)sizeof o->piece) {
            o->big = mf_xmalloc((size_t)n);
            piece(e->m, o->tok, o->big, (size_t)n);
        }
        o->piece_len = n;
    }
}

/* lock held: publishes one sampled token of j: text, stop strings, limits. */
static void publish(srv_engine *e, srv_job *j, sampled *o) {
    if (j->finish != SRV_RUNNING) { free(o->top); free(o->big); return; }
    if (o->failed) { job_finish(e, j, SRV_FINISH_ERROR, o->err); return; }
    if (j->t_first == 0.0) j->t_first = mf_time_s();
    if (o->eog) {
        free(o->top);
        job_finish(e, j, SRV_FINISH_STOP, NULL);
        return;
    }
    j->n_gen++;
    e->met.generated_tokens++;
    size_t need = j->text_len + 3 * ((size_t)o->piece_len + 3) + 1;
    if (need > j->text_cap) j->text = mf_xrealloc(j->text, j->text_cap = 2 * need);
    size_t before = j->text_len;
    j->text_len += srv_utf8_push(&j->dec, o->big ? o->big : o->piece, (size_t)o->piece_len, j->text + j->text_len);
    j->text[j->text_len] = 0;
    free(o->big);
    if (j->logprobs) {
        if (j->n_toks == j->toks_cap)
            j->toks = mf_xrealloc(j->toks, sizeof *j->toks * (size_t)(j->toks_cap = j->toks_cap ? 2 * j->toks_cap : 64));
        j->toks[j->n_toks++] = (srv_tok){ o->tok, o->lp, j->text_len, o->n_top, o->top };
    }
    if (j->n_stop) {
        int which = 0;
        long at = srv_stop_find(j->text, j->text_len, before, j->stop, j->n_stop, &which);
        if (at >= 0) {
            j->text_len = (size_t)at;
            j->text[at] = 0;
            j->dec.n_held = 0; /* held bytes come after the cut */
            /* tokens whose text lies wholly inside the cut-off part go */
            while (j->n_toks > 1 && j->toks[j->n_toks - 2].text_end >= (size_t)at) {
                free(j->toks[j->n_toks - 1].top);
                j->n_toks--;
            }
            job_finish(e, j, SRV_FINISH_STOP, NULL);
            return;
        }
    }
    if (o->done) { job_finish(e, j, SRV_FINISH_STOP, NULL); return; } /* the grammar's text is complete */
    if (j->n_gen >= j->max_tokens) { job_finish(e, j, SRV_FINISH_LENGTH, NULL); return; }
    if (e->slot_n[j->slot] >= e->n_ctx) { job_finish(e, j, SRV_FINISH_LENGTH, NULL); return; }
    j->next = o->tok;
    j->safe_len = j->text_len - srv_stop_hold(j->text, j->text_len, j->stop, j->n_stop);
    pthread_cond_broadcast(&j->cond);
}

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    char err[256];
    pthread_mutex_lock(&e->mu);
    for (;;) {
        if (e->quit) {
            for (srv_job *j = e->qhead; j; j = j->qnext) j->cancelled = 1;
            for (int s = 0; s < e->n_slots; s++)
                if (e->slot_job[s]) e->slot_job[s]->cancelled = 1;
        }
        schedule(e);
        if (e->quit && !e->qhead && e->met.busy_slots == 0) break;
        /* what this step does: every generating slot decodes; the oldest waiting
         * prompt reads one chunk */
        int n_dec = 0;
        srv_job *pre = NULL;
        for (int s = 0; s < e->n_slots; s++) {
            srv_job *j = e->slot_job[s];
            if (!j) continue;
            if (j->pos >= j->n_prompt) {
                e->seqs[n_dec] = s;
                e->step_toks[n_dec] = j->next;
                e->rows[n_dec++] = j;
                j->refs++; /* kept alive across the unlocked step */
            } else if (!pre || j->t_submit < pre->t_submit) {
                pre = j;
            }
        }
        if (!n_dec && !pre) {
            pthread_cond_wait(&e->wake, &e->mu);
            continue;
        }
        int pre_end = 0, pre_slot = -1;
        if (pre) {
            pre->refs++;
            pre_slot = pre->slot;
            pre_end = pre->pos + e->chunk < pre->n_prompt ? pre->pos + e->chunk : pre->n_prompt;
        }
        pthread_mutex_unlock(&e->mu);

        if (n_dec) {
            /* on a GPU each constrained job's next mask is made while the host waits for
             * the step (one helper thread a job); on the CPU the step has the cores */
            const int overlap = e->on_gpu;
            for (int i = 0; overlap && i < n_dec; i++)
                if (e->rows[i]->con) minfer_constraint_prefetch(e->rows[i]->con);
            double t0 = mf_time_s();
            const float *logits = minfer_decode_batch(e->c, e->seqs, e->step_toks, n_dec, err, sizeof err);
            double dt = mf_time_s() - t0;
            for (int i = 0; overlap && i < n_dec; i++)
                if (e->rows[i]->con) minfer_constraint_prefetch_wait(e->rows[i]->con);
            sampled *smp = mf_xmalloc(sizeof *smp * (size_t)n_dec);
            if (logits)
                for (int i = 0; i < n_dec; i++) sample(e, e->rows[i], logits + (size_t)i * (size_t)e->n_vocab, &smp[i]);
            pthread_mutex_lock(&e->mu);
            e->met.decode_s += dt;
            e->met.decode_steps++;
            e->met.decode_rows += (uint64_t)n_dec;
            for (int i = 0; i < n_dec; i++) {
                srv_job *j = e->rows[i];
                if (!logits) {
                    job_finish(e, j, SRV_FINISH_ERROR, err);
                } else {
                    int s = e->seqs[i];
                    e->slot_toks[s][e->slot_n[s]++] = e->step_toks[i];
                    publish(e, j, &smp[i]);
                }
                job_unref(j);
            }
            pthread_mutex_unlock(&e->mu);
            free(smp);
        }
        if (pre) {
            /* minfer_eval of the prompt up to pre_end: the cached prefix stays, the
             * rest of this chunk is evaluated */
            double t0 = mf_time_s();
            const float *logits = minfer_eval(e->c, pre_slot, pre->prompt, pre_end, err, sizeof err);
            double dt = mf_time_s() - t0;
            int reused = 0, evaluated = 0;
            minfer_ctx_last_eval(e->c, &reused, &evaluated);
            sampled smp;
            int last = logits && pre_end == pre->n_prompt;
            if (last) sample(e, pre, logits, &smp);
            pthread_mutex_lock(&e->mu);
            e->met.prefill_s += dt;
            if (!logits) {
                e->slot_n[pre_slot] = 0; /* unknown state: forget the cache */
                minfer_seq_clear(e->c, pre_slot, NULL, 0);
                job_finish(e, pre, SRV_FINISH_ERROR, err);
            } else {
                memcpy(e->slot_toks[pre_slot], pre->prompt, sizeof(int32_t) * (size_t)pre_end);
                e->slot_n[pre_slot] = pre_end;
                e->met.prefilled_tokens += (uint64_t)evaluated;
                pre->n_prefilled += evaluated;
                if (pre->n_reused < 0) {
                    pre->n_reused = reused;
                    e->met.reused_tokens += (uint64_t)reused;
                    if (reused > 0) e->met.cache_hits++;
                }
                pre->pos = pre_end;
                if (last) publish(e, pre, &smp);
                else pthread_cond_broadcast(&pre->cond);
            }
            job_unref(pre);
            pthread_mutex_unlock(&e->mu);
        }
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

srv_engine *srv_engine_new(minfer_model *m, minfer_ctx *c, int chunk, char *err, size_t cap) {
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) { snprintf(err, cap, "out of memory"); return NULL; }
    e->m = m;
    e->c = c;
    e->n_slots = minfer_ctx_n_seq(c);
    e->n_ctx = minfer_ctx_n_ctx(c);
    e->n_vocab = minfer_n_vocab(m);
    e->on_gpu = minfer_ctx_on_gpu(c);
    e->chunk = chunk > 0 ? chunk : 128;
    if (e->n_slots > minfer_ctx_n_batch(c)) {
        snprintf(err, cap, "%d slots but %d tokens a step: one decode step could not take every slot", e->n_slots,
                 minfer_ctx_n_batch(c));
        free(e);
        return NULL;
    }
    e->slot_job = calloc((size_t)e->n_slots, sizeof *e->slot_job);
    e->slot_toks = calloc((size_t)e->n_slots, sizeof *e->slot_toks);
    e->slot_n = calloc((size_t)e->n_slots, sizeof *e->slot_n);
    e->slot_used = calloc((size_t)e->n_slots, sizeof *e->slot_used);
    e->seqs = calloc((size_t)e->n_slots, sizeof *e->seqs);
    e->step_toks = calloc((size_t)e->n_slots, sizeof *e->step_toks);
    e->rows = calloc((size_t)e->n_slots, sizeof *e->rows);
    int ok = e->slot_job && e->slot_toks && e->slot_n && e->slot_used && e->seqs && e->step_toks && e->rows;
    for (int s = 0; ok && s < e->n_slots; s++) ok = (e->slot_toks[s] = malloc(sizeof(int32_t) * (size_t)e->n_ctx)) != NULL;
    e->met.n_slots = e->n_slots;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->wake, NULL);
    if (!ok) {
        snprintf(err, cap, "out of memory for %d slots of %d tokens", e->n_slots, e->n_ctx);
        srv_engine_free(e);
        return NULL;
    }
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    if (rc) {
        snprintf(err, cap, "cannot start the engine thread: %s", strerror(rc));
        srv_engine_free(e);
        return NULL;
    }
    e->started = 1;
    return e;
}

void srv_engine_free(srv_engine *e) {
    if (!e) return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->quit = 1;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    for (int s = 0; e->slot_toks && s < e->n_slots; s++) free(e->slot_toks[s]);
    free(e->slot_toks);
    free(e->slot_job);
    free(e->slot_n);
    free(e->slot_used);
    free(e->seqs);
    free(e->step_toks);
    free(e->rows);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->wake);
    free(e);
}

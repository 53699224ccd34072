/* constraint.c - see constraint.h. */
#include "constraint.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"

gram_vocab *constraint_vocab(const mf_vocab *v, mf_err *err) {
    const int n = tok_n_vocab(v);
    if (n <= 0) {
        mf_fail(err, MF_ERR_INPUT, "grammar: the model's vocabulary is empty");
        return NULL;
    }
    const char **toks = malloc((size_t)n * sizeof *toks);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    uint8_t *eog = malloc((size_t)n);
    char *buf = NULL;
    size_t cap = 0, used = 0;
    gram_vocab *tv = NULL;
    if (!toks || !lens || !eog) goto oom;
    /* two passes: the lengths, then the bytes into one buffer */
    size_t *off = lens; /* first pass keeps offsets in lens */
    char piece[256];
    for (int i = 0; i < n; i++) {
        int len = tok_piece(v, i, 0, piece, sizeof piece);
        if (len < 0) len = 0;
        off[i] = (size_t)len;
        cap += (size_t)len;
        eog[i] = (uint8_t)(tok_is_eog(v, i) != 0);
    }
    buf = malloc(cap + 1);
    if (!buf) goto oom;
    for (int i = 0; i < n; i++) {
        size_t len = lens[i];
        if (len) tok_piece(v, i, 0, buf + used, len);
        toks[i] = buf + used;
        used += len;
    }
    tv = gram_vocab_new(n, toks, lens, eog, err);
    free(toks); free(lens); free(eog); free(buf);
    return tv;
oom:
    free(toks); free(lens); free(eog); free(buf);
    mf_fail(err, MF_ERR_NOMEM, "grammar: out of memory for the vocabulary (%d tokens)", n);
    return NULL;
}

int constraint_compile(gram **out, constraint_kind kind, const char *text, size_t len, mf_err *err) {
    *out = NULL;
    switch (kind) {
    case CONSTRAINT_GBNF:
        return gram_parse(out, text, len, err);
    case CONSTRAINT_JSON_SCHEMA: {
        char *gbnf = NULL;
        size_t n = 0;
        int rc = json_schema_to_gbnf(text, len, &gbnf, &n, err);
        if (rc) return rc;
        rc = gram_parse(out, gbnf, n, err);
        free(gbnf);
        return rc;
    }
    case CONSTRAINT_JSON_OBJECT: {
        const char *g = json_object_gbnf();
        return gram_parse(out, g, strlen(g), err);
    }
    }
    return mf_fail(err, MF_ERR_USAGE, "constraint: unknown kind %d", (int)kind);
}

/* ---------------------------------------------------------------- mask cache */

/* One cached mask: the matcher state it belongs to (the key, with the strip flag
 * in front) and the bitset. Least recently used goes first. */
typedef struct mask_entry {
    uint64_t hash;
    int32_t *key;
    size_t key_n;
    uint32_t *bits;
    int count;
    uint64_t used;
} mask_entry;

/* The cache holds at most this many masks and at most CACHE_BYTES of bitsets (a
 * 152k vocabulary's mask is 19 KB: 256 of them are 5 MB). */
enum { CACHE_MAX = 256, CACHE_BYTES = 8 << 20 };

struct mf_constraint {
    const gram *g;
    const gram_vocab *tv;
    gram_state *st;
    int strip;            /* the next non-empty token's leading space is not output */
    int words;            /* gram_mask_words(tv) */
    float *row;           /* [n_vocab] constraint_apply's result */
    uint32_t *bits;       /* [words] the mask when it is not cached */
    mask_entry *cache;    /* [cache_cap] */
    int cache_n, cache_cap;
    uint64_t clock, hits, misses;
    /* constraint_prefetch's helper thread: started on first use; `job` is set to ask
     * for a mask and cleared when it is made */
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int worker_on, job, quit;
};

void constraint_free(mf_constraint *c) {
    if (!c) return;
    if (c->worker_on) {
        pthread_mutex_lock(&c->mu);
        c->quit = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->worker, NULL);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
    }
    for (int i = 0; i < c->cache_n; i++) { free(c->cache[i].key); free(c->cache[i].bits); }
    free(c->cache);
    free(c->row);
    free(c->bits);
    gram_state_free(c->st);
    free(c);
}

mf_constraint *constraint_new(const gram *g, const gram_vocab *tv, int strip_first, mf_err *err) {
    mf_constraint *c = calloc(1, sizeof *c);
    if (!c) {
        mf_fail(err, MF_ERR_NOMEM, "grammar: out of memory");
        return NULL;
    }
    c->g = g;
    c->tv = tv;
    c->strip = strip_first;
    c->words = gram_mask_words(tv);
    c->st = gram_state_new(g, err);
    if (!c->st) { constraint_free(c); return NULL; }
    size_t per = (size_t)c->words * sizeof(uint32_t);
    c->cache_cap = (int)MF_MAX(4, MF_MIN((size_t)CACHE_MAX, CACHE_BYTES / per));
    c->row = malloc((size_t)gram_vocab_n(tv) * sizeof *c->row);
    c->bits = malloc(per);
    c->cache = calloc((size_t)c->cache_cap, sizeof *c->cache);
    if (!c->row || !c->bits || !c->cache) {
        constraint_free(c);
        mf_fail(err, MF_ERR_NOMEM, "grammar: out of memory for a vocabulary of %d tokens", gram_vocab_n(tv));
        return NULL;
    }
    return c;
}

int constraint_reset(mf_constraint *c, int strip_first, mf_err *err) {
    gram_state *st = gram_state_new(c->g, err);
    if (!st) return MF_ERR_NOMEM;
    gram_state_free(c->st);
    c->st = st;
    c->strip = strip_first;
    return MF_OK;
}

static uint64_t key_hash(const int32_t *k, size_t n, int strip) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)strip;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)k[i]) * 1099511628211ull;
    return h;
}

const uint32_t *constraint_mask(mf_constraint *c, int *n_allowed) {
    size_t kn;
    const int32_t *key = gram_state_key(c->st, &kn);
    uint64_t h = key_hash(key, kn, c->strip);
    c->clock++;
    for (int i = 0; i < c->cache_n; i++) {
        mask_entry *e = &c->cache[i];
        if (e->hash == h && e->key_n == kn + 1 && e->key[0] == c->strip && !memcmp(e->key + 1, key, kn * sizeof *key)) {
            e->used = c->clock;
            c->hits++;
            *n_allowed = e->count;
            return e->bits;
        }
    }
    c->misses++;
    int n = gram_mask(c->st, c->tv, c->strip, c->bits);
    if (n < 0) { *n_allowed = 0; return NULL; }
    *n_allowed = n;
    /* cache it: a free entry, else the least recently used one */
    int slot = c->cache_n < c->cache_cap ? c->cache_n : 0;
    if (c->cache_n == c->cache_cap)
        for (int i = 1; i < c->cache_n; i++)
            if (c->cache[i].used < c->cache[slot].used) slot = i;
    mask_entry *e = &c->cache[slot];
    int32_t *k = malloc((kn + 1) * sizeof *k);
    uint32_t *b = e->bits ? e->bits : malloc((size_t)c->words * sizeof *b);
    if (!k || !b) { /* no room: answer uncached */
        free(k);
        if (!e->bits) free(b);
        return c->bits;
    }
    free(e->key);
    k[0] = c->strip;
    memcpy(k + 1, key, kn * sizeof *key);
    memcpy(b, c->bits, (size_t)c->words * sizeof *b);
    *e = (mask_entry){ h, k, kn + 1, b, n, c->clock };
    if (slot == c->cache_n) c->cache_n++;
    return e->bits;
}

/* ---------------------------------------------------------------- prefetch */

static void *prefetch_main(void *arg) {
    mf_constraint *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->job && !c->quit) pthread_cond_wait(&c->cv, &c->mu);
        if (c->quit) break;
        pthread_mutex_unlock(&c->mu);
        int n;
        constraint_mask(c, &n); /* the owner waits: nothing else touches c meanwhile */
        pthread_mutex_lock(&c->mu);
        c->job = 0;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void constraint_prefetch(mf_constraint *c) {
    if (!c->worker_on) {
        if (pthread_mutex_init(&c->mu, NULL)) return;
        if (pthread_cond_init(&c->cv, NULL)) { pthread_mutex_destroy(&c->mu); return; }
        if (pthread_create(&c->worker, NULL, prefetch_main, c)) {
            pthread_cond_destroy(&c->cv);
            pthread_mutex_destroy(&c->mu);
            return;
        }
        c->worker_on = 1;
    }
    pthread_mutex_lock(&c->mu);
    c->job = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void constraint_prefetch_wait(mf_constraint *c) {
    if (!c->worker_on) return;
    pthread_mutex_lock(&c->mu);
    while (c->job) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

const float *constraint_apply(mf_constraint *c, const float *logits, int *n_allowed) {
    const uint32_t *bits = constraint_mask(c, n_allowed);
    const int nv = gram_vocab_n(c->tv);
    if (!bits) {
        for (int i = 0; i < nv; i++) c->row[i] = -INFINITY;
        return c->row;
    }
    for (int w = 0; w < c->words; w++) {
        uint32_t m = bits[w];
        int i0 = w * 32, i1 = MF_MIN(nv, i0 + 32);
        if (m == 0) {
            for (int i = i0; i < i1; i++) c->row[i] = -INFINITY;
        } else if (m == UINT32_MAX) {
            memcpy(c->row + i0, logits + i0, (size_t)(i1 - i0) * sizeof *logits);
        } else {
            for (int i = i0; i < i1; i++) c->row[i] = m >> (i - i0) & 1 ? logits[i] : -INFINITY;
        }
    }
    return c->row;
}

int constraint_accept(mf_constraint *c, int32_t tok, mf_err *err) {
    if (tok < 0 || tok >= gram_vocab_n(c->tv))
        return mf_fail(err, MF_ERR_INPUT, "grammar: token %d is outside the vocabulary", tok);
    if (gram_vocab_is_eog(c->tv, tok)) {
        if (gram_state_is_accepting(c->st)) return MF_OK;
        return mf_fail(err, MF_ERR_INPUT, "grammar: end of generation before the grammar's text is complete");
    }
    size_t len;
    const char *p = gram_vocab_token(c->tv, tok, &len);
    if (len == 0) return mf_fail(err, MF_ERR_INPUT, "grammar: token %d prints nothing and is never allowed", tok);
    int strip = c->strip && p[0] == ' ';
    if (strip && len == 1) return mf_fail(err, MF_ERR_INPUT, "grammar: token %d (a leading space alone) is not allowed", tok);
    if (!gram_state_accept(c->st, p + strip, len - (size_t)strip))
        return mf_fail(err, MF_ERR_INPUT, "grammar: token %d ('%.*s') does not continue the grammar's text", tok,
                       (int)MF_MIN(len, 40), p);
    c->strip = 0;
    return MF_OK;
}

int constraint_allows(mf_constraint *c, int32_t tok) {
    if (tok < 0 || tok >= gram_vocab_n(c->tv)) return 0;
    if (gram_vocab_is_eog(c->tv, tok)) return gram_state_is_accepting(c->st);
    size_t len;
    const char *p = gram_vocab_token(c->tv, tok, &len);
    const int strip = c->strip && len && p[0] == ' ';
    if (len <= (size_t)strip) return 0;
    return gram_state_can_accept(c->st, p + strip, len - (size_t)strip);
}

int constraint_is_complete(const mf_constraint *c) { return gram_state_is_accepting(c->st); }
int constraint_is_done(const mf_constraint *c) { return gram_state_is_done(c->st); }
int constraint_overflowed(const mf_constraint *c) { return gram_state_overflowed(c->st); }

void constraint_stats(const mf_constraint *c, uint64_t *hits, uint64_t *misses) {
    *hits = c->hits;
    *misses = c->misses;
}

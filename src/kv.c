/* kv.c - see kv.h. */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

void kv_init(mf_kv *kv, int n_ctx, int n_seq) {
    kv->n_ctx = n_ctx;
    kv->n_seq = n_seq;
    kv->seqs = mf_xcalloc((size_t)n_seq, sizeof *kv->seqs);
    for (int s = 0; s < n_seq; s++) kv->seqs[s].tokens = mf_xmalloc(sizeof(int32_t) * (size_t)n_ctx);
}

void kv_free(mf_kv *kv) {
    for (int s = 0; kv->seqs && s < kv->n_seq; s++) free(kv->seqs[s].tokens);
    free(kv->seqs);
    memset(kv, 0, sizeof *kv);
}

int kv_common_prefix(const mf_kv *kv, int seq, const int32_t *toks, int n) {
    const kv_seq *s = &kv->seqs[seq];
    int i = 0;
    while (i < n && i < s->n && s->tokens[i] == toks[i]) i++;
    return i;
}

void kv_truncate(mf_kv *kv, int seq, int n) {
    if (n < kv->seqs[seq].n) kv->seqs[seq].n = n;
}

void kv_append(mf_kv *kv, int seq, const int32_t *toks, int n) {
    kv_seq *s = &kv->seqs[seq];
    memcpy(s->tokens + s->n, toks, sizeof(int32_t) * (size_t)n);
    s->n += n;
}

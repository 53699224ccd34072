/* kv.h - host-side bookkeeping of the KV cache: which tokens each sequence slot
 * holds, so a new prompt reuses the longest cached prefix (the storage itself
 * belongs to the backend). */
#ifndef MINFER_KV_H
#define MINFER_KV_H

#include <stdint.h>

typedef struct kv_seq {
    int32_t *tokens;   /* [n_ctx] tokens at positions 0..n-1 */
    int n;
} kv_seq;

typedef struct mf_kv {
    int n_ctx, n_seq;
    kv_seq *seqs;      /* [n_seq] */
} mf_kv;

void kv_init(mf_kv *kv, int n_ctx, int n_seq);
void kv_free(mf_kv *kv);
/* Length of the common prefix of seq's cached tokens and toks[0..n). */
int kv_common_prefix(const mf_kv *kv, int seq, const int32_t *toks, int n);
/* Forgets positions >= n of seq. */
void kv_truncate(mf_kv *kv, int seq, int n);
/* Records toks at positions seq.n.. (caller checked the room). */
void kv_append(mf_kv *kv, int seq, const int32_t *toks, int n);

#endif

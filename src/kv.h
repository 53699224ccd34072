/* kv.h - host-side bookkeeping of the KV cache: which tokens each sequence slot
 * holds, so a new prompt reuses the longest cached prefix (the storage itself
 * belongs to the backend); and the names of the cache's element types. */
#ifndef MINFER_KV_H
#define MINFER_KV_H

#include <stdint.h>

#include "util.h"

/* The element type of the cache's K or V rows (--cache-type-k / --cache-type-v): a
 * ggml type id (quant.h) among QTYPE_F32, QTYPE_F16 and QTYPE_Q8_0 (blocks of 32 values
 * along a row, an f16 scale and 32 int8 each, as ggml's q8_0), or MF_KV_DEFAULT: the
 * backend's own (f32 on the CPU, f16 on CUDA). */
#define MF_KV_DEFAULT (-1)
#define MF_KV_TYPE_NAMES "f32|f16|q8_0" /* the names kv_type_parse takes, for a CLI choice */
typedef struct mf_kv_types {
    int k, v; /* a QTYPE_ or MF_KV_DEFAULT each */
} mf_kv_types;
/* name ("f32", "f16", "q8_0"; NULL or "" = MF_KV_DEFAULT) -> *type; MF_ERR_USAGE with a
 * message naming `what` (the option) and the names accepted otherwise. */
int kv_type_parse(const char *name, const char *what, int *type, mf_err *err);
/* "f32", "f16", "q8_0", or "default" for MF_KV_DEFAULT. */
const char *kv_type_name(int type);

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

/* kv.c - see kv.h. */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "util.h"

int kv_type_parse(const char *name, const char *what, int *type, mf_err *err) {
    static const int types[] = { QTYPE_F32, QTYPE_F16, QTYPE_Q8_0 };
    *type = MF_KV_DEFAULT;
    if (!name || !*name) return MF_OK;
    for (size_t i = 0; i < MF_ARRAY_LEN(types); i++)
        if (!strcmp(name, qtype_name((uint32_t)types[i]))) {
            *type = types[i];
            return MF_OK;
        }
    return mf_fail(err, MF_ERR_USAGE, "%s: unknown KV cache type '%s' (f32, f16 or q8_0)", what, name);
}

const char *kv_type_name(int type) { return type == MF_KV_DEFAULT ? "default" : qtype_name((uint32_t)type); }

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

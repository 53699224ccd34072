/* fuzz_gguf.c - libFuzzer target: a GGUF file as raw bytes, through everything that
 * reads one before inference: the reader (gguf_open_mem), the tokenizer loader
 * (tok_load on tokenizer.ggml.*), the chat-template detection on
 * tokenizer.chat_template, and the model loader (model_load over the same bytes in a
 * memfd: hyperparameters, architecture descriptor, tensor binding).
 *
 * The contract checked (beyond ASan/UBSan): every failure is a negative status with a
 * message; after a successful open every view lies inside the input (each byte is read
 * so ASan sees an escaped one) and tensor names are findable; a loaded vocab encodes
 * and decodes a short text with ids in range. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "chat.h"
#include "gguf.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;
static char memfd_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    mf_log_quiet = 1; /* the loaders' warnings would flood the fuzzer's output */
    memfd = memfd_create("fuzz_gguf", 0);
    if (memfd < 0) { perror("fuzz_gguf: memfd_create"); exit(1); }
    snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
    return 0;
}

static void must_explain(int rc, const mf_err *err) {
    if (rc > 0 || err->msg[0] == 0) {
        fprintf(stderr, "fuzz_gguf: status %d without a message\n", rc);
        abort();
    }
}

static void check_vocab(const mf_vocab *v) {
    int n = tok_n_vocab(v);
    if (n <= 0) abort();
    static const char text[] = "Hello world, <s> 12 caf\xc3\xa9 \xe2\x96\x81 \xff\n";
    for (int special = 0; special < 2; special++) {
        mf_err err = { { 0 } };
        int32_t *ids = NULL;
        int k = tok_encode(v, text, sizeof text - 1, 1, special, &ids, &err);
        if (k < 0) { must_explain(k, &err); continue; }
        char buf[256];
        tok_stream ts;
        tok_stream_init(&ts);
        for (int i = 0; i < k; i++) {
            if (ids[i] < 0 || ids[i] >= n) { fprintf(stderr, "fuzz_gguf: id %d of %d\n", ids[i], n); abort(); }
            int l = tok_piece(v, ids[i], special, buf, sizeof buf);
            if (l < 0) abort();
            /* cap 64 + 3 * piece is always enough (tokenizer.h); pieces longer than
             * buf are cut by tok_piece, so size the stream's buffer from l. */
            size_t cap = 64 + 3 * (size_t)l;
            char *out = malloc(cap);
            if (!out) abort();
            int w = tok_stream_push(&ts, v, ids[i], out, cap);
            if (w < 0 || (size_t)w > cap) abort();
            free(out);
        }
        int w = tok_stream_flush(&ts, buf, sizeof buf);
        if (w < 0 || (size_t)w > sizeof buf) abort();
        free(ids);
    }
    /* lookups on every id, and one past each end */
    volatile unsigned acc = 0;
    for (int32_t id = -1; id <= n && id < 4096; id++) {
        size_t len;
        const char *t = tok_text(v, id, &len);
        for (size_t j = 0; j < len; j++) acc += (unsigned char)t[j];
        acc += (unsigned)tok_type(v, id) + (unsigned)tok_is_eog(v, id);
    }
    (void)acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file f;
    mf_err err;
    err.msg[0] = 0;
    int rc = gguf_open_mem(&f, data, size, &err);
    if (rc != 0) {
        must_explain(rc, &err);
        return 0;
    }
    volatile unsigned acc = 0;
    for (uint64_t i = 0; i < f.n_kv; i++) {
        const gguf_kv *kv = &f.kv[i];
        for (uint64_t j = 0; j < kv->key.len; j++) acc += (unsigned char)kv->key.ptr[j];
        if (kv->type == GGUF_VTYPE_STRING)
            for (uint64_t j = 0; j < kv->v.str.len; j++) acc += (unsigned char)kv->v.str.ptr[j];
        if (kv->type == GGUF_VTYPE_ARRAY && kv->arr_type == GGUF_VTYPE_STRING)
            for (uint64_t s = 0; s < kv->arr_count; s++) {
                gguf_str v = gguf_arr_str(kv, s);
                for (uint64_t j = 0; j < v.len; j++) acc += (unsigned char)v.ptr[j];
            }
        if (kv->type == GGUF_VTYPE_ARRAY && kv->arr_count) {
            acc += (unsigned)gguf_arr_i32(kv, kv->arr_count - 1);
            acc += gguf_arr_f32(kv, kv->arr_count - 1) != 0.0f;
        }
    }
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        const uint8_t *d = t->data;
        if (t->nbytes) acc += d[0] + d[t->nbytes - 1];
        acc += (unsigned)strlen(t->cname);
        if (gguf_find_tensor(&f, t->cname) != t) abort(); /* names are unique and findable */
    }
    (void)acc;

    mf_vocab *v = NULL;
    err.msg[0] = 0;
    rc = tok_load(&v, &f, &err);
    if (rc != 0) must_explain(rc, &err);
    else check_vocab(v);

    gguf_str tmpl;
    err.msg[0] = 0;
    rc = gguf_get_str(&f, "tokenizer.chat_template", &tmpl, &err);
    if (rc < 0) must_explain(rc, &err);
    if (rc == 0) {
        chat_tmpl t;
        size_t eos_len = 0;
        const char *eos = v ? tok_text(v, tok_eos(v), &eos_len) : NULL;
        char eos_c[64];
        if (eos && eos_len < sizeof eos_c) { memcpy(eos_c, eos, eos_len); eos_c[eos_len] = 0; eos = eos_c; }
        else eos = NULL;
        chat_detect_len(tmpl.ptr, (size_t)tmpl.len, eos, &t);
        if ((unsigned)t >= CHAT_TMPL_COUNT) abort();
        char sys[256];
        size_t sl = chat_default_system(tmpl.ptr, (size_t)tmpl.len, sys, sizeof sys);
        if (sl >= sizeof sys || (sl && strlen(sys) != sl)) abort();
    }
    if (v) tok_free(v);
    gguf_close(&f);

    /* The model loader opens a path; the same bytes through a memfd. */
    if (ftruncate(memfd, 0) != 0) abort();
    if (size && pwrite(memfd, data, size, 0) != (ssize_t)size) abort();
    mf_model m;
    err.msg[0] = 0;
    rc = model_load(&m, memfd_path, &err);
    if (rc != 0) {
        must_explain(rc, &err);
        return 0;
    }
    char desc[512];
    model_describe(&m, desc, sizeof desc);
    if (m.hp.n_layer <= 0 || m.hp.n_vocab <= 0 || !m.tok_embd.host || !m.output.host) abort();
    for (int l = 0; l < m.hp.n_layer; l++) (void)model_layer_window(&m.desc, l);
    model_free(&m);
    return 0;
}

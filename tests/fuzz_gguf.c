/* fuzz_gguf.c - libFuzzer target for the GGUF reader (not built by `make test`).
 *
 * Build and run from the repository root:
 *   mkdir -p build/fuzz
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
 *       -fno-sanitize-recover=undefined -Isrc \
 *       tests/fuzz_gguf.c src/gguf.c src/quant.c src/util.c -lm -o build/fuzz/fuzz_gguf
 *   build/fuzz/fuzz_gguf -max_len=65536 build/fuzz/corpus ../shared/vocab
 * (a seed corpus: any small .gguf files, e.g. those tests/test_gguf.c writes.)
 *
 * The reader's contract under fuzzing: any input gives MF_OK or a negative status
 * with a message; on success every view it hands out lies inside the input. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file f;
    mf_err err;
    err.msg[0] = 0;
    int rc = gguf_open_mem(&f, data, size, &err);
    if (rc != 0) {
        if (rc > 0 || err.msg[0] == 0) abort(); /* every failure must explain itself */
        return 0;
    }
    /* Read every byte a successful open promises, so ASan sees an escaped view. */
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
        acc += d[0] + d[t->nbytes - 1] + (unsigned)strlen(t->cname);
        if (gguf_find_tensor(&f, t->cname) == NULL) abort(); /* names are unique and findable */
    }
    (void)acc;
    gguf_close(&f);
    return 0;
}

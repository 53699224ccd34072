/* quant_dump - expose quant.c's reference (de)quantizers to scripts, so an
 * independent implementation (the `gguf` Python package) can check them.
 *
 *   quant_dump TYPE            < blocks.bin > floats.bin   dequantize raw blocks
 *   quant_dump -q TYPE         < floats.bin > blocks.bin   quantize f32 values
 *   quant_dump -g FILE [NAME...]           > floats.bin   dequantize GGUF tensors
 *   quant_dump -l FILE                                    list GGUF tensors
 *
 * TYPE is a ggml type id (12) or name (q4_K, case-insensitive). Floats are
 * little-endian f32. -g writes the named tensors (all tensors in header order
 * when no name is given) back to back, each as n_elements floats in ggml order
 * (ne[0] fastest). -l prints one line per tensor: "name type_id n_elements".
 * Exit status: 0 ok, 1 usage, 2 bad input; errors go to stderr as one line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf.h"
#include "quant.h"
#include "util.h"

static int usage(void) {
    fprintf(stderr,
            "usage: quant_dump TYPE < blocks > floats\n"
            "       quant_dump -q TYPE < floats > blocks\n"
            "       quant_dump -g FILE.gguf [TENSOR...] > floats\n"
            "       quant_dump -l FILE.gguf\n");
    return 1;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "quant_dump: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

/* Type id from "12" or "q4_K"; -1 when neither. */
static int parse_type(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s && !*end) return v >= 0 && v < QTYPE_COUNT && qtype_get((uint32_t)v) ? (int)v : -1;
    for (uint32_t t = 0; t < QTYPE_COUNT; t++) {
        const qtype_traits *tr = qtype_get(t);
        if (tr && !strcasecmp(tr->name, s)) return (int)t;
    }
    return -1;
}

/* Reads all of stdin into a malloc'd buffer; returns 0 or -1 on a read error. */
static int read_all(FILE *f, uint8_t **out, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = mf_xmalloc(cap);
    for (;;) {
        if (n == cap) buf = mf_xrealloc(buf, cap *= 2);
        const size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

static int write_all(const void *p, size_t n) {
    return fwrite(p, 1, n, stdout) == n ? 0 : -1;
}

static int dump_raw(const char *tname, int quantize) {
    const int type = parse_type(tname);
    if (type < 0) return fail("unknown type '%s'", tname);
    const qtype_traits *t = qtype_get((uint32_t)type);
    /* Weight types, plus the activation formats quant.c also implements. */
    if (!t->supported && type != QTYPE_Q8_1 && type != QTYPE_Q8_K)
        return fail("type %s is not implemented by quant.c", t->name);
    uint8_t *in;
    size_t len;
    if (read_all(stdin, &in, &len)) return fail("reading stdin failed");
    int rc = 0;
    if (!quantize) {
        if (len % t->type_size) {
            rc = fail("input is not a whole number of %s blocks", t->name);
        } else {
            const int64_t n = (int64_t)(len / t->type_size) * t->blck;
            float *out = mf_xmalloc((size_t)n * sizeof(float));
            quant_dequantize_row((uint32_t)type, in, out, n);
            if (write_all(out, (size_t)n * sizeof(float))) rc = fail("writing stdout failed");
            free(out);
        }
    } else {
        const int64_t n = (int64_t)(len / sizeof(float));
        if (len % sizeof(float) || n % t->blck) {
            rc = fail("input is not a whole number of %s blocks of f32", t->name);
        } else {
            const uint64_t nbytes = qtype_row_size((uint32_t)type, (uint64_t)n);
            uint8_t *out = mf_xmalloc(nbytes);
            float *x = mf_xmalloc(len ? len : 1); /* aligned copy of the bytes */
            memcpy(x, in, len);
            quant_quantize_row((uint32_t)type, x, out, n);
            if (write_all(out, nbytes)) rc = fail("writing stdout failed");
            free(x);
            free(out);
        }
    }
    free(in);
    return rc;
}

/* Dequantizes one tensor row by row (rows of ne[0] values) to stdout. */
static int dump_tensor(const gguf_tensor *ts) {
    const qtype_traits *t = qtype_get(ts->type);
    if (!t || !t->supported) return fail("tensor %s: type %s is not supported", ts->cname, qtype_name(ts->type));
    const uint64_t cols = ts->ne[0];
    const uint64_t row_bytes = qtype_row_size(ts->type, cols);
    if (cols == 0 || row_bytes == 0 || ts->n_elements % cols || ts->n_elements / cols * row_bytes != ts->nbytes)
        return fail("tensor %s: inconsistent shape and size", ts->cname);
    float *row = mf_xmalloc(cols * sizeof(float));
    int rc = 0;
    for (uint64_t r = 0; r < ts->n_elements / cols && !rc; r++) {
        quant_dequantize_row(ts->type, (const uint8_t *)ts->data + r * row_bytes, row, (int64_t)cols);
        if (write_all(row, cols * sizeof(float))) rc = fail("writing stdout failed");
    }
    free(row);
    return rc;
}

static int dump_gguf(const char *path, int list, char **names, int n_names) {
    gguf_file f;
    mf_err err;
    if (gguf_open(&f, path, &err) != MF_OK) return fail("%s: %s", path, err.msg);
    int rc = 0;
    if (list) {
        for (uint64_t i = 0; i < f.n_tensors; i++)
            printf("%s %u %llu\n", f.tensors[i].cname, f.tensors[i].type, (unsigned long long)f.tensors[i].n_elements);
    } else if (n_names == 0) {
        for (uint64_t i = 0; i < f.n_tensors && !rc; i++) rc = dump_tensor(&f.tensors[i]);
    } else {
        for (int i = 0; i < n_names && !rc; i++) {
            const gguf_tensor *ts = gguf_find_tensor(&f, names[i]);
            rc = ts ? dump_tensor(ts) : fail("%s: no tensor named '%s'", path, names[i]);
        }
    }
    gguf_close(&f);
    return rc;
}

int main(int argc, char **argv) {
    int rc;
    if (argc == 2 && argv[1][0] != '-') rc = dump_raw(argv[1], 0);
    else if (argc == 3 && !strcmp(argv[1], "-q")) rc = dump_raw(argv[2], 1);
    else if (argc >= 3 && !strcmp(argv[1], "-g")) rc = dump_gguf(argv[2], 0, argv + 3, argc - 3);
    else if (argc == 3 && !strcmp(argv[1], "-l")) rc = dump_gguf(argv[2], 1, NULL, 0);
    else return usage();
    if (!rc && fflush(stdout)) rc = fail("writing stdout failed");
    return rc;
}

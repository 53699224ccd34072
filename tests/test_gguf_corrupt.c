/* test_gguf_corrupt.c - a generator of broken GGUF files. A valid base file is built
 * in memory by a hand-written encoder (independent of the library's writer) that
 * records where every field lives; each case patches one field or rebuilds a piece,
 * and the reader must answer with a negative status and a message, never a crash.
 * Buffers are malloc'd at their exact size so ASan flags any read past the end. */
#include <stdint.h>
#include <unistd.h>

#include "gguf.h"
#include "quant.h"
#include "test.h"

/* ------------------------------------------------------------------------- */
/* Encoder with field marks                                                  */
/* ------------------------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) { fprintf(stderr, "out of memory\n"); exit(2); }
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }
static void pad_to(buf *b, size_t align) { while (b->n % align) put_u8(b, 0); }

#define MAX_T 16
#define MAX_STRS 600

/* Byte offsets of the fields of the base file. For kv i: key_len (u64), key bytes,
 * vtype (u32), val (the value; for arrays the u32 element type, then u64 count at
 * val + 4, elements at val + 12). */
typedef struct layout {
    size_t version, n_tensors, n_kv;
    size_t key_len[32], key[32], vtype[32], val[32];
    size_t str_elem_len[MAX_STRS]; /* the string array's element length fields */
    size_t t_name_len[MAX_T], t_name[MAX_T], t_ndims[MAX_T], t_ne[MAX_T], t_type[MAX_T], t_offset[MAX_T];
    size_t header_end, data;
    uint64_t t_nbytes[MAX_T], t_off[MAX_T];
    int n_kvs, n_t, n_strs;
} layout;

enum { KV_ARCH, KV_ALIGN, KV_U8, KV_I8, KV_U16, KV_I16, KV_U32, KV_I32, KV_F32, KV_BOOL, KV_U64, KV_I64, KV_F64,
       KV_STR, KV_ARR_I32, KV_ARR_STR, KV_ARR_BOOL, KV_COUNT };

/* Tensors cycle through these shapes; names "w.tNN" are all the same length so a
 * one-byte patch can make two of them equal. */
static const struct { uint32_t type; uint32_t n_dims; uint64_t ne[2]; } TSHAPE[] = {
    { QTYPE_F32, 2, { 8, 2 } },    /* 64 bytes */
    { QTYPE_Q8_0, 2, { 64, 2 } },  /* 136 bytes */
    { QTYPE_Q4_K, 1, { 256, 1 } }, /* 144 bytes */
    { QTYPE_F16, 2, { 3, 5 } },    /* 30 bytes */
    { QTYPE_Q6_K, 1, { 256, 1 } }, /* 210 bytes */
};

/* Builds a valid file with n_t tensors and a string array of n_strs strings. The
 * last tensor ends exactly at the end of the file (no trailing padding), so every
 * strict truncation must be rejected. */
static void build(buf *b, layout *L, int n_t, int n_strs) {
    memset(L, 0, sizeof *L);
    b->n = 0;
    L->n_t = n_t;
    L->n_strs = n_strs;
    L->n_kvs = KV_COUNT;
    put_u32(b, GGUF_MAGIC);
    L->version = b->n; put_u32(b, 3);
    L->n_tensors = b->n; put_u64(b, (uint64_t)n_t);
    L->n_kv = b->n; put_u64(b, KV_COUNT);
    static const char *keys[KV_COUNT] = {
        "general.architecture", "general.alignment", "a.u8", "a.i8", "a.u16", "a.i16", "a.u32", "a.i32",
        "a.f32", "a.bool", "a.u64", "a.i64", "a.f64", "a.str", "a.arr_i32", "a.arr_str", "a.arr_bool",
    };
    static const uint32_t types[KV_COUNT] = {
        GGUF_VTYPE_STRING, GGUF_VTYPE_U32, GGUF_VTYPE_U8, GGUF_VTYPE_I8, GGUF_VTYPE_U16, GGUF_VTYPE_I16,
        GGUF_VTYPE_U32, GGUF_VTYPE_I32, GGUF_VTYPE_F32, GGUF_VTYPE_BOOL, GGUF_VTYPE_U64, GGUF_VTYPE_I64,
        GGUF_VTYPE_F64, GGUF_VTYPE_STRING, GGUF_VTYPE_ARRAY, GGUF_VTYPE_ARRAY, GGUF_VTYPE_ARRAY,
    };
    for (int i = 0; i < KV_COUNT; i++) {
        L->key_len[i] = b->n;
        put_u64(b, strlen(keys[i]));
        L->key[i] = b->n;
        put(b, keys[i], strlen(keys[i]));
        L->vtype[i] = b->n;
        put_u32(b, types[i]);
        L->val[i] = b->n;
        uint64_t x8 = 0x0102030405060708ull;
        double d = 2.5;
        float fl = -1.25f;
        switch (i) {
        case KV_ARCH: put_str(b, "llama"); break;
        case KV_ALIGN: put_u32(b, 32); break;
        case KV_U8: case KV_I8: put_u8(b, 7); break;
        case KV_BOOL: put_u8(b, 1); break;
        case KV_U16: case KV_I16: put(b, &x8, 2); break;
        case KV_U32: case KV_I32: put_u32(b, 123456); break;
        case KV_F32: put(b, &fl, 4); break;
        case KV_U64: case KV_I64: put_u64(b, x8); break;
        case KV_F64: put(b, &d, 8); break;
        case KV_STR: put_str(b, "hello"); break;
        case KV_ARR_I32:
            put_u32(b, GGUF_VTYPE_I32); put_u64(b, 3);
            put_u32(b, 1); put_u32(b, 2); put_u32(b, 3);
            break;
        case KV_ARR_STR:
            put_u32(b, GGUF_VTYPE_STRING); put_u64(b, (uint64_t)n_strs);
            for (int s = 0; s < n_strs; s++) {
                char tmp[32];
                snprintf(tmp, sizeof tmp, s % 3 == 1 ? "" : "tok%d", s);
                L->str_elem_len[s] = b->n;
                put_str(b, tmp);
            }
            break;
        case KV_ARR_BOOL:
            put_u32(b, GGUF_VTYPE_BOOL); put_u64(b, 2);
            put_u8(b, 0); put_u8(b, 1);
            break;
        }
    }
    uint64_t off = 0;
    for (int t = 0; t < n_t; t++) {
        int k = t % (int)MF_ARRAY_LEN(TSHAPE);
        char name[16];
        snprintf(name, sizeof name, "w.t%02d", t);
        L->t_name_len[t] = b->n;
        put_u64(b, strlen(name));
        L->t_name[t] = b->n;
        put(b, name, strlen(name));
        L->t_ndims[t] = b->n;
        put_u32(b, TSHAPE[k].n_dims);
        L->t_ne[t] = b->n;
        uint64_t n = 1;
        for (uint32_t d = 0; d < TSHAPE[k].n_dims; d++) { put_u64(b, TSHAPE[k].ne[d]); n *= TSHAPE[k].ne[d]; }
        L->t_type[t] = b->n;
        put_u32(b, TSHAPE[k].type);
        L->t_offset[t] = b->n;
        put_u64(b, off);
        L->t_off[t] = off;
        L->t_nbytes[t] = qtype_row_size(TSHAPE[k].type, TSHAPE[k].ne[0]) * (n / TSHAPE[k].ne[0]);
        off += (L->t_nbytes[t] + 31) / 32 * 32;
    }
    L->header_end = b->n;
    pad_to(b, 32);
    L->data = b->n;
    for (int t = 0; t < n_t; t++) {
        while (b->n < L->data + L->t_off[t]) put_u8(b, 0);
        for (uint64_t j = 0; j < L->t_nbytes[t]; j++) put_u8(b, (uint8_t)(j * 7 + (uint64_t)t));
    }
}

static void patch_u32(buf *b, size_t at, uint32_t v) { memcpy(b->p + at, &v, 4); }
static void patch_u64(buf *b, size_t at, uint64_t v) { memcpy(b->p + at, &v, 8); }

/* ------------------------------------------------------------------------- */
/* Running the reader                                                        */
/* ------------------------------------------------------------------------- */

/* Touches everything a successful open promises is readable, so ASan sees any
 * view that escaped the buffer. */
static unsigned touch_all(const gguf_file *f) {
    unsigned acc = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        for (uint64_t j = 0; j < kv->key.len; j++) acc += (unsigned char)kv->key.ptr[j];
        if (kv->type == GGUF_VTYPE_STRING)
            for (uint64_t j = 0; j < kv->v.str.len; j++) acc += (unsigned char)kv->v.str.ptr[j];
        if (kv->type == GGUF_VTYPE_ARRAY) {
            if (kv->arr_type == GGUF_VTYPE_STRING) {
                for (uint64_t s = 0; s < kv->arr_count; s++) {
                    gguf_str v = gguf_arr_str(kv, s);
                    for (uint64_t j = 0; j < v.len; j++) acc += (unsigned char)v.ptr[j];
                }
            } else if (kv->arr_count) {
                acc += kv->arr_data[0];
            }
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const uint8_t *d = t->data;
        acc += d[0] + d[t->nbytes - 1] + (unsigned)strlen(t->cname);
    }
    return acc;
}

/* Opens a private exact-size copy of data[0..n). Returns the status; *msg_ok is
 * set when a failure came with a non-empty message (or on success). */
static int open_copy(const uint8_t *data, size_t n, char *msg, size_t msg_cap) {
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) { fprintf(stderr, "out of memory\n"); exit(2); }
    if (n) memcpy(copy, data, n);
    gguf_file f;
    mf_err e;
    e.msg[0] = 0;
    int rc = gguf_open_mem(&f, n ? copy : NULL, n, &e);
    if (rc == 0) {
        static volatile unsigned sink;
        sink += touch_all(&f);
        gguf_close(&f);
    } else if (f.kv || f.tensors || f.n_kv || f.base) {
        rc = 12345; /* contract: f zeroed on failure */
    }
    if (msg) snprintf(msg, msg_cap, "%s", e.msg);
    free(copy);
    return rc;
}

static int n_cases;

/* One corruption: the reader must fail with a message, optionally containing `want`. */
static void expect_fail(const buf *b, const char *what, const char *want) {
    char msg[MF_ERR_LEN];
    int rc = open_copy(b->p, b->n, msg, sizeof msg);
    n_cases++;
    if (getenv("GGUF_TEST_VERBOSE")) fprintf(stderr, "%-40s -> %d %s\n", what, rc, msg);
    CHECK(rc < 0 && rc != 12345 && msg[0], "%s: rc %d msg '%s'", what, rc, msg);
    if (want && rc < 0) CHECK(strstr(msg, want) != NULL, "%s: message '%s' lacks '%s'", what, msg, want);
}

/* ------------------------------------------------------------------------- */
/* Cases                                                                     */
/* ------------------------------------------------------------------------- */

static void test_base_valid(void) {
    buf b = { 0 };
    layout L;
    build(&b, &L, 5, 4);
    char msg[MF_ERR_LEN];
    CHECK(open_copy(b.p, b.n, msg, sizeof msg) == 0, "base file opens: %s", msg);
    gguf_file f;
    mf_err e;
    if (gguf_open_mem(&f, b.p, b.n, &e) == 0) {
        CHECK(f.n_kv == KV_COUNT && f.n_tensors == 5 && f.data_offset == L.data, "base layout");
        for (int t = 0; t < 5; t++)
            CHECK(f.tensors[t].nbytes == L.t_nbytes[t] && f.tensors[t].offset == L.t_off[t], "base tensor %d", t);
        CHECK(f.data_offset + L.t_off[4] + L.t_nbytes[4] == b.n, "last tensor ends at the file end");
        gguf_close(&f);
    }
    build(&b, &L, 12, 500);
    CHECK(open_copy(b.p, b.n, msg, sizeof msg) == 0, "large base file opens: %s", msg);
    free(b.p);
}

/* Every strict prefix of the small file, and prefixes around every field of the
 * larger one, must be rejected. */
static void test_truncation(void) {
    buf b = { 0 };
    layout L;
    build(&b, &L, 5, 4);
    int bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        char msg[MF_ERR_LEN];
        int rc = open_copy(b.p, n, msg, sizeof msg);
        if (!(rc < 0 && rc != 12345 && msg[0])) {
            if (bad++ < 5) fprintf(stderr, "truncation at %zu of %zu: rc %d '%s'\n", n, b.n, rc, msg);
        }
        n_cases++;
    }
    CHECK(bad == 0, "%d of %zu truncations of the small file accepted", bad, b.n);

    build(&b, &L, 12, 500);
    size_t cuts[4096];
    size_t nc = 0;
#define CUT(x) do { if (nc + 3 <= MF_ARRAY_LEN(cuts)) { cuts[nc++] = (x); cuts[nc++] = (x) + 1; cuts[nc++] = (x) ? (x) - 1 : 0; } } while (0)
    CUT(L.version); CUT(L.n_tensors); CUT(L.n_kv); CUT(L.header_end); CUT(L.data);
    for (int i = 0; i < L.n_kvs; i++) { CUT(L.key_len[i]); CUT(L.key[i]); CUT(L.vtype[i]); CUT(L.val[i]); }
    for (int s = 0; s < L.n_strs; s += 7) CUT(L.str_elem_len[s]);
    for (int t = 0; t < L.n_t; t++) {
        CUT(L.t_name_len[t]); CUT(L.t_name[t]); CUT(L.t_ndims[t]); CUT(L.t_ne[t]); CUT(L.t_type[t]);
        CUT(L.t_offset[t]); CUT(L.data + L.t_off[t]); CUT(L.data + L.t_off[t] + L.t_nbytes[t]);
    }
#undef CUT
    bad = 0;
    for (size_t i = 0; i < nc; i++) {
        if (cuts[i] >= b.n) continue;
        char msg[MF_ERR_LEN];
        int rc = open_copy(b.p, cuts[i], msg, sizeof msg);
        if (!(rc < 0 && rc != 12345 && msg[0]) && bad++ < 5)
            fprintf(stderr, "truncation at %zu of %zu: rc %d '%s'\n", cuts[i], b.n, rc, msg);
        n_cases++;
    }
    CHECK(bad == 0, "%d section-boundary truncations of the large file accepted", bad);

    /* And through the mmap path: a truncated file on disk. */
    char path[] = "/tmp/minfer_test_gguf_corrupt_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) {
        size_t n = L.data + L.t_off[3] + 1;
        CHECK(write(fd, b.p, n) == (ssize_t)n, "write");
        close(fd);
        gguf_file f;
        mf_err e;
        e.msg[0] = 0;
        int rc = gguf_open(&f, path, &e);
        CHECK(rc == MF_ERR_INPUT && strstr(e.msg, "w.t03") && strstr(e.msg, path), "truncated on disk: %s", e.msg);
        unlink(path);
    }
    free(b.p);
}

/* Header, counts, lengths. */
static void test_counts_and_lengths(void) {
    buf b = { 0 };
    layout L;
#define CASE(what, want, patch) do { build(&b, &L, 5, 4); patch; expect_fail(&b, what, want); } while (0)
    CASE("bad magic", "magic", patch_u32(&b, 0, 0x46554746u));
    CASE("version 1", "version", patch_u32(&b, L.version, 1));
    CASE("version 0", "version", patch_u32(&b, L.version, 0));
    CASE("version 4", "version", patch_u32(&b, L.version, 4));
    CASE("big-endian version", "version", patch_u32(&b, L.version, 0x03000000u));
    CASE("n_kv UINT64_MAX", "n_kv", patch_u64(&b, L.n_kv, UINT64_MAX));
    CASE("n_kv 2^40", "n_kv", patch_u64(&b, L.n_kv, 1ull << 40));
    CASE("n_kv size/14", "n_kv", patch_u64(&b, L.n_kv, b.n / 14));
    CASE("n_kv + 1", NULL, patch_u64(&b, L.n_kv, KV_COUNT + 1));
    CASE("n_tensors UINT64_MAX", "n_tensors", patch_u64(&b, L.n_tensors, UINT64_MAX));
    CASE("n_tensors 2^61", "n_tensors", patch_u64(&b, L.n_tensors, 1ull << 61));
    CASE("n_tensors + 1", NULL, patch_u64(&b, L.n_tensors, 6));
    CASE("n_tensors + n_kv too many together", NULL,
         patch_u64(&b, L.n_kv, (b.n - 24) / 14 / 2 + 1); patch_u64(&b, L.n_tensors, (b.n - 24) / 33 / 2 + 1));
    CASE("key length UINT64_MAX", "string length", patch_u64(&b, L.key_len[KV_U8], UINT64_MAX));
    CASE("key length past the end", "string length", patch_u64(&b, L.key_len[KV_U8], b.n));
    CASE("key length 0", "empty", patch_u64(&b, L.key_len[KV_ARCH], 0));
    CASE("key of tensor-name length 0", "empty", patch_u64(&b, L.t_name_len[2], 0));
    CASE("key with NUL", "NUL", b.p[L.key[KV_U8] + 1] = 0);
    CASE("string value length UINT64_MAX", "string length", patch_u64(&b, L.val[KV_STR], UINT64_MAX));
    CASE("string value length past end", "string length", patch_u64(&b, L.val[KV_STR], b.n - L.val[KV_STR] - 7));
    CASE("string value length off by one (short)", NULL, patch_u64(&b, L.val[KV_ARCH], 4));
    CASE("array count UINT64_MAX", "array", patch_u64(&b, L.val[KV_ARR_I32] + 4, UINT64_MAX));
    CASE("array count wrapping count*4", "array", patch_u64(&b, L.val[KV_ARR_I32] + 4, (1ull << 62) + 1));
    CASE("array count past end", "array", patch_u64(&b, L.val[KV_ARR_I32] + 4, b.n / 4));
    CASE("bool array count huge", "array", patch_u64(&b, L.val[KV_ARR_BOOL] + 4, UINT64_MAX / 2));
    CASE("string array count UINT64_MAX", "strings", patch_u64(&b, L.val[KV_ARR_STR] + 4, UINT64_MAX));
    CASE("string array count wrapping *8", "strings", patch_u64(&b, L.val[KV_ARR_STR] + 4, (1ull << 61) + 1));
    CASE("string array count + 1000", NULL, patch_u64(&b, L.val[KV_ARR_STR] + 4, 1004));
    CASE("string element length UINT64_MAX", "string length", patch_u64(&b, L.str_elem_len[2], UINT64_MAX));
    CASE("string element length past end", "string length", patch_u64(&b, L.str_elem_len[0], b.n));
    CASE("tensor name length UINT64_MAX", "string length", patch_u64(&b, L.t_name_len[0], UINT64_MAX));
#undef CASE
    free(b.p);
}

/* Value types, alignment, duplicates. */
static void test_values(void) {
    buf b = { 0 };
    layout L;
#define CASE(what, want, patch) do { build(&b, &L, 5, 4); patch; expect_fail(&b, what, want); } while (0)
    CASE("unknown value type 13", "unknown value type 13", patch_u32(&b, L.vtype[KV_U32], 13));
    CASE("unknown value type 0xffffffff", "unknown value type", patch_u32(&b, L.vtype[KV_U8], 0xffffffffu));
    CASE("unknown array element type", "element type", patch_u32(&b, L.val[KV_ARR_I32], 99));
    CASE("nested array", "nested", patch_u32(&b, L.val[KV_ARR_I32], GGUF_VTYPE_ARRAY));
    CASE("bool value 2", "bool", b.p[L.val[KV_BOOL]] = 2);
    CASE("bool array element 7", "bool", b.p[L.val[KV_ARR_BOOL] + 13] = 7);
    CASE("alignment 0", "general.alignment", patch_u32(&b, L.val[KV_ALIGN], 0));
    CASE("alignment 3", "general.alignment", patch_u32(&b, L.val[KV_ALIGN], 3));
    CASE("alignment 48", "general.alignment", patch_u32(&b, L.val[KV_ALIGN], 48));
    CASE("alignment wrong type i32", "general.alignment", patch_u32(&b, L.vtype[KV_ALIGN], GGUF_VTYPE_I32));
    CASE("alignment wrong type f32", "general.alignment", patch_u32(&b, L.vtype[KV_ALIGN], GGUF_VTYPE_F32));
    CASE("alignment 2^31 (data past the end)", NULL, patch_u32(&b, L.val[KV_ALIGN], 1u << 31));
    CASE("alignment 64 (offsets misaligned)", "alignment", patch_u32(&b, L.val[KV_ALIGN], 64));
    CASE("duplicate key", "duplicate key 'a.i8'", b.p[L.key[KV_U8] + 2] = 'i');
    CASE("duplicate key, different types", "duplicate key", b.p[L.key[KV_U32] + 2] = 'i');
    CASE("duplicate tensor name", "duplicate tensor name 'w.t00'", b.p[L.t_name[3] + 4] = '0');
#undef CASE
    free(b.p);

    /* A duplicate among many keys (the sort-based check, not just neighbours). */
    buf c = { 0 };
    put_u32(&c, GGUF_MAGIC); put_u32(&c, 3); put_u64(&c, 0); put_u64(&c, 3000);
    for (int i = 0; i < 3000; i++) {
        char k[32];
        snprintf(k, sizeof k, "k.%d", i == 2999 ? 17 : i);
        put_str(&c, k); put_u32(&c, GGUF_VTYPE_U8); put_u8(&c, 1);
    }
    expect_fail(&c, "duplicate among 3000 keys", "duplicate key 'k.17'");
    free(c.p);
}

/* Tensor infos: dims, types, shapes, offsets. */
static void test_tensors(void) {
    buf b = { 0 };
    layout L;
#define CASE(what, want, patch) do { build(&b, &L, 5, 4); patch; expect_fail(&b, what, want); } while (0)
    CASE("n_dims 0", "n_dims = 0", patch_u32(&b, L.t_ndims[0], 0));
    CASE("n_dims 5", "n_dims = 5", patch_u32(&b, L.t_ndims[0], 5));
    CASE("n_dims UINT32_MAX", "n_dims", patch_u32(&b, L.t_ndims[1], UINT32_MAX));
    CASE("ne[0] 0", "ne[0] = 0", patch_u64(&b, L.t_ne[0], 0));
    CASE("ne[1] 0", "ne[1] = 0", patch_u64(&b, L.t_ne[0] + 8, 0));
    CASE("ne > INT64_MAX", "ne[0]", patch_u64(&b, L.t_ne[0], 1ull << 63));
    CASE("ne product overflows u64", "overflow",
         patch_u64(&b, L.t_ne[0], 1ull << 32); patch_u64(&b, L.t_ne[0] + 8, (1ull << 32) + 1));
    CASE("ne product past INT64_MAX", "overflow",
         patch_u64(&b, L.t_ne[0], 1ull << 40); patch_u64(&b, L.t_ne[0] + 8, 1ull << 23));
    CASE("nbytes overflows u64 (2^62 f32 values)", "byte size overflows",
         patch_u64(&b, L.t_ne[0], 1ull << 62); patch_u64(&b, L.t_ne[0] + 8, 1));
    CASE("ne product exceeds the file", "past end of file", patch_u64(&b, L.t_ne[0] + 8, 1ull << 20));
    CASE("ne[0] larger than the file", "past end of file", patch_u64(&b, L.t_ne[1], 32ull << 30));
    CASE("unknown tensor type 77", "unknown tensor type 77", patch_u32(&b, L.t_type[0], 77));
    CASE("unknown tensor type 4", "unknown tensor type 4", patch_u32(&b, L.t_type[0], 4));
    CASE("unknown tensor type UINT32_MAX", "unknown tensor type", patch_u32(&b, L.t_type[0], UINT32_MAX));
    CASE("unsupported tensor type q8_1", "unsupported tensor type q8_1", patch_u32(&b, L.t_type[2], QTYPE_Q8_1));
    CASE("unknown tensor type 16 (iq2_xxs)", "unknown tensor type 16", patch_u32(&b, L.t_type[2], 16));
    CASE("unsupported tensor type q8_K", "unsupported tensor type q8_K", patch_u32(&b, L.t_type[2], QTYPE_Q8_K));
    CASE("ne[0] not a block multiple (q8_0, 48)", "multiple", patch_u64(&b, L.t_ne[1], 48));
    CASE("ne[0] not a block multiple (q4_K, 128)", "multiple", patch_u64(&b, L.t_ne[2], 128));
    CASE("misaligned offset", "not a multiple of the alignment", patch_u64(&b, L.t_offset[1], L.t_off[1] + 1));
    CASE("misaligned offset by 16", "alignment", patch_u64(&b, L.t_offset[2], L.t_off[2] + 16));
    CASE("overlapping tensors", "overlap", patch_u64(&b, L.t_offset[1], 32));
    CASE("same offset twice", "overlap", patch_u64(&b, L.t_offset[2], L.t_off[1]));
    CASE("overlap, out of declaration order", "overlap", patch_u64(&b, L.t_offset[0], L.t_off[4]));
    CASE("offset past the end", "past end of file", patch_u64(&b, L.t_offset[2], 1u << 20));
    CASE("offset just past the end", "past end of file", patch_u64(&b, L.t_offset[4], L.t_off[4] + 32));
    CASE("offset near UINT64_MAX (aligned)", "past end of file", patch_u64(&b, L.t_offset[1], UINT64_MAX & ~31ull));
    CASE("offset UINT64_MAX", NULL, patch_u64(&b, L.t_offset[1], UINT64_MAX));
    CASE("offset 2^63", "past end of file", patch_u64(&b, L.t_offset[3], 1ull << 63));
#undef CASE
    free(b.p);
}

/* Random mutations of the base: any outcome but a crash (ASan/UBSan) or a broken
 * contract is fine. Deterministic seed. */
static void test_random_mutations(void) {
    buf b = { 0 };
    layout L;
    build(&b, &L, 5, 6);
    mf_rng rng;
    mf_rng_seed(&rng, 0x6775667a7a6572ull);
    uint8_t *m = malloc(b.n);
    int ok = 0, failed = 0, broken = 0;
    static const uint64_t interesting[] = { 0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 31, 32, 33, 64, 255, 256, 4096,
                                            0x7fffffffull, 0xffffffffull, 1ull << 32, 1ull << 62, 1ull << 63,
                                            INT64_MAX, UINT64_MAX, UINT64_MAX - 31 };
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(m, b.p, b.n);
        size_t n = b.n;
        int k = 1 + (int)(mf_rng_u64(&rng) % 4);
        for (int j = 0; j < k; j++) {
            uint64_t r = mf_rng_u64(&rng);
            /* Mostly mutate the header, where the parser lives. */
            size_t span = (r & 3) ? L.data : b.n;
            size_t at = (size_t)((r >> 8) % span);
            switch ((r >> 4) % 4) {
            case 0: m[at] = (uint8_t)(r >> 40); break;
            case 1: m[at] ^= (uint8_t)(1u << ((r >> 40) % 8)); break;
            case 2:
                if (at + 8 <= b.n) {
                    uint64_t v = interesting[(r >> 40) % MF_ARRAY_LEN(interesting)];
                    memcpy(m + at, &v, (r >> 50) & 1 ? 8 : 4);
                }
                break;
            case 3: n = (size_t)((r >> 40) % (b.n + 1)); break; /* truncate too */
            }
        }
        char msg[MF_ERR_LEN];
        int rc = open_copy(m, n, msg, sizeof msg);
        if (rc == 0) ok++;
        else if (rc < 0 && rc != 12345 && msg[0]) failed++;
        else if (broken++ < 5) fprintf(stderr, "mutation %d: rc %d msg '%s'\n", iter, rc, msg);
    }
    CHECK(broken == 0, "%d mutations broke the contract", broken);
    CHECK(failed > 10000, "most mutations rejected (%d ok, %d rejected)", ok, failed);
    fprintf(stderr, "random mutations: %d accepted, %d rejected\n", ok, failed);
    free(m);
    free(b.p);
}

int main(void) {
    test_base_valid();
    test_truncation();
    test_counts_and_lengths();
    test_values();
    test_tensors();
    test_random_mutations();
    fprintf(stderr, "%d corrupt files checked\n", n_cases);
    return test_summary("test_gguf_corrupt");
}

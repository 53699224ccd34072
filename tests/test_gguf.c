/* test_gguf.c - GGUF writer -> reader round trip, typed getters, writer errors, and
 * the real files in ../shared (facts cross-checked with the `gguf` Python reader). */
#include <float.h>
#include <stdint.h>
#include <unistd.h>

#include "gguf.h"
#include "quant.h"
#include "test.h"

/* Deterministic tensor bytes: depend on the tensor index and the byte position. */
static uint8_t pattern_byte(int ti, uint64_t j) { return (uint8_t)(j * 131u + (uint64_t)ti * 17u + 5u); }

static int fill_pattern(void *user, int ti, void *dst, uint64_t nbytes) {
    int *calls = user;
    if (calls) (*calls)++;
    uint8_t *p = dst;
    for (uint64_t j = 0; j < nbytes; j++) p[j] = pattern_byte(ti, j);
    return 0;
}

static int fill_fail(void *user, int ti, void *dst, uint64_t nbytes) {
    (void)user; (void)dst; (void)nbytes;
    return ti == 1 ? MF_ERR_INPUT : 0;
}

typedef struct tspec {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
} tspec;

static const tspec TENSORS[] = {
    { "token_embd.weight", QTYPE_Q4_K, 2, { 256, 3 } },
    { "output_norm.weight", QTYPE_F32, 1, { 7 } },
    { "blk.0.attn_q.weight", QTYPE_Q8_0, 2, { 64, 5 } },
    { "blk.0.ffn_down.weight", QTYPE_Q6_K, 2, { 512, 2 } },
    { "x.f16", QTYPE_F16, 3, { 3, 5, 7 } },
    { "x.bf16", QTYPE_BF16, 4, { 2, 3, 1, 2 } },
    { "x.q4_0", QTYPE_Q4_0, 1, { 32 } },
    { "x.q4_1", QTYPE_Q4_1, 2, { 32, 2 } },
    { "x.q5_0", QTYPE_Q5_0, 2, { 96, 1 } },
    { "x.q5_1", QTYPE_Q5_1, 1, { 64 } },
    { "x.q5_K", QTYPE_Q5_K, 2, { 256, 2 } },
};

/* Every value type and array flavour the format has. */
static void add_all_kvs(gguf_writer *w) {
    uint8_t u8 = 250; int8_t i8 = -120; uint16_t u16 = 65000; int16_t i16 = -32000;
    uint64_t u64 = UINT64_MAX - 5; int64_t i64 = INT64_MIN + 7; double f64 = -1.0e300;
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_scalar(w, "t.u8", GGUF_VTYPE_U8, &u8);
    gguf_w_scalar(w, "t.i8", GGUF_VTYPE_I8, &i8);
    gguf_w_scalar(w, "t.u16", GGUF_VTYPE_U16, &u16);
    gguf_w_scalar(w, "t.i16", GGUF_VTYPE_I16, &i16);
    gguf_w_u32(w, "t.u32", 4000000000u);
    gguf_w_i32(w, "t.i32", -2000000000);
    gguf_w_f32(w, "t.f32", 1.5e-5f);
    gguf_w_bool(w, "t.bool", 1);
    gguf_w_bool(w, "t.bool0", 0);
    gguf_w_str(w, "t.str", "hello, gguf");
    gguf_w_str(w, "t.empty", "");
    gguf_w_scalar(w, "t.u64", GGUF_VTYPE_U64, &u64);
    gguf_w_scalar(w, "t.i64", GGUF_VTYPE_I64, &i64);
    gguf_w_scalar(w, "t.f64", GGUF_VTYPE_F64, &f64);
    uint64_t small64 = 42;
    gguf_w_scalar(w, "t.u64small", GGUF_VTYPE_U64, &small64);
    double f64small = 0.25;
    gguf_w_scalar(w, "t.f64small", GGUF_VTYPE_F64, &f64small);

    const uint8_t a_u8[] = { 1, 2, 255 };
    const int8_t a_i8[] = { -1, 0, 127 };
    const uint16_t a_u16[] = { 1, 65535 };
    const int16_t a_i16[] = { -32768, 5 };
    const uint32_t a_u32[] = { 0, 7, 0xffffffffu };
    const int32_t a_i32[] = { -5, 0, 6, INT32_MAX };
    const float a_f32[] = { 0.5f, -2.0f, 1e30f };
    const uint8_t a_bool[] = { 1, 0, 1, 1 };
    const uint64_t a_u64[] = { UINT64_MAX };
    const int64_t a_i64[] = { INT64_MIN, 3 };
    const double a_f64[] = { 3.25, -0.0 };
    const gguf_str a_str[] = { { "alpha", 5 }, { "", 0 }, { "g\0mma", 5 }, { "\xe2\x96\x81ha", 5 } };
    gguf_w_arr(w, "a.u8", GGUF_VTYPE_U8, a_u8, 3);
    gguf_w_arr(w, "a.i8", GGUF_VTYPE_I8, a_i8, 3);
    gguf_w_arr(w, "a.u16", GGUF_VTYPE_U16, a_u16, 2);
    gguf_w_arr(w, "a.i16", GGUF_VTYPE_I16, a_i16, 2);
    gguf_w_arr(w, "a.u32", GGUF_VTYPE_U32, a_u32, 3);
    gguf_w_arr(w, "a.i32", GGUF_VTYPE_I32, a_i32, 4);
    gguf_w_arr(w, "a.f32", GGUF_VTYPE_F32, a_f32, 3);
    gguf_w_arr(w, "a.bool", GGUF_VTYPE_BOOL, a_bool, 4);
    gguf_w_arr(w, "a.u64", GGUF_VTYPE_U64, a_u64, 1);
    gguf_w_arr(w, "a.i64", GGUF_VTYPE_I64, a_i64, 2);
    gguf_w_arr(w, "a.f64", GGUF_VTYPE_F64, a_f64, 2);
    gguf_w_arr(w, "a.str", GGUF_VTYPE_STRING, a_str, 4);
    gguf_w_arr(w, "a.empty_i32", GGUF_VTYPE_I32, NULL, 0);
    gguf_w_arr(w, "a.empty_str", GGUF_VTYPE_STRING, NULL, 0);
}

static void check_all_kvs(const gguf_file *f) {
    const gguf_kv *kv;
    CHECK((kv = gguf_find(f, "t.u8")) && kv->type == GGUF_VTYPE_U8 && kv->v.u64 == 250, "u8");
    CHECK((kv = gguf_find(f, "t.i8")) && kv->type == GGUF_VTYPE_I8 && kv->v.i64 == -120, "i8");
    CHECK((kv = gguf_find(f, "t.u16")) && kv->type == GGUF_VTYPE_U16 && kv->v.u64 == 65000, "u16");
    CHECK((kv = gguf_find(f, "t.i16")) && kv->type == GGUF_VTYPE_I16 && kv->v.i64 == -32000, "i16");
    CHECK((kv = gguf_find(f, "t.u32")) && kv->type == GGUF_VTYPE_U32 && kv->v.u64 == 4000000000u, "u32");
    CHECK((kv = gguf_find(f, "t.i32")) && kv->type == GGUF_VTYPE_I32 && kv->v.i64 == -2000000000, "i32");
    CHECK((kv = gguf_find(f, "t.f32")) && kv->type == GGUF_VTYPE_F32 && (float)kv->v.f64 == 1.5e-5f, "f32");
    CHECK((kv = gguf_find(f, "t.bool")) && kv->type == GGUF_VTYPE_BOOL && kv->v.u64 == 1, "bool");
    CHECK((kv = gguf_find(f, "t.str")) && kv->type == GGUF_VTYPE_STRING && gguf_str_eq(kv->v.str, "hello, gguf"),
          "str");
    CHECK((kv = gguf_find(f, "t.empty")) && kv->type == GGUF_VTYPE_STRING && kv->v.str.len == 0, "empty str");
    CHECK((kv = gguf_find(f, "t.u64")) && kv->type == GGUF_VTYPE_U64 && kv->v.u64 == UINT64_MAX - 5, "u64");
    CHECK((kv = gguf_find(f, "t.i64")) && kv->type == GGUF_VTYPE_I64 && kv->v.i64 == INT64_MIN + 7, "i64");
    CHECK((kv = gguf_find(f, "t.f64")) && kv->type == GGUF_VTYPE_F64 && kv->v.f64 == -1.0e300, "f64");

    struct { const char *key; gguf_vtype t; uint64_t n; size_t es; } arrs[] = {
        { "a.u8", GGUF_VTYPE_U8, 3, 1 }, { "a.i8", GGUF_VTYPE_I8, 3, 1 }, { "a.u16", GGUF_VTYPE_U16, 2, 2 },
        { "a.i16", GGUF_VTYPE_I16, 2, 2 }, { "a.u32", GGUF_VTYPE_U32, 3, 4 }, { "a.i32", GGUF_VTYPE_I32, 4, 4 },
        { "a.f32", GGUF_VTYPE_F32, 3, 4 }, { "a.bool", GGUF_VTYPE_BOOL, 4, 1 }, { "a.u64", GGUF_VTYPE_U64, 1, 8 },
        { "a.i64", GGUF_VTYPE_I64, 2, 8 }, { "a.f64", GGUF_VTYPE_F64, 2, 8 }, { "a.str", GGUF_VTYPE_STRING, 4, 0 },
        { "a.empty_i32", GGUF_VTYPE_I32, 0, 4 }, { "a.empty_str", GGUF_VTYPE_STRING, 0, 0 },
    };
    for (size_t i = 0; i < MF_ARRAY_LEN(arrs); i++) {
        mf_err e = { { 0 } };
        const gguf_kv *a = NULL;
        int rc = gguf_get_arr(f, arrs[i].key, arrs[i].t, &a, &e);
        CHECK(rc == 0 && a && a->arr_count == arrs[i].n, "array %s: rc %d %s", arrs[i].key, rc, e.msg);
    }
    const uint16_t a_u16[] = { 1, 65535 };
    const int16_t a_i16[] = { -32768, 5 };
    const int64_t a_i64[] = { INT64_MIN, 3 };
    const double a_f64[] = { 3.25, -0.0 };
    const uint8_t a_bool[] = { 1, 0, 1, 1 };
    CHECK((kv = gguf_find(f, "a.u16")) && memcmp(kv->arr_data, a_u16, sizeof a_u16) == 0, "u16 array bytes");
    CHECK((kv = gguf_find(f, "a.i16")) && memcmp(kv->arr_data, a_i16, sizeof a_i16) == 0, "i16 array bytes");
    CHECK((kv = gguf_find(f, "a.i64")) && memcmp(kv->arr_data, a_i64, sizeof a_i64) == 0, "i64 array bytes");
    CHECK((kv = gguf_find(f, "a.f64")) && memcmp(kv->arr_data, a_f64, sizeof a_f64) == 0, "f64 array bytes");
    CHECK((kv = gguf_find(f, "a.bool")) && memcmp(kv->arr_data, a_bool, sizeof a_bool) == 0, "bool array bytes");
    kv = gguf_find(f, "a.i32");
    CHECK(kv && gguf_arr_i32(kv, 0) == -5 && gguf_arr_i32(kv, 3) == INT32_MAX, "i32 elements");
    CHECK(kv && gguf_arr_i32(kv, 4) == 0 && gguf_arr_f32(kv, 0) == 0.0f, "i32 accessor out of contract gives 0");
    kv = gguf_find(f, "a.f32");
    CHECK(kv && gguf_arr_f32(kv, 1) == -2.0f && gguf_arr_f32(kv, 2) == 1e30f, "f32 elements");
    kv = gguf_find(f, "a.str");
    CHECK(kv && gguf_str_eq(gguf_arr_str(kv, 0), "alpha") && gguf_arr_str(kv, 1).len == 0, "str elements 0,1");
    CHECK(kv && gguf_arr_str(kv, 2).len == 5 && memcmp(gguf_arr_str(kv, 2).ptr, "g\0mma", 5) == 0,
          "string element with an embedded NUL survives");
    CHECK(kv && gguf_str_eq(gguf_arr_str(kv, 3), "\xe2\x96\x81ha"), "utf-8 element");
    CHECK(kv && gguf_arr_str(kv, 4).len == 0 && gguf_arr_i32(kv, 0) == 0, "str accessor out of contract");
}

/* Typed getters: conversions that fit, errors for those that do not, 1 for absent. */
static void check_getters(const gguf_file *f) {
    mf_err e;
    uint32_t u32 = 12345;
    int64_t i64 = 0;
    float f32 = 0;
    int b = -1;
    gguf_str s = { 0 };
    const gguf_kv *a = NULL;

    CHECK(gguf_get_u32(f, "nope", &u32, &e) == 1 && u32 == 12345, "absent key: 1, out untouched");
    CHECK(gguf_get_i64(f, "nope", &i64, &e) == 1 && gguf_get_f32(f, "nope", &f32, &e) == 1, "absent i64/f32");
    CHECK(gguf_get_bool(f, "nope", &b, &e) == 1 && gguf_get_str(f, "nope", &s, &e) == 1 && b == -1, "absent");
    CHECK(gguf_get_arr(f, "nope", GGUF_VTYPE_I32, &a, &e) == 1 && a == NULL, "absent array");

    CHECK(gguf_get_u32(f, "t.u8", &u32, &e) == 0 && u32 == 250, "u32 from u8");
    CHECK(gguf_get_u32(f, "t.u16", &u32, &e) == 0 && u32 == 65000, "u32 from u16");
    CHECK(gguf_get_u32(f, "t.u32", &u32, &e) == 0 && u32 == 4000000000u, "u32 from u32");
    CHECK(gguf_get_u32(f, "t.u64small", &u32, &e) == 0 && u32 == 42, "u32 from small u64");
    e.msg[0] = 0;
    CHECK(gguf_get_u32(f, "t.u64", &u32, &e) == MF_ERR_INPUT && e.msg[0], "u32 from huge u64 fails: %s", e.msg);
    e.msg[0] = 0;
    CHECK(gguf_get_u32(f, "t.i8", &u32, &e) == MF_ERR_INPUT && e.msg[0], "u32 from negative i8 fails");
    CHECK(gguf_get_u32(f, "t.str", &u32, &e) == MF_ERR_INPUT && strstr(e.msg, "string"), "u32 from string: %s",
          e.msg);
    CHECK(gguf_get_u32(f, "t.bool", &u32, &e) == MF_ERR_INPUT, "u32 from bool fails");
    CHECK(gguf_get_u32(f, "t.f32", &u32, &e) == MF_ERR_INPUT, "u32 from f32 fails");
    CHECK(gguf_get_u32(f, "a.u32", &u32, &e) == MF_ERR_INPUT, "u32 from array fails");

    CHECK(gguf_get_i64(f, "t.i8", &i64, &e) == 0 && i64 == -120, "i64 from i8");
    CHECK(gguf_get_i64(f, "t.i32", &i64, &e) == 0 && i64 == -2000000000, "i64 from i32");
    CHECK(gguf_get_i64(f, "t.i64", &i64, &e) == 0 && i64 == INT64_MIN + 7, "i64 from i64");
    CHECK(gguf_get_i64(f, "t.u32", &i64, &e) == 0 && i64 == 4000000000LL, "i64 from u32");
    CHECK(gguf_get_i64(f, "t.u64", &i64, &e) == MF_ERR_INPUT && e.msg[0], "i64 from huge u64 fails");
    CHECK(gguf_get_i64(f, "t.f64", &i64, &e) == MF_ERR_INPUT, "i64 from f64 fails");

    CHECK(gguf_get_f32(f, "t.f32", &f32, &e) == 0 && f32 == 1.5e-5f, "f32 from f32");
    CHECK(gguf_get_f32(f, "t.f64small", &f32, &e) == 0 && f32 == 0.25f, "f32 from f64");
    CHECK(gguf_get_f32(f, "t.f64", &f32, &e) == MF_ERR_INPUT, "f32 from out-of-range f64 fails");
    CHECK(gguf_get_f32(f, "t.u32", &f32, &e) == MF_ERR_INPUT, "f32 from u32 fails");

    CHECK(gguf_get_bool(f, "t.bool", &b, &e) == 0 && b == 1, "bool true");
    CHECK(gguf_get_bool(f, "t.bool0", &b, &e) == 0 && b == 0, "bool false");
    CHECK(gguf_get_bool(f, "t.u8", &b, &e) == MF_ERR_INPUT, "bool from u8 fails");

    CHECK(gguf_get_str(f, "t.str", &s, &e) == 0 && gguf_str_eq(s, "hello, gguf"), "str");
    CHECK(gguf_get_str(f, "t.u8", &s, &e) == MF_ERR_INPUT, "str from u8 fails");
    CHECK(gguf_get_str(f, "a.str", &s, &e) == MF_ERR_INPUT, "str from array fails");

    CHECK(gguf_get_arr(f, "a.f32", GGUF_VTYPE_I32, &a, &e) == MF_ERR_INPUT && strstr(e.msg, "f32"),
          "array element type mismatch: %s", e.msg);
    CHECK(gguf_get_arr(f, "t.i32", GGUF_VTYPE_I32, &a, &e) == MF_ERR_INPUT, "array getter on a scalar fails");

    CHECK(strcmp(gguf_vtype_name(GGUF_VTYPE_STRING), "string") == 0 &&
          strcmp(gguf_vtype_name((gguf_vtype)99), "unknown") == 0, "vtype names");
}

static void check_tensors(const gguf_file *f, uint64_t alignment) {
    CHECK(f->n_tensors == MF_ARRAY_LEN(TENSORS), "tensor count %llu", (unsigned long long)f->n_tensors);
    CHECK(f->data_offset % alignment == 0, "data offset %llu aligned to %llu", (unsigned long long)f->data_offset,
          (unsigned long long)alignment);
    uint64_t end = 0;
    for (size_t i = 0; i < MF_ARRAY_LEN(TENSORS) && i < f->n_tensors; i++) {
        const tspec *ts = &TENSORS[i];
        const gguf_tensor *t = gguf_find_tensor(f, ts->name);
        CHECK(t == &f->tensors[i], "find_tensor %s", ts->name);
        if (!t) continue;
        CHECK(strcmp(t->cname, ts->name) == 0 && t->type == ts->type && t->n_dims == ts->n_dims, "%s info",
              ts->name);
        uint64_t n = 1;
        for (int d = 0; d < 4; d++) {
            uint64_t want = d < (int)ts->n_dims ? ts->ne[d] : 1;
            CHECK(t->ne[d] == want, "%s ne[%d]", ts->name, d);
            n *= want;
        }
        CHECK(t->n_elements == n, "%s n_elements", ts->name);
        CHECK(t->nbytes == qtype_row_size(ts->type, ts->ne[0]) * (n / ts->ne[0]), "%s nbytes", ts->name);
        CHECK(t->offset % alignment == 0 && t->offset >= end, "%s offset %llu aligned, in order", ts->name,
              (unsigned long long)t->offset);
        CHECK((const uint8_t *)t->data == f->base + f->data_offset + t->offset, "%s data pointer", ts->name);
        end = t->offset + t->nbytes;
        int ok = 1;
        for (uint64_t j = 0; j < t->nbytes; j++) ok &= ((const uint8_t *)t->data)[j] == pattern_byte((int)i, j);
        CHECK(ok, "%s data bytes", ts->name);
    }
    CHECK(gguf_find_tensor(f, "missing.weight") == NULL, "missing tensor");
    CHECK(f->data_offset + end <= f->size, "data inside the file");
}

static gguf_writer *make_writer(uint64_t alignment) {
    gguf_writer *w = gguf_writer_new(alignment);
    add_all_kvs(w);
    for (size_t i = 0; i < MF_ARRAY_LEN(TENSORS); i++)
        gguf_w_tensor(w, TENSORS[i].name, TENSORS[i].type, TENSORS[i].n_dims, TENSORS[i].ne);
    return w;
}

/* Round trip in memory at several alignments, and once through a real file (mmap). */
static void test_round_trip(void) {
    const uint64_t aligns[] = { 32, 1, 8, 64, 4096 };
    for (size_t ai = 0; ai < MF_ARRAY_LEN(aligns); ai++) {
        uint64_t al = aligns[ai];
        gguf_writer *w = make_writer(al);
        uint8_t *buf = NULL;
        size_t size = 0;
        mf_err e = { { 0 } };
        int calls = 0;
        int rc = gguf_writer_write_mem(w, &buf, &size, fill_pattern, &calls, &e);
        CHECK(rc == 0, "write_mem align %llu: %s", (unsigned long long)al, e.msg);
        CHECK(calls == (int)MF_ARRAY_LEN(TENSORS), "fill called once per tensor (%d)", calls);
        gguf_writer_free(w);
        if (rc) continue;
        CHECK(size % al == 0, "file padded to the alignment");
        gguf_file f;
        rc = gguf_open_mem(&f, buf, size, &e);
        CHECK(rc == 0, "open_mem align %llu: %s", (unsigned long long)al, e.msg);
        if (rc == 0) {
            CHECK(f.version == 3 && f.alignment == al && f.size == size && !f.mapped, "header fields");
            const gguf_kv *kv = gguf_find(&f, "general.alignment");
            if (al == GGUF_DEFAULT_ALIGNMENT)
                CHECK(kv == NULL, "general.alignment not written for the default");
            else
                CHECK(kv && kv->type == GGUF_VTYPE_U32 && kv->v.u64 == al, "general.alignment written");
            check_all_kvs(&f);
            check_getters(&f);
            check_tensors(&f, al);
            gguf_close(&f);
            CHECK(f.kv == NULL && f.tensors == NULL && f.n_kv == 0, "close zeroes");
        }
        free(buf);
    }

    /* Through a file: the writer's path entry point and the mmap reader. */
    char path[] = "/tmp/minfer_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    close(fd);
    gguf_writer *w = make_writer(64);
    mf_err e = { { 0 } };
    int rc = gguf_writer_write(w, path, fill_pattern, NULL, &e);
    CHECK(rc == 0, "write file: %s", e.msg);
    gguf_file f;
    rc = gguf_open(&f, path, &e);
    CHECK(rc == 0, "open file: %s", e.msg);
    if (rc == 0) {
        CHECK(f.mapped == 1 && f.alignment == 64, "mapped");
        check_all_kvs(&f);
        check_tensors(&f, 64);
        gguf_close(&f);
    }
    /* A failing fill callback: an error naming the tensor, and no file left behind. */
    e.msg[0] = 0;
    rc = gguf_writer_write(w, path, fill_fail, NULL, &e);
    CHECK(rc < 0 && strstr(e.msg, TENSORS[1].name), "fill failure reported: %s", e.msg);
    CHECK(access(path, F_OK) != 0, "partial file removed");
    gguf_writer_free(w);
    unlink(path);

    /* Writer with a caller-provided general.alignment that agrees: written once. */
    w = gguf_writer_new(128);
    gguf_w_u32(w, "general.alignment", 128);
    uint64_t ne = 32;
    gguf_w_tensor(w, "t", QTYPE_F32, 1, &ne);
    uint8_t *buf = NULL;
    size_t size = 0;
    rc = gguf_writer_write_mem(w, &buf, &size, NULL, NULL, &e);
    CHECK(rc == 0, "explicit alignment: %s", e.msg);
    gguf_writer_free(w);
    if (rc == 0 && gguf_open_mem(&f, buf, size, &e) == 0) {
        CHECK(f.n_kv == 1 && f.alignment == 128 && f.tensors[0].offset == 0, "one general.alignment, 128");
        int zero = 1;
        for (uint64_t j = 0; j < f.tensors[0].nbytes; j++) zero &= ((const uint8_t *)f.tensors[0].data)[j] == 0;
        CHECK(zero, "NULL fill writes zeros");
        gguf_close(&f);
    } else {
        CHECK(0, "explicit alignment reopen: %s", e.msg);
    }
    free(buf);

    /* No tensors, no kvs: the smallest valid file. */
    w = gguf_writer_new(32);
    rc = gguf_writer_write_mem(w, &buf, &size, NULL, NULL, &e);
    gguf_writer_free(w);
    CHECK(rc == 0 && size == 32, "empty file is a padded header (%zu bytes)", size);
    if (rc == 0) {
        CHECK(gguf_open_mem(&f, buf, size, &e) == 0 && f.n_kv == 0 && f.n_tensors == 0, "empty file opens: %s",
              e.msg);
        gguf_close(&f);
        /* Unpadded (as the vocab files are): still valid with no tensors. */
        CHECK(gguf_open_mem(&f, buf, 24, &e) == 0 && f.data_offset == 32, "unpadded empty file opens: %s", e.msg);
        gguf_close(&f);
    }
    free(buf);
}

/* Adder mistakes are recorded and reported by the write. */
static void test_writer_errors(void) {
    struct { const char *what; int which; } cases[] = {
        { "duplicate key", 0 }, { "duplicate tensor", 1 }, { "block multiple", 2 }, { "bad alignment", 3 },
        { "alignment disagrees", 4 }, { "unknown type", 5 }, { "n_dims 0", 6 }, { "ne 0", 7 },
        { "nested array", 8 }, { "empty key", 9 },
    };
    for (size_t i = 0; i < MF_ARRAY_LEN(cases); i++) {
        gguf_writer *w = gguf_writer_new(cases[i].which == 3 ? 3 : 32);
        uint64_t ne[2] = { 64, 2 };
        switch (cases[i].which) {
        case 0: gguf_w_u32(w, "k", 1); gguf_w_str(w, "k", "x"); break;
        case 1: gguf_w_tensor(w, "t", QTYPE_F32, 2, ne); gguf_w_tensor(w, "t", QTYPE_F32, 2, ne); break;
        case 2: ne[0] = 48; gguf_w_tensor(w, "t", QTYPE_Q4_K, 2, ne); break;
        case 3: break;
        case 4: gguf_w_u32(w, "general.alignment", 64); break;
        case 5: gguf_w_tensor(w, "t", 77, 2, ne); break;
        case 6: gguf_w_tensor(w, "t", QTYPE_F32, 0, ne); break;
        case 7: ne[1] = 0; gguf_w_tensor(w, "t", QTYPE_F32, 2, ne); break;
        case 8: gguf_w_arr(w, "a", GGUF_VTYPE_ARRAY, ne, 1); break;
        case 9: gguf_w_u32(w, "", 1); break;
        }
        uint8_t *buf = NULL;
        size_t size = 0;
        mf_err e = { { 0 } };
        int rc = gguf_writer_write_mem(w, &buf, &size, NULL, NULL, &e);
        CHECK(rc < 0 && e.msg[0] && buf == NULL, "writer error '%s': rc %d msg '%s'", cases[i].what, rc, e.msg);
        free(buf);
        gguf_writer_free(w);
    }
}

static void test_open_errors(void) {
    gguf_file f;
    mf_err e = { { 0 } };
    CHECK(gguf_open(&f, "/nonexistent/minfer.gguf", &e) == MF_ERR_IO && strstr(e.msg, "nonexistent"),
          "missing file: %s", e.msg);
    CHECK(gguf_open(&f, "/tmp", &e) == MF_ERR_IO && e.msg[0], "directory: %s", e.msg);
    CHECK(gguf_open_mem(&f, NULL, 0, &e) == MF_ERR_INPUT && e.msg[0], "empty buffer: %s", e.msg);
    char path[] = "/tmp/minfer_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        close(fd);
        e.msg[0] = 0;
        CHECK(gguf_open(&f, path, &e) == MF_ERR_INPUT && e.msg[0], "empty file: %s", e.msg);
        CHECK(f.kv == NULL && f.base == NULL, "f zeroed on failure");
        unlink(path);
    }
}

/* ---- real files (facts from the `gguf` Python package's GGUFReader) ---- */

static int open_shared(gguf_file *f, const char *rel) {
    const char *dir = test_shared_dir();
    if (!dir) {
        SKIP("../shared not found: %s", rel);
        return -1;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    mf_err e = { { 0 } };
    int rc = gguf_open(f, path, &e);
    CHECK(rc == 0, "open %s: %s", path, e.msg);
    return rc;
}

static void test_stories260k(void) {
    gguf_file f;
    if (open_shared(&f, "models/stories260K.gguf")) return;
    mf_err e;
    gguf_str s = { 0 };
    uint32_t u = 0;
    float eps = 0;
    CHECK(f.version == 3 && f.n_kv == 19 && f.n_tensors == 48, "stories260K counts");
    CHECK(f.alignment == 32 && f.data_offset == 14176 && f.size == 1185376, "stories260K data offset");
    CHECK(gguf_get_str(&f, "general.architecture", &s, &e) == 0 && gguf_str_eq(s, "llama"), "architecture");
    CHECK(gguf_get_u32(&f, "llama.embedding_length", &u, &e) == 0 && u == 64, "embedding_length");
    CHECK(gguf_get_u32(&f, "llama.block_count", &u, &e) == 0 && u == 5, "block_count");
    CHECK(gguf_get_u32(&f, "llama.feed_forward_length", &u, &e) == 0 && u == 172, "ffn length");
    CHECK(gguf_get_u32(&f, "llama.attention.head_count", &u, &e) == 0 && u == 8, "heads");
    CHECK(gguf_get_u32(&f, "llama.attention.head_count_kv", &u, &e) == 0 && u == 4, "kv heads");
    CHECK(gguf_get_u32(&f, "llama.context_length", &u, &e) == 0 && u == 2048, "context");
    CHECK(gguf_get_u32(&f, "tokenizer.ggml.padding_token_id", &u, &e) == 0 && u == 4294967295u, "pad id");
    CHECK(gguf_get_f32(&f, "llama.attention.layer_norm_rms_epsilon", &eps, &e) == 0 && eps == 1e-5f, "eps");
    const gguf_kv *tok = NULL, *sc = NULL, *tt = NULL;
    CHECK(gguf_get_arr(&f, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, &tok, &e) == 0 && tok->arr_count == 512,
          "tokens");
    if (tok) {
        CHECK(gguf_str_eq(gguf_arr_str(tok, 0), "<unk>") && gguf_str_eq(gguf_arr_str(tok, 1), "<s>") &&
              gguf_str_eq(gguf_arr_str(tok, 300), "\xe2\x96\x81ha") &&
              gguf_str_eq(gguf_arr_str(tok, 511), "\xe2\x80\x8a"), "token strings");
    }
    CHECK(gguf_get_arr(&f, "tokenizer.ggml.scores", GGUF_VTYPE_F32, &sc, &e) == 0 && sc->arr_count == 512, "scores");
    if (sc) CHECK(gguf_arr_f32(sc, 300) == -41.0f && gguf_arr_f32(sc, 511) == -252.0f, "score values");
    CHECK(gguf_get_arr(&f, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, &tt, &e) == 0, "token types");
    if (tt) CHECK(gguf_arr_i32(tt, 0) == 2 && gguf_arr_i32(tt, 1) == 3 && gguf_arr_i32(tt, 3) == 6, "types");
    const gguf_tensor *t = gguf_find_tensor(&f, "token_embd.weight");
    CHECK(t && t->type == QTYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->offset == 0 &&
          t->nbytes == 131072, "token_embd.weight");
    if (t) {
        float x[3];
        memcpy(x, t->data, sizeof x);
        CHECK(x[0] == -0.29474878311157227f && x[2] == 0.1754225343465805f, "token_embd values");
    }
    t = gguf_find_tensor(&f, "blk.4.ffn_norm.weight");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 64 && f.data_offset + t->offset == 1185120, "last tensor");
    if (t) {
        float x;
        memcpy(&x, t->data, 4);
        CHECK(x == 1.0344241857528687f, "ffn_norm value");
    }
    t = gguf_find_tensor(&f, "blk.0.ffn_down.weight");
    CHECK(t && t->ne[0] == 172 && t->ne[1] == 64 && t->nbytes == 44032, "ffn_down shape");
    gguf_close(&f);
}

static void test_vocab(void) {
    gguf_file f;
    mf_err e;
    gguf_str s = { 0 };
    const gguf_kv *a = NULL;
    int b = -1;
    uint32_t u = 0;
    if (open_shared(&f, "vocab/ggml-vocab-gpt-2.gguf") == 0) {
        CHECK(f.n_kv == 16 && f.n_tensors == 0 && f.data_offset == 1766816 && f.size == 1766807,
              "gpt-2 vocab: no tensors, data offset past the unpadded end");
        CHECK(gguf_get_str(&f, "tokenizer.ggml.model", &s, &e) == 0 && gguf_str_eq(s, "gpt2"), "gpt2 model");
        CHECK(gguf_get_str(&f, "tokenizer.ggml.pre", &s, &e) == 0 && gguf_str_eq(s, "gpt-2"), "gpt2 pre");
        CHECK(gguf_get_arr(&f, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, &a, &e) == 0 && a->arr_count == 50257,
              "gpt2 tokens");
        if (a) CHECK(gguf_str_eq(gguf_arr_str(a, 0), "!") && gguf_str_eq(gguf_arr_str(a, 300), "\xc4\xa0l") &&
                     gguf_str_eq(gguf_arr_str(a, 50256), "<|endoftext|>"), "gpt2 token strings");
        a = NULL;
        CHECK(gguf_get_arr(&f, "tokenizer.ggml.merges", GGUF_VTYPE_STRING, &a, &e) == 0 && a->arr_count == 50000,
              "gpt2 merges");
        if (a) CHECK(gguf_str_eq(gguf_arr_str(a, 0), "\xc4\xa0 t") &&
                     gguf_str_eq(gguf_arr_str(a, 49999), "\xc4\xa0g azed"), "gpt2 merge strings");
        CHECK(gguf_get_u32(&f, "tokenizer.ggml.eos_token_id", &u, &e) == 0 && u == 50256, "gpt2 eos");
        gguf_close(&f);
    }
    if (open_shared(&f, "vocab/ggml-vocab-llama-spm.gguf") == 0) {
        CHECK(f.n_kv == 22 && f.n_tensors == 0 && f.data_offset == 723872, "spm vocab counts");
        CHECK(gguf_get_str(&f, "tokenizer.ggml.model", &s, &e) == 0 && gguf_str_eq(s, "llama"), "spm model");
        CHECK(gguf_get_arr(&f, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, &a, &e) == 0 && a->arr_count == 32000,
              "spm tokens");
        if (a) CHECK(gguf_str_eq(gguf_arr_str(a, 300), "et") && gguf_str_eq(gguf_arr_str(a, 31999), "\xe7\xbb\x99"),
                     "spm token strings");
        a = NULL;
        CHECK(gguf_get_arr(&f, "tokenizer.ggml.scores", GGUF_VTYPE_F32, &a, &e) == 0 && a->arr_count == 32000,
              "spm scores");
        if (a) CHECK(gguf_arr_f32(a, 31999) == -31740.0f, "spm last score");
        CHECK(gguf_get_bool(&f, "tokenizer.ggml.add_bos_token", &b, &e) == 0 && b == 1, "add_bos");
        CHECK(gguf_get_bool(&f, "tokenizer.ggml.add_eos_token", &b, &e) == 0 && b == 0, "add_eos");
        CHECK(gguf_get_u32(&f, "llama.vocab_size", &u, &e) == 0 && u == 32000, "vocab_size");
        gguf_close(&f);
    }
}

int main(void) {
    test_round_trip();
    test_writer_errors();
    test_open_errors();
    test_stories260k();
    test_vocab();
    return test_summary("test_gguf");
}

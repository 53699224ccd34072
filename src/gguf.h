/* gguf.h - GGUF v2/v3 reader (validated, mmap'd) and writer.
 *
 * The reader treats every byte as hostile: gguf_open_* validates the whole header
 * (counts against the file size, string/array lengths, duplicate keys, value types,
 * tensor dims/types/offsets/overlaps) before anything else sees it. After a
 * successful open, every pointer in gguf_file points inside the mapping and every
 * tensor's data range [data, data + nbytes) lies inside the file. */
#ifndef MINFER_GGUF_H
#define MINFER_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

typedef enum gguf_vtype {
    GGUF_VTYPE_U8 = 0, GGUF_VTYPE_I8 = 1, GGUF_VTYPE_U16 = 2, GGUF_VTYPE_I16 = 3,
    GGUF_VTYPE_U32 = 4, GGUF_VTYPE_I32 = 5, GGUF_VTYPE_F32 = 6, GGUF_VTYPE_BOOL = 7,
    GGUF_VTYPE_STRING = 8, GGUF_VTYPE_ARRAY = 9, GGUF_VTYPE_U64 = 10, GGUF_VTYPE_I64 = 11,
    GGUF_VTYPE_F64 = 12, GGUF_VTYPE_COUNT
} gguf_vtype;

/* A string view into the mapping (not NUL-terminated). */
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    gguf_vtype type;
    union {
        uint64_t u64;  /* U8/U16/U32/U64/BOOL widened */
        int64_t i64;   /* I8/I16/I32/I64 widened */
        double f64;    /* F32/F64 widened */
        gguf_str str;
    } v;
    /* type == GGUF_VTYPE_ARRAY: */
    gguf_vtype arr_type;   /* element type (never ARRAY: nested arrays are rejected) */
    uint64_t arr_count;
    const uint8_t *arr_data; /* raw little-endian elements in the mapping; for
                                STRING arrays use gguf_arr_str() */
    gguf_str *arr_strs;    /* STRING arrays: arr_count views, validated at open */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    char *cname;             /* NUL-terminated copy of name (owned) */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] fastest; unused dims are 1 */
    uint32_t type;           /* ggml type id, known to quant.h */
    uint64_t offset;         /* relative to data start, aligned */
    uint64_t n_elements;
    uint64_t nbytes;
    const void *data;        /* inside the mapping */
} gguf_tensor;

typedef struct gguf_file {
    const uint8_t *base;     /* mapping (or caller memory for gguf_open_mem) */
    uint64_t size;
    int mapped;              /* 1 when base must be munmap'd */
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;             /* [n_kv] */
    gguf_tensor *tensors;    /* [n_tensors] */
    uint64_t alignment;
    uint64_t data_offset;    /* start of tensor data in the file */
} gguf_file;

/* Opens and validates; on failure returns a negative mf_status, fills err and
 * leaves f zeroed (nothing to close). */
int gguf_open(gguf_file *f, const char *path, mf_err *err);
/* Same over caller memory (kept alive by the caller until gguf_close). For fuzzing/tests. */
int gguf_open_mem(gguf_file *f, const void *data, size_t size, mf_err *err);
void gguf_close(gguf_file *f);

/* Lookup. Return NULL / -1 when missing. */
const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters with validation. Each returns 0 on success, 1 if the key is absent
 * (out untouched), or MF_ERR_INPUT with err filled when present with an incompatible
 * type or an out-of-range value. Integer getters accept any integer vtype whose
 * value fits; float getters accept F32/F64. */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, mf_err *err);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, mf_err *err);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, mf_err *err);
int gguf_get_bool(const gguf_file *f, const char *key, int *out, mf_err *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, mf_err *err);
/* Array getter: checks the element type (elem_type) and returns the kv. */
int gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem_type,
                 const gguf_kv **out, mf_err *err);

/* Element access for arrays of fixed-size types (little-endian host assumed). */
float gguf_arr_f32(const gguf_kv *kv, uint64_t i);
int32_t gguf_arr_i32(const gguf_kv *kv, uint64_t i);
gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i);

int gguf_str_eq(gguf_str s, const char *c);
const char *gguf_vtype_name(gguf_vtype t);

/* ---- Writer: collects kvs and tensor infos in memory, then streams the file. ---- */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(uint64_t alignment);
void gguf_writer_free(gguf_writer *w);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_bool(gguf_writer *w, const char *key, int v);
void gguf_w_str(gguf_writer *w, const char *key, const char *v);
/* Any fixed-size scalar type (U8..I64, F32, F64, BOOL): v points to one value of
 * that type in host (little-endian) layout. */
void gguf_w_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v);
/* Copies a raw array of fixed-size elements (or of gguf_str for STRING). */
void gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, const void *elems, uint64_t count);
/* Declares a tensor; its data is produced later by a callback at write time so a
 * multi-GiB model never has to be held in memory. */
typedef int (*gguf_tensor_fill)(void *user, int tensor_index, void *dst, uint64_t nbytes);
void gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                   const uint64_t *ne);
/* Writes the file, calling fill(user, i, buf, nbytes) for each tensor in declaration
 * order. Returns 0 or a negative mf_status. */
int gguf_writer_write(gguf_writer *w, const char *path, gguf_tensor_fill fill, void *user, mf_err *err);
/* Same into a malloc'd buffer (*out, *size; the caller frees *out). For tests. A
 * NULL fill (either writer) writes zero-filled tensor data. Adder errors (duplicate
 * key, bad shape, ...) are recorded by the writer and returned here. */
int gguf_writer_write_mem(gguf_writer *w, uint8_t **out, size_t *size, gguf_tensor_fill fill, void *user,
                          mf_err *err);

#endif

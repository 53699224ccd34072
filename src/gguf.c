/* gguf.c - GGUF v2/v3 reader (validated, mmap'd) and streaming writer. See gguf.h.
 *
 * File layout (little-endian; FORMATS.md):
 *
 *   +---------------------------------------------------------------+
 *   | u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv      |  24 bytes
 *   +---------------------------------------------------------------+
 *   | n_kv x { str key | u32 vtype | value }                         |
 *   | n_tensors x { str name | u32 n_dims | u64 ne[n_dims]          |
 *   |               | u32 ggml_type | u64 offset }                   |
 *   +------------------------------ padding to general.alignment ---+
 *   | tensor data (data_offset + tensor.offset, each offset aligned) |
 *   +---------------------------------------------------------------+
 *
 * The reader never trusts a count or a length: each is checked against the bytes
 * that remain before it is used to index, loop or allocate, and every size
 * computation goes through the overflow-checked helpers of util.h. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian fields with memcpy: a big-endian host needs byte swaps"
#endif

/* Sane limit on key and tensor-name length: real ones are < 100 bytes; a longer one
 * is corruption, and the limit keeps messages and lookups cheap. Values are free. */
#define GGUF_MAX_KEY_LEN 65535u

/* Smallest possible encodings, used to bound counts by the remaining file size
 * before any array is allocated:
 *   kv:     u64 key len + 1 key byte (empty keys are rejected) + u32 vtype + 1 value byte
 *   tensor: u64 name len + 1 name byte + u32 n_dims + 1 x u64 ne + u32 type + u64 offset */
#define KV_MIN_BYTES (8u + 1u + 4u + 1u)
#define TENSOR_MIN_BYTES (8u + 1u + 4u + 8u + 4u + 8u)
#define HEADER_BYTES 24u

/* Fixed encoded size of a scalar vtype; 0 for STRING / ARRAY / unknown. */
static uint64_t vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_VTYPE_U8: case GGUF_VTYPE_I8: case GGUF_VTYPE_BOOL: return 1;
    case GGUF_VTYPE_U16: case GGUF_VTYPE_I16: return 2;
    case GGUF_VTYPE_U32: case GGUF_VTYPE_I32: case GGUF_VTYPE_F32: return 4;
    case GGUF_VTYPE_U64: case GGUF_VTYPE_I64: case GGUF_VTYPE_F64: return 8;
    default: return 0;
    }
}

/* Name of a value type, "unknown" outside the enum. */
const char *gguf_vtype_name(gguf_vtype t) {
    static const char *names[GGUF_VTYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
    };
    return (unsigned)t < GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

/* 1 when s holds exactly the bytes of the C string c. */
int gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

/* Renders a (hostile) string view for an error message: at most 80 bytes, bytes
 * outside printable ASCII shown as '?', so a message stays one readable line. */
static const char *str_show(gguf_str s, char *buf, size_t cap) {
    size_t n = s.len < 80 ? (size_t)s.len : 80, j = 0;
    for (size_t i = 0; i < n && j + 1 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[j++] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    if (s.len > n && j + 4 < cap) { memcpy(buf + j, "...", 3); j += 3; }
    buf[j] = 0;
    return buf;
}

/* ------------------------------------------------------------------------- */
/* Reader: a bounds-checked cursor                                           */
/* ------------------------------------------------------------------------- */

typedef struct rd {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;    /* invariant: pos <= size */
} rd;

static uint64_t rd_left(const rd *r) { return r->size - r->pos; }

/* Fails unless n more bytes exist at the cursor; `what` names the field. */
static int rd_need(const rd *r, uint64_t n, const char *what, mf_err *err) {
    if (n > rd_left(r))
        return mf_fail(err, MF_ERR_INPUT,
                       "truncated file: %s needs %" PRIu64 " bytes at offset %" PRIu64
                       ", only %" PRIu64 " left (file is %" PRIu64 " bytes)",
                       what, n, r->pos, rd_left(r), r->size);
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *what, mf_err *err) {
    int rc = rd_need(r, 4, what, err);
    if (rc) return rc;
    memcpy(v, r->base + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *what, mf_err *err) {
    int rc = rd_need(r, 8, what, err);
    if (rc) return rc;
    memcpy(v, r->base + r->pos, 8);
    r->pos += 8;
    return 0;
}

/* Reads a string (u64 length + bytes) as a view into the buffer. */
static int rd_str(rd *r, gguf_str *s, const char *what, mf_err *err) {
    uint64_t len;
    int rc = rd_u64(r, &len, what, err);
    if (rc) return rc;
    if (len > rd_left(r))
        return mf_fail(err, MF_ERR_INPUT,
                       "%s: string length %" PRIu64 " at offset %" PRIu64
                       " exceeds the %" PRIu64 " bytes left in the file",
                       what, len, r->pos - 8, rd_left(r));
    s->ptr = (const char *)(r->base + r->pos);
    s->len = len;
    r->pos += len;
    return 0;
}

/* Keys and tensor names: non-empty, bounded, no NUL (lookups use C strings, so an
 * embedded NUL would make two different names compare equal). */
static int check_name(gguf_str s, const char *what, uint64_t index, mf_err *err) {
    if (s.len == 0) return mf_fail(err, MF_ERR_INPUT, "%s %" PRIu64 " is empty", what, index);
    if (s.len > GGUF_MAX_KEY_LEN)
        return mf_fail(err, MF_ERR_INPUT, "%s %" PRIu64 " is %" PRIu64 " bytes long (limit %u)",
                       what, index, s.len, GGUF_MAX_KEY_LEN);
    if (memchr(s.ptr, 0, (size_t)s.len)) {
        char b[96];
        return mf_fail(err, MF_ERR_INPUT, "%s %" PRIu64 " '%s' contains a NUL byte", what, index,
                       str_show(s, b, sizeof b));
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Reader: metadata                                                          */
/* ------------------------------------------------------------------------- */

/* Reads one scalar of fixed-size type t into kv->v (widened). */
static int parse_scalar(rd *r, gguf_kv *kv, uint32_t t, const char *ctx, mf_err *err) {
    uint64_t n = vtype_size(t);
    int rc = rd_need(r, n, ctx, err);
    if (rc) return rc;
    const uint8_t *p = r->base + r->pos;
    switch (t) {
    case GGUF_VTYPE_U8: kv->v.u64 = p[0]; break;
    case GGUF_VTYPE_I8: kv->v.i64 = (int8_t)p[0]; break;
    case GGUF_VTYPE_BOOL:
        if (p[0] > 1)
            return mf_fail(err, MF_ERR_INPUT, "%s: bool value %u is neither 0 nor 1", ctx, p[0]);
        kv->v.u64 = p[0];
        break;
    case GGUF_VTYPE_U16: { uint16_t x; memcpy(&x, p, 2); kv->v.u64 = x; break; }
    case GGUF_VTYPE_I16: { int16_t x; memcpy(&x, p, 2); kv->v.i64 = x; break; }
    case GGUF_VTYPE_U32: { uint32_t x; memcpy(&x, p, 4); kv->v.u64 = x; break; }
    case GGUF_VTYPE_I32: { int32_t x; memcpy(&x, p, 4); kv->v.i64 = x; break; }
    case GGUF_VTYPE_F32: { float x; memcpy(&x, p, 4); kv->v.f64 = x; break; }
    case GGUF_VTYPE_U64: { uint64_t x; memcpy(&x, p, 8); kv->v.u64 = x; break; }
    case GGUF_VTYPE_I64: { int64_t x; memcpy(&x, p, 8); kv->v.i64 = x; break; }
    case GGUF_VTYPE_F64: { double x; memcpy(&x, p, 8); kv->v.f64 = x; break; }
    default: return mf_fail(err, MF_ERR_INPUT, "%s: internal: not a scalar type %u", ctx, t);
    }
    r->pos += n;
    return 0;
}

/* Reads an array value { u32 elem_type, u64 count, elems }. Fixed-size elements
 * stay in the buffer (arr_data); string elements get a validated view each. */
static int parse_array(rd *r, gguf_kv *kv, const char *ctx, mf_err *err) {
    uint32_t et;
    uint64_t count;
    int rc = rd_u32(r, &et, ctx, err);
    if (rc) return rc;
    if (et == GGUF_VTYPE_ARRAY)
        return mf_fail(err, MF_ERR_INPUT, "%s: nested arrays (array of array) are not supported", ctx);
    if (et >= GGUF_VTYPE_COUNT)
        return mf_fail(err, MF_ERR_INPUT, "%s: unknown array element type %u", ctx, et);
    if ((rc = rd_u64(r, &count, ctx, err))) return rc;
    kv->arr_type = (gguf_vtype)et;
    kv->arr_count = count;
    kv->arr_data = r->base + r->pos;
    if (et != GGUF_VTYPE_STRING) {
        uint64_t es = vtype_size(et);
        if (count > rd_left(r) / es)
            return mf_fail(err, MF_ERR_INPUT,
                           "%s: array of %" PRIu64 " %s elements (%" PRIu64
                           " bytes each) exceeds the %" PRIu64 " bytes left in the file",
                           ctx, count, gguf_vtype_name(et), es, rd_left(r));
        if (et == GGUF_VTYPE_BOOL) {
            for (uint64_t i = 0; i < count; i++)
                if (kv->arr_data[i] > 1)
                    return mf_fail(err, MF_ERR_INPUT, "%s: bool element %" PRIu64 " is %u, neither 0 nor 1",
                                   ctx, i, kv->arr_data[i]);
        }
        r->pos += count * es;
        return 0;
    }
    /* Each string takes at least its 8-byte length: bound count before allocating. */
    if (count > rd_left(r) / 8)
        return mf_fail(err, MF_ERR_INPUT,
                       "%s: array of %" PRIu64 " strings cannot fit in the %" PRIu64 " bytes left in the file",
                       ctx, count, rd_left(r));
    if (count == 0) return 0;
    kv->arr_strs = malloc((size_t)count * sizeof *kv->arr_strs);
    if (!kv->arr_strs)
        return mf_fail(err, MF_ERR_NOMEM, "%s: out of memory for %" PRIu64 " string views", ctx, count);
    for (uint64_t i = 0; i < count; i++)
        if ((rc = rd_str(r, &kv->arr_strs[i], ctx, err))) return rc;
    return 0;
}

/* Reads one { key, vtype, value } entry. */
static int parse_kv(rd *r, gguf_kv *kv, uint64_t index, mf_err *err) {
    char ctx[160], b[96];
    snprintf(ctx, sizeof ctx, "key of kv %" PRIu64, index);
    int rc = rd_str(r, &kv->key, ctx, err);
    if (rc) return rc;
    if ((rc = check_name(kv->key, "key of kv", index, err))) return rc;
    snprintf(ctx, sizeof ctx, "kv %" PRIu64 " '%s'", index, str_show(kv->key, b, sizeof b));
    uint32_t t;
    if ((rc = rd_u32(r, &t, ctx, err))) return rc;
    if (t >= GGUF_VTYPE_COUNT) return mf_fail(err, MF_ERR_INPUT, "%s: unknown value type %u", ctx, t);
    kv->type = (gguf_vtype)t;
    if (t == GGUF_VTYPE_STRING) return rd_str(r, &kv->v.str, ctx, err);
    if (t == GGUF_VTYPE_ARRAY) return parse_array(r, kv, ctx, err);
    return parse_scalar(r, kv, t, ctx, err);
}

/* Orders string views by (length, bytes): only used to find duplicates. */
static int str_cmp(gguf_str a, gguf_str b) {
    if (a.len != b.len) return a.len < b.len ? -1 : 1;
    return a.len ? memcmp(a.ptr, b.ptr, (size_t)a.len) : 0;
}

static int cmp_kv_ptr(const void *a, const void *b) {
    return str_cmp((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return str_cmp((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b) {
    uint64_t x = (*(const gguf_tensor *const *)a)->offset, y = (*(const gguf_tensor *const *)b)->offset;
    return x < y ? -1 : x > y;
}

/* Rejects duplicate keys: sorting makes this O(n log n), so a hostile file with
 * ~100k keys cannot turn the check into a quadratic hang. */
static int check_dup_keys(gguf_file *f, mf_err *err) {
    if (f->n_kv < 2) return 0;
    const gguf_kv **idx = malloc((size_t)f->n_kv * sizeof *idx);
    if (!idx) return mf_fail(err, MF_ERR_NOMEM, "out of memory sorting %" PRIu64 " keys", f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++) idx[i] = &f->kv[i];
    qsort(idx, (size_t)f->n_kv, sizeof *idx, cmp_kv_ptr);
    int rc = 0;
    for (uint64_t i = 1; i < f->n_kv && !rc; i++)
        if (str_cmp(idx[i - 1]->key, idx[i]->key) == 0) {
            char b[96];
            rc = mf_fail(err, MF_ERR_INPUT, "duplicate key '%s' (kv %td and kv %td)",
                         str_show(idx[i]->key, b, sizeof b), idx[i - 1] - f->kv, idx[i] - f->kv);
        }
    free(idx);
    return rc;
}

/* general.alignment, when present, must be a u32 nonzero power of two. */
static int read_alignment(gguf_file *f, mf_err *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv) return 0;
    if (kv->type != GGUF_VTYPE_U32)
        return mf_fail(err, MF_ERR_INPUT, "general.alignment must be a u32, got %s", gguf_vtype_name(kv->type));
    uint64_t a = kv->v.u64;
    if (a == 0 || (a & (a - 1)))
        return mf_fail(err, MF_ERR_INPUT, "general.alignment = %" PRIu64 " is not a nonzero power of two", a);
    f->alignment = a;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Reader: tensor infos                                                      */
/* ------------------------------------------------------------------------- */

/* Reads one tensor info and checks what needs no file-wide context: name, dims,
 * type, block multiple, element and byte counts. */
static int parse_tensor(rd *r, gguf_tensor *t, uint64_t index, mf_err *err) {
    char ctx[160], b[96];
    snprintf(ctx, sizeof ctx, "name of tensor %" PRIu64, index);
    int rc = rd_str(r, &t->name, ctx, err);
    if (rc) return rc;
    if ((rc = check_name(t->name, "name of tensor", index, err))) return rc;
    snprintf(ctx, sizeof ctx, "tensor '%s'", str_show(t->name, b, sizeof b));
    if ((rc = rd_u32(r, &t->n_dims, ctx, err))) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return mf_fail(err, MF_ERR_INPUT, "%s: n_dims = %u, must be 1..%d", ctx, t->n_dims, GGUF_MAX_DIMS);
    uint64_t n = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims) continue;
        if ((rc = rd_u64(r, &t->ne[d], ctx, err))) return rc;
        /* ggml and every consumer index with int64_t: keep counts in that range. */
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX)
            return mf_fail(err, MF_ERR_INPUT, "%s: ne[%u] = %" PRIu64 " is out of range", ctx, d, t->ne[d]);
        if (mf_mul_u64(n, t->ne[d], &n) || n > (uint64_t)INT64_MAX)
            return mf_fail(err, MF_ERR_INPUT, "%s: element count overflows int64 at ne[%u] = %" PRIu64,
                           ctx, d, t->ne[d]);
    }
    t->n_elements = n;
    if ((rc = rd_u32(r, &t->type, ctx, err))) return rc;
    const qtype_traits *q = qtype_get(t->type);
    if (!q) return mf_fail(err, MF_ERR_INPUT, "%s: unknown tensor type %u", ctx, t->type);
    if (!q->supported) return mf_fail(err, MF_ERR_INPUT, "%s: unsupported tensor type %s", ctx, q->name);
    if (t->ne[0] % q->blck)
        return mf_fail(err, MF_ERR_INPUT, "%s: ne[0] = %" PRIu64 " is not a multiple of the %s block size %u",
                       ctx, t->ne[0], q->name, q->blck);
    uint64_t row = qtype_row_size(t->type, t->ne[0]);
    if (row == 0 || mf_mul_u64(row, n / t->ne[0], &t->nbytes))
        return mf_fail(err, MF_ERR_INPUT, "%s: byte size overflows (%" PRIu64 " elements of %s)",
                       ctx, n, q->name);
    return rd_u64(r, &t->offset, ctx, err);
}

/* File-wide tensor checks once data_offset is known: alignment, bounds, names
 * unique, no overlaps. Sets each tensor's data pointer. */
static int check_tensors(gguf_file *f, mf_err *err) {
    char b[96];
    uint64_t avail = f->data_offset <= f->size ? f->size - f->data_offset : 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        const char *nm = str_show(t->name, b, sizeof b);
        if (t->offset % f->alignment)
            return mf_fail(err, MF_ERR_INPUT, "tensor '%s': offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                           nm, t->offset, f->alignment);
        if (f->data_offset > f->size)
            return mf_fail(err, MF_ERR_INPUT, "tensor '%s': data section starts at %" PRIu64
                           ", past the end of the file (%" PRIu64 " bytes)", nm, f->data_offset, f->size);
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            /* Report absolute file offsets, unless the sum itself would wrap. */
            uint64_t a0, a1;
            if (mf_add_u64(f->data_offset, t->offset, &a0) || mf_add_u64(a0, t->nbytes, &a1))
                return mf_fail(err, MF_ERR_INPUT, "tensor '%s': offset %" PRIu64 " + %" PRIu64
                               " bytes (data section at %" PRIu64 ") extends past end of file (%" PRIu64 " bytes)",
                               nm, t->offset, t->nbytes, f->data_offset, f->size);
            return mf_fail(err, MF_ERR_INPUT, "tensor '%s': data [%" PRIu64 ", %" PRIu64
                           ") extends past end of file (%" PRIu64 " bytes)", nm, a0, a1, f->size);
        }
        t->data = f->base + f->data_offset + t->offset;
    }
    if (f->n_tensors < 2) return 0;
    gguf_tensor **idx = malloc((size_t)f->n_tensors * sizeof *idx);
    if (!idx) return mf_fail(err, MF_ERR_NOMEM, "out of memory sorting %" PRIu64 " tensors", f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++) idx[i] = &f->tensors[i];
    int rc = 0;
    qsort(idx, (size_t)f->n_tensors, sizeof *idx, cmp_tensor_name);
    for (uint64_t i = 1; i < f->n_tensors && !rc; i++)
        if (str_cmp(idx[i - 1]->name, idx[i]->name) == 0)
            rc = mf_fail(err, MF_ERR_INPUT, "duplicate tensor name '%s'", str_show(idx[i]->name, b, sizeof b));
    if (!rc) {
        qsort(idx, (size_t)f->n_tensors, sizeof *idx, cmp_tensor_offset);
        for (uint64_t i = 1; i < f->n_tensors && !rc; i++) {
            const gguf_tensor *p = idx[i - 1], *q = idx[i];
            /* p->offset + p->nbytes cannot wrap: both were bounded by avail above. */
            if (p->offset + p->nbytes > q->offset) {
                char b2[96];
                rc = mf_fail(err, MF_ERR_INPUT, "tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64
                             ", %" PRIu64 ") overlap in the data section",
                             str_show(p->name, b, sizeof b), p->offset, p->offset + p->nbytes,
                             str_show(q->name, b2, sizeof b2), q->offset, q->offset + q->nbytes);
            }
        }
    }
    free(idx);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* Reader: open / close                                                      */
/* ------------------------------------------------------------------------- */

/* Frees what parsing allocated (never the mapping) and zeroes f. */
static void file_free_tables(gguf_file *f) {
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) free(f->kv[i].arr_strs);
    if (f->tensors)
        for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].cname);
    free(f->kv);
    free(f->tensors);
    f->kv = NULL;
    f->tensors = NULL;
}

/* Parses and validates the whole header of base[0..size). On success f is filled
 * (base and size included; `mapped` is the caller's to set); on failure everything
 * allocated here is freed and the error returned. */
static int parse(gguf_file *f, const uint8_t *base, uint64_t size, mf_err *err) {
    rd r = { base, size, 0 };
    uint32_t magic, version;
    int rc;
    f->base = base; /* check_tensors computes data pointers and bounds from these */
    f->size = size;
    if (size < HEADER_BYTES)
        return mf_fail(err, MF_ERR_INPUT, "file is %" PRIu64 " bytes, too small for a GGUF header (%u)",
                       size, HEADER_BYTES);
    rd_u32(&r, &magic, "magic", err);
    rd_u32(&r, &version, "version", err);
    if (magic != GGUF_MAGIC)
        return mf_fail(err, MF_ERR_INPUT, "bad magic 0x%08x (expected 0x%08x, \"GGUF\")", magic, GGUF_MAGIC);
    if (version == 1)
        return mf_fail(err, MF_ERR_INPUT, "GGUF version 1 is not supported (only 2 and 3); re-convert the model");
    if (version != 2 && version != 3)
        return mf_fail(err, MF_ERR_INPUT, "unsupported GGUF version %u%s (only 2 and 3)", version,
                       version && (version & 0xffff) == 0 ? ", a big-endian file?" : "");
    f->version = version;
    rd_u64(&r, &f->n_tensors, "n_tensors", err);
    rd_u64(&r, &f->n_kv, "n_kv", err);
    /* Bound both counts by the smallest encodings before allocating anything. */
    uint64_t left = rd_left(&r), need_kv, need_t, need;
    if (f->n_kv > left / KV_MIN_BYTES || f->n_tensors > left / TENSOR_MIN_BYTES ||
        mf_mul_u64(f->n_kv, KV_MIN_BYTES, &need_kv) || mf_mul_u64(f->n_tensors, TENSOR_MIN_BYTES, &need_t) ||
        mf_add_u64(need_kv, need_t, &need) || need > left) {
        rc = mf_fail(err, MF_ERR_INPUT, "n_kv = %" PRIu64 " and n_tensors = %" PRIu64
                     " cannot fit in the %" PRIu64 " bytes after the header (at least %u per kv, %u per tensor)",
                     f->n_kv, f->n_tensors, left, KV_MIN_BYTES, TENSOR_MIN_BYTES);
        goto fail;
    }
    if (f->n_kv) {
        f->kv = calloc((size_t)f->n_kv, sizeof *f->kv);
        if (!f->kv) { rc = mf_fail(err, MF_ERR_NOMEM, "out of memory for %" PRIu64 " kvs", f->n_kv); goto fail; }
    }
    if (f->n_tensors) {
        f->tensors = calloc((size_t)f->n_tensors, sizeof *f->tensors);
        if (!f->tensors) {
            rc = mf_fail(err, MF_ERR_NOMEM, "out of memory for %" PRIu64 " tensors", f->n_tensors);
            goto fail;
        }
    }
    for (uint64_t i = 0; i < f->n_kv; i++)
        if ((rc = parse_kv(&r, &f->kv[i], i, err))) goto fail;
    if ((rc = check_dup_keys(f, err)) || (rc = read_alignment(f, err))) goto fail;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((rc = parse_tensor(&r, &f->tensors[i], i, err))) goto fail;
    /* The data section starts at the header end rounded up to the alignment. With
     * no tensors it may be at (or, unpadded, past) the end of the file: harmless. */
    uint64_t pad = (f->alignment - r.pos % f->alignment) % f->alignment;
    if (mf_add_u64(r.pos, pad, &f->data_offset)) {
        rc = mf_fail(err, MF_ERR_INPUT, "data offset overflows");
        goto fail;
    }
    if ((rc = check_tensors(f, err))) goto fail;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        t->cname = malloc((size_t)t->name.len + 1);
        if (!t->cname) { rc = mf_fail(err, MF_ERR_NOMEM, "out of memory for tensor names"); goto fail; }
        memcpy(t->cname, t->name.ptr, (size_t)t->name.len);
        t->cname[t->name.len] = 0;
    }
    return 0;
fail:
    file_free_tables(f);
    return rc;
}

/* Prefixes err's message with "gguf: " (and the path when given) so every message
 * names the module and file it came from. */
static int prefix_err(mf_err *err, int rc, const char *path) {
    if (!err) return rc;
    char tmp[MF_ERR_LEN];
    memcpy(tmp, err->msg, sizeof tmp);
    tmp[sizeof tmp - 1] = 0;
    if (path) return mf_fail(err, rc, "gguf: %s: %s", path, tmp);
    return mf_fail(err, rc, "gguf: %s", tmp);
}

int gguf_open_mem(gguf_file *f, const void *data, size_t size, mf_err *err) {
    memset(f, 0, sizeof *f);
    if (!data && size) return mf_fail(err, MF_ERR_USAGE, "gguf: NULL buffer of %zu bytes", size);
    static const uint8_t empty[1];
    const uint8_t *base = data ? data : empty;
    int rc = parse(f, base, size, err);
    if (rc) {
        memset(f, 0, sizeof *f);
        return prefix_err(err, rc, NULL);
    }
    f->base = base;
    f->size = size;
    f->mapped = 0;
    return 0;
}

int gguf_open(gguf_file *f, const char *path, mf_err *err) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mf_fail(err, MF_ERR_IO, "gguf: cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mf_fail(err, MF_ERR_IO, "gguf: cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mf_fail(err, MF_ERR_IO, "gguf: %s is not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < HEADER_BYTES) {
        close(fd);
        return mf_fail(err, MF_ERR_INPUT, "gguf: %s: file is %" PRIu64 " bytes, too small for a GGUF header (%u)",
                       path, size, HEADER_BYTES);
    }
    if (size > SIZE_MAX) {
        close(fd);
        return mf_fail(err, MF_ERR_IO, "gguf: %s: %" PRIu64 " bytes cannot be mapped", path, size);
    }
    /* Read-only private mapping: weights are paged in on demand and never written. */
    void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (p == MAP_FAILED) return mf_fail(err, MF_ERR_IO, "gguf: cannot mmap %s: %s", path, strerror(e));
    int rc = parse(f, p, size, err);
    if (rc) {
        munmap(p, (size_t)size);
        memset(f, 0, sizeof *f);
        return prefix_err(err, rc, path);
    }
    f->base = p;
    f->size = size;
    f->mapped = 1;
    return 0;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    file_free_tables(f);
    if (f->mapped && f->base) munmap((void *)f->base, (size_t)f->size);
    memset(f, 0, sizeof *f);
}

/* ------------------------------------------------------------------------- */
/* Lookup and typed getters                                                  */
/* ------------------------------------------------------------------------- */

/* Linear scans: models have tens of keys and hundreds of tensors, looked up once
 * at load time. */
const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static int is_unsigned_vtype(gguf_vtype t) {
    return t == GGUF_VTYPE_U8 || t == GGUF_VTYPE_U16 || t == GGUF_VTYPE_U32 || t == GGUF_VTYPE_U64;
}

static int is_signed_vtype(gguf_vtype t) {
    return t == GGUF_VTYPE_I8 || t == GGUF_VTYPE_I16 || t == GGUF_VTYPE_I32 || t == GGUF_VTYPE_I64;
}

static int type_error(const char *key, const gguf_kv *kv, const char *want, mf_err *err) {
    return mf_fail(err, MF_ERR_INPUT, "gguf: key '%s' has type %s, expected %s", key,
                   gguf_vtype_name(kv->type), want);
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, mf_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (is_unsigned_vtype(kv->type)) {
        if (kv->v.u64 > UINT32_MAX)
            return mf_fail(err, MF_ERR_INPUT, "gguf: key '%s' = %" PRIu64 " does not fit in u32", key, kv->v.u64);
        *out = (uint32_t)kv->v.u64;
        return 0;
    }
    if (is_signed_vtype(kv->type)) {
        if (kv->v.i64 < 0 || (uint64_t)kv->v.i64 > UINT32_MAX)
            return mf_fail(err, MF_ERR_INPUT, "gguf: key '%s' = %" PRId64 " does not fit in u32", key, kv->v.i64);
        *out = (uint32_t)kv->v.i64;
        return 0;
    }
    return type_error(key, kv, "an integer", err);
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, mf_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (is_unsigned_vtype(kv->type)) {
        if (kv->v.u64 > (uint64_t)INT64_MAX)
            return mf_fail(err, MF_ERR_INPUT, "gguf: key '%s' = %" PRIu64 " does not fit in i64", key, kv->v.u64);
        *out = (int64_t)kv->v.u64;
        return 0;
    }
    if (is_signed_vtype(kv->type)) {
        *out = kv->v.i64;
        return 0;
    }
    return type_error(key, kv, "an integer", err);
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, mf_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type == GGUF_VTYPE_F32) {
        *out = (float)kv->v.f64; /* exact: it was widened from an f32 */
        return 0;
    }
    if (kv->type == GGUF_VTYPE_F64) {
        double d = kv->v.f64;
        /* A finite f64 beyond f32 range would silently become inf: say so instead. */
        if (d == d && (d > 3.4028234663852886e38 || d < -3.4028234663852886e38) &&
            d != 1.0 / 0.0 && d != -1.0 / 0.0)
            return mf_fail(err, MF_ERR_INPUT, "gguf: key '%s' = %g does not fit in f32", key, d);
        *out = (float)d;
        return 0;
    }
    return type_error(key, kv, "f32 or f64", err);
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out, mf_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_VTYPE_BOOL) return type_error(key, kv, "bool", err);
    *out = kv->v.u64 != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, mf_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_VTYPE_STRING) return type_error(key, kv, "string", err);
    *out = kv->v.str;
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem_type, const gguf_kv **out, mf_err *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_VTYPE_ARRAY)
        return mf_fail(err, MF_ERR_INPUT, "gguf: key '%s' has type %s, expected an array of %s", key,
                       gguf_vtype_name(kv->type), gguf_vtype_name(elem_type));
    if (kv->arr_type != elem_type)
        return mf_fail(err, MF_ERR_INPUT, "gguf: key '%s' is an array of %s, expected an array of %s", key,
                       gguf_vtype_name(kv->arr_type), gguf_vtype_name(elem_type));
    *out = kv;
    return 0;
}

/* Element accessors: the caller checked the element type (gguf_get_arr) and
 * i < arr_count; out of contract they return 0 / an empty view, never read wild. */
float gguf_arr_f32(const gguf_kv *kv, uint64_t i) {
    float x = 0;
    if (kv->type == GGUF_VTYPE_ARRAY && kv->arr_type == GGUF_VTYPE_F32 && i < kv->arr_count)
        memcpy(&x, kv->arr_data + i * 4, 4);
    return x;
}

int32_t gguf_arr_i32(const gguf_kv *kv, uint64_t i) {
    int32_t x = 0;
    if (kv->type == GGUF_VTYPE_ARRAY && kv->arr_type == GGUF_VTYPE_I32 && i < kv->arr_count)
        memcpy(&x, kv->arr_data + i * 4, 4);
    return x;
}

gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i) {
    gguf_str s = { "", 0 };
    if (kv->type == GGUF_VTYPE_ARRAY && kv->arr_type == GGUF_VTYPE_STRING && i < kv->arr_count && kv->arr_strs)
        s = kv->arr_strs[i];
    return s;
}

/* ------------------------------------------------------------------------- */
/* Writer                                                                    */
/* ------------------------------------------------------------------------- */

/* Growable byte buffer for encoded values (sizes chosen by the program). */
typedef struct bbuf {
    uint8_t *p;
    size_t n, cap;
} bbuf;

static void bbuf_put(bbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        b->p = mf_xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bbuf_u32(bbuf *b, uint32_t v) { bbuf_put(b, &v, 4); }
static void bbuf_u64(bbuf *b, uint64_t v) { bbuf_put(b, &v, 8); }
static void bbuf_str(bbuf *b, const char *s, uint64_t len) {
    bbuf_u64(b, len);
    bbuf_put(b, s, (size_t)len);
}

typedef struct wkv {
    char *key;
    uint32_t type;
    bbuf val;          /* encoded value, everything after the u32 type */
    uint64_t u32val;   /* type == U32: the value (to check general.alignment) */
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
} wtensor;

struct gguf_writer {
    uint64_t alignment;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    int status;              /* first error recorded by a void adder, reported at write */
    char msg[MF_ERR_LEN];
};

/* Records the first error; later ones would only be consequences. */
static void w_fail(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_fail(gguf_writer *w, const char *fmt, ...) {
    if (w->status) return;
    w->status = MF_ERR_USAGE;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
}

gguf_writer *gguf_writer_new(uint64_t alignment) {
    gguf_writer *w = mf_xcalloc(1, sizeof *w);
    w->alignment = alignment;
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > UINT32_MAX)
        w_fail(w, "gguf writer: alignment %" PRIu64 " is not a power of two that fits in u32", alignment);
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Appends a kv with an empty value buffer, or returns NULL (error recorded) for an
 * invalid or duplicate key. */
static wkv *w_add(gguf_writer *w, const char *key, uint32_t type) {
    if (!key || !*key || strlen(key) > GGUF_MAX_KEY_LEN) {
        w_fail(w, "gguf writer: invalid key '%s'", key ? key : "(null)");
        return NULL;
    }
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            w_fail(w, "gguf writer: duplicate key '%s'", key);
            return NULL;
        }
    if (w->n_kv == w->cap_kv) {
        w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 16;
        w->kv = mf_xrealloc(w->kv, w->cap_kv * sizeof *w->kv);
    }
    wkv *kv = &w->kv[w->n_kv++];
    memset(kv, 0, sizeof *kv);
    kv->key = mf_xstrdup(key);
    kv->type = type;
    return kv;
}

void gguf_w_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v) {
    uint64_t n = vtype_size(type);
    if (n == 0) {
        w_fail(w, "gguf writer: key '%s': %s is not a scalar type", key ? key : "(null)", gguf_vtype_name(type));
        return;
    }
    wkv *kv = w_add(w, key, type);
    if (!kv) return;
    bbuf_put(&kv->val, v, (size_t)n);
    if (type == GGUF_VTYPE_U32) {
        uint32_t x;
        memcpy(&x, v, 4);
        kv->u32val = x;
    }
}

void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) { gguf_w_scalar(w, key, GGUF_VTYPE_U32, &v); }
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v) { gguf_w_scalar(w, key, GGUF_VTYPE_I32, &v); }
void gguf_w_f32(gguf_writer *w, const char *key, float v) { gguf_w_scalar(w, key, GGUF_VTYPE_F32, &v); }
void gguf_w_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    gguf_w_scalar(w, key, GGUF_VTYPE_BOOL, &b);
}

void gguf_w_str(gguf_writer *w, const char *key, const char *v) {
    wkv *kv = w_add(w, key, GGUF_VTYPE_STRING);
    if (kv) bbuf_str(&kv->val, v ? v : "", v ? strlen(v) : 0);
}

void gguf_w_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, const void *elems, uint64_t count) {
    uint64_t es = vtype_size(elem_type), bytes;
    if (elem_type != GGUF_VTYPE_STRING && es == 0) {
        w_fail(w, "gguf writer: key '%s': arrays of %s are not supported", key ? key : "(null)",
               gguf_vtype_name(elem_type));
        return;
    }
    if (count && !elems) {
        w_fail(w, "gguf writer: key '%s': NULL elements for a count of %" PRIu64, key ? key : "(null)", count);
        return;
    }
    if (elem_type != GGUF_VTYPE_STRING && (mf_mul_u64(es, count, &bytes) || bytes > SIZE_MAX / 2)) {
        w_fail(w, "gguf writer: key '%s': array of %" PRIu64 " elements is too large", key, count);
        return;
    }
    wkv *kv = w_add(w, key, GGUF_VTYPE_ARRAY);
    if (!kv) return;
    bbuf_u32(&kv->val, elem_type);
    bbuf_u64(&kv->val, count);
    if (elem_type == GGUF_VTYPE_STRING) {
        const gguf_str *s = elems;
        for (uint64_t i = 0; i < count; i++) bbuf_str(&kv->val, s[i].ptr, s[i].len);
    } else {
        bbuf_put(&kv->val, elems, (size_t)bytes);
    }
}

void gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne) {
    if (!name || !*name || strlen(name) > GGUF_MAX_KEY_LEN) {
        w_fail(w, "gguf writer: invalid tensor name '%s'", name ? name : "(null)");
        return;
    }
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            w_fail(w, "gguf writer: duplicate tensor name '%s'", name);
            return;
        }
    const qtype_traits *q = qtype_get(type);
    if (!q) {
        w_fail(w, "gguf writer: tensor '%s': unknown tensor type %u", name, type);
        return;
    }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        w_fail(w, "gguf writer: tensor '%s': n_dims = %u, must be 1..%d", name, n_dims, GGUF_MAX_DIMS);
        return;
    }
    wtensor t = { .type = type, .n_dims = n_dims };
    uint64_t n = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] == 0 || mf_mul_u64(n, t.ne[d], &n) || n > (uint64_t)INT64_MAX) {
            w_fail(w, "gguf writer: tensor '%s': ne[%u] = %" PRIu64 " is zero or overflows", name, d, t.ne[d]);
            return;
        }
    }
    uint64_t row = qtype_row_size(type, t.ne[0]);
    if (row == 0) {
        w_fail(w, "gguf writer: tensor '%s': ne[0] = %" PRIu64 " is not a multiple of the %s block size %u",
               name, t.ne[0], q->name, q->blck);
        return;
    }
    if (mf_mul_u64(row, n / t.ne[0], &t.nbytes) || t.nbytes > SIZE_MAX / 2) {
        w_fail(w, "gguf writer: tensor '%s': byte size overflows", name);
        return;
    }
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 16;
        w->t = mf_xrealloc(w->t, w->cap_t * sizeof *w->t);
    }
    t.name = mf_xstrdup(name);
    w->t[w->n_t++] = t;
}

/* fwrite that turns a short write into an mf_err. */
static int w_put(FILE *fp, const void *p, size_t n, const char *what, mf_err *err) {
    if (n && fwrite(p, 1, n, fp) != n)
        return mf_fail(err, MF_ERR_IO, "gguf writer: write failed (%s): %s", what, strerror(errno));
    return 0;
}

static int w_pad(FILE *fp, uint64_t pos, uint64_t align, mf_err *err) {
    static const uint8_t zeros[4096];
    uint64_t pad = (align - pos % align) % align;
    while (pad) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        int rc = w_put(fp, zeros, n, "padding", err);
        if (rc) return rc;
        pad -= n;
    }
    return 0;
}

/* Streams the whole file to fp: header, kvs (plus general.alignment when the
 * alignment is not the default and the caller did not add it), tensor infos with
 * offsets laid out in declaration order, then each tensor's data from fill. */
static int writer_write_fp(gguf_writer *w, FILE *fp, gguf_tensor_fill fill, void *user, mf_err *err) {
    if (w->status) return mf_fail(err, w->status, "%s", w->msg);
    int emit_align = w->alignment != GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        if (w->kv[i].type != GGUF_VTYPE_U32 || w->kv[i].u32val != w->alignment)
            return mf_fail(err, MF_ERR_USAGE, "gguf writer: general.alignment (%s %" PRIu64
                           ") disagrees with the writer's alignment %" PRIu64,
                           gguf_vtype_name(w->kv[i].type), w->kv[i].u32val, w->alignment);
        emit_align = 0;
    }
    bbuf h = { 0 };
    bbuf_u32(&h, GGUF_MAGIC);
    bbuf_u32(&h, 3);
    bbuf_u64(&h, w->n_t);
    bbuf_u64(&h, w->n_kv + (size_t)emit_align);
    for (size_t i = 0; i < w->n_kv; i++) {
        bbuf_str(&h, w->kv[i].key, strlen(w->kv[i].key));
        bbuf_u32(&h, w->kv[i].type);
        bbuf_put(&h, w->kv[i].val.p, w->kv[i].val.n);
    }
    if (emit_align) {
        bbuf_str(&h, "general.alignment", strlen("general.alignment"));
        bbuf_u32(&h, GGUF_VTYPE_U32);
        bbuf_u32(&h, (uint32_t)w->alignment);
    }
    uint64_t off = 0, max_bytes = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        bbuf_str(&h, t->name, strlen(t->name));
        bbuf_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) bbuf_u64(&h, t->ne[d]);
        bbuf_u32(&h, t->type);
        bbuf_u64(&h, off);
        uint64_t padded = t->nbytes + (w->alignment - t->nbytes % w->alignment) % w->alignment;
        if (mf_add_u64(off, padded, &off)) {
            free(h.p);
            return mf_fail(err, MF_ERR_USAGE, "gguf writer: total tensor data overflows");
        }
        max_bytes = MF_MAX(max_bytes, t->nbytes);
    }
    int rc = w_put(fp, h.p, h.n, "header", err);
    if (!rc) rc = w_pad(fp, h.n, w->alignment, err);
    free(h.p);
    if (rc || w->n_t == 0) return rc;
    /* One buffer sized for the largest tensor, reused: memory stays at one tensor
     * however large the model. Zeroed before each fill so the output is
     * deterministic even where a callback leaves bytes unwritten. */
    uint8_t *buf = malloc((size_t)max_bytes);
    if (!buf)
        return mf_fail(err, MF_ERR_NOMEM, "gguf writer: out of memory for a %" PRIu64 "-byte tensor buffer", max_bytes);
    for (size_t i = 0; i < w->n_t && !rc; i++) {
        const wtensor *t = &w->t[i];
        memset(buf, 0, (size_t)t->nbytes);
        if (fill) {
            int frc = fill(user, (int)i, buf, t->nbytes);
            if (frc) {
                rc = mf_fail(err, frc < 0 ? frc : MF_ERR_IO, "gguf writer: fill callback failed (%d) for tensor %zu '%s'",
                             frc, i, t->name);
                break;
            }
        }
        rc = w_put(fp, buf, (size_t)t->nbytes, t->name, err);
        if (!rc) rc = w_pad(fp, t->nbytes, w->alignment, err);
    }
    free(buf);
    return rc;
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_tensor_fill fill, void *user, mf_err *err) {
    if (w->status) return mf_fail(err, w->status, "%s", w->msg);
    FILE *fp = fopen(path, "wb");
    if (!fp) return mf_fail(err, MF_ERR_IO, "gguf writer: cannot create %s: %s", path, strerror(errno));
    int rc = writer_write_fp(w, fp, fill, user, err);
    if (fclose(fp) != 0 && !rc)
        rc = mf_fail(err, MF_ERR_IO, "gguf writer: closing %s failed: %s", path, strerror(errno));
    if (rc) remove(path); /* never leave a truncated model behind */
    return rc;
}

int gguf_writer_write_mem(gguf_writer *w, uint8_t **out, size_t *size, gguf_tensor_fill fill, void *user,
                          mf_err *err) {
    *out = NULL;
    *size = 0;
    if (w->status) return mf_fail(err, w->status, "%s", w->msg);
    char *p = NULL;
    size_t n = 0;
    FILE *fp = open_memstream(&p, &n);
    if (!fp) return mf_fail(err, MF_ERR_NOMEM, "gguf writer: open_memstream failed: %s", strerror(errno));
    int rc = writer_write_fp(w, fp, fill, user, err);
    if (fclose(fp) != 0 && !rc) rc = mf_fail(err, MF_ERR_NOMEM, "gguf writer: memory stream failed");
    if (rc) {
        free(p);
        return rc;
    }
    *out = (uint8_t *)p;
    *size = n;
    return 0;
}

/* quant.h - ggml block formats: type table, block structs, scalar reference
 * dequantize / dot / quantize.
 *
 * Everything here is the *reference*: plain C, obviously correct, used as the
 * oracle for SIMD (src/cpu/) and CUDA (src/cuda/) kernels. Type ids are ggml's. */
#ifndef MINFER_QUANT_H
#define MINFER_QUANT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

typedef enum qtype {
    QTYPE_F32 = 0,
    QTYPE_F16 = 1,
    QTYPE_Q4_0 = 2,
    QTYPE_Q4_1 = 3,
    QTYPE_Q5_0 = 6,
    QTYPE_Q5_1 = 7,
    QTYPE_Q8_0 = 8,
    QTYPE_Q8_1 = 9,   /* activation format (not a weight type we load) */
    QTYPE_Q2_K = 10,
    QTYPE_Q3_K = 11,
    QTYPE_Q4_K = 12,
    QTYPE_Q5_K = 13,
    QTYPE_Q6_K = 14,
    QTYPE_Q8_K = 15,  /* activation format for K-quant dots on the CPU */
    QTYPE_IQ4_NL = 20,
    QTYPE_IQ4_XS = 23,
    QTYPE_BF16 = 30,
    QTYPE_COUNT = 40, /* table size (ids above are sparse) */
} qtype;

#define QK4_0 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* f16 stored as raw bits: conversion goes through mf_f16_to_f32 (util.h). */
typedef uint16_t f16_t;

typedef struct { f16_t d; uint8_t qs[16]; } block_q4_0;
typedef struct { f16_t d, m; uint8_t qs[16]; } block_q4_1;
typedef struct { f16_t d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;
typedef struct { f16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } block_q5_1;
typedef struct { f16_t d; int8_t qs[32]; } block_q8_0;
typedef struct { f16_t d, s; int8_t qs[32]; } block_q8_1;   /* s = d * sum(qs) */
typedef struct { f16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { f16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; f16_t d; } block_q6_K;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;
/* Q2_K: scales[j] = 4-bit scale | 4-bit min << 4 of 16-value group j. */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; f16_t d, dmin; } block_q2_K;
/* Q3_K: 2 low bits in qs, the third in hmask, 6-bit scales packed in 12 bytes. */
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; f16_t d; } block_q3_K;
/* IQ4_NL: 32 indices into quant_iq4nl_values, nibbles ordered as Q4_0's. */
typedef struct { f16_t d; uint8_t qs[QK4_0 / 2]; } block_iq4_nl;
/* IQ4_XS: IQ4_NL's indices under 8 six-bit sub-block scales (bias 32). */
typedef struct { f16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;

static_assert(sizeof(block_q4_0) == 18, "q4_0 size");
static_assert(sizeof(block_q4_1) == 20, "q4_1 size");
static_assert(sizeof(block_q5_0) == 22, "q5_0 size");
static_assert(sizeof(block_q5_1) == 24, "q5_1 size");
static_assert(sizeof(block_q8_0) == 34, "q8_0 size");
static_assert(sizeof(block_q8_1) == 36, "q8_1 size");
static_assert(sizeof(block_q4_K) == 144, "q4_K size");
static_assert(sizeof(block_q5_K) == 176, "q5_K size");
static_assert(sizeof(block_q6_K) == 210, "q6_K size");
static_assert(sizeof(block_q8_K) == 292, "q8_K size");
static_assert(sizeof(block_q2_K) == 84, "q2_K size");
static_assert(sizeof(block_q3_K) == 110, "q3_K size");
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl size");
static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs size");

/* The 16 values an IQ4_NL / IQ4_XS index stands for (a non-linear grid, denser
 * near zero), in units of the block scale. */
extern const int8_t quant_iq4nl_values[16];

typedef struct qtype_traits {
    const char *name;     /* "q4_K", ... ; NULL for unknown ids */
    uint32_t blck;        /* values per block */
    uint32_t type_size;   /* bytes per block */
    int supported;        /* 1 when minfer can dequantize/dot it as a weight */
} qtype_traits;

/* Traits of a ggml type id; returns NULL for ids that are not known at all. */
const qtype_traits *qtype_get(uint32_t type);
const char *qtype_name(uint32_t type);   /* "unknown" for unknown */
/* Bytes of a row of n values; 0 if n is not a multiple of the block size or type unknown. */
uint64_t qtype_row_size(uint32_t type, uint64_t n);

/* Scalar reference. n must be a multiple of the type's block size. */
void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);
/* Quantize (reference, round-to-nearest like ggml's *_ref functions). Supported
 * for every weight type above and for Q8_0/Q8_1/Q8_K activations. */
void quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);
/* Reference dot of a weight row with f32 activations: sum_i dequant(w)[i] * x[i],
 * accumulated in double for a stable oracle. */
float quant_dot_f32(uint32_t type, const void *w, const float *x, int64_t n);

/* Q4_K / Q5_K scale packing (see FORMATS.md): sub-block j in 0..7. Put writes
 * (sc, m < 64) into 12 bytes that start zeroed; get unpacks one pair. */
static inline void quant_put_scale_min_k4(int j, uint8_t *q, uint8_t sc, uint8_t m) {
    if (j < 4) {
        q[j] |= sc;
        q[j + 4] |= m;
    } else {
        q[j + 4] = (uint8_t)((sc & 0xF) | (m & 0xF) << 4);
        q[j - 4] |= (uint8_t)((sc >> 4) << 6);
        q[j] |= (uint8_t)((m >> 4) << 6);
    }
}
static inline void quant_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}


/* Q3_K: the 6-bit code (0..63; the scale is code - 32) of 16-value group j in
 * 0..15. Low nibbles: bytes 0..7 (groups 0..7 low, 8..15 high nibble); top 2
 * bits: byte 8 + j % 4, bits 2 * (j / 4). */
static inline int quant_q3_K_scale(const uint8_t s[12], int j) {
    const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    return lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
}

/* IQ4_XS: the 6-bit code (0..63; the scale is code - 32) of sub-block j in 0..7. */
static inline int quant_iq4_xs_scale(const block_iq4_xs *b, int j) {
    return ((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | ((b->scales_h >> (2 * j)) & 3) << 4;
}

#endif

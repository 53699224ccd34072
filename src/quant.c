/* quant.c - ggml block formats: type table and scalar reference kernels.
 * See quant.h. Layout facts: ../shared/FORMATS.md.
 *
 * Everything here is the oracle the SIMD and CUDA kernels are tested against,
 * and the quantizers write the synthetic benchmark models that llama.cpp must
 * load, so the code favours being obviously right over being fast:
 *
 *   - dequantizers evaluate each value with the same float operations, in the
 *     same order, as ggml's dequantize_row_* (and the numpy dequantizers of the
 *     `gguf` Python package), so results are bit-identical to both
 *     (tests/quant_oracle_test.py checks this);
 *   - quantizers follow ggml's round-to-nearest reference quantizers
 *     (quantize_row_*_ref): the same scale search and the same float maths,
 *     so a file we write is byte-for-byte what ggml would write for the same
 *     f32 input. Inputs must be finite.
 *
 * The file has no SIMD and is compiled with -std=c11, which for GCC means
 * -ffp-contract=off: no a*b+c is fused, which the bit-exactness relies on. */
#include "quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ------------------------------------------------------------------------- */
/* Type table                                                                */
/* ------------------------------------------------------------------------- */

static const qtype_traits traits[QTYPE_COUNT] = {
    [QTYPE_F32] = { "f32", 1, 4, 1 },
    [QTYPE_F16] = { "f16", 1, 2, 1 },
    [QTYPE_Q4_0] = { "q4_0", QK4_0, sizeof(block_q4_0), 1 },
    [QTYPE_Q4_1] = { "q4_1", QK4_0, sizeof(block_q4_1), 1 },
    [QTYPE_Q5_0] = { "q5_0", QK4_0, sizeof(block_q5_0), 1 },
    [QTYPE_Q5_1] = { "q5_1", QK4_0, sizeof(block_q5_1), 1 },
    [QTYPE_Q8_0] = { "q8_0", QK8_0, sizeof(block_q8_0), 1 },
    [QTYPE_Q8_1] = { "q8_1", QK8_0, sizeof(block_q8_1), 0 },
    [QTYPE_Q2_K] = { "q2_K", QK_K, sizeof(block_q2_K), 1 },
    [QTYPE_Q3_K] = { "q3_K", QK_K, sizeof(block_q3_K), 1 },
    [QTYPE_Q4_K] = { "q4_K", QK_K, sizeof(block_q4_K), 1 },
    [QTYPE_Q5_K] = { "q5_K", QK_K, sizeof(block_q5_K), 1 },
    [QTYPE_Q6_K] = { "q6_K", QK_K, sizeof(block_q6_K), 1 },
    [QTYPE_Q8_K] = { "q8_K", QK_K, sizeof(block_q8_K), 0 },
    [QTYPE_IQ4_NL] = { "iq4_nl", QK4_0, sizeof(block_iq4_nl), 1 },
    [QTYPE_IQ4_XS] = { "iq4_xs", QK_K, sizeof(block_iq4_xs), 1 },
    [QTYPE_BF16] = { "bf16", 1, 2, 1 },
};

const qtype_traits *qtype_get(uint32_t type) {
    if (type >= QTYPE_COUNT || !traits[type].name) return NULL;
    return &traits[type];
}

const char *qtype_name(uint32_t type) {
    const qtype_traits *t = qtype_get(type);
    return t ? t->name : "unknown";
}

uint64_t qtype_row_size(uint32_t type, uint64_t n) {
    const qtype_traits *t = qtype_get(type);
    if (!t || n % t->blck) return 0;
    return n / t->blck * t->type_size;
}

/* ------------------------------------------------------------------------- */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------- */

/* Round to nearest, ties to even (what ggml's nearest_int computes with its
 * 1.5 * 2^23 magic addend). The clamp keeps the int conversion defined when a
 * degenerate scale (an f16 that flushed to a subnormal) makes x/d huge; ggml
 * asserts the same bound, and every caller clamps the result to a few bits. */
static inline int nearest_int(float f) {
    if (f > 4194303.f) f = 4194303.f;
    if (f < -4194303.f) f = -4194303.f;
    return (int)rintf(f);
}

static inline float f16_to_f32(f16_t h) { return mf_f16_to_f32(h); }
static inline f16_t f32_to_f16(float f) { return mf_f32_to_f16(f); }

/* The element of largest magnitude, with its sign (the first one on ties).
 * Symmetric formats map it to the most negative code (-8, -16, -32, -128) so the
 * extra negative code of a two's-complement range is not wasted. */
static float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    return max;
}

/* Q5_0 / Q5_1 keep the 32 fifth bits in 4 bytes read as a little-endian u32;
 * bit j belongs to element j. Assembled bytewise so big-endian hosts agree. */
static inline uint32_t load_qh32(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}
static inline void store_qh32(uint8_t qh[4], uint32_t v) {
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(v >> (8 * i));
}

/* ------------------------------------------------------------------------- */
/* Dequantization, one function per format over nb consecutive blocks        */
/* ------------------------------------------------------------------------- */

static void dequant_f32(const void *src, float *y, int64_t nb) {
    memcpy(y, src, (size_t)nb * sizeof(float));
}

static void dequant_f16(const void *src, float *y, int64_t nb) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < nb; i++) y[i] = f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
}

static void dequant_bf16(const void *src, float *y, int64_t nb) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < nb; i++) y[i] = mf_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
}

/* Q4_0 / Q4_1 nibble order: the two halves of a block share bytes.
 *
 *   qs[j] = | hi: element j+16 | lo: element j |      j = 0..15
 *             7            4     3           0
 *
 * q4_0: d * (q - 8)        q4_1: d * q + m */
static void dequant_q4_0(const void *src, float *y, int64_t nb) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = ((b->qs[j] & 0xF) - 8) * d;
            y[j + 16] = ((b->qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const void *src, float *y, int64_t nb) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = f16_to_f32(b->d), m = f16_to_f32(b->m);
        for (int j = 0; j < 16; j++) {
            y[j] = (b->qs[j] & 0xF) * d + m;
            y[j + 16] = (b->qs[j] >> 4) * d + m;
        }
    }
}

/* Q5_0 / Q5_1: the low 4 bits as in Q4_0, the fifth bit of element j is bit j
 * of the little-endian u32 qh:
 *
 *   qh[0]: elements 7..0 (bit 0 = element 0)   ...   qh[3]: elements 31..24
 *
 * q5_0: d * (q - 16)       q5_1: d * q + m */
static void dequant_q5_0(const void *src, float *y, int64_t nb) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = f16_to_f32(b->d);
        const uint32_t qh = load_qh32(b->qh);
        for (int j = 0; j < 16; j++) {
            const int q0 = (b->qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int q1 = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (q0 - 16) * d;
            y[j + 16] = (q1 - 16) * d;
        }
    }
}

static void dequant_q5_1(const void *src, float *y, int64_t nb) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = f16_to_f32(b->d), m = f16_to_f32(b->m);
        const uint32_t qh = load_qh32(b->qh);
        for (int j = 0; j < 16; j++) {
            const int q0 = (b->qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int q1 = (b->qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = q0 * d + m;
            y[j + 16] = q1 * d + m;
        }
    }
}

static void dequant_q8_0(const void *src, float *y, int64_t nb) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < 32; j++) y[j] = b->qs[j] * d;
    }
}

/* Q8_1 dequantizes like Q8_0; s (= d * sum of qs) only serves dots against
 * formats with a min. */
static void dequant_q8_1(const void *src, float *y, int64_t nb) {
    const block_q8_1 *b = src;
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < 32; j++) y[j] = b->qs[j] * d;
    }
}

/* Q4_K: 256 values = 8 sub-blocks of 32, each with a 6-bit scale sc and a
 * 6-bit min m; value = (d * sc) * q - (dmin * m).
 *
 * The 16 six-bit numbers share 12 bytes. Sub-blocks 0..3 keep theirs whole in
 * the low 6 bits of bytes 0..7; sub-blocks 4..7 keep their low nibbles in
 * bytes 8..11 and park their top 2 bits in the free top bits of bytes 0..7
 * (upper case: scale bits, lower case: min bits; digit = sub-block):
 *
 *   byte  0..3 : | S4..S7 hi2 | s0..s3 (6 bits) |   S = sc of sub-block j+4
 *   byte  4..7 : | M4..M7 hi2 | m0..m3 (6 bits) |   M = m  of sub-block j+4
 *   byte  8..11: | m4..m7 lo4 | s4..s7 lo4      |
 *
 * (quant_get_scale_min_k4 in quant.h unpacks one pair.) Quants: 4 groups of
 * 64 values; group g uses qs[32g..32g+31], low nibbles for sub-block 2g
 * (values 64g..64g+31), high nibbles for sub-block 2g+1 (64g+32..64g+63). */
static void dequant_q4_K(const void *src, float *y, int64_t nb) {
    const block_q4_K *b = src;
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        const uint8_t *q = b->qs;
        for (int g = 0; g < 4; g++, q += 32, y += 64) {
            uint8_t sc, m;
            quant_get_scale_min_k4(2 * g, b->scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            quant_get_scale_min_k4(2 * g + 1, b->scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) y[l] = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) y[l + 32] = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: Q4_K's scales and nibbles plus a fifth bit per value. The fifth bits
 * of value l of every sub-block share byte qh[l]:
 *
 *   qh[l] (l = 0..31): bit j = fifth bit of value 32*j + l   (j = sub-block 0..7)
 *
 * so group g's low-nibble half uses bit 2g and its high-nibble half bit 2g+1. */
static void dequant_q5_K(const void *src, float *y, int64_t nb) {
    const block_q5_K *b = src;
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        const uint8_t *ql = b->qs;
        for (int g = 0; g < 4; g++, ql += 32, y += 64) {
            uint8_t sc, m;
            quant_get_scale_min_k4(2 * g, b->scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            quant_get_scale_min_k4(2 * g + 1, b->scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            const uint8_t u1 = (uint8_t)(1u << (2 * g)), u2 = (uint8_t)(2u << (2 * g));
            for (int l = 0; l < 32; l++) y[l] = d1 * ((ql[l] & 0xF) + (b->qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) y[l + 32] = d2 * ((ql[l] >> 4) + (b->qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* Q6_K: 16 sub-blocks of 16 values, int8 scale each; value = (d * sc) * (q - 32)
 * with a 6-bit q. Each half h (128 values) uses ql[64h..64h+63], qh[32h..32h+31]
 * and scales[8h..8h+7]; for l = 0..31 its four quarters are
 *
 *   value     low 4 bits            high 2 bits
 *   l         ql[l]      & 0xF      qh[l] bits 1..0
 *   l + 32    ql[l + 32] & 0xF      qh[l] bits 3..2
 *   l + 64    ql[l]      >> 4       qh[l] bits 5..4
 *   l + 96    ql[l + 32] >> 4       qh[l] bits 7..6
 *
 * and value v of the half takes scales[8h + v/16]. */
static void dequant_q6_K(const void *src, float *y, int64_t nb) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = f16_to_f32(b->d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *sc = b->scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* Q2_K: 16 groups of 16 values, 2-bit codes q, a 4-bit scale and a 4-bit min
 * per group (scales[j] = sc | m << 4); value = (d * sc) * q - (dmin * m).
 * Codes: each half h of 128 values uses qs[32h..32h+31]; bits 2s..2s+1 of
 * qs[32h + l] hold value 128h + 32s + l (s = 0..3), so group j = 8h + 2s + l/16.
 *
 *   qs[32h + l] = | v[128h+96+l] | v[128h+64+l] | v[128h+32+l] | v[128h+l] |
 *                   7          6   5          4   3          2   1        0 */
static void dequant_q2_K(const void *src, float *y, int64_t nb) {
    const block_q2_K *b = src;
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = b->qs + 32 * h;
            for (int s = 0; s < 4; s++) {
                for (int half = 0; half < 2; half++, y += 16) {
                    const uint8_t sc = b->scales[8 * h + 2 * s + half];
                    const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
                    for (int l = 0; l < 16; l++) y[l] = dl * ((q[16 * half + l] >> (2 * s)) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K: Q2_K's code layout for the low 2 bits, a third bit per value in hmask
 * (bit k of hmask[l] = value 32k + l, k = 0..7), signed 6-bit group scales
 * (quant_q3_K_scale - 32). A value's code is low | high << 2 in 0..7 and it
 * stands for code - 4: value = (d * (sc - 32)) * (code - 4). */
static void dequant_q3_K(const void *src, float *y, int64_t nb) {
    const block_q3_K *b = src;
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = f16_to_f32(b->d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = b->qs + 32 * h;
            for (int s = 0; s < 4; s++) {
                const uint8_t m = (uint8_t)(1u << (4 * h + s));
                for (int half = 0; half < 2; half++, y += 16) {
                    const float dl = d * (quant_q3_K_scale(b->scales, 8 * h + 2 * s + half) - 32);
                    for (int l = 0; l < 16; l++) {
                        const int k = 16 * half + l;
                        y[l] = dl * (((q[k] >> (2 * s)) & 3) - (b->hmask[k] & m ? 0 : 4));
                    }
                }
            }
        }
    }
}

const int8_t quant_iq4nl_values[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

/* IQ4_NL: Q4_0's nibble order; value = d * quant_iq4nl_values[nibble]. */
static void dequant_iq4_nl(const void *src, float *y, int64_t nb) {
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < nb; i++, b++, y += 32) {
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * quant_iq4nl_values[b->qs[j] & 0xF];
            y[j + 16] = d * quant_iq4nl_values[b->qs[j] >> 4];
        }
    }
}

/* IQ4_XS: 8 sub-blocks of 32, each IQ4_NL's layout in qs[16j..16j+15], under a
 * 6-bit code (low nibble in scales_l[j/2] nibble j%2, top 2 bits in scales_h
 * bits 2j..2j+1): value = (d * (code - 32)) * quant_iq4nl_values[nibble]. */
static void dequant_iq4_xs(const void *src, float *y, int64_t nb) {
    const block_iq4_xs *b = src;
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = f16_to_f32(b->d);
        for (int j = 0; j < 8; j++, y += 32) {
            const float dl = d * (quant_iq4_xs_scale(b, j) - 32);
            const uint8_t *qs = b->qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                y[l] = dl * quant_iq4nl_values[qs[l] & 0xF];
                y[l + 16] = dl * quant_iq4nl_values[qs[l] >> 4];
            }
        }
    }
}

static void dequant_q8_K(const void *src, float *y, int64_t nb) {
    const block_q8_K *b = src;
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        for (int j = 0; j < QK_K; j++) y[j] = b->d * b->qs[j];
    }
}

/* ------------------------------------------------------------------------- */
/* Quantization (ggml's reference quantizers, same maths)                    */
/* ------------------------------------------------------------------------- */

static void quant_f32(const float *x, void *dst, int64_t nb) {
    memcpy(dst, x, (size_t)nb * sizeof(float));
}

static void quant_f16(const float *x, void *dst, int64_t nb) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < nb; i++) {
        const uint16_t h = f32_to_f16(x[i]);
        p[2 * i] = (uint8_t)h;
        p[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

static void quant_bf16(const float *x, void *dst, int64_t nb) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < nb; i++) {
        const uint16_t h = mf_f32_to_bf16(x[i]);
        p[2 * i] = (uint8_t)h;
        p[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

/* Symmetric 4/5-bit: d = absmax_signed / -2^(bits-1), so the largest-magnitude
 * value lands exactly on code 0 and the opposite side is clamped at the top
 * code. x*id + 8.5 truncated is round-half-up of x*id + 8 (it is >= 0). */
static void quant_q4_0(const float *x, void *dst, int64_t nb) {
    block_q4_0 *b = dst;
    for (int64_t i = 0; i < nb; i++, b++, x += 32) {
        const float d = signed_absmax(x, 32) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        for (int j = 0; j < 16; j++) {
            const int q0 = MF_MIN(15, (int)(x[j] * id + 8.5f));
            const int q1 = MF_MIN(15, (int)(x[j + 16] * id + 8.5f));
            b->qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void quant_q5_0(const float *x, void *dst, int64_t nb) {
    block_q5_0 *b = dst;
    for (int64_t i = 0; i < nb; i++, b++, x += 32) {
        const float d = signed_absmax(x, 32) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = MF_MIN(31, (int)(x[j] * id + 16.5f));
            const int q1 = MF_MIN(31, (int)(x[j + 16] * id + 16.5f));
            b->qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_qh32(b->qh, qh);
    }
}

/* Asymmetric 4/5-bit: the block's [min, max] spread over the codes. */
static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    *mn = lo;
    *mx = hi;
}

static void quant_q4_1(const float *x, void *dst, int64_t nb) {
    block_q4_1 *b = dst;
    for (int64_t i = 0; i < nb; i++, b++, x += 32) {
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        b->m = f32_to_f16(mn);
        for (int j = 0; j < 16; j++) {
            const int q0 = MF_MIN(15, (int)((x[j] - mn) * id + 0.5f));
            const int q1 = MF_MIN(15, (int)((x[j + 16] - mn) * id + 0.5f));
            b->qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void quant_q5_1(const float *x, void *dst, int64_t nb) {
    block_q5_1 *b = dst;
    for (int64_t i = 0; i < nb; i++, b++, x += 32) {
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        b->m = f32_to_f16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = MF_MIN(31, (int)((x[j] - mn) * id + 0.5f));
            const int q1 = MF_MIN(31, (int)((x[j + 16] - mn) * id + 0.5f));
            b->qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        store_qh32(b->qh, qh);
    }
}

/* Q8_0 / Q8_1: d = absmax / 127, roundf (half away from zero) like ggml. */
static float absmax(const float *x, int n) {
    float amax = 0;
    for (int i = 0; i < n; i++) amax = MF_MAX(amax, fabsf(x[i]));
    return amax;
}

static void quant_q8_0(const float *x, void *dst, int64_t nb) {
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < nb; i++, b++, x += 32) {
        const float d = absmax(x, 32) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        for (int j = 0; j < 32; j++) b->qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void quant_q8_1(const float *x, void *dst, int64_t nb) {
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < nb; i++, b++, x += 32) {
        const float d = absmax(x, 32) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            b->qs[j] = (int8_t)roundf(x[j] * id);
            sum += b->qs[j];
        }
        /* ggml multiplies by the f32 d, not the f16-rounded one. */
        b->s = f32_to_f16(sum * d);
    }
}

/* Q8_K: f32 d, the signed absmax on code -127 (not -128: ggml's SIMD dots for
 * some formats need |q| <= 127), and bsums = sums of each 16 codes so a dot
 * with a format that has mins can subtract min * sum per 16 without touching
 * the codes again. */
static void quant_q8_K(const float *x, void *dst, int64_t nb) {
    block_q8_K *b = dst;
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        const float max = signed_absmax(x, QK_K);
        if (max == 0) {
            /* ggml leaves bsums unwritten here; we zero the whole block. */
            memset(b, 0, sizeof *b);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) b->qs[j] = (int8_t)MF_MIN(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += b->qs[16 * j + l];
            b->bsums[j] = (int16_t)sum;
        }
        b->d = 1 / iscale;
    }
}

/* Scale + min fit for one sub-block of an asymmetric K-quant (ggml's
 * make_qkx2_quants): find (scale, min) minimising the weighted squared error
 * sum w_i (scale * L_i - min' - x_i)^2 over codes L_i in [0, nmax] (mad: the
 * weighted absolute error sum w_i |...|, which Q2_K's 4-level codes use).
 *
 * Start from the plain [min(x, 0), max(x)] grid, then try nstep+1 stretched
 * grids (nmax + rmin + rdelta*is steps over the range); for each rounding,
 * solve the 2x2 weighted least squares for (scale, min) in closed form and keep
 * the best. The min is clamped at <= 0 so it can be stored as a non-negative
 * 6-bit "min" that is subtracted. Returns scale; *neg_min = -min >= 0.
 * Same float operations in the same order as ggml, hence identical codes. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *neg_min, float rmin, float rdelta, int nstep, int mad) {
    uint8_t Laux[32];
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MF_MAX(0, MF_MIN(nmax, l));
        const float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (mad ? fabsf(diff) : diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = MF_MAX(0, MF_MIN(nmax, l));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float cur_error = 0;
        for (int i = 0; i < n; i++) {
            const float diff = this_scale * Laux[i] + this_min - x[i];
            cur_error += w[i] * (mad ? fabsf(diff) : diff * diff);
        }
        if (cur_error < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits the 8 sub-blocks, stores
 * their scales and mins as 6-bit multiples of the super-block d and dmin (see
 * the packing diagram above dequant_q4_K), then re-derives each code from the
 * stored (rounded) scale and min so the codes match what will be decoded. */
static void quant_k_scales_and_codes(const float *x, int nmax, float rmin, int nstep,
                                     f16_t *d_out, f16_t *dmin_out, uint8_t scales[K_SCALE_SIZE],
                                     uint8_t L[QK_K]) {
    float sc[QK_K / 32], mn[QK_K / 32], w[32];
    float max_scale = 0, max_min = 0; /* scales and mins are >= 0 here */
    for (int j = 0; j < QK_K / 32; j++) {
        const float *xs = x + 32 * j;
        /* Weights favour large values (they matter most in a dot) but keep a
         * floor of the sub-block's rms so small values are not ignored. */
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
        sc[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mn[j], rmin, 0.1f, nstep, 0);
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mn[j] > max_min) max_min = mn[j];
    }

    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales, 0, K_SCALE_SIZE);
    for (int j = 0; j < QK_K / 32; j++) {
        /* Truncated to u8 before the clamp exactly as ggml does (for byte
         * identity): the fit never returns a negative scale for finite input,
         * but if it did, the code would clamp to 63 rather than spill into
         * the neighbouring sub-blocks' bits. */
        const uint8_t ls = (uint8_t)MF_MIN(63, (uint8_t)nearest_int(inv_scale * sc[j]));
        const uint8_t lm = (uint8_t)MF_MIN(63, (uint8_t)nearest_int(inv_min * mn[j]));
        quant_put_scale_min_k4(j, scales, ls, lm);
    }
    *d_out = f32_to_f16(max_scale / 63.f);
    *dmin_out = f32_to_f16(max_min / 63.f);

    const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t ls, lm;
        quant_get_scale_min_k4(j, scales, &ls, &lm);
        const float dj = d * ls;
        if (!dj) continue; /* codes from the fit stay; they decode to -dm anyway */
        const float dm = dmin * lm;
        for (int l = 0; l < 32; l++) {
            const int q = nearest_int((x[32 * j + l] + dm) / dj);
            L[32 * j + l] = (uint8_t)MF_MAX(0, MF_MIN(nmax, q));
        }
    }
}

static void quant_q4_K(const float *x, void *dst, int64_t nb) {
    block_q4_K *b = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        quant_k_scales_and_codes(x, 15, -1.f, 20, &b->d, &b->dmin, b->scales, L);
        for (int g = 0; g < 4; g++) {
            for (int l = 0; l < 32; l++) b->qs[32 * g + l] = (uint8_t)(L[64 * g + l] | L[64 * g + 32 + l] << 4);
        }
    }
}

static void quant_q5_K(const float *x, void *dst, int64_t nb) {
    block_q5_K *b = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        quant_k_scales_and_codes(x, 31, -0.5f, 15, &b->d, &b->dmin, b->scales, L);
        memset(b->qh, 0, sizeof b->qh);
        for (int g = 0; g < 4; g++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
                b->qs[32 * g + l] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
                b->qh[l] |= (uint8_t)((lo >> 4) << (2 * g) | (hi >> 4) << (2 * g + 1));
            }
        }
    }
}

/* Symmetric fit for one Q6_K sub-block of 16 (ggml's make_qx_quants with
 * rmse_type 1: weights x^2). Codes l in [-nmax, nmax-1] are stored as
 * L = l + nmax. The signed absmax goes to -nmax; then 18 nearby grid
 * stretches are tried, each scored by the least-squares optimum
 * (sum w x l)^2 / (sum w l^2), i.e. the error reduction of the best scale for
 * that rounding. Returns the scale (its sign is opposite to the absmax's). */
#define GROUP_MAX_EPS 1e-15f
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L) {
    const float max = signed_absmax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = MF_MAX(-nmax, MF_MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = MF_MAX(-nmax, MF_MIN(nmax - 1, l));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + MF_MAX(-nmax, MF_MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q6_K: per-16 scales fitted in f32, then stored as int8 multiples of d; the
 * sub-block with the largest |scale| gets code -128 (d takes the opposite
 * sign), and codes are re-derived from the stored scales. */
static void quant_q6_K(const float *x, void *dst, int64_t nb) {
    block_q6_K *b = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            scales[ib] = fit_scale_sym(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        memset(b, 0, sizeof *b);
        if (max_abs_scale < GROUP_MAX_EPS) continue; /* all (near) zero: d = 0 */

        const float iscale = -128.f / max_scale;
        b->d = f32_to_f16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ib++) b->scales[ib] = (int8_t)MF_MIN(127, nearest_int(iscale * scales[ib]));

        const float d = f16_to_f32(b->d);
        for (int j = 0; j < QK_K / 16; j++) {
            const float dj = d * b->scales[j];
            if (!dj) continue;
            for (int l = 0; l < 16; l++) {
                const int q = nearest_int(x[16 * j + l] / dj);
                L[16 * j + l] = (int8_t)(MF_MAX(-32, MF_MIN(31, q)) + 32);
            }
        }

        /* Pack per the table above dequant_q6_K. */
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | (q3 & 0xF) << 4);
                ql[l + 32] = (uint8_t)((q2 & 0xF) | (q4 & 0xF) << 4);
                qh[l] = (uint8_t)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
            }
        }
    }
}

/* Q2_K and Q3_K share the code packing: values 128h + 32s + l (s = 0..3) in
 * bits 2s..2s+1 of qs[32h + l] (the diagram above dequant_q2_K). L: codes 0..3. */
static void pack_2bit(const uint8_t L[QK_K], uint8_t qs[QK_K / 4]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *Lh = L + 128 * h;
        for (int l = 0; l < 32; l++)
            qs[32 * h + l] = (uint8_t)(Lh[l] | Lh[l + 32] << 2 | Lh[l + 64] << 4 | Lh[l + 96] << 6);
    }
}

/* Q2_K: per 16-value group, fit_scale_min over codes 0..3 with |x| weights and
 * the absolute-error criterion; scales and mins stored as 4-bit multiples of
 * d = max_scale / 15 and dmin = max_min / 15; codes re-derived from the stored
 * (rounded) scale and min. ggml's quantize_row_q2_K_ref, same operations. */
static void quant_q2_K(const float *x, void *dst, int64_t nb) {
    block_q2_K *b = dst;
    uint8_t L[QK_K];
    float w[16], sc[QK_K / 16], mn[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        float max_scale = 0, max_min = 0; /* both >= 0: the min is subtracted */
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            sc[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mn[j], -0.5f, 0.1f, 15, 1);
            if (sc[j] > max_scale) max_scale = sc[j];
            if (mn[j] > max_min) max_min = mn[j];
        }
        /* Stored as ggml does: the int code truncated to a byte (a fit never
         * gives a negative scale or min for finite input, so this is 0..15). */
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) b->scales[j] = (uint8_t)nearest_int(iscale * sc[j]);
            b->d = f32_to_f16(max_scale / 15.f);
        } else {
            memset(b->scales, 0, sizeof b->scales);
            b->d = f32_to_f16(0.f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < QK_K / 16; j++) b->scales[j] |= (uint8_t)((unsigned)nearest_int(iscale * mn[j]) << 4);
            b->dmin = f32_to_f16(max_min / 15.f);
        } else {
            b->dmin = f32_to_f16(0.f);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            const float dj = f16_to_f32(b->d) * (b->scales[j] & 0xF);
            if (!dj) continue; /* codes from the fit stay; they decode to -dm anyway */
            const float dm = f16_to_f32(b->dmin) * (b->scales[j] >> 4);
            for (int l = 0; l < 16; l++) {
                const int q = nearest_int((x[16 * j + l] + dm) / dj);
                L[16 * j + l] = (uint8_t)MF_MAX(0, MF_MIN(3, q));
            }
        }
        pack_2bit(L, b->qs);
    }
}

/* Symmetric fit for one Q3_K group (ggml's make_q3_quants with do_rmse): codes
 * l in [-nmax, nmax-1], the signed absmax on -nmax, then up to 5 sweeps of
 * coordinate descent: each code moves to the value that is best for the
 * least-squares scale of the others (weights x^2), kept when the scored error
 * (sum w x l)^2 / (sum w l^2) improves. Returns the scale; L = l + nmax. */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L) {
    const float max = signed_absmax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = MF_MAX(-nmax, MF_MIN(nmax - 1, l));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            int new_l = nearest_int(x[i] * sl2 / slx);
            new_l = MF_MAX(-nmax, MF_MIN(nmax - 1, new_l));
            if (new_l == L[i]) continue;
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Q3_K: per-16 scales fitted in f32, stored as 6-bit codes of d = -max/32 (the
 * group with the largest |scale| on code 0, i.e. -32), codes re-derived from the
 * stored scales, the third bit split off into hmask. ggml's
 * quantize_row_q3_K_ref, same operations. */
static void quant_q3_K(const float *x, void *dst, int64_t nb) {
    block_q3_K *b = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        for (int j = 0; j < QK_K / 16; j++) scales[j] = fit_scale_q3(16, 4, x + 16 * j, L + 16 * j);
        const float max_scale = signed_absmax(scales, QK_K / 16);
        memset(b->scales, 0, sizeof b->scales);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                const int l = MF_MAX(-32, MF_MIN(31, (int8_t)nearest_int(iscale * scales[j]))) + 32;
                b->scales[j % 8] |= (uint8_t)((l & 0xF) << (j < 8 ? 0 : 4));
                b->scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            b->d = f32_to_f16(1 / iscale);
        } else {
            b->d = f32_to_f16(0.f);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            const float dj = f16_to_f32(b->d) * (quant_q3_K_scale(b->scales, j) - 32);
            if (!dj) continue;
            for (int l = 0; l < 16; l++) {
                const int q = nearest_int(x[16 * j + l] / dj);
                L[16 * j + l] = (int8_t)(MF_MAX(-4, MF_MIN(3, q)) + 4);
            }
        }
        /* bit 2 of the code of value v goes to hmask[v % 32] bit v / 32 */
        uint8_t low[QK_K];
        memset(b->hmask, 0, sizeof b->hmask);
        for (int v = 0; v < QK_K; v++) {
            if (L[v] > 3) b->hmask[v % 32] |= (uint8_t)(1u << (v / 32));
            low[v] = (uint8_t)(L[v] & 3);
        }
        pack_2bit(low, b->qs);
    }
}

/* Index of the grid value nearest x (ties to the lower one); quant_iq4nl_values
 * is sorted. ggml's best_index_int8. */
static int iq4_index(float x) {
    const int8_t *v = quant_iq4nl_values;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < v[mid]) hi = mid;
        else lo = mid;
    }
    return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

/* One 32-value IQ4 block's scale (ggml's quantize_row_iq4_nl_impl for one block,
 * no importance weights, ntry 7, as llama-quantize runs it): the signed absmax on
 * the grid's end (-127), the least-squares scale for that assignment (weights
 * x^2), then 15 stretched grids (id = (itry - 127) / max), each scored by the
 * least-squares error reduction; returns the best scale (0 for a zero block). */
static float iq4_block_scale(const float *x) {
    const int8_t *v = quant_iq4nl_values;
    const float max = signed_absmax(x, 32);
    if (fabsf(max) < GROUP_MAX_EPS) return 0.f;
    const float d0 = -max / v[0];
    float id = 1 / d0, sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const float q = v[iq4_index(id * x[j])], w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
    }
    float d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -7; itry <= 7; itry++) {
        id = (itry + v[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = v[iq4_index(id * x[j])], w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* The 32 indices of x under scale d (d = 0: index 8, the value 1, for all), in
 * Q4_0's nibble order. */
static void iq4_pack(const float *x, float d, uint8_t qs[16]) {
    const float id = d ? 1 / d : 0.f;
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(iq4_index(id * x[j]) | iq4_index(id * x[j + 16]) << 4);
}

/* IQ4_NL: the block's own scale in f16; indices from the unrounded scale (as ggml). */
static void quant_iq4_nl(const float *x, void *dst, int64_t nb) {
    block_iq4_nl *b = dst;
    for (int64_t i = 0; i < nb; i++, b++, x += 32) {
        const float d = iq4_block_scale(x);
        b->d = f32_to_f16(d);
        iq4_pack(x, d, b->qs);
    }
}

/* IQ4_XS: the 8 block scales as 6-bit codes of d = -max/32 (code l in -32..31,
 * stored l + 32); each sub-block's indices re-derived from d * l, with d in f32
 * (not the stored f16) exactly as ggml. */
static void quant_iq4_xs(const float *x, void *dst, int64_t nb) {
    block_iq4_xs *b = dst;
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        float scales[8];
        for (int j = 0; j < 8; j++) scales[j] = iq4_block_scale(x + 32 * j);
        const float d = -signed_absmax(scales, 8) / 32;
        const float id = d ? 1 / d : 0.f;
        b->d = f32_to_f16(d);
        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof b->scales_l);
        for (int j = 0; j < 8; j++) {
            const int l = MF_MAX(-32, MF_MIN(31, nearest_int(id * scales[j])));
            iq4_pack(x + 32 * j, d * l, b->qs + 16 * j);
            b->scales_l[j / 2] |= (uint8_t)(((l + 32) & 0xF) << (4 * (j % 2)));
            b->scales_h |= (uint16_t)(((l + 32) >> 4) << (2 * j));
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Kernel table and public entry points                                      */
/* ------------------------------------------------------------------------- */

/* Per type: dequantize / quantize nb consecutive blocks. NULL = not available. */
typedef struct quant_kernels {
    void (*dequant)(const void *src, float *dst, int64_t nb);
    void (*quant)(const float *src, void *dst, int64_t nb);
} quant_kernels;

static const quant_kernels kernels[QTYPE_COUNT] = {
    [QTYPE_F32] = { dequant_f32, quant_f32 },
    [QTYPE_F16] = { dequant_f16, quant_f16 },
    [QTYPE_BF16] = { dequant_bf16, quant_bf16 },
    [QTYPE_Q4_0] = { dequant_q4_0, quant_q4_0 },
    [QTYPE_Q4_1] = { dequant_q4_1, quant_q4_1 },
    [QTYPE_Q5_0] = { dequant_q5_0, quant_q5_0 },
    [QTYPE_Q5_1] = { dequant_q5_1, quant_q5_1 },
    [QTYPE_Q8_0] = { dequant_q8_0, quant_q8_0 },
    [QTYPE_Q8_1] = { dequant_q8_1, quant_q8_1 },
    [QTYPE_Q4_K] = { dequant_q4_K, quant_q4_K },
    [QTYPE_Q5_K] = { dequant_q5_K, quant_q5_K },
    [QTYPE_Q6_K] = { dequant_q6_K, quant_q6_K },
    [QTYPE_Q8_K] = { dequant_q8_K, quant_q8_K },
    [QTYPE_Q2_K] = { dequant_q2_K, quant_q2_K },
    [QTYPE_Q3_K] = { dequant_q3_K, quant_q3_K },
    [QTYPE_IQ4_NL] = { dequant_iq4_nl, quant_iq4_nl },
    [QTYPE_IQ4_XS] = { dequant_iq4_xs, quant_iq4_xs },
};

/* The row functions return void: a caller passing an unsupported type or a
 * ragged n has a bug (file input is validated with qtype_get / qtype_row_size
 * before it gets here), so say exactly what and stop. */
static const quant_kernels *kernels_for(const char *fn, uint32_t type, int64_t n, int want_quant) {
    const qtype_traits *t = qtype_get(type);
    const quant_kernels *k = type < QTYPE_COUNT ? &kernels[type] : NULL;
    const char *why = NULL;
    if (!t || !k || !(want_quant ? (void *)k->quant : (void *)k->dequant)) why = "type not implemented";
    else if (n < 0 || n % t->blck) why = "n is not a multiple of the block size";
    if (why) {
        fprintf(stderr, "minfer: error: %s: type %s (%u), n = %lld: %s\n", fn, qtype_name(type), type,
                (long long)n, why);
        abort();
    }
    return k;
}

void quant_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const quant_kernels *k = kernels_for("quant_dequantize_row", type, n, 0);
    k->dequant(src, dst, n / qtype_get(type)->blck);
}

void quant_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    const quant_kernels *k = kernels_for("quant_quantize_row", type, n, 1);
    k->quant(src, dst, n / qtype_get(type)->blck);
}

/* Dequantizes a chunk of up to 256 values at a time and accumulates
 * (double)w * (double)x in order: the double sum of products of floats is
 * exact per product and rounding-stable in the sum, which makes this a good
 * oracle for kernels that accumulate in float or int32. */
float quant_dot_f32(uint32_t type, const void *w, const float *x, int64_t n) {
    const quant_kernels *k = kernels_for("quant_dot_f32", type, n, 0);
    const qtype_traits *t = qtype_get(type);
    const int64_t nb = n / t->blck, chunk = QK_K / t->blck; /* blck divides 256 */
    const uint8_t *wb = w;
    float buf[QK_K];
    double acc = 0;
    for (int64_t i = 0; i < nb; i += chunk) {
        const int64_t m = MF_MIN(chunk, nb - i);
        k->dequant(wb + (uint64_t)i * t->type_size, buf, m);
        const float *xs = x + i * t->blck;
        for (int64_t j = 0; j < m * t->blck; j++) acc += (double)buf[j] * (double)xs[j];
    }
    return (float)acc;
}

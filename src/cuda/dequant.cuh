/* dequant.cuh - dequantization of 8 consecutive values of a device row (layouts in
 * common.cuh), for every supported weight type. Used by the embedding gather, the
 * prefill weight->f16 conversion and the generic f32-activation GEMV. The maths is
 * the scalar reference of quant.c, element for element (FORMATS.md). */
#ifndef MINFER_CUDA_DEQUANT_CUH
#define MINFER_CUDA_DEQUANT_CUH

#include "common.cuh"

static __device__ __forceinline__ uint32_t ld_u32(const uint8_t *p) { return *(const uint32_t *)p; }
static __device__ __forceinline__ uint16_t ld_u16(const uint8_t *p) { return *(const uint16_t *)p; }

/* Q4_K / Q5_K 6-bit scale and min of sub-block j from the 12 packed bytes. */
static __device__ __forceinline__ void k4_scale_min(const uint8_t *s, int j, float *sc, float *m) {
    if (j < 4) {
        *sc = (float)(s[j] & 63);
        *m = (float)(s[j + 4] & 63);
    } else {
        *sc = (float)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (float)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* The device copy of quant_iq4nl_values (the IQ4 grid). */
static __constant__ int8_t cu_iq4nl_values[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                                   1,    13,   25,  38,  53,  69,  89,  113 };

/* o[0..7] = values i..i+7 (i % 8 == 0) of a device row with nb blocks. q2_K, q3_K,
 * iq4_nl and iq4_xs rows are the file's blocks (byte loads; the row padded to 16). */
template <int T>
static __device__ __forceinline__ void dq8(const uint8_t *row, int nb, int i, float *o) {
    if (T == QTYPE_F32) {
        const float *r = (const float *)row + i;
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = r[k];
    } else if (T == QTYPE_F16) {
        const uint16_t *r = (const uint16_t *)row + i;
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = h2f(r[k]);
    } else if (T == QTYPE_BF16) {
        const uint16_t *r = (const uint16_t *)row + i;
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = bf2f(r[k]);
    } else if (T == QTYPE_Q4_0 || T == QTYPE_Q4_1 || T == QTYPE_Q5_0 || T == QTYPE_Q5_1) {
        const int b = i >> 5, j = i & 31;
        const uint8_t *qs = row + (size_t)b * 16;
        const uint8_t *dp;
        uint32_t qh = 0;
        if (T == QTYPE_Q5_0 || T == QTYPE_Q5_1) {
            qh = ld_u32(row + (size_t)nb * 16 + (size_t)b * 4);
            dp = row + (size_t)nb * 20;
        } else {
            dp = row + (size_t)nb * 16;
        }
        const float d = h2f(ld_u16(dp + (size_t)b * 2));
        float m = 0.0f;
        if (T == QTYPE_Q4_1 || T == QTYPE_Q5_1) m = h2f(ld_u16(dp + (size_t)nb * 2 + (size_t)b * 2));
        const int hi = j >= 16;
        const int l0 = j & 15;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int q = hi ? (qs[l0 + k] >> 4) : (qs[l0 + k] & 0xF);
            if (T == QTYPE_Q5_0 || T == QTYPE_Q5_1) q |= ((qh >> (j + k)) & 1) << 4;
            if (T == QTYPE_Q4_0) o[k] = d * (float)(q - 8);
            else if (T == QTYPE_Q5_0) o[k] = d * (float)(q - 16);
            else o[k] = d * (float)q + m;
        }
    } else if (T == QTYPE_Q8_0) {
        const int b = i >> 5, j = i & 31;
        const int8_t *qs = (const int8_t *)row + (size_t)b * 32 + j;
        const float d = h2f(ld_u16(row + (size_t)nb * 32 + (size_t)b * 2));
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = d * (float)qs[k];
    } else if (T == QTYPE_Q4_K || T == QTYPE_Q5_K) {
        const int b = i >> 8, j = i & 255;
        const uint8_t *blk = row + (size_t)b * (T == QTYPE_Q4_K ? 144 : 176);
        const float d = h2f(ld_u16(blk)), dmin = h2f(ld_u16(blk + 2));
        const uint8_t *sc = blk + 4;
        const int g = j >> 6, hi = (j >> 5) & 1, l = j & 31;
        float s, m;
        k4_scale_min(sc, 2 * g + hi, &s, &m);
        const float ds = d * s, dm = dmin * m;
        const uint8_t *qs = blk + (T == QTYPE_Q4_K ? 16 : 48) + 32 * g;
        const uint8_t *qh = blk + 16;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int q = hi ? (qs[l + k] >> 4) : (qs[l + k] & 0xF);
            if (T == QTYPE_Q5_K) q |= ((qh[l + k] >> (2 * g + hi)) & 1) << 4;
            o[k] = ds * (float)q - dm;
        }
    } else if (T == QTYPE_Q6_K) {
        const int b = i >> 8, j = i & 255;
        const uint8_t *ql = row + (size_t)b * 128;
        const uint8_t *qh = row + (size_t)nb * 128 + (size_t)b * 64;
        const int8_t *sc = (const int8_t *)(row + (size_t)nb * 192 + (size_t)b * 16);
        const float d = h2f(ld_u16(row + (size_t)nb * 208 + (size_t)b * 2));
        const int h = j >> 7, r = j & 127, qq = r >> 5, l = r & 31;
        const float ds = d * (float)sc[8 * h + (l >> 4) + 2 * qq];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint8_t lb = ql[64 * h + l + k + (qq & 1) * 32];
            int q = (qq >= 2 ? (lb >> 4) : (lb & 0xF)) | (((qh[32 * h + l + k] >> (2 * qq)) & 3) << 4);
            o[k] = ds * (float)(q - 32);
        }
    } else if (T == QTYPE_Q2_K || T == QTYPE_Q3_K) {
        /* value j = 128h + 32s + l: bits 2s..2s+1 of qs[32h + l]; 16-value group j / 16 */
        const int b = i >> 8, j = i & 255, g = j >> 4, h = j >> 7, s = (j >> 5) & 3, l = j & 31;
        const uint8_t *blk = row + (size_t)b * (T == QTYPE_Q2_K ? 84 : 110);
        const uint8_t *q = blk + (T == QTYPE_Q2_K ? 16 : 32) + 32 * h + l;
        if (T == QTYPE_Q2_K) {
            const uint8_t sc = blk[g];
            const float dl = h2f(ld_u16(blk + 80)) * (float)(sc & 0xF), ml = h2f(ld_u16(blk + 82)) * (float)(sc >> 4);
#pragma unroll
            for (int k = 0; k < 8; k++) o[k] = dl * (float)((q[k] >> (2 * s)) & 3) - ml;
        } else {
            const uint8_t *sc = blk + 96, *hm = blk + l;
            const int lo = g < 8 ? sc[g] & 0xF : sc[g - 8] >> 4, hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
            const float dl = h2f(ld_u16(blk + 108)) * (float)((lo | hi << 4) - 32);
#pragma unroll
            for (int k = 0; k < 8; k++)
                o[k] = dl * (float)(((q[k] >> (2 * s)) & 3) - ((hm[k] >> (4 * h + s)) & 1 ? 0 : 4));
        }
    } else if (T == QTYPE_IQ4_NL || T == QTYPE_IQ4_XS) {
        /* 32-value blocks (iq4_xs: sub-blocks of a 256 block) in q4_0's nibble order */
        float dl;
        const uint8_t *qs;
        int j;
        if (T == QTYPE_IQ4_NL) {
            const uint8_t *blk = row + (size_t)(i >> 5) * 18;
            dl = h2f(ld_u16(blk));
            qs = blk + 2;
            j = i & 31;
        } else {
            const uint8_t *blk = row + (size_t)(i >> 8) * 136;
            const int sb = (i >> 5) & 7, sh = ld_u16(blk + 2);
            const int ls = ((blk[4 + sb / 2] >> (4 * (sb % 2))) & 0xF) | ((sh >> (2 * sb)) & 3) << 4;
            dl = h2f(ld_u16(blk)) * (float)(ls - 32);
            qs = blk + 8 + 16 * sb;
            j = i & 31;
        }
        const int hi = j >= 16, l0 = j & 15;
#pragma unroll
        for (int k = 0; k < 8; k++) o[k] = dl * (float)cu_iq4nl_values[hi ? qs[l0 + k] >> 4 : qs[l0 + k] & 0xF];
    }
}

/* Like dq8 but for the last, partial group of a float row (K % 8 != 0 happens only
 * for f32/f16/bf16): values at K and beyond are 0. */
template <int T>
static __device__ __forceinline__ void dq8_tail(const uint8_t *row, int nb, int i, int K, float *o) {
    if (i + 8 <= K) {
        dq8<T>(row, nb, i, o);
        return;
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float v = 0.0f;
        if (i + k < K) {
            if (T == QTYPE_F32) v = ((const float *)row)[i + k];
            else if (T == QTYPE_F16) v = h2f(((const uint16_t *)row)[i + k]);
            else if (T == QTYPE_BF16) v = bf2f(((const uint16_t *)row)[i + k]);
        }
        o[k] = v;
    }
}

/* Runtime dispatch over the supported types. */
#define CU_DQ_DISPATCH(type, CALL)                 \
    switch (type) {                                \
    case QTYPE_F32: CALL(QTYPE_F32); break;        \
    case QTYPE_F16: CALL(QTYPE_F16); break;        \
    case QTYPE_BF16: CALL(QTYPE_BF16); break;      \
    case QTYPE_Q4_0: CALL(QTYPE_Q4_0); break;      \
    case QTYPE_Q4_1: CALL(QTYPE_Q4_1); break;      \
    case QTYPE_Q5_0: CALL(QTYPE_Q5_0); break;      \
    case QTYPE_Q5_1: CALL(QTYPE_Q5_1); break;      \
    case QTYPE_Q8_0: CALL(QTYPE_Q8_0); break;      \
    case QTYPE_Q4_K: CALL(QTYPE_Q4_K); break;      \
    case QTYPE_Q5_K: CALL(QTYPE_Q5_K); break;      \
    case QTYPE_Q6_K: CALL(QTYPE_Q6_K); break;      \
    case QTYPE_Q2_K: CALL(QTYPE_Q2_K); break;      \
    case QTYPE_Q3_K: CALL(QTYPE_Q3_K); break;      \
    case QTYPE_IQ4_NL: CALL(QTYPE_IQ4_NL); break;  \
    case QTYPE_IQ4_XS: CALL(QTYPE_IQ4_XS); break;  \
    default: break;                                \
    }

#endif

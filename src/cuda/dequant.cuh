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

/* o[0..7] = values i..i+7 (i % 8 == 0) of a device row with nb blocks. */
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
    default: break;                                \
    }

#endif

/* qdot.c - scalar 8-bit activation quantization and quantized row dots.
 *
 * These are the plain-C twins of quant_avx2.c / vdot_avx2.c: the same integer
 * maths, block by block, so a test can demand exact equality where the result is
 * exactly representable (power-of-two scales, small integers) and a tight
 * tolerance elsewhere (only the order of float additions differs). */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "util.h"

cpu_act cpu_act_kind(uint32_t wtype) {
    switch (wtype) {
    case QTYPE_Q4_0: case QTYPE_Q4_1: case QTYPE_Q5_0: case QTYPE_Q5_1: case QTYPE_Q8_0: case QTYPE_IQ4_NL:
        return CPU_ACT_Q8A32;
    case QTYPE_Q2_K: case QTYPE_Q3_K: case QTYPE_Q4_K: case QTYPE_Q5_K: case QTYPE_Q6_K: case QTYPE_IQ4_XS:
        return CPU_ACT_Q8A256;
    default:
        return CPU_ACT_F32;
    }
}

size_t cpu_act_row_size(cpu_act kind, int64_t n) {
    switch (kind) {
    case CPU_ACT_Q8A32: return (size_t)(n / 32) * sizeof(block_q8a32);
    case CPU_ACT_Q8A256: return (size_t)(n / 256) * sizeof(block_q8a256);
    default: return (size_t)n * sizeof(float);
    }
}

/* ------------------------------------------------------------------------- */
/* Quantization                                                              */
/* ------------------------------------------------------------------------- */

/* One block of nb values: d = amax/127, qs = round-half-even(x * (127/amax)).
 * nearbyintf rounds half to even in the default rounding mode, like
 * _mm256_cvtps_epi32; the AVX2 code computes the same products. */
static float quantize_block(const float *x, int8_t *qs, int nb) {
    float amax = 0.0f;
    for (int i = 0; i < nb; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (amax == 0.0f) {
        memset(qs, 0, (size_t)nb);
        return 0.0f;
    }
    const float id = 127.0f / amax;
    for (int i = 0; i < nb; i++) qs[i] = (int8_t)nearbyintf(x[i] * id);
    return amax / 127.0f;
}

void cpu_quantize_q8a32(const float *x, block_q8a32 *y, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        y[b].d = quantize_block(x + 32 * b, y[b].qs, 32);
        int sum = 0;
        for (int i = 0; i < 32; i++) sum += y[b].qs[i];
        y[b].s = y[b].d * (float)sum;
    }
}

void cpu_quantize_q8a256(const float *x, block_q8a256 *y, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++) {
        y[b].d = quantize_block(x + 256 * b, y[b].qs, 256);
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += y[b].qs[16 * j + i];
            y[b].bs16[j] = (int16_t)s;
        }
        for (int j = 0; j < 8; j++) y[b].bs32[j] = (int16_t)(y[b].bs16[2 * j] + y[b].bs16[2 * j + 1]);
    }
}

/* ------------------------------------------------------------------------- */
/* Row dots                                                                  */
/* ------------------------------------------------------------------------- */

static float h2f(f16_t h) { return mf_f16_to_f32(h); }

static float vdot_f32(int64_t n, const void *w, const void *a) {
    const float *x = w, *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

static float vdot_f16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += mf_f16_to_f32(x[i]) * y[i];
    return s;
}

static float vdot_bf16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += mf_bf16_to_f32(x[i]) * y[i];
    return s;
}

/* Nibble j (0..31) of a 16-byte q4 array: low nibbles first, then high. */
static inline int q4_at(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }
static inline int q5_hi(const uint8_t qh[4], int j) { return (int)((qh[j / 8] >> (j % 8)) & 1) << 4; }

static float vdot_q4_0(int64_t n, const void *w, const void *a) {
    const block_q4_0 *x = w;
    const block_q8a32 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += q4_at(x[b].qs, j) * y[b].qs[j];
        s += h2f(x[b].d) * (y[b].d * (float)isum - 8.0f * y[b].s);
    }
    return s;
}

static float vdot_q4_1(int64_t n, const void *w, const void *a) {
    const block_q4_1 *x = w;
    const block_q8a32 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += q4_at(x[b].qs, j) * y[b].qs[j];
        s += h2f(x[b].d) * y[b].d * (float)isum + h2f(x[b].m) * y[b].s;
    }
    return s;
}

static float vdot_q5_0(int64_t n, const void *w, const void *a) {
    const block_q5_0 *x = w;
    const block_q8a32 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += (q4_at(x[b].qs, j) | q5_hi(x[b].qh, j)) * y[b].qs[j];
        s += h2f(x[b].d) * (y[b].d * (float)isum - 16.0f * y[b].s);
    }
    return s;
}

static float vdot_q5_1(int64_t n, const void *w, const void *a) {
    const block_q5_1 *x = w;
    const block_q8a32 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += (q4_at(x[b].qs, j) | q5_hi(x[b].qh, j)) * y[b].qs[j];
        s += h2f(x[b].d) * y[b].d * (float)isum + h2f(x[b].m) * y[b].s;
    }
    return s;
}

static float vdot_q8_0(int64_t n, const void *w, const void *a) {
    const block_q8_0 *x = w;
    const block_q8a32 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += x[b].qs[j] * y[b].qs[j];
        s += h2f(x[b].d) * y[b].d * (float)isum;
    }
    return s;
}

/* q4_K / q5_K value j (0..255) of a block: group g = j/64 uses qs[32g..]; the
 * first 32 values are low nibbles (sub-block 2g), the next 32 high nibbles. */
static inline int q4k_at(const uint8_t *qs, int j) {
    const int g = j / 64, l = j % 64;
    return l < 32 ? qs[32 * g + l] & 15 : qs[32 * g + l - 32] >> 4;
}

static float vdot_q4_K(int64_t n, const void *w, const void *a) {
    const block_q4_K *x = w;
    const block_q8a256 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        int isum = 0, imin = 0;
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            quant_get_scale_min_k4(sb, x[b].scales, &sc, &m);
            int d = 0;
            for (int i = 0; i < 32; i++) d += q4k_at(x[b].qs, 32 * sb + i) * y[b].qs[32 * sb + i];
            isum += sc * d;
            imin += m * y[b].bs32[sb];
        }
        s += h2f(x[b].d) * y[b].d * (float)isum - h2f(x[b].dmin) * y[b].d * (float)imin;
    }
    return s;
}

static float vdot_q5_K(int64_t n, const void *w, const void *a) {
    const block_q5_K *x = w;
    const block_q8a256 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        int isum = 0, imin = 0;
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            quant_get_scale_min_k4(sb, x[b].scales, &sc, &m);
            int d = 0;
            for (int i = 0; i < 32; i++) {
                const int l = i;  /* position inside the sub-block = index into qh */
                const int q = q4k_at(x[b].qs, 32 * sb + i) | (((x[b].qh[l] >> sb) & 1) << 4);
                d += q * y[b].qs[32 * sb + i];
            }
            isum += sc * d;
            imin += m * y[b].bs32[sb];
        }
        s += h2f(x[b].d) * y[b].d * (float)isum - h2f(x[b].dmin) * y[b].d * (float)imin;
    }
    return s;
}

/* q6_K value j: half h = j/128 uses ql[64h..], qh[32h..]; quarter k = (j%128)/32,
 * l = j%32: low 4 bits from ql[64h + l + 32*(k&1)] (low nibble for k<2, high
 * for k>=2), high 2 bits from qh[32h + l] >> 2k. Scale index j/16. */
static inline int q6k_at(const block_q6_K *x, int j) {
    const int h = j / 128, k = (j % 128) / 32, l = j % 32;
    const uint8_t qlb = x->ql[64 * h + l + 32 * (k & 1)];
    const int lo = k < 2 ? qlb & 15 : qlb >> 4;
    return lo | (((x->qh[32 * h + l] >> (2 * k)) & 3) << 4);
}

static float vdot_q6_K(int64_t n, const void *w, const void *a) {
    const block_q6_K *x = w;
    const block_q8a256 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int d = 0;
            for (int i = 0; i < 16; i++) d += q6k_at(&x[b], 16 * g + i) * y[b].qs[16 * g + i];
            isum += x[b].scales[g] * (d - 32 * y[b].bs16[g]);
        }
        s += h2f(x[b].d) * y[b].d * (float)isum;
    }
    return s;
}

/* q2_K / q3_K code of value j (0..255): bits 2s..2s+1 of qs[32h + l] for
 * j = 128h + 32s + l (quant.c, above dequant_q2_K). */
static inline int q2k_at(const uint8_t *qs, int j) {
    const int h = j / 128, s = (j % 128) / 32, l = j % 32;
    return (qs[32 * h + l] >> (2 * s)) & 3;
}

/* Per 16-value group g: sc_g * sum(q * a) into isum, m_g * bs16_g into imin. */
static float vdot_q2_K(int64_t n, const void *w, const void *a) {
    const block_q2_K *x = w;
    const block_q8a256 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        int isum = 0, imin = 0;
        for (int g = 0; g < 16; g++) {
            int d = 0;
            for (int i = 0; i < 16; i++) d += q2k_at(x[b].qs, 16 * g + i) * y[b].qs[16 * g + i];
            isum += (x[b].scales[g] & 15) * d;
            imin += (x[b].scales[g] >> 4) * y[b].bs16[g];
        }
        s += h2f(x[b].d) * y[b].d * (float)isum - h2f(x[b].dmin) * y[b].d * (float)imin;
    }
    return s;
}

/* q3_K: code u = low | third << 2 in 0..7 stands for u - 4, so per group
 * (sc_g - 32) * (sum(u * a) - 4 * bs16_g). */
static float vdot_q3_K(int64_t n, const void *w, const void *a) {
    const block_q3_K *x = w;
    const block_q8a256 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int d = 0;
            for (int i = 0; i < 16; i++) {
                const int j = 16 * g + i;
                const int u = q2k_at(x[b].qs, j) | ((x[b].hmask[j % 32] >> (j / 32)) & 1) << 2;
                d += u * y[b].qs[j];
            }
            isum += (quant_q3_K_scale(x[b].scales, g) - 32) * (d - 4 * y[b].bs16[g]);
        }
        s += h2f(x[b].d) * y[b].d * (float)isum;
    }
    return s;
}

static float vdot_iq4_nl(int64_t n, const void *w, const void *a) {
    const block_iq4_nl *x = w;
    const block_q8a32 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        int isum = 0;
        for (int j = 0; j < 32; j++) isum += quant_iq4nl_values[q4_at(x[b].qs, j)] * y[b].qs[j];
        s += h2f(x[b].d) * y[b].d * (float)isum;
    }
    return s;
}

static float vdot_iq4_xs(int64_t n, const void *w, const void *a) {
    const block_iq4_xs *x = w;
    const block_q8a256 *y = a;
    float s = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        int isum = 0;
        for (int sb = 0; sb < 8; sb++) {
            int d = 0;
            for (int j = 0; j < 32; j++) d += quant_iq4nl_values[q4_at(x[b].qs + 16 * sb, j)] * y[b].qs[32 * sb + j];
            isum += (quant_iq4_xs_scale(&x[b], sb) - 32) * d;
        }
        s += h2f(x[b].d) * y[b].d * (float)isum;
    }
    return s;
}

cpu_vdot_fn cpu_vdot_scalar(uint32_t wtype) {
    switch (wtype) {
    case QTYPE_F32: return vdot_f32;
    case QTYPE_F16: return vdot_f16;
    case QTYPE_BF16: return vdot_bf16;
    case QTYPE_Q4_0: return vdot_q4_0;
    case QTYPE_Q4_1: return vdot_q4_1;
    case QTYPE_Q5_0: return vdot_q5_0;
    case QTYPE_Q5_1: return vdot_q5_1;
    case QTYPE_Q8_0: return vdot_q8_0;
    case QTYPE_Q4_K: return vdot_q4_K;
    case QTYPE_Q5_K: return vdot_q5_K;
    case QTYPE_Q6_K: return vdot_q6_K;
    case QTYPE_Q2_K: return vdot_q2_K;
    case QTYPE_Q3_K: return vdot_q3_K;
    case QTYPE_IQ4_NL: return vdot_iq4_nl;
    case QTYPE_IQ4_XS: return vdot_iq4_xs;
    default: return NULL;
    }
}

/* vdot_avx2.c - AVX2 row dot products: one GGUF weight row . one activation row.
 *
 * Lanes hold positions inside a block; the integer part of each block is exact
 * (vpmaddubsw of unsigned weights x signed activations, then vpmaddwd), the block
 * scale is applied in f32. These run where no packed kernel applies: f32/f16/bf16
 * weights, MINFER_CPU_DISABLE=repack, and as an independent check of the packed path.
 *
 * Saturation: vpmaddubsw adds two u8*s8 products into an s16. Weights are at most
 * 63 here (q8_0 and the iq4 grid values go through the sign trick, |w| <= 127) and
 * |activation| <= 127, so a pair is at most 2*127*127 = 32258 < 32767. */
#include "kernels.h"
#include "simd_avx2.h"
#include "util.h"

/* ---- float weights ---- */

static float vdot_f32(int64_t n, const void *w, const void *a) {
    const float *x = w, *y = a;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

static float vdot_f16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(load_f16x8(x + i), _mm256_loadu_ps(y + i), s0);
        s1 = _mm256_fmadd_ps(load_f16x8(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_f16x8(x + i), _mm256_loadu_ps(y + i), s0);
    float s = hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += mf_f16_to_f32(x[i]) * y[i];
    return s;
}

static float vdot_bf16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(load_bf16x8(x + i), _mm256_loadu_ps(y + i), s0);
        s1 = _mm256_fmadd_ps(load_bf16x8(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_bf16x8(x + i), _mm256_loadu_ps(y + i), s0);
    float s = hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += mf_bf16_to_f32(x[i]) * y[i];
    return s;
}

/* ---- 32-value formats x block_q8a32 ---- */

static inline __m256 dot32_i(__m256i q, const int8_t *a) {
    const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)a));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

static inline __m256i q5_bits(const uint8_t qh[4]) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
    return _mm256_and_si256(bits_to_bytes(bits), _mm256_set1_epi8(16));
}

static float vdot_q4_0(int64_t n, const void *w, const void *a) {
    const block_q4_0 *x = w;
    const block_q8a32 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float off = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        const float dw = mf_f16_to_f32(x[b].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * y[b].d), dot32_i(unpack_nibbles_16(x[b].qs), y[b].qs), acc);
        off += dw * y[b].s;
    }
    return hsum_ps(acc) - 8.0f * off;
}

static float vdot_q4_1(int64_t n, const void *w, const void *a) {
    const block_q4_1 *x = w;
    const block_q8a32 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float off = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        acc = _mm256_fmadd_ps(_mm256_set1_ps(mf_f16_to_f32(x[b].d) * y[b].d),
                              dot32_i(unpack_nibbles_16(x[b].qs), y[b].qs), acc);
        off += mf_f16_to_f32(x[b].m) * y[b].s;
    }
    return hsum_ps(acc) + off;
}

static float vdot_q5_0(int64_t n, const void *w, const void *a) {
    const block_q5_0 *x = w;
    const block_q8a32 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float off = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        const float dw = mf_f16_to_f32(x[b].d);
        const __m256i q = _mm256_or_si256(unpack_nibbles_16(x[b].qs), q5_bits(x[b].qh));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * y[b].d), dot32_i(q, y[b].qs), acc);
        off += dw * y[b].s;
    }
    return hsum_ps(acc) - 16.0f * off;
}

static float vdot_q5_1(int64_t n, const void *w, const void *a) {
    const block_q5_1 *x = w;
    const block_q8a32 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float off = 0.0f;
    for (int64_t b = 0; b < n / 32; b++) {
        const __m256i q = _mm256_or_si256(unpack_nibbles_16(x[b].qs), q5_bits(x[b].qh));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(mf_f16_to_f32(x[b].d) * y[b].d), dot32_i(q, y[b].qs), acc);
        off += mf_f16_to_f32(x[b].m) * y[b].s;
    }
    return hsum_ps(acc) + off;
}

static float vdot_q8_0(int64_t n, const void *w, const void *a) {
    const block_q8_0 *x = w;
    const block_q8a32 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const __m256i v = _mm256_loadu_si256((const __m256i *)y[b].qs);
        /* Sign trick: |q| (unsigned) times v with q's sign moved onto it. */
        const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(v, q));
        const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(mf_f16_to_f32(x[b].d) * y[b].d), f, acc);
    }
    return hsum_ps(acc);
}

/* ---- K-quants x block_q8a256 ---- */

static inline void k4_scales(const uint8_t *s, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 8; j++) quant_get_scale_min_k4(j, s, &sc[j], &m[j]);
}

static inline int k4_mins(const uint8_t m[8], const int16_t bs32[8]) {
    const __m128i mv = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)m));
    __m128i p = _mm_madd_epi16(mv, _mm_loadu_si128((const __m128i *)bs32));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, _MM_SHUFFLE(1, 0, 3, 2)));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(p);
}

static float vdot_q4_K(int64_t n, const void *w, const void *a) {
    const block_q4_K *x = w;
    const block_q8a256 *y = a;
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t sc[8], m[8];
        k4_scales(x[b].scales, sc, m);
        __m256i isum = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * g));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * g)));
            const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * g + 32)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * g])));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * g + 1])));
        }
        const float dd = mf_f16_to_f32(x[b].d) * y[b].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
        accm += mf_f16_to_f32(x[b].dmin) * y[b].d * (float)k4_mins(m, y[b].bs32);
    }
    return hsum_ps(acc) - accm;
}

static float vdot_q5_K(int64_t n, const void *w, const void *a) {
    const block_q5_K *x = w;
    const block_q8a256 *y = a;
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        uint8_t sc[8], m[8];
        k4_scales(x[b].scales, sc, m);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x[b].qh);
        __m256i isum = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * g));
            /* Bit 2g (low half) and 2g+1 (high half) of each qh byte -> 16. */
            const __m256i bl = _mm256_cmpeq_epi8(_mm256_and_si256(qh, _mm256_set1_epi8((char)(1 << (2 * g)))),
                                                 _mm256_set1_epi8((char)(1 << (2 * g))));
            const __m256i bh = _mm256_cmpeq_epi8(_mm256_and_si256(qh, _mm256_set1_epi8((char)(2 << (2 * g)))),
                                                 _mm256_set1_epi8((char)(2 << (2 * g))));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(bl, b4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_and_si256(bh, b4));
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * g)));
            const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * g + 32)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, _mm256_set1_epi16(sc[2 * g])));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, _mm256_set1_epi16(sc[2 * g + 1])));
        }
        const float dd = mf_f16_to_f32(x[b].d) * y[b].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(isum), acc);
        accm += mf_f16_to_f32(x[b].dmin) * y[b].d * (float)k4_mins(m, y[b].bs32);
    }
    return hsum_ps(acc) - accm;
}

static float vdot_q6_K(int64_t n, const void *w, const void *a) {
    const block_q6_K *x = w;
    const block_q8a256 *y = a;
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3 << 4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        const int8_t *s = x[b].scales;
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x[b].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x[b].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[b].qh + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
            for (int k = 0; k < 4; k++) {
                const int g = 8 * h + 2 * k;   /* scale of the first 16 values */
                const __m256i p =
                    _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(y[b].qs + 128 * h + 32 * k)));
                const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(s[g + 1]), _mm_set1_epi16(s[g]));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, sv));
            }
        }
        /* The -32 offset: sum_g s[g] * 32 * bs16[g]. */
        const __m256i sv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)s));
        const __m256i off = _mm256_madd_epi16(sv, _mm256_loadu_si256((const __m256i *)y[b].bs16));
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(mf_f16_to_f32(x[b].d) * y[b].d), _mm256_cvtepi32_ps(isum), acc);
    }
    return hsum_ps(acc);
}

/* ---- q2_K / q3_K / iq4_xs x block_q8a256, iq4_nl x block_q8a32 ---- */

/* Signed weights w (|w| <= 127) times activations: |w| (unsigned) times the
 * activation carrying w's sign, the s16 pairs summed to s32 by vpmaddwd with s. */
static inline __m256i sdot_s16(__m256i w, __m256i v) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(v, w));
}

/* The per-16 scale pair (lanes 0..7: group g, 8..15: group g + 1) for vpmaddwd. */
static inline __m256i scale_pair(int s0, int s1) { return _mm256_set_m128i(_mm_set1_epi16((short)s1), _mm_set1_epi16((short)s0)); }

static float vdot_q2_K(int64_t n, const void *w, const void *a) {
    const block_q2_K *x = w;
    const block_q8a256 *y = a;
    const __m256i m2 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *sc = x[b].scales;
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * h));
            for (int s = 0; s < 4; s++) {
                /* bits 2s..2s+1: values 128h + 32s + 0..31, groups g and g + 1 */
                const int g = 8 * h + 2 * s;
                const __m256i c = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m2);
                const __m256i p = _mm256_maddubs_epi16(c, _mm256_loadu_si256((const __m256i *)(y[b].qs + 16 * g)));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scale_pair(sc[g] & 15, sc[g + 1] & 15)));
            }
        }
        const __m128i s8 = _mm_loadu_si128((const __m128i *)sc);
        const __m256i mv = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
        const int imin = hsum_epi32(_mm256_madd_epi16(mv, _mm256_loadu_si256((const __m256i *)y[b].bs16)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(mf_f16_to_f32(x[b].d) * y[b].d), _mm256_cvtepi32_ps(isum), acc);
        accm += mf_f16_to_f32(x[b].dmin) * y[b].d * (float)imin;
    }
    return hsum_ps(acc) - accm;
}

static float vdot_q3_K(int64_t n, const void *w, const void *a) {
    const block_q3_K *x = w;
    const block_q8a256 *y = a;
    const __m256i m2 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        int8_t sc[16];
        for (int g = 0; g < 16; g++) sc[g] = (int8_t)(quant_q3_K_scale(x[b].scales, g) - 32);
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x[b].hmask);
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * h));
            for (int s = 0; s < 4; s++) {
                const int g = 8 * h + 2 * s;
                /* the third bit of value 32k + l is bit k of hmask[l], k = 4h + s */
                const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + s)));
                const __m256i hb = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), b2);
                const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m2), hb);
                const __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(y[b].qs + 16 * g)));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, scale_pair(sc[g], sc[g + 1])));
            }
        }
        /* codes u stand for u - 4: subtract 4 * sum_g sc_g * bs16_g */
        const __m256i sv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        const __m256i off = _mm256_madd_epi16(sv, _mm256_loadu_si256((const __m256i *)y[b].bs16));
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 2));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(mf_f16_to_f32(x[b].d) * y[b].d), _mm256_cvtepi32_ps(isum), acc);
    }
    return hsum_ps(acc);
}

static float vdot_iq4_nl(int64_t n, const void *w, const void *a) {
    const block_iq4_nl *x = w;
    const block_q8a32 *y = a;
    const __m256i lut = iq4nl_lut();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        const __m256i q = _mm256_shuffle_epi8(lut, unpack_nibbles_16(x[b].qs));
        const __m256i p = sdot_s16(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(mf_f16_to_f32(x[b].d) * y[b].d), f, acc);
    }
    return hsum_ps(acc);
}

static float vdot_iq4_xs(int64_t n, const void *w, const void *a) {
    const block_iq4_xs *x = w;
    const block_q8a256 *y = a;
    const __m256i lut = iq4nl_lut();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 256; b++) {
        __m256i isum = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i q = _mm256_shuffle_epi8(lut, unpack_nibbles_16(x[b].qs + 16 * j));
            const __m256i p = sdot_s16(q, _mm256_loadu_si256((const __m256i *)(y[b].qs + 32 * j)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_set1_epi16((short)(quant_iq4_xs_scale(&x[b], j) - 32))));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(mf_f16_to_f32(x[b].d) * y[b].d), _mm256_cvtepi32_ps(isum), acc);
    }
    return hsum_ps(acc);
}

cpu_vdot_fn cpu_vdot_avx2(uint32_t wtype) {
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

/* ---- float tile: nr rows x nt tokens (both <= 4), lanes = positions ---- */

static inline __m256 load_w8(uint32_t type, const uint8_t *w, int64_t i) {
    switch (type) {
    case QTYPE_F16: return load_f16x8((const uint16_t *)w + i);
    case QTYPE_BF16: return load_bf16x8((const uint16_t *)w + i);
    default: return _mm256_loadu_ps((const float *)w + i);
    }
}

static inline float load_w1(uint32_t type, const uint8_t *w, int64_t i) {
    switch (type) {
    case QTYPE_F16: return mf_f16_to_f32(((const uint16_t *)w)[i]);
    case QTYPE_BF16: return mf_bf16_to_f32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

/* 2 rows x 4 tokens (8 accumulators) per pass keeps everything in registers. */
static inline void tile_2x4(uint32_t type, int64_t n, const uint8_t *w0, const uint8_t *w1, int nr, const float *x,
                            int64_t ldx, int nt, float *out, int64_t ld_out) {
    __m256 acc[2][4];
    for (int r = 0; r < 2; r++)
        for (int t = 0; t < 4; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 a0 = load_w8(type, w0, i);
        const __m256 a1 = nr > 1 ? load_w8(type, w1, i) : a0;
        for (int t = 0; t < 4; t++) {
            if (t >= nt) break;
            const __m256 xv = _mm256_loadu_ps(x + t * ldx + i);
            acc[0][t] = _mm256_fmadd_ps(a0, xv, acc[0][t]);
            acc[1][t] = _mm256_fmadd_ps(a1, xv, acc[1][t]);
        }
    }
    for (int t = 0; t < nt; t++) {
        for (int r = 0; r < nr; r++) {
            float s = hsum_ps(acc[r][t]);
            for (int64_t j = i; j < n; j++) s += load_w1(type, r ? w1 : w0, j) * x[t * ldx + j];
            out[t * ld_out + r] = s;
        }
    }
}

void cpu_tile_float_avx2(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int nr, const float *x,
                         int64_t ldx, int nt, float *out, int64_t ld_out) {
    const uint8_t *wb = w;
    for (int r = 0; r < nr; r += 2) {
        const int nr2 = nr - r < 2 ? nr - r : 2;
        tile_2x4(wtype, n, wb + (size_t)r * w_stride, wb + (size_t)(r + nr2 - 1) * w_stride, nr2, x, ldx, nt,
                 out + r, ld_out);
    }
}

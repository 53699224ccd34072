/* simd_avx2.h - small AVX2 helpers shared by the *_avx2.c kernel files.
 * Include only from files compiled with -mavx2 -mfma -mf16c. */
#ifndef MINFER_CPU_SIMD_AVX2_H
#define MINFER_CPU_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 4 bytes at p broadcast to all 8 lanes (a load-port broadcast, no shuffle uop). */
static inline __m256i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

static inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load_bf16x8(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles in bytes 0..15, high in 16..31. */
static inline __m256i unpack_nibbles_16(const uint8_t *p) {
    const __m128i x = _mm_loadu_si128((const __m128i *)p);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    return _mm256_and_si256(v, _mm256_set1_epi8(15));
}

/* quant_iq4nl_values in both 128-bit lanes: vpshufb of nibbles gives the grid values. */
static inline __m256i iq4nl_lut(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
}

/* The end of one x8 q2_K (q3 = 0) or q3_K (q3 = 1) block for one token, shared by the
 * AVX2 and AVX-512 kernels (gemm_q23_K): isum holds each row's integer sum of scale *
 * sum(code * activation); the scale pairs at g + 32 (q2_K: scale | min << 4) or g + 16
 * (q3_K: code - 32), groups (2p, 2p+1) per row, meet the token's 16-value sums bs16 as
 * q2_K's mins (subtracted with dmin) or q3_K's -4 offset. d (and dmin) are the f16
 * vectors at g (and g + 16); da is the token's activation scale. Returns acc + the block. */
static inline __attribute__((always_inline)) __m256 q23_block_end(int q3, const uint8_t *g, __m256i isum,
                                                                   const int16_t bs16[16], float da_, __m256 acc) {
    const uint8_t *sp = g + (q3 ? 16 : 32);
    __m256i off = _mm256_setzero_si256();
    for (int p = 0; p < 8; p++) {
        const __m128i s8 = _mm_loadu_si128((const __m128i *)(sp + 16 * p));
        const __m256i v = q3 ? _mm256_cvtepi8_epi16(s8) : _mm256_srli_epi16(_mm256_cvtepu8_epi16(s8), 4);
        off = _mm256_add_epi32(off, _mm256_madd_epi16(v, bcast32(&bs16[2 * p])));
    }
    const __m256 da = _mm256_set1_ps(da_), dv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
    if (q3) return _mm256_fmadd_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(_mm256_sub_epi32(isum, _mm256_slli_epi32(off, 2))), acc);
    const __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16)));
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(isum), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(mv, da), _mm256_cvtepi32_ps(off), acc);
}

/* 32 bits -> 32 bytes: byte j = 0xFF when bit j is set, else 0. */
static inline __m256i bits_to_bytes(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* exp(x), x clamped to [-87.3, 88] (so 2^n stays a normal float): Cody-Waite range reduction and a degree-6
 * polynomial, relative error about 2e-7; large negative x flushes to 0. */
static inline __m256 exp_ps(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.0f), lo = _mm256_set1_ps(-87.3365478515625f);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n: n in [-126, 127] after the clamp, so the exponent field is valid. */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#endif

/* quant_avx2.c - AVX2 quantization of f32 activations to 8-bit blocks.
 * Bit-identical to cpu_quantize_* in qdot.c: the same amax, the same products
 * x * (127/amax), and round-half-even (vcvtps2dq under the default MXCSR). */
#include "kernels.h"
#include "simd_avx2.h"

/* 32 values -> 32 int8 at qs; returns d, writes the sum of the 8 quarter sums. */
static inline void quant32(const float *x, float id, int8_t *qs, __m256i *sum) {
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 0), _mm256_set1_ps(id)));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), _mm256_set1_ps(id)));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), _mm256_set1_ps(id)));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), _mm256_set1_ps(id)));
    *sum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
    /* packs work per 128-bit lane: the result holds 4-byte groups in the order
     * 0 2 4 6 1 3 5 7; a cross-lane dword permute restores 0..7. */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, p);
}

static inline float amax_n(const float *x, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    return hmax_ps(m);
}

void cpu_quantize_q8a32_avx2(const float *x, block_q8a32 *y, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        const float amax = amax_n(x, 32);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        __m256i s;
        quant32(x, 127.0f / amax, y[b].qs, &s);
        y[b].d = amax / 127.0f;
        y[b].s = y[b].d * (float)hsum_epi32(s);
    }
}

void cpu_quantize_q8a256_avx2(const float *x, block_q8a256 *y, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        const float amax = amax_n(x, 256);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const float id = 127.0f / amax;
        y[b].d = amax / 127.0f;
        for (int j = 0; j < 8; j++) {
            __m256i s;
            quant32(x + 32 * j, id, y[b].qs + 32 * j, &s);
            /* s holds sums of value positions {i, i+8, i+16, i+24}; the 16-value
             * halves need the split sums, recomputed from the stored bytes. */
            const __m256i q = _mm256_loadu_si256((const __m256i *)(y[b].qs + 32 * j));
            const __m256i w = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
            /* w: 8 sums of 4 bytes; lanes 0..3 = first 16 values, 4..7 = second. */
            __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
            lo = _mm_hadd_epi32(lo, hi);           /* l0+l1 l2+l3 h0+h1 h2+h3 */
            lo = _mm_hadd_epi32(lo, lo);           /* L H L H */
            const int s0 = _mm_cvtsi128_si32(lo), s1 = _mm_extract_epi32(lo, 1);
            y[b].bs16[2 * j] = (int16_t)s0;
            y[b].bs16[2 * j + 1] = (int16_t)s1;
            y[b].bs32[j] = (int16_t)(s0 + s1);
        }
    }
}

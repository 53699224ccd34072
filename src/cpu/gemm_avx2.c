/* gemm_avx2.c - AVX2 micro-kernels over packed weights: 8 rows x NT tokens.
 *
 * One 32-byte load of a packed unit holds 4 bytes of each of 8 rows. After the
 * nibble unpack (shared by the NT tokens), each token multiplies it with a 4-byte
 * broadcast of its activations: vpmaddubsw gives 16 s16 (2 per row), and because
 * every lane belongs to one row, the accumulators need no horizontal sums.
 *
 * Integer budget (|activation| <= 127, see kernels.h), s16 lanes before widening:
 *   4-bit weights: a vpmaddubsw pair <= 2*15*127 = 3810, 8 units summed = 30480;
 *   5-bit: 2*31*127 = 7874, 4 units summed = 31496;
 *   6-bit: 2*63*127 = 16002, 2 units summed = 32004;
 *   8-bit (sign trick): 2*127*127 = 32258, widened after every unit.
 * Widening (vpmaddwd) multiplies by the sub-block scale where the format has an
 * integer one (K-quants), else by 1; block scales are applied in f32. (The
 * expanded prefill kernel widens 4-bit sums every 4 units, not 8: faster, see
 * below.)
 *
 * NT is a compile-time constant in each instance (1..4) so the per-token loops
 * unroll and the accumulators stay in registers; `#pragma GCC unroll` is needed
 * for that at -O2 (without it the NT = 3, 4 instances kept their accumulators on
 * the stack and ran at half speed). */
#include "kernels.h"
#include "simd_avx2.h"

#define INLINE static inline __attribute__((always_inline))

INLINE const uint8_t *arow(const void *act, size_t stride, int t) { return (const uint8_t *)act + (size_t)t * stride; }

/* 8 u8 sub-block scales of 8 rows -> 16 s16: (s_r, s_r) pairs for vpmaddwd. */
INLINE __m256i dup_scales_u8(const uint8_t *p) {
    const __m128i v = _mm_loadl_epi64((const __m128i *)p);
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v));
}

INLINE __m256 load_f16x8_u8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* Software prefetch of the x8 block PF_DIST bytes ahead, into L2 (T1). Decode
 * streams the packed weights once per token; bench/cpu_gemm.c gemv-cold, 2
 * threads, 5632 x 2048 (GB/s, q4_K / q6_K): no prefetch about 12.5 / 12.3;
 * 4096 ahead into L1 (T0) 14.7 / 14.4; 4096 ahead into L2 (T1) 15.4 / 18.4;
 * 8192 (T1) 16.0 / 17.5 (noisy machine: +-1). Probably the L1 hint holds
 * fill buffers that the demand loads need; the L2 hint does not. */
#ifndef PF_DIST
#define PF_DIST 4096
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T1
#endif
INLINE void prefetch_block(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PF_DIST + o, PF_HINT);
#ifdef PF_DIST0
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PF_DIST0 + o, _MM_HINT_T0);
#endif
}

/* ------------------------------------------------------------------------- */
/* 32-value formats                                                          */
/* ------------------------------------------------------------------------- */

/* Kinds: 0 = q4_0, 1 = q4_1, 2 = q5_0, 3 = q5_1. Layouts in kernels.h. */
INLINE void gemm_q4q5(const int kind, const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as,
                      float out[][8]) {
    const int has_m = kind == 1 || kind == 3, has_h = kind >= 2;
    const size_t xb = kind == 0 ? 144 : kind == 1 ? 160 : kind == 2 ? 176 : 192;
    const size_t off_qh = has_m ? 32 : 16, off_qs = off_qh + (has_h ? 32 : 0);
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16), ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b++, g += xb) {
        prefetch_block(g, xb);
        const __m256 dv = load_f16x8_u8(g);
        __m256i qh = _mm256_setzero_si256();
        if (has_h) qh = _mm256_loadu_si256((const __m256i *)(g + off_qh));
        __m256i p[4], isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) p[t] = isum[t] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int k = 0; k < 4; k++) {
            const __m256i P = _mm256_loadu_si256((const __m256i *)(g + off_qs + 32 * k));
            __m256i lo = _mm256_and_si256(P, m4), hi = _mm256_and_si256(_mm256_srli_epi16(P, 4), m4);
            if (has_h) {
                /* qh bit 2k -> bit 4 (lo), bit 2k+1 -> bit 4 (hi); see pack.c. */
                const __m256i hl = k == 0 ? _mm256_slli_epi16(qh, 4) : k == 1 ? _mm256_slli_epi16(qh, 2)
                                 : k == 2 ? qh : _mm256_srli_epi16(qh, 2);
                const __m256i hh = k == 0 ? _mm256_slli_epi16(qh, 3) : k == 1 ? _mm256_slli_epi16(qh, 1)
                                 : k == 2 ? _mm256_srli_epi16(qh, 1) : _mm256_srli_epi16(qh, 3);
                lo = _mm256_or_si256(lo, _mm256_and_si256(hl, b4));
                hi = _mm256_or_si256(hi, _mm256_and_si256(hh, b4));
            }
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
                p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(lo, bcast32(a->qs + 4 * k)));
                p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(hi, bcast32(a->qs + 16 + 4 * k)));
            }
            if (has_h && k == 1) {   /* 5-bit: widen after 4 units */
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    isum[t] = _mm256_madd_epi16(p[t], ones);
                    p[t] = _mm256_setzero_si256();
                }
            }
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], ones));
            const __m256 f = _mm256_cvtepi32_ps(isum[t]);
            if (has_m) {
                const __m256 mv = load_f16x8_u8(g + 16);
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(a->d)), f, acc[t]);
                acc[t] = _mm256_fmadd_ps(mv, _mm256_set1_ps(a->s), acc[t]);
            } else {
                const float off = kind == 0 ? 8.0f : 16.0f;
                const __m256 x = _mm256_fmsub_ps(f, _mm256_set1_ps(a->d), _mm256_set1_ps(off * a->s));
                acc[t] = _mm256_fmadd_ps(dv, x, acc[t]);
            }
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

INLINE void gemm_q8_0_nt(const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as, float out[][8]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b++, g += 272) {
        prefetch_block(g, 272);
        const __m256 dv = load_f16x8_u8(g);
        __m256i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m256i W = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * k));
            const __m256i aw = _mm256_sign_epi8(W, W);
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
                const __m256i v = _mm256_sign_epi8(bcast32(a->qs + 4 * k), W);
                isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, v), ones));
            }
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* ------------------------------------------------------------------------- */
/* K-quants                                                                  */
/* ------------------------------------------------------------------------- */

/* q4_K (q5 = 0) and q5_K (q5 = 1). Per group g of 64 values: the low-nibble pass
 * (sub-block 2g) then the high-nibble pass (2g+1) over the same 8 packed units,
 * so one s16 accumulator per token suffices. */
INLINE void gemm_q45_K(const int q5, const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as,
                       float out[][8]) {
    const size_t xb = q5 ? 1440 : 1184;
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 256;
    for (int64_t b = 0; b < nb; b++, g += xb) {
        prefetch_block(g, xb);
        __m256i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        for (int gi = 0; gi < 4; gi++) {
            #pragma GCC unroll 8
            for (int h = 0; h < 2; h++) {
                const __m256i sc = dup_scales_u8(g + 32 + 8 * (2 * gi + h));
                __m256i p[4];
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) p[t] = _mm256_setzero_si256();
                __m256i qh = _mm256_setzero_si256();
                if (q5) qh = _mm256_loadu_si256((const __m256i *)(g + 1184 + 64 * gi + 32 * h));
                #pragma GCC unroll 8
                for (int k = 0; k < 8; k++) {
                    const __m256i P = _mm256_loadu_si256((const __m256i *)(g + 160 + 256 * gi + 32 * k));
                    __m256i W = h ? _mm256_and_si256(_mm256_srli_epi16(P, 4), m4) : _mm256_and_si256(P, m4);
                    if (q5) {
                        /* bit k of qh -> bit 4 */
                        const __m256i hb = k <= 4 ? _mm256_slli_epi16(qh, 4 - k) : _mm256_srli_epi16(qh, k - 4);
                        W = _mm256_or_si256(W, _mm256_and_si256(hb, b4));
                    }
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; t++) {
                        const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
                        p[t] = _mm256_add_epi16(p[t], _mm256_maddubs_epi16(W, bcast32(a->qs + 64 * gi + 32 * h + 4 * k)));
                    }
                    if (q5 && (k == 3 || k == 7)) {   /* 5-bit: widen every 4 units */
                        #pragma GCC unroll 8
                        for (int t = 0; t < NT; t++) {
                            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], sc));
                            p[t] = _mm256_setzero_si256();
                        }
                    }
                }
                if (!q5)
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; t++) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], sc));
            }
        }
        const __m256 dv = load_f16x8_u8(g), mv = load_f16x8_u8(g + 16);
        __m256i mp[4];
        #pragma GCC unroll 8
        for (int j = 0; j < 4; j++) mp[j] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(g + 96 + 16 * j)));
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
            __m256i imin = _mm256_madd_epi16(mp[0], bcast32(&a->bs32[0]));
            imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mp[1], bcast32(&a->bs32[2])));
            imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mp[2], bcast32(&a->bs32[4])));
            imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mp[3], bcast32(&a->bs32[6])));
            const __m256 da = _mm256_set1_ps(a->d);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(isum[t]), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(mv, da), _mm256_cvtepi32_ps(imin), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

INLINE void gemm_q6_K_nt(const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as, float out[][8]) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(0x30);
    const __m256i dup_even = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
                                              0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i dup_odd = _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,
                                             2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 256;
    for (int64_t b = 0; b < nb; b++, g += 1680) {
        prefetch_block(g, 1680);
        __m256i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        for (int s2 = 0; s2 < 4; s2++) {
            /* Scale pairs (s[2s], s[2s+1]) per row for sub-blocks A = 2*s2, B = 2*s2+1. */
            const __m256i pa = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g + 16 + 16 * (2 * s2))));
            const __m256i pb = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g + 16 + 16 * (2 * s2 + 1))));
            for (int kk = 0; kk < 4; kk++) {
                const __m256i QH = _mm256_loadu_si256((const __m256i *)(g + 1168 + 128 * s2 + 32 * kk));
                __m256i pA[4], pB[4];
                #pragma GCC unroll 8
                for (int kl = 0; kl < 2; kl++) {
                    const int k = 2 * kk + kl;
                    const __m256i QL = _mm256_loadu_si256((const __m256i *)(g + 144 + 256 * s2 + 32 * k));
                    /* fields f = 2*kl (A) and 2*kl+1 (B) -> bits 4..5 */
                    const __m256i hA = kl == 0 ? _mm256_slli_epi16(QH, 4) : QH;
                    const __m256i hB = kl == 0 ? _mm256_slli_epi16(QH, 2) : _mm256_srli_epi16(QH, 2);
                    const __m256i wA = _mm256_or_si256(_mm256_and_si256(QL, m4), _mm256_and_si256(hA, m2));
                    const __m256i wB = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(QL, 4), m4),
                                                       _mm256_and_si256(hB, m2));
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; t++) {
                        const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
                        const __m256i xA = _mm256_maddubs_epi16(wA, bcast32(a->qs + 64 * s2 + 4 * k));
                        const __m256i xB = _mm256_maddubs_epi16(wB, bcast32(a->qs + 64 * s2 + 32 + 4 * k));
                        pA[t] = kl ? _mm256_add_epi16(pA[t], xA) : xA;
                        pB[t] = kl ? _mm256_add_epi16(pB[t], xB) : xB;
                    }
                }
                /* units 2kk, 2kk+1 cover positions 8kk..8kk+7: scale half kk/2 */
                const __m256i sA = _mm256_shuffle_epi8(pa, kk < 2 ? dup_even : dup_odd);
                const __m256i sB = _mm256_shuffle_epi8(pb, kk < 2 ? dup_even : dup_odd);
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(pA[t], sA));
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(pB[t], sB));
                }
            }
        }
        /* The -32 offset: 32 * sum_j s_j * bs16_j, pairs (2p, 2p+1). */
        __m256i sp[8];
        #pragma GCC unroll 8
        for (int p = 0; p < 8; p++) sp[p] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g + 16 + 16 * p)));
        const __m256 dv = load_f16x8_u8(g);
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
            __m256i off = _mm256_madd_epi16(sp[0], bcast32(&a->bs16[0]));
            #pragma GCC unroll 8
            for (int p = 1; p < 8; p++) off = _mm256_add_epi32(off, _mm256_madd_epi16(sp[p], bcast32(&a->bs16[2 * p])));
            const __m256i is = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(is), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* ------------------------------------------------------------------------- */
/* IQ4 (non-linear grid) and the 2/3-bit K-quants                            */
/* ------------------------------------------------------------------------- */

/* Signed grid values w times one token's activations, the s16 pairs widened by
 * vpmaddwd with s (ones, or the sub-block scale): |w| times the activations
 * with w's sign (a pair <= 2*127*127, so each vpmaddubsw is widened at once). */
INLINE __m256i sdot_w(__m256i aw, __m256i w, __m256i x, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w)), s);
}

/* iq4_nl: q4_0's units, each nibble looked up in the grid (vpshufb). */
INLINE void gemm_iq4_nl_nt(const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as, float out[][8]) {
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1), lut = iq4nl_lut();
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b++, g += 144) {
        prefetch_block(g, 144);
        const __m256 dv = load_f16x8_u8(g);
        __m256i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        #pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i P = _mm256_loadu_si256((const __m256i *)(g + 16 + 32 * k));
            const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(P, m4));
            const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(P, 4), m4));
            const __m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
                isum[t] = _mm256_add_epi32(isum[t], sdot_w(alo, lo, bcast32(a->qs + 4 * k), ones));
                isum[t] = _mm256_add_epi32(isum[t], sdot_w(ahi, hi, bcast32(a->qs + 16 + 4 * k), ones));
            }
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* iq4_xs: per sub-block j, iq4_nl's 4 units under the rows' signed scales (s8
 * at g+16+8j), which vpmaddwd applies while widening. */
INLINE void gemm_iq4_xs_nt(const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as, float out[][8]) {
    const __m256i m4 = _mm256_set1_epi8(15), lut = iq4nl_lut();
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 256;
    for (int64_t b = 0; b < nb; b++, g += 1104) {
        prefetch_block(g, 1104);
        __m256i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m128i s8 = _mm_loadl_epi64((const __m128i *)(g + 16 + 8 * j));
            const __m256i sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8));
            #pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i P = _mm256_loadu_si256((const __m256i *)(g + 80 + 128 * j + 32 * k));
                const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(P, m4));
                const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(P, 4), m4));
                const __m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
                    isum[t] = _mm256_add_epi32(isum[t], sdot_w(alo, lo, bcast32(a->qs + 32 * j + 4 * k), sc));
                    isum[t] = _mm256_add_epi32(isum[t], sdot_w(ahi, hi, bcast32(a->qs + 32 * j + 16 + 4 * k), sc));
                }
            }
        }
        const __m256 dv = load_f16x8_u8(g);
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* q2_K (q3 = 0) and q3_K (q3 = 1). Unit u (one per 16-value group) holds the
 * group's 2-bit codes, value 4k + b in bits 2k..2k+1 of byte b; four shifts give
 * four planes of 4 consecutive values each, summed in s16 (<= 4*2*7*127 = 7112)
 * and widened by vpmaddwd with the group's scale. q3_K's third bit of value
 * 4k + b of group 2p + e is bit k + 4e of byte b of qh unit p; its codes u stand
 * for u - 4 (the offset through bs16, as q6_K's -32). Scales come in pairs
 * (groups 2p, 2p+1) per row: q2_K u8 scale | min << 4, q3_K s8 (code - 32). */
INLINE void gemm_q23_K(const int q3, const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as,
                       float out[][8]) {
    const size_t xb = q3 ? 912 : 672, off_sc = q3 ? 16 : 32, off_qs = q3 ? 144 : 160;
    const __m256i m2 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4), m4w = _mm256_set1_epi16(15);
    const __m256i dup_even = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
                                              0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i dup_odd = _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,
                                             2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 256;
    for (int64_t b = 0; b < nb; b++, g += xb) {
        prefetch_block(g, xb);
        __m256i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        for (int p = 0; p < 8; p++) {
            const __m128i s8 = _mm_loadu_si128((const __m128i *)(g + off_sc + 16 * p));
            const __m256i pv = q3 ? _mm256_cvtepi8_epi16(s8) : _mm256_and_si256(_mm256_cvtepu8_epi16(s8), m4w);
            __m256i H = _mm256_setzero_si256();
            if (q3) H = _mm256_loadu_si256((const __m256i *)(g + 656 + 32 * p));
            #pragma GCC unroll 2
            for (int e = 0; e < 2; e++) {
                const __m256i sc = _mm256_shuffle_epi8(pv, e ? dup_odd : dup_even);
                const __m256i U = _mm256_loadu_si256((const __m256i *)(g + off_qs + 32 * (2 * p + e)));
                __m256i pp[4];
                #pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    __m256i c = _mm256_and_si256(_mm256_srli_epi16(U, 2 * k), m2);
                    if (q3) {
                        const int kk = k + 4 * e;   /* bit kk -> bit 2 */
                        const __m256i hb = kk <= 2 ? _mm256_slli_epi16(H, 2 - kk) : _mm256_srli_epi16(H, kk - 2);
                        c = _mm256_or_si256(c, _mm256_and_si256(hb, b2));
                    }
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; t++) {
                        const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
                        const __m256i x = _mm256_maddubs_epi16(c, bcast32(a->qs + 16 * (2 * p + e) + 4 * k));
                        pp[t] = k ? _mm256_add_epi16(pp[t], x) : x;
                    }
                }
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(pp[t], sc));
            }
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
            acc[t] = q23_block_end(q3, g, isum[t], a->bs16, a->d, acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* ------------------------------------------------------------------------- */
/* K-quants, pre-unpacked (prefill)                                          */
/* ------------------------------------------------------------------------- */

/* With many tokens per weight group, unpacking the nibbles (and 6-bit values)
 * inside the micro-kernel is repeated for every 4 tokens. Prefill instead expands
 * each group once per token block into an int8 tile and ready-made scale
 * vectors, and the micro-kernel below only loads, multiplies and adds.
 * Per 256-value block of a group (UNPACK_K_BYTES):
 *   W    u8 [64 units][8 rows][4]  values 0..63; unit u = values 4u..4u+3   2048
 *   SC   s16 vectors [16][16]      q4_K/q5_K: (sc_j, sc_j) pairs in 0..7;
 *                                  q6_K: (s_k, s_k) for 16-value group k    512
 *   MP   s16 vectors [8][16]       q4_K/q5_K: (m_2p, m_2p+1) pairs in 0..3;
 *                                  q6_K: (s_2p, s_2p+1) for the -32 offset  256
 *   D    f32 [8], DM f32 [8]       d, and dmin (K4/K5)                      64 */
#define UNPACK_K_BYTES (2048 + 512 + 256 + 64)

size_t cpu_unpack_bytes(uint32_t type, int64_t cols) {
    switch (type) {
    case QTYPE_Q4_K: case QTYPE_Q5_K: case QTYPE_Q6_K: return (size_t)(cols / 256) * UNPACK_K_BYTES;
    default: return 0;
    }
}

static void unpack_q45_K(const int q5, const uint8_t *g, int64_t cols, uint8_t *dst) {
    const size_t xb = q5 ? 1440 : 1184;
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    for (int64_t b = 0; b < cols / 256; b++, g += xb, dst += UNPACK_K_BYTES) {
        for (int gi = 0; gi < 4; gi++)
            for (int h = 0; h < 2; h++) {
                __m256i qh = _mm256_setzero_si256();
                if (q5) qh = _mm256_loadu_si256((const __m256i *)(g + 1184 + 64 * gi + 32 * h));
                for (int k = 0; k < 8; k++) {
                    const __m256i P = _mm256_loadu_si256((const __m256i *)(g + 160 + 256 * gi + 32 * k));
                    __m256i W = h ? _mm256_and_si256(_mm256_srli_epi16(P, 4), m4) : _mm256_and_si256(P, m4);
                    if (q5) {
                        const __m256i hb = k <= 4 ? _mm256_slli_epi16(qh, 4 - k) : _mm256_srli_epi16(qh, k - 4);
                        W = _mm256_or_si256(W, _mm256_and_si256(hb, b4));
                    }
                    /* unit u = 16*gi + 8*h + k covers values 64gi + 32h + 4k.. */
                    _mm256_storeu_si256((__m256i *)(dst + 32 * (16 * gi + 8 * h + k)), W);
                }
            }
        for (int j = 0; j < 8; j++) _mm256_storeu_si256((__m256i *)(dst + 2048 + 32 * j), dup_scales_u8(g + 32 + 8 * j));
        for (int p = 0; p < 4; p++)
            _mm256_storeu_si256((__m256i *)(dst + 2560 + 32 * p),
                                _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(g + 96 + 16 * p))));
        _mm256_storeu_ps((float *)(dst + 2816), load_f16x8_u8(g));
        _mm256_storeu_ps((float *)(dst + 2848), load_f16x8_u8(g + 16));
    }
}

static void unpack_q6_K(const uint8_t *g, int64_t cols, uint8_t *dst) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(0x30);
    const __m256i dup_even = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
                                              0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i dup_odd = _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,
                                             2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
    for (int64_t b = 0; b < cols / 256; b++, g += 1680, dst += UNPACK_K_BYTES) {
        for (int s2 = 0; s2 < 4; s2++)
            for (int kk = 0; kk < 4; kk++) {
                const __m256i QH = _mm256_loadu_si256((const __m256i *)(g + 1168 + 128 * s2 + 32 * kk));
                for (int kl = 0; kl < 2; kl++) {
                    const int k = 2 * kk + kl;
                    const __m256i QL = _mm256_loadu_si256((const __m256i *)(g + 144 + 256 * s2 + 32 * k));
                    const __m256i hA = kl == 0 ? _mm256_slli_epi16(QH, 4) : QH;
                    const __m256i hB = kl == 0 ? _mm256_slli_epi16(QH, 2) : _mm256_srli_epi16(QH, 2);
                    const __m256i wA = _mm256_or_si256(_mm256_and_si256(QL, m4), _mm256_and_si256(hA, m2));
                    const __m256i wB = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(QL, 4), m4),
                                                       _mm256_and_si256(hB, m2));
                    /* sub-block A = 2*s2 (values 64*s2 + 4k..), B = 2*s2+1 */
                    _mm256_storeu_si256((__m256i *)(dst + 32 * (16 * s2 + k)), wA);
                    _mm256_storeu_si256((__m256i *)(dst + 32 * (16 * s2 + 8 + k)), wB);
                }
            }
        for (int p = 0; p < 8; p++) {
            const __m256i pv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g + 16 + 16 * p)));
            _mm256_storeu_si256((__m256i *)(dst + 2048 + 32 * (2 * p)), _mm256_shuffle_epi8(pv, dup_even));
            _mm256_storeu_si256((__m256i *)(dst + 2048 + 32 * (2 * p + 1)), _mm256_shuffle_epi8(pv, dup_odd));
            _mm256_storeu_si256((__m256i *)(dst + 2560 + 32 * p), pv);
        }
        _mm256_storeu_ps((float *)(dst + 2816), load_f16x8_u8(g));
    }
}

void cpu_unpack_group_avx2(uint32_t type, const uint8_t *group, int64_t cols, uint8_t *dst) {
    switch (type) {
    case QTYPE_Q4_K: unpack_q45_K(0, group, cols, dst); break;
    case QTYPE_Q5_K: unpack_q45_K(1, group, cols, dst); break;
    case QTYPE_Q6_K: unpack_q6_K(group, cols, dst); break;
    default: break;
    }
}

INLINE __m256i ld(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* kind 0 = q4_K, 1 = q5_K (widen every 4 units), 2 = q6_K (widen every 2).
 * q4_K could sum 8 units in s16, but widening every 4 measured faster (lab micro,
 * 3 tokens: 86 -> 111 GMAC/s), probably because the dependent chain of vpaddw
 * per accumulator is shorter. */
INLINE void gemm_unpacked_K(const int kind, const int NT, const uint8_t *u, int64_t cols, const void *act, size_t as,
                            float out[][8]) {
    /* The f32 accumulators live in out[][] (touched once per 256 values), which
     * leaves the 16 registers to the integer accumulators at NT = 4. */
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], _mm256_setzero_ps());
    for (int64_t b = 0; b < cols / 256; b++, u += UNPACK_K_BYTES) {
        __m256i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm256_setzero_si256();
        const int span = kind == 2 ? 2 : 4;   /* units per s16 accumulation */
        for (int j = 0; j < 64 / span; j++) {
            /* scale vector: q4/q5_K per 32 values (8 units), q6_K per 16 (4 units) */
            const __m256i sc = ld(u + 2048 + 32 * (kind == 2 ? j / 2 : (j * span) / 8));
            __m256i p[4];
            #pragma GCC unroll 8
            for (int k = 0; k < span; k++) {
                const int unit = j * span + k;
                const __m256i W = ld(u + 32 * unit);
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
                    const __m256i x = _mm256_maddubs_epi16(W, bcast32(a->qs + 4 * unit));
                    p[t] = k ? _mm256_add_epi16(p[t], x) : x;
                }
            }
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p[t], sc));
        }
        const __m256 dv = _mm256_loadu_ps((const float *)(u + 2816));
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
            const __m256 da = _mm256_set1_ps(a->d);
            if (kind == 2) {
                __m256i off = _mm256_madd_epi16(ld(u + 2560), bcast32(&a->bs16[0]));
                #pragma GCC unroll 8
                for (int q = 1; q < 8; q++)
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(ld(u + 2560 + 32 * q), bcast32(&a->bs16[2 * q])));
                const __m256i is = _mm256_sub_epi32(isum[t], _mm256_slli_epi32(off, 5));
                _mm256_storeu_ps(out[t], _mm256_fmadd_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(is), _mm256_loadu_ps(out[t])));
            } else {
                __m256i imin = _mm256_madd_epi16(ld(u + 2560), bcast32(&a->bs32[0]));
                #pragma GCC unroll 8
                for (int q = 1; q < 4; q++)
                    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(ld(u + 2560 + 32 * q), bcast32(&a->bs32[2 * q])));
                const __m256 mv = _mm256_loadu_ps((const float *)(u + 2848));
                __m256 acc = _mm256_fmadd_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(isum[t]), _mm256_loadu_ps(out[t]));
                _mm256_storeu_ps(out[t], _mm256_fnmadd_ps(_mm256_mul_ps(mv, da), _mm256_cvtepi32_ps(imin), acc));
            }
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Instances                                                                 */
/* ------------------------------------------------------------------------- */

#include "gemm_instances.h"

/* Tokens per call that run fastest (bench/cpu_gemm.c micro, 8 x 2048 hot):
 * q4_K 3 tokens 120 GMAC/s vs 4 tokens 105 (register pressure); q6_K 4 tokens. */
int cpu_gemm_unpacked_nt(uint32_t type) { return type == QTYPE_Q6_K ? 4 : 3; }

cpu_gemm_fn cpu_gemm_unpacked_avx2(uint32_t type) {
    switch (type) {
    case QTYPE_Q4_K: return gemmu_q4_K;
    case QTYPE_Q5_K: return gemmu_q5_K;
    case QTYPE_Q6_K: return gemmu_q6_K;
    default: return NULL;
    }
}

/* Tokens per call of the packed kernels (bench/cpu_gemm.c micro, GMAC/s at
 * 2 / 4 tokens): q4_0 83 / 74, q4_1 85 / 79, q4_K 87 / 82 (4-bit: 2 is best);
 * q5_0 66 / 75, q5_1 69 / 77, q5_K 70 / 79, q6_K 57 / 73, q8_0 57 / 61. */
int cpu_gemm_nt(uint32_t type) {
    return type == QTYPE_Q4_0 || type == QTYPE_Q4_1 || type == QTYPE_Q4_K ? 2 : 4;
}

cpu_gemm_fn cpu_gemm_avx2(uint32_t type) {
    switch (type) {
    case QTYPE_Q4_0: return gemm_q4_0;
    case QTYPE_Q4_1: return gemm_q4_1;
    case QTYPE_Q5_0: return gemm_q5_0;
    case QTYPE_Q5_1: return gemm_q5_1;
    case QTYPE_Q8_0: return gemm_q8_0;
    case QTYPE_Q4_K: return gemm_q4_K;
    case QTYPE_Q5_K: return gemm_q5_K;
    case QTYPE_Q6_K: return gemm_q6_K;
    case QTYPE_Q2_K: return gemm_q2_K;
    case QTYPE_Q3_K: return gemm_q3_K;
    case QTYPE_IQ4_NL: return gemm_iq4_nl;
    case QTYPE_IQ4_XS: return gemm_iq4_xs;
    default: return NULL;
    }
}

const cpu_kernels cpu_kernels_avx2 = {
    .name = "avx2",
    .gemm = cpu_gemm_avx2,
    .gemm_nt = cpu_gemm_nt,
    .unpack_bytes = cpu_unpack_bytes,
    .unpack_group = cpu_unpack_group_avx2,
    .gemm_unpacked = cpu_gemm_unpacked_avx2,
    .gemm_unpacked_nt = cpu_gemm_unpacked_nt,
    .unpack_min = 8,   /* pp64 +10% over packed, pp8/16 even (kernels.h) */
};

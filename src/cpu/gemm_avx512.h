/* gemm_avx512.h - AVX-512 micro-kernels over the packed x8 layout (kernels.h)
 * and the AVX-512 prefill expansion. Included by gemm_avx512.c (MF_VNNI 0:
 * F/BW/DQ/VL, vpmaddubsw + vpmaddwd) and gemm_avx512_vnni.c (MF_VNNI 1:
 * vpdpbusd); the two differ only in DP below. Include nowhere else.
 *
 * Packed kernels (decode, and prefill of the 32-value formats). One 64-byte
 * load holds two packed units k, k+1: lanes 0..7 are rows 0..7 of unit k,
 * lanes 8..15 rows 0..7 of unit k+1. The activations of the pair come from one
 * vpermd of the token's quantized block (dword k to the low half, k+1 to the
 * high half). Every s32 lane belongs to one (row, unit parity); the halves are
 * added (fold) once per scale group or block, which gives, per row and block,
 * exactly the integer the AVX2 kernel computes. The float epilogue is the AVX2
 * one, in the same order, so results are bit-identical to cpu_kernels_avx2.
 *
 * Integer budget. VNNI: vpdpbusd sums 4 u8*s8 products into s32 without
 * saturation. BW: DP widens every vpmaddubsw at once (vpmaddwd by 1), so a
 * pair of products stays below 2*127*127 = 32258 (q8_0 by the sign trick,
 * |w| <= 128 as u8, activations |q| <= 127) and nothing saturates.
 * Sub-block scales multiply the s32 sums (vpmulld), never the bytes.
 *
 * Expanded kernels (prefill, K-quants). A group is expanded once per token
 * block into "quads": 64 bytes = 4 rows x 4 units (lane i = row 4*hr + i/4,
 * unit 4q + i%4), so the activations of a quad are one 16-byte broadcast from
 * memory (vbroadcasti32x4: a load, no shuffle) and every weight load feeds
 * NT dot instructions with no other work. Per 256-value block (2880 bytes,
 * the size of the AVX2 expansion):
 *   W   u8 [16 quads][2 halves hr][16 lanes][4]                         2048
 *   SC  u8/s8 [groups][2 halves][16]: the scale of each lane's row; q4_K/q5_K
 *       8 groups of 2 quads (32 values), q6_K 16 groups of 1 quad       512
 *   MP  s16 vectors as in the AVX2 expansion (mins / the -32 offset)    256
 *   D   f32 [8], DM f32 [8]                                             64
 * The four unit partials of a row are summed once per block (reduce4), again
 * giving the AVX2 integers and the AVX2 epilogue. */
#include "kernels.h"
#include "simd_avx2.h"

#define INLINE static inline __attribute__((always_inline))

#if MF_VNNI
#define DP(acc, u, s) _mm512_dpbusd_epi32((acc), (u), (s))
#else
INLINE __m512i dp_bw(__m512i acc, __m512i u, __m512i s) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}
#define DP(acc, u, s) dp_bw((acc), (u), (s))
#endif

INLINE const uint8_t *arow(const void *act, size_t stride, int t) { return (const uint8_t *)act + (size_t)t * stride; }
INLINE __m512i ld512(const void *p) { return _mm512_loadu_si512(p); }
INLINE __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
INLINE __m256 load_f16x8_u8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* [lo | hi] as one zmm. */
INLINE __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* Rows 0..7 of units k and k+1 added: the 8 per-row s32 sums. */
INLINE __m256i fold(__m512i x) {
    return _mm256_add_epi32(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1));
}

/* Activations of a unit pair: dword j of src to lanes 0..7, dword j+1 to 8..15. */
INLINE __m512i apair(__m512i src, int j) {
    return _mm512_permutexvar_epi32(join(_mm256_set1_epi32(j), _mm256_set1_epi32(j + 1)), src);
}

/* 8 u8 sub-block scales of 8 rows -> s32 [r0..r7, r0..r7]. */
INLINE __m512i scales16_u8(const uint8_t *p) {
    const __m128i v = _mm_loadl_epi64((const __m128i *)p);
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(v, v));
}

/* Prefetch into L2 PF_DIST bytes ahead, as the AVX2 kernels (gemm_avx2.c has
 * the measurements behind the distance and the hint). */
#ifndef PF_DIST
#define PF_DIST 4096
#endif
INLINE void prefetch_block(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PF_DIST + o, _MM_HINT_T1);
}

/* ------------------------------------------------------------------------- */
/* 32-value formats                                                          */
/* ------------------------------------------------------------------------- */

/* Kinds: 0 = q4_0, 1 = q4_1, 2 = q5_0, 3 = q5_1. Unit pairs (0,1), (2,3). */
INLINE void gemm_q4q5(const int kind, const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as,
                      float out[][8]) {
    const int has_m = kind == 1 || kind == 3, has_h = kind >= 2;
    const size_t xb = kind == 0 ? 144 : kind == 1 ? 160 : kind == 2 ? 176 : 192;
    const size_t off_qh = has_m ? 32 : 16, off_qs = off_qh + (has_h ? 32 : 0);
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b++, g += xb) {
        prefetch_block(g, xb);
        const __m256 dv = load_f16x8_u8(g);
        __m512i Q = _mm512_setzero_si512();
        if (has_h) {
            /* qh bit 2k (lo) / 2k+1 (hi) of unit k; the high half is shifted by 2
             * so that both halves of a pair take the same shifts. */
            const __m256i qh = ld256(g + off_qh);
            Q = join(qh, _mm256_srli_epi16(qh, 2));
        }
        __m512i A[4], isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
            A[t] = _mm512_zextsi256_si512(ld256(a->qs));
            isum[t] = _mm512_setzero_si512();
        }
        #pragma GCC unroll 2
        for (int kp = 0; kp < 2; kp++) {
            const __m512i P = ld512(g + off_qs + 64 * kp);
            __m512i lo = _mm512_and_si512(P, m4), hi = _mm512_and_si512(_mm512_srli_epi16(P, 4), m4);
            if (has_h) {
                const __m512i hl = kp == 0 ? _mm512_slli_epi16(Q, 4) : Q;
                const __m512i hh = kp == 0 ? _mm512_slli_epi16(Q, 3) : _mm512_srli_epi16(Q, 1);
                lo = _mm512_or_si512(lo, _mm512_and_si512(hl, b4));
                hi = _mm512_or_si512(hi, _mm512_and_si512(hh, b4));
            }
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                isum[t] = DP(isum[t], lo, apair(A[t], 2 * kp));
                isum[t] = DP(isum[t], hi, apair(A[t], 4 + 2 * kp));
            }
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
            const __m256 f = _mm256_cvtepi32_ps(fold(isum[t]));
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

/* q8_0: |w| as u8 times the activation with w's sign (AVX-512 has no vpsignb:
 * a masked subtract from zero where w < 0). */
INLINE void gemm_q8_0_nt(const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as, float out[][8]) {
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b++, g += 272) {
        prefetch_block(g, 272);
        const __m256 dv = load_f16x8_u8(g);
        __m512i A[4], isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
            A[t] = _mm512_zextsi256_si512(ld256(a->qs));
            isum[t] = zero;
        }
        #pragma GCC unroll 4
        for (int kp = 0; kp < 4; kp++) {
            const __m512i W = ld512(g + 16 + 64 * kp);
            const __m512i aw = _mm512_abs_epi8(W);
            const __mmask64 neg = _mm512_movepi8_mask(W);
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const __m512i x = apair(A[t], 2 * kp);
                isum[t] = DP(isum[t], aw, _mm512_mask_sub_epi8(x, neg, zero, x));
            }
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(fold(isum[t])), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* ------------------------------------------------------------------------- */
/* K-quants                                                                  */
/* ------------------------------------------------------------------------- */

/* q4_K (q5 = 0) and q5_K (q5 = 1). Group gi of 64 values: pair kp of packed
 * units gives sub-block 2gi (low nibbles) and 2gi+1 (high nibbles). */
INLINE void gemm_q45_K(const int q5, const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as,
                       float out[][8]) {
    const size_t xb = q5 ? 1440 : 1184;
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 256;
    for (int64_t b = 0; b < nb; b++, g += xb) {
        prefetch_block(g, xb);
        __m512i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
        for (int gi = 0; gi < 4; gi++) {
            __m512i A[4], pl[4], ph[4];
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
                A[t] = ld512(a->qs + 64 * gi);
                pl[t] = ph[t] = _mm512_setzero_si512();
            }
            __m512i QL = _mm512_setzero_si512(), QH = QL;
            if (q5) {
                /* bit k of qh = bit 4 of unit k; the high half pre-shifted by 1 */
                const __m256i l = ld256(g + 1184 + 64 * gi), h = ld256(g + 1184 + 64 * gi + 32);
                QL = join(l, _mm256_srli_epi16(l, 1));
                QH = join(h, _mm256_srli_epi16(h, 1));
            }
            #pragma GCC unroll 4
            for (int kp = 0; kp < 4; kp++) {
                const __m512i P = ld512(g + 160 + 256 * gi + 64 * kp);
                __m512i lo = _mm512_and_si512(P, m4), hi = _mm512_and_si512(_mm512_srli_epi16(P, 4), m4);
                if (q5) {
                    const int k = 2 * kp;   /* bit k -> bit 4 */
                    const __m512i hl = k <= 4 ? _mm512_slli_epi16(QL, 4 - k) : _mm512_srli_epi16(QL, k - 4);
                    const __m512i hh = k <= 4 ? _mm512_slli_epi16(QH, 4 - k) : _mm512_srli_epi16(QH, k - 4);
                    lo = _mm512_or_si512(lo, _mm512_and_si512(hl, b4));
                    hi = _mm512_or_si512(hi, _mm512_and_si512(hh, b4));
                }
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    pl[t] = DP(pl[t], lo, apair(A[t], 2 * kp));
                    ph[t] = DP(ph[t], hi, apair(A[t], 8 + 2 * kp));
                }
            }
            const __m512i sl = scales16_u8(g + 32 + 8 * (2 * gi)), sh = scales16_u8(g + 32 + 8 * (2 * gi + 1));
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++)
                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(pl[t], sl),
                                                                     _mm512_mullo_epi32(ph[t], sh)));
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
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(fold(isum[t])), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(mv, da), _mm256_cvtepi32_ps(imin), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* q6_K scale of 16-value group 2p+e of 8 rows (packed at g+16+16p, pairs per
 * row) -> s32 [r0..r7, r0..r7]. */
INLINE __m512i scales16_q6(const uint8_t *g, int p, int e) {
    const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(g + 16 + 16 * p)));
    const __m256i ix = _mm256_setr_epi32(e, 2 + e, 4 + e, 6 + e, 8 + e, 10 + e, 12 + e, 14 + e);
    return _mm512_permutexvar_epi32(join(ix, ix), v);
}

/* q6_K: the pair (2kk, 2kk+1) of ql units shares one qh unit (pack.c). Sub-block
 * A = 2*s2 (low nibbles), B = 2*s2+1 (high); units 2kk, 2kk+1 lie in 16-value
 * group kk/2 of each, so two pairs share a scale. */
INLINE void gemm_q6_K_nt(const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as, float out[][8]) {
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(0x30);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 256;
    for (int64_t b = 0; b < nb; b++, g += 1680) {
        prefetch_block(g, 1680);
        __m512i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
        for (int s2 = 0; s2 < 4; s2++) {
            __m512i A[4];
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) A[t] = ld512(((const block_q8a256 *)arow(act, as, t) + b)->qs + 64 * s2);
            #pragma GCC unroll 2
            for (int half = 0; half < 2; half++) {
                __m512i pA[4], pB[4];
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) pA[t] = pB[t] = _mm512_setzero_si512();
                #pragma GCC unroll 2
                for (int kx = 0; kx < 2; kx++) {
                    const int kk = 2 * half + kx;
                    const __m512i QL = ld512(g + 144 + 256 * s2 + 64 * kk);
                    const __m256i qh = ld256(g + 1168 + 128 * s2 + 32 * kk);
                    /* fields: unit 2kk A bits 0-1, B 2-3; unit 2kk+1 A 4-5, B 6-7 -> bits 4..5 */
                    const __m512i hA = join(_mm256_slli_epi16(qh, 4), qh);
                    const __m512i hB = join(_mm256_slli_epi16(qh, 2), _mm256_srli_epi16(qh, 2));
                    const __m512i wA = _mm512_or_si512(_mm512_and_si512(QL, m4), _mm512_and_si512(hA, m2));
                    const __m512i wB = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(QL, 4), m4),
                                                       _mm512_and_si512(hB, m2));
                    #pragma GCC unroll 8
                    for (int t = 0; t < NT; t++) {
                        pA[t] = DP(pA[t], wA, apair(A[t], 2 * kk));
                        pB[t] = DP(pB[t], wB, apair(A[t], 8 + 2 * kk));
                    }
                }
                const __m512i sA = scales16_q6(g, 2 * s2, half), sB = scales16_q6(g, 2 * s2 + 1, half);
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++)
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(pA[t], sA),
                                                                         _mm512_mullo_epi32(pB[t], sB)));
            }
        }
        /* The -32 offset: 32 * sum_j s_j * bs16_j, pairs (2p, 2p+1) (as AVX2). */
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
            const __m256i is = _mm256_sub_epi32(fold(isum[t]), _mm256_slli_epi32(off, 5));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(is), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* ------------------------------------------------------------------------- */
/* IQ4 (non-linear grid) and the 2/3-bit K-quants                            */
/* ------------------------------------------------------------------------- */

/* The iq4 grid in every 128-bit lane (vpshufb looks up within a lane). */
INLINE __m512i iq4nl_lut512(void) { return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4nl_values)); }

/* Signed grid values w times activations x: |w| times x with w's sign (a
 * masked subtract from zero, as q8_0). */
INLINE __m512i sdot512(__m512i acc, __m512i w, __m512i x) {
    const __mmask64 neg = _mm512_movepi8_mask(w);
    return DP(acc, _mm512_abs_epi8(w), _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x));
}

/* iq4_nl: unit pairs (0,1), (2,3) as q4_0; each nibble looked up in the grid. */
INLINE void gemm_iq4_nl_nt(const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as, float out[][8]) {
    const __m512i m4 = _mm512_set1_epi8(15), lut = iq4nl_lut512();
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b++, g += 144) {
        prefetch_block(g, 144);
        const __m256 dv = load_f16x8_u8(g);
        __m512i A[4], isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            A[t] = _mm512_zextsi256_si512(ld256(((const block_q8a32 *)arow(act, as, t) + b)->qs));
            isum[t] = _mm512_setzero_si512();
        }
        #pragma GCC unroll 2
        for (int kp = 0; kp < 2; kp++) {
            const __m512i P = ld512(g + 16 + 64 * kp);
            const __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(P, m4));
            const __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(P, 4), m4));
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                isum[t] = sdot512(isum[t], lo, apair(A[t], 2 * kp));
                isum[t] = sdot512(isum[t], hi, apair(A[t], 4 + 2 * kp));
            }
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a32 *a = (const block_q8a32 *)arow(act, as, t) + b;
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(fold(isum[t])), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* iq4_xs: per sub-block j, iq4_nl's two unit pairs; the sums times the rows'
 * signed scales (s8 at g+16+8j) in s32. */
INLINE void gemm_iq4_xs_nt(const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as, float out[][8]) {
    const __m512i m4 = _mm512_set1_epi8(15), lut = iq4nl_lut512();
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 256;
    for (int64_t b = 0; b < nb; b++, g += 1104) {
        prefetch_block(g, 1104);
        __m512i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            const __m128i s8 = _mm_loadl_epi64((const __m128i *)(g + 16 + 8 * j));
            const __m512i sc = _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(s8, s8));
            __m512i A[4], p[4];
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                A[t] = _mm512_zextsi256_si512(ld256(((const block_q8a256 *)arow(act, as, t) + b)->qs + 32 * j));
                p[t] = _mm512_setzero_si512();
            }
            #pragma GCC unroll 2
            for (int kp = 0; kp < 2; kp++) {
                const __m512i P = ld512(g + 80 + 128 * j + 64 * kp);
                const __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(P, m4));
                const __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(P, 4), m4));
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    p[t] = sdot512(p[t], lo, apair(A[t], 2 * kp));
                    p[t] = sdot512(p[t], hi, apair(A[t], 4 + 2 * kp));
                }
            }
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(p[t], sc));
        }
        const __m256 dv = load_f16x8_u8(g);
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(fold(isum[t])), acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* q2_K (q3 = 0) and q3_K (q3 = 1): one load is the units of groups 2p (lanes
 * 0..7) and 2p+1 (8..15); plane k of each takes activation dwords k and 4 + k of
 * the pair's 32 values. q3_K's qh unit p holds group 2p's third bits in bits
 * 0..3 and 2p+1's in 4..7: the high half is shifted down by 4 so that both
 * halves take the same shifts. Scales per lane in s32 (vpmulld), the offset /
 * mins and the float epilogue as the AVX2 kernel. */
INLINE void gemm_q23_K(const int q3, const int NT, const uint8_t *g, int64_t cols, const void *act, size_t as,
                       float out[][8]) {
    const size_t xb = q3 ? 912 : 672, off_sc = q3 ? 16 : 32, off_qs = q3 ? 144 : 160;
    const __m512i m2 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4), m4d = _mm512_set1_epi32(15);
    /* [r0 e0, r0 e1, r1 e0, ...] -> [r0..r7 of e0, r0..r7 of e1] */
    const __m512i deint = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    __m256 acc[4];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    const int64_t nb = cols / 256;
    for (int64_t b = 0; b < nb; b++, g += xb) {
        prefetch_block(g, xb);
        __m512i isum[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) isum[t] = _mm512_setzero_si512();
        for (int p = 0; p < 8; p++) {
            const __m128i s8 = _mm_loadu_si128((const __m128i *)(g + off_sc + 16 * p));
            const __m512i sv = q3 ? _mm512_cvtepi8_epi32(s8) : _mm512_and_si512(_mm512_cvtepu8_epi32(s8), m4d);
            const __m512i sc = _mm512_permutexvar_epi32(deint, sv);
            __m512i Q = _mm512_setzero_si512();
            if (q3) {
                const __m256i h = ld256(g + 656 + 32 * p);
                Q = join(h, _mm256_srli_epi16(h, 4));
            }
            const __m512i U = ld512(g + off_qs + 64 * p);
            __m512i A[4], pp[4];
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                A[t] = _mm512_zextsi256_si512(ld256(((const block_q8a256 *)arow(act, as, t) + b)->qs + 32 * p));
                pp[t] = _mm512_setzero_si512();
            }
            #pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m512i c = _mm512_and_si512(_mm512_srli_epi16(U, 2 * k), m2);
                if (q3) {
                    const __m512i hb = k <= 2 ? _mm512_slli_epi16(Q, 2 - k) : _mm512_srli_epi16(Q, k - 2);
                    c = _mm512_or_si512(c, _mm512_and_si512(hb, b2));
                }
                const __m512i ix = join(_mm256_set1_epi32(k), _mm256_set1_epi32(4 + k));
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) pp[t] = DP(pp[t], c, _mm512_permutexvar_epi32(ix, A[t]));
            }
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(pp[t], sc));
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
            acc[t] = q23_block_end(q3, g, fold(isum[t]), a->bs16, a->d, acc[t]);
        }
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], acc[t]);
}

/* ------------------------------------------------------------------------- */
/* K-quants, expanded into quads (prefill)                                   */
/* ------------------------------------------------------------------------- */

#define UNPACK_K_BYTES (2048 + 512 + 256 + 64)

static size_t unpack_bytes(uint32_t type, int64_t cols) {
    switch (type) {
    case QTYPE_Q4_K: case QTYPE_Q5_K: case QTYPE_Q6_K: return (size_t)(cols / 256) * UNPACK_K_BYTES;
    default: return 0;
    }
}

/* Two unit pairs (units u..u+1 in x, u+2..u+3 in y, lanes as the packed
 * kernels) -> the quad's two halves at dst (rows 0..3, then 4..7). */
INLINE void store_quad(uint8_t *dst, __m512i x, __m512i y) {
    /* lane i = 4*rr + j: unit j (j < 2: x dword 8j + row, else y), row 4*hr + rr */
    const __m512i i0 = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
    const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(4));
    _mm512_storeu_si512(dst, _mm512_permutex2var_epi32(x, i0, y));
    _mm512_storeu_si512(dst + 64, _mm512_permutex2var_epi32(x, i1, y));
}

/* Scale bytes of 8 rows (row r at byte e + stride*r of v, stride 1 or 2) -> 32
 * bytes: the scale of each lane's row, rows 0..3 then 4..7. */
INLINE void store_lane_scales(uint8_t *dst, __m128i v, int e, int stride) {
    const __m128i rr = _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m128i i0 = _mm_add_epi8(_mm_set1_epi8((char)e), stride == 2 ? _mm_add_epi8(rr, rr) : rr);
    const __m128i i1 = _mm_add_epi8(i0, _mm_set1_epi8((char)(4 * stride)));
    _mm_storeu_si128((__m128i *)dst, _mm_shuffle_epi8(v, i0));
    _mm_storeu_si128((__m128i *)(dst + 16), _mm_shuffle_epi8(v, i1));
}

static void unpack_q45_K(const int q5, const uint8_t *g, int64_t cols, uint8_t *dst) {
    const size_t xb = q5 ? 1440 : 1184;
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
    for (int64_t b = 0; b < cols / 256; b++, g += xb, dst += UNPACK_K_BYTES) {
        for (int gi = 0; gi < 4; gi++)
            for (int h = 0; h < 2; h++) {
                __m512i Q = _mm512_setzero_si512();
                if (q5) {
                    const __m256i l = ld256(g + 1184 + 64 * gi + 32 * h);
                    Q = join(l, _mm256_srli_epi16(l, 1));
                }
                __m512i w[4];
                for (int kp = 0; kp < 4; kp++) {
                    const __m512i P = ld512(g + 160 + 256 * gi + 64 * kp);
                    __m512i W = h ? _mm512_and_si512(_mm512_srli_epi16(P, 4), m4) : _mm512_and_si512(P, m4);
                    if (q5) {
                        const int k = 2 * kp;
                        const __m512i hb = k <= 4 ? _mm512_slli_epi16(Q, 4 - k) : _mm512_srli_epi16(Q, k - 4);
                        W = _mm512_or_si512(W, _mm512_and_si512(hb, b4));
                    }
                    w[kp] = W;
                }
                /* units 16gi + 8h + 0..7 = quads 4gi + 2h, 4gi + 2h + 1 */
                store_quad(dst + 128 * (4 * gi + 2 * h), w[0], w[1]);
                store_quad(dst + 128 * (4 * gi + 2 * h + 1), w[2], w[3]);
            }
        for (int j = 0; j < 8; j++)
            store_lane_scales(dst + 2048 + 32 * j, _mm_loadl_epi64((const __m128i *)(g + 32 + 8 * j)), 0, 1);
        for (int p = 0; p < 4; p++)
            _mm256_storeu_si256((__m256i *)(dst + 2560 + 32 * p),
                                _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(g + 96 + 16 * p))));
        _mm256_storeu_ps((float *)(dst + 2816), load_f16x8_u8(g));
        _mm256_storeu_ps((float *)(dst + 2848), load_f16x8_u8(g + 16));
    }
}

static void unpack_q6_K(const uint8_t *g, int64_t cols, uint8_t *dst) {
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(0x30);
    for (int64_t b = 0; b < cols / 256; b++, g += 1680, dst += UNPACK_K_BYTES) {
        for (int s2 = 0; s2 < 4; s2++) {
            __m512i wA[4], wB[4];
            for (int kk = 0; kk < 4; kk++) {
                const __m512i QL = ld512(g + 144 + 256 * s2 + 64 * kk);
                const __m256i qh = ld256(g + 1168 + 128 * s2 + 32 * kk);
                const __m512i hA = join(_mm256_slli_epi16(qh, 4), qh);
                const __m512i hB = join(_mm256_slli_epi16(qh, 2), _mm256_srli_epi16(qh, 2));
                wA[kk] = _mm512_or_si512(_mm512_and_si512(QL, m4), _mm512_and_si512(hA, m2));
                wB[kk] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(QL, 4), m4), _mm512_and_si512(hB, m2));
            }
            /* A = sub-block 2*s2: units 16*s2 + 0..7 = quads 4*s2, 4*s2+1; B: 4*s2+2, +3 */
            store_quad(dst + 128 * (4 * s2), wA[0], wA[1]);
            store_quad(dst + 128 * (4 * s2 + 1), wA[2], wA[3]);
            store_quad(dst + 128 * (4 * s2 + 2), wB[0], wB[1]);
            store_quad(dst + 128 * (4 * s2 + 3), wB[2], wB[3]);
        }
        /* quad q = 16-value group q: scale 2p+e, p = q/2, e = q%2, row r at g+16+16p+2r+e */
        for (int q = 0; q < 16; q++)
            store_lane_scales(dst + 2048 + 32 * q, _mm_loadu_si128((const __m128i *)(g + 16 + 16 * (q / 2))), q % 2, 2);
        for (int p = 0; p < 8; p++)
            _mm256_storeu_si256((__m256i *)(dst + 2560 + 32 * p),
                                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(g + 16 + 16 * p))));
        _mm256_storeu_ps((float *)(dst + 2816), load_f16x8_u8(g));
    }
}

static void unpack_group(uint32_t type, const uint8_t *group, int64_t cols, uint8_t *dst) {
    switch (type) {
    case QTYPE_Q4_K: unpack_q45_K(0, group, cols, dst); break;
    case QTYPE_Q5_K: unpack_q45_K(1, group, cols, dst); break;
    case QTYPE_Q6_K: unpack_q6_K(group, cols, dst); break;
    default: break;
    }
}

/* Per-lane (row, unit%4) sums of rows 0..3 (x) and 4..7 (y) -> the 8 row sums. */
INLINE __m256i reduce4(__m512i x, __m512i y) {
    const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(x, y), _mm512_unpackhi_epi64(x, y));
    const __m512i d = _mm512_add_epi32(c, _mm512_shuffle_epi32(c, _MM_SHUFFLE(2, 3, 0, 1)));
    /* 128-bit lane L of d: [row L, row L, row 4+L, row 4+L] */
    const __m512i ix = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(ix, d));
}

INLINE __m256i ld(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* kind 0 = q4_K, 1 = q5_K (scale groups of 2 quads, u8 scales), 2 = q6_K
 * (groups of 1 quad, s8 scales). */
INLINE void gemm_unpacked_K(const int kind, const int NT, const uint8_t *u, int64_t cols, const void *act, size_t as,
                            float out[][8]) {
    #pragma GCC unroll 8
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out[t], _mm256_setzero_ps());
    const int nq = kind == 2 ? 1 : 2;   /* quads per scale group */
    for (int64_t b = 0; b < cols / 256; b++, u += UNPACK_K_BYTES) {
        __m512i i0[4], i1[4];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) i0[t] = i1[t] = _mm512_setzero_si512();
        for (int sg = 0; sg < 16 / nq; sg++) {
            const __m128i sb0 = _mm_loadu_si128((const __m128i *)(u + 2048 + 32 * sg));
            const __m128i sb1 = _mm_loadu_si128((const __m128i *)(u + 2048 + 32 * sg + 16));
            const __m512i s0 = kind == 2 ? _mm512_cvtepi8_epi32(sb0) : _mm512_cvtepu8_epi32(sb0);
            const __m512i s1 = kind == 2 ? _mm512_cvtepi8_epi32(sb1) : _mm512_cvtepu8_epi32(sb1);
            __m512i p0[4], p1[4];
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) p0[t] = p1[t] = _mm512_setzero_si512();
            #pragma GCC unroll 2
            for (int qq = 0; qq < nq; qq++) {
                const int q = sg * nq + qq;
                const __m512i w0 = ld512(u + 128 * q), w1 = ld512(u + 128 * q + 64);
                #pragma GCC unroll 8
                for (int t = 0; t < NT; t++) {
                    const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
                    const __m512i x = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(a->qs + 16 * q)));
                    p0[t] = DP(p0[t], w0, x);
                    p1[t] = DP(p1[t], w1, x);
                }
            }
            #pragma GCC unroll 8
            for (int t = 0; t < NT; t++) {
                i0[t] = _mm512_add_epi32(i0[t], _mm512_mullo_epi32(p0[t], s0));
                i1[t] = _mm512_add_epi32(i1[t], _mm512_mullo_epi32(p1[t], s1));
            }
        }
        const __m256 dv = _mm256_loadu_ps((const float *)(u + 2816));
        #pragma GCC unroll 8
        for (int t = 0; t < NT; t++) {
            const block_q8a256 *a = (const block_q8a256 *)arow(act, as, t) + b;
            const __m256 da = _mm256_set1_ps(a->d);
            const __m256i isum = reduce4(i0[t], i1[t]);
            if (kind == 2) {
                __m256i off = _mm256_madd_epi16(ld(u + 2560), bcast32(&a->bs16[0]));
                #pragma GCC unroll 8
                for (int q = 1; q < 8; q++)
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(ld(u + 2560 + 32 * q), bcast32(&a->bs16[2 * q])));
                const __m256i is = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 5));
                _mm256_storeu_ps(out[t], _mm256_fmadd_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(is), _mm256_loadu_ps(out[t])));
            } else {
                __m256i imin = _mm256_madd_epi16(ld(u + 2560), bcast32(&a->bs32[0]));
                #pragma GCC unroll 8
                for (int q = 1; q < 4; q++)
                    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(ld(u + 2560 + 32 * q), bcast32(&a->bs32[2 * q])));
                const __m256 mv = _mm256_loadu_ps((const float *)(u + 2848));
                __m256 acc = _mm256_fmadd_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(isum), _mm256_loadu_ps(out[t]));
                _mm256_storeu_ps(out[t], _mm256_fnmadd_ps(_mm256_mul_ps(mv, da), _mm256_cvtepi32_ps(imin), acc));
            }
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Instances                                                                 */
/* ------------------------------------------------------------------------- */

#include "gemm_instances.h"

static cpu_gemm_fn gemm_for(uint32_t type) {
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

static cpu_gemm_fn gemm_unpacked_for(uint32_t type) {
    switch (type) {
    case QTYPE_Q4_K: return gemmu_q4_K;
    case QTYPE_Q5_K: return gemmu_q5_K;
    case QTYPE_Q6_K: return gemmu_q6_K;
    default: return NULL;
    }
}

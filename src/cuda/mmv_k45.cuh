/* mmv_k45.cuh - the q4_K / q5_K unit of the decode GEMVs (mmv_unit.cuh's unit interface),
 * in a header of its own because two kernel families use it: the GEMVs
 * (mmv_kquant.cu) and the coming MMQ kernels,
 * which dots a head's two units of each wo row with the same sums.
 *
 * One unit = one 64-value group g of a block: sub-blocks 2g (low nibbles) and 2g+1
 * (high nibbles) of the same 32 bytes of qs, so one scale unpack serves 64 values. Per
 * unit: the 16-byte block header (d, dmin, scales; L1 hit for the 3 sibling lanes) and
 * 2x16 bytes of qs (+2x16 of qh for q5_K). */
#ifndef MINFER_CUDA_MMV_K45_CUH
#define MINFER_CUDA_MMV_K45_CUH

#include "mmv_unit.cuh"

/* The 6-bit scales and mins of sub-blocks 2g and 2g+1 from a block header h (d|dmin,
 * then the 12 packed bytes s0|s1|s2 in h.y, h.z, h.w), as the bytes [sc0, sc1, m0, m1].
 * Sub-blocks 0..3 keep theirs in the low 6 bits of s0 and s1; 4..7 in the nibbles of
 * s2 with the top 2 bits of s0 and s1 above. Branch-free: a lane's g is fixed (its
 * units are u0 + lane + 32k), so a branch on it splits every warp (the SASS of the
 * branching form ran both paths: ~26 instructions per unit, ~10 now). */
/* (The two byte selectors depend on g only: k4_sel.) */
struct k4_sel {
    uint32_t p, l;
};
static __device__ __forceinline__ k4_sel k4_selectors(int g) {
    const uint32_t b = (uint32_t)(g & 1) * 2;
    return {b | (b + 1) << 4 | (b + 4) << 8 | (b + 5) << 12, b | (b + 1) << 4 | b << 8 | (b + 1) << 12};
}
static __device__ __forceinline__ uint32_t k4_scales(const uint4 &h, k4_sel sel, int g) {
    const uint32_t p = __byte_perm(h.y, h.z, sel.p);
    const uint32_t l = __byte_perm(h.w, 0, sel.l);
    const uint32_t hi = __byte_perm(l & 0x0f0f0f0fu, (l >> 4) & 0x0f0f0f0fu, 0x7610) | ((p >> 2) & 0x30303030u);
    return g >= 2 ? hi : p & 0x3f3f3f3fu;
}

template <bool Q5>
struct unit_k45 {
    enum { QK = 256, UPB = 4, UNR = 2 };
    struct W {
        uint4 h, q0, q1;
        uint4 h0, h1;  /* q5_K high bits */
    };
    /* What unit u's loads and dot need besides the bytes: where its block starts in a row,
     * its group g and the scale selectors. The ring GEMVs work it out once per lane and
     * keep it (mmv_ring.cuh, ring_units): worked out again at every row, as the compiler chose
     * to, it cost ~30 instructions a unit (SASS of xst q4_K, sm_90a). */
    struct P {
        int off, g;
        k4_sel sel;
    };
    static __device__ __forceinline__ P prep(int, int u) {
        return {(u >> 2) * (Q5 ? 176 : 144), u & 3, k4_selectors(u & 3)};
    }
    /* (an empty asm that may have changed every field: the compiler can no longer work
     * them out again, so it keeps them) */
    static __device__ __forceinline__ void pin(P &p) { asm("" : "+r"(p.off), "+r"(p.g), "+r"(p.sel.p), "+r"(p.sel.l)); }
    template <class L>
    static __device__ __forceinline__ void load_p(const uint8_t *row, const P &p, W &w) {
        const uint8_t *blk = row + p.off;
        w.h = L::u128(blk);
        const uint8_t *qs = blk + (Q5 ? 48 : 16) + 32 * p.g;
        w.q0 = L::u128(qs);
        w.q1 = L::u128(qs + 16);
        if (Q5) {
            w.h0 = L::u128(blk + 16);
            w.h1 = L::u128(blk + 32);
        }
    }
    template <class L>
    static __device__ __forceinline__ void load(const uint8_t *row, int nb, int u, W &w) {
        load_p<L>(row, prep(nb, u), w);
    }
    /* the activations one unit needs (64 values, their two 32-block scales and
     * the two 32-value sums) */
    struct X {
        int4 a0, a1, b0, b1;
        float d0, d1, s0, s1;
    };
    template <class L = ld_g>
    static __device__ __forceinline__ void loadx(const cu_q8 &q, int64_t xoff, int u, X &x) {
        const int b = u >> 2, g = u & 3;
        const int64_t xb = xoff + (int64_t)b * 256 + 64 * g;
        x.a0 = L::i128(q.qs + xb);
        x.a1 = L::i128(q.qs + xb + 16);
        x.b0 = L::i128(q.qs + xb + 32);
        x.b1 = L::i128(q.qs + xb + 48);
        const int64_t i32 = xb >> 5, i16 = xb >> 4;
        x.d0 = q.d[i32];
        x.d1 = q.d[i32 + 1];
        x.s0 = q.s[i16] + q.s[i16 + 1];
        x.s1 = q.s[i16 + 2] + q.s[i16 + 3];
    }
    /* the lane-major copy (common.cuh, cu_q8.xl4): five 16-byte plain loads
     * (mmv_core.cuh, mmv_lane_loadx, says why not the read-only path) */
    enum { XL = 4 };
    static __device__ __forceinline__ const uint8_t *xl(const cu_q8 &q) { return q.xl4; }
    static __device__ __forceinline__ void loadx_lane(const uint8_t *xl, int u, X &x) {
        x.a0 = *((const int4 *)(xl + cu_xl_off(u, 0)));
        x.a1 = *((const int4 *)(xl + cu_xl_off(u, 1)));
        x.b0 = *((const int4 *)(xl + cu_xl_off(u, 2)));
        x.b1 = *((const int4 *)(xl + cu_xl_off(u, 3)));
        const float4 e = *((const float4 *)(xl + cu_xl_off(u, 4)));
        x.d0 = e.x;
        x.d1 = e.y;
        x.s0 = e.z;
        x.s1 = e.w;
    }
    static __device__ __forceinline__ float dotx(const W &w, const X &x, int u) { return dot_p(w, x, prep(0, u)); }
    static __device__ __forceinline__ float dot_p(const W &w, const X &x, const P &p) {
        const int g = p.g;
        const uint32_t sm = k4_scales(w.h, p.sel, g);
        const int sc0 = (int)(sm & 0xff), sc1 = (int)(sm >> 8 & 0xff), m0 = (int)(sm >> 16 & 0xff), m1 = (int)(sm >> 24);
        const uint32_t qa[8] = {w.q0.x, w.q0.y, w.q0.z, w.q0.w, w.q1.x, w.q1.y, w.q1.z, w.q1.w};
        const int xl[8] = {x.a0.x, x.a0.y, x.a0.z, x.a0.w, x.a1.x, x.a1.y, x.a1.z, x.a1.w};
        const int xh[8] = {x.b0.x, x.b0.y, x.b0.z, x.b0.w, x.b1.x, x.b1.y, x.b1.z, x.b1.w};
        uint32_t hb[8];
        if (Q5) {
            const uint32_t hh[8] = {w.h0.x, w.h0.y, w.h0.z, w.h0.w, w.h1.x, w.h1.y, w.h1.z, w.h1.w};
#pragma unroll
            for (int k = 0; k < 8; k++) hb[k] = hh[k];
        }
        int dlo = 0, dhi = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (Q5) {
                const uint32_t lo = (qa[k] & M4) | ((hb[k] >> (2 * g)) & 0x01010101u) << 4;
                const uint32_t hi = ((qa[k] >> 4) & M4) | ((hb[k] >> (2 * g + 1)) & 0x01010101u) << 4;
                dlo = dp4a((int)lo, xl[k], dlo);
                dhi = dp4a((int)hi, xh[k], dhi);
            } else {
                /* q4_K: the high nibbles in place, as 16 x the code (unsigned bytes),
                 * so one instruction a word instead of a shift and a mask */
                dlo = dp4a((int)(qa[k] & M4), xl[k], dlo);
                dhi = dp4a_us(qa[k] & ~M4, xh[k], dhi);
            }
        }
        if (!Q5) dhi >>= 4; /* exact: every term is a multiple of 16 */
        const float d = h2f((uint16_t)(w.h.x & 0xffff)), dmin = h2f((uint16_t)(w.h.x >> 16));
        /* (sc * dot is exact in int: at most 63 * 32 * 15 * 127) */
        return d * (x.d0 * (float)(sc0 * dlo) + x.d1 * (float)(sc1 * dhi)) - dmin * ((float)m0 * x.s0 + (float)m1 * x.s1);
    }
};

#endif

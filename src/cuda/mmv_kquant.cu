/* mmv_kquant.cu - decode GEMV units for the K-quants (q4_K, q5_K, q6_K) with q8
 * activations and dp4a (framework: mmv.cuh; block layouts: FORMATS.md).
 *
 * q4_K / q5_K unit = one 64-value group g of a block: sub-blocks 2g (low nibbles)
 * and 2g+1 (high nibbles) of the same 32 bytes of qs, so one scale unpack serves
 * 64 values. Per unit: the 16-byte block header (d, dmin, scales; L1 hit for the
 * 3 sibling lanes) and 2x16 bytes of qs (+2x16 of qh for q5_K).
 *
 * q6_K unit = (half h, l0 in {0,16}) of a block: 16 bytes each of ql[64h+l0..],
 * ql[64h+32+l0..] and qh[32h+l0..] give 64 values (4 runs of 16 at l0 + 32*qq). */
#include "mmv.cuh"

/* The 6-bit scales and mins of sub-blocks 2g and 2g+1 from a block header h (d|dmin,
 * then the 12 packed bytes s0|s1|s2 in h.y, h.z, h.w), as the bytes [sc0, sc1, m0, m1].
 * Sub-blocks 0..3 keep theirs in the low 6 bits of s0 and s1; 4..7 in the nibbles of
 * s2 with the top 2 bits of s0 and s1 above. Branch-free: a lane's g is fixed (its
 * units are u0 + lane + 32k), so a branch on it splits every warp (the SASS of the
 * branching form ran both paths: ~26 instructions per unit, ~10 now). */
static __device__ __forceinline__ uint32_t k4_scales(const uint4 &h, int g) {
    const uint32_t b = (uint32_t)(g & 1) * 2;
    const uint32_t p = __byte_perm(h.y, h.z, b | (b + 1) << 4 | (b + 4) << 8 | (b + 5) << 12);
    const uint32_t l = __byte_perm(h.w, 0, b | (b + 1) << 4 | b << 8 | (b + 1) << 12);
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
    template <class L>
    static __device__ __forceinline__ void load(const uint8_t *row, int nb, int u, W &w) {
        const int b = u >> 2, g = u & 3;
        const uint8_t *blk = row + (int64_t)b * (Q5 ? 176 : 144);
        w.h = L::u128(blk);
        const uint8_t *qs = blk + (Q5 ? 48 : 16) + 32 * g;
        w.q0 = L::u128(qs);
        w.q1 = L::u128(qs + 16);
        if (Q5) {
            w.h0 = L::u128(blk + 16);
            w.h1 = L::u128(blk + 32);
        }
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
     * (mmv.cuh, mmv_lane_loadx, says why not the read-only path) */
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
    static __device__ __forceinline__ float dotx(const W &w, const X &x, int u) {
        const int g = u & 3;
        const uint32_t sm = k4_scales(w.h, g);
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

struct unit_q6k {
    enum { QK = 256, UPB = 4, UNR = 2 };
    struct W {
        uint4 a, b, h;
        uint2 sc;
        uint16_t d;
    };
    template <class L>
    static __device__ __forceinline__ void load(const uint8_t *row, int nb, int u, W &w) {
        const int b = u >> 2, hh = (u >> 1) & 1, l0 = (u & 1) * 16;
        const uint8_t *ql = row + (int64_t)b * 128 + 64 * hh + l0;
        w.a = L::u128(ql);
        w.b = L::u128(ql + 32);
        w.h = L::u128(row + (int64_t)nb * 128 + (int64_t)b * 64 + 32 * hh + l0);
        w.sc = L::u64(row + (int64_t)nb * 192 + (int64_t)b * 16 + 8 * hh);
        w.d = L::u16(row + (int64_t)nb * 208 + (int64_t)b * 2);
    }
    struct X {
        int4 x[4];
        float d[4];
        int s[4]; /* the sum of each x[qq]'s 16 values */
    };
    /* x.s from the codes (both layouts load the codes only) */
    static __device__ __forceinline__ void code_sums(X &x) {
#pragma unroll
        for (int qq = 0; qq < 4; qq++) {
            const int4 v = x.x[qq];
            x.s[qq] = dp4a(0x01010101, v.x, dp4a(0x01010101, v.y, dp4a(0x01010101, v.z, dp4a(0x01010101, v.w, 0))));
        }
    }
    template <class L = ld_g>
    static __device__ __forceinline__ void loadx(const cu_q8 &q, int64_t xoff, int u, X &x) {
        const int b = u >> 2, hh = (u >> 1) & 1, l0 = (u & 1) * 16;
        const int64_t xb = xoff + (int64_t)b * 256 + 128 * hh + l0;
#pragma unroll
        for (int qq = 0; qq < 4; qq++) x.x[qq] = L::i128(q.qs + xb + 32 * qq);
        const int64_t i32 = xb >> 5;
#pragma unroll
        for (int qq = 0; qq < 4; qq++) x.d[qq] = q.d[i32 + qq];
        code_sums(x);
    }
    /* the lane-major copy (common.cuh, cu_q8.xl6): five 16-byte plain loads */
    enum { XL = 6 };
    static __device__ __forceinline__ const uint8_t *xl(const cu_q8 &q) { return q.xl6; }
    static __device__ __forceinline__ void loadx_lane(const uint8_t *xl, int u, X &x) {
#pragma unroll
        for (int qq = 0; qq < 4; qq++) x.x[qq] = *((const int4 *)(xl + cu_xl_off(u, qq)));
        const float4 e = *((const float4 *)(xl + cu_xl_off(u, 4)));
        x.d[0] = e.x;
        x.d[1] = e.y;
        x.d[2] = e.z;
        x.d[3] = e.w;
        code_sums(x);
    }
    static __device__ __forceinline__ float dotx(const W &w, const X &xr, int u) {
        const int l0 = (u & 1) * 16;
        const uint32_t A[4] = {w.a.x, w.a.y, w.a.z, w.a.w};
        const uint32_t B[4] = {w.b.x, w.b.y, w.b.z, w.b.w};
        const uint32_t H[4] = {w.h.x, w.h.y, w.h.z, w.h.w};
        int dd[4] = {0, 0, 0, 0};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t q1 = (A[k] & M4) | ((H[k] & 0x03030303u) << 4);
            const uint32_t q2 = (B[k] & M4) | (((H[k] >> 2) & 0x03030303u) << 4);
            const uint32_t q3 = ((A[k] >> 4) & M4) | (((H[k] >> 4) & 0x03030303u) << 4);
            const uint32_t q4 = ((B[k] >> 4) & M4) | (((H[k] >> 6) & 0x03030303u) << 4);
            const int x0 = k == 0 ? xr.x[0].x : k == 1 ? xr.x[0].y : k == 2 ? xr.x[0].z : xr.x[0].w;
            const int x1 = k == 0 ? xr.x[1].x : k == 1 ? xr.x[1].y : k == 2 ? xr.x[1].z : xr.x[1].w;
            const int x2 = k == 0 ? xr.x[2].x : k == 1 ? xr.x[2].y : k == 2 ? xr.x[2].z : xr.x[2].w;
            const int x3 = k == 0 ? xr.x[3].x : k == 1 ? xr.x[3].y : k == 2 ? xr.x[3].z : xr.x[3].w;
            /* the codes as unsigned 0..63; the offset of 32 comes off below, as
             * 32 times the sum of the activations (3 instructions a word fewer than
             * subtracting it from every byte) */
            dd[0] = dp4a_us(q1, x0, dd[0]);
            dd[1] = dp4a_us(q2, x1, dd[1]);
            dd[2] = dp4a_us(q3, x2, dd[2]);
            dd[3] = dp4a_us(q4, x3, dd[3]);
        }
#pragma unroll
        for (int qq = 0; qq < 4; qq++) dd[qq] -= 32 * xr.s[qq];
        /* scales 8hh + l0/16 + 2qq: within the half's 8 bytes, index l0/16 + 2qq */
        const int so = l0 >> 4;
        const int8_t s0 = (int8_t)((w.sc.x >> (8 * so)) & 0xff);
        const int8_t s1 = (int8_t)((w.sc.x >> (8 * (so + 2))) & 0xff);
        const int8_t s2 = (int8_t)((w.sc.y >> (8 * so)) & 0xff);
        const int8_t s3 = (int8_t)((w.sc.y >> (8 * (so + 2))) & 0xff);
        /* (scale * dot is exact in int: at most 128 * 16 * 32 * 127 < 2^24) */
        const float r = xr.d[0] * (float)(s0 * dd[0]) + xr.d[1] * (float)(s1 * dd[1]) + xr.d[2] * (float)(s2 * dd[2]) +
                        xr.d[3] * (float)(s3 * dd[3]);
        return h2f(w.d) * r;
    }
};

void cu_mmv_q8_kquant(cu_state *S, uint32_t type, const cu_mmv_args *a) {
    switch (type) {
    case QTYPE_Q4_K: mmv_q8_launch<unit_k45<false>>(S, a, "mmv_q4_K"); break;
    case QTYPE_Q5_K: mmv_q8_launch<unit_k45<true>>(S, a, "mmv_q5_K"); break;
    case QTYPE_Q6_K: mmv_q8_launch<unit_q6k>(S, a, "mmv_q6_K"); break;
    default: break;
    }
}

void cu_mmv_prepare_kquant(int variant) {
    mmv_prepare_unit<unit_k45<false>>(variant);
    mmv_prepare_unit<unit_k45<true>>(variant);
    mmv_prepare_unit<unit_q6k>(variant);
    if (variant >= 3) {
        mmv_xstm_prepare<unit_k45<false>, unit_q6k>();
        mmv_xstm_prepare<unit_k45<true>, unit_q6k>();
    }
}

int cu_mmv_mixed_supported(uint32_t t1, uint32_t t2) {
    return (t1 == QTYPE_Q4_K || t1 == QTYPE_Q5_K) && t2 == QTYPE_Q6_K;
}

void cu_mmv_q8_mixed(cu_state *S, uint32_t t1, uint32_t t2, const cu_mmv_args *a) {
    int per_sm_cap = 0;
    int64_t xst_bytes = -1;
    const int v = cu_gemv_variant(S, &per_sm_cap, &xst_bytes);
    const int64_t bytes = (int64_t)(a->rows[0] + a->rows[1]) * a->stride + (int64_t)a->rows[2] * a->stride2;
    if (cu_mmv_mixed_supported(t1, t2) && xst_bytes >= 0 && (v == 4 || (v == 3 && bytes >= xst_bytes))) {
        if (t1 == QTYPE_Q4_K && mmv_xstm_launch<unit_k45<false>, unit_q6k>(S, a, "mmv_q4_K+q6_K")) return;
        if (t1 == QTYPE_Q5_K && mmv_xstm_launch<unit_k45<true>, unit_q6k>(S, a, "mmv_q5_K+q6_K")) return;
    }
    /* a launch per type: the first matrices, then the last */
    const int l = a->nmat - 1;
    cu_mmv_args b = *a, c = *a;
    b.nmat = l;
    b.stride2 = 0;
    cu_mmv_q8(S, t1, &b);
    c.w[0] = a->w[l];
    c.out[0] = a->out[l];
    c.bias[0] = a->bias[l];
    c.rows[0] = a->rows[l];
    c.nmat = 1;
    c.stride = a->stride2;
    c.stride2 = 0;
    cu_mmv_q8(S, t2, &c);
}

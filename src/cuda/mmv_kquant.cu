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
#include "mmv_k45.cuh"

struct unit_q6k {
    enum { QK = 256, UPB = 4, UNR = 2 };
    struct W {
        uint4 a, b, h;
        uint2 sc;
        uint16_t d;
    };
    /* Unit u's byte offsets in a row of nb blocks (ql, qh, scales, d) and its l0 / 16: what
     * the ring GEMVs keep per lane (mmv.cuh ring_units; mmv_k45.cuh says why). */
    struct P {
        int ql, qh, sc, d, lo;
    };
    static __device__ __forceinline__ P prep(int nb, int u) {
        const int b = u >> 2, hh = (u >> 1) & 1, l0 = (u & 1) * 16;
        return {b * 128 + 64 * hh + l0, nb * 128 + b * 64 + 32 * hh + l0, nb * 192 + b * 16 + 8 * hh, nb * 208 + b * 2,
                u & 1};
    }
    static __device__ __forceinline__ void pin(P &p) {
        asm("" : "+r"(p.ql), "+r"(p.qh), "+r"(p.sc), "+r"(p.d), "+r"(p.lo));
    }
    template <class L>
    static __device__ __forceinline__ void load_p(const uint8_t *row, const P &p, W &w) {
        w.a = L::u128(row + p.ql);
        w.b = L::u128(row + p.ql + 32);
        w.h = L::u128(row + p.qh);
        w.sc = L::u64(row + p.sc);
        w.d = L::u16(row + p.d);
    }
    template <class L>
    static __device__ __forceinline__ void load(const uint8_t *row, int nb, int u, W &w) {
        load_p<L>(row, prep(nb, u), w);
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
    static __device__ __forceinline__ float dotx(const W &w, const X &xr, int u) { return dot_p(w, xr, prep(0, u)); }
    static __device__ __forceinline__ float dot_p(const W &w, const X &xr, const P &p) {
        const int l0 = p.lo * 16;
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

void cu_mmv_q8_kquant(cu_ctx *S, uint32_t type, const cu_mmv_args *a) {
    switch (type) {
    case QTYPE_Q4_K: mmv_q8_launch<unit_k45<false>>(S, a, "mmv_q4_K"); break;
    case QTYPE_Q5_K: mmv_q8_launch<unit_k45<true>>(S, a, "mmv_q5_K"); break;
    case QTYPE_Q6_K: mmv_q8_launch<unit_q6k>(S, a, "mmv_q6_K"); break;
    default: break;
    }
}

void cu_mmv_prepare_kquant(void) {
    mmv_prepare_unit<unit_k45<false>>();
    mmv_prepare_unit<unit_k45<true>>();
    mmv_prepare_unit<unit_q6k>();
    mmv_xstm_prepare<unit_k45<false>, unit_q6k>();
    mmv_xstm_prepare<unit_k45<true>, unit_q6k>();
    mmv_xsg_prepare<unit_k45<false>>();
    mmv_xsg_prepare<unit_k45<true>>();
    mmv_xsg_prepare<unit_q6k>();
    mmv_xsgs_prepare<unit_k45<false>>();
    mmv_xsgs_prepare<unit_k45<true>>();
    mmv_xsgs_prepare<unit_q6k>();
}

int cu_mmv_q8_swiglu(cu_ctx *S, uint32_t type, const cu_mmv_args *a, float *h, const cu_q8 *hq) {
    switch (type) {
    case QTYPE_Q4_K: return mmv_xsg_launch<unit_k45<false>>(S, a, h, hq, "mmv_q4_K+swiglu");
    case QTYPE_Q5_K: return mmv_xsg_launch<unit_k45<true>>(S, a, h, hq, "mmv_q5_K+swiglu");
    case QTYPE_Q6_K: return mmv_xsg_launch<unit_q6k>(S, a, h, hq, "mmv_q6_K+swiglu");
    default: return 0;
    }
}

int cu_mmv_mixed_supported(uint32_t t1, uint32_t t2) {
    return (t1 == QTYPE_Q4_K || t1 == QTYPE_Q5_K) && t2 == QTYPE_Q6_K;
}

void cu_mmv_q8_mixed(cu_ctx *S, uint32_t t1, uint32_t t2, const cu_mmv_args *a) {
    const int64_t xst_bytes = mmv_xst_bytes(S);
    const int64_t bytes = (int64_t)(a->rows[0] + a->rows[1]) * a->stride + (int64_t)a->rows[2] * a->stride2;
    if (cu_mmv_mixed_supported(t1, t2) && xst_bytes >= 0 && bytes >= xst_bytes) {
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

/* mmv_q6k.cuh - the q6_K unit of the decode GEMVs (mmv_unit.cuh's interface), with q8
 * activations and dp4a; a header of its own, as mmv_k45.cuh, so that the GEMVs
 * (mmv_kquant.cu) and the coming MMQ kernels decode with the same code (block layout:
 * FORMATS.md).
 *
 * One unit = (half h, l0 in {0,16}) of a block: 16 bytes each of ql[64h+l0..],
 * ql[64h+32+l0..] and qh[32h+l0..] give 64 values (4 runs of 16 at l0 + 32*qq). */
#ifndef MINFER_CUDA_MMV_Q6K_CUH
#define MINFER_CUDA_MMV_Q6K_CUH

#include "mmv_unit.cuh"

struct unit_q6k {
    enum { QK = 256, UPB = 4, UNR = 2 };
    struct W {
        uint4 a, b, h;
        uint2 sc;
        uint16_t d;
    };
    /* Unit u's byte offsets in a row of nb blocks (ql, qh, scales, d) and its l0 / 16: what
     * the ring GEMVs keep per lane (mmv_ring.cuh ring_units; mmv_k45.cuh says why). */
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

#endif

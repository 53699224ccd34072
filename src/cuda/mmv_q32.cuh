/* mmv_q32.cuh - the decode GEMV units of the 32-value formats (unit_q4: q4_0, q4_1,
 * q5_0, q5_1; unit_q8_0) over the planar device rows (common.cuh), with q8 activations
 * and dp4a (mmv_unit.cuh's interface); a header of their own so that the GEMVs
 * (mmv_q.cu) and the coming MMQ kernels decode with the same code. One unit = one
 * block: 16 bytes of nibbles (32 for q8_0), the 32-bit high-bit word for q5, the f16
 * scale (and min). */
#ifndef MINFER_CUDA_MMV_Q32_CUH
#define MINFER_CUDA_MMV_Q32_CUH

#include "mmv_unit.cuh"

/* 4 high bits (one per value) -> bit 4 of 4 bytes. */
static __device__ __forceinline__ uint32_t spread4(uint32_t b4) { return ((b4 * 0x00204081u) & 0x01010101u) << 4; }

template <int T>
struct unit_q4 {
    enum { QK = 32, UPB = 1, UNR = 4 };
    enum { HAS_M = T == QTYPE_Q4_1 || T == QTYPE_Q5_1, HAS_H = T == QTYPE_Q5_0 || T == QTYPE_Q5_1 };
    struct W {
        uint4 qs;
        uint32_t qh;
        uint16_t d, m;
    };
    template <class L>
    static __device__ __forceinline__ void load(const uint8_t *row, int nb, int b, W &w) {
        w.qs = L::u128(row + (int64_t)b * 16);
        int64_t off = (int64_t)nb * 16;
        if (HAS_H) {
            w.qh = L::u32(row + off + (int64_t)b * 4);
            off += (int64_t)nb * 4;
        }
        w.d = L::u16(row + off + (int64_t)b * 2);
        if (HAS_M) w.m = L::u16(row + off + (int64_t)nb * 2 + (int64_t)b * 2);
    }
    struct X {
        int4 x0, x1;
        float d, s;
    };
    template <class L = ld_g>
    static __device__ __forceinline__ void loadx(const cu_q8 &q, int64_t xoff, int b, X &x) {
        const int64_t xb = xoff + (int64_t)b * 32;
        x.x0 = L::i128(q.qs + xb);
        x.x1 = L::i128(q.qs + xb + 16);
        x.d = q.d[xb >> 5];
        x.s = q.s[xb >> 4] + q.s[(xb >> 4) + 1];
    }
    static __device__ __forceinline__ float dotx(const W &w, const X &x, int) {
        const uint32_t Q[4] = {w.qs.x, w.qs.y, w.qs.z, w.qs.w};
        const int X0[4] = {x.x0.x, x.x0.y, x.x0.z, x.x0.w}, X1[4] = {x.x1.x, x.x1.y, x.x1.z, x.x1.w};
        int s = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t lo = Q[k] & M4, hi = (Q[k] >> 4) & M4;
            if (HAS_H) {
                lo |= spread4((w.qh >> (4 * k)) & 0xF);
                hi |= spread4((w.qh >> (16 + 4 * k)) & 0xF);
            }
            s = dp4a((int)lo, X0[k], s);
            s = dp4a((int)hi, X1[k], s);
        }
        const float d = h2f(w.d);
        const float dot = x.d * (float)s;
        if (T == QTYPE_Q4_0) return d * (dot - 8.0f * x.s);
        if (T == QTYPE_Q5_0) return d * (dot - 16.0f * x.s);
        return d * dot + h2f(w.m) * x.s;
    }
};

struct unit_q8_0 {
    enum { QK = 32, UPB = 1, UNR = 2 };
    struct W {
        uint4 a, b;
        uint16_t d;
    };
    template <class L>
    static __device__ __forceinline__ void load(const uint8_t *row, int nb, int b, W &w) {
        w.a = L::u128(row + (int64_t)b * 32);
        w.b = L::u128(row + (int64_t)b * 32 + 16);
        w.d = L::u16(row + (int64_t)nb * 32 + (int64_t)b * 2);
    }
    struct X {
        int4 x0, x1;
        float d;
    };
    template <class L = ld_g>
    static __device__ __forceinline__ void loadx(const cu_q8 &q, int64_t xoff, int b, X &x) {
        const int64_t xb = xoff + (int64_t)b * 32;
        x.x0 = L::i128(q.qs + xb);
        x.x1 = L::i128(q.qs + xb + 16);
        x.d = q.d[xb >> 5];
    }
    static __device__ __forceinline__ float dotx(const W &w, const X &x, int) {
        int s = 0;
        s = dp4a((int)w.a.x, x.x0.x, s);
        s = dp4a((int)w.a.y, x.x0.y, s);
        s = dp4a((int)w.a.z, x.x0.z, s);
        s = dp4a((int)w.a.w, x.x0.w, s);
        s = dp4a((int)w.b.x, x.x1.x, s);
        s = dp4a((int)w.b.y, x.x1.y, s);
        s = dp4a((int)w.b.z, x.x1.z, s);
        s = dp4a((int)w.b.w, x.x1.w, s);
        return h2f(w.d) * x.d * (float)s;
    }
};

#endif

/* mmv_q.cu - decode GEMV units for the 32-value formats (q4_0, q4_1, q5_0, q5_1,
 * q8_0) over the planar device rows (common.cuh), q8 activations and dp4a; and the
 * q8 GEMV dispatcher. One unit = one block: 16 bytes of nibbles (32 for q8_0),
 * the 32-bit high-bit word for q5, the f16 scale (and min). */
#include "mmv.cuh"

void cu_mmv_q8_kquant(cu_state *S, uint32_t type, const cu_mmv_args *a);
void cu_mmv_prepare_kquant(int variant, int budget);

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
    static __device__ __forceinline__ float dot(const W &w, const uint8_t *, int, int b, const cu_q8 &q,
                                                int64_t xoff) {
        const int64_t xb = xoff + (int64_t)b * 32;
        const int4 x0 = ldx16(q.qs + xb), x1 = ldx16(q.qs + xb + 16);
        const uint32_t Q[4] = {w.qs.x, w.qs.y, w.qs.z, w.qs.w};
        const int X0[4] = {x0.x, x0.y, x0.z, x0.w}, X1[4] = {x1.x, x1.y, x1.z, x1.w};
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
        const float xs = q.s[xb >> 4] + q.s[(xb >> 4) + 1];
        const float dot = q.d[xb >> 5] * (float)s;
        if (T == QTYPE_Q4_0) return d * (dot - 8.0f * xs);
        if (T == QTYPE_Q5_0) return d * (dot - 16.0f * xs);
        return d * dot + h2f(w.m) * xs;
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
    static __device__ __forceinline__ float dot(const W &w, const uint8_t *, int, int b, const cu_q8 &q,
                                                int64_t xoff) {
        const int64_t xb = xoff + (int64_t)b * 32;
        const int4 x0 = ldx16(q.qs + xb), x1 = ldx16(q.qs + xb + 16);
        int s = 0;
        s = dp4a((int)w.a.x, x0.x, s);
        s = dp4a((int)w.a.y, x0.y, s);
        s = dp4a((int)w.a.z, x0.z, s);
        s = dp4a((int)w.a.w, x0.w, s);
        s = dp4a((int)w.b.x, x1.x, s);
        s = dp4a((int)w.b.y, x1.y, s);
        s = dp4a((int)w.b.z, x1.z, s);
        s = dp4a((int)w.b.w, x1.w, s);
        return h2f(w.d) * q.d[xb >> 5] * (float)s;
    }
};

int cu_mmv_q8_supported(uint32_t type) {
    switch (type) {
    case QTYPE_Q4_0: case QTYPE_Q4_1: case QTYPE_Q5_0: case QTYPE_Q5_1: case QTYPE_Q8_0:
    case QTYPE_Q4_K: case QTYPE_Q5_K: case QTYPE_Q6_K:
        return 1;
    default:
        return 0;
    }
}

void cu_mmv_q8(cu_state *S, uint32_t type, const cu_mmv_args *a) {
    switch (type) {
    case QTYPE_Q4_0: mmv_q8_launch<unit_q4<QTYPE_Q4_0>>(S, a, "mmv_q4_0"); break;
    case QTYPE_Q4_1: mmv_q8_launch<unit_q4<QTYPE_Q4_1>>(S, a, "mmv_q4_1"); break;
    case QTYPE_Q5_0: mmv_q8_launch<unit_q4<QTYPE_Q5_0>>(S, a, "mmv_q5_0"); break;
    case QTYPE_Q5_1: mmv_q8_launch<unit_q4<QTYPE_Q5_1>>(S, a, "mmv_q5_1"); break;
    case QTYPE_Q8_0: mmv_q8_launch<unit_q8_0>(S, a, "mmv_q8_0"); break;
    default: cu_mmv_q8_kquant(S, type, a); break;
    }
}

void cu_mmv_prepare(int variant, int budget) {
    if (variant == 2) {
        mmv_pp_prepare<unit_q4<QTYPE_Q4_0>>();
        mmv_pp_prepare<unit_q4<QTYPE_Q4_1>>();
        mmv_pp_prepare<unit_q4<QTYPE_Q5_0>>();
        mmv_pp_prepare<unit_q4<QTYPE_Q5_1>>();
        mmv_pp_prepare<unit_q8_0>();
    } else if (variant == 3) {
        mmv_tma_prepare<unit_q4<QTYPE_Q4_0>>(budget);
        mmv_tma_prepare<unit_q4<QTYPE_Q4_1>>(budget);
        mmv_tma_prepare<unit_q4<QTYPE_Q5_0>>(budget);
        mmv_tma_prepare<unit_q4<QTYPE_Q5_1>>(budget);
        mmv_tma_prepare<unit_q8_0>(budget);
    }
    cu_mmv_prepare_kquant(variant, budget);
}

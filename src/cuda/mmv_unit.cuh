/* mmv_unit.cuh - what a weight format's *unit* is built from: the interface every unit
 * type provides (below), the integer dot products (dp4a, dp4a_us), the weight loaders
 * (ld_g: global memory; ld_s: a row in shared memory) and the nibble mask M4.
 * A unit is one format's decoder for the GEMVs: the bytes one lane decodes at once and
 * their dot with q8 activations. The units are one header per format family, apart
 * from the GEMV schedules (mmv.cuh), so that the coming MMQ kernels can take the same
 * decoders without the schedules: mmv_q32.cuh (q4_0, q4_1, q5_0, q5_1, q8_0),
 * mmv_k45.cuh (q4_K, q5_K), mmv_q6k.cuh (q6_K).
 *
 * A unit type U provides:
 *   QK, UPB        values per block, units per block
 *   UNR            units per lane in flight (v1)
 *   struct W       the registers of one unit's weights
 *   load<L>(row, nb, u, W&)              weights only; L = ld_g (global, read-only
 *                                        path) or ld_s (a row in shared memory)
 *   struct X       the activations of one unit
 *   loadx<L>(q, xoff, u, X&)             read them (after pdl_wait); xoff = c * K
 *   dotx(W, X, u) -> float               the unit's contribution
 * (mmv_dot, mmv_core.cuh, puts loadx and dotx together for the kernels that read the
 * activations afresh for every row: v1 and pp). */
#ifndef MINFER_CUDA_MMV_UNIT_CUH
#define MINFER_CUDA_MMV_UNIT_CUH

#include "common.cuh"

static __device__ __forceinline__ int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    return c;
#endif
}
/* dp4a of four unsigned bytes a with four signed bytes b */
static __device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
#if defined(__CUDA_ARCH__)
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    return c;
#endif
}

/* Weight loaders of the units: global memory through the read-only path, or a
 * row staged in shared memory (plain loads; the compiler emits LDS because the
 * pointer derives from the __shared__ ring). */
/* (weights, u*: with the streamed-weight L2 policy, l2_stream_policy; the asm is not
 * volatile, like __ldg, since weights may be read before pdl_wait; activations, i128,
 * are plain loads after the wait: the kernel before writes them while this grid is
 * resident, which the read-only path does not allow; mmv_lane_loadx) */
struct ld_g {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && MINFER_CUDA_L2_HINT
    static __device__ __forceinline__ uint4 u128(const uint8_t *p) {
        uint4 v;
        asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
            : "l"(p), "l"(l2_stream_policy()));
        return v;
    }
    static __device__ __forceinline__ uint2 u64(const uint8_t *p) {
        uint2 v;
        asm("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(l2_stream_policy()));
        return v;
    }
    static __device__ __forceinline__ uint32_t u32(const uint8_t *p) {
        uint32_t v;
        asm("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(l2_stream_policy()));
        return v;
    }
    static __device__ __forceinline__ uint16_t u16(const uint8_t *p) {
        uint16_t v;
        asm("ld.global.nc.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(l2_stream_policy()));
        return v;
    }
#else
    static __device__ __forceinline__ uint4 u128(const uint8_t *p) { return __ldg((const uint4 *)p); }
    static __device__ __forceinline__ uint2 u64(const uint8_t *p) { return __ldg((const uint2 *)p); }
    static __device__ __forceinline__ uint32_t u32(const uint8_t *p) { return __ldg((const unsigned int *)p); }
    static __device__ __forceinline__ uint16_t u16(const uint8_t *p) { return __ldg((const unsigned short *)p); }
#endif
    static __device__ __forceinline__ int4 i128(const int8_t *p) { return *(const int4 *)p; }
};
struct ld_s {
    static __device__ __forceinline__ uint4 u128(const uint8_t *p) { return *(const uint4 *)p; }
    static __device__ __forceinline__ uint2 u64(const uint8_t *p) { return *(const uint2 *)p; }
    static __device__ __forceinline__ uint32_t u32(const uint8_t *p) { return *(const uint32_t *)p; }
    static __device__ __forceinline__ uint16_t u16(const uint8_t *p) { return *(const uint16_t *)p; }
    static __device__ __forceinline__ int4 i128(const int8_t *p) { return *(const int4 *)p; }
};

#define M4 0x0F0F0F0Fu

#endif

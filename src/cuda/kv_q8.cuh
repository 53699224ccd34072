/* kv_q8.cuh - the q8_0 KV cache on the device (--cache-type-k/-v q8_0, cu_attn_args.kq/vq):
 * a cached row of hd values is hd / 32 blocks of ggml's block_q8_0, the layout the CPU
 * backend keeps (src/cpu/cpu.h), so both store the same bytes from the same values:
 *
 *   block (34 bytes): | f16 d | int8 qs[0] .. qs[31] |     value i = d * qs[i]
 *   row: block 0 (values 0..31) | block 1 (32..63) | ...   (hd % 32 == 0)
 *
 * A block starts at an even byte only (34 = 2 x 17), so the loads below are 16-bit:
 * wider ones would be misaligned. */
#ifndef MINFER_CUDA_KV_Q8_CUH
#define MINFER_CUDA_KV_Q8_CUH

#include "common.cuh"

#define KVQ8_BLOCK 34 /* sizeof(block_q8_0) */

/* Bytes of a cached row of hd values. */
static __host__ __device__ __forceinline__ int kvq8_row_bytes(int hd) { return hd / 32 * KVQ8_BLOCK; }

/* A warp stores one block: lane i holds value i. ggml's quantize_row_q8_0_ref, as the
 * CPU's cpu_kv_store_row: amax over the 32, d = amax / 127, q = roundf(x * (1 / d))
 * (IEEE division and rounding here too, so the same values give the same bytes).
 * All 32 lanes must call it (shuffles). */
static __device__ __forceinline__ void kvq8_store_block(uint8_t *blk, float x, int lane) {
    float amax = fabsf(x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blk[2 + lane] = (uint8_t)(int8_t)roundf(x * id);
    if (lane == 0) *(__half *)blk = __float2half_rn(d);
}

/* Values e .. e + 7 of a cached row (e % 8 == 0, so the 8 lie in one block) as f32. */
static __device__ __forceinline__ void kvq8_load8(const uint8_t *row, int e, float *f) {
    const uint8_t *blk = row + (e >> 5) * KVQ8_BLOCK;
    const float d = __half2float(*(const __half *)blk);
    const uint16_t *p = (const uint16_t *)(blk + 2 + (e & 31));
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint16_t u = p[k]; /* (little-endian: the lower address in the low byte) */
        f[2 * k] = d * (float)(int8_t)(u & 0xff);
        f[2 * k + 1] = d * (float)(int8_t)(u >> 8);
    }
}

/* Values e, e + 1 of a cached row (e even). */
static __device__ __forceinline__ float2 kvq8_load2(const uint8_t *row, int e) {
    const uint8_t *blk = row + (e >> 5) * KVQ8_BLOCK;
    const float d = __half2float(*(const __half *)blk);
    const uint16_t u = *(const uint16_t *)(blk + 2 + (e & 31));
    return make_float2(d * (float)(int8_t)(u & 0xff), d * (float)(int8_t)(u >> 8));
}

#endif

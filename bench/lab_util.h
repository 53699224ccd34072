/* bench/lab_util.h - host helpers the GPU kernel labs share (cuda_gemv.cu, cuda_mmq.cu):
 * a fixed-seed xorshift for random valid blocks, f16 bit patterns, and the normalised
 * error sqrt(sum (a-b)^2 / sum b^2) by which a variant is compared with its base. */
#ifndef MINFER_BENCH_LAB_UTIL_H
#define MINFER_BENCH_LAB_UTIL_H

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static inline uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static inline float frnd(void) { return (float)(rnd() & 0xffffff) / 16777216.0f; } /* [0,1) */
static inline uint16_t f16bits(float f) { return __half_as_ushort(__float2half(f)); }

/* 1e30 where a holds a NaN (an unwritten or broken output) */
static inline double nerr(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!(a[i] == a[i])) return 1e30;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif

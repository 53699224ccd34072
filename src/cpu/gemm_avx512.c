/* gemm_avx512.c - the AVX-512 F/BW kernel set (no VNNI): the kernels of
 * gemm_avx512.h with DP = vpmaddubsw + vpmaddwd + vpaddd on zmm. Runs where
 * AVX-512 F/BW/DQ/VL are present and VNNI is absent or turned off. */
#define MF_VNNI 0
#include "gemm_avx512.h"

/* Tokens per call: 4 (bench/cpu_gemm.c micro, 8 x 2048 hot, GMAC/s at 2 / 4
 * tokens: q4_K 150 / 150, q6_K 98 / 118, q8_0 117 / 125, q4_1 138 / 149). */
static int gemm_nt(uint32_t type) { (void)type; return 4; }
static int gemm_unpacked_nt(uint32_t type) { (void)type; return 4; }

const cpu_kernels cpu_kernels_avx512 = {
    .name = "avx512",
    .gemm = gemm_for,
    .gemm_nt = gemm_nt,
    .unpack_bytes = unpack_bytes,
    .unpack_group = unpack_group,
    .gemm_unpacked = gemm_unpacked_for,
    .gemm_unpacked_nt = gemm_unpacked_nt,
    .unpack_min = 32,   /* packed +20% at pp8, even at pp16, expanded +5-10% at pp64 (kernels.h) */
};

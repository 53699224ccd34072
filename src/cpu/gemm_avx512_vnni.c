/* gemm_avx512_vnni.c - the AVX-512 VNNI kernel set: the kernels of
 * gemm_avx512.h with DP = vpdpbusd (4 u8*s8 products summed into s32 in one
 * instruction). Runs where AVX-512 F/BW/DQ/VL and VNNI are present. */
#define MF_VNNI 1
#include "gemm_avx512.h"

/* Tokens per call: 4 for every type (bench/cpu_gemm.c micro, 8 x 2048 hot,
 * GMAC/s at 2 / 4 tokens: q4_K 207 / 234, q6_K 121 / 146, q8_0 156 / 174,
 * q4_1 182 / 207; the expanded q4_K kernel 226 / 245). */
static int gemm_nt(uint32_t type) { (void)type; return 4; }
static int gemm_unpacked_nt(uint32_t type) { (void)type; return 4; }

const cpu_kernels cpu_kernels_avx512vnni = {
    .name = "avx512-vnni",
    .gemm = gemm_for,
    .gemm_nt = gemm_nt,
    .unpack_bytes = unpack_bytes,
    .unpack_group = unpack_group,
    .gemm_unpacked = gemm_unpacked_for,
    .gemm_unpacked_nt = gemm_unpacked_nt,
    .unpack_min = 0,   /* never: packed +35% at pp8, +13% at pp64, +10% at pp256 (kernels.h) */
};

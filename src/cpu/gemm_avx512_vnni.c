/* gemm_avx512_vnni.c - the AVX-512 VNNI kernel set: the kernels of
 * gemm_avx512.h with DP = vpdpbusd (4 u8*s8 products summed into s32 in one
 * instruction). Runs where AVX-512 F/BW/DQ/VL and VNNI are present. */
#define MF_VNNI 1
#include "gemm_avx512.h"

/* Tokens per call (bench/cpu_gemm.c micro; see RESULTS.md). */
static int gemm_nt(uint32_t type) { return type == QTYPE_Q4_0 || type == QTYPE_Q4_1 || type == QTYPE_Q4_K ? 2 : 4; }
static int gemm_unpacked_nt(uint32_t type) { (void)type; return 4; }

const cpu_kernels cpu_kernels_avx512vnni = {
    .name = "avx512-vnni",
    .gemm = gemm_for,
    .gemm_nt = gemm_nt,
    .unpack_bytes = unpack_bytes,
    .unpack_group = unpack_group,
    .gemm_unpacked = gemm_unpacked_for,
    .gemm_unpacked_nt = gemm_unpacked_nt,
};

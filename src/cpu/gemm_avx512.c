/* gemm_avx512.c - the AVX-512 F/BW kernel set (no VNNI): the kernels of
 * gemm_avx512.h with DP = vpmaddubsw + vpmaddwd + vpaddd on zmm. Runs where
 * AVX-512 F/BW/DQ/VL are present and VNNI is absent or turned off. */
#define MF_VNNI 0
#include "gemm_avx512.h"

/* Tokens per call (bench/cpu_gemm.c micro; see RESULTS.md). */
static int gemm_nt(uint32_t type) { return type == QTYPE_Q4_0 || type == QTYPE_Q4_1 || type == QTYPE_Q4_K ? 2 : 4; }
static int gemm_unpacked_nt(uint32_t type) { (void)type; return 4; }

const cpu_kernels cpu_kernels_avx512 = {
    .name = "avx512",
    .gemm = gemm_for,
    .gemm_nt = gemm_nt,
    .unpack_bytes = unpack_bytes,
    .unpack_group = unpack_group,
    .gemm_unpacked = gemm_unpacked_for,
    .gemm_unpacked_nt = gemm_unpacked_nt,
};

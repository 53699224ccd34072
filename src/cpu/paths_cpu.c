/* paths_cpu.c - the CPU table of optional paths and the choice of kernel set. */
#include "paths_cpu.h"

#include <stdlib.h>

const mf_path cpu_paths[CPU_PATH_COUNT] = {
    [CPU_PATH_AVX512_VNNI] = { "avx512-vnni", "AVX-512 VNNI (vpdpbusd) GEMM kernels; off: AVX-512 BW", 1 },
    [CPU_PATH_AVX512] = { "avx512", "AVX-512 F/BW GEMM kernels (decode and prefill); off: AVX2", 1 },
    [CPU_PATH_AVX2] = { "avx2", "AVX2/FMA kernels and 8-bit activations; off: the scalar reference ops", 1 },
    [CPU_PATH_REPACK] = { "repack", "weights repacked at load into groups of 8 rows; off: row dots in place", 1 },
};
const int cpu_paths_n = CPU_PATH_COUNT;

int cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

/* __builtin_cpu_supports reports an AVX-512 feature only when XCR0 shows the OS
 * saves the opmask and zmm state (libgcc checks xgetbv). */
int cpu_has_avx512(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

int cpu_has_avx512vnni(void) {
#if defined(__x86_64__) || defined(__i386__)
    return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

static void choose(cpu_choice *c) {
    c->simd = c->on[CPU_PATH_AVX2] && cpu_has_avx2();
    c->repack = c->simd && c->on[CPU_PATH_REPACK];
    c->kernels = NULL;
    if (!c->simd) return;
    if (c->on[CPU_PATH_AVX512] && c->on[CPU_PATH_AVX512_VNNI] && cpu_has_avx512vnni()) c->kernels = &cpu_kernels_avx512vnni;
    else if (c->on[CPU_PATH_AVX512] && cpu_has_avx512()) c->kernels = &cpu_kernels_avx512;
    else c->kernels = &cpu_kernels_avx2;
}

int cpu_choose_list(cpu_choice *c, const char *list, mf_err *err) {
    int rc = paths_parse(cpu_paths, CPU_PATH_COUNT, list, "MINFER_CPU_DISABLE", c->on, err);
    if (rc != MF_OK) return rc;
    paths_disabled(cpu_paths, CPU_PATH_COUNT, c->on, c->disabled, sizeof c->disabled);
    choose(c);
    return MF_OK;
}

int cpu_choose(cpu_choice *c, mf_err *err) { return cpu_choose_list(c, getenv("MINFER_CPU_DISABLE"), err); }

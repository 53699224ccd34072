/* paths_cpu.h - the CPU backend's table of optional fast paths (paths.h) and
 * the kernel set it resolves to on this CPU.
 *
 *   MINFER_CPU_DISABLE=avx512-vnni   AVX-512 without VNNI
 *   MINFER_CPU_DISABLE=avx512        AVX2 kernels on an AVX-512 machine
 *   MINFER_CPU_DISABLE=avx2 (or all) the scalar reference ops
 *   MINFER_CPU_DISABLE=repack        quantized weights read in place (row dots)
 *
 * A path that is on but that the CPU lacks falls back silently to the next set;
 * the notice line (backend_cpu.c) names the set that runs. */
#ifndef MINFER_CPU_PATHS_CPU_H
#define MINFER_CPU_PATHS_CPU_H

#include "kernels.h"
#include "paths.h"

enum { CPU_PATH_AVX512_VNNI, CPU_PATH_AVX512, CPU_PATH_AVX2, CPU_PATH_REPACK, CPU_PATH_COUNT };

/* The table, for the backend, `minfer paths` (paths_print) and the README. */
extern const mf_path cpu_paths[CPU_PATH_COUNT];
extern const int cpu_paths_n;

/* What the CPU has (cpuid, and the OS saving the vector state). */
int cpu_has_avx2(void);        /* AVX2 + FMA + F16C */
int cpu_has_avx512(void);      /* AVX-512 F + BW + DQ + VL */
int cpu_has_avx512vnni(void);  /* the above + AVX-512 VNNI */

typedef struct cpu_choice {
    int on[CPU_PATH_COUNT];        /* the table after MINFER_CPU_DISABLE */
    int simd;                      /* 1: AVX2 ops, q8 activations, a packed kernel set */
    int repack;                    /* 1: x8-packed weights */
    const cpu_kernels *kernels;    /* the packed GEMM set; NULL when !simd */
    char disabled[128];            /* names turned off by the variable, space separated */
} cpu_choice;

/* Resolves MINFER_CPU_DISABLE against the CPU. MF_ERR_USAGE for an unknown name. */
int cpu_choose(cpu_choice *c, mf_err *err);
/* The same from a list given directly (tests). */
int cpu_choose_list(cpu_choice *c, const char *list, mf_err *err);

#endif

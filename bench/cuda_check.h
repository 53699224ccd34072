/* bench/cuda_check.h - CK(x) for the GPU labs and probes (cuda_gemv.cu, sm_rates.cu,
 * icache.cu): standalone programs, where a failed CUDA call ends the run with the
 * call, its error and the place. */
#ifndef MINFER_BENCH_CUDA_CHECK_H
#define MINFER_BENCH_CUDA_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif

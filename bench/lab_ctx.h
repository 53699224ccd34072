/* bench/lab_ctx.h - what the GPU kernel labs (cuda_gemv.cu, cuda_mmq.cu, cuda_mmf.cu)
 * supply in place of the backend when they compile the main tree's kernels into
 * themselves: the two hooks the launchers call (a lab ends at its first CUDA error) and
 * a launch context (common.cuh cu_ctx) on a stream of its own with the device's SM count
 * and PDL. Included after the main tree's sources; LAB_NAME (a string) names the lab in
 * the error line. */
#ifndef MINFER_BENCH_LAB_CTX_H
#define MINFER_BENCH_LAB_CTX_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"

void cu_launch_check(cu_ctx *S, const char *what, const char *file, int line) {}
void cu_record(cu_ctx *S, cudaError_t e, const char *expr, const char *file, int line) {
    fprintf(stderr, "%s: %s:%d: %s: %s\n", LAB_NAME, file, line, expr, cudaGetErrorString(e));
    exit(1);
}

/* S for device 0; its properties into *prop */
static void lab_ctx_base(cu_ctx *S, cudaDeviceProp *prop) {
    memset(S, 0, sizeof *S);
    CK(cudaStreamCreateWithFlags(&S->stream, cudaStreamNonBlocking));
    CK(cudaGetDeviceProperties(prop, 0));
    S->num_sms = prop->multiProcessorCount;
    S->pdl = prop->major >= 9;
}

#endif

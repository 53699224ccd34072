/* backend_cuda.h - extras of the CUDA backend beyond backend.h, for the GPU tests
 * (tests/cuda/) and tools. Plain C. */
#ifndef MINFER_BACKEND_CUDA_H
#define MINFER_BACKEND_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"
#include "cuda/plan.h"

/* The shared memory the kernels' largest configurations take, from their launchers (the
 * planner's cu_kernel_needs_table must equal it: tests/cuda/test_cuda_ops.c). */
void cuda_kernel_needs(cu_kernel_needs *k);

/* The first CUDA error the backend recorded (ops return void): MF_OK or
 * MF_ERR_DEVICE with err filled. Clears it. */
int cuda_backend_status(mf_backend *be, mf_err *err);
/* Uploads one weight (tests build weights outside a model); w->dev is set and
 * freed with the backend. The backend must be initialised. */
int cuda_backend_upload(mf_backend *be, mf_weight *w, mf_err *err);
/* Synchronous host -> device copy into backend memory (tests). */
void cuda_backend_h2d(mf_backend *be, void *dst, const void *src, size_t nbytes);
/* Device memory in use: weights, KV cache, scratch (backend + forward). */
void cuda_backend_memory(mf_backend *be, uint64_t *weights, uint64_t *kv, uint64_t *scratch);
/* Launch census: kernels launched since init, and how many of the decode steps
 * ran as graph replays. */
void cuda_backend_census(mf_backend *be, uint64_t *launches, uint64_t *graph_replays, uint64_t *eager_steps);

#ifdef __cplusplus
}
#endif

#endif

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
/* The experts' kernels alone (moe.cu), on a backend initialised with a model that has
 * experts. Route: scores [n][E] -> each slot's expert and weight (ids, w [n*k]), its row in
 * expert order (pos [n*k]), each row's token (src [n*k]), the groups (expert, first row,
 * rows, 0) [min(E, n*k)][4] and tiles [n*k/64 rounded up + min(E, n*k)][4], padded with
 * zeros. FFN: out [n][dim] = the experts' sum for x [n][dim] (host memory) with F's weights
 * on the device, kind a cu_moe_kind (CU_MOE_MMQ needs a batch wider than 8). */
int cuda_moe_route_test(mf_backend *be, const float *scores, int n, int E, int k, int32_t *ids, float *w,
                        int32_t *pos, int32_t *src, int32_t *groups, int32_t *tiles, mf_err *err);
int cuda_moe_ffn_test(mf_backend *be, const mf_ffn *F, int kind, const float *x, int n, float *out, mf_err *err);

#ifdef __cplusplus
}
#endif

#endif

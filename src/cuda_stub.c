/* cuda_stub.c - the CUDA entry points of backend.h for builds without CUDA
 * (CUDA=0, or the sanitizer build of the tests). With CUDA they live in
 * src/cuda/backend_cuda.cu. */
#include "backend.h"

#ifndef MINFER_CUDA
mf_backend *cuda_backend_new(int device, mf_err *err) {
    (void)device;
    mf_fail(err, MF_ERR_DEVICE, "built without CUDA");
    return NULL;
}

int cuda_device_count(void) { return 0; }

int cuda_plan_print(mf_backend *be, void *file, mf_err *err) {
    (void)be, (void)file;
    return mf_fail(err, MF_ERR_DEVICE, "built without CUDA");
}

void *cuda_tp_new(mf_backend **bes, struct mf_forward **fws, int n, mf_err *err) {
    (void)bes, (void)fws, (void)n;
    mf_fail(err, MF_ERR_DEVICE, "built without CUDA");
    return NULL;
}

void cuda_tp_free(void *group) { (void)group; }
#else
/* Keeps this translation unit non-empty (ISO C) when CUDA provides the symbols. */
typedef int cuda_stub_unused;
#endif

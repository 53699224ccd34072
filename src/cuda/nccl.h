/* nccl.h - NCCL, the CUDA toolkit's collective library, loaded at run time for the
 * multi-GPU path (tensor parallelism: an all-reduce after each row-split GEMM; issue 34).
 *
 * Loaded (dlopen of libnccl.so.2, found as the dynamic linker finds libraries) rather than
 * linked: CUDA 13's libnccl.so.2 is 218 MB, more than a GPU-machine call carries, and
 * those machines' image brings its own (PyTorch's nvidia-nccl wheel; LD_LIBRARY_PATH
 * names its lib folder); a build or a machine without it keeps every one-GPU path.
 * Declares only the ABI it uses, as nccl.h 2.x has it: the 128-byte unique id, the
 * communicator as an opaque pointer, ncclFloat32 = 7, ncclSum = 0, results as int
 * (0 = ncclSuccess); the CUDA stream as a void pointer. Plain C. */
#ifndef MINFER_CUDA_NCCL_H
#define MINFER_CUDA_NCCL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MF_NCCL_FLOAT32 7
#define MF_NCCL_SUM 0

typedef struct mf_nccl_id {
    char internal[128];
} mf_nccl_id;

typedef struct mf_nccl {
    void *lib;
    int version; /* NCCL_VERSION_CODE of the loaded library: major * 10000 + minor * 100 + patch */
    int (*get_version)(int *version);
    const char *(*error_string)(int result);
    int (*get_unique_id)(mf_nccl_id *id);
    int (*comm_init_rank)(void **comm, int nranks, mf_nccl_id id, int rank);
    int (*comm_init_all)(void **comms, int ndev, const int *devlist);
    int (*comm_destroy)(void *comm);
    int (*all_reduce)(const void *send, void *recv, size_t count, int datatype, int op, void *comm, void *stream);
    int (*group_start)(void);
    int (*group_end)(void);
} mf_nccl;

/* 0 with every entry point resolved, else -1 with the reason in err (no library, a
 * missing symbol, a version below 2.0). */
int mf_nccl_load(mf_nccl *n, char *err, size_t cap);
void mf_nccl_unload(mf_nccl *n);

#ifdef __cplusplus
}
#endif
#endif

/* tp_nccl.cu - tensor parallelism (src/tp.h) over CUDA backends, one GPU each: NCCL
 * loaded at run time (nccl.h), one communicator a rank (ncclCommInitAll over the ranks'
 * devices), and the forward's reduce (mf_forward.reduce) an in-place ncclAllReduce of
 * the partial sums on the rank's stream. The reduce is enqueued like a kernel, so a
 * decode step captured as a CUDA graph holds it too (NCCL 2.9+ operations are
 * capturable; each rank captures on its own thread and device, thread-local capture
 * mode: graph.cu). NVLink multicast (NVLS) stays off unless NCCL_NVLS_ENABLE says
 * otherwise: on shared hosts it can take GPUs out of service. */
#include "backend.cuh"
#include "cuda/nccl.h"
#include "forward.h"
#include "tp.h"

#include <stdlib.h>
#include <string.h>

struct cu_tp_group {
    mf_nccl nccl;
    int n;
    void *comm[MF_TP_MAX];
    mf_backend *be[MF_TP_MAX];
};

static void cu_tp_reduce(mf_forward *fw, float *x, int64_t n) {
    cu_state *S = cu_st(fw->be);
    if (!S->tp_nccl || !S->tp_comm) {
        cu_record(S, cudaErrorInvalidValue, "tensor-parallel reduce without a communicator", __FILE__, __LINE__);
        return;
    }
    cu_settle(S); /* (nothing is owed here: the blocks reduce before their owed add) */
    const int rc = S->tp_nccl->all_reduce(x, x, (size_t)n, MF_NCCL_FLOAT32, MF_NCCL_SUM, S->tp_comm, (void *)S->stream);
    if (rc != 0) {
        char what[160];
        snprintf(what, sizeof what, "ncclAllReduce: %s", S->tp_nccl->error_string(rc));
        cu_record(S, cudaErrorUnknown, what, __FILE__, __LINE__);
        return;
    }
    S->n.allreduce++;
}

extern "C" void *cuda_tp_new(mf_backend **bes, mf_forward **fws, int n, mf_err *err) {
    if (n < 1 || n > MF_TP_MAX) {
        mf_fail(err, MF_ERR_USAGE, "tensor parallelism over %d GPUs (1..%d)", n, MF_TP_MAX);
        return NULL;
    }
    cu_tp_group *g = (cu_tp_group *)calloc(1, sizeof *g);
    if (!g) {
        mf_fail(err, MF_ERR_NOMEM, "out of memory");
        return NULL;
    }
    char why[256];
    if (mf_nccl_load(&g->nccl, why, sizeof why)) {
        free(g);
        mf_fail(err, MF_ERR_DEVICE, "--gpus %d: %s", n, why);
        return NULL;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    int devs[MF_TP_MAX];
    for (int r = 0; r < n; r++) devs[r] = cu_st(bes[r])->device;
    const int rc = g->nccl.comm_init_all(g->comm, n, devs);
    if (rc != 0) {
        mf_fail(err, MF_ERR_DEVICE, "--gpus %d: ncclCommInitAll: %s (NCCL %d)", n, g->nccl.error_string(rc),
                g->nccl.version);
        mf_nccl_unload(&g->nccl);
        free(g);
        return NULL;
    }
    g->n = n;
    for (int r = 0; r < n; r++) {
        cu_state *S = cu_st(bes[r]);
        g->be[r] = bes[r];
        S->tp_nccl = &g->nccl;
        S->tp_comm = g->comm[r];
        fws[r]->reduce = cu_tp_reduce;
        fws[r]->reduce_ctx = g;
    }
    if (!mf_log_quiet)
        fprintf(stderr, "minfer/cuda: tensor parallel: NCCL %d.%d.%d, %d ranks on devices", g->nccl.version / 10000,
                g->nccl.version / 100 % 100, g->nccl.version % 100, n);
    for (int r = 0; r < n && !mf_log_quiet; r++) fprintf(stderr, " %d", devs[r]);
    if (!mf_log_quiet) fputc('\n', stderr);
    return g;
}

extern "C" void cuda_tp_free(void *p) {
    cu_tp_group *g = (cu_tp_group *)p;
    if (!g) return;
    for (int r = 0; r < g->n; r++) {
        cu_state *S = cu_st(g->be[r]);
        cudaSetDevice(S->device);
        cudaStreamSynchronize(S->stream);
        g->nccl.comm_destroy(g->comm[r]);
        S->tp_nccl = NULL;
        S->tp_comm = NULL;
    }
    mf_nccl_unload(&g->nccl);
    free(g);
}

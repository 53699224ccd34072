/* trace.cu - the host side of the block timeline (MINFER_CUDA_TRACE, common.cuh):
 * MINFER_CUDA_TRACE=FILE on a binary built with -DMINFER_CUDA_TRACE=1 keeps a device
 * buffer of CU_TRACE_GRIDS x CU_TRACE_BLOCKS slots (the last ~4096 grids: about 15
 * decode steps of a 7B), the names of the last captured graph's launches in order,
 * and at the end writes both to FILE as text:
 *   name I NAME                      the graph's I-th launch
 *   rec GRID T_START T_WAIT T_END SMID BLOCK MARK0 MARK1 MARK2   one block (ns of the global timer;
 *       T_WAIT 0 for a block that returned before its wait, T_END 0 where the kernel
 *       has no trace_end or the block left by another way), then MARK0..2: trace_mark(k)
 *       times (0 where not reached)
 * bench/trace_step.py turns that into a per-kernel table of one decode step. A
 * timing tool: every block's thread 0 does two to five extra stores, every warp of a
 * kernel with trace_end one reduction; the trace build runs 3-8% slower. */
#include "common.cuh"

#include <stdlib.h>
#include <string.h>

#define CU_TRACE_MAXTU 32

static int (*g_attach[CU_TRACE_MAXTU])(void *);
static int g_nattach;

int cu_trace_register(int (*attach)(void *buf)) {
    if (g_nattach < CU_TRACE_MAXTU) g_attach[g_nattach++] = attach;
    return 0;
}

struct cu_trace {
    cu_trace_rec *buf;
    char *path;
    char **names;
    int nnames, capnames;
};

static const size_t TRACE_SLOTS = (size_t)CU_TRACE_GRIDS * CU_TRACE_BLOCKS;

cu_trace *cu_trace_open(const char *path) {
    if (!MINFER_CUDA_TRACE) {
        mf_log("minfer/cuda: MINFER_CUDA_TRACE is set but this build has no block timeline "
               "(build with NVCCFLAGS+=-DMINFER_CUDA_TRACE=1, e.g. STAGE_TRACE=1 tools/stage_device.sh)");
        return NULL;
    }
    cu_trace *T = (cu_trace *)mf_xcalloc(1, sizeof *T);
    if (cudaMalloc(&T->buf, TRACE_SLOTS * sizeof(cu_trace_rec)) != cudaSuccess ||
        cudaMemset(T->buf, 0, TRACE_SLOTS * sizeof(cu_trace_rec)) != cudaSuccess) {
        mf_log("minfer/cuda: trace: cannot allocate %zu MiB of trace slots", TRACE_SLOTS * sizeof(cu_trace_rec) >> 20);
        (void)cudaGetLastError();
        if (T->buf) cudaFree(T->buf);
        free(T);
        return NULL;
    }
    for (int i = 0; i < g_nattach; i++)
        if (g_attach[i](T->buf) != 0) mf_log("minfer/cuda: trace: attaching translation unit %d failed", i);
    T->path = mf_xstrdup(path);
    mf_log("minfer/cuda: trace: block timeline on (%d translation units), written to %s at exit", g_nattach, path);
    return T;
}

void cu_trace_capture_begin(cu_trace *T) {
    if (!T) return;
    for (int i = 0; i < T->nnames; i++) free(T->names[i]);
    T->nnames = 0;
}

void cu_trace_launch(cu_trace *T, const char *what) {
    if (!T) return;
    if (T->nnames == T->capnames) {
        T->capnames = T->capnames ? 2 * T->capnames : 512;
        T->names = (char **)mf_xrealloc(T->names, (size_t)T->capnames * sizeof(char *));
    }
    T->names[T->nnames++] = mf_xstrdup(what);
}

void cu_trace_close(cu_trace *T) {
    if (!T) return;
    cu_trace_rec *h = (cu_trace_rec *)malloc(TRACE_SLOTS * sizeof(cu_trace_rec));
    FILE *f = fopen(T->path, "w");
    if (!h || !f || cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(h, T->buf, TRACE_SLOTS * sizeof(cu_trace_rec), cudaMemcpyDeviceToHost) != cudaSuccess) {
        mf_log("minfer/cuda: trace: cannot write %s", T->path);
        (void)cudaGetLastError();
    } else {
        size_t n = 0;
        for (int i = 0; i < T->nnames; i++) fprintf(f, "name %d %s\n", i, T->names[i]);
        for (size_t i = 0; i < TRACE_SLOTS; i++)
            if (h[i].t_start) {
                fprintf(f, "rec %llu %llu %llu %llu %u %u %llu %llu %llu\n", h[i].grid, h[i].t_start, h[i].t_wait,
                        h[i].t_end, h[i].smid, h[i].block, h[i].mark[0], h[i].mark[1], h[i].mark[2]);
                n++;
            }
        mf_log("minfer/cuda: trace: %zu block records, %d graph launches named, in %s", n, T->nnames, T->path);
    }
    if (f) fclose(f);
    free(h);
    for (int i = 0; i < T->nnames; i++) free(T->names[i]);
    free(T->names);
    free(T->path);
    cudaFree(T->buf);
    free(T);
}

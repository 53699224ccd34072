/* nccl.c - NCCL loaded at run time (nccl.h says why). */
#include "cuda/nccl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int mf_nccl_load(mf_nccl *n, char *err, size_t cap) {
    memset(n, 0, sizeof *n);
    n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        snprintf(err, cap, "NCCL not found (libnccl.so.2: %s); the multi-GPU path needs it on the library path", dlerror());
        return -1;
    }
    struct {
        const char *name;
        void **fn;
    } syms[] = {
        { "ncclGetVersion", (void **)&n->get_version },     { "ncclGetErrorString", (void **)&n->error_string },
        { "ncclGetUniqueId", (void **)&n->get_unique_id },  { "ncclCommInitRank", (void **)&n->comm_init_rank },
        { "ncclCommDestroy", (void **)&n->comm_destroy },   { "ncclAllReduce", (void **)&n->all_reduce },
        { "ncclCommInitAll", (void **)&n->comm_init_all },
        { "ncclGroupStart", (void **)&n->group_start },     { "ncclGroupEnd", (void **)&n->group_end },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].fn = dlsym(n->lib, syms[i].name);
        if (!*syms[i].fn) {
            snprintf(err, cap, "NCCL: libnccl.so.2 has no %s", syms[i].name);
            mf_nccl_unload(n);
            return -1;
        }
    }
    if (n->get_version(&n->version) != 0 || n->version < 20000) {
        snprintf(err, cap, "NCCL: version %d; the multi-GPU path needs 2.x", n->version);
        mf_nccl_unload(n);
        return -1;
    }
    return 0;
}

void mf_nccl_unload(mf_nccl *n) {
    if (n->lib) dlclose(n->lib);
    memset(n, 0, sizeof *n);
}

/* test_nccl.c - NCCL loaded at run time (src/cuda/nccl.c): where the library is on the
 * library path, every entry point the multi-GPU path uses resolves, the version is 2.x,
 * and its error strings come back through the declared ABI; where it is not, a skip with
 * the loader's message (the one a user would see). No GPU needed. */
#include "test.h"

#include <string.h>

#include "cuda/nccl.h"

int main(void) {
    mf_nccl n;
    char err[512] = "";
    if (mf_nccl_load(&n, err, sizeof err) != 0) {
        CHECK(strstr(err, "NCCL") != NULL, "the loader says what is missing: %s", err);
        SKIP("%s", err);
        return test_summary("nccl");
    }
    printf("NCCL %d.%d.%d loaded\n", n.version / 10000, n.version / 100 % 100, n.version % 100);
    CHECK(n.version >= 20000 && n.version < 100000, "version code %d", n.version);
    const char *ok = n.error_string(0);
    CHECK(ok && strlen(ok) > 0, "ncclGetErrorString(ncclSuccess) = '%s'", ok ? ok : "(null)");
    const char *bad = n.error_string(4); /* ncclInvalidArgument */
    CHECK(bad && strcmp(bad, ok) != 0, "ncclGetErrorString(ncclInvalidArgument) = '%s'", bad ? bad : "(null)");
    mf_nccl_unload(&n);
    CHECK(n.lib == NULL, "unloaded");
    return test_summary("nccl");
}

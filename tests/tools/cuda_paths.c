/* cuda_paths.c - prints the CUDA backend's optional paths, one name a line (the
 * table of src/cuda/paths.c), for tests/run_cuda.sh, which runs each one off. */
#include <stdio.h>

#include "cuda/paths.h"

int main(void) {
    for (int i = 0; i < CU_PATH_COUNT; i++) printf("%s\n", cu_paths[i].name);
    return 0;
}

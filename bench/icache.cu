/* bench/icache.cu - what does a kernel's first pass over its code cost, and does the
 * code stay cached from one launch to the next? A probe for the decode step, where
 * every kernel runs once per layer between seven others (bench/RESULTS.md, call 53:
 * the small kernels ran 0.2-0.5 us shorter after a dry pass over their own code).
 *
 *   icache [REPEATS]
 *
 * Kernel straight<N, SEED>: N independent-chain FFMAs with immediate constants, fully
 * unrolled, so N x 16 bytes of straight-line code executed once per warp (SEED gives
 * another copy of the same size with other constants: other code). One block of 4
 * warps (one per SM sub-partition) per SM. Each block times itself with clock64 from
 * its first instruction to its last, so launch latency is not counted, only the
 * execution, whose fetch of not-yet-cached code is the difference between the rows:
 *   cold   the first launch of that kernel in the process
 *   same   launched again right after itself
 *   tiny   launched after a one-instruction kernel (does any launch flush the cache?)
 *   other  launched after another straight<N> of the same size (capacity: 2 x N x 16 B)
 *   3x     after two others (3 x N x 16 B)
 * Printed per N: the median over blocks of each launch's cycles, averaged over the
 * launches of that row, and the cycles per 128-byte line of code for cold and other.
 * Build: make BUILD=... bench/icache (CUDA=1); runs on any sm_80+ GPU. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "cuda_check.h"

#define THREADS 128

template <int N, int SEED>
__global__ void __launch_bounds__(THREADS) straight(float b, float *out, long long *cyc) {
    const long long c0 = clock64();
    float a[8];
#pragma unroll
    for (int k = 0; k < 8; k++) a[k] = (float)(threadIdx.x + k);
#pragma unroll
    for (int i = 0; i < N; i++) a[i & 7] = fmaf(a[i & 7], 1.0f + (float)((SEED * 7919 + i * 13) % 997) * 1e-6f, b);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) s += a[k];
    out[blockIdx.x * THREADS + threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) cyc[blockIdx.x] = clock64() - c0;
}

__global__ void tiny(float *out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = 0.0f;
}

typedef void (*kern)(float, float *, long long *);

static int g_sms;
static float *g_out;
static long long *g_cyc;

/* one launch of k; the median over blocks of its cycles */
static double launch(kern k) {
    k<<<g_sms, THREADS>>>(1e-3f, g_out, g_cyc);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<long long> c(g_sms);
    CK(cudaMemcpy(c.data(), g_cyc, sizeof(long long) * g_sms, cudaMemcpyDeviceToHost));
    std::sort(c.begin(), c.end());
    return (double)c[g_sms / 2];
}
static void launch_tiny() {
    tiny<<<g_sms, 32>>>(g_out);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
}

template <int N>
static void probe(int reps) {
    kern a = straight<N, 1>, b = straight<N, 2>, c = straight<N, 3>;
    const double cold = launch(a);
    double same = 0, tin = 0, oth = 0, three = 0;
    for (int r = 0; r < reps; r++) same += launch(a);
    for (int r = 0; r < reps; r++) {
        launch_tiny();
        tin += launch(a);
    }
    (void)launch(b);
    for (int r = 0; r < reps; r++) {
        (void)launch(b);
        oth += launch(a);
    }
    (void)launch(c);
    for (int r = 0; r < reps; r++) {
        (void)launch(b);
        (void)launch(c);
        three += launch(a);
    }
    same /= reps, tin /= reps, oth /= reps, three /= reps;
    const double lines = N * 16.0 / 128.0;
    printf("N %5d (%3d KB of code): cycles cold %8.0f  same %8.0f  tiny %8.0f  other %8.0f  3x %8.0f | "
           "extra cycles per 128-B line: cold %.1f other %.1f 3x %.1f\n",
           N, N * 16 / 1024, cold, same, tin, oth, three, (cold - same) / lines, (oth - same) / lines,
           (three - same) / lines);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    int dev = 0, clk = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev));
    CK(cudaMalloc(&g_out, sizeof(float) * g_sms * THREADS));
    CK(cudaMalloc(&g_cyc, sizeof(long long) * g_sms));
    printf("icache: %d SMs, %d blocks of %d threads, clock attribute %d MHz, %d launches per row\n", g_sms, g_sms,
           THREADS, clk / 1000, reps);
    probe<256>(reps);
    probe<1024>(reps);
    probe<2048>(reps);
    probe<4096>(reps);
    probe<8192>(reps);
    return 0;
}

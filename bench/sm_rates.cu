/* bench/sm_rates.cu - do the GPU's SMs stream memory at different rates, and do they
 * keep them? A probe for the ring GEMVs' tails (bench/RESULTS.md, 2026-11-30: blocks
 * with equal rows end 2.8-4.3 us apart, whole SMs among the last).
 *
 *   sm_rates [MB] [REPEATS]
 *   sm_rates fanin [REPEATS]
 *
 * 1. GPC map: blocks of one thread-block cluster share a GPC, so launches of clusters
 *    (sizes 2..16, one block per SM) join SMs into groups (union-find over the
 *    launches). Printed: the groups and their sizes.
 * 2. Rates: a persistent grid (2 blocks of 8 warps per SM, as the xst GEMVs) streams
 *    MB megabytes with per-warp TMA rings (cp.async.bulk, 2 slots of 4 KB, warp w takes
 *    chunks w, w + W, ... as the GEMVs take rows), REPEATS times. Each block records its
 *    SM and its end relative to the launch's first start (%globaltimer). Printed: the
 *    GB/s, the spread of block ends, each SM's mean lateness (its blocks' mean end less
 *    the launch's mean end), the correlation of that lateness between the odd and even
 *    launches (do SMs keep their rates?) and the mean lateness per GPC group size.
 * 3. fanin: the latency of 2112 warps all loading the same 5.6 KB at one instant (the
 *    x-stationary GEMVs' activation loads after their wait), against the same loads
 *    spread over 2..2112 copies of the data (k_fanin below).
 * Needs sm_90 (bulk copies); build: make BUILD=... bench/sm-rates (CUDA=1). */
#include "cuda/ptx.cuh" /* smem_u32, mbar_init_ring, mbar_wait: the engine's ring pieces */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"

#define WARPS 8
#define CHUNK 4096
#define DEPTH 2

static __device__ __forceinline__ unsigned smid(void) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
static __device__ __forceinline__ uint64_t gtime(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* one block per SM (its shared memory sees to that); cluster dims set at launch */
static __global__ void k_cluster(unsigned *sm) {
    extern __shared__ uint8_t pad[];
    if (threadIdx.x == 0) {
        pad[0] = 1;
        sm[blockIdx.x] = smid();
    }
}

/* (sm_90) bytes from global into shared memory, completing on bar: tma_row of mmv_ring.cuh
 * without its L2 evict-first hint, so the probe measures the plain copy */
static __device__ __forceinline__ void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

static __global__ void __launch_bounds__(WARPS * 32) k_stream(const uint8_t *src, int64_t nchunks, unsigned *sm,
                                                                uint64_t *t0, uint64_t *t1, unsigned *sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t dyn[]; /* the rings: 64 KB, over the static limit */
    uint8_t(*slot)[DEPTH][CHUNK] = (uint8_t(*)[DEPTH][CHUNK])dyn;
    __shared__ __align__(8) uint64_t bar[WARPS][DEPTH];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t W = (int64_t)gridDim.x * WARPS, gw = (int64_t)blockIdx.x * WARPS + warp;
    if (threadIdx.x == 0) {
        sm[blockIdx.x] = smid();
        t0[blockIdx.x] = gtime();
    }
    const int64_t n = gw < nchunks ? (nchunks - gw + W - 1) / W : 0;
    if (lane == 0) mbar_init_ring(bar[warp], DEPTH);
    __syncwarp();
    auto request = [&](int64_t i) {
        const int s = (int)(i % DEPTH);
        bulk_copy(slot[warp][s], src + (gw + i * W) * CHUNK, CHUNK, &bar[warp][s]);
    };
    if (lane < DEPTH && lane < n) request(lane);
    unsigned acc = 0;
    for (int64_t i = 0; i < n; i++) {
        const int s = (int)(i % DEPTH);
        mbar_wait(&bar[warp][s], (uint32_t)((i / DEPTH) & 1));
        const uint4 *v = (const uint4 *)slot[warp][s];
        for (int k = lane; k < CHUNK / 16; k += 32) acc ^= v[k].x ^ v[k].w;
        __syncwarp();
        if (lane == 0 && i + DEPTH < n) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            request(i + DEPTH);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) t1[blockIdx.x] = gtime();
    if (acc == 0x12345678u) sink[0] = acc; /* keeps the reads */
#endif
}


/* ---- fan-in: 2112 warps read the same few KB (the GEMVs' activations) ----
 * Per warp the loads of a q4_K 4096-wide row's activations as the x-stationary GEMVs
 * issue them (mmv_kquant.cu loadx, UPL 2: 64 B of q8 per unit, the unit's two scales
 * and four 16-value sums), from copy (warp % copies) of the 5.6 KB, all warps released
 * at one instant (a %globaltimer deadline); each warp's latency from release to its
 * last value. */
#define FAN_QS 4096
#define FAN_BYTES (FAN_QS + FAN_QS / 32 * 4 + FAN_QS / 16 * 4)
static __global__ void k_now(uint64_t *t) { t[0] = gtime(); }
static __global__ void k_fill(uint8_t *buf, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        buf[i] = (uint8_t)(i * 7 + 1);
}
/* A lane's two units of the 5.6 KB at x, as the GEMVs read them (from global memory
 * through the read-only path, or from shared memory), folded into acc and f so no
 * load can be dropped. */
template <bool GLOBAL>
static __device__ __forceinline__ void fan_units(const uint8_t *x, int lane, unsigned &acc, float &f) {
    auto ld4 = [](const int4 *p) { return GLOBAL ? __ldg(p) : *p; };
    auto ldf = [](const float *p) { return GLOBAL ? __ldg(p) : *p; };
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int u = lane + 32 * k;
        const int4 *q = (const int4 *)(x + 64 * u);
        const int4 a0 = ld4(q), a1 = ld4(q + 1), b0 = ld4(q + 2), b1 = ld4(q + 3);
        acc ^= a0.x ^ a0.y ^ a0.z ^ a0.w ^ a1.x ^ a1.y ^ a1.z ^ a1.w;
        acc += b0.x ^ b0.y ^ b0.z ^ b0.w ^ b1.x ^ b1.y ^ b1.z ^ b1.w;
        const float *d = (const float *)(x + FAN_QS) + 2 * u;
        const float *sv = (const float *)(x + FAN_QS + FAN_QS / 32 * 4) + 4 * u;
        f += ldf(d) + ldf(d + 1) + ldf(sv) + ldf(sv + 1) + ldf(sv + 2) + ldf(sv + 3);
    }
}
/* Spins until the release instant (30 us after k_now: every block is resident); the
 * spin depends on dep, so a load that gave dep is complete before it ends. */
static __device__ __forceinline__ void fan_release(const uint64_t *tnow, unsigned dep) {
    const uint64_t go = tnow[0] + 30000;
    while (gtime() < go + (dep == 0x9e3779b9u)) {
    }
}
/* The warp's latency since t0, once acc and f are in (a branch on them orders the
 * timer read after the loads): the slowest lane's, by lane 0. */
static __device__ __forceinline__ void fan_record(unsigned acc, float f, uint64_t t0, uint32_t *lat, int gw,
                                                  int lane) {
    if ((acc ^ __float_as_uint(f)) == 0x9e3779b9u) acc = __shfl_xor_sync(0xffffffffu, acc, 1);
    __syncwarp();
    const uint64_t t1 = gtime() + (acc == 0x12345u);
    uint32_t l = (uint32_t)(t1 - t0);
    for (int o = 16; o; o >>= 1) l = max(l, __shfl_xor_sync(0xffffffffu, l, o));
    if (lane == 0) lat[gw] = l;
}

static __global__ void __launch_bounds__(256) k_fanin(const uint8_t *buf, int copies, int64_t cstride,
                                                    const uint64_t *tnow, uint32_t *lat, int pre) {
    const int lane = threadIdx.x & 31;
    const int gw = blockIdx.x * 8 + (threadIdx.x >> 5);
    const uint8_t *base = buf + (int64_t)(gw % copies) * cstride;
    unsigned touch = 0;
    if (pre & 1) touch = __ldcg((const unsigned *)(base + FAN_BYTES + 128)); /* its page, another line */
    fan_release(tnow, touch);
    const uint64_t t0 = gtime();
    unsigned acc = 0;
    float f = 0.0f;
    if (pre & 2) { /* one line only: the bare round trip */
        acc ^= __ldcg((const unsigned *)base + lane);
    } else if (pre & 4) {
        /* the same bytes laid out lane-major: load c of lane l at (32c + l) * 16, so an
         * instruction covers 512 contiguous bytes */
#pragma unroll
        for (int c = 0; c < FAN_BYTES / 512; c++) {
            const int4 v = __ldg((const int4 *)base + 32 * c + lane);
            acc ^= v.x ^ v.y ^ v.z;
            f += __int_as_float(v.w & 0x3fffffff);
        }
    } else {
        fan_units<true>(base, lane, acc, f);
    }
    fan_record(acc, f, t0, lat, gw, lane);
}

/* The same activations staged once per block: thread 0 copies the 5.6 KB into shared
 * memory with one bulk copy (cp.async.bulk, mbarrier), every warp waits on the barrier
 * and reads its units from there (mode 1); or each warp copies an eighth with plain
 * loads and the block meets on __syncthreads (mode 2). */
static __global__ void __launch_bounds__(256) k_fanin_staged(const uint8_t *buf, int copies, int64_t cstride,
                                                           const uint64_t *tnow, uint32_t *lat, int mode) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(128) uint8_t xs[FAN_BYTES];
    __shared__ __align__(8) uint64_t bar;
    const int lane = threadIdx.x & 31;
    const int gw = blockIdx.x * 8 + (threadIdx.x >> 5);
    const uint8_t *base = buf + (int64_t)(blockIdx.x % copies) * cstride;
    if (threadIdx.x == 0) mbar_init_ring(&bar, 1);
    __syncthreads();
    fan_release(tnow, 0);
    const uint64_t t0 = gtime();
    if (mode == 1) {
        if (threadIdx.x == 0) bulk_copy(xs, base, FAN_BYTES, &bar);
        mbar_wait(&bar, 0);
    } else {
        for (int i = threadIdx.x; i < FAN_BYTES / 16; i += 256) ((int4 *)xs)[i] = __ldg((const int4 *)base + i);
        __syncthreads();
    }
    unsigned acc = 0;
    float f = 0.0f;
    fan_units<false>(xs, lane, acc, f);
    fan_record(acc, f, t0, lat, gw, lane);
#endif
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void fanin(int reps) {
    const int grid = 264, warps = grid * 8;
    const int64_t cstride = (FAN_BYTES + 4095) / 4096 * 4096 + 640; /* copies in other lines and slices */
    uint8_t *buf;
    uint64_t *tnow;
    uint32_t *lat;
    CK(cudaMalloc(&buf, (size_t)cstride * warps));
    CK(cudaMalloc(&tnow, sizeof(uint64_t)));
    CK(cudaMalloc(&lat, sizeof(uint32_t) * warps));
    uint32_t *h = (uint32_t *)malloc(sizeof(uint32_t) * warps);
    const int copies[] = {1, 2, 4, 8, 16, 64, 264, 2112};
    printf("fan-in: %d warps (%d blocks x 8) each read %d B of activations; copies = how many places hold them\n",
           warps, grid, FAN_BYTES);
    printf("%8s %10s %10s %10s %10s   (warp latency, ns, over %d runs)\n", "copies", "median", "p90", "max", "mean", reps);
    static const char *mname[] = {"per warp", "per block, one bulk copy", "per block, loads + barrier"};
    /* with bg, a 2 GB stream (k_stream, 2 blocks of 8 warps per SM) runs beside: the
     * weights a GEMV streams while its warps load their activations */
    const int64_t bg_chunks = (int64_t)2048 * 1024 * 1024 / CHUNK;
    uint8_t *bgsrc;
    unsigned *bsm, *bsink;
    uint64_t *bt0, *bt1;
    CK(cudaMalloc(&bgsrc, (size_t)bg_chunks * CHUNK));
    CK(cudaMemset(bgsrc, 1, (size_t)bg_chunks * CHUNK));
    CK(cudaMalloc(&bsm, sizeof(unsigned) * 1024));
    CK(cudaMalloc(&bsink, sizeof(unsigned)));
    CK(cudaMalloc(&bt0, sizeof(uint64_t) * 1024));
    CK(cudaMalloc(&bt1, sizeof(uint64_t) * 1024));
    const int ssmem = WARPS * DEPTH * CHUNK;
    CK(cudaFuncSetAttribute(k_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, ssmem));
    cudaStream_t sa, sb;
    CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
    for (int bg = 0; bg < 2; bg++)
    for (int mode = -3; mode < 3; mode++)
    for (size_t c = 0; c < sizeof copies / sizeof copies[0]; c++) {
        /* mode -2: one line per warp (the bare round trip), -1: per warp with the page
         * touched before the release (a warm TLB), 0..2 as named */
        const int pre = mode == -3 ? 4 : mode == -2 ? 3 : mode == -1 ? 1 : 0;
        if (mode > 0 && copies[c] > grid) continue;
        if (mode == -2 && c > 0 && copies[c] != 2112) continue;
        if (c == 0)
            printf("%s%s:\n", mode == -3 ? "per warp, lane-major layout (11 loads of 512 contiguous B)" : mode == -2 ? "one 128 B line per warp, page touched" : mode == -1 ? "per warp, page touched" : mname[mode],
                   bg ? ", beside a 2 GB stream" : "");
        double sum = 0;
        uint32_t *all = (uint32_t *)malloc(sizeof(uint32_t) * warps * reps);
        for (int r = 0; r < reps; r++) {
            k_fill<<<264, 256, 0, sa>>>(buf, cstride * copies[c]); /* the producer: the data sits in L2 */
            CK(cudaStreamSynchronize(sa));
            if (bg) k_stream<<<2 * 132, WARPS * 32, ssmem, sb>>>(bgsrc, bg_chunks, bsm, bt0, bt1, bsink);
            k_now<<<1, 1, 0, sa>>>(tnow);
            if (mode <= 0) k_fanin<<<grid, 256, 0, sa>>>(buf, copies[c], cstride, tnow, lat, pre);
            else k_fanin_staged<<<grid, 256, 0, sa>>>(buf, copies[c], cstride, tnow, lat, mode);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(all + (size_t)r * warps, lat, sizeof(uint32_t) * warps, cudaMemcpyDeviceToHost));
        }
        for (int i = 0; i < warps * reps; i++) sum += all[i];
        qsort(all, (size_t)warps * reps, sizeof(uint32_t), cmp_u32);
        const size_t n = (size_t)warps * reps;
        printf("%8d %10u %10u %10u %10.0f\n", copies[c], all[n / 2], all[n * 9 / 10], all[n - 1], sum / n);
        free(all);
    }
    CK(cudaFree(buf));
    CK(cudaFree(tnow));
    CK(cudaFree(lat));
    free(h);
}

static int uf_find(int *p, int x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
}

static double corr(const double *x, const double *y, int n) {
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++) mx += x[i], my += y[i];
    mx /= n, my /= n;
    for (int i = 0; i < n; i++) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0.0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "fanin")) {
        fanin(argc > 2 ? atoi(argv[2]) : 5);
        return 0;
    }
    const int64_t mb = argc > 1 ? atoll(argv[1]) : 1024;
    const int reps = argc > 2 ? atoi(argv[2]) : 10;
    if (mb < 1 || reps < 2) {
        fprintf(stderr, "usage: sm_rates [MB >= 1] [REPEATS >= 2]\n");
        return 2;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int nsm = prop.multiProcessorCount;
    printf("device: %s, %d SMs\n", prop.name, nsm);

    /* 1. GPC groups from cluster co-residence */
    const int maxsm = 1024; /* %smid < 1024 */
    int *par = (int *)malloc(sizeof(int) * maxsm);
    int *seen = (int *)calloc(maxsm, sizeof(int));
    for (int i = 0; i < maxsm; i++) par[i] = i;
    const size_t csmem = prop.sharedMemPerBlockOptin > 0 ? prop.sharedMemPerBlockOptin - 1024 : 48 * 1024;
    CK(cudaFuncSetAttribute(k_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)csmem));
    if (cudaFuncSetAttribute(k_cluster, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
        (void)cudaGetLastError();
    unsigned *dsm;
    CK(cudaMalloc(&dsm, sizeof(unsigned) * 4096));
    unsigned *hsm = (unsigned *)malloc(sizeof(unsigned) * 4096);
    int launches = 0;
    for (int cs = 2; cs <= 16; cs *= 2) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = cs;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        cfg.blockDim = dim3(32);
        cfg.dynamicSmemBytes = csmem;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        int ncl = 0;
        cfg.gridDim = dim3(cs);
        if (cudaOccupancyMaxActiveClusters(&ncl, k_cluster, &cfg) != cudaSuccess || ncl < 1) {
            (void)cudaGetLastError();
            printf("cluster size %d: not launchable here\n", cs);
            continue;
        }
        const int nb = ncl * cs < 4096 ? ncl * cs : 4096 / cs * cs;
        cfg.gridDim = dim3(nb);
        for (int r = 0; r < 16; r++) {
            if (cudaLaunchKernelEx(&cfg, k_cluster, dsm) != cudaSuccess) {
                (void)cudaGetLastError();
                break;
            }
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(hsm, dsm, sizeof(unsigned) * nb, cudaMemcpyDeviceToHost));
            launches++;
            for (int b = 0; b < nb; b++) {
                seen[hsm[b]] = 1;
                if (b % cs) {
                    const int x = uf_find(par, (int)hsm[b]), y = uf_find(par, (int)hsm[b - b % cs]);
                    if (x != y) par[x] = y;
                }
            }
        }
        printf("cluster size %d: %d clusters at once\n", cs, ncl);
    }
    int *gsize = (int *)calloc(maxsm, sizeof(int));
    for (int s = 0; s < maxsm; s++)
        if (seen[s]) gsize[uf_find(par, s)]++;
    printf("GPC groups (%d cluster launches):", launches);
    for (int s = 0; s < maxsm; s++)
        if (seen[s] && uf_find(par, s) == s) {
            printf(" [");
            int first = 1;
            for (int u = 0; u < maxsm; u++)
                if (seen[u] && uf_find(par, u) == s) printf(first ? "%d" : " %d", u), first = 0;
            printf("] (%d)", gsize[s]);
        }
    printf("\n");

    /* 2. streaming rates per SM */
    const int64_t nchunks = mb * 1024 * 1024 / CHUNK;
    uint8_t *src;
    CK(cudaMalloc(&src, (size_t)nchunks * CHUNK));
    CK(cudaMemset(src, 1, (size_t)nchunks * CHUNK));
    const int ssmem = WARPS * DEPTH * CHUNK;
    CK(cudaFuncSetAttribute(k_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, ssmem));
    int per = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k_stream, WARPS * 32, ssmem));
    if (per > 2) per = 2;
    const int grid = nsm * per;
    unsigned *dsm2, *sink;
    uint64_t *dt0, *dt1;
    CK(cudaMalloc(&dsm2, sizeof(unsigned) * grid));
    CK(cudaMalloc(&sink, sizeof(unsigned)));
    CK(cudaMalloc(&dt0, sizeof(uint64_t) * grid));
    CK(cudaMalloc(&dt1, sizeof(uint64_t) * grid));
    unsigned *bsm = (unsigned *)malloc(sizeof(unsigned) * grid);
    uint64_t *b0 = (uint64_t *)malloc(sizeof(uint64_t) * grid), *b1 = (uint64_t *)malloc(sizeof(uint64_t) * grid);
    double *late = (double *)calloc((size_t)reps * maxsm, sizeof(double));
    int *cnt = (int *)calloc((size_t)reps * maxsm, sizeof(int));
    printf("stream: %lld MB, %d blocks (%d per SM) x %d warps, %d B chunks, ring %d\n", (long long)mb, grid, per,
           WARPS, CHUNK, DEPTH);
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        CK(cudaMemset(dt0, 0, sizeof(uint64_t) * grid));
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        CK(cudaEventRecord(e0));
        k_stream<<<grid, WARPS * 32, ssmem>>>(src, nchunks, dsm2, dt0, dt1, sink);
        CK(cudaGetLastError());
        CK(cudaEventRecord(e1));
        CK(cudaDeviceSynchronize());
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        CK(cudaMemcpy(bsm, dsm2, sizeof(unsigned) * grid, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b0, dt0, sizeof(uint64_t) * grid, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b1, dt1, sizeof(uint64_t) * grid, cudaMemcpyDeviceToHost));
        if (r < 0) continue;
        uint64_t first = b0[0], lo = UINT64_MAX, hi = 0;
        double mean = 0;
        for (int b = 0; b < grid; b++) first = b0[b] < first ? b0[b] : first;
        for (int b = 0; b < grid; b++) {
            const uint64_t e = b1[b] - first;
            lo = e < lo ? e : lo;
            hi = e > hi ? e : hi;
            mean += (double)e / grid;
        }
        for (int b = 0; b < grid; b++) {
            late[(size_t)r * maxsm + bsm[b]] += (double)(b1[b] - first) - mean;
            cnt[(size_t)r * maxsm + bsm[b]]++;
        }
        printf("run %d: %.1f us, %.0f GB/s; block ends %.1f .. %.1f us (mean %.1f)\n", r, ms * 1e3,
               (double)nchunks * CHUNK / (ms * 1e-3) / 1e9, lo / 1e3, hi / 1e3, mean / 1e3);
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
    }
    /* per SM: mean lateness over the odd and the even runs */
    double *odd = (double *)calloc(maxsm, sizeof(double)), *even = (double *)calloc(maxsm, sizeof(double));
    double *x = (double *)malloc(sizeof(double) * maxsm), *y = (double *)malloc(sizeof(double) * maxsm);
    int *no = (int *)calloc(maxsm, sizeof(int)), *ne = (int *)calloc(maxsm, sizeof(int));
    for (int r = 0; r < reps; r++)
        for (int s = 0; s < maxsm; s++)
            if (cnt[(size_t)r * maxsm + s]) {
                const double v = late[(size_t)r * maxsm + s] / cnt[(size_t)r * maxsm + s];
                if (r & 1) odd[s] += v, no[s]++;
                else even[s] += v, ne[s]++;
            }
    int m = 0;
    for (int s = 0; s < maxsm; s++)
        if (no[s] && ne[s]) {
            x[m] = odd[s] / no[s];
            y[m] = even[s] / ne[s];
            m++;
        }
    printf("SM lateness, odd vs even runs: correlation %.2f over %d SMs\n", corr(x, y, m), m);
    printf("SM lateness (us, all runs):");
    double sz_sum[64] = {0};
    int sz_n[64] = {0};
    for (int s = 0; s < maxsm; s++)
        if (no[s] + ne[s]) {
            const double v = (odd[s] + even[s]) / (no[s] + ne[s]);
            printf(" %d:%+.2f", s, v / 1e3);
            const int g = seen[s] ? gsize[uf_find(par, s)] : 0;
            if (g < 64) sz_sum[g] += v, sz_n[g]++;
        }
    printf("\n");
    for (int g = 0; g < 64; g++)
        if (sz_n[g]) printf("SMs in GPC groups of %d: %d SMs, mean lateness %+.2f us\n", g, sz_n[g], sz_sum[g] / sz_n[g] / 1e3);
    return 0;
}

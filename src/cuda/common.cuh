/* common.cuh - shared pieces of the CUDA backend: C headers, error checks, the
 * device weight layouts, q8 activation layout, small device helpers, the launch
 * helper (programmatic dependent launch) and the launcher prototypes of every
 * kernel family (one .cu file each).
 *
 * Conventions
 *   - every kernel is `static __global__ kernel_*` in its family's file, reached
 *     through one launcher `cu_*` declared here; launchers take the backend state
 *     (stream, flags) and never synchronise.
 *   - every kernel calls pdl_trigger() first (the decode attention: after its
 *     pdl_wait(), cu_tune.attn_trigger; attn.cu says why) and pdl_wait() before it touches
 *     memory that an earlier kernel wrote (or that a later kernel reads): under
 *     programmatic dependent launch a kernel starts while its predecessor drains,
 *     so only immutable data (weights) may be read before pdl_wait(), and nothing
 *     may be written. One labelled exception: the one-token decode attention
 *     (cu_attn_args.pre, attn.cu) also reads the batch metadata and KV-cache rows
 *     that only earlier steps wrote.
 *   - what an earlier kernel of the step wrote is read with plain loads, never through
 *     the read-only path (__ldg, ld.global.nc, const __restrict__): under PDL it is
 *     written while the reading grid is already resident, which that path does not
 *     allow, and it returned stale bytes (mmv_core.cuh, mmv_lane_loadx, 2026-11-30). */
#ifndef MINFER_CUDA_COMMON_CUH
#define MINFER_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "backend.h"
#include "forward.h"
#include "model.h"
#include "quant.h"
#include "util.h"
#include "cuda/paths.h"
#include "cuda/plan.h"
#include "cuda/tune.h"
}
#include "ptx.cuh"

/* ------------------------------------------------------------------------- */
/* Device weight layouts                                                     */
/* ------------------------------------------------------------------------- */
/* Weights are uploaded once. Every row starts 16-byte aligned (row stride =
 * cu_row_stride) so a lane can read 16 bytes at a time. The block formats whose
 * blocks are not multiples of 16 bytes are stored *planar per row* (repacked on
 * the device at upload), so each plane is 16-byte aligned:
 *
 *   q4_0: [qs nb*16][d nb*2]                   q8_0: [qs nb*32][d nb*2]
 *   q4_1: [qs nb*16][d nb*2][m nb*2]           q6_K: [ql nb*128][qh nb*64][sc nb*16][d nb*2]
 *   q5_0: [qs nb*16][qh nb*4][d nb*2]
 *   q5_1: [qs nb*16][qh nb*4][d nb*2][m nb*2]
 *
 * q4_K (144 B) and q5_K (176 B) blocks are multiples of 16 and stay as in the file;
 * f32/f16/bf16 rows are as in the file. Then every row is padded to 16 bytes.
 * The block contents (nibble order, scale packing) are unchanged: FORMATS.md. */
static inline int cu_type_planar(uint32_t t) {
    return t == QTYPE_Q4_0 || t == QTYPE_Q4_1 || t == QTYPE_Q5_0 || t == QTYPE_Q5_1 || t == QTYPE_Q8_0 ||
           t == QTYPE_Q6_K;
}
/* Bytes of one device row; 0 when the type is not supported by the backend. */
static inline int64_t cu_row_stride(uint32_t type, int64_t cols) { return cu_plan_row_stride(type, cols); }
static inline int cu_type_is_quant(uint32_t t) { return t != QTYPE_F32 && t != QTYPE_F16 && t != QTYPE_BF16; }

/* ------------------------------------------------------------------------- */
/* q8 activations: the GEMV's view of x                                     */
/* ------------------------------------------------------------------------- */
/* x [n][K] f32 quantized per 32 values (K % 32 == 0; blocks never straddle rows,
 * so the flat layout equals the per-row one):
 *   qs[n*K]     int8, round(x / d)            (16-byte aligned)
 *   d [n*K/32]  f32, amax / 127
 *   s [n*K/16]  f32, d * sum of the 16 quantized values (for formats with an offset) */
struct cu_q8 {
    int8_t *qs;
    float *d;
    float *s;
    uint8_t *xl4, *xl6; /* the same, lane-major (below); the backend always sets them */
};

/* Lane-major copies of q8 activations. The x-stationary GEMVs (mmv_xs*.cuh: xs, xs2, xst,
 * xstm, xst2) give lane l of a warp the 64-value units l, l + 32, ... of a row and load each
 * unit's activations (its U::X) once. From the layout above a warp's 16-byte load
 * spans 2 KB (each lane's unit 64 bytes from the next): 16 L1 wavefronts instead of 4,
 * ~20 of them per lane, and every warp of the grid does it at the same instant after
 * its wait. Measured (bench/sm_rates.cu fanin, H200, 2026-11-30): 2112 warps loading
 * the same 5.6 KB take 1.57 us that way and 0.67 us with each load covering 512
 * contiguous bytes. So the q8 writers (q8_store4, q8_store1) also write each unit's
 * X, already combined, in 5 chunks of 16 bytes: chunk c of unit u at byte
 * ((u / 32 * 5 + c) * 32 + u % 32) * 16, so the 32 lanes' chunk c is one 512-byte
 * run. Two unit shapes (the 7B's q4_k_m has both):
 *   xl4 (q4_K, q5_K: unit u = values 64u .. 64u+63): chunks 0-3 the 64 codes, chunk 4
 *       the two 32-blocks' d and then their sums s[4u] + s[4u+1], s[4u+2] + s[4u+3];
 *   xl6 (q6_K: unit u = 4b + 2hh + (l0 / 16) of 256-block b, values 256b + 128hh +
 *       32qq + l0 .. +15 for qq = 0..3): chunk qq those 16 codes, chunk 4 the d of
 *       the four 32-blocks they lie in.
 * The sums are the same float additions the GEMVs did on the plain layout, so the
 * results are bit-identical. */
#define CU_XL_CHUNKS 5
static __host__ __device__ __forceinline__ int64_t cu_xl_off(int64_t u, int c) {
    return (((u >> 5) * CU_XL_CHUNKS + c) * 32 + (u & 31)) * 16;
}
/* bytes of one lane-major layout for n values (whole groups of 32 units) */
static __host__ __device__ __forceinline__ size_t cu_xl_bytes(int64_t n) { return (size_t)((n + 2047) / 2048) * 32 * CU_XL_CHUNKS * 16; }
/* where the code of value i goes in xl4 and in xl6 */
static __host__ __device__ __forceinline__ int64_t cu_xl4_at(int64_t i) {
    return cu_xl_off(i >> 6, (int)(i & 63) >> 4) + (i & 15);
}
static __host__ __device__ __forceinline__ int64_t cu_xl6_at(int64_t i) {
    const int r = (int)(i & 255); /* 256-block: half r / 128, 32-run (r / 32) % 4, lane half (r % 32) / 16 */
    return cu_xl_off((i >> 8) * 4 + 2 * (r >> 7) + ((r & 31) >> 4), (r >> 5) & 3) + (r & 15);
}
/* The 32-block that starts at value i (32-aligned): its scale d, and for xl4 the sum
 * ds32 = s[2j] + s[2j+1] of its two 16-value sums, into the chunks 4 of the units that
 * read them (xl6: the two units of its 128-value half). The lab's host builder
 * (bench/cuda_gemv.cu q8_random) writes its copies through these same three. */
static __host__ __device__ __forceinline__ void cu_xl_block(uint8_t *xl4, uint8_t *xl6, int64_t i, float d,
                                                            float ds32) {
    if (xl4) {
        float *e = (float *)(xl4 + cu_xl_off(i >> 6, 4));
        e[(i >> 5) & 1] = d;
        e[2 + ((i >> 5) & 1)] = ds32;
    }
    if (xl6) {
        const int r = (int)(i & 255), qq = (r >> 5) & 3;
        const int64_t u0 = (i >> 8) * 4 + 2 * (r >> 7);
        ((float *)(xl6 + cu_xl_off(u0, 4)))[qq] = d;
        ((float *)(xl6 + cu_xl_off(u0 + 1, 4)))[qq] = d;
    }
}

/* ------------------------------------------------------------------------- */
/* The launch context: what every launcher reads (plain data)                */
/* ------------------------------------------------------------------------- */
/* Launch policy reaches the launchers as data: the stream, which optional paths are
 * on (cuda/paths.h), the tuning row (cuda/tune.h), and where to count launches and
 * record errors. The backend's own state (backend.cuh) extends it; the kernel lab
 * (bench/cuda_gemv.cu) fills one directly. */
struct cu_trace;
struct cu_prof;
struct cu_census {
    uint64_t launches;      /* kernels launched (eager or captured) */
    uint64_t xst2, xstm;    /* kernel_mmv_xst2 / kernel_mmv_xstm launches */
    uint64_t pairs;         /* ring GEMV launches whose loop takes two rows a step */
    uint64_t cols;          /* kernel_mmv_cols launches (2..8 columns) */
    uint64_t add_gemv;      /* GEMV launches with the residual add folded in */
    uint64_t swiglu_gemv;   /* gate+up launches with the SwiGLU (xsg, xsgs) */
    uint64_t xsg_shared;    /* of them, xsgs (one ring per block) */
    uint64_t host_store;    /* graph downloads captured as a kernel storing to pinned host memory */
    uint64_t copy_node;     /* graph downloads captured as a copy node */
    uint64_t fused_blocks;  /* blocks run as fused launch sequences (blocks.cu) */
    uint64_t op_blocks;     /* blocks run as one kernel per primitive op */
    uint64_t mmq[3];        /* int8 MMQ GEMM launches: q4_K, q6_K, q8_0 */
    uint64_t mmq_plane;     /* of the q4_K and q6_K ones, on the matrix's plane */
    uint64_t mmq_gu;        /* of them, gate+up pairs in one launch (path mmq-gu) */
    uint64_t mmq_norm;      /* prefill norms that wrote the MMQ int8 form (path mmq-norm) */
    uint64_t mmf_norm;      /* norms that wrote path mmf's f16 activations (path mmf-in) */
    uint64_t mmf_qk;        /* q and k GEMMs run as one column-kernel launch (path mmf-qk) */
    uint64_t mmf_swiglu;    /* gate+up column-kernel launches with the SwiGLU in the store (path mmf-swiglu) */
    uint64_t mmf[2];        /* q4_K, q6_K prefill GEMMs on f16 tensor cores from the fragment plane (path mmf) */
    uint64_t mmf_cols;      /* of them, on the column kernel (below 128 columns, path mmf-cols) */
    uint64_t mm_f16;        /* prefill GEMMs on the f16 path (a type or shape MMQ does not take, or path mmq off) */
    uint64_t allreduce;     /* tensor-parallel all-reduces (NCCL) enqueued (tp_nccl.cu) */
    uint64_t moe_gemv, moe_mmq; /* experts' FFNs on the grouped GEMVs / the grouped MMQ (moe.cu) */
};
struct cu_ctx {
    cudaStream_t stream;
    int num_sms;            /* the device's SMs */
    int code_arch;          /* __CUDA_ARCH__ of the code the device runs (the TMA kernels need >= 900) */
    int mmf_tma;            /* mmf's column kernel on TMA rings: sm_90+ code and room for its rings (backend.cu) */
    int flash256;           /* room for the head-dim-256 flash kernel's shared memory (backend.cu) */
    int pdl;                /* programmatic dependent launch: path "pdl" on and sm_90+ */
    int sync;               /* MINFER_CUDA_SYNC=1: synchronise and check after every eager launch */
    int capturing;          /* inside a graph capture */
    unsigned char on[CU_PATH_COUNT]; /* the path table resolved (MINFER_CUDA_DISABLE) */
    cu_tune tune;           /* this device's tuning row */
    cu_census n;
    cu_trace *trace;        /* MINFER_CUDA_TRACE=FILE on a trace build (trace.cu), else NULL */
    cu_prof *prof;          /* MINFER_CUDA_PROFILE=1: per-launch GPU time (profile.cu), else NULL */
    cudaEvent_t *prof_next; /* the profile's event for the next launch's begin (cu_launch records it) */
    int prof_began;         /* it was recorded for the launch in flight */
    const char *prof_tag;   /* the weight tensor a GEMM launch is for (blocks.cu), else NULL */
    uint32_t prof_type;     /* and its type */
    int err;                /* the first error, sticky until reported */
    char errmsg[MF_ERR_LEN];
};
static inline int cu_num_sms(const cu_ctx *S) { return S->num_sms > 0 ? S->num_sms : 1; }
void cu_launch_check(cu_ctx *S, const char *what, const char *file, int line);
/* Records the first CUDA error (sticky) as an mf_err message. */
void cu_record(cu_ctx *S, cudaError_t e, const char *expr, const char *file, int line);

#define CU_CHECK(S, x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) cu_record((S), e_, #x, __FILE__, __LINE__); } while (0)
#define CU_LAUNCHED(S, what) cu_launch_check((S), (what), __FILE__, __LINE__)
/* A kernel's shared-memory attribute is the device's: a process that drives several GPUs
 * (tensor parallelism, one thread a GPU) sets it on each, so the launchers remember it
 * per device (the calling thread's current one). */
#define CU_MAX_DEVICES 16
static inline int cu_cur_device(void) {
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= CU_MAX_DEVICES) d = 0;
    return d;
}
/* cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes) once per device (done:
 * the launcher's static flags); false, with the error recorded, when it fails. */
template <typename K>
static bool cu_smem_attr_once(cu_ctx *S, K kernel, int bytes, unsigned char (&done)[CU_MAX_DEVICES], const char *what) {
    const int d = cu_cur_device();
    if (done[d]) return true;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
        cu_record(S, cudaGetLastError(), what, __FILE__, __LINE__);
        return false;
    }
    done[d] = 1;
    return true;
}

/* The block timeline's host side (trace.cu; NULL-safe: a null trace does nothing). */
cu_trace *cu_trace_open(const char *path);
void cu_trace_capture_begin(cu_trace *T);
void cu_trace_launch(cu_trace *T, const char *what);
void cu_trace_close(cu_trace *T);
/* The launch profile (profile.cu): start (MINFER_CUDA_PROFILE=1), one launch's end
 * (cu_launch_check), and the table at exit. */
void cu_prof_start(cu_ctx *S);
void cu_prof_end(cu_ctx *S, const char *what);
void cu_prof_close(cu_ctx *S);

/* Launch with the programmatic-stream-serialization attribute when enabled. */
template <typename... KArgs, typename... Args>
static inline void cu_launch(cu_ctx *S, const char *what, void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             Args... args) {
    cudaLaunchAttribute attr[1];
    int na = 0;
    if (S->pdl) {
        attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    if (S->prof_next && !S->capturing) S->prof_began = cudaEventRecord(*S->prof_next, S->stream) == cudaSuccess;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = S->stream;
    cfg.attrs = attr;
    cfg.numAttrs = (unsigned)na;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
    if (e != cudaSuccess) cu_record(S, e, what, __FILE__, __LINE__);
    cu_launch_check(S, what, __FILE__, __LINE__);
}

/* ------------------------------------------------------------------------- */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------- */
/* The block timeline (a build-time switch, MINFER_CUDA_TRACE=1; off in every normal
 * build, where none of this exists): thread 0 of each block stamps the global
 * nanosecond timer into a slot of its grid (%gridid, kept modulo CU_TRACE_GRIDS) and
 * block when it starts (pdl_trigger) and when its wait returns (pdl_wait). Plain
 * stores, no atomics, so a block is not held up by its own record. Kernels that call
 * trace_end() at their end also keep the time their last warp got there (a reduction
 * nobody waits for). The host side
 * (trace.cu) owns the buffer, names the captured launches and writes the file that
 * bench/trace_step.py reads. Each translation unit has its own copy of the buffer
 * pointer, attached through cu_trace_register at static initialisation. */
#ifndef MINFER_CUDA_TRACE
#define MINFER_CUDA_TRACE 0
#endif
#define CU_TRACE_GRIDS 4096
#define CU_TRACE_BLOCKS 1024
struct cu_trace_rec {
    unsigned long long grid, t_start, t_wait, t_end, mark[3];
    unsigned smid, block;
};
int cu_trace_register(int (*attach)(void *buf));
#if MINFER_CUDA_TRACE
/* (__constant__: a plain __device__ pointer was re-read from memory after each
 * "memory" clobber, a round trip under load ahead of the timer read it served,
 * which put the wait and end stamps late; the constant cache answers in cycles) */
static __constant__ cu_trace_rec *cu_trace_buf;
static int cu_trace_attach(void *buf) {
    return cudaMemcpyToSymbol(cu_trace_buf, &buf, sizeof buf) == cudaSuccess ? 0 : -1;
}
__attribute__((unused)) static const int cu_trace_registered = cu_trace_register(cu_trace_attach);
#endif
/* This block's record: the slot of its grid (%gridid, *grid) and block; nullptr without
 * a trace buffer or past CU_TRACE_BLOCKS. */
static __device__ __forceinline__ unsigned trace_block() {
    return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
static __device__ __forceinline__ cu_trace_rec *trace_rec(unsigned long long *grid) {
#if MINFER_CUDA_TRACE && defined(__CUDA_ARCH__)
    const unsigned b = trace_block();
    if (!cu_trace_buf || b >= CU_TRACE_BLOCKS) return nullptr;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(*grid));
    return cu_trace_buf + (*grid % CU_TRACE_GRIDS) * CU_TRACE_BLOCKS + b;
#else
    return nullptr;
#endif
}
/* trace_rec for thread 0 of the block, nullptr for the others */
static __device__ __forceinline__ cu_trace_rec *trace_slot(unsigned long long *grid) {
    return threadIdx.x | threadIdx.y | threadIdx.z ? nullptr : trace_rec(grid);
}
static __device__ __forceinline__ unsigned long long trace_now() {
    unsigned long long t = 0;
#if MINFER_CUDA_TRACE && defined(__CUDA_ARCH__)
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
#endif
    return t;
}

static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#if MINFER_CUDA_TRACE
    const unsigned long long t = trace_now(); /* (the time first, then the record) */
    unsigned long long g;
    if (cu_trace_rec *r = trace_slot(&g)) r->t_wait = t;
#endif
}
static __device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
#if MINFER_CUDA_TRACE && defined(__CUDA_ARCH__)
    const unsigned long long t = trace_now();
    unsigned long long g;
    if (cu_trace_rec *r = trace_slot(&g)) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        *r = cu_trace_rec{g, t, 0, 0, {0, 0, 0}, sm, trace_block()};
    }
#endif
}
/* A point inside a kernel (k < 3), thread 0's time there: where a kernel's own time goes.
 * Placed in: the decode attention (0 q/k/v loaded, rotated and stored; 1 tile loop done;
 * 2 warps merged), rmsnorm (0 row loaded; 1 sum done; 2 its f32 stored, the q8 next),
 * the q8 SwiGLU (0 its first values computed and stored in f32, the q8 next), the ring
 * GEMVs (0 first row reduced; 1 the last row's wait begins; 2 its weights arrived). */
static __device__ __forceinline__ void trace_mark(int k) {
#if MINFER_CUDA_TRACE
    const unsigned long long t = trace_now();
    unsigned long long g;
    if (cu_trace_rec *r = trace_slot(&g)) r->mark[k] = t;
#endif
}
/* The block timeline's end of a block: every warp that gets here (lane 0) (nothing
 * in normal builds). */
static __device__ __forceinline__ void trace_end() {
#if MINFER_CUDA_TRACE && defined(__CUDA_ARCH__)
    unsigned long long g;
    if (threadIdx.x & 31) return;
    const unsigned long long t = trace_now();
    if (cu_trace_rec *r = trace_rec(&g)) atomicMax(&r->t_end, t);
#endif
}

/* The L2 policy of streamed weights (MINFER_CUDA_L2_HINT, a build-time switch, 1 by
 * default): a decode step reads ~3.9 GB of weights once through a 60 MB L2, which
 * under the default policy evicts everything a later kernel needs again (each kernel's
 * code and parameters, the KV rows, the activations); weights marked evict-first leave
 * those resident. tg128, 7B q4_k_m, H200, 2026-11-29: 555.46 / 556.52 with it, 548.01 /
 * 549.05 built with -DMINFER_CUDA_L2_HINT=0 (alternating runs, bench/RESULTS.md). */
#ifndef MINFER_CUDA_L2_HINT
#define MINFER_CUDA_L2_HINT 1
#endif
static __device__ __forceinline__ uint64_t l2_stream_policy() {
    uint64_t p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && MINFER_CUDA_L2_HINT
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
    return p;
}
/* A bulk copy of weights into shared memory that completes on bar, with the
 * streamed-weight L2 policy (ptx.cuh's tma_copy_plain without it): the TMA rings of the
 * GEMVs (mmv_ring.cuh) and of mmf's column kernel (mmf.cu). */
static __device__ __forceinline__ void tma_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#if MINFER_CUDA_L2_HINT
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
            smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(l2_stream_policy())
        : "memory");
#else
    tma_copy_plain(dst, src, bytes, bar);
#endif
#endif
}

/* f32 pair -> f16 pair, saturating at +-65504 (path mmf's activations: cu_mmf_convert,
 * the norm writing them, cu_rmsnorm_h) */
static __device__ __forceinline__ __half2 f2h2_sat(float a, float b) {
    return __floats2half2_rn(fminf(fmaxf(a, -65504.f), 65504.f), fminf(fmaxf(b, -65504.f), 65504.f));
}
/* four of them, packed for one 8-byte store */
static __device__ __forceinline__ uint2 f2h4_sat(float4 v) {
    const __half2 a = f2h2_sat(v.x, v.y), b = f2h2_sat(v.z, v.w);
    return make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
}

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* warp_sum(p0) and warp_sum(p1), each in every lane, the same bits, in 6 shuffles instead
 * of 10: after warp_sum's first step (xor 16) lanes l and l ^ 16 hold equal values (one
 * addition, commuted) and stay equal, so lanes 0-15 can carry p0's sum through the other
 * four steps and lanes 16-31 p1's; a last exchange gives each lane both. */
static __device__ __forceinline__ float2 warp_sum2(float p0, float p1) {
    const bool hi = threadIdx.x & 16;
    float t = hi ? p1 : p0;
    t += __shfl_xor_sync(0xffffffffu, hi ? p0 : p1, 16);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    const float u = __shfl_xor_sync(0xffffffffu, t, 16);
    return hi ? make_float2(u, t) : make_float2(t, u);
}
static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }
/* A prefill GEMM's store of output (row r, token tk), out [n][ldo]: v + bias[r], or added
 * to what is there with accum; rows from rsplit go to out2 instead (two matrices stored
 * one after the other in one launch: gate and up; mmq.cu, mmf.cu). */
static __device__ __forceinline__ void gemm_store(float *out, float *out2, int rsplit, int ldo, int r, int tk, float v,
                                                  const float *bias, int accum) {
    v += bias ? bias[r] : 0.0f;
    float *o = r < rsplit ? out + (int64_t)tk * ldo + r : out2 + (int64_t)tk * ldo + (r - rsplit);
    *o = accum ? *o + v : v;
}
static __device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
static __device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* The int8 codes of 4 consecutive values one lane holds, 8 aligned consecutive lanes one
 * 32-block (all 32 lanes of the warp call it: the shuffles span the warp): the block's
 * scale *d = amax / 127, the codes q[0..3] = round(v / d), and *s16 the sum of the codes
 * of the lane's 16-value half (4 lanes). The decode q8 writer below and the prefill
 * RMSNorm's MMQ form (norm.cu) both quantize with it. */
static __device__ __forceinline__ void q8_quant4(float4 v, int q[4], float *d, int *s16) {
    float a = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 1));
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 2));
    a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 4));
    *d = a / 127.0f;
    const float id = a > 0.0f ? 127.0f / a : 0.0f;
    q[0] = __float2int_rn(v.x * id);
    q[1] = __float2int_rn(v.y * id);
    q[2] = __float2int_rn(v.z * id);
    q[3] = __float2int_rn(v.w * id);
    int s = q[0] + q[1] + q[2] + q[3];
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    *s16 = s;
}
static __device__ __forceinline__ uint32_t q8_pack4(const int q[4]) {
    return (uint32_t)(q[0] & 0xff) | ((uint32_t)(q[1] & 0xff) << 8) | ((uint32_t)(q[2] & 0xff) << 16) |
           ((uint32_t)(q[3] & 0xff) << 24);
}

/* Quantizes 4 consecutive values held by one lane into the q8 layout; 8 lanes
 * (aligned, consecutive) form one 32-block. All 32 lanes of the warp must call it
 * (the shuffles span the warp); lanes with valid == 0 store nothing. idx4 = index
 * of the first of the 4 values in the flat activation. */
static __device__ __forceinline__ void q8_store4(cu_q8 q, int64_t idx4, float4 v, int valid) {
    int c[4], s;
    float d;
    q8_quant4(v, c, &d, &s);
    const float ds = d * (float)s;
    const float ds_hi = q.xl4 ? __shfl_xor_sync(0xffffffffu, ds, 4) : 0.0f; /* the 32-block's second 16 */
    if (valid) {
        const uint32_t packed = q8_pack4(c);
        *(uint32_t *)(q.qs + idx4) = packed;
        if ((idx4 & 31) == 0) q.d[idx4 >> 5] = d;
        if ((idx4 & 15) == 0) q.s[idx4 >> 4] = ds;
        /* (4 values at idx4, 4-aligned: one word in either copy) */
        if (q.xl4) *(uint32_t *)(q.xl4 + cu_xl4_at(idx4)) = packed;
        if (q.xl6) *(uint32_t *)(q.xl6 + cu_xl6_at(idx4)) = packed;
        if ((idx4 & 31) == 0) cu_xl_block(q.xl4, q.xl6, idx4, d, ds + ds_hi);
    }
}

/* One value per lane, the 32 lanes of the warp one 32-block: this lane's code *qv, the
 * block's scale *d and *ds = d * the sum of the codes of this lane's 16-lane half. */
static __device__ __forceinline__ void q8_quant1(float v, int *qv, float *d, float *ds) {
    const float a = warp_max(fabsf(v));
    *d = a / 127.0f;
    const float id = a > 0.0f ? 127.0f / a : 0.0f;
    *qv = __float2int_rn(v * id);
    int s = *qv;
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    *ds = *d * (float)s;
}

/* Quantizes one value per lane; the 32 lanes of the warp form one 32-block
 * (idx = flat index of this lane's value, 32-aligned at lane 0). */
static __device__ __forceinline__ void q8_store1(cu_q8 q, int64_t idx, float v, int valid) {
    int qv;
    float d, ds;
    q8_quant1(v, &qv, &d, &ds);
    const float ds_hi = q.xl4 ? __shfl_xor_sync(0xffffffffu, ds, 16) : 0.0f; /* the second 16 */
    if (valid) {
        q.qs[idx] = (int8_t)qv;
        if ((idx & 31) == 0) q.d[idx >> 5] = d;
        if ((idx & 15) == 0) q.s[idx >> 4] = ds;
        if (q.xl4) q.xl4[cu_xl4_at(idx)] = (uint8_t)qv;
        if (q.xl6) q.xl6[cu_xl6_at(idx)] = (uint8_t)qv;
        if ((idx & 31) == 0) cu_xl_block(q.xl4, q.xl6, idx, d, ds + ds_hi);
    }
}

/* RoPE of one pair (shared by rope.cu and the fused rope+store in attn.cu so the
 * two paths round identically). cs = the model's (cos, sin) table [n_ctx][rope_dim/2]
 * built at init like the CPU reference (theta in double, then rounded to f32);
 * NULL = compute it here the same way (other rope_dim/base, tests). */
static __device__ __forceinline__ float2 rope_cs(const float2 *cs, int i, int p, int rope_dim, float base) {
    if (cs) return cs[(int64_t)p * (rope_dim / 2) + i];
    const double theta = (double)p * pow((double)base, -2.0 * i / rope_dim);
    double sd, cd;
    sincos(theta, &sd, &cd);
    return make_float2((float)cd, (float)sd);
}
/* x rotated with its pair partner p by cs = (cos, sin): x cos - p sin for the first of
 * the pair, x cos + p sin for the second, the own product fused and the partner's
 * rounded, as the CPU backend's AVX2 RoPE (fmaddsub), so that every GPU path (rope_pair,
 * the one-token attention's registers) rounds alike whatever the compiler contracts */
static __device__ __forceinline__ float rope_rot(float x, float p, float2 cs, bool second) {
    const float ps = __fmul_rn(p, cs.y);
    return __fmaf_rn(x, cs.x, second ? ps : -ps);
}
static __device__ __forceinline__ void rope_pair(float *xh, int i, float2 cs, int rope_dim, int mode) {
    const int half = rope_dim / 2;
    const int a = mode ? i : 2 * i, b = mode ? i + half : 2 * i + 1;
    const float x0 = xh[a], x1 = xh[b];
    xh[a] = rope_rot(x0, x1, cs, false);
    xh[b] = rope_rot(x1, x0, cs, true);
}

/* ------------------------------------------------------------------------- */
/* Launchers (one family per file)                                           */
/* ------------------------------------------------------------------------- */
/* dequant.cu: per-type dequantization of 8 consecutive values (device layout). */
/* elementwise.cu */
/* cs_now (NULL: not written): the RoPE table's row at pos[0] (half float2), for the
 * one-token attention (cu_attn_args.cs_now); scale: the rows times it (gemma3's
 * embedding scale, as cu_scale after would; 1: none) */
void cu_embed(cu_ctx *S, float *out, const mf_weight *w, const int32_t *d_tok, int n, const float2 *cs_tab,
              int half, const int32_t *d_pos, float2 *cs_now, float scale);
void cu_get_rows(cu_ctx *S, float *dst, const float *src, const int32_t *d_idx, int n_idx, int width);
void cu_add(cu_ctx *S, float *x, const float *y, int64_t n);
/* dst_dev (a device pointer to mapped pinned host memory) = src, nbytes a multiple of 16,
 * both 16-byte aligned */
void cu_store_host(cu_ctx *S, void *dst_dev, const void *src, size_t nbytes);
/* out = silu(g) * u; also writes q8 of out when q != NULL (n % 32 == 0). */
void cu_swiglu(cu_ctx *S, float *out, const float *g, const float *u, int64_t n, const cu_q8 *q);
/* gemma3 (elementwise.cu): out = gelu_tanh(g) * u; x *= s; x = c tanh(x / c) */
void cu_geglu(cu_ctx *S, float *out, const float *g, const float *u, int64_t n, const cu_q8 *q);
void cu_scale(cu_ctx *S, float *x, float s, int64_t n);
void cu_softcap(cu_ctx *S, float *x, float c, int64_t n);
void cu_quantize_q8(cu_ctx *S, const float *x, int64_t n, const cu_q8 *q);
void cu_to_f16(cu_ctx *S, __half *dst, const float *x, int n, int K, int Kp);
/* dst [rows][Kp] f16 = rows r0..r0+nr of w, zero-padded from K to Kp. */
void cu_dequant_f16(cu_ctx *S, __half *dst, const mf_weight *w, int64_t r0, int64_t nr, int Kp);
/* Repacks raw file rows (src, stride = file row bytes) into the device layout. */
void cu_repack(cu_ctx *S, void *dst, const void *src, uint32_t type, int64_t cols, int64_t nrows);

/* norm.cu: out = rmsnorm(x (+ y when y != NULL, written back to x)) * w; q8 of out when q. */
void cu_rmsnorm(cu_ctx *S, float *out, float *x, const float *y, const float *w, int n, int dim, float eps,
                const cu_q8 *q);
/* The same after a post-norm (gemma3, path post-norm-add): x += rmsnorm(y) * pw (y may
 * hold rmsnorm(y) * pw after), then out = rmsnorm(x) * w, in one launch. */
void cu_rmsnorm_post(cu_ctx *S, float *out, float *x, float *y, const float *pw, const float *w, int n, int dim,
                     float eps, const cu_q8 *q);
/* The same writing also xh = f16 of out (f2h2_sat, the rounding of cu_mmf_convert), rows
 * 0..n-1 of path mmf's activations (rows n..n_pad-1 keep what they held: a GEMM's
 * output column depends on its own token row only, and gemm_store drops the others).
 * 0 (nothing launched) where dim is not a multiple of 4 up to 16384. */
int cu_rmsnorm_h(cu_ctx *S, float *out, __half *xh, float *x, const float *y, const float *w, int n, int dim, float eps);
struct cu_mmq_act;
/* Prefill: the same (y: with the residual add) writing a's MMQ int8 form of its output
 * (cu_mmq_quantize's codes) and, unless out is NULL, the f32 output. 0 (nothing
 * launched) where dim does not split into whole 32-blocks over <= 1024 threads. */
int cu_rmsnorm_mq(cu_ctx *S, float *out, float *x, const float *y, const float *w, int n, int dim, float eps,
                  cu_mmq_act *a);

/* rope.cu: up to two tensors rotated in one launch (q and k of one layer). */
struct cu_rope_job {
    float *x;
    int n_heads;
};
void cu_rope(cu_ctx *S, const cu_rope_job *jobs, int njobs, const int32_t *d_pos, int n, int head_dim,
             int rope_dim, float base, int mode, const float2 *cs);
/* cs[p][i] = (cos, sin)(p * base^(-2i/rope_dim)) for p < n_ctx, computed in double. */
/* the (cos, sin) table [n_ctx][r->dim/2] of RoPE r with its scaling, as rope.c's rope_cs
 * computes each entry; d_ff: r->freq_factors on the device (NULL when r has none) */
void cu_rope_table(cu_ctx *S, float2 *cs, int n_ctx, const mf_rope *r, const float *d_ff);

/* mmv_*.cu: decode GEMV for n <= 8 columns, several matrices of one type/K per launch. */
#define CU_MMV_MAXMAT 3
#define CU_MMV_MAXCOLS 8
struct cu_mmv_args {
    const uint8_t *w[CU_MMV_MAXMAT];
    float *out[CU_MMV_MAXMAT];
    const float *bias[CU_MMV_MAXMAT];
    int rows[CU_MMV_MAXMAT];
    int nmat;
    int64_t stride;       /* device row stride (bytes) */
    int K;                /* cols */
    int ncols;            /* tokens (<= 8) */
    const float *x;       /* f32 activations [ncols][K] (f32/f16/bf16 weights, generic path) */
    cu_q8 q;              /* q8 activations (quantized weights) */
    int accum;            /* out[0] += the product: the residual add folded into the GEMV */
    int64_t stride2;      /* xstm: row stride of the last matrix, of the second type */
    int ring_pre;         /* xst, xstm, xst2, xsg: rows each ring requests before pdl_wait, the rest of
                             its depth after (the caller picks it from cu_tune: blocks.cu) */
};
/* Returns 1 when a dp4a kernel exists for the type. */
int cu_mmv_q8_supported(uint32_t type);
void cu_mmv_q8(cu_ctx *S, uint32_t type, const cu_mmv_args *a);      /* mmv_kquant.cu / mmv_q.cu */
/* Matrices of type t1 and, last, one of type t2 (same K; a->stride2 its row stride):
 * one xstm launch where that kernel takes it (one column, from the xst size), else a
 * launch per type. */
void cu_mmv_q8_mixed(cu_ctx *S, uint32_t t1, uint32_t t2, const cu_mmv_args *a);
int cu_mmv_mixed_supported(uint32_t t1, uint32_t t2);
/* h = silu(W0 x) * (W1 x) for the two matrices of a (gate, up) with its q8 written to hq
 * (not a->q, which the launch reads), in one launch (mmv_xsg.cuh: 2 xsgs, 1 xsg); 0 when
 * neither takes the launch (then nothing ran). */
int cu_mmv_q8_swiglu(cu_ctx *S, uint32_t type, const cu_mmv_args *a, float *h, const cu_q8 *hq);
#define MMV_XSG_DEPTH 3 /* the most ring rows per warp xsgs is built for (cu_tune.xsg_depth; mmv_xsg.cuh says why) */
/* Host-side set-up of the GEMVs (occupancy lookups, shared-memory limits), at init,
 * before any capture. */
void cu_mmv_prepare(void);
/* 1 when the xs GEMV takes one-column launches of this type and width. */
int cu_mmv_xs_takes(uint32_t type, int K);
/* Shared memory per block the xst GEMV asks for (bytes). */
int cu_mmv_xst_smem_need(void);
void cu_mmv_f(cu_ctx *S, uint32_t type, const cu_mmv_args *a);       /* mmv_float.cu: f32 activations, any type */

/* mm.cu: prefill GEMM out[M][N] = A[M][Kp] . B[N][Kp]^T (+ bias), f16 in, f32 accumulate. */
void cu_gemm_f16(cu_ctx *S, float *out, int ldo, const __half *A, const __half *B, const float *bias, int M,
                 int N, int Kp);

/* mmq.cu: prefill GEMMs on int8 tensor cores for q4_K, q6_K, q8_0 (K % 256 == 0).
 * The activations' int8 form, written by cu_mmq_quantize for n tokens of K values:
 *   q  [n_pad][K]     int8 codes, round(x / d) per 32-block, token-major
 *   d  [K/32][n_pad]  f32 amax / 127, block-major (pre-transposed)
 *   s  [K/32][n_pad]  f32 d * sum of the block's 32 codes
 *   is [K/16][n_pad]  int32 sum of each 16 codes
 * n_pad = n rounded up to CU_MMQ_NPAD; the padding tokens are zeros. */
#define CU_MMQ_NPAD 64
struct cu_mmq_act {
    int8_t *q;
    float *d, *s;
    int *is;
    int n_pad;
    float *part;      /* split-K partial sums (NULL: no split), part_cap floats */
    int64_t part_cap;
};
int cu_mmq_supported(uint32_t type, int64_t K);
int cu_mmq_npad(int n);
int cu_mmq_smem_need(void); /* bytes of shared memory a block of the MMQ tiles takes at most */
void cu_mmq_quantize(cu_ctx *S, const float *x, int n, int K, cu_mmq_act *a);
/* moe.cu: a layer's experts (plan.h cu_moe_kind; the file's comment says how). The
 * grouping's device buffers, for up to cap (token, slot) rows: */
#define CU_MOE_MAX_E 256 /* experts a route kernel takes (8 a lane of its warps) */
#define CU_MOE_TILE 64   /* the wide MMQ tile's columns (mmq.cu): a tile of the experts' GEMM reads them */
#define CU_MOE_TILE_ROWS 60 /* rows of one expert a tile takes: its 64 columns start at the first row
                               rounded down to 4 (the activations' scales are copied 4 rows at a time,
                               16 bytes), so up to 3 columns before it belong to another expert */
struct cu_moe_buf {
    int32_t *ids;  /* [cap] slot t*k+j's expert */
    float *w;      /* [cap] its weight (renormalised over the token's k) */
    int32_t *pos;  /* [cap] slot i's row in expert order */
    int32_t *src;  /* [cap] row p's token */
    int4 *groups;  /* [groups_cap] (expert, first row, rows, 0) of each expert with rows, then empty */
    int4 *tiles;   /* [tiles_cap] (expert, first row, rows <= CU_MOE_TILE_ROWS, 0), then empty */
    int cap, groups_cap, tiles_cap;
};
/* The launches' fixed grids for n tokens of k slots over E experts: at most min(E, n*k)
 * experts have rows, and their tiles are at most n*k / TILE plus one partial tile each. */
static inline int cu_moe_groups(int n, int k, int E) { return n * k < E ? n * k : E; }
static inline int cu_moe_tiles(int n, int k, int E) {
    return (n * k + CU_MOE_TILE_ROWS - 1) / CU_MOE_TILE_ROWS + cu_moe_groups(n, k, E);
}
/* scores [n][E] = x [n][K] . W^T, f32 weights (the router, prefill widths) */
void cu_moe_router(cu_ctx *S, float *out, const float *x, const float *w, int n, int E, int K);
void cu_moe_route(cu_ctx *S, const float *scores, int n, int E, int k, const cu_moe_buf *r);
/* out[m][p][R] = the group's expert's matrix m (w[m] + expert * wslice) times the q8 row
 * src[p] (src NULL: p) of q, for each row p of each group; nmat 1 or 2 (gate and up). */
struct cu_moe_gemv_args {
    const uint8_t *w[2];
    float *out[2];
    int nmat;
    int64_t wslice, stride;
    int R, K;
    const int4 *groups;
    const int32_t *src;
    cu_q8 q;
    int max_rows; /* the most rows a group can have (the step's tokens): 1 takes a lean kernel */
};
void cu_moe_gemv(cu_ctx *S, uint32_t type, const cu_moe_gemv_args *a, int groups);
/* out[t] (n tokens) = the sum over t's k slots in order of w * y[pos] */
void cu_moe_combine(cu_ctx *S, float *out, const float *y, const int32_t *pos, const float *w, int n, int k, int dim);
/* (mmq.cu) the prepass over rows gathered into expert order, or the SwiGLU of g (x) and u;
 * and the GEMM over the grouping's tiles */
void cu_mmq_quantize_rows(cu_ctx *S, const float *x, const float *u, const int32_t *src, int n, int K, cu_mmq_act *a);
void cu_mmq_moe(cu_ctx *S, float *out, const uint8_t *W, int64_t wslice, int64_t stride, uint32_t type, int R, int K,
                const cu_mmq_act *a, const int4 *tiles, int ntiles);
/* the same for silu(g) * u (the FFN's SwiGLU, cu_swiglu's arithmetic), unstored in f32 */
void cu_mmq_quantize_swiglu(cu_ctx *S, const float *g, const float *u, int n, int K, cu_mmq_act *a);
/* out[n][R] (row stride ldo) = x . W^T (+ bias[R]); accum: out += instead. W: R rows of
 * the device layout, row stride `stride` bytes; a: x quantized by cu_mmq_quantize.
 * plane: W's plane (cu_q4x_build, cu_q6x_build) or NULL; with it the kernel reads the
 * scales (q6_K: the codes too) from the plane, with the same arithmetic (the outputs are
 * bit-identical). out2 (NULL: none): rows rsplit.. go to out2 [n][R - rsplit] instead
 * (row stride ldo too): two matrices stored one after the other (gate and up) in one
 * launch, split-K as each alone would be. */
void cu_mmq(cu_ctx *S, float *out, int ldo, const uint8_t *W, int64_t stride, uint32_t type, int R, int K,
            const cu_mmq_act *a, int n, const float *bias, int accum, const uint8_t *plane, float *out2, int rsplit);
/* mmf.cu: q4_K and q6_K prefill GEMMs on f16 tensor cores, the weights dequantized in
 * registers from a plane in mma fragment order (cu_mmf_plane_build, cu_mmf_plane_bytes:
 * 320 B (q4_K) or 576 B (q6_K) per 16 rows x 32 values). Activations f16 [n_pad][K],
 * n_pad = cu_mmf_npad(n) (n rounded up to 8 below CU_MMF_MIN_N, else to CU_MMF_NPAD), padding zeros:
 * cu_mmf_convert (x), cu_mmf_swiglu (silu(g) * u). cu_mmf: out, ldo, bias, accum,
 * out2/rsplit as cu_mmq's. From CU_MMF_MIN_N columns the 128x64 tile; below, the column
 * kernel (one 16-row tile a block, K split over its warps: the 128-row tile would leave
 * most SMs idle). */
#define CU_MMF_NPAD 64
#define CU_MMF_MIN_N 128
/* The column kernel's columns (path mmf-cols), as measured on the 7B q4_k_m (bench -s,
 * aggregate tok/s, kernel on vs off): 8 sequences 2007.6 vs 1578.6; 2: 520.9 vs 882.4 and
 * 4: 1030.5 vs 1283.4 (the GEMVs win), 16..64: 3059 vs 3189, 3940 vs 5791, 5269 vs 7751
 * (the int8 MMQ split-K wins). So it takes 8 columns, whole layers (blocks.cu). */
#define CU_MMF_COLS_MIN 8
#define CU_MMF_COLS_MAX 8
int cu_mmf_supported(uint32_t type, int64_t K);
int cu_mmf_npad(int n);
size_t cu_mmf_plane_bytes(uint32_t type, int R, int K);
void cu_mmf_plane_build(cu_ctx *S, uint32_t type, uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K);
void cu_mmf_convert(cu_ctx *S, __half *xh, const float *x, int n, int K);
void cu_mmf_swiglu(cu_ctx *S, __half *xh, const float *g, const float *u, int n, int K);
/* The shared memory a block of the TMA column kernel needs at most (its largest tile). */
int cu_mmf_tma_smem_need(void);
/* 8 columns on sm_90 (path mmf-swiglu): a gate+up pair's plane (gate rows 0..ff-1, up
 * rows ff..2ff-1) times xh, stored only as sw [n][ff] = f16(silu(gate) * up), the
 * rounding of cu_mmf_swiglu on the sums cu_mmf would store. 0 (nothing launched)
 * where it does not apply. */
int cu_mmf_cols_swiglu(cu_ctx *S, uint32_t type, __half *sw, const uint8_t *plane, int ff, int K, const __half *xh, int n);
void cu_mmf(cu_ctx *S, uint32_t type, float *out, int ldo, const uint8_t *plane, int R, int K, const __half *xh, int n,
            const float *bias, int accum, float *out2, int rsplit);
/* The q6_K plane of the prefill design (W_exp and W_dsc, made once at registration), for
 * R rows of K = 256 nb values, super-block-major so that a tile's share of one stage is
 * contiguous:
 *   exp [nb][R][256]  int8  the codes expanded and centred, q - 32, in value order
 *   dsc [nb][16][Rp]  f32   d * sc of each 16 values (Rp = R rounded up to 4; rows R..Rp-1 zero)
 * cu_q6x_bytes: its size; cu_q6x_build: from W (device layout, row stride `stride`). */
size_t cu_q6x_bytes(int R, int K);
void cu_q6x_build(cu_ctx *S, uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K);
/* The q4_K plane (W_dsc): the scales the kernel decodes each stage, made once; the
 * nibbles stay in W.
 *   dsc  [nb][8][Rp] f32  d * sc of each 32 values
 *   dmin [nb][Rp]    f32
 *   m    [nb][Rp][8] u8   the 6-bit mins */
size_t cu_q4x_bytes(int R, int K);
void cu_q4x_build(cu_ctx *S, uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K);
/* Either plane by weight type (0 bytes: the type has none). */
size_t cu_mmq_plane_bytes(uint32_t type, int R, int K);
void cu_mmq_plane_build(cu_ctx *S, uint32_t type, uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K);

/* attn.cu */
struct cu_attn_args {
    int n;                /* tokens */
    int n_head, n_kv, hd, n_ctx;
    const int32_t *pos, *seq;     /* device [n] */
    __half *kc, *vc;              /* layer cache [n_seq][n_kv][n_ctx][hd] */
    /* the cache as q8_0 instead (--cache-type-k/-v q8_0; kc, vc NULL): the same rows, each
     * hd / 32 blocks of ggml's block_q8_0 (f16 d, 32 int8; 34 bytes, so 2-byte aligned),
     * as the CPU stores them. Read by the store, split and flash kernels; the one-token
     * kernel (kernel_attn_dec) does not take it (the plan runs the store and split kernels:
     * cu_plan_facts.kv_q8). NULL: the f16 cache. */
    uint8_t *kq, *vq;
    /* fused store (kernel_attn_dec, n == 1): RoPE q (in shared memory only) and k,
     * and write k, v [n_kv*hd] of the token into the cache itself */
    const float *kin, *vin;       /* NULL: the cache already holds them */
    int rope, rope_dim, rope_mode;
    float rope_base;
    const float2 *rope_cs;
    /* kernel_attn_dec with the fused store: read pos, seq and the first tile's K/V
     * rows before pos ahead of pdl_wait (path attn-pre; attn.cu says why
     * that is safe) */
    int pre;
    /* kernel_attn_dec with the fused store and one query head per kv head: the RoPE
     * (cos, sin) row at pos, written by the step's embedding kernel (cu_embed), so q, k,
     * v and it are one round trip after the wait, and the rotation is done in registers
     * (path rope-row off: NULL; attn.cu says when it applies) */
    const float2 *cs_now;
    int seq1;             /* the cache holds one sequence: seq is 0 */
    /* kernel_attn_dec: its head-group arrays sized to the model's group (1, 2, 4 or 8
     * query heads per kv head) instead of ATT_MAXG; path attn-fit (attn.cu) */
    int fit;
    /* kernel_attn_dec: warps per block, 8 or 4 (cu_tune.attn_warps; attn.cu) */
    int warps;
    /* kernel_attn_dec: where it lets the GEMV after it launch (cu_tune.attn_trigger):
     * 0 at its start, 1 after its wait (default), 2 once q/k/v are in and stored, 3 after
     * its tile loop (the later, the less that GEMV's early requests meet its loads) */
    int trigger;
    /* the split/decode kernels (n <= 8): also the f16 of the output rows ([n][n_head*hd],
     * f2h2_sat's rounding), path mmf's activations for the o-projection (path mmf-in);
     * NULL: none */
    __half *oh;
    /* a sliding layer's window (model_layer_window): token t reads positions
     * pos[t]-window+1 .. pos[t]; 0: all. The flash, split and decode kernels take it
     * (the decode kernel with path attn-dec-wide). */
    int window;
    /* kernel_attn_dec's fused store (kin): gemma3's q and k norms, each head RMS-normed
     * (eps norm_eps) and scaled by these [hd] weights before RoPE; NULL: none */
    const float *qn, *kn;
    float norm_eps;
};
/* Stores k, v rows into the cache; with rope jobs, rotates q and k first (k in place). */
void cu_kv_store(cu_ctx *S, const cu_attn_args *a, float *q, float *k, const float *v, int rope, int rope_dim,
                 float rope_base, int rope_mode, const float2 *cs);
/* Split-K attention (any n, any hd % 8 == 0 <= 256): partials then combine. */
/* With counter != NULL ([8][n_kv * groups] ints, zero) and hd 64/128: the fused
 * decode kernel (kernel_attn_dec), else split + combine. chunk % 64 == 0. */
void cu_attn_split(cu_ctx *S, const cu_attn_args *a, const float *q, float *out, float *part, int *counter,
                   int chunk, int n_chunks, const cu_q8 *q8);
/* whether kernel_attn_dec takes a head dim, query heads per kv head and window (path
 * attn-dec-wide for head dim 256 and windows) */
int cu_attn_dec_supported(const cu_ctx *S, int hd, int group, int window);
/* Flash attention with tensor cores for hd 64/128; tiles from the host. */
/* head dims the flash kernel runs here (256 where cu_ctx.flash256); the shared memory a
 * block of the given head dim needs (db: the double-buffered forms, path flash-db) */
int cu_attn_flash_supported(const cu_ctx *S, int hd);
size_t cu_attn_flash_smem_need(int hd, int db);
void cu_attn_flash(cu_ctx *S, const cu_attn_args *a, const float *q, float *out, const int4 *d_tiles,
                   int n_tiles);

#endif

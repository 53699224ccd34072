/* ptx.cuh - the PTX sequences the tensor-core kernels share, written once:
 * cp.async (16-byte global->shared copies, commit groups), ldmatrix, and mma.sync on
 * f16 (m16n8k16) and on int8 (m16n8k32, m16n8k16). Each compiles to nothing below
 * sm_80 (the backend's oldest target is sm_80, so the guard only keeps host passes
 * and other tools quiet). Fragment layouts are the PTX ISA's ("Matrix fragments for
 * mma.m16n8k32"): g = lane / 4, t = lane % 4;
 *   A 16x32 s8 (row): a0 row g, k 4t..4t+3; a1 row g+8; a2 row g, k 16+4t..; a3 row g+8, k 16+4t..
 *   B 32x8 s8 (col):  b0 k 4t..4t+3, col g; b1 k 16+4t.., col g
 *   C 16x8 s32:       c0,c1 row g, cols 2t, 2t+1; c2,c3 row g+8
 * (m16n8k16 s8: a0, a1 and b0 of the above, k < 16.) */
#ifndef MINFER_CUDA_PTX_CUH
#define MINFER_CUDA_PTX_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define PTX_SM80 1
#else
#define PTX_SM80 0
#endif

/* 16 bytes global -> shared; bytes < 16 zero-fills the rest (0: all zeros, src unread). */
static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int bytes) {
#if PTX_SM80
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
#endif
}
/* 4-byte form (cp.async.ca: the .cg form takes only 16), zero-filled past `bytes`. */
static __device__ __forceinline__ void cp_async4(void *smem, const void *gmem, int bytes) {
#if PTX_SM80
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
#endif
}
static __device__ __forceinline__ void cp_async_commit() {
#if PTX_SM80
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
/* Waits until at most N of this thread's commit groups are still in flight. Other
 * threads' copies are visible only after a barrier that follows every thread's wait. */
template <int N>
static __device__ __forceinline__ void cp_async_wait() {
#if PTX_SM80
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* Four 8x8 b16 matrices; lane l gives the row address of matrix l / 8, row l % 8
 * (16-byte aligned); r[i] is this lane's word of matrix i (row g, word t). */
static __device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
#if PTX_SM80
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#endif
}

/* c += a . b on f16, f32 accumulation. */
static __device__ __forceinline__ void mma_f16_16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if PTX_SM80
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* d = a . b + c on int8, int32 accumulation (k = 32). */
static __device__ __forceinline__ void mma_s8_16832(int *d, const uint32_t *a, uint32_t b0, uint32_t b1, int c01,
                                                    int c23) {
#if PTX_SM80
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c01), "r"(c01), "r"(c23), "r"(c23));
#endif
}
/* The same with per-column c: c0 for column 2t, c1 for column 2t+1 (both rows). */
static __device__ __forceinline__ void mma_s8_16832c(int *d, const uint32_t *a, uint32_t b0, uint32_t b1, int c0,
                                                     int c1) {
#if PTX_SM80
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0), "r"(c1), "r"(c0), "r"(c1));
#endif
}
/* d = a . b + c on int8, k = 16: a0, a1 of the A fragment, b0 of B; c per column as above. */
static __device__ __forceinline__ void mma_s8_16816c(int *d, uint32_t a0, uint32_t a1, uint32_t b0, int c0, int c1) {
#if PTX_SM80
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
        "{%7,%8,%9,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(c0), "r"(c1), "r"(c0), "r"(c1));
#endif
}

/* d = a . b + d on tf32 (f32 accumulation), m16n8k8: a row-major 16x8 (a0 (g, t),
 * a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)), b col-major 8x8 (b0 (t, g), b1 (t+4, g)),
 * d as the int8 shapes' (g, 2t..2t+1 | g+8, 2t..2t+1); g = lane / 4, t = lane % 4.
 * Operands are f32 bit patterns whose low 13 mantissa bits the tensor core ignores. */
static __device__ __forceinline__ void mma_tf32_1688(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if PTX_SM80
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
/* x as tf32 rounded to nearest (the high part of a two-term split). */
static __device__ __forceinline__ uint32_t f32_to_tf32(float x) {
    uint32_t r = 0;
#if PTX_SM80
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#endif
    return r;
}

/* ---- TMA bulk copies and mbarriers (sm_90+) ----
 * The ring GEMVs (mmv_ring.cuh) stream weight rows into shared memory with
 * cp.async.bulk, each copy completing (counted in bytes) on the mbarrier of its slot; the
 * probe bench/sm_rates.cu uses the same barriers. Each compiles to nothing below sm_90.
 * The weight copy with the streamed-weight L2 policy (tma_copy) is in common.cuh,
 * beside that policy: this header includes nothing of the backend's. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PTX_SM90 1
#else
#define PTX_SM90 0
#endif

static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
/* The barrier's arrival, telling it the bytes to expect (once per phase; a run of copies
 * on one barrier tells it their total), and a bulk copy that completes on it
 * (common.cuh's tma_copy is the same copy with the streamed-weight L2 policy). */
static __device__ __forceinline__ void tma_expect(uint64_t *bar, uint32_t bytes) {
#if PTX_SM90
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
#endif
}
/* (the copy without the streamed-weight L2 policy: for activations, which every block reads) */
static __device__ __forceinline__ void tma_copy_plain(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
#if PTX_SM90
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
}
static __device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t phase) {
#if PTX_SM90
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(phase)
                     : "memory");
#endif
}
/* One thread initialises a warp's n ring barriers, before the ring's first request. */
static __device__ __forceinline__ void mbar_init_ring(uint64_t *bar, int n) {
#if PTX_SM90
    for (int s = 0; s < n; s++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar + s)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

#endif

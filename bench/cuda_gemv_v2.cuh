/* cuda_gemv_v2.cuh - decode GEMV, version 2, kept in the kernel lab (bench/cuda_gemv.cu)
 * after it lost to the main tree's version 1 (src/cuda/mmv.cuh) by 14-20% on every
 * q4_K shape of the 7B and tied on q6_K (bench/RESULTS.md, 2026-11-29): q4_K and q6_K on q8 activations with dp4a; other types, and column
 * counts whose activations do not fit in 48 KB of shared memory, fall back to v1.
 *
 * Same maths and outputs as v1 (out[c][r] = sum_k W[r][k] x[c][k] (+ bias)), same
 * multi-matrix launches (stacked q/k/v, gate/up), fixed grid, no host sync (graph
 * capture), PDL rule of common.cuh. What changes is how the bytes move:
 *
 *   - block = 8 warps; warp w takes RPW consecutive rows (RPW = 2), so one block
 *     covers 16 rows and a 4096-row matrix is 256 blocks (2 per SM on 132 SMs);
 *   - every lane issues the loads of RPW x UNR units (q4_K: 2 x 4 units = 16
 *     LDG.128; q6_K: 2 x 2 units = 12 LDG.128 + 8 small) before it uses any, the
 *     first chunk before pdl_wait(), so the weight stream overlaps the tail of the
 *     previous kernel and the activation staging;
 *   - the q8 activations (qs, d, s of all columns) are staged once per block into
 *     shared memory (16-byte copies) instead of every warp reading them through L1;
 *     the reads are bank-conflict-free (see the units);
 *   - q4_K lane unit = half a 64-value group (16 bytes of qs): the qs load of a warp
 *     is 32 x 16 contiguous bytes (streamed, L1::no_allocate), the 16-byte header is
 *     shared by the 8 lanes of one super-block in the same instruction (__ldg).
 *
 * Deterministic: a fixed lane -> unit map and a fixed shuffle tree. The sum order
 * differs from v1 (a q4_K group's two halves are summed in float, v1 sums them in
 * int), so v1 and v2 agree to float rounding, not bit for bit. */
#include "../src/cuda/mmv.cuh"

#define MMV2_WARPS 8
#define MMV2_RPW 2

/* Streamed weights: read once, keep them out of L1. */
static __device__ __forceinline__ uint4 ldg16_na(const void *p) {
    uint4 v;
#if defined(__CUDA_ARCH__)
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
#else
    v = *(const uint4 *)p;
#endif
    return v;
}

/* The block's copy of the q8 activations: qs [ncols*K], d [ncols*K/32], s [ncols*K/16]. */
struct mmv2_x {
    const int8_t *qs;
    const float *d;
    const float *s;
};
static inline size_t mmv2_smem(int ncols, int K) { return (size_t)ncols * K * 11 / 8; }

/* 6-bit scale and min of sub-block j (the q4_K 12-byte packing s0|s1|s2). */
static __device__ __forceinline__ void k4_sm2(uint32_t s0, uint32_t s1, uint32_t s2, int j, int *sc, int *m) {
    const int sh = 8 * (j & 3);
    if (j < 4) {
        *sc = (s0 >> sh) & 63;
        *m = (s1 >> sh) & 63;
    } else {
        *sc = ((s2 >> sh) & 0xF) | (((s0 >> sh) >> 6 & 3) << 4);
        *m = ((s2 >> sh) >> 4 & 0xF) | (((s1 >> sh) >> 6 & 3) << 4);
    }
}

/* q4_K: unit u of a row = (super-block b = u/8, group g = (u/2)%4, half hf = u%2):
 * qs bytes [32g + 16hf, +16) of block b = values 64g + 16hf + 0..15 (low nibbles,
 * sub-block 2g) and 64g + 32 + 16hf + 0..15 (high nibbles, sub-block 2g+1).
 * Shared-memory reads: within a quarter warp (8 lanes, one super-block) the low
 * halves sit at 64g + 16hf = 4 distinct 16-byte slots mod 128 B; lanes with g >= 2
 * read their high half first (slots +32), so each read instruction hits 8
 * distinct slots: no bank conflict. */
struct unit2_q4k {
    enum { QK = 256, UPB = 8, UNR = 4 };
    struct W {
        uint4 h, q;
    };
    static __device__ __forceinline__ void load(const uint8_t *row, int u, W &w) {
        const int b = u >> 3, g = (u >> 1) & 3, hf = u & 1;
        const uint8_t *blk = row + (int64_t)b * 144;
        w.h = ldg16(blk);
        w.q = ldg16_na(blk + 16 + 32 * g + 16 * hf);
    }
    static __device__ __forceinline__ float dot(const W &w, int u, const mmv2_x &x, int xoff) {
        const int b = u >> 3, g = (u >> 1) & 3, hf = u & 1;
        const int xg = xoff + b * 256 + 64 * g;  /* first value of the group */
        const int xb = xg + 16 * hf;
        const bool sw = g >= 2;
        const int4 r0 = *(const int4 *)(x.qs + xb + (sw ? 32 : 0));
        const int4 r1 = *(const int4 *)(x.qs + xb + (sw ? 0 : 32));
        const int4 xl = sw ? r1 : r0, xh = sw ? r0 : r1;
        const uint32_t Q[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
        const int XL[4] = {xl.x, xl.y, xl.z, xl.w}, XH[4] = {xh.x, xh.y, xh.z, xh.w};
        int dlo = 0, dhi = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            dlo = dp4a((int)(Q[k] & M4), XL[k], dlo);
            dhi = dp4a((int)((Q[k] >> 4) & M4), XH[k], dhi);
        }
        int sc0, m0, sc1, m1;
        k4_sm2(w.h.y, w.h.z, w.h.w, 2 * g, &sc0, &m0);
        k4_sm2(w.h.y, w.h.z, w.h.w, 2 * g + 1, &sc1, &m1);
        const float d = h2f((uint16_t)(w.h.x & 0xffff)), dmin = h2f((uint16_t)(w.h.x >> 16));
        const int i32 = xg >> 5;
        const float slo = x.s[xb >> 4], shi = x.s[(xb + 32) >> 4];
        return d * ((float)sc0 * x.d[i32] * (float)dlo + (float)sc1 * x.d[i32 + 1] * (float)dhi) -
               dmin * ((float)m0 * slo + (float)m1 * shi);
    }
};

/* q6_K (planar rows [ql nb*128][qh nb*64][sc nb*16][d nb*2]): the v1 unit
 * (block b = u/4, half hh = (u/2)%2, l0 = 16*(u%2)) = 4 runs of 16 values at
 * 128hh + l0 + 32qq. Shared-memory reads: mod 128 B a quarter warp's runs sit at
 * l0 + 32qq (2 slots per qq), so lane reads run qq ^ r (r = (u/2)%4 differs across
 * the 4 lane pairs) in its j-th read and un-permutes in registers (selects): 8
 * distinct slots per instruction. */
struct unit2_q6k {
    enum { QK = 256, UPB = 4, UNR = 2 };
    struct W {
        uint4 a, b, h;
        uint2 sc;
        uint16_t d;
    };
    static __device__ __forceinline__ void load(const uint8_t *row, int nb, int u, W &w) {
        const int b = u >> 2, hh = (u >> 1) & 1, l0 = (u & 1) * 16;
        const uint8_t *ql = row + (int64_t)b * 128 + 64 * hh + l0;
        w.a = ldg16(ql);
        w.b = ldg16(ql + 32);
        w.h = ldg16_na(row + (int64_t)nb * 128 + (int64_t)b * 64 + 32 * hh + l0);
        w.sc = __ldg((const uint2 *)(row + (int64_t)nb * 192 + (int64_t)b * 16 + 8 * hh));
        w.d = __ldg((const unsigned short *)(row + (int64_t)nb * 208 + (int64_t)b * 2));
    }
    static __device__ __forceinline__ float dot(const W &w, int u, const mmv2_x &x, int xoff) {
        const int b = u >> 2, hh = (u >> 1) & 1, l0 = (u & 1) * 16;
        const int xb = xoff + b * 256 + 128 * hh + l0;
        const int r = (u >> 1) & 3;
        int4 X[4];
#pragma unroll
        for (int j = 0; j < 4; j++) X[j] = *(const int4 *)(x.qs + xb + 32 * (j ^ r));
        /* X[j] holds run j ^ r: un-permute with two levels of selects */
        int4 Y[4], x4[4];
#pragma unroll
        for (int j = 0; j < 4; j++) Y[j] = (r & 1) ? X[j ^ 1] : X[j];
#pragma unroll
        for (int j = 0; j < 4; j++) x4[j] = (r & 2) ? Y[j ^ 2] : Y[j];
        const uint32_t A[4] = {w.a.x, w.a.y, w.a.z, w.a.w};
        const uint32_t B[4] = {w.b.x, w.b.y, w.b.z, w.b.w};
        const uint32_t H[4] = {w.h.x, w.h.y, w.h.z, w.h.w};
        const int X0[4] = {x4[0].x, x4[0].y, x4[0].z, x4[0].w}, X1[4] = {x4[1].x, x4[1].y, x4[1].z, x4[1].w};
        const int X2[4] = {x4[2].x, x4[2].y, x4[2].z, x4[2].w}, X3[4] = {x4[3].x, x4[3].y, x4[3].z, x4[3].w};
        int dd0 = 0, dd1 = 0, dd2 = 0, dd3 = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t q1 = (A[k] & M4) | ((H[k] & 0x03030303u) << 4);
            const uint32_t q2 = (B[k] & M4) | (((H[k] >> 2) & 0x03030303u) << 4);
            const uint32_t q3 = ((A[k] >> 4) & M4) | (((H[k] >> 4) & 0x03030303u) << 4);
            const uint32_t q4 = ((B[k] >> 4) & M4) | (((H[k] >> 6) & 0x03030303u) << 4);
            dd0 = dp4a((int)__vsub4(q1, 0x20202020u), X0[k], dd0);
            dd1 = dp4a((int)__vsub4(q2, 0x20202020u), X1[k], dd1);
            dd2 = dp4a((int)__vsub4(q3, 0x20202020u), X2[k], dd2);
            dd3 = dp4a((int)__vsub4(q4, 0x20202020u), X3[k], dd3);
        }
        const int so = l0 >> 4;
        const int8_t s0 = (int8_t)((w.sc.x >> (8 * so)) & 0xff);
        const int8_t s1 = (int8_t)((w.sc.x >> (8 * (so + 2))) & 0xff);
        const int8_t s2 = (int8_t)((w.sc.y >> (8 * so)) & 0xff);
        const int8_t s3 = (int8_t)((w.sc.y >> (8 * (so + 2))) & 0xff);
        const int i32 = xb >> 5;
        const float rr = (float)s0 * x.d[i32] * (float)dd0 + (float)s1 * x.d[i32 + 1] * (float)dd1 +
                         (float)s2 * x.d[i32 + 2] * (float)dd2 + (float)s3 * x.d[i32 + 3] * (float)dd3;
        return h2f(w.d) * rr;
    }
};

/* One load signature for both units (q4_K does not need nb). */
template <typename U>
static __device__ __forceinline__ void mmv2_load(const uint8_t *row, int nb, int u, typename U::W &w);
template <>
__device__ __forceinline__ void mmv2_load<unit2_q4k>(const uint8_t *row, int nb, int u, unit2_q4k::W &w) {
    unit2_q4k::load(row, u, w);
}
template <>
__device__ __forceinline__ void mmv2_load<unit2_q6k>(const uint8_t *row, int nb, int u, unit2_q6k::W &w) {
    unit2_q6k::load(row, nb, u, w);
}

template <typename U, int NC>
static __global__ void __launch_bounds__(MMV2_WARPS * 32) kernel_mmv2_q8(cu_mmv_args a) {
    extern __shared__ int4 mmv2_sm[];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int total = a.rows[0] + (a.nmat > 1 ? a.rows[1] : 0) + (a.nmat > 2 ? a.rows[2] : 0);
    const int g0 = (blockIdx.x * MMV2_WARPS + warp) * MMV2_RPW;
    const int K = a.K, nb = K / U::QK, nu = nb * U::UPB;
    const uint8_t *row[MMV2_RPW];
    int rm[MMV2_RPW], rr[MMV2_RPW];
#pragma unroll
    for (int i = 0; i < MMV2_RPW; i++) {
        /* rows past the end alias the last row: loads stay in bounds, stores are skipped */
        const int g = g0 + i < total ? g0 + i : total - 1;
        row[i] = mmv_row(a, g, &rm[i], &rr[i]);
    }
    typename U::W wr[MMV2_RPW][U::UNR];
    /* chunk 0: weights only, before the wait */
#pragma unroll
    for (int i = 0; i < MMV2_RPW; i++)
#pragma unroll
        for (int k = 0; k < U::UNR; k++) {
            const int u = lane + 32 * k;
            if (u < nu) mmv2_load<U>(row[i], nb, u, wr[i][k]);
        }
    pdl_wait();

    /* stage the q8 activations of the ncols columns */
    const int nc = a.ncols;
    int8_t *sqs = (int8_t *)mmv2_sm;
    float *sd = (float *)(sqs + nc * K);
    float *ss = sd + nc * K / 32;
    {
        const int n16 = nc * K / 16;
        const int4 *src = (const int4 *)a.q.qs;
        for (int i = threadIdx.x; i < n16; i += MMV2_WARPS * 32) ((int4 *)sqs)[i] = src[i];
        const int n32 = nc * K / 32;
        for (int i = threadIdx.x; i < n32; i += MMV2_WARPS * 32) sd[i] = a.q.d[i];
        for (int i = threadIdx.x; i < 2 * n32; i += MMV2_WARPS * 32) ss[i] = a.q.s[i];
    }
    __syncthreads();
    const mmv2_x x = {sqs, sd, ss};

    float acc[MMV2_RPW][NC];
#pragma unroll
    for (int i = 0; i < MMV2_RPW; i++)
#pragma unroll
        for (int c = 0; c < NC; c++) acc[i][c] = 0.0f;
    for (int u0 = 0; u0 < nu; u0 += 32 * U::UNR) {
        if (u0 > 0) {
#pragma unroll
            for (int i = 0; i < MMV2_RPW; i++)
#pragma unroll
                for (int k = 0; k < U::UNR; k++) {
                    const int u = u0 + lane + 32 * k;
                    if (u < nu) mmv2_load<U>(row[i], nb, u, wr[i][k]);
                }
        }
#pragma unroll
        for (int i = 0; i < MMV2_RPW; i++)
#pragma unroll
            for (int k = 0; k < U::UNR; k++) {
                const int u = u0 + lane + 32 * k;
                if (u < nu) {
#pragma unroll
                    for (int c = 0; c < NC; c++)
                        if (c < nc) acc[i][c] += U::dot(wr[i][k], u, x, c * K);
                }
            }
    }
#pragma unroll
    for (int i = 0; i < MMV2_RPW; i++) {
#pragma unroll
        for (int c = 0; c < NC; c++) acc[i][c] = warp_sum(acc[i][c]);
        if (lane == 0 && g0 + i < total) {
            const int m = rm[i], r = rr[i];
            const float *bias = m == 0 ? a.bias[0] : m == 1 ? a.bias[1] : a.bias[2];
            float *o = m == 0 ? a.out[0] : m == 1 ? a.out[1] : a.out[2];
            const int rows_m = m == 0 ? a.rows[0] : m == 1 ? a.rows[1] : a.rows[2];
            const float bv = bias ? bias[r] : 0.0f;
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (c < nc) o[(int64_t)c * rows_m + r] = acc[i][c] + bv;
        }
    }
}

template <typename U>
static void mmv2_launch(cu_state *S, const cu_mmv_args *a, const char *name) {
    int total = 0;
    for (int i = 0; i < a->nmat; i++) total += a->rows[i];
    const int per = MMV2_WARPS * MMV2_RPW;
    dim3 grid((total + per - 1) / per), block(MMV2_WARPS * 32);
    const size_t sm = mmv2_smem(a->ncols, a->K);
    if (a->ncols <= 1) cu_launch(S, name, kernel_mmv2_q8<U, 1>, grid, block, sm, *a);
    else if (a->ncols <= 2) cu_launch(S, name, kernel_mmv2_q8<U, 2>, grid, block, sm, *a);
    else if (a->ncols <= 4) cu_launch(S, name, kernel_mmv2_q8<U, 4>, grid, block, sm, *a);
    else cu_launch(S, name, kernel_mmv2_q8<U, 8>, grid, block, sm, *a);
}

/* Returns 1 when v2 ran the GEMV, 0 when the caller must run v1 (type without a
 * v2 kernel, or activations over the 48 KB default shared-memory limit: no
 * cudaFuncSetAttribute, so nothing host-side can fail inside a graph capture). */
int cu_mmv2_q8(cu_state *S, uint32_t type, const cu_mmv_args *a) {
    if (a->ncols < 1 || a->ncols > CU_MMV_MAXCOLS || a->K % 256 || a->nmat < 1) return 0;
    if (mmv2_smem(a->ncols, a->K) > 48 * 1024) return 0;
    switch (type) {
    case QTYPE_Q4_K: mmv2_launch<unit2_q4k>(S, a, "mmv2_q4_K"); return 1;
    case QTYPE_Q6_K: mmv2_launch<unit2_q6k>(S, a, "mmv2_q6_K"); return 1;
    default: return 0;
    }
}

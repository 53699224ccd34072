/* bench/cuda_attn.cu - kernel lab for the prefill flash attention (src/cuda/attn.cu
 * kernel_attn_flash, #included): the product kernel beside a variant whose block takes NH
 * query heads of one kv group (GQA), so each K/V tile is loaded from the cache once for
 * NH heads instead of once per head (issue 36: the 8B's 4 query heads per kv head read
 * every K/V tile 4 times from L2), and one whose K/V tiles are double-buffered by
 * cp.async (one head a block, as the product).
 *
 * One sequence of N tokens (positions 0..N-1, its K/V in the cache), 64-query tiles
 * longest first as blocks.cu attn_run lists them; per shape and variant the time of one
 * launch (median of 7 x 5) and the normalised error of its output against the product
 * kernel's.
 *
 *   build/bench/cuda_attn [N]      (on the GPU machine; default 512 and 3314) */
#include "../src/cuda/attn.cu"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define LAB_NAME "cuda_attn"
#include "cuda_check.h"
#include "lab_ctx.h"
#include "lab_util.h"

/* The variant: kernel_attn_flash with NH heads a block (4 NH warps: warp w takes head
 * h0 + w / 4 and query rows 16 (w % 4) ..), one K/V tile in shared memory for all of
 * them; the Q staging of the NH heads uses the same buffer first. Everything else (the
 * fragments, the mask, the online softmax) is the product kernel's. Dynamic shared
 * memory: max(NH, 2) x 64 rows x (HD + 8) halves. */
template <int HD, int NH>
static __global__ void __launch_bounds__(128 * NH, 1)
kernel_attn_flash_g(cu_attn_args a, const float *q, float *out, const int4 *tiles, float qscale) {
    constexpr int LD = HD + 8, NT = 128 * NH;
    extern __shared__ __align__(16) __half fa_sh[];
    __half *Ks = fa_sh, *Vs = fa_sh + FA_BK * LD;
    pdl_trigger();
    pdl_wait();
    const int4 tile = tiles[blockIdx.y];
    const int t0 = tile.x, cnt = tile.y, seq = tile.z, kmax = tile.w;
    const int G = a.n_head / a.n_kv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int hh = warp / 4, wq = warp % 4;
    const int h = blockIdx.x * NH + hh, kvh = (blockIdx.x * NH) / G;
    const int g = lane >> 2, c4 = lane & 3;
    const int q_ld = a.n_head * HD;

    for (int e = tid; e < NH * FA_BQ * HD / 4; e += NT) {
        const int hq = e / (FA_BQ * HD / 4), f = e % (FA_BQ * HD / 4);
        const int r = f / (HD / 4), d4 = (f % (HD / 4)) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < cnt) v = *(const float4 *)(q + (int64_t)(t0 + r) * q_ld + (int64_t)(blockIdx.x * NH + hq) * HD + d4);
        __half2 *dst = (__half2 *)(fa_sh + (hq * FA_BQ + r) * LD + d4);
        dst[0] = __floats2half2_rn(v.x * qscale, v.y * qscale);
        dst[1] = __floats2half2_rn(v.z * qscale, v.w * qscale);
    }
    __syncthreads();
    const int r0 = wq * 16 + g, r1 = r0 + 8;
    const __half *Qs = fa_sh + hh * FA_BQ * LD;
    uint32_t qa[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        qa[kk][0] = *(const uint32_t *)(Qs + r0 * LD + 16 * kk + 2 * c4);
        qa[kk][1] = *(const uint32_t *)(Qs + r1 * LD + 16 * kk + 2 * c4);
        qa[kk][2] = *(const uint32_t *)(Qs + r0 * LD + 16 * kk + 8 + 2 * c4);
        qa[kk][3] = *(const uint32_t *)(Qs + r1 * LD + 16 * kk + 8 + 2 * c4);
    }
    const int qp0 = r0 < cnt ? a.pos[t0 + r0] : -1;
    const int qp1 = r1 < cnt ? a.pos[t0 + r1] : -1;
    __syncthreads();

    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const int64_t base = ((int64_t)seq * a.n_kv + kvh) * a.n_ctx * HD;
    const __half *kb = a.kc + base, *vb = a.vc + base;
    const int nkt = kmax / FA_BK + 1;
    for (int kt = 0; kt < nkt; kt++) {
        for (int e = tid; e < FA_BK * HD / 8; e += NT) {
            const int r = e / (HD / 8), d8 = (e % (HD / 8)) * 8;
            const int p = kt * FA_BK + r;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (p <= kmax) {
                kv = *(const uint4 *)(kb + (int64_t)p * HD + d8);
                vv = *(const uint4 *)(vb + (int64_t)p * HD + d8);
            }
            *(uint4 *)(Ks + r * LD + d8) = kv;
            *(uint4 *)(Vs + r * LD + d8) = vv;
        }
        __syncthreads();
        float s[FA_BK / 8][4];
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int k2 = 0; k2 < HD / 32; k2++) {
                uint32_t kf[4];
                ldsm_x4(kf, Ks + (8 * nt + (lane & 7)) * LD + 32 * k2 + 8 * (lane >> 3));
                mma_f16_16816(s[nt], qa[2 * k2], kf[0], kf[1]);
                mma_f16_16816(s[nt], qa[2 * k2 + 1], kf[2], kf[3]);
            }
        }
        if (kt * FA_BK + FA_BK - 1 > (qp0 < qp1 ? qp0 : qp1)) {
#pragma unroll
            for (int nt = 0; nt < FA_BK / 8; nt++) {
                const int p = kt * FA_BK + 8 * nt + 2 * c4;
                if (p > qp0) s[nt][0] = -INFINITY;
                if (p + 1 > qp0) s[nt][1] = -INFINITY;
                if (p > qp1) s[nt][2] = -INFINITY;
                if (p + 1 > qp1) s[nt][3] = -INFINITY;
            }
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
        const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
        m0 = mn0;
        m1 = mn1;
        float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            s[nt][0] = exp2f(s[nt][0] - mu0);
            s[nt][1] = exp2f(s[nt][1] - mu0);
            s[nt][2] = exp2f(s[nt][2] - mu1);
            s[nt][3] = exp2f(s[nt][3] - mu1);
            ps0 += s[nt][0] + s[nt][1];
            ps1 += s[nt][2] + s[nt][3];
        }
        l0 = l0 * al0 + ps0;
        l1 = l1 * al1 + ps1;
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
            o[i][0] *= al0;
            o[i][1] *= al0;
            o[i][2] *= al1;
            o[i][3] *= al1;
        }
#pragma unroll
        for (int k2 = 0; k2 < FA_BK / 16; k2++) {
            uint32_t pa[4];
            pa[0] = pack_h2(s[2 * k2][0], s[2 * k2][1]);
            pa[1] = pack_h2(s[2 * k2][2], s[2 * k2][3]);
            pa[2] = pack_h2(s[2 * k2 + 1][0], s[2 * k2 + 1][1]);
            pa[3] = pack_h2(s[2 * k2 + 1][2], s[2 * k2 + 1][3]);
#pragma unroll
            for (int dn = 0; dn < HD / 8; dn += 2) {
                uint32_t vf[4];
                ldsm_x4_trans(vf, Vs + (16 * k2 + (lane & 15)) * LD + 8 * dn + 8 * (lane >> 4));
                mma_f16_16816(o[dn], pa, vf[0], vf[1]);
                mma_f16_16816(o[dn + 1], pa, vf[2], vf[3]);
            }
        }
        __syncthreads();
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if (r0 < cnt && l0 > 0.0f) {
        float *orow = out + (int64_t)(t0 + r0) * q_ld + (int64_t)h * HD + 2 * c4;
        const float inv = 1.0f / l0;
#pragma unroll
        for (int dn = 0; dn < HD / 8; dn++) *(float2 *)(orow + 8 * dn) = make_float2(o[dn][0] * inv, o[dn][1] * inv);
    }
    if (r1 < cnt && l1 > 0.0f) {
        float *orow = out + (int64_t)(t0 + r1) * q_ld + (int64_t)h * HD + 2 * c4;
        const float inv = 1.0f / l1;
#pragma unroll
        for (int dn = 0; dn < HD / 8; dn++) *(float2 *)(orow + 8 * dn) = make_float2(o[dn][2] * inv, o[dn][3] * inv);
    }
}

/* The other lever: the product kernel (one head a block, 4 warps) with the K/V tiles
 * double-buffered by cp.async, tile kt+1 in flight while tile kt is multiplied (the
 * product loads a tile with plain loads and waits for it at the barrier; the overlap
 * comes only from the other blocks on the SM). Dynamic shared memory: 2 x (K + V) tiles,
 * 69.6 KB at HD 128 (3 blocks a SM fit, as the registers allow). */
template <int HD>
static __global__ void __launch_bounds__(128, FA_MINB)
kernel_attn_flash_db(cu_attn_args a, const float *q, float *out, const int4 *tiles, float qscale) {
    constexpr int LD = HD + 8;
    extern __shared__ __align__(16) __half db_sh[];
    pdl_trigger();
    pdl_wait();
    const int4 tile = tiles[blockIdx.y];
    const int t0 = tile.x, cnt = tile.y, seq = tile.z, kmax = tile.w;
    const int h = blockIdx.x;
    const int G = a.n_head / a.n_kv;
    const int kvh = h / G;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, c4 = lane & 3;
    const int q_ld = a.n_head * HD;
    for (int e = tid; e < FA_BQ * HD / 4; e += 128) {
        const int r = e / (HD / 4), d4 = (e % (HD / 4)) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < cnt) v = *(const float4 *)(q + (int64_t)(t0 + r) * q_ld + (int64_t)h * HD + d4);
        __half2 *dst = (__half2 *)(db_sh + r * LD + d4);
        dst[0] = __floats2half2_rn(v.x * qscale, v.y * qscale);
        dst[1] = __floats2half2_rn(v.z * qscale, v.w * qscale);
    }
    __syncthreads();
    const int r0 = warp * 16 + g, r1 = r0 + 8;
    uint32_t qa[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        qa[kk][0] = *(const uint32_t *)(db_sh + r0 * LD + 16 * kk + 2 * c4);
        qa[kk][1] = *(const uint32_t *)(db_sh + r1 * LD + 16 * kk + 2 * c4);
        qa[kk][2] = *(const uint32_t *)(db_sh + r0 * LD + 16 * kk + 8 + 2 * c4);
        qa[kk][3] = *(const uint32_t *)(db_sh + r1 * LD + 16 * kk + 8 + 2 * c4);
    }
    const int qp0 = r0 < cnt ? a.pos[t0 + r0] : -1;
    const int qp1 = r1 < cnt ? a.pos[t0 + r1] : -1;
    __syncthreads();

    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const int64_t base = ((int64_t)seq * a.n_kv + kvh) * a.n_ctx * HD;
    const __half *kb = a.kc + base, *vb = a.vc + base;
    const int nkt = kmax / FA_BK + 1;
    /* tile kt's K and V into buffer kt & 1 (rows past kmax zero-filled) */
    auto issue = [&](int kt) {
        __half *Kd = db_sh + (kt & 1) * 2 * FA_BK * LD, *Vd = Kd + FA_BK * LD;
        for (int e = tid; e < FA_BK * HD / 8; e += 128) {
            const int r = e / (HD / 8), d8 = (e % (HD / 8)) * 8;
            const int p = kt * FA_BK + r;
            const int ok = p <= kmax;
            cp_async16(Kd + r * LD + d8, kb + (int64_t)(ok ? p : 0) * HD + d8, ok ? 16 : 0);
            cp_async16(Vd + r * LD + d8, vb + (int64_t)(ok ? p : 0) * HD + d8, ok ? 16 : 0);
        }
    };
    issue(0);
    cp_async_commit();
    for (int kt = 0; kt < nkt; kt++) {
        if (kt + 1 < nkt) issue(kt + 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const __half *Ks = db_sh + (kt & 1) * 2 * FA_BK * LD, *Vs = Ks + FA_BK * LD;
        float s[FA_BK / 8][4];
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int k2 = 0; k2 < HD / 32; k2++) {
                uint32_t kf[4];
                ldsm_x4(kf, Ks + (8 * nt + (lane & 7)) * LD + 32 * k2 + 8 * (lane >> 3));
                mma_f16_16816(s[nt], qa[2 * k2], kf[0], kf[1]);
                mma_f16_16816(s[nt], qa[2 * k2 + 1], kf[2], kf[3]);
            }
        }
        if (kt * FA_BK + FA_BK - 1 > (qp0 < qp1 ? qp0 : qp1)) {
#pragma unroll
            for (int nt = 0; nt < FA_BK / 8; nt++) {
                const int p = kt * FA_BK + 8 * nt + 2 * c4;
                if (p > qp0) s[nt][0] = -INFINITY;
                if (p + 1 > qp0) s[nt][1] = -INFINITY;
                if (p > qp1) s[nt][2] = -INFINITY;
                if (p + 1 > qp1) s[nt][3] = -INFINITY;
            }
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
            mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
        const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
        m0 = mn0;
        m1 = mn1;
        float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            s[nt][0] = exp2f(s[nt][0] - mu0);
            s[nt][1] = exp2f(s[nt][1] - mu0);
            s[nt][2] = exp2f(s[nt][2] - mu1);
            s[nt][3] = exp2f(s[nt][3] - mu1);
            ps0 += s[nt][0] + s[nt][1];
            ps1 += s[nt][2] + s[nt][3];
        }
        l0 = l0 * al0 + ps0;
        l1 = l1 * al1 + ps1;
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
            o[i][0] *= al0;
            o[i][1] *= al0;
            o[i][2] *= al1;
            o[i][3] *= al1;
        }
#pragma unroll
        for (int k2 = 0; k2 < FA_BK / 16; k2++) {
            uint32_t pa[4];
            pa[0] = pack_h2(s[2 * k2][0], s[2 * k2][1]);
            pa[1] = pack_h2(s[2 * k2][2], s[2 * k2][3]);
            pa[2] = pack_h2(s[2 * k2 + 1][0], s[2 * k2 + 1][1]);
            pa[3] = pack_h2(s[2 * k2 + 1][2], s[2 * k2 + 1][3]);
#pragma unroll
            for (int dn = 0; dn < HD / 8; dn += 2) {
                uint32_t vf[4];
                ldsm_x4_trans(vf, Vs + (16 * k2 + (lane & 15)) * LD + 8 * dn + 8 * (lane >> 4));
                mma_f16_16816(o[dn], pa, vf[0], vf[1]);
                mma_f16_16816(o[dn + 1], pa, vf[2], vf[3]);
            }
        }
        __syncthreads(); /* buffer kt & 1 is refilled by the next iteration's issue(kt + 2) */
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if (r0 < cnt && l0 > 0.0f) {
        float *orow = out + (int64_t)(t0 + r0) * q_ld + (int64_t)h * HD + 2 * c4;
        const float inv = 1.0f / l0;
#pragma unroll
        for (int dn = 0; dn < HD / 8; dn++) *(float2 *)(orow + 8 * dn) = make_float2(o[dn][0] * inv, o[dn][1] * inv);
    }
    if (r1 < cnt && l1 > 0.0f) {
        float *orow = out + (int64_t)(t0 + r1) * q_ld + (int64_t)h * HD + 2 * c4;
        const float inv = 1.0f / l1;
#pragma unroll
        for (int dn = 0; dn < HD / 8; dn++) *(float2 *)(orow + 8 * dn) = make_float2(o[dn][2] * inv, o[dn][3] * inv);
    }
}

static void launch_db(cu_ctx *S, const cu_attn_args *a, const float *q, float *out, const int4 *tiles, int n_tiles) {
    constexpr int HD = 128, LD = HD + 8, smem = 4 * FA_BK * LD * (int)sizeof(__half);
    static int attr_set = 0;
    if (!attr_set) {
        CK(cudaFuncSetAttribute(kernel_attn_flash_db<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attr_set = 1;
    }
    const float qscale = 1.4426950408889634f / sqrtf((float)a->hd);
    cu_launch(S, "attn_flash_db", kernel_attn_flash_db<HD>, dim3(a->n_head, n_tiles), dim3(128), smem, *a, q, out, tiles,
              qscale);
}

template <int NH>
static void launch_g(cu_ctx *S, const cu_attn_args *a, const float *q, float *out, const int4 *tiles, int n_tiles) {
    constexpr int HD = 128, LD = HD + 8;
    constexpr int smem = (NH > 2 ? NH : 2) * FA_BQ * LD * (int)sizeof(__half);
    static int attr_set = 0;
    if (!attr_set) {
        CK(cudaFuncSetAttribute(kernel_attn_flash_g<HD, NH>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attr_set = 1;
    }
    const float qscale = 1.4426950408889634f / sqrtf((float)a->hd);
    cu_launch(S, "attn_flash_g", kernel_attn_flash_g<HD, NH>, dim3(a->n_head / NH, n_tiles), dim3(128 * NH), smem, *a, q,
              out, tiles, qscale);
}

struct shape {
    const char *name;
    int n_head, n_kv;
};
static const shape shapes[] = {{"8b (32 heads, 8 kv heads)", 32, 8}, {"7b (32 heads, 32 kv heads)", 32, 32}};

int main(int argc, char **argv) {
    const int one_n = argc > 1 ? atoi(argv[1]) : 0;
    cu_ctx S_;
    cu_ctx *S = &S_;
    cudaDeviceProp prop;
    lab_ctx_base(S, &prop);
    printf("cuda_attn: %s, %d SMs\n", prop.name, S->num_sms);
    const int hd = 128, ns[] = {512, 3314};
    printf("%-28s %5s %-22s %9s %9s\n", "shape", "n", "variant", "us", "err");
    for (const shape &sh : shapes) {
        for (int n : ns) {
            if (one_n && n != one_n) continue;
            const int n_ctx = n + 64, qd = sh.n_head * hd;
            const size_t kvn = (size_t)sh.n_kv * n_ctx * hd;
            std::vector<__half> hk(kvn), hv(kvn);
            for (size_t i = 0; i < kvn; i++) {
                hk[i] = __float2half((frnd() - 0.5f) * 2.0f);
                hv[i] = __float2half((frnd() - 0.5f) * 2.0f);
            }
            std::vector<float> hq((size_t)n * qd);
            for (auto &v : hq) v = (frnd() - 0.5f) * 2.0f;
            std::vector<int32_t> hpos(n), hseq(n, 0);
            for (int i = 0; i < n; i++) hpos[i] = i;
            /* 64-query tiles, longest (latest) first, as attn_run lists them */
            std::vector<int4> ht;
            for (int t = 0; t < n; t += 64) ht.push_back(make_int4(t, std::min(64, n - t), 0, std::min(t + 64, n) - 1));
            std::reverse(ht.begin(), ht.end());
            __half *kc, *vc;
            float *q, *out0, *out1;
            int32_t *pos, *seq;
            int4 *tiles;
            CK(cudaMalloc(&kc, kvn * sizeof(__half)));
            CK(cudaMalloc(&vc, kvn * sizeof(__half)));
            CK(cudaMalloc(&q, hq.size() * sizeof(float)));
            CK(cudaMalloc(&out0, hq.size() * sizeof(float)));
            CK(cudaMalloc(&out1, hq.size() * sizeof(float)));
            CK(cudaMalloc(&pos, n * sizeof(int32_t)));
            CK(cudaMalloc(&seq, n * sizeof(int32_t)));
            CK(cudaMalloc(&tiles, ht.size() * sizeof(int4)));
            CK(cudaMemcpy(kc, hk.data(), kvn * sizeof(__half), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(vc, hv.data(), kvn * sizeof(__half), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(q, hq.data(), hq.size() * sizeof(float), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(pos, hpos.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(seq, hseq.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(tiles, ht.data(), ht.size() * sizeof(int4), cudaMemcpyHostToDevice));
            cu_attn_args a;
            memset(&a, 0, sizeof a);
            a.n = n, a.n_head = sh.n_head, a.n_kv = sh.n_kv, a.hd = hd, a.n_ctx = n_ctx;
            a.pos = pos, a.seq = seq, a.kc = kc, a.vc = vc, a.seq1 = 1;
            const int nt = (int)ht.size();
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0));
            CK(cudaEventCreate(&e1));
            auto time = [&](auto &&fn) {
                float t[7];
                for (int rep = 0; rep < 7; rep++) {
                    CK(cudaEventRecord(e0, S->stream));
                    for (int it = 0; it < 5; it++) fn();
                    CK(cudaEventRecord(e1, S->stream));
                    CK(cudaEventSynchronize(e1));
                    CK(cudaEventElapsedTime(&t[rep], e0, e1));
                }
                std::sort(t, t + 7);
                return 1000.0 * t[3] / 5;
            };
            std::vector<float> h0(hq.size()), h1(hq.size());
            CK(cudaMemset(out0, 0, hq.size() * sizeof(float)));
            cu_attn_flash(S, &a, q, out0, tiles, nt);
            CK(cudaStreamSynchronize(S->stream));
            CK(cudaGetLastError());
            CK(cudaMemcpy(h0.data(), out0, hq.size() * sizeof(float), cudaMemcpyDeviceToHost));
            double us = time([&] { cu_attn_flash(S, &a, q, out0, tiles, nt); });
            printf("%-28s %5d %-22s %9.1f %9s\n", sh.name, n, "product (1 head)", us, "-");
            auto variant = [&](const char *name, auto &&fn, int G_ok) {
                if (!G_ok) return;
                CK(cudaMemset(out1, 0xff, hq.size() * sizeof(float)));
                fn();
                CK(cudaStreamSynchronize(S->stream));
                CK(cudaGetLastError());
                CK(cudaMemcpy(h1.data(), out1, hq.size() * sizeof(float), cudaMemcpyDeviceToHost));
                const double err = nerr(h1.data(), h0.data(), (int64_t)h1.size());
                const double t = time(fn);
                printf("%-28s %5d %-22s %9.1f %9.2g\n", sh.name, n, name, t, err);
                fflush(stdout);
            };
            const int G = sh.n_head / sh.n_kv;
            variant("K/V double-buffered", [&] { launch_db(S, &a, q, out1, tiles, nt); }, 1);
            variant("kv-shared 2 heads", [&] { launch_g<2>(S, &a, q, out1, tiles, nt); }, G % 2 == 0);
            variant("kv-shared 4 heads", [&] { launch_g<4>(S, &a, q, out1, tiles, nt); }, G % 4 == 0);
            cudaFree(kc), cudaFree(vc), cudaFree(q), cudaFree(out0), cudaFree(out1), cudaFree(pos), cudaFree(seq),
                cudaFree(tiles);
        }
    }
    return 0;
}

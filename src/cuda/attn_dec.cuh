/* attn_dec.cuh - the steps of the one-token decode attention (kernel_attn_dec, attn.cu),
 * in a header of their own for the lab and the kernels to come. It gives a row of the cache to a group of LPP lanes, 8 values (16 bytes of f16) each,
 * and run one online softmax per lane group over the rows it visits, a tile at a time,
 * before merging the groups of a warp by shuffles and the warps through shared memory;
 * with one query head per kv head it rotates and store q, k and v in registers first
 * (ad_fast_qkv). */
#ifndef MINFER_CUDA_ATTN_DEC_CUH
#define MINFER_CUDA_ATTN_DEC_CUH

#include "common.cuh"

/* The weight of a softmax partial with running max m in a merge whose max is M >= m
 * (0 for a partial that saw no row, m = -inf). */
static __device__ __forceinline__ float softmax_weight(float m, float M) {
    return m == -INFINITY ? 0.0f : expf(m - M);
}

/* n softmax partials (running max m(k), sum l(k), output o(k)) merged in the order of k:
 * returns the merged output, unnormalized, and the merged max *M and sum *L. */
template <int N, class Fm, class Fl, class Fo>
static __device__ __forceinline__ float ad_merge(Fm m, Fl l, Fo o, float *M, float *L) {
    float mx = -INFINITY, sum = 0.0f, r = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++) mx = fmaxf(mx, m(k));
#pragma unroll
    for (int k = 0; k < N; k++) {
        const float cw = softmax_weight(m(k), mx);
        sum += cw * l(k);
        r += cw * o(k);
    }
    *M = mx;
    *L = sum;
    return r;
}

/* The fast store's first step (kernel_attn_dec's `fast`): thread d < HD
 * rotates q[d] into qs[d], scaled; in the block that owns pos, thread HD + d rotates k[d],
 * keeps k and v in kvp and stores them (f16) into the cache rows at pos, kc and vc. The
 * pair (2i, 2i+1) sits in adjacent lanes and is rotated by cs (cos, sin at pos) as
 * rope_pair does (rope_rot). */
template <int HD>
static __device__ __forceinline__ void ad_fast_qkv(int tid, const float *q, const float *k, const float *v,
                                                   const float2 *cs, float scale, bool own, float *qs,
                                                   float (*kvp)[HD], __half *kc, __half *vc) {
    const int d = tid & (HD - 1);
    const bool isq = tid < HD, isk = own && tid >= HD && tid < 2 * HD;
    float x = 0.0f, vv = 0.0f;
    float2 c2 = make_float2(1.0f, 0.0f);
    if (isq) x = q[d];
    if (isk) {
        x = k[d];
        vv = v[d];
    }
    if (tid < 2 * HD) c2 = cs[d >> 1];
    const float xp = __shfl_xor_sync(0xffffffffu, x, 1);
    const float xr = rope_rot(x, xp, c2, d & 1);
    if (isq) qs[d] = xr * scale;
    if (isk) {
        kvp[0][d] = xr;
        kvp[1][d] = vv;
        kc[d] = __float2half_rn(xr);
        vc[d] = __float2half_rn(vv);
    }
}

/* This lane's 8 values of the row at pos, kept in shared memory by the block that
 * stored it (k rotated, v; f32), rounded to f16 as the cache store rounded them. */
static __device__ __forceinline__ void ad_row_f16(const float *k, const float *v, int sl, uint4 &kr, uint4 &vr) {
    __half2 hk[4], hv[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        hk[e] = __floats2half2_rn(k[sl * 8 + 2 * e], k[sl * 8 + 2 * e + 1]);
        hv[e] = __floats2half2_rn(v[sl * 8 + 2 * e], v[sl * 8 + 2 * e + 1]);
    }
    kr = *(const uint4 *)hk;
    vr = *(const uint4 *)hv;
}

/* One tile of a lane group's online softmax: the scores of its SPT rows (kr, vr: this
 * lane's 8 values of each) against qh (this lane's 8 query values, scaled), rows with
 * valid(j) false left out; the running max mx, sum and this lane's 8 outputs updated. */
template <int SPT, int LPP, class Valid>
static __device__ __forceinline__ void ad_rows(const uint4 *kr, const uint4 *vr, const float *qh, Valid valid,
                                               float &mx, float &sum, float *acc) {
    float s[SPT];
    float tmax = -INFINITY;
#pragma unroll
    for (int j = 0; j < SPT; j++) {
        const __half2 *h2 = (const __half2 *)&kr[j];
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 v = __half22float2(h2[e]);
            d += v.x * qh[2 * e] + v.y * qh[2 * e + 1];
        }
#pragma unroll
        for (int o = 1; o < LPP; o <<= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        s[j] = valid(j) ? d : -INFINITY;
        tmax = fmaxf(tmax, s[j]);
    }
    const float mn = fmaxf(mx, tmax);
    if (mn == -INFINITY) return; /* no row of this group yet: nothing to add */
    const float cr = expf(mx - mn); /* 0 while mx is -inf */
    mx = mn;
    sum *= cr;
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] *= cr;
#pragma unroll
    for (int j = 0; j < SPT; j++) {
        const float pe = expf(s[j] - mn); /* 0 for rows left out */
        sum += pe;
        const __half2 *h2 = (const __half2 *)&vr[j];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 v = __half22float2(h2[e]);
            acc[2 * e] += pe * v.x;
            acc[2 * e + 1] += pe * v.y;
        }
    }
}

/* The lane groups of a warp merged (lanes LPP, 2 LPP, .. apart): afterwards each lane
 * holds its warp's max, sum and the 8 outputs of its lane position sl. */
template <int LPP>
static __device__ __forceinline__ void ad_merge_groups(float &mx, float &sum, float *acc) {
#pragma unroll
    for (int o = LPP; o < 32; o <<= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, mx, o);
        const float l2 = __shfl_xor_sync(0xffffffffu, sum, o);
        const float mn = fmaxf(mx, m2);
        const float c1 = softmax_weight(mx, mn), c2 = softmax_weight(m2, mn);
        sum = sum * c1 + l2 * c2;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float a2 = __shfl_xor_sync(0xffffffffu, acc[e], o);
            acc[e] = acc[e] * c1 + a2 * c2;
        }
        mx = mn;
    }
}

#endif

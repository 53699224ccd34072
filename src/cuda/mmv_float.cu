/* mmv_float.cu - decode GEMV with f32 activations: the main path for f32, f16 and
 * bf16 weights (16-byte weight loads, x read through L1), and the generic path for
 * every other type (dequantize 8 values at a time; the fallback with path q8 off
 * and the reference the dp4a kernels are tested against). One warp per row. */
#include "dequant.cuh"
#include "mmv_core.cuh"

/* VEC: K % 4 == 0 (f32) or K % 8 == 0 (f16/bf16): one 16-byte load per unit. */
template <int T, bool VEC, int NC>
static __global__ void __launch_bounds__(MMV_WARPS * 32) kernel_mmv_f(cu_mmv_args a) {
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = blockIdx.x * MMV_WARPS + warp;
    if (g >= mmv_total(a)) return;
    int m, r;
    const uint8_t *row = mmv_row(a, g, &m, &r);
    const int K = a.K;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    pdl_wait();
    if (VEC && T == QTYPE_F32) {
        const int n4 = K / 4;
        for (int i = lane; i < n4; i += 32) {
            const float4 w = __ldg((const float4 *)row + i);
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (c < a.ncols) {
                    /* activations: plain loads (written while this grid is resident; mmv_unit.cuh ld_g) */
                    const float4 x = *((const float4 *)(a.x + (int64_t)c * K) + i);
                    acc[c] += w.x * x.x + w.y * x.y + w.z * x.z + w.w * x.w;
                }
        }
    } else if (VEC) {
        const int n8 = K / 8;
        for (int i = lane; i < n8; i += 32) {
            const uint4 w = ld_g::u128(row + (int64_t)i * 16);
            const uint32_t W[4] = {w.x, w.y, w.z, w.w};
            float f[8];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                if (T == QTYPE_F16) {
                    const float2 v = __half22float2(*(const __half2 *)&W[k]);
                    f[2 * k] = v.x;
                    f[2 * k + 1] = v.y;
                } else {
                    f[2 * k] = __uint_as_float(W[k] << 16);
                    f[2 * k + 1] = __uint_as_float(W[k] & 0xffff0000u);
                }
            }
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (c < a.ncols) {
                    const float4 *xp = (const float4 *)(a.x + (int64_t)c * K + (int64_t)i * 8);
                    const float4 x0 = xp[0], x1 = xp[1];
                    acc[c] += f[0] * x0.x + f[1] * x0.y + f[2] * x0.z + f[3] * x0.w + f[4] * x1.x + f[5] * x1.y +
                              f[6] * x1.z + f[7] * x1.w;
                }
        }
    } else {
        const int qk = T == QTYPE_F32 || T == QTYPE_F16 || T == QTYPE_BF16 ? 1
                       : T == QTYPE_Q4_0 || T == QTYPE_Q4_1 || T == QTYPE_Q5_0 || T == QTYPE_Q5_1 ||
                                 T == QTYPE_Q8_0 || T == QTYPE_IQ4_NL ? 32 : 256;
        const int nb = K / qk;
        for (int i = lane * 8; i < K; i += 32 * 8) {
            float f[8];
            dq8_tail<T>(row, nb, i, K, f);
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (c < a.ncols) {
                    const float *xp = a.x + (int64_t)c * K + i;
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        if (i + k < K) acc[c] += f[k] * xp[k];
                }
        }
    }
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = warp_sum(acc[c]);
    if (lane == 0) mmv_store<NC>(a, m, r, acc);
}

template <int T, bool VEC>
static void mmv_f_launch(cu_ctx *S, const cu_mmv_args *a) {
    dim3 grid((mmv_total(*a) + MMV_WARPS - 1) / MMV_WARPS), block(MMV_WARPS * 32);
    if (a->ncols <= 1) cu_launch(S, "mmv_f", kernel_mmv_f<T, VEC, 1>, grid, block, 0, *a);
    else if (a->ncols <= 2) cu_launch(S, "mmv_f", kernel_mmv_f<T, VEC, 2>, grid, block, 0, *a);
    else if (a->ncols <= 4) cu_launch(S, "mmv_f", kernel_mmv_f<T, VEC, 4>, grid, block, 0, *a);
    else cu_launch(S, "mmv_f", kernel_mmv_f<T, VEC, 8>, grid, block, 0, *a);
}

void cu_mmv_f(cu_ctx *S, uint32_t type, const cu_mmv_args *a) {
    switch (type) {
    case QTYPE_F32:
        if (a->K % 4 == 0) mmv_f_launch<QTYPE_F32, true>(S, a);
        else mmv_f_launch<QTYPE_F32, false>(S, a);
        break;
    case QTYPE_F16:
        if (a->K % 8 == 0) mmv_f_launch<QTYPE_F16, true>(S, a);
        else mmv_f_launch<QTYPE_F16, false>(S, a);
        break;
    case QTYPE_BF16:
        if (a->K % 8 == 0) mmv_f_launch<QTYPE_BF16, true>(S, a);
        else mmv_f_launch<QTYPE_BF16, false>(S, a);
        break;
    case QTYPE_Q4_0: mmv_f_launch<QTYPE_Q4_0, false>(S, a); break;
    case QTYPE_Q4_1: mmv_f_launch<QTYPE_Q4_1, false>(S, a); break;
    case QTYPE_Q5_0: mmv_f_launch<QTYPE_Q5_0, false>(S, a); break;
    case QTYPE_Q5_1: mmv_f_launch<QTYPE_Q5_1, false>(S, a); break;
    case QTYPE_Q8_0: mmv_f_launch<QTYPE_Q8_0, false>(S, a); break;
    case QTYPE_Q4_K: mmv_f_launch<QTYPE_Q4_K, false>(S, a); break;
    case QTYPE_Q5_K: mmv_f_launch<QTYPE_Q5_K, false>(S, a); break;
    case QTYPE_Q6_K: mmv_f_launch<QTYPE_Q6_K, false>(S, a); break;
    case QTYPE_Q2_K: mmv_f_launch<QTYPE_Q2_K, false>(S, a); break;
    case QTYPE_Q3_K: mmv_f_launch<QTYPE_Q3_K, false>(S, a); break;
    case QTYPE_IQ4_NL: mmv_f_launch<QTYPE_IQ4_NL, false>(S, a); break;
    case QTYPE_IQ4_XS: mmv_f_launch<QTYPE_IQ4_XS, false>(S, a); break;
    default: break;
    }
}

/* norm.cu - RMSNorm, one block per row: out = x / sqrt(mean(x^2) + eps) * w.
 * Fused variants (decode): the residual add that precedes every norm in the
 * transformer (x += y, written back), and the q8 quantization of out that the next
 * GEMVs read, so a layer's norm costs one launch instead of three. */
#include "common.cuh"

#define NORM_THREADS 256

static __device__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) red[w] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = l < nw ? red[l] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

/* VEC: dim % 4 == 0 (float4 path); Q8 requires dim % 32 == 0. */
template <bool ADD, bool VEC, bool Q8>
static __global__ void kernel_rmsnorm(float *out, float *x, const float *y, const float *w, int dim, float eps,
                                      cu_q8 q) {
    __shared__ float red[32];
    pdl_trigger();
    pdl_wait();
    const int64_t row = blockIdx.x;
    float *xr = x + row * dim;
    const float *yr = ADD ? y + row * dim : nullptr;
    float *orow = out + row * dim;
    float ss = 0.0f;
    if (VEC) {
        for (int i = threadIdx.x; i < dim / 4; i += blockDim.x) {
            float4 v = ((const float4 *)xr)[i];
            if (ADD) {
                const float4 a = ((const float4 *)yr)[i];
                v.x += a.x; v.y += a.y; v.z += a.z; v.w += a.w;
                ((float4 *)xr)[i] = v;
            }
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) {
            float v = xr[i];
            if (ADD) {
                v += yr[i];
                xr[i] = v;
            }
            ss += v * v;
        }
    }
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    /* each thread re-reads only the elements it wrote above: no barrier needed */
    if (VEC) {
        const int n4 = dim / 4;
        for (int base = 0; base < n4; base += blockDim.x) {
            const int i = base + threadIdx.x;
            const int valid = i < n4;
            float4 r = make_float4(0.f, 0.f, 0.f, 0.f);
            if (valid) {
                const float4 v = ((const float4 *)xr)[i], g = ((const float4 *)w)[i];
                r = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
                ((float4 *)orow)[i] = r;
            }
            if (Q8) q8_store4(q, row * dim + (int64_t)i * 4, r, valid);
        }
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = xr[i] * inv * w[i];
    }
}

void cu_rmsnorm(cu_state *S, float *out, float *x, const float *y, const float *w, int n, int dim, float eps,
                const cu_q8 *q) {
    const int vec = dim % 4 == 0;
    const int q8 = q && dim % 32 == 0;
    cu_q8 qq = q ? *q : cu_q8{nullptr, nullptr, nullptr};
    int threads = NORM_THREADS;
    while (threads > 32 && threads / 2 >= (vec ? dim / 4 : dim)) threads /= 2;
    dim3 g(n), b(threads);
    if (y) {
        if (q8) cu_launch(S, "add_rmsnorm_q8", kernel_rmsnorm<true, true, true>, g, b, 0, out, x, y, w, dim, eps, qq);
        else if (vec) cu_launch(S, "add_rmsnorm", kernel_rmsnorm<true, true, false>, g, b, 0, out, x, y, w, dim, eps, qq);
        else cu_launch(S, "add_rmsnorm", kernel_rmsnorm<true, false, false>, g, b, 0, out, x, y, w, dim, eps, qq);
    } else {
        if (q8) cu_launch(S, "rmsnorm_q8", kernel_rmsnorm<false, true, true>, g, b, 0, out, x, y, w, dim, eps, qq);
        else if (vec) cu_launch(S, "rmsnorm", kernel_rmsnorm<false, true, false>, g, b, 0, out, x, y, w, dim, eps, qq);
        else cu_launch(S, "rmsnorm", kernel_rmsnorm<false, false, false>, g, b, 0, out, x, y, w, dim, eps, qq);
    }
}

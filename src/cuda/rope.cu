/* rope.cu - rotary position embedding, in place, on [n][n_heads*head_dim] rows.
 * theta_i = pos * base^(-2i/rope_dim), i < rope_dim/2; dims >= rope_dim untouched.
 *   norm (llama): rotate (x[2i], x[2i+1])
 *   neox (qwen2): rotate (x[i], x[i + rope_dim/2])
 * q and k of a layer go in one launch (blockIdx.z selects the tensor). */
#include "common.cuh"

static __global__ void kernel_rope(cu_rope_job j0, cu_rope_job j1, const int32_t *pos, int head_dim, int rope_dim,
                                   float base, int mode, const float2 *cs) {
    pdl_trigger();
    pdl_wait();
    const cu_rope_job j = blockIdx.z == 0 ? j0 : j1;
    const int t = blockIdx.y;
    const int half = rope_dim / 2;
    const int total = j.n_heads * half;
    const int p = pos[t];
    for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
        const int h = e / half, i = e % half;
        rope_pair(j.x + ((int64_t)t * j.n_heads + h) * head_dim, i, rope_cs(cs, i, p, rope_dim, base), rope_dim, mode);
    }
}

void cu_rope(cu_ctx *S, const cu_rope_job *jobs, int njobs, const int32_t *d_pos, int n, int head_dim,
             int rope_dim, float base, int mode, const float2 *cs) {
    int maxh = jobs[0].n_heads;
    if (njobs > 1 && jobs[1].n_heads > maxh) maxh = jobs[1].n_heads;
    const int total = maxh * (rope_dim / 2);
    const int threads = 128;
    dim3 grid((total + threads - 1) / threads, n, njobs);
    cu_launch(S, "rope", kernel_rope, grid, dim3(threads), 0, jobs[0], njobs > 1 ? jobs[1] : jobs[0], d_pos, head_dim,
              rope_dim, base, mode, cs);
}

/* rope.c's rope_cs on the device, term for term (theta in double, rounded once; the
 * f32 constants corr and mscale computed on the host); ff: the per-frequency divisors
 * or NULL. Without scaling (rope_is_plain) it is rope_cs(nullptr, ...) above. */
static __device__ float2 rope_cs_scaled(mf_rope r, const float *ff, int i, int p) {
    double theta_extrap = (double)p * pow((double)r.base, -2.0 * i / r.dim);
    if (ff) theta_extrap /= (double)ff[i];
    double theta = (double)r.freq_scale * theta_extrap;
    if (r.ext_factor != 0) {
        const float y = ((float)i - r.corr[0]) / fmaxf(0.001f, r.corr[1] - r.corr[0]);
        const double mix = (double)((1 - fminf(1, fmaxf(0, y))) * r.ext_factor);
        theta = theta * (1 - mix) + theta_extrap * mix;
    }
    double sd, cd;
    sincos(theta, &sd, &cd);
    return make_float2(__fmul_rn((float)cd, r.mscale), __fmul_rn((float)sd, r.mscale));
}

static __global__ void kernel_rope_table(float2 *cs, int n_ctx, mf_rope r, const float *ff) {
    const int half = r.dim / 2;
    const int64_t total = (int64_t)n_ctx * half;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x)
        cs[e] = rope_cs_scaled(r, ff, (int)(e % half), (int)(e / half));
}

void cu_rope_table(cu_ctx *S, float2 *cs, int n_ctx, const mf_rope *r, const float *d_ff) {
    const int64_t total = (int64_t)n_ctx * (r->dim / 2);
    const int blocks = (int)((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);
    mf_rope rv = *r;
    rv.freq_factors = NULL; /* a host pointer: the kernel reads d_ff */
    kernel_rope_table<<<blocks > 0 ? blocks : 1, 256, 0, S->stream>>>(cs, n_ctx, rv, d_ff);
    CU_LAUNCHED(S, "rope_table");
}

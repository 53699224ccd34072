/* elementwise.cu - embedding gather, row gather, residual add, SwiGLU, activation
 * quantization (q8 layout, common.cuh), f32->f16 and weight->f16 conversion for the
 * prefill GEMM, and the upload-time repacking into the planar device layouts. */
#include "dequant.cuh"

/* ---- embedding: out[t][:] = dequant(row tok[t]) ---- */
template <int T>
static __global__ void kernel_embed(float *out, const uint8_t *w, int64_t stride, int dim, int nb,
                                    const int32_t *tok, const float2 *cs_tab, int half, const int32_t *pos,
                                    float2 *cs_now, float scale) {
    pdl_trigger();
    pdl_wait();
    if (cs_now && blockIdx.x == 0 && blockIdx.y == 0)
        for (int i = threadIdx.x; i < half; i += blockDim.x) cs_now[i] = cs_tab[(int64_t)pos[0] * half + i];
    const int t = blockIdx.y;
    const uint8_t *row = w + (int64_t)tok[t] * stride;
    for (int i = (blockIdx.x * blockDim.x + threadIdx.x) * 8; i < dim; i += gridDim.x * blockDim.x * 8) {
        float v[8];
        dq8_tail<T>(row, nb, i, dim, v);
        float *o = out + (int64_t)t * dim + i;
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (i + k < dim) o[k] = v[k] * scale; /* (times 1: the same bits) */
    }
}

void cu_embed(cu_ctx *S, float *out, const mf_weight *w, const int32_t *d_tok, int n, const float2 *cs_tab,
              int half, const int32_t *d_pos, float2 *cs_now, float scale) {
    const qtype_traits *tr = qtype_get(w->type);
    const int dim = (int)w->cols, nb = (int)(w->cols / tr->blck);
    const int64_t stride = cu_row_stride(w->type, w->cols);
    dim3 grid(((dim + 7) / 8 + 127) / 128, n);
#define CALL(T)                                                                                               \
    cu_launch(S, "embed", kernel_embed<T>, grid, dim3(128), 0, out, (const uint8_t *)w->dev, stride, dim, nb, d_tok, \
              cs_tab, half, d_pos, cs_now, scale)
    CU_DQ_DISPATCH(w->type, CALL)
#undef CALL
}

/* ---- dst[j] = src[idx[j]] ---- */
static __global__ void kernel_get_rows(float *dst, const float *src, const int32_t *idx, int width) {
    pdl_trigger();
    pdl_wait();
    const int j = blockIdx.y;
    const float *s = src + (int64_t)idx[j] * width;
    float *d = dst + (int64_t)j * width;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < width; i += gridDim.x * blockDim.x) d[i] = s[i];
}

void cu_get_rows(cu_ctx *S, float *dst, const float *src, const int32_t *d_idx, int n_idx, int width) {
    if (n_idx <= 0) return;
    dim3 grid((width + 255) / 256 < 64 ? (width + 255) / 256 : 64, n_idx);
    cu_launch(S, "get_rows", kernel_get_rows, grid, dim3(256), 0, dst, src, d_idx, width);
}

static int grid_for(int64_t n, int block) {
    int64_t g = (n + block - 1) / block;
    return (int)(g < 4096 ? (g > 0 ? g : 1) : 4096);
}

/* ---- dst = src, n16 16-byte words, dst in mapped pinned host memory: a download inside
 * the decode graph as a kernel chained by PDL instead of a copy node (which cost ~10 us of
 * a 7B step on an H200: priced by a timing hook since removed, bench/RESULTS.md 2026-11-30). Each
 * warp stores 512 contiguous bytes, so the PCIe writes go out as full payloads. ---- */
static __global__ void kernel_store_host(uint4 *dst, const uint4 *src, int64_t n16) {
    pdl_trigger();
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n16; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

void cu_store_host(cu_ctx *S, void *dst_dev, const void *src, size_t nbytes) {
    const int64_t n16 = (int64_t)(nbytes / 16);
    cu_launch(S, "store_host", kernel_store_host, dim3(grid_for(n16, 256) < 64 ? grid_for(n16, 256) : 64),
              dim3(256), 0, (uint4 *)dst_dev, (const uint4 *)src, n16);
}

/* ---- x += y ---- */
static __global__ void kernel_add(float *x, const float *y, int64_t n) {
    pdl_trigger();
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

void cu_add(cu_ctx *S, float *x, const float *y, int64_t n) {
    cu_launch(S, "add", kernel_add, dim3(grid_for(n, 256)), dim3(256), 0, x, y, n);
}

/* ---- out = act(g) * u (+ q8 of out): SwiGLU (silu) and GeGLU (gelu, tanh form: gemma3) ---- */
/* gelu_tanh(g) * u, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) */
static __device__ __forceinline__ float gelu_mul(float x, float u) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * x * (1.0f + 0.044715f * x * x))) * u;
}
template <int GELU>
static __device__ __forceinline__ float act_mul(float g, float u) {
    return GELU ? gelu_mul(g, u) : silu_mul(g, u);
}

template <int GELU>
static __global__ void kernel_glu(float *out, const float *g, const float *u, int64_t n) {
    pdl_trigger();
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = act_mul<GELU>(g[i], u[i]);
}

/* n % 32 == 0: each thread takes 4 values; the loop bound is warp-uniform so the
 * q8 shuffles see the whole warp. */
template <int GELU>
static __global__ void kernel_glu_q8(float *out, const float *g, const float *u, int64_t n, cu_q8 q) {
    pdl_trigger();
    pdl_wait();
    const int64_t n4 = n / 4;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t base = (int64_t)blockIdx.x * blockDim.x; base < n4; base += step) {
        const int64_t i = base + threadIdx.x;
        const int valid = i < n4;
        float4 r = make_float4(0.f, 0.f, 0.f, 0.f);
        if (valid) {
            const float4 a = ((const float4 *)g)[i], b = ((const float4 *)u)[i];
            r = make_float4(act_mul<GELU>(a.x, b.x), act_mul<GELU>(a.y, b.y), act_mul<GELU>(a.z, b.z),
                            act_mul<GELU>(a.w, b.w));
            ((float4 *)out)[i] = r;
            trace_mark(0);
        }
        q8_store4(q, i * 4, r, valid);
    }
    trace_end();
}

template <int GELU>
static void glu_launch(cu_ctx *S, float *out, const float *g, const float *u, int64_t n, const cu_q8 *q) {
    if (q && n % 32 == 0) {
        const int t = S->tune.swiglu_threads;
        cu_launch(S, GELU ? "geglu_q8" : "swiglu_q8", kernel_glu_q8<GELU>, dim3(grid_for(n / 4, t)), dim3(t), 0, out, g,
                  u, n, *q);
    } else {
        cu_launch(S, GELU ? "geglu" : "swiglu", kernel_glu<GELU>, dim3(grid_for(n, 256)), dim3(256), 0, out, g, u, n);
    }
}
void cu_swiglu(cu_ctx *S, float *out, const float *g, const float *u, int64_t n, const cu_q8 *q) {
    glu_launch<0>(S, out, g, u, n, q);
}
void cu_geglu(cu_ctx *S, float *out, const float *g, const float *u, int64_t n, const cu_q8 *q) {
    glu_launch<1>(S, out, g, u, n, q);
}

/* ---- gemma3's other element-wise ops (the composed blocks' scale and softcap; backend.h) ---- */
static __global__ void kernel_scale(float *x, float s, int64_t n) {
    pdl_trigger();
    pdl_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

void cu_scale(cu_ctx *S, float *x, float s, int64_t n) {
    cu_launch(S, "scale", kernel_scale, dim3(grid_for(n, 256)), dim3(256), 0, x, s, n);
}

/* x = c tanh(x / c) (logit soft-capping) */
static __global__ void kernel_softcap(float *x, float c, int64_t n) {
    pdl_trigger();
    pdl_wait();
    const float inv = 1.0f / c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = c * tanhf(x[i] * inv);
}

void cu_softcap(cu_ctx *S, float *x, float c, int64_t n) {
    cu_launch(S, "softcap", kernel_softcap, dim3(grid_for(n, 256)), dim3(256), 0, x, c, n);
}

/* ---- q8 quantization of activations (n % 32 == 0) ---- */
static __global__ void kernel_quantize_q8(const float *x, int64_t n, cu_q8 q) {
    pdl_trigger();
    pdl_wait();
    const int64_t n4 = n / 4;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t base = (int64_t)blockIdx.x * blockDim.x; base < n4; base += step) {
        const int64_t i = base + threadIdx.x;
        const int valid = i < n4;
        float4 v = valid ? ((const float4 *)x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        q8_store4(q, i * 4, v, valid);
    }
}

void cu_quantize_q8(cu_ctx *S, const float *x, int64_t n, const cu_q8 *q) {
    cu_launch(S, "quantize_q8", kernel_quantize_q8, dim3(grid_for(n / 4, 256)), dim3(256), 0, x, n, *q);
}

/* ---- x [n][K] f32 -> dst [n][Kp] f16 (zero pad) ---- */
static __global__ void kernel_to_f16(__half *dst, const float *x, int K, int Kp) {
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < Kp; i += gridDim.x * blockDim.x)
        dst[(int64_t)t * Kp + i] = __float2half_rn(i < K ? x[(int64_t)t * K + i] : 0.0f);
}

void cu_to_f16(cu_ctx *S, __half *dst, const float *x, int n, int K, int Kp) {
    dim3 grid((Kp + 255) / 256 < 32 ? (Kp + 255) / 256 : 32, n);
    cu_launch(S, "to_f16", kernel_to_f16, grid, dim3(256), 0, dst, x, K, Kp);
}

/* ---- weight rows -> f16 [nr][Kp] ---- */
template <int T>
static __global__ void kernel_dequant_f16(__half *dst, const uint8_t *w, int64_t stride, int K, int nb, int Kp) {
    pdl_trigger();
    pdl_wait();  /* dst is scratch a previous GEMM may still read */
    const int64_t r = blockIdx.y;
    const uint8_t *row = w + r * stride;
    for (int i = (blockIdx.x * blockDim.x + threadIdx.x) * 8; i < Kp; i += gridDim.x * blockDim.x * 8) {
        float v[8];
        if (i < K) dq8_tail<T>(row, nb, i, K, v);
        else {
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = 0.0f;
        }
        __align__(16) __half h[8];
#pragma unroll
        for (int k = 0; k < 8; k++) h[k] = __float2half_rn(v[k]);
        *(uint4 *)(dst + r * Kp + i) = *(const uint4 *)h;
    }
}

void cu_dequant_f16(cu_ctx *S, __half *dst, const mf_weight *w, int64_t r0, int64_t nr, int Kp) {
    const qtype_traits *tr = qtype_get(w->type);
    const int K = (int)w->cols, nb = (int)(w->cols / tr->blck);
    const int64_t stride = cu_row_stride(w->type, w->cols);
    const uint8_t *base = (const uint8_t *)w->dev + r0 * stride;
    /* Kp % 8 == 0; a float row's partial last group goes through dq8_tail. */
    dim3 grid((Kp / 8 + 127) / 128, (unsigned)nr);
#define CALL(T) cu_launch(S, "dequant_f16", kernel_dequant_f16<T>, grid, dim3(128), 0, dst, base, stride, K, nb, Kp)
    CU_DQ_DISPATCH(w->type, CALL)
#undef CALL
}

/* ---- upload-time repack: file rows -> planar device rows ---- */
template <int T>
static __global__ void kernel_repack(uint8_t *dst, const uint8_t *src, int64_t src_stride, int64_t dst_stride,
                                     int nb) {
    const int64_t r = blockIdx.y;
    const uint8_t *s = src + r * src_stride;
    uint8_t *d = dst + r * dst_stride;
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < nb; b += gridDim.x * blockDim.x) {
        if (T == QTYPE_Q4_0 || T == QTYPE_Q4_1 || T == QTYPE_Q5_0 || T == QTYPE_Q5_1) {
            const int bs = T == QTYPE_Q4_0 ? 18 : T == QTYPE_Q4_1 ? 20 : T == QTYPE_Q5_0 ? 22 : 24;
            const uint8_t *blk = s + (int64_t)b * bs;
            const int has_m = T == QTYPE_Q4_1 || T == QTYPE_Q5_1;
            const int has_h = T == QTYPE_Q5_0 || T == QTYPE_Q5_1;
            const uint8_t *qh = blk + 2 + 2 * has_m;
            const uint8_t *qs = qh + 4 * has_h;
            for (int k = 0; k < 16; k++) d[(int64_t)b * 16 + k] = qs[k];
            int64_t off = (int64_t)nb * 16;
            if (has_h) {
                for (int k = 0; k < 4; k++) d[off + (int64_t)b * 4 + k] = qh[k];
                off += (int64_t)nb * 4;
            }
            d[off + (int64_t)b * 2] = blk[0];
            d[off + (int64_t)b * 2 + 1] = blk[1];
            if (has_m) {
                off += (int64_t)nb * 2;
                d[off + (int64_t)b * 2] = blk[2];
                d[off + (int64_t)b * 2 + 1] = blk[3];
            }
        } else if (T == QTYPE_Q8_0) {
            const uint8_t *blk = s + (int64_t)b * 34;
            for (int k = 0; k < 32; k++) d[(int64_t)b * 32 + k] = blk[2 + k];
            d[(int64_t)nb * 32 + (int64_t)b * 2] = blk[0];
            d[(int64_t)nb * 32 + (int64_t)b * 2 + 1] = blk[1];
        } else if (T == QTYPE_Q6_K) {
            const uint8_t *blk = s + (int64_t)b * 210;
            for (int k = 0; k < 128; k++) d[(int64_t)b * 128 + k] = blk[k];
            for (int k = 0; k < 64; k++) d[(int64_t)nb * 128 + (int64_t)b * 64 + k] = blk[128 + k];
            for (int k = 0; k < 16; k++) d[(int64_t)nb * 192 + (int64_t)b * 16 + k] = blk[192 + k];
            d[(int64_t)nb * 208 + (int64_t)b * 2] = blk[208];
            d[(int64_t)nb * 208 + (int64_t)b * 2 + 1] = blk[209];
        } else {
            /* row copy (padding only) */
            const int bs = T == QTYPE_F32 ? 4 : T == QTYPE_Q4_K ? 144 : T == QTYPE_Q5_K ? 176 : T == QTYPE_Q2_K ? 84
                         : T == QTYPE_Q3_K ? 110 : T == QTYPE_IQ4_NL ? 18 : T == QTYPE_IQ4_XS ? 136 : 2;
            for (int k = 0; k < bs; k++) d[(int64_t)b * bs + k] = s[(int64_t)b * bs + k];
        }
    }
}

void cu_repack(cu_ctx *S, void *dst, const void *src, uint32_t type, int64_t cols, int64_t nrows) {
    const qtype_traits *tr = qtype_get(type);
    const int nb = (int)(cols / tr->blck);
    const int64_t ss = (int64_t)nb * tr->type_size, ds = cu_row_stride(type, cols);
    /* grid.y is limited to 65535: the caller passes chunks of rows. */
    dim3 grid((nb + 127) / 128, (unsigned)nrows);
#define CALL(T) kernel_repack<T><<<grid, 128, 0, S->stream>>>((uint8_t *)dst, (const uint8_t *)src, ss, ds, nb)
    CU_DQ_DISPATCH(type, CALL)
#undef CALL
    CU_LAUNCHED(S, "repack");
}

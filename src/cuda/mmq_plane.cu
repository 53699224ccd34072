/* mmq_plane.cu - the registration-time planes of the MMQ prefill GEMMs (DESIGN.md "CUDA
 * prefill: the seed design", item 3; layouts in common.cuh): made once per matrix at load
 * (upload.cu cu_build_planes) from the weights in their device layout, read by
 * kernel_mmq<MMQ_Q4X> and kernel_mmq<MMQ_Q6X> (mmq.cu). Each plane holds exactly the
 * integers and floats the raw-byte kernel derives each stage, computed the same way, so
 * the GEMM's outputs are bit-identical with and without it (tests/cuda/test_cuda_ops:
 * memcmp of both, and the plane bytes against a host mirror built from the file's blocks). */
#include "common.cuh"
#include "dequant.cuh"

/* The q6_K plane (common.cuh), one thread per (row, super-block, 16-value group): the
 * codes as kernel_mmq<QTYPE_Q6_K> assembles them from ql and qh (value h*128 + u*32 + l of
 * a super-block: nibble u >> 1 of ql[h*64 + (u & 1)*32 + l], bits 2u of qh[h*32 + l]),
 * less 32, and the scale as its decode step computes it (__fmul_rn(d, sc)), so the
 * kernel on the plane sees the same integers and floats as the kernel on W. */
static __global__ void kernel_q6x_build(uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K) {
    const int nb = K / 256, Rp = (R + 3) & ~3;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)Rp * nb * 16) return;
    const int g = (int)(i % 16), sb = (int)(i / 16 % nb), r = (int)(i / 16 / nb);
    float *dsc = (float *)(plane + (int64_t)nb * R * 256);
    if (r >= R) {
        dsc[((int64_t)sb * 16 + g) * Rp + r] = 0.0f;
        return;
    }
    const uint8_t *row = W + (int64_t)r * stride;
    const uint8_t *ql = row + (int64_t)sb * 128, *qh = row + (int64_t)nb * 128 + (int64_t)sb * 64;
    const int8_t sc = (int8_t)row[(int64_t)nb * 192 + (int64_t)sb * 16 + g];
    const float d = __half2float(*(const __half *)(row + (int64_t)nb * 208 + 2 * sb));
    int8_t *e = (int8_t *)plane + ((int64_t)sb * R + r) * 256;
    for (int v = g * 16; v < g * 16 + 16; v++) {
        const int h = v >> 7, u = (v >> 5) & 3, l = v & 31;
        const int lo = (ql[h * 64 + (u & 1) * 32 + l] >> ((u >> 1) * 4)) & 0xF;
        const int hi = (qh[h * 32 + l] >> (2 * u)) & 3;
        e[v] = (int8_t)((lo | (hi << 4)) - 32);
    }
    dsc[((int64_t)sb * 16 + g) * Rp + r] = __fmul_rn(d, (float)sc);
}

/* The q4_K plane (common.cuh), one thread per (row, super-block): the scales as the
 * decode step of kernel_mmq<QTYPE_Q4_K> computes them from the 12 packed bytes. */
static __global__ void kernel_q4x_build(uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K) {
    const int nb = K / 256, Rp = (R + 3) & ~3;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)Rp * nb) return;
    const int sb = (int)(i % nb), r = (int)(i / nb);
    float *dsc = (float *)plane, *dmn = dsc + (int64_t)nb * 8 * Rp;
    uint8_t *mm = (uint8_t *)(dmn + (int64_t)nb * Rp) + ((int64_t)sb * Rp + r) * 8;
    if (r >= R) {
        for (int s = 0; s < 8; s++) {
            dsc[((int64_t)sb * 8 + s) * Rp + r] = 0.0f;
            mm[s] = 0;
        }
        dmn[(int64_t)sb * Rp + r] = 0.0f;
        return;
    }
    const uint8_t *blk = W + (int64_t)r * stride + (int64_t)sb * 144;
    const float d = __half2float(*(const __half *)blk), dmin = __half2float(*(const __half *)(blk + 2));
    for (int s = 0; s < 8; s++) {
        float sc, m;
        k4_scale_min(blk + 4, s, &sc, &m);
        dsc[((int64_t)sb * 8 + s) * Rp + r] = __fmul_rn(d, sc);
        mm[s] = (uint8_t)m;
    }
    dmn[(int64_t)sb * Rp + r] = dmin;
}

size_t cu_q4x_bytes(int R, int K) {
    const size_t nb = (size_t)K / 256, Rp = ((size_t)R + 3) & ~(size_t)3;
    return nb * Rp * (8 * sizeof(float) + sizeof(float) + 8);
}

void cu_q4x_build(cu_ctx *S, uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K) {
    const int64_t n = (int64_t)((R + 3) & ~3) * (K / 256);
    cu_launch(S, "q4x_build", kernel_q4x_build, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, plane, W, stride, R, K);
}

size_t cu_q6x_bytes(int R, int K) {
    const size_t nb = (size_t)K / 256, Rp = ((size_t)R + 3) & ~(size_t)3;
    return nb * (size_t)R * 256 + nb * 16 * Rp * sizeof(float);
}

void cu_q6x_build(cu_ctx *S, uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K) {
    const int64_t n = (int64_t)((R + 3) & ~3) * (K / 256) * 16;
    cu_launch(S, "q6x_build", kernel_q6x_build, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, plane, W, stride, R, K);
}

size_t cu_mmq_plane_bytes(uint32_t type, int R, int K) {
    return type == QTYPE_Q4_K ? cu_q4x_bytes(R, K) : type == QTYPE_Q6_K ? cu_q6x_bytes(R, K) : 0;
}

void cu_mmq_plane_build(cu_ctx *S, uint32_t type, uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K) {
    if (type == QTYPE_Q4_K) cu_q4x_build(S, plane, W, stride, R, K);
    else if (type == QTYPE_Q6_K) cu_q6x_build(S, plane, W, stride, R, K);
}

/* mm.cu - prefill GEMM on tensor cores: out[M][N] (+bias) = A[M][Kp] . B[N][Kp]^T,
 * A = activations and B = weight rows, both f16 with K contiguous ("TN"), f32
 * accumulation (mma.sync m16n8k16). Kp % 32 == 0 (the callers zero-pad K).
 *
 * 128x128x32 block tile, 8 warps as 2 (M) x 4 (N), warp tile 64x32; two smem
 * stages filled by cp.async (16-byte copies, zero-fill past M/N), fragments by
 * ldmatrix. Rows padded to 40 halves: the 8 row addresses of an ldmatrix fall in
 * distinct 16-byte bank groups.
 *
 * TODO: this is the "any correct tensor-core path" of issue 5. The int8 MMQ
 * kernels of DESIGN.md (no f16 weight scratch, wgmma on sm_90a) replace it. */
#include "common.cuh"
#include "ptx.cuh"

#define MM_BM 128
#define MM_BN 128
#define MM_BK 32
#define MM_LD (MM_BK + 8)
#define MM_THREADS 256

static __global__ void __launch_bounds__(MM_THREADS)
kernel_gemm_f16(float *out, int ldo, const __half *A, const __half *B, const float *bias, int M, int N, int Kp) {
    __shared__ __align__(16) __half As[2][MM_BM * MM_LD];
    __shared__ __align__(16) __half Bs[2][MM_BN * MM_LD];
    pdl_trigger();
    pdl_wait();
    const int bm = blockIdx.y * MM_BM, bn = blockIdx.x * MM_BN;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wm = warp >> 2, wn = warp & 3;
    const int g = lane >> 2, c4 = lane & 3;

    auto load = [&](int s, int k0) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int ch = tid + MM_THREADS * i;
            const int row = ch >> 2, col = (ch & 3) * 8;
            const int gm = bm + row, gn = bn + row;
            const __half *srcA = gm < M ? A + (int64_t)gm * Kp + k0 + col : A;
            const __half *srcB = gn < N ? B + (int64_t)gn * Kp + k0 + col : B;
            cp_async16(&As[s][row * MM_LD + col], srcA, gm < M ? 16 : 0);
            cp_async16(&Bs[s][row * MM_LD + col], srcB, gn < N ? 16 : 0);
        }
        cp_async_commit();
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    const int nk = Kp / MM_BK;
    load(0, 0);
    for (int kt = 0; kt < nk; kt++) {
        const int s = kt & 1;
        if (kt + 1 < nk) {
            load(s ^ 1, (kt + 1) * MM_BK);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MM_BK / 16; kk++) {
            uint32_t af[4][4], bf[2][4];
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
                ldsm_x4(af[mi], &As[s][(wm * 64 + mi * 16 + (lane & 15)) * MM_LD + kk * 16 + (lane >> 4) * 8]);
#pragma unroll
            for (int nj = 0; nj < 2; nj++)
                ldsm_x4(bf[nj], &Bs[s][(wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * MM_LD + kk * 16 +
                                        ((lane >> 3) & 1) * 8]);
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
                    mma_f16_16816(acc[mi][ni], af[mi], bf[ni >> 1][(ni & 1) * 2], bf[ni >> 1][(ni & 1) * 2 + 1]);
        }
        __syncthreads();  /* stage s is refilled by the next iteration's load */
    }
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            const int col = bn + wn * 32 + ni * 8 + 2 * c4;
            const int row = bm + wm * 64 + mi * 16 + g;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = row + (e >> 1) * 8, cc = col + (e & 1);
                if (r < M && cc < N) out[(int64_t)r * ldo + cc] = acc[mi][ni][e] + (bias ? bias[cc] : 0.0f);
            }
        }
}

void cu_gemm_f16(cu_ctx *S, float *out, int ldo, const __half *A, const __half *B, const float *bias, int M, int N,
                 int Kp) {
    dim3 grid((N + MM_BN - 1) / MM_BN, (M + MM_BM - 1) / MM_BM);
    cu_launch(S, "gemm_f16", kernel_gemm_f16, grid, dim3(MM_THREADS), 0, out, ldo, A, B, bias, M, N, Kp);
}

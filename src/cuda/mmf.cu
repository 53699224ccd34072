/* mmf.cu - q4_K and q6_K prefill GEMMs on f16 tensor cores with the weights dequantized
 * in registers: out[n][R] (+bias, or += with accum) = x[n][K] . W^T, x rounded to f16,
 * w rounded to f16 (q4_K c * (d*sc) - dmin*m, q6_K (q - 32) * (d*sc)), f32 accumulation
 * (path mmf).
 *
 * Why not the int8 MMQ kernel (mmq.cu) for q4_K: there every m16n8k32 result is scaled
 * by the 32-wide sub-block scales of both sides, 3 FP ops per accumulator per 32 K, about
 * 12 issue slots per tensor op, and the kernel runs at ~215 TOP/s (bench/cuda_mmf.cu).
 * Here the sub-block scale and min go into the weights before the product, once per
 * weight per block tile (shared by the warp's 64 tokens), and the sum over K stays in
 * the tensor core's f32 accumulators: ~4 instructions a mma in all. The lab measured
 * 1.5-1.75x the int8 kernel on the 7B/8B shapes at 512-2048 tokens, and 10x less error
 * against an f32 reference (normalised 3.6e-4 vs 3.8e-3: no int8 rounding of x).
 *
 * Plane (registration-time, cu_mmf_plane_build): per 16-row tile and 32-wide K chunk one
 * 320-byte record, tiles row-major over chunks ([R/16][K/32]): 32 lanes x 8 bytes of
 * nibbles in the mma A-fragment order, then the tile's 16 rows x half2 (d*sc, -dmin*m).
 * Lane (g, t) = (lane / 4, lane % 4) holds word w (k16 step w of the chunk) whose pair i
 * sits at bits 4i (value k) and 16+4i (value k+1): i = 0 row g k = 16w+2t, i = 1 row g+8
 * the same k, i = 2 row g k+8, i = 3 row g+8 k+8: the four A registers of m16n8k16.
 * A pair becomes f16 by OR-ing the nibbles into the mantissa of 1024 (LOP3), then
 * c = h - 1024 (or (h16 / 16) - 64 for the high nibble), exact, then one HFMA2 c*s - m.
 * 0.625 bytes a weight (the q4_K bytes are 0.5625).
 * q6_K: the same tiles and order with a byte a code (q = 0..63; lane (g, t)'s 16 bytes:
 * byte 8w + 2i + h is pair i's value k + h of step w), 512 bytes, then 16 rows x half2
 * (d*sc of the chunk's first 16 values, of its second 16): 576 bytes a record, 1.125 a
 * weight (q6_K: 0.8203). A pair becomes f16 by a byte permute into 1024's mantissa, then
 * q - 32 = h - 1056 (exact) and one HMUL2 by its 16 values' scale.
 *
 * Activations: f16, token-major [n_pad][K], n_pad = n rounded up to CU_MMF_NPAD with
 * zeros (cu_mmf_convert, cu_mmf_swiglu); values beyond f16's range saturate at +-65504. */
#include "common.cuh"
#include "dequant.cuh"
#include "ptx.cuh"

/* bytes of one (16-row tile, 32-chunk) record: q4_K 256 of nibbles + 64 of scales, q6_K
 * 512 of codes + 64 of scales */
template <int T> struct mmf_fmt { static constexpr int rec = T == QTYPE_Q6_K ? 576 : 320, codes = rec - 64; };

/* (the planner computes the same size, plan.c, for the upload's facts without a GPU) */
static_assert(mmf_fmt<QTYPE_Q6_K>::rec == 576 && mmf_fmt<QTYPE_Q4_K>::rec == 320, "cu_plan_mmf_plane_bytes's records");
size_t cu_mmf_plane_bytes(uint32_t type, int R, int K) { return (size_t)cu_plan_mmf_plane_bytes(type, R, K); }
int cu_mmf_supported(uint32_t type, int64_t K) { return cu_cap_mmf(type, K); }

/* one warp per (16-row tile, 32-chunk): the lane's 16 nibbles, lanes 0..15 a row's scales */
static __global__ void kernel_mmf_plane(uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K) {
    const int rt = blockIdx.y, kc = blockIdx.x, lane = threadIdx.x;
    uint8_t *rec = plane + ((int64_t)rt * (K / 32) + kc) * mmf_fmt<QTYPE_Q4_K>::rec;
    const int g = lane >> 2, t = lane & 3;
    const int sb = kc >> 3, j = kc & 7;
    const int r0 = rt * 16 + g, r1 = r0 + 8;
    uint32_t w[2];
    for (int s = 0; s < 2; s++) {
        const int kb = 16 * s + 2 * t;
        const int rr[4] = {r0, r1, r0, r1}, kk[4] = {kb, kb, kb + 8, kb + 8};
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
            if (rr[i] >= R) continue;
            /* q4_K: values 64q..64q+63 of a block are bytes 32q.. of qs, low nibbles then high */
            const uint8_t *qs = W + (int64_t)rr[i] * stride + (int64_t)sb * 144 + 16 + 32 * (j >> 1);
            const int sh = (j & 1) * 4;
            v |= (uint32_t)((qs[kk[i]] >> sh) & 15) << (4 * i) | (uint32_t)((qs[kk[i] + 1] >> sh) & 15) << (16 + 4 * i);
        }
        w[s] = v;
    }
    *(uint2 *)(rec + lane * 8) = make_uint2(w[0], w[1]);
    if (lane < 16) {
        const int r = rt * 16 + lane;
        __half2 sm = __floats2half2_rn(0.f, 0.f);
        if (r < R) {
            const uint8_t *blk = W + (int64_t)r * stride + (int64_t)sb * 144;
            float sc, m;
            k4_scale_min(blk + 4, j, &sc, &m);
            sm = __floats2half2_rn(h2f(ld_u16(blk)) * sc, -(h2f(ld_u16(blk + 2)) * m));
        }
        *(__half2 *)(rec + mmf_fmt<QTYPE_Q4_K>::codes + lane * 4) = sm;
    }
}

/* q6_K (device layout, common.cuh: ql [nb][128] | qh [nb][64] | scales [nb][16] | d [nb]):
 * value l of chunk kc is code q of scale sc[8h + 2qq + l / 16], kc % 8 = 4h + qq */
static __global__ void kernel_mmf_plane_q6(uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K) {
    const int rt = blockIdx.y, kc = blockIdx.x, lane = threadIdx.x;
    const int nb = K / 256;
    uint8_t *rec = plane + ((int64_t)rt * (K / 32) + kc) * mmf_fmt<QTYPE_Q6_K>::rec;
    const int g = lane >> 2, t = lane & 3;
    const int sb = kc >> 3, h = (kc & 7) >> 2, qq = kc & 3;
    uint8_t b[16];
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 4; i++)
            for (int e = 0; e < 2; e++) {
                const int r = rt * 16 + g + 8 * (i & 1), l = 16 * w + 2 * t + 8 * (i >> 1) + e;
                uint8_t q = 0;
                if (r < R) {
                    const uint8_t *row = W + (int64_t)r * stride;
                    const uint8_t lb = row[(int64_t)sb * 128 + 64 * h + l + (qq & 1) * 32];
                    const uint8_t hb = row[(int64_t)nb * 128 + (int64_t)sb * 64 + 32 * h + l];
                    q = (uint8_t)((qq >= 2 ? lb >> 4 : lb & 15) | ((hb >> (2 * qq)) & 3) << 4);
                }
                b[8 * w + 2 * i + e] = q;
            }
    *(uint4 *)(rec + lane * 16) = *(const uint4 *)b;
    if (lane < 16) {
        const int r = rt * 16 + lane;
        __half2 ss = __floats2half2_rn(0.f, 0.f);
        if (r < R) {
            const uint8_t *row = W + (int64_t)r * stride;
            const int8_t *sc = (const int8_t *)(row + (int64_t)nb * 192 + (int64_t)sb * 16);
            const float d = h2f(ld_u16(row + (int64_t)nb * 208 + (int64_t)sb * 2));
            ss = __floats2half2_rn(d * (float)sc[8 * h + 2 * qq], d * (float)sc[8 * h + 2 * qq + 1]);
        }
        *(__half2 *)(rec + mmf_fmt<QTYPE_Q6_K>::codes + lane * 4) = ss;
    }
}

void cu_mmf_plane_build(cu_ctx *S, uint32_t type, uint8_t *plane, const uint8_t *W, int64_t stride, int R, int K) {
    if (type == QTYPE_Q6_K)
        cu_launch(S, "mmf_plane", kernel_mmf_plane_q6, dim3(K / 32, (R + 15) / 16), dim3(32), 0, plane, W, stride, R, K);
    else cu_launch(S, "mmf_plane", kernel_mmf_plane, dim3(K / 32, (R + 15) / 16), dim3(32), 0, plane, W, stride, R, K);
}

/* 4 values a thread; u != NULL: silu(x) * u (cu_swiglu's arithmetic) */
static __global__ void kernel_mmf_convert(__half *xh, const float *x, const float *u, int n, int n_pad, int K) {
    pdl_trigger();
    pdl_wait();
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i >= (int64_t)n_pad * K) return;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i / K < n) {
        v = *(const float4 *)(x + i);
        if (u) {
            const float4 w = *(const float4 *)(u + i);
            v = make_float4(silu_mul(v.x, w.x), silu_mul(v.y, w.y), silu_mul(v.z, w.z), silu_mul(v.w, w.w));
        }
    }
    *(uint2 *)(xh + i) = f2h4_sat(v);
}

/* (below CU_MMF_MIN_N the column kernel reads groups of 8 columns) */
int cu_mmf_npad(int n) {
    const int q = n < CU_MMF_MIN_N ? 8 : CU_MMF_NPAD;
    return (n + q - 1) / q * q;
}

static void mmf_convert_launch(cu_ctx *S, const char *what, __half *xh, const float *x, const float *u, int n, int K) {
    const int n_pad = cu_mmf_npad(n);
    const int64_t quads = (int64_t)n_pad * K / 4;
    cu_launch(S, what, kernel_mmf_convert, dim3((unsigned)((quads + 255) / 256)), dim3(256), 0, xh, x, u, n, n_pad, K);
}
void cu_mmf_convert(cu_ctx *S, __half *xh, const float *x, int n, int K) {
    mmf_convert_launch(S, "mmf_convert", xh, x, NULL, n, K);
}
void cu_mmf_swiglu(cu_ctx *S, __half *xh, const float *g, const float *u, int n, int K) {
    mmf_convert_launch(S, "mmf_swiglu", xh, g, u, n, K);
}

static __device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t mask, uint32_t magic) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "r"(mask), "r"(magic)); /* (a & b) | c */
    return r;
}
/* The four A registers of one word: pair i -> (c_lo, c_hi) * s - m of its row (s0/m0 row g,
 * s1/m1 row g+8). */
static __device__ __forceinline__ void mmf_dequant(uint32_t q, __half2 s0, __half2 m0, __half2 s1, __half2 m1,
                                                   uint32_t *a) {
    const uint32_t qh = q >> 8;
    const uint32_t p0 = lop3_and_or(q, 0x000f000fu, 0x64006400u), p1 = lop3_and_or(q, 0x00f000f0u, 0x64006400u);
    const uint32_t p2 = lop3_and_or(qh, 0x000f000fu, 0x64006400u), p3 = lop3_and_or(qh, 0x00f000f0u, 0x64006400u);
    const __half2 k1024 = __halves2half2(__ushort_as_half(0x6400), __ushort_as_half(0x6400));
    const __half2 k16th = __halves2half2(__ushort_as_half(0x2c00), __ushort_as_half(0x2c00)); /* 1/16 */
    const __half2 km64 = __halves2half2(__ushort_as_half(0xd400), __ushort_as_half(0xd400));  /* -64 */
    const __half2 c0 = __hsub2(*(const __half2 *)&p0, k1024), c1 = __hfma2(*(const __half2 *)&p1, k16th, km64);
    const __half2 c2 = __hsub2(*(const __half2 *)&p2, k1024), c3 = __hfma2(*(const __half2 *)&p3, k16th, km64);
    const __half2 w0 = __hfma2(c0, s0, m0), w1 = __hfma2(c1, s1, m1), w2 = __hfma2(c2, s0, m0), w3 = __hfma2(c3, s1, m1);
    a[0] = *(const uint32_t *)&w0;
    a[1] = *(const uint32_t *)&w1;
    a[2] = *(const uint32_t *)&w2;
    a[3] = *(const uint32_t *)&w3;
}

/* q6_K: the four A registers of k16 step w from its two words (pairs 0, 1 in word 0,
 * pairs 2, 3 in word 1): (q - 32) * s of its row and 16 values */
static __device__ __forceinline__ void mmf_dequant_q6(uint32_t q0, uint32_t q1, __half2 s0, __half2 s1, uint32_t *a) {
    const __half2 k1056 = __halves2half2(__ushort_as_half(0x6420), __ushort_as_half(0x6420));
    uint32_t p[4];
    p[0] = __byte_perm(q0, 0x64646464u, 0x4140);
    p[1] = __byte_perm(q0, 0x64646464u, 0x4342);
    p[2] = __byte_perm(q1, 0x64646464u, 0x4140);
    p[3] = __byte_perm(q1, 0x64646464u, 0x4342);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2 w = __hmul2(__hsub2(*(const __half2 *)&p[i], k1056), (i & 1) ? s1 : s0);
        a[i] = *(const uint32_t *)&w;
    }
}

/* The A registers of a record's two k16 steps, af[w], from the lane's code words q (q4_K:
 * q[0..1]; q6_K: q[0..3]) and the half2 scale words of its rows g (sg) and g+8 (sg8). */
template <int T>
static __device__ __forceinline__ void mmf_rec_frags(const uint32_t *q, __half2 sg, __half2 sg8, uint32_t af[2][4]) {
    if constexpr (T == QTYPE_Q6_K) {
        mmf_dequant_q6(q[0], q[1], __low2half2(sg), __low2half2(sg8), af[0]);
        mmf_dequant_q6(q[2], q[3], __high2half2(sg), __high2half2(sg8), af[1]);
    } else {
        const __half2 s0 = __low2half2(sg), m0 = __high2half2(sg), s1 = __low2half2(sg8), m1 = __high2half2(sg8);
        mmf_dequant(q[0], s0, m0, s1, m1, af[0]);
        mmf_dequant(q[1], s0, m0, s1, m1, af[1]);
    }
}

/* BM = 32*WM rows x BN = 8*NT*WN tokens; a stage is a 64-wide K tile (two chunks) of
 * both; ST stages, ST-1 in flight (cp.async, one commit group a stage). */
template <int T, int WM, int WN, int NT, int ST>
struct mmf_cfg {
    static constexpr int BM = 32 * WM, BN = 8 * NT * WN, THREADS = 32 * WM * WN;
    static constexpr int a_bytes = (BM / 16) * 2 * mmf_fmt<T>::rec, b_bytes = BN * 128;
    static constexpr int stage = a_bytes + b_bytes, smem = ST * stage;
};

template <int T, int WM, int WN, int NT, int ST, int LB>
static __global__ void __launch_bounds__(32 * WM * WN, LB)
kernel_mmf(float *out, float *out2, int rsplit, int ldo, const uint8_t *P, int R, int K, const __half *xh, int n,
           const float *bias, int accum) {
    using C = mmf_cfg<T, WM, WN, NT, ST>;
    constexpr int REC = mmf_fmt<T>::rec, CPT = 2 * REC / 16; /* 16-byte copies of a row tile's stage */
    extern __shared__ __align__(16) uint8_t mmf_sh[];
    pdl_trigger();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp % WM, wn = warp / WM;
    const int tok0 = blockIdx.x * C::BN, rt0 = blockIdx.y * (C::BM / 16);
    const int KC = K / 32, nkt = K / 64;
    const int n_rt = (R + 15) / 16;

    /* each thread's copies of a stage, fixed over k: A is BM/16 runs of 640 bytes (a row
     * tile's two records; q6_K 1152), zero-filled past the last row tile; B is BN rows of 128 bytes,
     * 16-byte chunk c of row r stored at c ^ (r & 7) so the 8 rows of an ldmatrix fall
     * in distinct bank groups */
    constexpr int NA = C::a_bytes / 16, NB = C::BN * 8;
    constexpr int IA = (NA + C::THREADS - 1) / C::THREADS, IB = NB / C::THREADS;
    static_assert(NB % C::THREADS == 0 && (C::THREADS / 8) % 8 == 0, "B copies");
    const uint8_t *asrc[IA];
    int adst[IA], abytes[IA];
#pragma unroll
    for (int i = 0; i < IA; i++) {
        const int c = tid + i * C::THREADS, tile = c / CPT, off = (c % CPT) * 16, rt = rt0 + tile;
        const int ok = c < NA && rt < n_rt;
        asrc[i] = P + ((int64_t)(ok ? rt : 0) * KC) * REC + (ok ? off : 0);
        adst[i] = c < NA ? tile * 2 * REC + off : -1;
        abytes[i] = ok ? 16 : 0;
    }
    const __half *bsrc = xh + (int64_t)(tok0 + (tid >> 3)) * K + (tid & 7) * 8;
    const int bdst = (tid >> 3) * 128 + (((tid & 7) ^ ((tid >> 3) & 7)) << 4);
    auto load = [&](int kt, int slot) {
        uint8_t *As = mmf_sh + slot * C::stage, *Bs = As + C::a_bytes;
#pragma unroll
        for (int i = 0; i < IA; i++)
            if (adst[i] >= 0) cp_async16(As + adst[i], asrc[i] + (int64_t)kt * 2 * REC, abytes[i]);
#pragma unroll
        for (int i = 0; i < IB; i++)
            cp_async16(Bs + bdst + i * (C::THREADS / 8) * 128, bsrc + (int64_t)i * (C::THREADS / 8) * K + kt * 64, 16);
    };

    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

    pdl_wait(); /* (the activations are the kernel ahead's output) */
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < nkt) load(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < nkt; kt++) {
        cp_async_wait<ST - 2>();
        __syncthreads(); /* stage kt visible to all; slot (kt-1) % ST free for the next copy */
        if (kt + ST - 1 < nkt) load(kt + ST - 1, (kt + ST - 1) % ST);
        cp_async_commit();
        const uint8_t *As = mmf_sh + (kt % ST) * C::stage, *Bs = As + C::a_bytes;
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            uint32_t af[2][2][4]; /* [m16 tile][k16 step][register] */
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const uint8_t *rec = As + (wm * 2 + mi) * 2 * REC + kk * REC;
                constexpr int SC = mmf_fmt<T>::codes;
                const __half2 sg = *(const __half2 *)(rec + SC + g * 4);
                const __half2 sg8 = *(const __half2 *)(rec + SC + (g + 8) * 4);
                __align__(16) uint32_t q[4];
                if (T == QTYPE_Q6_K) *(uint4 *)q = *(const uint4 *)(rec + lane * 16);
                else *(uint2 *)q = *(const uint2 *)(rec + lane * 8);
                mmf_rec_frags<T>(q, sg, sg8, af[mi]);
            }
#pragma unroll
            for (int w = 0; w < 2; w++) {
#pragma unroll
                for (int nj = 0; nj < NT; nj += 2) {
                    /* B fragments of two n8 tiles: matrix m = (tile nj + m/2, k half m%2) */
                    const int m = lane >> 3;
                    const int r = wn * 8 * NT + 8 * (nj + (m >> 1)) + (lane & 7);
                    const int ch = kk * 4 + 2 * w + (m & 1);
                    uint32_t b[4];
                    ldsm_x4(b, Bs + r * 128 + ((ch ^ (r & 7)) << 4));
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
                        mma_f16_16816(acc[mi][nj], af[mi][w], b[0], b[1]);
                        mma_f16_16816(acc[mi][nj + 1], af[mi][w], b[2], b[3]);
                    }
                }
            }
        }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nj = 0; nj < NT; nj++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = rt0 * 16 + wm * 32 + mi * 16 + g + (e >> 1) * 8;
                const int tk = tok0 + wn * 8 * NT + nj * 8 + 2 * t + (e & 1);
                if (r < R && tk < n) gemm_store(out, out2, rsplit, ldo, r, tk, acc[mi][nj][e], bias, accum);
            }
}

template <int T, int WM, int WN, int NT, int ST, int LB>
static void mmf_launch(cu_ctx *S, float *out, float *out2, int rsplit, int ldo, const uint8_t *P, int R, int K,
                       const __half *xh, int n, const float *bias, int accum) {
    using C = mmf_cfg<T, WM, WN, NT, ST>;
    static unsigned char attr_set[CU_MAX_DEVICES]; /* (per device: common.cuh) */
    if (!cu_smem_attr_once(S, kernel_mmf<T, WM, WN, NT, ST, LB>, C::smem, attr_set, "mmf: shared memory attribute"))
        return;
    /* token tiles fastest: a wave of blocks shares its weight rows through the L2 */
    dim3 grid((n + C::BN - 1) / C::BN, (R + C::BM - 1) / C::BM);
    cu_launch(S, "mmf", kernel_mmf<T, WM, WN, NT, ST, LB>, grid, dim3(C::THREADS), C::smem, out, out2, rsplit, ldo, P, R, K,
              xh, n, bias, accum);
}

/* The tile: 128 rows x 64 tokens of 4 warps, 4 stages (q4_K 53 KB, q6_K 70 KB), 3
 * blocks a SM by registers; bench/cuda_mmf.cu against 128x128 of 8 warps (q4_K): 8b
 * gate+up n = 2048 1261 vs 1322 us, n = 512 327 vs 332, 4096x4096 n = 1266 121 vs 146. */
#define MMF_TILE 4, 1, 8, 4, 2
static_assert(mmf_cfg<QTYPE_Q4_K, 4, 1, 8, 4>::BN == CU_MMF_NPAD, "n_pad is one token tile");

/* The end of both column kernels: the KS warps' sums (acc, RT row tiles x NT column
 * groups of a mma's 4 values) added in shared memory in warp order, so the same bits
 * every run, then stored. */
template <int RT, int NT, int KS>
static __device__ __forceinline__ void mmf_cols_reduce(float (*sum)[32], const float (&acc)[RT][NT][4]) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int w = 0; w < KS; w++) {
        if (warp == w) {
#pragma unroll
            for (int i = 0; i < RT; i++)
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float *d = &sum[(i * NT + j) * 4 + e][lane];
                        *d = w ? *d + acc[i][j][e] : acc[i][j][e];
                    }
        }
        __syncthreads();
    }
}
template <int RT, int NT, int KS>
static __device__ __forceinline__ void mmf_cols_finish(float (*sum)[32], const float (&acc)[RT][NT][4], int rt0, int tok0,
                                                       float *out, float *out2, int rsplit, int ldo, int R, int n,
                                                       const float *bias, int accum) {
    mmf_cols_reduce<RT, NT, KS>(sum, acc);
    for (int o = threadIdx.x; o < RT * NT * 4 * 32; o += 32 * KS) {
        const int l = o % 32, c = o / 32, i = c / (NT * 4), j = (c / 4) % NT, e = c % 4;
        const int r = (rt0 + i) * 16 + (l >> 2) + (e >> 1) * 8, tk = tok0 + 8 * j + 2 * (l & 3) + (e & 1);
        if (r < R && tk < n) gemm_store(out, out2, rsplit, ldo, r, tk, sum[c][l], bias, accum);
    }
}

/* Few columns (8 sequences decoded together: path mmf-cols): the same
 * records and arithmetic, no shared-memory staging. A block is RT 16-row tiles and KS
 * warps; warp w takes the contiguous run w of the K/32 chunks (in-block split-K: a
 * 4096-row matrix is 128 blocks of 16 warps at RT 2, where the 128-row tile makes 32
 * blocks of 4 and leaves most SMs idle) and multiplies them against 8*NT columns read
 * from xh (the mma B registers are two f16 pairs of one token row, L2-resident: the RT
 * tiles of a warp share them). Both the weight records and the B registers are loaded U
 * chunks ahead of their use. The warps' sums meet in shared memory in warp order (the
 * same bits every run). */
template <int T, int NT, int RT, int KS, int U>
static __global__ void __launch_bounds__(32 * KS)
kernel_mmf_cols(float *out, float *out2, int rsplit, int ldo, const uint8_t *P, int R, int K, const __half *xh, int n,
                const float *bias, int accum) {
    constexpr int REC = mmf_fmt<T>::rec, SC = mmf_fmt<T>::codes, QW = T == QTYPE_Q6_K ? 4 : 2;
    __shared__ float sum[RT * NT * 4][32];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int rt0 = blockIdx.x * RT, tok0 = blockIdx.y * 8 * NT;
    const int KC = K / 32, n_rt = (R + 15) / 16;
    const int kc0 = (int)((int64_t)warp * KC / KS), kc1 = (int)((int64_t)(warp + 1) * KC / KS);
    /* the lane's B row (token tok0 + 8j + g; xh has n_pad >= tok0 + 8 NT rows) at k = 2t */
    const __half *xb = xh + (int64_t)(tok0 + g) * K + 2 * t;

    float acc[RT][NT][4];
#pragma unroll
    for (int i = 0; i < RT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

    uint32_t q[2][U][RT][QW], sc[2][U][RT][2], bx[2][U][NT][4];
    auto load = [&](int buf, int kc) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kc + u >= kc1) continue;
#pragma unroll
            for (int i = 0; i < RT; i++) {
                if (rt0 + i >= n_rt) continue;
                const uint8_t *r = P + ((int64_t)(rt0 + i) * KC + kc + u) * REC;
                if constexpr (QW == 4) {
                    const uint4 v = __ldg((const uint4 *)(r + lane * 16));
                    q[buf][u][i][0] = v.x, q[buf][u][i][1] = v.y, q[buf][u][i][2] = v.z, q[buf][u][i][3] = v.w;
                } else {
                    const uint2 v = __ldg((const uint2 *)(r + lane * 8));
                    q[buf][u][i][0] = v.x, q[buf][u][i][1] = v.y;
                }
                sc[buf][u][i][0] = __ldg((const uint32_t *)(r + SC + g * 4));
                sc[buf][u][i][1] = __ldg((const uint32_t *)(r + SC + (g + 8) * 4));
            }
            const __half *xk = xb + (int64_t)(kc + u) * 32;
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) bx[buf][u][j][e] = __ldg((const uint32_t *)(xk + (int64_t)8 * j * K + 8 * e));
        }
    };
    auto compute = [&](int buf, int kc) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (kc + u >= kc1) break;
#pragma unroll
            for (int i = 0; i < RT; i++) {
                if (rt0 + i >= n_rt) continue;
                uint32_t af[2][4];
                mmf_rec_frags<T>(q[buf][u][i], *(const __half2 *)&sc[buf][u][i][0], *(const __half2 *)&sc[buf][u][i][1], af);
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    mma_f16_16816(acc[i][j], af[0], bx[buf][u][j][0], bx[buf][u][j][1]);
                    mma_f16_16816(acc[i][j], af[1], bx[buf][u][j][2], bx[buf][u][j][3]);
                }
            }
        }
    };
    pdl_wait(); /* (the activations are the kernel ahead's output) */
    /* two register sets, the next U chunks loading while the last U are multiplied (the
     * set indices stay constants: a runtime index would put the arrays in local memory) */
    load(0, kc0);
    for (int kc = kc0; kc < kc1; kc += 2 * U) {
        load(1, kc + U);
        compute(0, kc);
        load(0, kc + 2 * U);
        compute(1, kc + U);
    }
    mmf_cols_finish<RT, NT, KS>(sum, acc, rt0, tok0, out, out2, rsplit, ldo, R, n, bias, accum);
}

template <int T, int NT, int RT, int KS, int U>
static void mmf_cols_launch(cu_ctx *S, float *out, float *out2, int rsplit, int ldo, const uint8_t *P, int R, int K,
                            const __half *xh, int n, const float *bias, int accum) {
    dim3 grid(((R + 15) / 16 + RT - 1) / RT, (n + 8 * NT - 1) / (8 * NT));
    cu_launch(S, "mmf_cols", kernel_mmf_cols<T, NT, RT, KS, U>, grid, dim3(32 * KS), 0, out, out2, rsplit, ldo, P, R, K,
              xh, n, bias, accum);
}

/* The column kernel on sm_90: the same tile of RT 16-row tiles and KS warps splitting
 * the K/32 chunks, one group of 8 columns, with each warp streaming its chunks through
 * a TMA ring of its own in shared memory instead of loading them into registers. A
 * stage is CH chunks: lane 0 tells the stage's mbarrier its bytes, lanes 0..RT-1 copy
 * their row tile's CH records (contiguous in the plane: one bulk copy where cp.async
 * needs 80 of 16 bytes) and lanes 8..15 their token row's CH x 64 bytes of xh (rows
 * padded by 16 bytes, so ldmatrix's 8 rows fall in distinct bank groups). ST stages
 * are in flight, bounded by shared memory, not registers (the register kernel's
 * prefetch of U chunks in two sets). Only the first stage's weights are requested
 * before pdl_wait() (a burst ahead of the wait slows the kernel ahead: mmv_ring.cuh,
 * ring_first_rows). Same records, arithmetic and warp-order sum as kernel_mmf_cols. */
template <int T, int RT, int KS, int ST, int CH>
struct mmf_tma_cfg {
    static constexpr int a_bytes = RT * CH * mmf_fmt<T>::rec, b_row = CH * 64 + 16, stage = a_bytes + 8 * b_row,
                         smem = KS * ST * stage;
};

template <int T, int RT, int KS, int ST, int CH, bool SW>
static __global__ void __launch_bounds__(32 * KS)
kernel_mmf_cols_tma(float *out, float *out2, int rsplit, int ldo, const uint8_t *P, int R, int K, const __half *xh, int n,
                    const float *bias, int accum, __half *sw) {
    using C = mmf_tma_cfg<T, RT, KS, ST, CH>;
    static_assert(!SW || RT % 2 == 0, "a SwiGLU block pairs its gate tiles with their up tiles");
    constexpr int REC = mmf_fmt<T>::rec, SC = mmf_fmt<T>::codes, QW = T == QTYPE_Q6_K ? 4 : 2;
    extern __shared__ __align__(128) uint8_t mmf_tma_sh[];
    __shared__ float sum[RT * 4][32];
    __shared__ __align__(8) uint64_t bars[KS][ST];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2;
    /* tile i of the block: row tiles rt0 + i, or with SW (gate rows 0..rsplit-1, up rows
     * rsplit..: the SwiGLU's pairs) gate tiles rt0 + i for i < RT/2, then their up tiles */
    constexpr int RH = SW ? RT / 2 : RT;
    const int rt0 = blockIdx.x * RH, n_rt = SW ? rsplit / 16 : (R + 15) / 16;
    const int KC = K / 32, nrt = min(RH, n_rt - rt0);
    auto tile = [&](int i) { return SW && i >= RH ? n_rt + rt0 + i - RH : rt0 + i; };
    auto live = [&](int i) { return (SW ? i % RH : i) < nrt; };
    const int kc0 = (int)((int64_t)warp * KC / KS), kc1 = (int)((int64_t)(warp + 1) * KC / KS);
    const int nst = (kc1 - kc0 + CH - 1) / CH;
    uint8_t *ring = mmf_tma_sh + warp * ST * C::stage;
    uint64_t *bar = bars[warp];
    if (lane == 0) mbar_init_ring(bar, ST);
    __syncwarp();
    /* stage s (chunks kc0 + CH s ..) into slot s % ST: its weights (a), its activations (b) */
    auto issue = [&](int s, bool a, bool b) {
        const int kc = kc0 + s * CH, nch = min(CH, kc1 - kc), slot = s % ST;
        uint8_t *st = ring + slot * C::stage;
        if (a) {
            if (lane == 0) tma_expect(bar + slot, (uint32_t)((SW ? 2 : 1) * nrt * nch * REC + 8 * nch * 64));
            __syncwarp();
            if (lane < RT && live(lane))
                tma_copy(st + lane * CH * REC, P + ((int64_t)tile(lane) * KC + kc) * REC, (uint32_t)(nch * REC), bar + slot);
        }
        if (b && lane >= 8 && lane < 16)
            tma_copy_plain(st + C::a_bytes + (lane - 8) * C::b_row, xh + (int64_t)(lane - 8) * K + kc * 32,
                           (uint32_t)(nch * 64), bar + slot);
    };
    float acc[RT][1][4];
#pragma unroll
    for (int i = 0; i < RT; i++) acc[i][0][0] = acc[i][0][1] = acc[i][0][2] = acc[i][0][3] = 0.f;
    if (nst > 0) issue(0, true, false);
    pdl_wait(); /* (the activations are the kernel ahead's output) */
    if (nst > 0) issue(0, false, true);
    for (int s = 1; s < ST && s < nst; s++) issue(s, true, true);
    for (int s = 0; s < nst; s++) {
        const int slot = s % ST, nch = min(CH, kc1 - kc0 - s * CH);
        mbar_wait(bar + slot, (uint32_t)((s / ST) & 1));
        const uint8_t *st = ring + slot * C::stage;
#pragma unroll
        for (int j = 0; j < CH; j++) {
            if (j >= nch) break;
            uint32_t b[4]; /* the two k16 steps' B registers: matrix m = lane / 8 is 8 values of row lane % 8 */
            ldsm_x4(b, st + C::a_bytes + (lane & 7) * C::b_row + j * 64 + (lane >> 3) * 16);
#pragma unroll
            for (int i = 0; i < RT; i++) {
                if (!live(i)) continue;
                const uint8_t *rec = st + (i * CH + j) * REC;
                __align__(16) uint32_t q[4];
                if constexpr (QW == 4) *(uint4 *)q = *(const uint4 *)(rec + lane * 16);
                else *(uint2 *)q = *(const uint2 *)(rec + lane * 8);
                uint32_t af[2][4];
                mmf_rec_frags<T>(q, *(const __half2 *)(rec + SC + g * 4), *(const __half2 *)(rec + SC + (g + 8) * 4), af);
                mma_f16_16816(acc[i][0], af[0], b[0], b[1]);
                mma_f16_16816(acc[i][0], af[1], b[2], b[3]);
            }
        }
        __syncwarp(); /* every lane is done with the slot before it is refilled */
        if (s + ST < nst) issue(s + ST, true, true);
    }
    if constexpr (SW) {
        /* sw [n][rsplit] = f16(silu(gate) * up): cu_mmf_swiglu's arithmetic and rounding
         * on the same sums, the f32 gate and up unstored */
        mmf_cols_reduce<RT, 1, KS>(sum, acc);
        for (int o = threadIdx.x; o < RH * 4 * 32; o += 32 * KS) {
            const int l = o % 32, c = o / 32, i = c / 4, e = c % 4;
            const int r = (rt0 + i) * 16 + (l >> 2) + (e >> 1) * 8, tk = 2 * (l & 3) + (e & 1);
            if (r < rsplit && tk < n)
                sw[(int64_t)tk * rsplit + r] = __low2half(f2h2_sat(silu_mul(sum[c][l], sum[c + RH * 4][l]), 0.f));
        }
    } else {
        mmf_cols_finish<RT, 1, KS>(sum, acc, rt0, 0, out, out2, rsplit, ldo, R, n, bias, accum);
    }
}

template <int T, int RT, int KS, int ST, int CH, bool SW = false>
static void mmf_cols_tma_launch(cu_ctx *S, float *out, float *out2, int rsplit, int ldo, const uint8_t *P, int R, int K,
                                const __half *xh, int n, const float *bias, int accum, __half *sw = nullptr) {
    using C = mmf_tma_cfg<T, RT, KS, ST, CH>;
    static_assert(C::smem <= 227 * 1024 - 2048, "the ring fits a block's shared memory");
    static unsigned char attr_set[CU_MAX_DEVICES]; /* (per device: common.cuh) */
    if (!cu_smem_attr_once(S, kernel_mmf_cols_tma<T, RT, KS, ST, CH, SW>, C::smem, attr_set, "mmf: shared memory attribute"))
        return;
    const int tiles = SW ? rsplit / 16 : (R + 15) / 16, per = SW ? RT / 2 : RT;
    dim3 grid((tiles + per - 1) / per);
    cu_launch(S, SW ? "mmf_cols_tma_swiglu" : "mmf_cols_tma", kernel_mmf_cols_tma<T, RT, KS, ST, CH, SW>, grid,
              dim3(32 * KS), C::smem, out, out2, rsplit, ldo, P, R, K, xh, n, bias, accum, sw);
}

/* The TMA kernel's tiles (RT, KS, ST, CH) by the launch's rows and K, from the lab
 * (bench/cuda_mmf SHAPE 8, q4_K, weights cycled over 400 MB, us a launch, against the
 * register kernel's MMF_COLS_TILE in the same run):
 *   wide (16384+ rows): 7B gate+up 22016x4096 24.9 vs 49.4 (59 KB of ring a block, 3
 *     blocks a SM; mid 27.0, narrow 40.6: one block a SM);
 *   mid (8192+ rows): 7B q+k 8192x4096 (path mmf-qk) 10.5 vs 17.7 (wide 18.4: 128
 *     blocks on 132 SMs; narrow 15.3);
 *   deep K (K 8192+): 7B down 4096x11008 16.0 vs 20.2 (16 warps over K; narrow 17.2);
 *   narrow: 7B q/k/v/o 4096x4096 8.5 vs 9.9 (mid 9.2), 8B k/v 1024x4096 7.0 vs 9.0.
 * Every tile but deep K splits K over 8 warps, so path mmf-qk's one launch sums as the
 * two would. */
#define MMF_TMA_WIDE 4, 8, 2, 2
#define MMF_TMA_MID 2, 8, 2, 4
#define MMF_TMA_DEEPK 2, 16, 2, 4
#define MMF_TMA_NARROW 2, 8, 4, 4
#define MMF_TMA_WIDE_ROWS 16384
#define MMF_TMA_MID_ROWS 8192
#define MMF_TMA_DEEPK_K 8192
enum mmf_tma_tile { MMF_WIDE, MMF_MID, MMF_DEEPK, MMF_NARROW };
static mmf_tma_tile mmf_tma_pick(int R, int K) {
    return R >= MMF_TMA_WIDE_ROWS ? MMF_WIDE : R >= MMF_TMA_MID_ROWS ? MMF_MID : K >= MMF_TMA_DEEPK_K ? MMF_DEEPK : MMF_NARROW;
}

/* The column kernel's tile: one column group of 8 (the path takes 8 columns,
 * CU_MMF_COLS_MIN..MAX; the lab's wider groups, bench/cuda_mmf.cu, lost to the int8 MMQ
 * kernel from 16), two row tiles a block, 16 warps over K for every shape, 2 chunks
 * ahead: 7B bench -s 8 2007.6 tok/s; with 8 warps where K < 8192 (the lab's gate+up
 * 22016x4096: 32.7 us vs 49.3 at 16) 1869.0 in the step. */
#define MMF_COLS_TILE 1, 2, 16, 2

int cu_mmf_tma_smem_need(void) {
    const int t[] = {mmf_tma_cfg<QTYPE_Q6_K, MMF_TMA_WIDE>::smem, mmf_tma_cfg<QTYPE_Q6_K, MMF_TMA_MID>::smem,
                     mmf_tma_cfg<QTYPE_Q6_K, MMF_TMA_DEEPK>::smem, mmf_tma_cfg<QTYPE_Q6_K, MMF_TMA_NARROW>::smem};
    int m = 0;
    for (int v : t) m = v > m ? v : m;
    return m + 2048; /* (+ the static sums and barriers) */
}

/* The TMA column kernel on the tile mmf_tma_pick gives R rows and K (sw: the SwiGLU
 * form, R = 2 rsplit). */
template <bool SW>
static void mmf_tma_go(cu_ctx *S, uint32_t type, float *out, float *out2, int rsplit, int ldo, const uint8_t *P, int R,
                       int K, const __half *xh, int n, const float *bias, int accum, __half *sw) {
#define MMF_TMA_GO(T, TILE) mmf_cols_tma_launch<T, TILE, SW>(S, out, out2, rsplit, ldo, P, R, K, xh, n, bias, accum, sw)
#define MMF_TMA_TILES(T)                                                                                                \
    switch (mmf_tma_pick(R, K)) {                                                                                       \
    case MMF_WIDE: MMF_TMA_GO(T, MMF_TMA_WIDE); break;                                                                  \
    case MMF_MID: MMF_TMA_GO(T, MMF_TMA_MID); break;                                                                    \
    case MMF_DEEPK: if constexpr (!SW) MMF_TMA_GO(T, MMF_TMA_DEEPK); break; /* (no SwiGLU form: see below) */          \
    case MMF_NARROW: MMF_TMA_GO(T, MMF_TMA_NARROW); break;                                                              \
    }
    if (type == QTYPE_Q6_K) MMF_TMA_TILES(QTYPE_Q6_K)
    else MMF_TMA_TILES(QTYPE_Q4_K)
#undef MMF_TMA_TILES
#undef MMF_TMA_GO
}

int cu_mmf_cols_swiglu(cu_ctx *S, uint32_t type, __half *sw, const uint8_t *plane, int ff, int K, const __half *xh, int n) {
    if (!S->mmf_tma || n > 8 || !cu_mmf_supported(type, K) || ff % 16 || !plane || !xh || !sw) return 0;
    /* (the deep-K tile has no SwiGLU form: it never serves gate+up, whose 2 ff rows pick
     * wide or mid; mmf_tma_go picks what cu_mmf would, so the sums are its) */
    if (mmf_tma_pick(2 * ff, K) == MMF_DEEPK) return 0;
    mmf_tma_go<true>(S, type, NULL, NULL, ff, ff, plane, 2 * ff, K, xh, n, NULL, 0, sw);
    return 1;
}

void cu_mmf(cu_ctx *S, uint32_t type, float *out, int ldo, const uint8_t *plane, int R, int K, const __half *xh, int n,
            const float *bias, int accum, float *out2, int rsplit) {
    if (!out2) rsplit = INT_MAX;
    if (!cu_mmf_supported(type, K) || !plane || !xh) {
        cu_record(S, cudaErrorInvalidValue, "mmf: type not q4_K/q6_K, K not a multiple of 256, or no plane or activations",
                  __FILE__, __LINE__);
        return;
    }
    if (n < CU_MMF_MIN_N && n <= 8 && S->mmf_tma) {
        mmf_tma_go<false>(S, type, out, out2, rsplit, ldo, plane, R, K, xh, n, bias, accum, nullptr);
        return;
    }
    if (n < CU_MMF_MIN_N) {
        if (type == QTYPE_Q6_K) mmf_cols_launch<QTYPE_Q6_K, MMF_COLS_TILE>(S, out, out2, rsplit, ldo, plane, R, K, xh, n, bias, accum);
        else mmf_cols_launch<QTYPE_Q4_K, MMF_COLS_TILE>(S, out, out2, rsplit, ldo, plane, R, K, xh, n, bias, accum);
        return;
    }
    if (type == QTYPE_Q6_K) mmf_launch<QTYPE_Q6_K, MMF_TILE>(S, out, out2, rsplit, ldo, plane, R, K, xh, n, bias, accum);
    else mmf_launch<QTYPE_Q4_K, MMF_TILE>(S, out, out2, rsplit, ldo, plane, R, K, xh, n, bias, accum);
}

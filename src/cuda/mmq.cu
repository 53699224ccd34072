/* mmq.cu - prefill GEMMs on int8 tensor cores (DESIGN.md "CUDA prefill: the seed
 * design", items 1, 2 and 4): out[n][R] (+bias, or += with accum) = x[n][K] . W^T for
 * W of q4_K, q6_K or q8_0, with x quantized to int8 by a prepass.
 *
 * Prepass (cu_mmq_quantize): x in blocks of 32 -> int8 codes q = round(x / d),
 * d = amax / 127 (the decode GEMVs' q8 rounding), written token-major [n_pad][K]
 * (a tile's 32-value run is two 16-byte copies), and beside them, pre-transposed
 * (block-major, [K/32][n_pad], so a tile's scales are contiguous 16-byte copies):
 * d, s = d * sum(q) (q4_K's min term) and, per 16 codes, the integer sum (q6_K's
 * centring). Tokens n..n_pad are written as zeros.
 *
 * Kernel: a block takes BM = 32*WM weight rows x BN = 8*NT*WN tokens; each of its
 * WM*WN warps 32 rows (two m16 tiles) x 8*NT tokens (NT n8 tiles). K advances one
 * 256-value super-block per stage: the stage's weight bytes (raw q4_K blocks; the
 * q6_K / q8_0 planes of the device layout, common.cuh) and activation codes and
 * scales are copied to shared memory by cp.async (16-byte copies, zero-filled past R),
 * two stages in flight. After each stage lands, the block decodes its rows' scales
 * once into shared memory, or, for a matrix with a plane made at load (mmq_plane.cu:
 * q4_K's W_dsc, q6_K's W_exp + W_dsc; formats MMQ_Q4X, MMQ_Q6X below), the stage
 * brought them already decoded (and q6_K's codes expanded and centred), then every
 * 32-wide sub-block (q6_K: each 16-wide half) is one mma.sync s8 per (m16, n8) tile
 * whose integer result is scaled in f32 and accumulated:
 *   q4_K: acc += (c * d*sc) * xd - (dmin*m) * xs
 *   q6_K: acc += (c0 * d*sc0 + c1 * d*sc1) * xd   (codes 0..63; the -32 centring enters
 *         the mma's accumulator input as -32 * sum of the 16 x codes, an exact integer)
 *   q8_0: acc += (c * d) * xd
 * The int32 -> f32 conversion is free: the mma's accumulator input is 0x4B400000
 * (1.5 * 2^23) plus any integer offset, so the int32 result read as a float is exactly
 * 1.5 * 2^23 + c (|c| < 2^22: at most 32 * 127 * 127 here), one FADD from c. */
#include "common.cuh"
#include "dequant.cuh"
#include "ptx.cuh"

#define MMQ_MAGIC 0x4B400000
#define MMQ_MAGIC_F 12582912.0f
#define MMQ_XSTRIDE 272 /* bytes of one token's 256 codes in shared memory: 17 16-byte slots,
                           so the 8 rows of an ldmatrix fall in distinct bank groups */

/* Per format: the shared-memory bytes of one weight row per stage (a multiple of 16
 * with an odd number of 16-byte slots, for ldmatrix), its 16-byte copies, the scales
 * per row per stage, whether the format has q4_K's min term or q6_K's centring sums,
 * and, on a plane, the plane's bytes a row brings to each stage (prow). */
template <int T> struct mmq_fmt;
template <> struct mmq_fmt<QTYPE_Q4_K> {
    static constexpr int wstride = 144, nchunk = 9, nsc = 8, has_min = 1, has_isum = 0, plane = 0, prow = 0;
};
template <> struct mmq_fmt<QTYPE_Q6_K> {
    /* ql 128 | qh 64 | sc 16; d beside, in a word per row (the stage's wd array): a
     * 16-byte d chunk in the row (240 B) made two q6_K blocks need 233 KB, one SM's
     * shared memory is 228 */
    static constexpr int wstride = 208, nchunk = 13, nsc = 16, has_min = 0, has_isum = 1, plane = 0, prow = 0;
};
template <> struct mmq_fmt<QTYPE_Q8_0> {
    /* qs 256 (8 blocks) | their 8 d */
    static constexpr int wstride = 272, nchunk = 17, nsc = 8, has_min = 0, has_isum = 0, plane = 0, prow = 0;
};
/* The formats on a registration-time plane (cu_q4x_build, cu_q6x_build): each stage
 * carries the rows' scales as the decode step would write them (prow bytes a row), so
 * the kernel has no decode step and one barrier a stage.
 * q4_K: the raw nibbles (the row's 16-byte header slot left unstaged) + d*sc f32 [8],
 *       dmin f32, m u8 [8];
 * q6_K: the 256 centred codes of the plane (16 slots + one of padding) + d*sc f32 [16]:
 *       no bit assembly and no centring term either. */
#define MMQ_Q4X 0x1004
#define MMQ_Q6X 0x1006
template <> struct mmq_fmt<MMQ_Q4X> {
    static constexpr int wstride = 144, nchunk = 8, nsc = 8, has_min = 1, has_isum = 0, plane = 1, prow = 44;
};
template <> struct mmq_fmt<MMQ_Q6X> {
    static constexpr int wstride = 272, nchunk = 16, nsc = 16, has_min = 0, has_isum = 0, plane = 1, prow = 64;
};

/* Global address of 16-byte chunk c of super-block sb of a weight row (device layout). */
template <int T>
static __device__ __forceinline__ const uint8_t *mmq_wchunk(const uint8_t *row, int nb, int sb, int c) {
    if (T == QTYPE_Q4_K) return row + (size_t)sb * 144 + c * 16;
    if (T == QTYPE_Q6_K) {
        if (c < 8) return row + (size_t)sb * 128 + c * 16;
        if (c < 12) return row + (size_t)nb * 128 + (size_t)sb * 64 + (c - 8) * 16;
        return row + (size_t)nb * 192 + (size_t)sb * 16;
    }
    /* q8_0: nb counts 32-blocks here */
    if (c < 16) return row + (size_t)sb * 256 + c * 16;
    return row + (size_t)nb * 32 + (size_t)sb * 16;
}

template <int T, int WM, int WN, int NT, int ST>
struct mmq_cfg {
    static constexpr int BM = 32 * WM, BN = 8 * NT * WN, THREADS = 32 * WM * WN;
    static constexpr int w_bytes = BM * mmq_fmt<T>::wstride;
    static constexpr int x_bytes = BN * MMQ_XSTRIDE;
    static constexpr int xd_bytes = 8 * BN * 4;
    static constexpr int xs_bytes = mmq_fmt<T>::has_min ? 8 * BN * 4 : 0;
    static constexpr int xi_bytes = mmq_fmt<T>::has_isum ? 16 * BN * 4 : 0;
    static constexpr int wd_bytes = T == QTYPE_Q6_K ? BM * 4 : 0; /* q6_K: the d word of each row */
    static constexpr int dsp_bytes = mmq_fmt<T>::prow * BM; /* plane: the stage's scales */
    static constexpr int stage = w_bytes + x_bytes + xd_bytes + xs_bytes + xi_bytes + wd_bytes + dsp_bytes;
    static constexpr int dsc_bytes =
        mmq_fmt<T>::plane ? 0 : ((mmq_fmt<T>::has_min ? 2 : 1) * mmq_fmt<T>::nsc + mmq_fmt<T>::has_min) * BM * 4;
    static constexpr int smem = ST * stage + dsc_bytes;
};

/* KO: a knockout for the kernel lab (bench/cuda_mmq.cu) only, 0 in the backend: 1 adds
 * each integer result unscaled (no scale loads, one FADD), 2 skips the math (staging
 * and the scale decode alone). Their times against KO = 0 place the kernel's time.
 * 3 is q4_K's min term as one f32 FMA per sub-block instead of the tf32 product.
 * 5 skips the per-stage scale decode (the scales read are whatever shared memory
 * holds): its time against KO = 0 is what a precomputed scale plane could save.
 * LB: the resident blocks a SM must hold (__launch_bounds__: the register cap). */
template <int T, int WM, int WN, int NT, int ST, int KO = 0, int LB = 1>
static __global__ void __launch_bounds__(32 * WM * WN, LB)
kernel_mmq(float *out, float *out2, int rsplit, int ldo, const uint8_t *W, int64_t wstride, const uint8_t *P, int R, int K,
           cu_mmq_act a, int n, const float *bias, int accum, int sb_per, float *part, const int4 *tiles, int64_t wslice) {
    using F = mmq_fmt<T>;
    using C = mmq_cfg<T, WM, WN, NT, ST>;
    extern __shared__ __align__(16) uint8_t mmq_sh[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp % WM, wn = warp / WM;
    const int row0 = blockIdx.x * C::BM;
    int tok0 = blockIdx.y * C::BN, lo = 0;
    if (tiles) {
        /* an experts' launch (cu_mmq_moe): tile blockIdx.y is (expert, first row, rows) of the
         * grouping (moe.cu), written by the kernels ahead: the wait comes before the weights.
         * Its columns start at the first row rounded down to 4 (the scales' 16-byte copies),
         * the rows of another expert before it left unstored */
        pdl_trigger();
        pdl_wait();
        const int4 tl = tiles[blockIdx.y];
        if (tl.z == 0) return;
        W += (int64_t)tl.x * wslice;
        lo = tl.y;
        tok0 = tl.y & ~3;
        n = tl.y + tl.z;
    }
    const int nsb = K / 256;
    const int nb = T == QTYPE_Q8_0 ? K / 32 : nsb;
    const int npad = a.n_pad;
    constexpr bool Q6 = T == QTYPE_Q6_K || T == MMQ_Q6X, Q4 = T == QTYPE_Q4_K || T == MMQ_Q4X;
    const int Rp = (R + 3) & ~3; /* plane: the scale rows */
    /* split-K: this block's super-blocks sb0 .. sb0+nsl-1 (all of them where gridDim.z is 1) */
    const int sb0 = blockIdx.z * sb_per;
    const int nsl = min(nsb - sb0, sb_per);
    float *wsc = (float *)(mmq_sh + ST * C::stage);
    float *wmn = wsc + F::nsc * C::BM; /* q4_K: the mins m as floats (exact in tf32), then dmin per row */
    float *wdm = wmn + F::nsc * C::BM;

    auto stage_w = [&](int ls) {
        const int sb = sb0 + ls;
        uint8_t *ws = mmq_sh + (ls % ST) * C::stage;
        if constexpr (F::plane) {
            /* the rows' codes: q4_K's nibbles from W (slots 1..8 of the raw block), q6_K's from the plane */
            for (int i = tid; i < C::BM * F::nchunk; i += C::THREADS) {
                const int r = i / F::nchunk, c = i % F::nchunk;
                const int gr = row0 + r;
                const uint8_t *src = T == MMQ_Q6X ? P + ((int64_t)sb * R + gr) * 256 + c * 16
                                                  : W + (int64_t)gr * wstride + (int64_t)sb * 144 + (c + 1) * 16;
                cp_async16(ws + r * F::wstride + (T == MMQ_Q6X ? c : c + 1) * 16, gr < R ? src : W, gr < R ? 16 : 0);
            }
            /* the scales: runs of rows of f32 per scale (and q4_K's dmin run, then its m bytes, 8 a row) */
            const uint8_t *ps = T == MMQ_Q6X ? P + (int64_t)nsb * R * 256 : P;
            uint8_t *sd = ws + C::stage - C::dsp_bytes;
            constexpr int NRUN = T == MMQ_Q6X ? 16 : 9, PR = F::nsc; /* runs a stage; scale runs a super-block */
            for (int i = tid; i < NRUN * C::BM / 4; i += C::THREADS) {
                const int sc = i / (C::BM / 4), c = i % (C::BM / 4);
                const int gr = row0 + 4 * c;
                const int64_t run = sc < PR ? (int64_t)sb * PR + sc : (int64_t)nsb * 8 + sb;
                cp_async16(sd + (sc * C::BM + 4 * c) * 4, gr < Rp ? ps + (run * Rp + gr) * 4 : ps, gr < Rp ? 16 : 0);
            }
            if (T == MMQ_Q4X) {
                const uint8_t *pm = P + (int64_t)nsb * 9 * Rp * 4 + (int64_t)sb * Rp * 8;
                for (int i = tid; i < C::BM / 2; i += C::THREADS) {
                    const int gr = row0 + 2 * i;
                    cp_async16(sd + 9 * C::BM * 4 + 16 * i, gr < Rp ? pm + (int64_t)gr * 8 : P, gr < Rp ? 16 : 0);
                }
            }
        } else {
            for (int i = tid; i < C::BM * F::nchunk; i += C::THREADS) {
                const int r = i / F::nchunk, c = i % F::nchunk;
                const int gr = row0 + r;
                const uint8_t *src = gr < R ? mmq_wchunk<T>(W + (int64_t)gr * wstride, nb, sb, c) : W;
                cp_async16(ws + r * F::wstride + c * 16, src, gr < R ? 16 : 0);
            }
        }
        if (T == QTYPE_Q6_K) {
            /* the aligned word of the d plane that holds super-block sb's f16 d (a row's
             * padding covers the word's second half after an odd count of super-blocks) */
            uint8_t *wd = ws + C::stage - C::wd_bytes;
            for (int r = tid; r < C::BM; r += C::THREADS) {
                const int gr = row0 + r;
                const uint8_t *src = gr < R ? W + (int64_t)gr * wstride + (int64_t)nb * 208 + 2 * (sb & ~1) : W;
                cp_async4(wd + 4 * r, src, gr < R ? 4 : 0);
            }
        }
    };
    auto stage_x = [&](int ls) {
        const int sb = sb0 + ls;
        uint8_t *st = mmq_sh + (ls % ST) * C::stage + C::w_bytes;
        for (int i = tid; i < C::BN * 16; i += C::THREADS) {
            const int r = i >> 4, c = i & 15;
            cp_async16(st + r * MMQ_XSTRIDE + c * 16, a.q + (int64_t)(tok0 + r) * K + sb * 256 + c * 16, 16);
        }
        st += C::x_bytes;
        /* d (and s) of blocks 8sb..8sb+7: 8 runs of BN floats */
        for (int i = tid; i < 8 * C::BN / 4; i += C::THREADS) {
            const int b = i / (C::BN / 4), c = i % (C::BN / 4);
            const int64_t off = (int64_t)(sb * 8 + b) * npad + tok0 + c * 4;
            cp_async16(st + (b * C::BN + c * 4) * 4, a.d + off, 16);
            if (F::has_min) cp_async16(st + C::xd_bytes + (b * C::BN + c * 4) * 4, a.s + off, 16);
        }
        if (F::has_isum) {
            uint8_t *si = st + C::xd_bytes;
            for (int i = tid; i < 16 * C::BN / 4; i += C::THREADS) {
                const int b = i / (C::BN / 4), c = i % (C::BN / 4);
                cp_async16(si + (b * C::BN + c * 4) * 4, a.is + (int64_t)(sb * 16 + b) * npad + tok0 + c * 4, 16);
            }
        }
    };

    /* Stages 0..ST-2 in flight before the loop, one commit group each (the first holds
     * the weights of every one of them too: weights are immutable, so they are staged
     * before the wait for the kernel ahead). */
    pdl_trigger();
    for (int s = 0; s < ST - 1; s++)
        if (s < nsl) stage_w(s);
    pdl_wait();
    for (int s = 0; s < ST - 1; s++) {
        if (s < nsl) stage_x(s);
        cp_async_commit();
    }

    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;

    for (int ls = 0; ls < nsl; ls++) {
        const int sb = sb0 + ls;
        cp_async_wait<ST - 2>(); /* every group but the newest ST-2 landed: stage sb's */
        __syncthreads(); /* stage sb visible; every warp is done with stage sb-1 and the scales */
        const uint8_t *ws = mmq_sh + (ls % ST) * C::stage;
        const uint8_t *xq = ws + C::w_bytes;
        const float *xd = (const float *)(xq + C::x_bytes);
        const float *xs = xd + 8 * C::BN;
        const int *xi = (const int *)(xd + 8 * C::BN);
        /* the rows' scales of this stage, once */
        for (int i = tid; !F::plane && KO != 5 && i < C::BM * F::nsc; i += C::THREADS) {
            const int r = i % C::BM, s = i / C::BM;
            const uint8_t *blk = ws + r * F::wstride;
            if (T == QTYPE_Q4_K) {
                const float d = __half2float(*(const __half *)blk), dmin = __half2float(*(const __half *)(blk + 2));
                float sc, m;
                k4_scale_min(blk + 4, s, &sc, &m);
                wsc[s * C::BM + r] = __fmul_rn(d, sc);
                wmn[s * C::BM + r] = m;
                if (s == 0) wdm[r] = dmin;
            } else if (T == QTYPE_Q6_K) {
                const float d = __half2float(*(const __half *)(ws + C::stage - C::wd_bytes + 4 * r + 2 * (sb & 1)));
                wsc[s * C::BM + r] = __fmul_rn(d, (float)(int8_t)blk[192 + s]);
            } else {
                wsc[s * C::BM + r] = __half2float(*(const __half *)(blk + 256 + 2 * s));
            }
        }
        /* stage sb+ST-1 into the buffer of stage sb-1, which every warp left before the
         * barrier above; a commit group every iteration (empty past the end) keeps the
         * wait count above exact */
        if (ls + ST - 1 < nsl) {
            stage_w(ls + ST - 1);
            stage_x(ls + ST - 1);
        }
        cp_async_commit();
        if (!F::plane) __syncthreads(); /* the scales visible (a plane's came with the stage) */
        const float *scl = F::plane ? (const float *)(ws + C::stage - C::dsp_bytes) : wsc;

        if (KO == 2) continue;
        const int rw = wm * 32;        /* this warp's first row in the block */
        const int tw = wn * NT * 8;    /* and first token */
        /* The weight bytes of a group of sub-blocks, loaded once for both m16 tiles (q4_K:
         * one 32-byte qs run holds sub-blocks 2u and 2u+1; q6_K: a 128-value half's two ql
         * runs and its qh run hold 4 sub-blocks; q8_0: one sub-block). */
        constexpr int KPG = Q4 ? 2 : T == QTYPE_Q6_K ? 4 : 1;
        constexpr int RAWN = T == QTYPE_Q6_K ? 12 : 4;
#pragma unroll
        for (int grp = 0; grp < 8 / KPG; grp++) {
            uint32_t raw[2][RAWN];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const uint8_t *wrow = ws + (rw + i * 16 + (lane & 15)) * F::wstride + (lane >> 4) * 16;
                if constexpr (Q4) {
                    ldsm_x4(raw[i], wrow + 16 + grp * 32);
                } else if constexpr (T == QTYPE_Q6_K) {
                    ldsm_x4(raw[i], wrow + grp * 64);
                    ldsm_x4(raw[i] + 4, wrow + grp * 64 + 32);
                    ldsm_x4(raw[i] + 8, wrow + 128 + grp * 32);
                } else {
                    ldsm_x4(raw[i], wrow + grp * 32);
                }
            }
#pragma unroll
            for (int u = 0; u < KPG; u++) {
                const int kb = grp * KPG + u;
                /* activation fragments: n8 tiles 2p, 2p+1 from one ldmatrix */
                uint32_t bf[NT][2];
#pragma unroll
                for (int p = 0; p < NT / 2; p++) {
                    uint32_t r4[4];
                    ldsm_x4(r4, xq + (tw + p * 16 + (lane & 7) + ((lane >> 4) << 3)) * MMQ_XSTRIDE + kb * 32 +
                                    ((lane >> 3) & 1) * 16);
                    bf[2 * p][0] = r4[0];
                    bf[2 * p][1] = r4[1];
                    bf[2 * p + 1][0] = r4[2];
                    bf[2 * p + 1][1] = r4[3];
                }
                /* the per-token scales of this sub-block, once for both m16 tiles */
                float2 dxj[NT];
                int2 i0j[NT], i1j[NT];
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    const int c = tw + j * 8 + 2 * t;
                    dxj[j] = *(const float2 *)(xd + kb * C::BN + c);
                    if (T == QTYPE_Q6_K) {
                        i0j[j] = *(const int2 *)(xi + (2 * kb) * C::BN + c);
                        i1j[j] = *(const int2 *)(xi + (2 * kb + 1) * C::BN + c);
                    }
                }
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const int rr = rw + i * 16 + g; /* rows rr, rr + 8 */
                    uint32_t af[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        if (Q4) {
                            af[e] = (raw[i][e] >> (4 * u)) & 0x0F0F0F0Fu;
                        } else if (T == QTYPE_Q6_K) {
                            /* sub-block u of the half: ql run u & 1, nibble u >> 1; qh bits 2u */
                            af[e] = ((raw[i][4 * (u & 1) + e] >> ((u >> 1) * 4)) & 0x0F0F0F0Fu) |
                                    (((raw[i][8 + e] >> (2 * u)) & 0x03030303u) << 4);
                        } else {
                            af[e] = raw[i][e];
                        }
                    }
                    if (KO == 1) {
#pragma unroll
                        for (int j = 0; j < NT; j++) {
                            int d0[4], d1[4];
                            if (Q6) {
                                mma_s8_16816c(d0, af[0], af[1], bf[j][0], MMQ_MAGIC, MMQ_MAGIC);
                                mma_s8_16816c(d1, af[2], af[3], bf[j][1], MMQ_MAGIC, MMQ_MAGIC);
                            } else {
                                mma_s8_16832c(d0, af, bf[j][0], bf[j][1], MMQ_MAGIC, MMQ_MAGIC);
                            }
#pragma unroll
                            for (int e = 0; e < 4; e++)
                                acc[i][j][e] += __int_as_float(d0[e]) + (Q6 ? __int_as_float(d1[e]) : 0.0f);
                        }
                    } else if (Q6) {
                        const float s00 = scl[(2 * kb) * C::BM + rr], s01 = scl[(2 * kb) * C::BM + rr + 8];
                        const float s10 = scl[(2 * kb + 1) * C::BM + rr], s11 = scl[(2 * kb + 1) * C::BM + rr + 8];
#pragma unroll
                        for (int j = 0; j < NT; j++) {
                            const int2 i0 = i0j[j], i1 = i1j[j];
                            const float2 dx = dxj[j];
                            int d0[4], d1[4];
                            /* half 0: k 0..15 = a0, a1 and b0; half 1: a2, a3 and b1 (codes 0..63:
                             * the centring in the accumulator input; the plane's are centred) */
                            const int c00 = T == QTYPE_Q6_K ? MMQ_MAGIC - 32 * i0.x : MMQ_MAGIC;
                            const int c01 = T == QTYPE_Q6_K ? MMQ_MAGIC - 32 * i0.y : MMQ_MAGIC;
                            const int c10 = T == QTYPE_Q6_K ? MMQ_MAGIC - 32 * i1.x : MMQ_MAGIC;
                            const int c11 = T == QTYPE_Q6_K ? MMQ_MAGIC - 32 * i1.y : MMQ_MAGIC;
                            mma_s8_16816c(d0, af[0], af[1], bf[j][0], c00, c01);
                            mma_s8_16816c(d1, af[2], af[3], bf[j][1], c10, c11);
#pragma unroll
                            for (int e = 0; e < 4; e++) {
                                const float f0 = __int_as_float(d0[e]) - MMQ_MAGIC_F;
                                const float f1 = __int_as_float(d1[e]) - MMQ_MAGIC_F;
                                const float v = fmaf(f1, e < 2 ? s10 : s11, f0 * (e < 2 ? s00 : s01));
                                acc[i][j][e] = fmaf(v, (e & 1) ? dx.y : dx.x, acc[i][j][e]);
                            }
                        }
                    } else {
                        const float s0 = scl[kb * C::BM + rr], s1 = scl[kb * C::BM + rr + 8];
                        float m0 = 0.0f, m1 = 0.0f;
                        if (F::has_min && KO == 3) {
                            m0 = wdm[rr] * wmn[kb * C::BM + rr];
                            m1 = wdm[rr + 8] * wmn[kb * C::BM + rr + 8];
                        }
#pragma unroll
                        for (int j = 0; j < NT; j++) {
                            const float2 dx = dxj[j];
                            int dd[4];
                            mma_s8_16832c(dd, af, bf[j][0], bf[j][1], MMQ_MAGIC, MMQ_MAGIC);
                            float2 sx = make_float2(0.0f, 0.0f);
                            if (F::has_min && KO == 3) sx = *(const float2 *)(xs + kb * C::BN + tw + j * 8 + 2 * t);
#pragma unroll
                            for (int e = 0; e < 4; e++) {
                                const float f = __int_as_float(dd[e]) - MMQ_MAGIC_F;
                                float v = fmaf(f * (e < 2 ? s0 : s1), (e & 1) ? dx.y : dx.x, acc[i][j][e]);
                                if (F::has_min && KO == 3) v = fmaf(-(e < 2 ? m0 : m1), (e & 1) ? sx.y : sx.x, v);
                                acc[i][j][e] = v;
                            }
                        }
                    }
                }
            }
        }
        if (F::has_min && (KO == 0 || KO == 5)) {
            /* q4_K's min term of the stage, sum over its 8 sub-blocks of m * (d_x * sum q),
             * as one k8 product on tf32 tensor cores: A = m (integers < 64, exact in tf32),
             * B = s split into a tf32 high part and the remainder (two products: the sum
             * carries about 22 bits of s, as the f32 FMAs it replaces), then
             * acc -= dmin * that (the mirror of test_cuda_ops agrees to 1e-5). */
            const int rw = wm * 32, tw = wn * NT * 8;
            uint32_t bh[NT][2], bl[NT][2];
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float v = xs[(t + 4 * h) * C::BN + tw + j * 8 + g];
                    bh[j][h] = f32_to_tf32(v);
                    bl[j][h] = __float_as_uint(v - __uint_as_float(bh[j][h]));
                }
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int rr = rw + i * 16 + g;
                uint32_t am[4];
                float dm0, dm1;
                if constexpr (F::plane) {
                    /* the stage's m bytes, 8 a row after the 9 runs of floats */
                    const uint8_t *sm = (const uint8_t *)(scl + 9 * C::BM);
                    am[0] = __float_as_uint((float)sm[rr * 8 + t]);
                    am[1] = __float_as_uint((float)sm[(rr + 8) * 8 + t]);
                    am[2] = __float_as_uint((float)sm[rr * 8 + t + 4]);
                    am[3] = __float_as_uint((float)sm[(rr + 8) * 8 + t + 4]);
                    dm0 = scl[8 * C::BM + rr];
                    dm1 = scl[8 * C::BM + rr + 8];
                } else {
                    am[0] = __float_as_uint(wmn[t * C::BM + rr]);
                    am[1] = __float_as_uint(wmn[t * C::BM + rr + 8]);
                    am[2] = __float_as_uint(wmn[(t + 4) * C::BM + rr]);
                    am[3] = __float_as_uint(wmn[(t + 4) * C::BM + rr + 8]);
                    dm0 = wdm[rr];
                    dm1 = wdm[rr + 8];
                }
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    float mr[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mma_tf32_1688(mr, am, bl[j][0], bl[j][1]);
                    mma_tf32_1688(mr, am, bh[j][0], bh[j][1]);
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[i][j][e] = fmaf(-(e < 2 ? dm0 : dm1), mr[e], acc[i][j][e]);
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = row0 + wm * 32 + i * 16 + g + (e >> 1) * 8;
                const int tk = tok0 + wn * NT * 8 + j * 8 + 2 * t + (e & 1);
                if (r < R && tk < n && tk >= lo) {
                    if (part) {
                        part[((int64_t)blockIdx.z * n + tk) * R + r] = acc[i][j][e];
                    } else {
                        gemm_store(out, out2, rsplit, ldo, r, tk, acc[i][j][e], bias, accum);
                    }
                }
            }
}

/* ---- prepass: a block per 32 tokens x 128 values, 4 values a lane ----
 * u != NULL: the values are SwiGLU(x, u) = silu(x) * u (the FFN's gate and up, the
 * arithmetic of cu_swiglu), quantized without the f32 product ever being stored.
 * Each warp takes 4 of the 32 tokens, one float4 a lane (8 lanes a 32-block); the
 * block-major scales go through shared memory so that each of their rows is written as
 * 32 consecutive tokens. The first version (a warp per (token, 32-block), the scales
 * written 4 bytes at a time n_pad apart) measured 50 us for the 7B's 512 x 11008 SwiGLU
 * (1.1 TB/s) and 20 us for the o-projection's 512 x 4096 (MINFER_CUDA_PROFILE). The
 * values are the same: amax, the rounding and the integer sums do not depend on the
 * order. Needs K % 128 == 0 and n_pad % 32 == 0 (cu_mmq_supported, CU_MMQ_NPAD). */
#define MMQ_QTOK 32
static __global__ void __launch_bounds__(256) kernel_mmq_quantize(const float *x, const float *u, const int32_t *src,
                                                                  int n, int K, cu_mmq_act a) {
    __shared__ float sd[4][MMQ_QTOK], ss[4][MMQ_QTOK];
    __shared__ int si[8][MMQ_QTOK];
    pdl_trigger();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t k0 = (int64_t)blockIdx.x * 128;
    const int tok0 = blockIdx.y * MMQ_QTOK;
    const int sub = lane >> 3; /* the lane's 32-block of the 4 */
#pragma unroll
    for (int i = 0; i < MMQ_QTOK / 8; i++) {
        const int tt = warp + 8 * i, tok = tok0 + tt;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (tok < n) {
            const int64_t off = (int64_t)(src ? src[tok] : tok) * K + k0 + 4 * lane;
            v = *(const float4 *)(x + off);
            if (u) {
                const float4 w = *(const float4 *)(u + off);
                v = make_float4(silu_mul(v.x, w.x), silu_mul(v.y, w.y), silu_mul(v.z, w.z), silu_mul(v.w, w.w));
            }
        }
        float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float d = amax / 127.0f;
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        const int q0 = __float2int_rn(v.x * id), q1 = __float2int_rn(v.y * id);
        const int q2 = __float2int_rn(v.z * id), q3 = __float2int_rn(v.w * id);
        int s16 = q0 + q1 + q2 + q3;
        s16 += __shfl_xor_sync(0xffffffffu, s16, 1);
        s16 += __shfl_xor_sync(0xffffffffu, s16, 2);
        const int s32 = s16 + __shfl_xor_sync(0xffffffffu, s16, 4);
        const uint32_t packed = (uint32_t)(q0 & 0xff) | (uint32_t)(q1 & 0xff) << 8 | (uint32_t)(q2 & 0xff) << 16 |
                                (uint32_t)(q3 & 0xff) << 24;
        *(uint32_t *)(a.q + (int64_t)tok * K + k0 + 4 * lane) = packed;
        if ((lane & 7) == 0) sd[sub][tt] = d, ss[sub][tt] = d * (float)s32;
        if ((lane & 3) == 0) si[2 * sub + ((lane >> 2) & 1)][tt] = s16;
    }
    __syncthreads();
    const int blk0 = (int)(k0 / 32);
    const int r = threadIdx.x >> 5, t = threadIdx.x & 31; /* 8 rows of 32 tokens */
    if (r < 4) {
        a.d[(int64_t)(blk0 + r) * a.n_pad + tok0 + t] = sd[r][t];
        a.s[(int64_t)(blk0 + r) * a.n_pad + tok0 + t] = ss[r][t];
    }
    a.is[(int64_t)(2 * blk0 + r) * a.n_pad + tok0 + t] = si[r][t];
}

/* split-K: out = the KS partial sums in split order (+ bias, or += with accum); the
 * order is fixed, so the result is the same every run. */
static __global__ void kernel_mmq_reduce(float *out, float *out2, int rsplit, int ldo, const float *part, int ks, int R,
                                         int n, const float *bias, int accum) {
    pdl_trigger();
    pdl_wait();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * R) return;
    const int r = (int)(i % R), tk = (int)(i / R);
    float v = 0.0f;
    for (int z = 0; z < ks; z++) v += part[(int64_t)z * n * R + i];
    gemm_store(out, out2, rsplit, ldo, r, tk, v, bias, accum);
}

int cu_mmq_supported(uint32_t type, int64_t K) { return cu_cap_mmq(type, K); }

int cu_mmq_npad(int n) { return (n + CU_MMQ_NPAD - 1) / CU_MMQ_NPAD * CU_MMQ_NPAD; }

static void mmq_quantize_launch(cu_ctx *S, const char *what, const float *x, const float *u, const int32_t *src, int n,
                                int K, int n_min, cu_mmq_act *a) {
    a->n_pad = cu_mmq_npad(n_min > n ? n_min : n);
    dim3 grid(K / 128, a->n_pad / MMQ_QTOK);
    cu_launch(S, what, kernel_mmq_quantize, grid, dim3(256), 0, x, u, src, n, K, *a);
}

void cu_mmq_quantize(cu_ctx *S, const float *x, int n, int K, cu_mmq_act *a) {
    mmq_quantize_launch(S, "mmq_quantize", x, NULL, NULL, n, K, 0, a);
}

void cu_mmq_quantize_swiglu(cu_ctx *S, const float *g, const float *u, int n, int K, cu_mmq_act *a) {
    mmq_quantize_launch(S, "mmq_quantize_swiglu", g, u, NULL, n, K, 0, a);
}

/* The experts' activations (moe.cu): row p = x's row src[p] (src NULL: p), or the SwiGLU of
 * g and u's row p, with at least one tile of zero rows after the n rows: a tile of the
 * experts' launch reads its 64 rows from any row of expert order. */
void cu_mmq_quantize_rows(cu_ctx *S, const float *x, const float *u, const int32_t *src, int n, int K, cu_mmq_act *a) {
    mmq_quantize_launch(S, u ? "mmq_quantize_swiglu" : "mmq_quantize_rows", x, u, src, n, K, n + CU_MOE_TILE, a);
}

template <int T, int WM, int WN, int NT, int ST, int KO = 0, int LB = 1>
static void mmq_launch(cu_ctx *S, float *out, int ldo, const uint8_t *W, int64_t stride, const uint8_t *P, int R, int K,
                       const cu_mmq_act *a, int n, const float *bias, int accum, int ks_max = 1, float *out2 = nullptr,
                       int rsplit = INT_MAX) {
    using C = mmq_cfg<T, WM, WN, NT, ST>;
    static unsigned char attr_set[CU_MAX_DEVICES]; /* (per device: common.cuh) */
    if (!cu_smem_attr_once(S, kernel_mmq<T, WM, WN, NT, ST, KO, LB>, C::smem, attr_set, "mmq: shared memory attribute"))
        return;
    /* split-K where the tiles alone fill at most half a wave of resident blocks: split
     * to about one wave, each split at least 2 super-blocks, the partial sums within the
     * scratch (cu_mmq_act.part). bench/cuda_mmq.cu measured 4096x4096 q4_K: n = 16
     * 42.6 -> 15.7 us, n = 256 90.6 -> 60.1 us; at n = 512 (256 tiles of 128x64 against
     * a wave of 132 or 264) a 2- or 3-way split cost 97-99 -> 104-112 us. */
    static int per_sm = 0;
    if (!per_sm && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_mmq<T, WM, WN, NT, ST, KO, LB>,
                                                                 C::THREADS, C::smem) != cudaSuccess)
        per_sm = 1;
    /* (a pair of matrices split as each alone would be: the same sums, the same bits) */
    const int Rs = R < rsplit ? R : rsplit;
    const int nsb = K / 256, tiles = ((Rs + C::BM - 1) / C::BM) * ((n + C::BN - 1) / C::BN);
    const int wave = per_sm * S->num_sms;
    int ks = 1;
    if (a->part && ks_max > 1 && 2 * tiles <= wave) {
        ks = (wave + tiles - 1) / tiles;
        if (ks > ks_max) ks = ks_max;
        if (ks > nsb / 2) ks = nsb / 2;
        while (ks > 1 && (int64_t)ks * n * R > a->part_cap) ks--;
        if (ks < 1) ks = 1;
    }
    const int sb_per = (nsb + ks - 1) / ks;
    ks = (nsb + sb_per - 1) / sb_per;
    dim3 grid((R + C::BM - 1) / C::BM, (n + C::BN - 1) / C::BN, ks);
    cu_launch(S, "mmq", kernel_mmq<T, WM, WN, NT, ST, KO, LB>, grid, dim3(C::THREADS), C::smem, out, out2, rsplit, ldo, W, stride, P,
              R, K, *a, n, bias, accum, sb_per, ks > 1 ? a->part : (float *)NULL, (const int4 *)NULL, (int64_t)0);
    if (ks > 1) {
        const int64_t tot = (int64_t)n * R;
        cu_launch(S, "mmq_reduce", kernel_mmq_reduce, dim3((unsigned)((tot + 255) / 256)), dim3(256), 0, out, out2,
                  rsplit, ldo, (const float *)a->part, ks, R, n, bias, accum);
    }
}

/* The tiles mmq_pick launches, one list that cu_mmq_smem_need reads too: WM x WN warps
 * of 32 rows x 8*NT tokens, ST stages, LB blocks a SM (bench/cuda_mmq.cu measured each).
 *   small: 64x32 up to 32 columns;
 *   wide:  128x64, two blocks a SM (the register cap of 128);
 *   q6_K from 384 columns: 128x128 of 16 warps, one a SM (n = 512: 4096x4096 169 -> 150
 *          us, 4096x11008 447 -> 395; at n = 64 they lost, 28 -> 42 us). */
template <int WM_, int WN_, int NT_, int ST_, int LB_>
struct mmq_tile {
    static constexpr int WM = WM_, WN = WN_, NT = NT_, ST = ST_, LB = LB_;
};
using mmq_tile_small = mmq_tile<2, 1, 4, 2, 1>;
using mmq_tile_wide = mmq_tile<4, 2, 4, 2, 2>;
using mmq_tile_q6_long = mmq_tile<4, 4, 4, 2, 1>;

template <int T, class L>
static void mmq_tile_launch(cu_ctx *S, float *out, int ldo, const uint8_t *W, int64_t stride, const uint8_t *P, int R, int K,
                            const cu_mmq_act *a, int n, const float *bias, int accum, float *out2, int rsplit) {
    mmq_launch<T, L::WM, L::WN, L::NT, L::ST, 0, L::LB>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, 8, out2, rsplit);
}
template <int T, class L>
static constexpr int mmq_tile_smem() { return mmq_cfg<T, L::WM, L::WN, L::NT, L::ST>::smem; }

template <int T>
static void mmq_pick(cu_ctx *S, float *out, int ldo, const uint8_t *W, int64_t stride, const uint8_t *P, int R, int K,
                     const cu_mmq_act *a, int n, const float *bias, int accum, float *out2, int rsplit) {
    if (n <= 32)
        mmq_tile_launch<T, mmq_tile_small>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
    else if (T == QTYPE_Q6_K && n >= 384)
        mmq_tile_launch<T, mmq_tile_q6_long>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
    else
        mmq_tile_launch<T, mmq_tile_wide>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
}

/* The q6_K plane's kernels: with the scales in each stage a 128x64 block takes 125 KB,
 * so one a SM (8 warps) up to 383 columns, then the 128x128 16-warp tile
 * (bench/cuda_mmq.cu, 4096x11008: n = 64 68.9 us on 128x64 vs 109.9 on 128x128;
 * n = 3314 2108.0 vs 1890.0) */
using mmq_tile_q6x_mid = mmq_tile<4, 2, 4, 2, 1>;
template <>
void mmq_pick<MMQ_Q6X>(cu_ctx *S, float *out, int ldo, const uint8_t *W, int64_t stride, const uint8_t *P, int R, int K,
                       const cu_mmq_act *a, int n, const float *bias, int accum, float *out2, int rsplit) {
    if (n <= 32)
        mmq_tile_launch<MMQ_Q6X, mmq_tile_small>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
    else if (n < 384)
        mmq_tile_launch<MMQ_Q6X, mmq_tile_q6x_mid>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
    else
        mmq_tile_launch<MMQ_Q6X, mmq_tile_q6_long>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
}

/* the largest dynamic shared memory of the tiles mmq_pick launches (the q6_K plane's
 * 128x128 tile: 163 KB) */
int cu_mmq_smem_need(void) {
    const int need[] = {mmq_tile_smem<QTYPE_Q4_K, mmq_tile_small>(),   mmq_tile_smem<QTYPE_Q4_K, mmq_tile_wide>(),
                        mmq_tile_smem<QTYPE_Q6_K, mmq_tile_small>(),   mmq_tile_smem<QTYPE_Q6_K, mmq_tile_wide>(),
                        mmq_tile_smem<QTYPE_Q6_K, mmq_tile_q6_long>(), mmq_tile_smem<QTYPE_Q8_0, mmq_tile_small>(),
                        mmq_tile_smem<QTYPE_Q8_0, mmq_tile_wide>(),    mmq_tile_smem<MMQ_Q6X, mmq_tile_small>(),
                        mmq_tile_smem<MMQ_Q6X, mmq_tile_q6x_mid>(),    mmq_tile_smem<MMQ_Q6X, mmq_tile_q6_long>(),
                        mmq_tile_smem<MMQ_Q4X, mmq_tile_small>(),      mmq_tile_smem<MMQ_Q4X, mmq_tile_wide>()};
    int m = 0;
    for (int v : need) m = v > m ? v : m;
    return m;
}

void cu_mmq(cu_ctx *S, float *out, int ldo, const uint8_t *W, int64_t stride, uint32_t type, int R, int K,
            const cu_mmq_act *a, int n, const float *bias, int accum, const uint8_t *plane, float *out2, int rsplit) {
    if (!out2) rsplit = INT_MAX;
    if (!cu_mmq_supported(type, K) || a->n_pad < n || a->n_pad % CU_MMQ_NPAD) {
        cu_record(S, cudaErrorInvalidValue, "mmq: unsupported type or K, or activations not quantized for n", __FILE__,
                  __LINE__);
        return;
    }
    const uint8_t *P = plane;
    switch (type) {
    case QTYPE_Q4_K:
        if (P) mmq_pick<MMQ_Q4X>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
        else mmq_pick<QTYPE_Q4_K>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
        break;
    case QTYPE_Q6_K:
        if (P) mmq_pick<MMQ_Q6X>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
        else mmq_pick<QTYPE_Q6_K>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit);
        break;
    default: mmq_pick<QTYPE_Q8_0>(S, out, ldo, W, stride, P, R, K, a, n, bias, accum, out2, rsplit); break;
    }
}

/* The experts' GEMM (moe.cu): out [rows in expert order][R] = each tile's rows of a times
 * its expert's matrix (W + expert * wslice) transposed, on the wide tile, whose 64 columns
 * cover a tile of the grouping (CU_MOE_TILE_ROWS from a start rounded down to 4); tiles past
 * the list's end are empty and leave at once.
 * The raw weights: experts get no planes. */
template <int T>
static void mmq_moe_launch(cu_ctx *S, float *out, const uint8_t *W, int64_t wslice, int64_t stride, int R, int K,
                           const cu_mmq_act *a, const int4 *tiles, int ntiles) {
    using L = mmq_tile_wide;
    using C = mmq_cfg<T, L::WM, L::WN, L::NT, L::ST>;
    static_assert(C::BN == CU_MOE_TILE && CU_MOE_TILE_ROWS + 3 <= C::BN, "a tile's rows from its aligned start");
    static unsigned char attr_set[CU_MAX_DEVICES];
    if (!cu_smem_attr_once(S, kernel_mmq<T, L::WM, L::WN, L::NT, L::ST, 0, L::LB>, C::smem, attr_set,
                           "mmq: shared memory attribute"))
        return;
    const dim3 grid((unsigned)((R + C::BM - 1) / C::BM), (unsigned)ntiles, 1);
    cu_launch(S, "mmq_moe", kernel_mmq<T, L::WM, L::WN, L::NT, L::ST, 0, L::LB>, grid, dim3(C::THREADS), C::smem, out,
              (float *)NULL, INT_MAX, R, W, stride, (const uint8_t *)NULL, R, K, *a, 0, (const float *)NULL, 0, K / 256,
              (float *)NULL, tiles, wslice);
}

void cu_mmq_moe(cu_ctx *S, float *out, const uint8_t *W, int64_t wslice, int64_t stride, uint32_t type, int R, int K,
                const cu_mmq_act *a, const int4 *tiles, int ntiles) {
    if (!cu_mmq_supported(type, K) || a->n_pad % CU_MMQ_NPAD) {
        cu_record(S, cudaErrorInvalidValue, "mmq_moe: unsupported type or K", __FILE__, __LINE__);
        return;
    }
    if (ntiles <= 0) return;
    switch (type) {
    case QTYPE_Q4_K: mmq_moe_launch<QTYPE_Q4_K>(S, out, W, wslice, stride, R, K, a, tiles, ntiles); break;
    case QTYPE_Q6_K: mmq_moe_launch<QTYPE_Q6_K>(S, out, W, wslice, stride, R, K, a, tiles, ntiles); break;
    default: mmq_moe_launch<QTYPE_Q8_0>(S, out, W, wslice, stride, R, K, a, tiles, ntiles); break;
    }
}

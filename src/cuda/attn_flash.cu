/* attn_flash.cu - prefill attention on tensor cores: kernel_attn_flash<HD, NH, DB, WIN, Q8>
 * over the f16 cache (attn.cu's layout: per layer [n_seq][n_kv][n_ctx][hd]; Q8: the q8_0
 * cache, kv_q8.cuh, each tile's rows dequantized to f16 as they are staged), 64 queries x
 * 64 keys a step (mma.sync m16n8k16 f16 -> f32), the causal mask (and a sliding window's)
 * from the per-token positions, GQA by kv head = head / (n_head / n_kv). The forms and
 * the measurements behind the choice among them are at cu_attn_flash (the end). */
#include "common.cuh"
#include "kv_q8.cuh"
#include "ptx.cuh"

/* ------------------------------------------------------------------------- */
/* Flash attention (prefill), tensor cores                                   */
/* ------------------------------------------------------------------------- */
#define FA_BQ 64
#define FA_BK 64
/* resident blocks a SM of the one-head kernel: 171 registers a thread left 2 blocks (8
 * warps) on a SM; the cap of 3 holds it to 168 registers, spilling 36 bytes at head dim
 * 128 (ptxas, sm_90a); 4 spills 232 bytes */
#define FA_MINB 3

static __device__ __forceinline__ uint32_t pack_h2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&h;
}

/* Values e .. e + 7 of a q8_0 cache row as 8 f16 (d * q in f32, then rounded to f16: the
 * tile the f16 forms stage, from the q8_0 row's values) */
static __device__ __forceinline__ uint4 kvq8_load8_h(const uint8_t *row, int e) {
    float f[8];
    kvq8_load8(row, e, f);
    return make_uint4(pack_h2(f[0], f[1]), pack_h2(f[2], f[3]), pack_h2(f[4], f[5]), pack_h2(f[6], f[7]));
}

/* Four 8x8 b16 matrices transposed: lane l gives the row address of matrix l / 8, row l % 8. */
static __device__ __forceinline__ void ldsm_x4_trans(uint32_t *r, const __half *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

/* kernel_attn_flash<HD, NH, DB, WIN>: a block is one tile of <= 64 queries of one
 * sequence for NH query heads of one kv group, 4 warps a head (warp w: head h0 + w / 4,
 * query rows 16 (w % 4) .. + 15), so each 64-key K/V tile is staged once for NH heads.
 * DB: the K/V tiles double-buffered by cp.async (tile kt + 1 in flight while kt is
 * multiplied); else plain loads, the overlap coming from the SM's other blocks. WIN: a
 * sliding layer (a.window > 0): a query at p reads keys p - window + 1 .. p, and the
 * block starts at the first tile any of its rows reads. Head dim up to 128 keeps a
 * warp's Q fragments in registers (HD / 4 of them) beside its output (HD / 2); at 256
 * that is 192 registers before the scores, so Q stays in shared memory and its
 * fragments are read a k-step at a time (QREG 0). Dynamic shared memory: the Q staging
 * (NH x 64 rows; with QREG the K/V tiles reuse its bytes), then the K/V tiles. */
template <int HD, int NH, int DB>
struct fa_cfg {
    static constexpr int LD = HD + 8; /* halves a row; +16 bytes: conflict-free fragment reads */
    static constexpr int THREADS = 128 * NH;
    static constexpr int QREG = HD <= 128;
    static constexpr int TILE = FA_BK * LD; /* halves of one K or V tile */
    static constexpr int QS = NH * FA_BQ * LD, KVS = (DB ? 4 : 2) * TILE;
    static constexpr int KV0 = QREG ? 0 : QS; /* halves before the K/V tiles */
    static constexpr int SMEM = (QREG ? (QS > KVS ? QS : KVS) : QS + KVS) * (int)sizeof(__half);
    static constexpr int MINB = NH == 1 && QREG ? FA_MINB : 1;
};

/* One 64-key tile for a warp's 16 query rows (r0 = row g, r1 = row g + 8 of them): the
 * scores on tensor cores, the causal mask from positions (with WIN, also keys below a
 * row's lo), the online softmax (base 2: q carries log2(e)/sqrt(hd)), then P.V into o.
 * Q: the fragments in registers (qa; QREG) or the warp's 16 rows in shared memory (Qs). */
template <int HD, int LD, int QREG, int WIN>
static __device__ __forceinline__ void fa_step(const __half *Ks, const __half *Vs, const uint32_t (&qa)[QREG ? HD / 16 : 1][4],
                                               const __half *Qs, float (&o)[HD / 8][4], float &m0, float &m1, float &l0,
                                               float &l1, int kt, int qp0, int qp1, int lo0, int lo1, int lane) {
    const int c4 = lane & 3;
    float s[FA_BK / 8][4];
    if (QREG) {
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            /* K fragments of two k16 steps in one ldmatrix: matrix i = d 8i.. of the 32 */
#pragma unroll
            for (int k2 = 0; k2 < HD / 32; k2++) {
                uint32_t kf[4];
                ldsm_x4(kf, Ks + (8 * nt + (lane & 7)) * LD + 32 * k2 + 8 * (lane >> 3));
                mma_f16_16816(s[nt], qa[QREG ? 2 * k2 : 0], kf[0], kf[1]);
                mma_f16_16816(s[nt], qa[QREG ? 2 * k2 + 1 : 0], kf[2], kf[3]);
            }
        }
    } else {
        /* k-steps outer: each Q fragment read once a tile (ldmatrix: matrices rows 0-7 /
         * 8-15 at d, then at d + 8: the m16n8k16 A order); each s[nt] still sums its
         * k-steps in the same order */
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int k2 = 0; k2 < HD / 32; k2++) {
            uint32_t q0[4], q1[4];
            const __half *qr = Qs + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + 32 * k2 + 8 * (lane >> 4);
            ldsm_x4(q0, qr);
            ldsm_x4(q1, qr + 16);
#pragma unroll
            for (int nt = 0; nt < FA_BK / 8; nt++) {
                uint32_t kf[4];
                ldsm_x4(kf, Ks + (8 * nt + (lane & 7)) * LD + 32 * k2 + 8 * (lane >> 3));
                mma_f16_16816(s[nt], q0, kf[0], kf[1]);
                mma_f16_16816(s[nt], q1, kf[2], kf[3]);
            }
        }
    }
    /* causal mask from positions (only where a key past a row's position is in the
     * tile: the diagonal tiles); row max */
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
    /* the window's lower edge (tiles holding a key below a row's lo) */
    if (WIN && kt * FA_BK < (lo0 > lo1 ? lo0 : lo1)) {
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            const int p = kt * FA_BK + 8 * nt + 2 * c4;
            if (p < lo0) s[nt][0] = -INFINITY;
            if (p + 1 < lo0) s[nt][1] = -INFINITY;
            if (p < lo1) s[nt][2] = -INFINITY;
            if (p + 1 < lo1) s[nt][3] = -INFINITY;
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
        /* V fragments of two n8 tiles in one ldmatrix (matrices 2, 3: d + 8) */
#pragma unroll
        for (int dn = 0; dn < HD / 8; dn += 2) {
            uint32_t vf[4];
            ldsm_x4_trans(vf, Vs + (16 * k2 + (lane & 15)) * LD + 8 * dn + 8 * (lane >> 4));
            mma_f16_16816(o[dn], pa, vf[0], vf[1]);
            mma_f16_16816(o[dn + 1], pa, vf[2], vf[3]);
        }
    }
}

template <int HD, int NH, int DB, int WIN, int Q8>
static __global__ void __launch_bounds__(128 * NH, (fa_cfg<HD, NH, DB>::MINB))
    kernel_attn_flash(cu_attn_args a, const float *q, float *out, const int4 *tiles, float qscale) {
    static_assert(!(Q8 && DB), "the q8_0 forms stage with plain loads (cp.async cannot dequantize)");
    using C = fa_cfg<HD, NH, DB>;
    constexpr int LD = C::LD;
    __shared__ int pmin_s; /* WIN: the smallest position of the block's rows */
    extern __shared__ __align__(16) __half fa_sh[];
    pdl_trigger();
    pdl_wait();
    const int4 tile = tiles[blockIdx.y];
    const int t0 = tile.x, cnt = tile.y, seq = tile.z, kmax = tile.w;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int hw = NH == 1 ? 0 : warp / 4, wq = NH == 1 ? warp : warp % 4; /* the warp's head in the block, rows / 16 */
    const int h0 = blockIdx.x * NH;
    const int kvh = h0 / (a.n_head / a.n_kv);
    const int g = lane >> 2, c4 = lane & 3;
    const int q_ld = a.n_head * HD;
    if (WIN) {
        if (tid == 0) pmin_s = 0x7fffffff;
        __syncthreads();
        if (tid < cnt) atomicMin(&pmin_s, a.pos[t0 + tid]);
    }

    /* Q of the block's heads (scaled by log2(e)/sqrt(hd)) -> f16 in shared memory, then
     * each warp's rows into registers */
    for (int e = tid; e < NH * FA_BQ * HD / 4; e += C::THREADS) {
        const int hq = NH == 1 ? 0 : e / (FA_BQ * HD / 4), f = NH == 1 ? e : e % (FA_BQ * HD / 4);
        const int r = f / (HD / 4), d4 = (f % (HD / 4)) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < cnt) v = *(const float4 *)(q + (int64_t)(t0 + r) * q_ld + (int64_t)(h0 + hq) * HD + d4);
        __half2 *dst = (__half2 *)(fa_sh + (hq * FA_BQ + r) * LD + d4);
        dst[0] = __floats2half2_rn(v.x * qscale, v.y * qscale);
        dst[1] = __floats2half2_rn(v.z * qscale, v.w * qscale);
    }
    __syncthreads();
    const __half *Qs = fa_sh + hw * FA_BQ * LD;
    const int r0 = wq * 16 + g, r1 = r0 + 8;
    uint32_t qa[C::QREG ? HD / 16 : 1][4];
    if (C::QREG) {
#pragma unroll
        for (int kk = 0; kk < (C::QREG ? HD / 16 : 1); kk++) {
            qa[kk][0] = *(const uint32_t *)(Qs + r0 * LD + 16 * kk + 2 * c4);
            qa[kk][1] = *(const uint32_t *)(Qs + r1 * LD + 16 * kk + 2 * c4);
            qa[kk][2] = *(const uint32_t *)(Qs + r0 * LD + 16 * kk + 8 + 2 * c4);
            qa[kk][3] = *(const uint32_t *)(Qs + r1 * LD + 16 * kk + 8 + 2 * c4);
        }
    }
    const int qp0 = r0 < cnt ? a.pos[t0 + r0] : -1;
    const int qp1 = r1 < cnt ? a.pos[t0 + r1] : -1;
    /* WIN: each row's first key, and the block's first tile */
    const int lo0 = WIN ? qp0 + 1 - a.window : 0, lo1 = WIN ? qp1 + 1 - a.window : 0;
    const int kt0 = WIN && pmin_s + 1 - a.window > 0 ? (pmin_s + 1 - a.window) / FA_BK : 0;
    __syncthreads(); /* (QREG) the Q staging's bytes take the K/V tiles from here */
    const __half *Qw = Qs + wq * 16 * LD; /* (!QREG) the warp's 16 rows */
    __half *kv_sh = fa_sh + C::KV0;

    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const int64_t row0 = ((int64_t)seq * a.n_kv + kvh) * a.n_ctx; /* the kv head's first cached row */
    constexpr int RB = HD / 32 * KVQ8_BLOCK;                       /* (Q8) bytes of a row */
    const __half *kb = Q8 ? nullptr : a.kc + row0 * HD, *vb = Q8 ? nullptr : a.vc + row0 * HD;
    const uint8_t *kqb = Q8 ? a.kq + row0 * RB : nullptr, *vqb = Q8 ? a.vq + row0 * RB : nullptr;
    const int nkt = kmax / FA_BK + 1;
    /* keys kt * 64 .. into K at Kd and V after it; rows past kmax are zeros */
    auto stage = [&](int kt, __half *Kd) {
        __half *Vd = Kd + C::TILE;
        for (int e = tid; e < FA_BK * HD / 8; e += C::THREADS) {
            const int r = e / (HD / 8), d8 = (e % (HD / 8)) * 8;
            const int p = kt * FA_BK + r;
            if (DB) {
                const int ok = p <= kmax;
                cp_async16(Kd + r * LD + d8, kb + (int64_t)(ok ? p : 0) * HD + d8, ok ? 16 : 0);
                cp_async16(Vd + r * LD + d8, vb + (int64_t)(ok ? p : 0) * HD + d8, ok ? 16 : 0);
            } else {
                uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
                if (p <= kmax && Q8) {
                    kv = kvq8_load8_h(kqb + (int64_t)p * RB, d8);
                    vv = kvq8_load8_h(vqb + (int64_t)p * RB, d8);
                } else if (p <= kmax) {
                    kv = *(const uint4 *)(kb + (int64_t)p * HD + d8);
                    vv = *(const uint4 *)(vb + (int64_t)p * HD + d8);
                }
                *(uint4 *)(Kd + r * LD + d8) = kv;
                *(uint4 *)(Vd + r * LD + d8) = vv;
            }
        }
    };
    if (DB) {
        stage(kt0, kv_sh + (kt0 & 1) * 2 * C::TILE);
        cp_async_commit();
    }
    for (int kt = kt0; kt < nkt; kt++) {
        const __half *Ks = kv_sh + (DB ? (kt & 1) * 2 * C::TILE : 0);
        if (DB) {
            /* buffer (kt + 1) & 1 was last read in step kt - 1, before its closing barrier */
            if (kt + 1 < nkt) stage(kt + 1, kv_sh + ((kt + 1) & 1) * 2 * C::TILE);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            stage(kt, kv_sh);
        }
        __syncthreads();
        fa_step<HD, LD, C::QREG, WIN>(Ks, Ks + C::TILE, qa, Qw, o, m0, m1, l0, l1, kt, qp0, qp1, lo0, lo1, lane);
        __syncthreads();
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const int h = blockIdx.x * NH + hw;
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

/* One form of the kernel: NH must divide the group size n_head / n_kv (callers check). */
template <int HD, int NH, int DB, int WIN, int Q8 = 0>
static void attn_flash_launch(cu_ctx *S, const cu_attn_args *a, const float *q, float *out, const int4 *d_tiles,
                              int n_tiles) {
    using C = fa_cfg<HD, NH, DB>;
    static unsigned char attr_set[CU_MAX_DEVICES]; /* (per device: common.cuh) */
    if (C::SMEM > 48 * 1024 &&
        !cu_smem_attr_once(S, kernel_attn_flash<HD, NH, DB, WIN, Q8>, C::SMEM, attr_set,
                           "attn_flash: shared memory attribute"))
        return;
    const float qscale = 1.4426950408889634f / sqrtf((float)a->hd);
    dim3 grid(a->n_head / NH, n_tiles); /* (heads first: blocks start in x order, tiles as listed) */
    const char *name = HD == 64    ? (Q8 ? "attn_flash64_q8" : "attn_flash64")
                       : HD == 128 ? (Q8 ? "attn_flash128_q8" : "attn_flash128")
                                   : (Q8 ? "attn_flash256_q8" : "attn_flash256");
    cu_launch(S, name, kernel_attn_flash<HD, NH, DB, WIN, Q8>, grid, dim3(C::THREADS), C::SMEM, *a, q, out, d_tiles,
              qscale);
}

int cu_attn_flash_supported(const cu_ctx *S, int hd) { return hd == 64 || hd == 128 || (hd == 256 && S->flash256); }

size_t cu_attn_flash_smem_need(int hd, int db) {
    if (hd == 256) return fa_cfg<256, 1, 0>::SMEM;
    const int h = hd == 64 ? 0 : 1;
    const int need[2][2] = {{fa_cfg<64, 2, 0>::SMEM, fa_cfg<64, 2, 1>::SMEM}, {fa_cfg<128, 2, 0>::SMEM, fa_cfg<128, 2, 1>::SMEM}};
    return (size_t)need[h][db ? 1 : 0];
}

/* head dim 64 or 128: the form by the paths (sliding layers: one head a block) */
template <int HD>
static void attn_flash_form(cu_ctx *S, int two, int db, const cu_attn_args *a, const float *q, float *out,
                            const int4 *d_tiles, int n_tiles) {
    if (a->kq) { /* the q8_0 cache: plain loads only (path flash-db does not apply) */
        if (a->window > 0) attn_flash_launch<HD, 1, 0, 1, 1>(S, a, q, out, d_tiles, n_tiles);
        else if (two) attn_flash_launch<HD, 2, 0, 0, 1>(S, a, q, out, d_tiles, n_tiles);
        else attn_flash_launch<HD, 1, 0, 0, 1>(S, a, q, out, d_tiles, n_tiles);
        return;
    }
    if (a->window > 0 && db) attn_flash_launch<HD, 1, 1, 1>(S, a, q, out, d_tiles, n_tiles);
    else if (a->window > 0) attn_flash_launch<HD, 1, 0, 1>(S, a, q, out, d_tiles, n_tiles);
    else if (two && db) attn_flash_launch<HD, 2, 1, 0>(S, a, q, out, d_tiles, n_tiles);
    else if (two) attn_flash_launch<HD, 2, 0, 0>(S, a, q, out, d_tiles, n_tiles);
    else if (db) attn_flash_launch<HD, 1, 1, 0>(S, a, q, out, d_tiles, n_tiles);
    else attn_flash_launch<HD, 1, 0, 0>(S, a, q, out, d_tiles, n_tiles);
}

/* The form (every one gives the same bits: the same arithmetic per row). H200, head dim
 * 128, one causal sequence (bench/cuda_attn, us a launch): double-buffering the K/V
 * tiles (path flash-db) won at 3314 tokens, 387.9 vs 427.0 (8B: 32 heads, 8 kv) and
 * 385.4 vs 434.0 (7B), and a little at 512 (26.9 vs 27.9). Two query heads of one kv
 * group a block (path flash-gqa) won where the one-head grid is one wave: 8B 512 tokens
 * 23.2 vs 26.9; over many waves it lost (3314: 406.1 vs 387.9; its 256-thread blocks
 * leave 8 warps a SM, not 12), hence the rule; 4 heads lost everywhere (48.9 at 512).
 * Head dim 256 (gemma3) runs one head a block with plain loads: Q in shared memory and
 * two K/V tiles make 101 KB, two blocks a SM (double-buffered: 169 KB, one); not timed
 * against the other forms, since a gemma3-270M layer's attention at 512 tokens is a few
 * microseconds either way, where the split kernel it replaces took 2.6 ms (70% of pp512:
 * MINFER_CUDA_PROFILE, bench/RESULTS.md). */
void cu_attn_flash(cu_ctx *S, const cu_attn_args *a, const float *q, float *out, const int4 *d_tiles,
                   int n_tiles) {
    const int G = a->n_head / a->n_kv;
    const int two = S->on[CU_PATH_FLASH_GQA] && G % 2 == 0 && (long)a->n_head * n_tiles <= (long)FA_MINB * cu_num_sms(S);
    const int db = S->on[CU_PATH_FLASH_DB];
    if (a->hd == 64) attn_flash_form<64>(S, two, db, a, q, out, d_tiles, n_tiles);
    else if (a->hd == 128) attn_flash_form<128>(S, two, db, a, q, out, d_tiles, n_tiles);
    else if (a->window > 0 && a->kq) attn_flash_launch<256, 1, 0, 1, 1>(S, a, q, out, d_tiles, n_tiles);
    else if (a->window > 0) attn_flash_launch<256, 1, 0, 1>(S, a, q, out, d_tiles, n_tiles);
    else if (a->kq) attn_flash_launch<256, 1, 0, 0, 1>(S, a, q, out, d_tiles, n_tiles);
    else attn_flash_launch<256, 1, 0, 0>(S, a, q, out, d_tiles, n_tiles);
}

/* attn.cu - KV store and attention over the f16 (or q8_0) cache.
 *
 * Cache layout, per layer: K and V as [n_seq][n_kv][n_ctx][hd] f16, so one head's
 * keys are contiguous rows of hd values; with --cache-type-k/-v q8_0 the same rows as
 * hd / 32 blocks of ggml's q8_0 (kv_q8.cuh), stored by kernel_kv_store_q8 (RoPE a launch
 * before it) and read by kernel_attn_split<1> and the flash kernel's q8_0 forms.
 *
 * kernel_kv_store     one thread per 4 values of a (token, head) row: (optionally)
 *                     RoPE of q and k in place, then k, v -> cache at (seq, pos).
 * kernel_attn_split   decode ("flash-decoding"): block = (chunk of positions,
 *                     kv head [x group of <= 8 q heads], token); online softmax
 *                     over tiles of 128 positions; writes (m, l, o) partials.
 *                     The grid covers the whole context; chunks past pos exit at
 *                     once, so a captured graph stays valid as pos grows.
 * kernel_attn_combine one block per (head, token): merges the partials; also
 *                     quantizes the output rows to q8 for the o-projection GEMV.
 * The prefill's flash attention is attn_flash.cu. */
#include "attn_dec.cuh"
#include "kv_q8.cuh"
#include "ptx.cuh"

/* ------------------------------------------------------------------------- */
/* KV store (+ RoPE)                                                         */
/* ------------------------------------------------------------------------- */
/* One thread per 4 consecutive values of a (token, head) row: rows < n_head of a token
 * are q heads (rotated in place), the others k heads (rotated, stored with the v head).
 * A thread owns its values (for mode 1, NeoX, also their partners half a rotation away),
 * so no barrier; the arithmetic is rope_pair's, pair by pair. The first version (a block
 * of hd/2 threads per row, scalar loads, a barrier before the store) ran 40 us a 7B layer
 * at 512 tokens, this one 31 us (MINFER_CUDA_PROFILE; bench/RESULTS.md). Needs
 * hd % 4 == 0 and, with RoPE, rope_dim % 8 == 0, and fewer than 2^30 items (cu_kv_store
 * checks: the grid-stride index stays below 2^31). */
static __device__ __forceinline__ void rot4(float4 &x, float4 &y, const float2 *c, bool pairs_in_x) {
    /* pairs_in_x: (x.x, x.y), (x.z, x.w) are pairs with c[0], c[1]; else x and y are the
     * first and second of four pairs with c[0..3] */
    if (pairs_in_x) {
        const float a0 = x.x, a1 = x.y, a2 = x.z, a3 = x.w;
        x.x = rope_rot(a0, a1, c[0], false), x.y = rope_rot(a1, a0, c[0], true);
        x.z = rope_rot(a2, a3, c[1], false), x.w = rope_rot(a3, a2, c[1], true);
    } else {
        const float4 a = x, b = y;
        x.x = rope_rot(a.x, b.x, c[0], false), y.x = rope_rot(b.x, a.x, c[0], true);
        x.y = rope_rot(a.y, b.y, c[1], false), y.y = rope_rot(b.y, a.y, c[1], true);
        x.z = rope_rot(a.z, b.z, c[2], false), y.z = rope_rot(b.z, a.z, c[2], true);
        x.w = rope_rot(a.w, b.w, c[3], false), y.w = rope_rot(b.w, a.w, c[3], true);
    }
}
static __device__ __forceinline__ void store_h4(__half *dst, float4 x) {
    __half2 lo = __floats2half2_rn(x.x, x.y), hi = __floats2half2_rn(x.z, x.w);
    uint2 u;
    u.x = *(const uint32_t *)&lo, u.y = *(const uint32_t *)&hi;
    *(uint2 *)dst = u;
}
static __global__ void __launch_bounds__(256)
kernel_kv_store(cu_attn_args a, float *q, float *k, const float *v, int nq, int rope, int rope_dim, float base,
                int mode, const float2 *cs) {
    pdl_trigger();
    pdl_wait();
    const int hd = a.hd, per = hd / 4, rows = nq + a.n_kv;
    const int items = a.n * rows * per; /* < 2^31: cu_kv_store checks */
    const int half = rope_dim / 2;
    /* (32-bit index arithmetic: a 64-bit division is a ~70-instruction call) */
    for (int it = blockIdx.x * blockDim.x + threadIdx.x; it < items; it += gridDim.x * blockDim.x) {
        const int j = it % per;
        const int r = it / per;
        const int t = r / rows, hs = r % rows;
        const int e = 4 * j;
        const bool isq = hs < nq, neox = mode != 0;
        /* NeoX: the thread of a first-half chunk does its partner chunk too */
        if (rope && neox && e >= half && e < rope_dim) continue;
        const int pos = a.pos[t];
        float *x = isq ? q + ((int64_t)t * nq + hs) * hd : k + ((int64_t)t * a.n_kv + (hs - nq)) * hd;
        float4 x0 = *(const float4 *)(x + e), x1 = make_float4(0.f, 0.f, 0.f, 0.f);
        const bool two = rope && neox && e < half;
        if (two) x1 = *(const float4 *)(x + e + half);
        if (rope && e < rope_dim) {
            /* (constant indices throughout: a loop to a variable count put c in local memory) */
            float2 c[4];
            const int i0 = neox ? e : e / 2;
            c[0] = rope_cs(cs, i0, pos, rope_dim, base);
            c[1] = rope_cs(cs, i0 + 1, pos, rope_dim, base);
            c[2] = c[3] = c[1];
            if (neox) c[2] = rope_cs(cs, i0 + 2, pos, rope_dim, base), c[3] = rope_cs(cs, i0 + 3, pos, rope_dim, base);
            rot4(x0, x1, c, !neox);
            if (isq) {
                *(float4 *)(x + e) = x0;
                if (two) *(float4 *)(x + e + half) = x1;
            }
        }
        if (isq) continue;
        const int kvh = hs - nq;
        const int64_t dst = (((int64_t)a.seq[t] * a.n_kv + kvh) * a.n_ctx + pos) * hd;
        const float *vr = v + ((int64_t)t * a.n_kv + kvh) * hd;
        /* the rotated k goes to the cache only: nothing reads the f32 k row after */
        store_h4(a.kc + dst + e, x0);
        store_h4(a.vc + dst + e, *(const float4 *)(vr + e));
        if (two) {
            store_h4(a.kc + dst + e + half, x1);
            store_h4(a.vc + dst + e + half, *(const float4 *)(vr + e + half));
        }
    }
}

/* the first version, kept for shapes the vector kernel does not take (hd % 4, rope_dim % 8) */
static __global__ void kernel_kv_store_rows(cu_attn_args a, float *q, float *k, const float *v, int rope, int rope_dim,
                                            float base, int mode, const float2 *cs) {
    pdl_trigger();
    pdl_wait();
    const int t = blockIdx.y, hs = blockIdx.x;
    const int pos = a.pos[t], seq = a.seq[t];
    const int hd = a.hd;
    const bool isq = hs < a.n_head;
    float *x = isq ? q + ((int64_t)t * a.n_head + hs) * hd : k + ((int64_t)t * a.n_kv + (hs - a.n_head)) * hd;
    if (rope)
        for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x)
            rope_pair(x, i, rope_cs(cs, i, pos, rope_dim, base), rope_dim, mode);
    if (isq) return; /* uniform per block */
    __syncthreads();  /* the rotated k row, written by other threads, visible */
    const int kvh = hs - a.n_head;
    const int64_t dst = (((int64_t)seq * a.n_kv + kvh) * a.n_ctx + pos) * hd;
    const float *vr = v + ((int64_t)t * a.n_kv + kvh) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        a.kc[dst + d] = __float2half_rn(x[d]);
        a.vc[dst + d] = __float2half_rn(vr[d]);
    }
}

/* The q8_0 cache (a.kq, a.vq): a warp per block of 32 values of a (token, kv head) row of
 * k and v (k rotated already), kvq8_store_block's quantization. */
static __global__ void kernel_kv_store_q8(cu_attn_args a, const float *k, const float *v) {
    pdl_trigger();
    pdl_wait();
    const int nb = a.hd / 32, lane = threadIdx.x & 31, wpb = blockDim.x / 32;
    const int64_t items = (int64_t)a.n * a.n_kv * nb;
    /* (warp-uniform: the shuffles see whole warps) */
    for (int64_t w = (int64_t)blockIdx.x * wpb + threadIdx.x / 32; w < items; w += (int64_t)gridDim.x * wpb) {
        const int b = (int)(w % nb);
        const int64_t r = w / nb; /* t * n_kv + kv head */
        const int t = (int)(r / a.n_kv), kvh = (int)(r % a.n_kv);
        const int64_t row = ((int64_t)a.seq[t] * a.n_kv + kvh) * a.n_ctx + a.pos[t];
        const int64_t src = (int64_t)r * a.hd + 32 * b + lane;
        const int64_t dst = row * kvq8_row_bytes(a.hd) + (int64_t)b * KVQ8_BLOCK;
        kvq8_store_block(a.kq + dst, k[src], lane);
        kvq8_store_block(a.vq + dst, v[src], lane);
    }
}

void cu_kv_store(cu_ctx *S, const cu_attn_args *a, float *q, float *k, const float *v, int rope, int rope_dim,
                 float rope_base, int rope_mode, const float2 *cs) {
    if (a->kq) {
        /* q8_0: RoPE of q and k in place (k's f32 row: nothing reads it after the store),
         * then the store; a block of 8 warps takes 8 blocks of 32 values */
        if (rope) {
            const cu_rope_job jobs[2] = {{q, a->n_head}, {k, a->n_kv}};
            cu_rope(S, jobs, 2, a->pos, a->n, a->hd, rope_dim, rope_base, rope_mode, cs);
        }
        const int64_t items = (int64_t)a->n * a->n_kv * (a->hd / 32);
        const int64_t want = (items + 7) / 8;
        const int cap = 16 * cu_num_sms(S);
        cu_launch(S, "kv_store_q8", kernel_kv_store_q8, dim3(want < cap ? (int)want : cap), dim3(256), 0, *a,
                  (const float *)k, v);
        return;
    }
    /* without rope only the k/v rows have work (nq = 0: q is untouched) */
    const int nq = rope ? a->n_head : 0;
    const int64_t items = (int64_t)a->n * (nq + a->n_kv) * (a->hd / 4);
    if (a->hd % 4 == 0 && (!rope || (rope_dim % 8 == 0 && rope_dim <= a->hd)) && items < INT32_MAX / 2) {
        const int64_t want = (items + 255) / 256;
        const int cap = 16 * cu_num_sms(S); /* (the grid-stride loop takes the rest) */
        const int blocks = want < cap ? (int)want : cap;
        cu_launch(S, rope ? "kv_store_rope" : "kv_store", kernel_kv_store, dim3(blocks), dim3(256), 0, *a, q, k, v, nq,
                  rope, rope_dim, rope_base, rope_mode, cs);
        return;
    }
    const int threads = a->hd / 2 <= 32 ? 32 : a->hd / 2 <= 64 ? 64 : 128;
    cu_attn_args b = *a;
    b.n_head = nq; /* 0 shifts the grid onto the k/v blocks */
    cu_launch(S, rope ? "kv_store_rope" : "kv_store", kernel_kv_store_rows, dim3(nq + a->n_kv, a->n), dim3(threads), 0,
              b, q, k, v, rope, rope_dim, rope_base, rope_mode, cs);
}

/* ------------------------------------------------------------------------- */
/* Split attention (decode; any hd % 8 == 0, hd <= 256)                      */
/* ------------------------------------------------------------------------- */
#define ATT_THREADS 128
#define ATT_TILE 128
#define ATT_MAXG 8
#define ATT_MAXHD 256

/* Q8: the q8_0 cache (a.kq, a.vq) instead of the f16 one, dequantized as loaded; the
 * arithmetic after the load is the same */
template <int Q8>
static __global__ void __launch_bounds__(ATT_THREADS)
kernel_attn_split(cu_attn_args a, const float *q, float *part, int chunk, int n_chunks, float scale) {
    __shared__ float qs[ATT_MAXG * ATT_MAXHD];
    __shared__ float sc[ATT_MAXG][ATT_TILE];
    __shared__ float ob[2048];  /* PV reduction [npg][ATT_MAXG][hd]: npg * hd <= 2 * ATT_THREADS */
    __shared__ float mh[ATT_MAXG], lh[ATT_MAXG], al[ATT_MAXG];
    pdl_trigger();
    const int hd = a.hd;
    const int G = a.n_head / a.n_kv;
    const int nsub = (G + ATT_MAXG - 1) / ATT_MAXG;
    const int c = blockIdx.x, t = blockIdx.z;
    const int kvh = blockIdx.y / nsub, sub = blockIdx.y % nsub;
    const int h0 = kvh * G + sub * ATT_MAXG;
    const int hc = min(ATT_MAXG, G - sub * ATT_MAXG);
    pdl_wait();
    const int pos = a.pos[t], seq = a.seq[t];
    if (c * chunk > pos) return;  /* uniform per block */
    const int p1 = min(pos + 1, c * chunk + chunk);
    /* a sliding layer: positions below pos - window + 1 are masked; a chunk left empty
     * writes the neutral partial (max -inf, sum 0) that the combine weighs by 0 */
    const int p0 = a.window > 0 ? max(c * chunk, pos + 1 - a.window) : c * chunk;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int q_ld = a.n_head * hd;
    for (int e = tid; e < hc * hd; e += ATT_THREADS)
        qs[e] = q[(int64_t)t * q_ld + (int64_t)h0 * hd + e] * scale;
    if (tid < ATT_MAXG) {
        mh[tid] = -INFINITY;
        lh[tid] = 0.0f;
    }
    const int64_t row0 = ((int64_t)seq * a.n_kv + kvh) * a.n_ctx; /* the kv head's first cached row */
    const int rb = kvq8_row_bytes(hd);
    const __half *kb = Q8 ? nullptr : a.kc + row0 * hd, *vb = Q8 ? nullptr : a.vc + row0 * hd;
    const uint8_t *kqb = Q8 ? a.kq + row0 * rb : nullptr, *vqb = Q8 ? a.vq + row0 * rb : nullptr;
    /* PV mapping: thread = (position group pg, value pair dp) */
    const int nd = hd / 2, npg = ATT_THREADS / nd;
    const int dp = tid % nd, pg = tid / nd;
    const bool pv_active = pg < npg;
    float acc[ATT_MAXG][2];
#pragma unroll
    for (int h = 0; h < ATT_MAXG; h++) acc[h][0] = acc[h][1] = 0.0f;
    __syncthreads();
    for (int ts = p0; ts < p1; ts += ATT_TILE) {
        const int np = min(ATT_TILE, p1 - ts);
        /* scores: thread = position */
        {
            float s[ATT_MAXG];
#pragma unroll
            for (int h = 0; h < ATT_MAXG; h++) s[h] = 0.0f;
            if (tid < np) {
                for (int d8 = 0; d8 < hd; d8 += 8) {
                    float f[8];
                    if (Q8) {
                        kvq8_load8(kqb + (int64_t)(ts + tid) * rb, d8, f);
                    } else {
                        const uint4 raw = *(const uint4 *)(kb + (int64_t)(ts + tid) * hd + d8);
                        const __half2 *h2 = (const __half2 *)&raw;
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            const float2 v = __half22float2(h2[k]);
                            f[2 * k] = v.x;
                            f[2 * k + 1] = v.y;
                        }
                    }
#pragma unroll
                    for (int h = 0; h < ATT_MAXG; h++)
                        if (h < hc) {
                            const float *qh = qs + h * hd + d8;
#pragma unroll
                            for (int k = 0; k < 8; k++) s[h] += f[k] * qh[k];
                        }
                }
            }
#pragma unroll
            for (int h = 0; h < ATT_MAXG; h++) sc[h][tid] = tid < np ? s[h] : -INFINITY;
        }
        __syncthreads();
        /* softmax bookkeeping: warp w takes heads w, w+4 */
        for (int h = warp; h < hc; h += ATT_THREADS / 32) {
            float mx = -INFINITY;
            for (int i = lane; i < ATT_TILE; i += 32) mx = fmaxf(mx, sc[h][i]);
            mx = warp_max(mx);
            const float m_old = mh[h];
            const float m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int i = lane; i < ATT_TILE; i += 32) {
                const float p = expf(sc[h][i] - m_new);
                sc[h][i] = p;
                sum += p;
            }
            sum = warp_sum(sum);
            __syncwarp();
            if (lane == 0) {
                const float alpha = expf(m_old - m_new);
                mh[h] = m_new;
                lh[h] = lh[h] * alpha + sum;
                al[h] = alpha;
            }
        }
        __syncthreads();
        if (pv_active) {
#pragma unroll
            for (int h = 0; h < ATT_MAXG; h++) {
                const float f = h < hc ? al[h] : 0.0f;
                acc[h][0] *= f;
                acc[h][1] *= f;
            }
            for (int i = pg; i < np; i += npg) {
                const float2 v = Q8 ? kvq8_load2(vqb + (int64_t)(ts + i) * rb, 2 * dp)
                                    : __half22float2(*(const __half2 *)(vb + (int64_t)(ts + i) * hd + 2 * dp));
#pragma unroll
                for (int h = 0; h < ATT_MAXG; h++)
                    if (h < hc) {
                        const float p = sc[h][i];
                        acc[h][0] += p * v.x;
                        acc[h][1] += p * v.y;
                    }
            }
        }
        __syncthreads();
    }
    /* reduce the position groups: ob[pg][h][d] */
    if (pv_active) {
#pragma unroll
        for (int h = 0; h < ATT_MAXG; h++)
            if (h < hc) {
                ob[(pg * ATT_MAXG + h) * hd + 2 * dp] = acc[h][0];
                ob[(pg * ATT_MAXG + h) * hd + 2 * dp + 1] = acc[h][1];
            }
    }
    __syncthreads();
    for (int e = tid; e < hc * hd; e += ATT_THREADS) {
        const int h = e / hd, d = e % hd;
        float o = 0.0f;
        for (int g = 0; g < npg; g++) o += ob[(g * ATT_MAXG + h) * hd + d];
        float *pr = part + (((int64_t)t * a.n_head + h0 + h) * n_chunks + c) * (hd + 2);
        pr[d] = o;
        if (d == 0) {
            pr[hd] = mh[h];
            pr[hd + 1] = lh[h];
        }
    }
}

static __global__ void kernel_attn_combine(cu_attn_args a, const float *part, float *out, int chunk, int n_chunks,
                                           cu_q8 q8, int do_q8) {
    pdl_trigger();
    pdl_wait();
    const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
    const int hd = a.hd;
    const int nch = min(a.pos[t] / chunk + 1, n_chunks);
    const float *pr = part + ((int64_t)t * a.n_head + h) * n_chunks * (hd + 2);
    float M = -INFINITY;
    for (int c = 0; c < nch; c++) M = fmaxf(M, pr[c * (hd + 2) + hd]);
    float L = 0.0f, o = 0.0f;
    for (int c = 0; c < nch; c++) {
        const float w = expf(pr[c * (hd + 2) + hd] - M);
        L += w * pr[c * (hd + 2) + hd + 1];
        if (d < hd) o += w * pr[c * (hd + 2) + d];
    }
    const float r = d < hd ? o / L : 0.0f;
    const int64_t idx = (int64_t)t * a.n_head * hd + (int64_t)h * hd + d;
    if (d < hd) out[idx] = r;
    if (d < hd && a.oh) a.oh[idx] = __low2half(f2h2_sat(r, 0.f));
    if (do_q8) q8_store1(q8, idx, r, d < hd);
}

/* ------------------------------------------------------------------------- */
/* Decode attention (hd 64/128/256): latency-tolerant loads, fused combine  */
/* ------------------------------------------------------------------------- */
/* Same grid and partials as kernel_attn_split, but a K or V row is read by HD/8
 * lanes with 16-byte loads and every lane issues all of a 64-position tile's K and
 * V loads before using any (one memory round trip per tile instead of one per
 * position), and the last block of a (token, kv head group) to finish merges the
 * chunks (arrival counted with an atomic; the counter is reset for the next
 * launch), so no separate combine launch; a token whose position lies in the first
 * chunk (nch == 1) is written directly. The merged rows are also quantized to q8.
 *
 * Path attn-dec-wide adds head dim 256 and sliding windows (gemma3; before it those
 * layers ran the q/k norm launches, the store kernel, the split kernel and its combine:
 * five launches a layer where this is one) and, in the fused store, gemma3's q/k norms.
 *
 * a.pre (the one-token fused store, path attn-pre off turns it off): pos, seq
 * and the K/V rows of the block's first tile at positions < pos are read before
 * pdl_wait(), so that round trip overlaps the GEMV before. That breaks the rule of
 * common.cuh (only weights before the wait) for data no kernel of this step
 * writes: the batch metadata is copied before the step's first kernel (a memcpy,
 * which no later kernel starts before it ends), and the cache rows before pos were
 * written by earlier steps, which ended before this step's copy; this step writes
 * only row pos (below, after the wait), whose values the block takes from shared
 * memory. The RoPE (cos, sin) row at pos is read ahead of the wait too (the table is
 * built at init), so after the wait q, k and v are the one round trip before the
 * scores (measured neutral: tg128 550.36 vs 549.61 without, 2026-11-29; an earlier try
 * measured slower, 478 vs 492, on a tree whose kernel held more registers).
 * Measured (tg128, 7B q4_k_m, context 128, H200; bench/RESULTS.md): before these
 * changes the kernel cost 9.9 us per layer (a timing hook, since removed, dropped attn_dec128), about 7.7
 * after (an estimate, RESULTS.md says on what); whole step +5.1% in a 3314 context.
 * The tile loop without block barriers (each lane group's own online softmax, below):
 * 5.8 -> 5.3 us per layer, tg128 558.74 / 562.36 vs 556.55 / 555.67 (7B, G = 1) and
 * 1295 vs 1205 tok/s on the synthetic 1B (G = 4), same call, 2026-11-29. */
#define AD_TILE 64

/* NW: warps per block, 8 (cu_tune.attn_warps; 4 also built): with 8 each lane group
 * walks half as many rows of a tile, or, with one query head per block, as many rows
 * of a tile twice as long (TILE below). tg128, H200: synthetic 1B (4 query heads per
 * kv head) 1,437.7 vs 1,344.1 tok/s with 8 (2026-11-29); on the 7B (1 per kv head),
 * with 64-row tiles, 4 was ahead (613.5 / 611.1 vs 605.9 / 605.5; with one ring row
 * ahead of the GEMVs' wait 614.3 / 612.5 vs 601.6 / 603.2), and with 128-row tiles 8
 * is: 668.57 / 666.34 / 666.54 vs 661.65 / 663.35 / 658.59, the kernel's span in the
 * block timeline 6.24 vs 7.67 us per layer (2026-11-30, bench/RESULTS.md call 47).
 * MG: query heads per block, the size of the head-group arrays (acc alone is MG x 8
 * registers per thread): with a.fit (the default) the model's group rounded up to a
 * power of two, else ATT_MAXG. Why fit: at ATT_MAXG the HD=128 kernel holds 168
 * registers (ptxas, sm_90a), 21.5K per block, and the xst GEMV before it holds
 * 2 x 22.5K per SM, so no attention block can join an SM (64K registers) before a
 * GEMV block leaves, and its reads ahead of pdl_wait overlap only the GEMV's tail;
 * fitted to the 7B's group of 1 it holds 127. tg128 on the 7B: 513.1 vs 495.8 tok/s
 * (bench/RESULTS.md, 2026-11-29). (Beside the two xstm blocks of the 7B's q/k/v, 2 x 256
 * threads at 120 registers, even the fitted block cannot start before they leave: the
 * block timeline, 2026-11-30; making room for it measured slower, RESULTS.md call 30.)
 * a.trigger (cu_tune.attn_trigger) places the kernel's pdl_trigger(): by default (1)
 * after its wait, so the wo GEMV after it starts its blocks and their first weight
 * requests once the q/k/v GEMV has finished rather than beside it. tg128 on the 7B (H200,
 * 2026-11-30, alternating in one call, bench/RESULTS.md calls 29-30): after the wait
 * 626.75 / 628.96 / 632.84 / 630.54 and 630.23 / 627.07 / 627.52 vs at the start 624.86 /
 * 626.77 / 623.85 / 628.86 and 625.08 / 626.36 / 624.59 (+0.6%); in a 3314 context 628.18
 * vs 627.33; after q/k/v (2) 625.3 on average. An earlier regime measured them even
 * (612.3 vs 613.0, call 19). */
template <int HD, int MG, int NW>
static __global__ void __launch_bounds__(NW * 32)
kernel_attn_dec(cu_attn_args a, const float *q, float *part, int *counter, float *out, int chunk, int n_chunks,
                float scale, cu_q8 q8, int do_q8) {
    constexpr int LPP = HD / 8;          /* lanes per row */
    constexpr int PPW = 32 / LPP;        /* rows per warp step */
    constexpr int PPB = PPW * NW;        /* rows per block step */
    constexpr int NT = NW * 32;          /* threads */
    /* rows per tile: AD_TILE, or twice that for one query head per block on 8 warps,
     * which then hold as many rows per lane as 4 warps do (SPT 8 at HD 128) and read
     * a whole 128-position chunk ahead of the wait instead of its second half inside
     * the tile loop, one memory round trip after it (cu_tune.attn_warps 8 on the 7B) */
    constexpr int TILE = AD_TILE * (MG == 1 && NW == 8 ? 2 : 1);
    constexpr int SPT = TILE / PPB;      /* steps per tile */
    __shared__ float qs[MG][HD];
    __shared__ float kvp[2][HD]; /* the fused store's k (rotated) and v at pos */
    __shared__ float ob[NW][MG][HD];
    __shared__ float wm[NW][MG], wl[NW][MG], wc[NW][MG]; /* per warp: max, sum, weight */
    __shared__ float mh[MG], lh[MG];
    __shared__ float2 cs[HD / 2]; /* RoPE (cos, sin) at pos, the fused store's */
    __shared__ int is_last;
    if (a.trigger == 0) pdl_trigger();
    const int G = a.n_head / a.n_kv;
    const int nsub = (G + MG - 1) / MG;
    const int c = blockIdx.x, t = blockIdx.z;
    const int kvh = blockIdx.y / nsub, sub = blockIdx.y % nsub;
    const int h0 = kvh * G + sub * MG;
    const int hc = min(MG, G - sub * MG);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sl = lane % LPP, pr = lane / LPP;
    const int q_ld = a.n_head * HD;
    const int p0 = c * chunk;
    const bool pre = a.pre;
    int pos = 0, seq = 0;
    uint4 kr[SPT], vr[SPT];
    /* rows p < np of the tile at ts, those at positions < lim (zeros elsewhere) */
    auto load_tile = [&](int ts, int np, int lim) {
        const int64_t base = ((int64_t)seq * a.n_kv + kvh) * a.n_ctx * HD + sl * 8;
#pragma unroll
        for (int j = 0; j < SPT; j++) {
            const int p = j * PPB + warp * PPW + pr;
            const bool ok = p < np && ts + p < lim;
            kr[j] = ok ? *(const uint4 *)(a.kc + base + (int64_t)(ts + p) * HD) : make_uint4(0, 0, 0, 0);
            vr[j] = ok ? *(const uint4 *)(a.vc + base + (int64_t)(ts + p) * HD) : make_uint4(0, 0, 0, 0);
        }
    };
    /* the RoPE table (built at init) at pos: with pre, read ahead of the wait */
    auto load_cs = [&]() {
        if (a.kin && a.rope && tid < a.rope_dim / 2) cs[tid] = rope_cs(a.rope_cs, tid, pos, a.rope_dim, a.rope_base);
    };
    /* The fast store (a.cs_now, which the backend sets for a model with one query head per
     * kv head, head dim 128, RoPE of adjacent pairs over the whole head and one sequence):
     * the (cos, sin) row at pos comes from the step's embedding kernel, so nothing after
     * the wait waits for pos first; the block of the first chunk does not wait for it
     * before the wait either: it reads rows 0 .. TILE - 1 of the cache whatever pos is and
     * zeroes those at and past pos once pos is in (row pos from shared memory, as below). Why: the blocks of this kernel start when
     * the q/k/v GEMV's blocks leave their SMs, about when that GEMV ends, so "before the
     * wait" is after it: pos, then the table row, then q/k/v had been three round trips in
     * a row (the block timeline: q/k/v in at ~1.5 us after the release, the RoPE and the
     * store ~0.75 us more; with this, q/k/v rotated and stored at ~1.1 us). tg128 on the 7B
     * (H200, 2026-11-30, bench/RESULTS.md calls 62-63): 676.58 / 678.23 / 675.51 vs
     * 670.38 / 669.49 / 669.72 with path rope-row off; kernel span 6.24 -> 5.33 us.
     * (Head dim 128 only: the case the GPU tests cover, tiny-mha and the 7B; at 64 the
     * same code would run but no test model has one query head per kv head there.) */
    const bool fast = MG == 1 && HD == 128 && a.cs_now && a.kin && pre && a.seq1 && a.rope &&
                      a.rope_mode == 0 && a.rope_dim == HD && NT >= 2 * HD && a.window == 0 && !a.qn;
    /* A sliding layer (a.window): positions below lo are masked, so the chunks below c0
     * have no row and leave at once (the merge counts and reads chunks c0 .. pos / chunk),
     * and the block's rows start at s0. */
    int lo = 0, c0 = 0, s0 = p0;
    auto window_start = [&]() {
        lo = a.window > 0 ? max(0, pos + 1 - a.window) : 0;
        c0 = lo / chunk;
        s0 = max(p0, lo);
    };
    if (fast && c == 0) {
        pos = a.pos[t]; /* (used after the wait) */
        load_tile(0, TILE, a.n_ctx);
    } else if (pre) {
        pos = a.pos[t];
        seq = a.seq[t];
        window_start();
        if (p0 > pos || c < c0) return; /* uniform per block */
        if (!fast) load_cs();
        load_tile(s0, min(TILE, pos + 1 - s0), pos);
    }
    pdl_wait();
    if (a.trigger == 1) pdl_trigger();
    if (!pre) {
        pos = a.pos[t];
        seq = a.seq[t];
        window_start();
        if (p0 > pos || c < c0) return;
        load_cs();
    }
    const int64_t base = ((int64_t)seq * a.n_kv + kvh) * a.n_ctx * HD;
    if (fast) {
        const int64_t koff = (int64_t)t * a.n_kv * HD + kvh * HD, at = base + (int64_t)pos * HD;
        ad_fast_qkv<HD>(tid, q + (int64_t)t * q_ld + (int64_t)h0 * HD, a.kin + koff, a.vin + koff, a.cs_now, scale,
                        pos / chunk == c, qs[0], kvp, a.kc + at, a.vc + at);
        if (c == 0) {
            /* the first tile was read whatever pos was: rows at and past pos to zero */
#pragma unroll
            for (int j = 0; j < SPT; j++)
                if (j * PPB + warp * PPW + pr >= pos) {
                    kr[j] = make_uint4(0, 0, 0, 0);
                    vr[j] = make_uint4(0, 0, 0, 0);
                }
        }
    } else if (a.kin) {
        /* fused store (one token): rotate q heads in shared memory; the block
         * whose chunk holds pos also rotates k and writes k, v at pos (every head
         * group of that kv head writes the same bits) and keeps them in kvp
         * for its own tile, so q, k and v are one round trip after
         * the wait and the cache row is not read back */
        for (int e = tid; e < hc * HD; e += NT) qs[e / HD][e % HD] = q[(int64_t)t * q_ld + (int64_t)h0 * HD + e];
        const bool owner = pos / chunk == c;
        if (owner)
            for (int d = tid; d < HD; d += NT) {
                kvp[0][d] = a.kin[(int64_t)t * a.n_kv * HD + kvh * HD + d];
                kvp[1][d] = a.vin[(int64_t)t * a.n_kv * HD + kvh * HD + d];
            }
        __syncthreads();
        if (a.qn) {
            /* gemma3's q and k norms: warp r takes row r (q heads, then k where this
             * block stores it), kernel_rmsnorm's x * inv * w with the sum in warp order */
            const int rows = hc + (owner ? 1 : 0);
            for (int r = warp; r < rows; r += NW) {
                float *x = r < hc ? qs[r] : kvp[0];
                const float *w = r < hc ? a.qn : a.kn;
                float ss = 0.0f;
                for (int d = lane; d < HD; d += 32) ss += x[d] * x[d];
                ss = warp_sum(ss);
                const float inv = 1.0f / sqrtf(ss / (float)HD + a.norm_eps);
                for (int d = lane; d < HD; d += 32) x[d] = x[d] * inv * w[d];
            }
            __syncthreads();
        }
        if (a.rope) {
            const int half = a.rope_dim / 2;
            for (int e = tid; e < (hc + 1) * half; e += NT) {
                const int h = e / half, i = e % half;
                if (h < hc) rope_pair(qs[h], i, cs[i], a.rope_dim, a.rope_mode);
                else if (owner) rope_pair(kvp[0], i, cs[i], a.rope_dim, a.rope_mode);
            }
            __syncthreads();
        }
        for (int e = tid; e < hc * HD; e += NT) qs[e / HD][e % HD] *= scale;
        if (owner)
            for (int d = tid; d < HD; d += NT) {
                a.kc[base + (int64_t)pos * HD + d] = __float2half_rn(kvp[0][d]);
                a.vc[base + (int64_t)pos * HD + d] = __float2half_rn(kvp[1][d]);
            }
    } else {
        for (int e = tid; e < hc * HD; e += NT)
            qs[e / HD][e % HD] = q[(int64_t)t * q_ld + (int64_t)h0 * HD + e] * scale;
    }
    const int p1 = min(pos + 1, p0 + chunk);
    /* Each lane group (the LPP lanes of a row) runs its own online softmax over the
     * rows it visits, a tile at a time (its SPT scores, their max, one rescale), so the
     * tile loop has no block barrier; the groups of a warp merge by shuffles and the
     * NW warps through shared memory at the end. */
    float acc[MG][8], mx[MG], sum[MG];
#pragma unroll
    for (int h = 0; h < MG; h++) {
        mx[h] = -INFINITY;
        sum[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[h][e] = 0.0f;
    }
    __syncthreads(); /* qs (and kvp) written above */
    trace_mark(0);
    if (a.trigger == 2) pdl_trigger();
    for (int ts = s0; ts < p1; ts += TILE) {
        const int np = min(TILE, p1 - ts);
        if (!pre || ts != s0) {
            load_tile(ts, np, p1);
        } else if (pos - ts < np) {
            /* the preloaded tile holds pos, stored above after the wait: its row from
             * shared memory, rounded to f16 as the store rounded it */
#pragma unroll
            for (int j = 0; j < SPT; j++)
                if (j * PPB + warp * PPW + pr == pos - ts) ad_row_f16(kvp[0], kvp[1], sl, kr[j], vr[j]);
        }
#pragma unroll
        for (int h = 0; h < MG; h++) {
            if (h >= hc) break;
            ad_rows<SPT, LPP>(kr, vr, &qs[h][sl * 8], [&](int j) { return j * PPB + warp * PPW + pr < np; }, mx[h],
                              sum[h], acc[h]);
        }
    }
    trace_mark(1);
    if (a.trigger == 3) pdl_trigger();
    /* the groups of a warp (lanes pr = 0.. PPW-1), then the warps */
#pragma unroll
    for (int h = 0; h < MG; h++) {
        if (h >= hc) break;
        ad_merge_groups<LPP>(mx[h], sum[h], acc[h]);
        if (pr == 0) {
#pragma unroll
            for (int e = 0; e < 8; e++) ob[warp][h][sl * 8 + e] = acc[h][e];
            if (sl == 0) {
                wm[warp][h] = mx[h];
                wl[warp][h] = sum[h];
            }
        }
    }
    __syncthreads();
    const int nch = pos / chunk + 1 - c0; /* the chunks with rows: c0 .. pos / chunk */
    /* the block's output rows (h < hc), value(h, d) each, and their q8; the loop
     * bound is block-uniform so q8_store1's shuffles see whole warps */
    auto write_out = [&](auto value) {
        for (int b0 = 0; b0 < hc * HD; b0 += NT) {
            const int e = b0 + tid;
            const int valid = e < hc * HD;
            const int h = valid ? e / HD : 0, d = e % HD;
            const float r = value(h, d);
            const int64_t idx = (int64_t)t * q_ld + (int64_t)(h0 + h) * HD + d;
            if (valid) out[idx] = r;
            if (valid && a.oh) a.oh[idx] = __low2half(f2h2_sat(r, 0.f));
            if (do_q8) q8_store1(q8, idx, r, valid);
        }
    };
    if (nch == 1) {
        /* the only chunk: the block's output, each thread working out the block's max,
         * sum and warp weights of head h itself (the same sums, in the same order, as
         * below), so no second barrier and no one-thread phase before the output. tg128
         * on the 7B (H200, 2026-11-30, bench/RESULTS.md call 66): 677.07 / 672.83 / 675.00
         * vs 674.48 / 669.70 / 672.69, the same tokens */
        trace_mark(2);
        write_out([&](int h, int d) {
            float M, L;
            const float o = ad_merge<NW>([&](int w) { return wm[w][h]; }, [&](int w) { return wl[w][h]; },
                                         [&](int w) { return ob[w][h][d]; }, &M, &L);
            return o / L;
        });
        trace_end();
        return;
    }
    if (tid < hc) {
        /* the block's max and sum per head, and each warp's weight in them */
        float M = -INFINITY, L = 0.0f;
        for (int w = 0; w < NW; w++) M = fmaxf(M, wm[w][tid]);
        for (int w = 0; w < NW; w++) {
            const float cw = softmax_weight(wm[w][tid], M);
            wc[w][tid] = cw;
            L += cw * wl[w][tid];
        }
        mh[tid] = M;
        lh[tid] = L;
    }
    __syncthreads();
    trace_mark(2);
    /* the block's unnormalized output of head h, element d */
    auto merged = [&](int h, int d) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) o += wc[w][h] * ob[w][h][d];
        return o;
    };
    for (int e = tid; e < hc * HD; e += NT) {
        const int h = e / HD, d = e % HD;
        const float o = merged(h, d);
        float *prt = part + (((int64_t)t * a.n_head + h0 + h) * n_chunks + c) * (HD + 2);
        prt[d] = o;
        if (d == 0) {
            prt[HD] = mh[h];
            prt[HD + 1] = lh[h];
        }
    }
    /* the last block of this (token, head group) merges all chunks */
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        const int ci = t * gridDim.y + blockIdx.y;
        const int prev = atomicAdd(&counter[ci], 1);
        is_last = prev == nch - 1;
        if (is_last) counter[ci] = 0;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    write_out([&](int h, int d) {
        const float *ph = part + (((int64_t)t * a.n_head + h0 + h) * n_chunks + c0) * (HD + 2);
        float M = -INFINITY;
        for (int k = 0; k < nch; k++) M = fmaxf(M, __ldcg(ph + k * (HD + 2) + HD));
        float L = 0.0f, o = 0.0f;
        for (int k = 0; k < nch; k++) {
            const float w = expf(__ldcg(ph + k * (HD + 2) + HD) - M);
            L += w * __ldcg(ph + k * (HD + 2) + HD + 1);
            o += w * __ldcg(ph + k * (HD + 2) + d);
        }
        return o / L;
    });
    trace_end();
}

/* Head dim 256 (gemma3; path attn-dec-wide) with up to 4 query heads a kv head, on 8
 * warps, 1, 2 or 4 heads a block (cu_tune.attn_heads): the block's arrays (ob: 8
 * warps x 4 heads x 256 floats, 32 KB at 4) stay inside the 48 KB of static shared
 * memory, and with a row a warp (32 lanes of 8 values) a 64-row tile is 8 rows a lane,
 * as at head dim 128. */
int cu_attn_dec_supported(const cu_ctx *S, int hd, int group, int window) {
    if (hd == 64 || hd == 128) return window == 0 || S->on[CU_PATH_ATTN_DEC_WIDE];
    return hd == 256 && group <= 4 && S->on[CU_PATH_ATTN_DEC_WIDE];
}

/* kernel_attn_dec<HD, mg, nw> for mg in 1, 2, 4, ATT_MAXG (head dim 256: 1, 2, 4)
 * and nw in 4, 8 (head dim 256: 8) */
template <int HD, int NW, typename... Args>
static void attn_dec_launch_nw(cu_ctx *S, int mg, dim3 grid, Args... args) {
    const char *name = HD == 64 ? "attn_dec64" : HD == 128 ? "attn_dec128" : "attn_dec256";
    if (mg == 1) cu_launch(S, name, kernel_attn_dec<HD, 1, NW>, grid, dim3(NW * 32), 0, args...);
    else if (mg == 2) cu_launch(S, name, kernel_attn_dec<HD, 2, NW>, grid, dim3(NW * 32), 0, args...);
    else if (mg == 4 || HD == 256) cu_launch(S, name, kernel_attn_dec<HD, 4, NW>, grid, dim3(NW * 32), 0, args...);
    else if constexpr (HD < 256) cu_launch(S, name, kernel_attn_dec<HD, ATT_MAXG, NW>, grid, dim3(NW * 32), 0, args...);
}
template <int HD, typename... Args>
static void attn_dec_launch(cu_ctx *S, int mg, int nw, dim3 grid, Args... args) {
    if (nw == 8 || HD == 256) attn_dec_launch_nw<HD, 8>(S, mg, grid, args...);
    else if constexpr (HD < 256) attn_dec_launch_nw<HD, 4>(S, mg, grid, args...);
}

void cu_attn_split(cu_ctx *S, const cu_attn_args *a, const float *q, float *out, float *part, int *counter,
                   int chunk, int n_chunks, const cu_q8 *q8) {
    const int G = a->n_head / a->n_kv;
    const int nsub = (G + ATT_MAXG - 1) / ATT_MAXG;
    const float scale = 1.0f / sqrtf((float)a->hd);
    dim3 grid(n_chunks, a->n_kv * nsub, a->n);
    const int do_q8 = q8 && a->hd % 32 == 0;
    cu_q8 qq = q8 ? *q8 : cu_q8{};
    /* (the one-token kernel reads the f16 cache only) */
    if (counter && !a->kq && cu_attn_dec_supported(S, a->hd, G, a->window)) {
        /* heads per block: ATT_MAXG, or with a.fit the power of two >= G (<= ATT_MAXG),
         * or at head dims 128 (with a.fit) and 256 (always fitted) cu_tune.attn_heads
         * where that is 1 or 2 (a kv head's group over several blocks) */
        const int fit = a->fit || a->hd == 256;
        const int heads = S->tune.attn_heads;
        const int split = fit && (a->hd == 128 || a->hd == 256) && (heads == 1 || heads == 2) && heads < G;
        const int mg = split           ? heads
                       : !fit || G > 4 ? ATT_MAXG
                       : G > 2         ? 4
                       : G > 1         ? 2
                                       : 1;
        grid.y = a->n_kv * ((G + mg - 1) / mg); /* (the kernel's nsub; att_count holds n_head a token) */
        if (a->hd == 64)
            attn_dec_launch<64>(S, mg, a->warps, grid, *a, q, part, counter, out, chunk, n_chunks, scale, qq, do_q8);
        else if (a->hd == 128)
            attn_dec_launch<128>(S, mg, a->warps, grid, *a, q, part, counter, out, chunk, n_chunks, scale, qq, do_q8);
        else
            attn_dec_launch<256>(S, mg, a->warps, grid, *a, q, part, counter, out, chunk, n_chunks, scale, qq, do_q8);
        return;
    }
    if (a->kq)
        cu_launch(S, "attn_split_q8", kernel_attn_split<1>, grid, dim3(ATT_THREADS), 0, *a, q, part, chunk, n_chunks,
                  scale);
    else
        cu_launch(S, "attn_split", kernel_attn_split<0>, grid, dim3(ATT_THREADS), 0, *a, q, part, chunk, n_chunks,
                  scale);
    const int threads = (a->hd + 31) / 32 * 32;
    cu_launch(S, "attn_combine", kernel_attn_combine, dim3(a->n_head, a->n), dim3(threads), 0, *a, (const float *)part,
              out, chunk, n_chunks, qq, do_q8);
}

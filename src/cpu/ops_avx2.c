/* ops_avx2.c - AVX2 element-wise ops and attention over the KV cache (f32 rows in place;
 * f16 and q8_0 rows dequantized a chunk at a time).
 * Each has a scalar twin in ref.c (the oracle): the same formula, f32 lanes
 * instead of double accumulators, so results agree to float rounding. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "simd_avx2.h"
#include "util.h"

void cpu_rmsnorm_avx2(float *out, const float *x, const float *w, int dim, float eps) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int i = 0;
    for (; i + 16 <= dim; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        s0 = _mm256_fmadd_ps(a, a, s0);
        s1 = _mm256_fmadd_ps(b, b, s1);
    }
    for (; i + 8 <= dim; i += 8) {
        const __m256 a = _mm256_loadu_ps(x + i);
        s0 = _mm256_fmadd_ps(a, a, s0);
    }
    double ss = hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < dim; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / dim + eps));
    const __m256 sv = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= dim; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv), _mm256_loadu_ps(w + i)));
    for (; i < dim; i++) out[i] = x[i] * scale * w[i];
}

void cpu_swiglu_avx2(float *out, const float *gate, const float *up, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp_ps(_mm256_xor_ps(g, neg));
        const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
    }
    if (i < n) {
        /* the tail through the same vector formula, zero-padded: an element's value must
         * not depend on where its row falls in a batch (expf and exp_ps differ in the last
         * bit; n_ff = 172 put 4 of each stories260K row in the tail of a one-token step and
         * in vectors of an 8-token one, tests/test_batch.c) */
        float g8[8] = { 0 }, u8[8] = { 0 }, o8[8];
        memcpy(g8, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u8, up + i, sizeof(float) * (size_t)(n - i));
        const __m256 g = _mm256_loadu_ps(g8);
        const __m256 e = exp_ps(_mm256_xor_ps(g, neg));
        _mm256_storeu_ps(o8, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(u8)));
        memcpy(out + i, o8, sizeof(float) * (size_t)(n - i));
    }
}

static inline __m256 geglu8(__m256 g, __m256 u) {
    /* 0.5 g (1 + tanh(z)) = g - g / (exp(2z) + 1), z = sqrt(2/pi) (g + 0.044715 g^3); exp_ps
     * saturates for large |z| (exp -> inf: g; exp -> 0: 0) */
    const __m256 k0 = _mm256_set1_ps(2.0f * 0.79788456080286535588f), k1 = _mm256_set1_ps(0.044715f);
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 z2 = _mm256_mul_ps(_mm256_mul_ps(k0, g), _mm256_fmadd_ps(_mm256_mul_ps(k1, g), g, one));
    const __m256 e = exp_ps(z2);
    const __m256 gl = _mm256_sub_ps(g, _mm256_div_ps(g, _mm256_add_ps(e, one)));
    return _mm256_mul_ps(gl, u);
}

void cpu_geglu_avx2(float *out, const float *gate, const float *up, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, geglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g8[8] = { 0 }, u8[8] = { 0 }, o8[8];
        memcpy(g8, gate + i, sizeof(float) * (size_t)(n - i));
        memcpy(u8, up + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(o8, geglu8(_mm256_loadu_ps(g8), _mm256_loadu_ps(u8)));
        memcpy(out + i, o8, sizeof(float) * (size_t)(n - i));
    }
}

void cpu_add_avx2(float *x, const float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) x[i] += y[i];
}

void cpu_rope_head_avx2(float *v, const float *cs, int rope_dim, int neox) {
    const int half = rope_dim / 2;
    int i = 0;
    if (!neox) {
        /* x = [a0 b0 a1 b1 ..], cs = [c0 s0 c1 s1 ..]:
         * even lanes a*c - b*s, odd lanes b*c + a*s (fmaddsub). */
        for (; i + 4 <= half; i += 4) {
            const __m256 x = _mm256_loadu_ps(v + 2 * i), t = _mm256_loadu_ps(cs + 2 * i);
            const __m256 c = _mm256_moveldup_ps(t), s = _mm256_movehdup_ps(t);
            const __m256 xs = _mm256_permute_ps(x, 0xB1);   /* [b0 a0 b1 a1 ..] */
            _mm256_storeu_ps(v + 2 * i, _mm256_fmaddsub_ps(x, c, _mm256_mul_ps(xs, s)));
        }
        for (; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1], a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * c - b * s;
            v[2 * i + 1] = a * s + b * c;
        }
    } else {
        for (; i + 8 <= half; i += 8) {
            const __m256 t0 = _mm256_loadu_ps(cs + 2 * i), t1 = _mm256_loadu_ps(cs + 2 * i + 8);
            /* de-interleave (c, s) pairs: shuffle within lanes, then fix lane order */
            const __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(
                _mm256_castps_pd(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0)));
            const __m256 s = _mm256_castpd_ps(_mm256_permute4x64_pd(
                _mm256_castps_pd(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0)));
            const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
            _mm256_storeu_ps(v + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
            _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
        }
        for (; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1], a = v[i], b = v[i + half];
            v[i] = a * c - b * s;
            v[i + half] = a * s + b * c;
        }
    }
}

/* q . k for 4 keys at once; the 4 horizontal sums share one reduction tree. */
static inline __m128 dot4(const float *q, const float *k0, const float *k1, const float *k2, const float *k3, int hd) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 8 <= hd; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + i), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + i), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + i), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + i), a3);
    }
    const __m256 h01 = _mm256_hadd_ps(a0, a1), h23 = _mm256_hadd_ps(a2, a3);
    const __m256 h = _mm256_hadd_ps(h01, h23);   /* per lane half: s0 s1 s2 s3 */
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    if (i < hd) {
        float t[4] = { 0, 0, 0, 0 };
        for (; i < hd; i++) {
            t[0] += q[i] * k0[i];
            t[1] += q[i] * k1[i];
            t[2] += q[i] * k2[i];
            t[3] += q[i] * k3[i];
        }
        r = _mm_add_ps(r, _mm_loadu_ps(t));
    }
    return r;
}

static inline float dot1(const float *q, const float *k, int hd) {
    __m256 a = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= hd; i += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a);
    float s = hsum_ps(a);
    for (; i < hd; i++) s += q[i] * k[i];
    return s;
}

void cpu_attn_head_avx2(float *out, const float *q, const float *kc, const float *vc, int64_t kv_stride, int n_kv,
                        int hd, float scale, float *att) {
    /* scores */
    int j = 0;
    for (; j + 4 <= n_kv; j += 4) {
        const float *k = kc + (int64_t)j * kv_stride;
        const __m128 s = dot4(q, k, k + kv_stride, k + 2 * kv_stride, k + 3 * kv_stride, hd);
        _mm_storeu_ps(att + j, _mm_mul_ps(s, _mm_set1_ps(scale)));
    }
    for (; j < n_kv; j++) att[j] = dot1(q, kc + (int64_t)j * kv_stride, hd) * scale;
    /* softmax numerator and sum */
    __m256 mv = _mm256_set1_ps(-INFINITY);
    for (j = 0; j + 8 <= n_kv; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(att + j));
    float mx = hmax_ps(mv);
    for (; j < n_kv; j++) mx = fmaxf(mx, att[j]);
    const __m256 mxv = _mm256_set1_ps(mx);
    __m256 sv = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n_kv; j += 8) {
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(att + j), mxv));
        _mm256_storeu_ps(att + j, e);
        sv = _mm256_add_ps(sv, e);
    }
    double sum = hsum_ps(sv);
    for (; j < n_kv; j++) {
        att[j] = expf(att[j] - mx);
        sum += att[j];
    }
    const float inv = (float)(1.0 / sum);
    /* out = sum_j p_j v_j, 64 output values (8 registers) per pass over the keys */
    for (int i0 = 0; i0 < hd; i0 += 64) {
        const int w = hd - i0 < 64 ? hd - i0 : 64;
        if (w == 64) {
            __m256 o[8];
            for (int r = 0; r < 8; r++) o[r] = _mm256_setzero_ps();
            for (j = 0; j < n_kv; j++) {
                const __m256 p = _mm256_set1_ps(att[j]);
                const float *v = vc + (int64_t)j * kv_stride + i0;
                for (int r = 0; r < 8; r++) o[r] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * r), o[r]);
            }
            const __m256 iv = _mm256_set1_ps(inv);
            for (int r = 0; r < 8; r++) _mm256_storeu_ps(out + i0 + 8 * r, _mm256_mul_ps(o[r], iv));
        } else {
            for (int i = 0; i < w; i++) out[i0 + i] = 0.0f;
            for (j = 0; j < n_kv; j++) {
                const float p = att[j];
                const float *v = vc + (int64_t)j * kv_stride + i0;
                for (int i = 0; i < w; i++) out[i0 + i] += p * v[i];
            }
            for (int i = 0; i < w; i++) out[i0 + i] *= inv;
        }
    }
}

/* Values e0 .. e0 + n - 1 of a cache row (cpu_kv_load_ref's contract, the same bits). */
void cpu_kv_load_avx2(int type, const void *row, int e0, int n, float *dst) {
    if (type == QTYPE_F32) {
        memcpy(dst, (const float *)row + e0, sizeof(float) * (size_t)n);
        return;
    }
    if (type == QTYPE_F16) {
        const uint16_t *h = (const uint16_t *)row + e0;
        int i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
        for (; i < n; i++) dst[i] = _cvtsh_ss(h[i]);
        return;
    }
    /* q8_0: the slice block by block; 8 values a step where a block's part allows */
    const block_q8_0 *b = row;
    for (int e = e0; e < e0 + n;) {
        const block_q8_0 *blk = &b[e / QK8_0];
        const int j0 = e % QK8_0, j1 = MF_MIN(QK8_0, j0 + (e0 + n - e));
        const float d = _cvtsh_ss(blk->d);
        const __m256 dv = _mm256_set1_ps(d);
        float *o = dst + (e - e0);
        int j = j0;
        for (; j + 8 <= j1; j += 8, o += 8) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk->qs + j)));
            _mm256_storeu_ps(o, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(q)));
        }
        for (; j < j1; j++) *o++ = d * (float)blk->qs[j];
        e += j1 - j0;
    }
}

/* Where a group kernel's K or V rows come from: the rows of a cache of `type` (row
 * bytes apart), values e0 .. e0 + hd - 1 of each. An f32 cache is read in place; the
 * other types are dequantized a chunk of rows at a time into buf ([ATTN_CHUNK][hd]),
 * once for the G heads, and read from there with the same arithmetic. */
typedef struct attn_rows {
    const uint8_t *c;
    int type;
    size_t row;
    int e0;
    float *buf;
} attn_rows;

/* Rows j0 .. j1 - 1: their first value's address and *stride, the floats between rows. */
static inline const float *attn_chunk(const attn_rows *r, int j0, int j1, int hd, int64_t *stride) {
    if (r->type == QTYPE_F32) {
        *stride = (int64_t)(r->row / sizeof(float));
        return (const float *)(r->c + (size_t)j0 * r->row) + r->e0;
    }
    *stride = hd;
    float *o = r->buf;
    if (r->type == QTYPE_Q8_0 && r->e0 % QK8_0 == 0 && hd % QK8_0 == 0) {
        /* the usual shape (head dim 64, 128, 256): whole blocks, 32 codes a load, inline
         * (the same products as cpu_kv_load_avx2). At --ctx 2048, SmolLM2's prefill spent
         * 3.9 s in attention with cpu_kv_load_avx2 a row, 1.7 s with the f32 cache */
        for (int j = j0; j < j1; j++) {
            const block_q8_0 *b = (const block_q8_0 *)(r->c + (size_t)j * r->row) + r->e0 / QK8_0;
            for (int k = 0; k < hd / QK8_0; k++, o += QK8_0) {
                const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[k].d));
                const __m256i q = _mm256_loadu_si256((const __m256i *)b[k].qs);
                const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
                _mm256_storeu_ps(o, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
                _mm256_storeu_ps(o + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
                _mm256_storeu_ps(o + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
                _mm256_storeu_ps(o + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
            }
        }
    } else if (r->type == QTYPE_F16 && hd % 8 == 0) {
        for (int j = j0; j < j1; j++) {
            const uint16_t *h = (const uint16_t *)(r->c + (size_t)j * r->row) + r->e0;
            for (int i = 0; i < hd; i += 8, o += 8) _mm256_storeu_ps(o, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
        }
    } else {
        for (int j = j0; j < j1; j++) cpu_kv_load_avx2(r->type, r->c + (size_t)j * r->row, r->e0, hd, o + (int64_t)(j - j0) * hd);
    }
    return r->buf;
}

/* GQA group: the G query heads that share one KV head, in chunks of keys so each
 * K and V row is read from L2 once per group instead of once per head (the rows
 * of a chunk stay in L1 while the G heads use them). q, out: [G][hd] contiguous;
 * att: scratch [G][n_kv]. Same arithmetic per head as cpu_attn_head_avx2. */
static void attn_group(float *out, const float *q, int G, const attn_rows *kr, const attn_rows *vr, int n_kv, int hd,
                       float scale, float *att) {
    for (int j0 = 0; j0 < n_kv; j0 += CPU_ATTN_CHUNK) {
        const int j1 = j0 + CPU_ATTN_CHUNK < n_kv ? j0 + CPU_ATTN_CHUNK : n_kv;
        int64_t kv_stride;
        const float *kc = attn_chunk(kr, j0, j1, hd, &kv_stride); /* row j at kc + (j - j0) * stride */
        for (int g = 0; g < G; g++) {
            const float *qg = q + (int64_t)g * hd;
            float *ag = att + (int64_t)g * n_kv;
            int j = j0;
            for (; j + 4 <= j1; j += 4) {
                const float *k = kc + (int64_t)(j - j0) * kv_stride;
                const __m128 s = dot4(qg, k, k + kv_stride, k + 2 * kv_stride, k + 3 * kv_stride, hd);
                _mm_storeu_ps(ag + j, _mm_mul_ps(s, _mm_set1_ps(scale)));
            }
            for (; j < j1; j++) ag[j] = dot1(qg, kc + (int64_t)(j - j0) * kv_stride, hd) * scale;
        }
    }
    for (int g = 0; g < G; g++) {
        float *ag = att + (int64_t)g * n_kv;
        __m256 mv = _mm256_set1_ps(-INFINITY);
        int j = 0;
        for (; j + 8 <= n_kv; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(ag + j));
        float mx = hmax_ps(mv);
        for (; j < n_kv; j++) mx = fmaxf(mx, ag[j]);
        const __m256 mxv = _mm256_set1_ps(mx);
        __m256 sv = _mm256_setzero_ps();
        for (j = 0; j + 8 <= n_kv; j += 8) {
            const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(ag + j), mxv));
            _mm256_storeu_ps(ag + j, e);
            sv = _mm256_add_ps(sv, e);
        }
        double sum = hsum_ps(sv);
        for (; j < n_kv; j++) {
            ag[j] = expf(ag[j] - mx);
            sum += ag[j];
        }
        /* fold 1/sum into the weights: out = sum_j (p_j / sum) v_j */
        const __m256 iv = _mm256_set1_ps((float)(1.0 / sum));
        for (j = 0; j + 8 <= n_kv; j += 8) _mm256_storeu_ps(ag + j, _mm256_mul_ps(_mm256_loadu_ps(ag + j), iv));
        const float inv = (float)(1.0 / sum);
        for (; j < n_kv; j++) ag[j] *= inv;
    }
    for (int64_t i = 0; i < (int64_t)G * hd; i++) out[i] = 0.0f;
    for (int j0 = 0; j0 < n_kv; j0 += CPU_ATTN_CHUNK) {
        const int j1 = j0 + CPU_ATTN_CHUNK < n_kv ? j0 + CPU_ATTN_CHUNK : n_kv;
        int64_t kv_stride;
        const float *vc = attn_chunk(vr, j0, j1, hd, &kv_stride);
        for (int g = 0; g < G; g++) {
            const float *ag = att + (int64_t)g * n_kv;
            float *og = out + (int64_t)g * hd;
            int i0 = 0;
            for (; i0 + 32 <= hd; i0 += 32) {
                __m256 o0 = _mm256_loadu_ps(og + i0), o1 = _mm256_loadu_ps(og + i0 + 8),
                       o2 = _mm256_loadu_ps(og + i0 + 16), o3 = _mm256_loadu_ps(og + i0 + 24);
                for (int j = j0; j < j1; j++) {
                    const __m256 p = _mm256_set1_ps(ag[j]);
                    const float *v = vc + (int64_t)(j - j0) * kv_stride + i0;
                    o0 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v), o0);
                    o1 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8), o1);
                    o2 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 16), o2);
                    o3 = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 24), o3);
                }
                _mm256_storeu_ps(og + i0, o0);
                _mm256_storeu_ps(og + i0 + 8, o1);
                _mm256_storeu_ps(og + i0 + 16, o2);
                _mm256_storeu_ps(og + i0 + 24, o3);
            }
            for (; i0 < hd; i0++) {
                float o = og[i0];
                for (int j = j0; j < j1; j++) o += ag[j] * vc[(int64_t)(j - j0) * kv_stride + i0];
                og[i0] = o;
            }
        }
    }
}

void cpu_attn_group_avx2(float *out, const float *q, int G, const float *kc, const float *vc, int64_t kv_stride,
                         int n_kv, int hd, float scale, float *att) {
    const size_t row = sizeof(float) * (size_t)kv_stride;
    const attn_rows kr = { (const uint8_t *)kc, QTYPE_F32, row, 0, NULL }, vr = { (const uint8_t *)vc, QTYPE_F32, row, 0, NULL };
    attn_group(out, q, G, &kr, &vr, n_kv, hd, scale, att);
}

void cpu_attn_group_kv_avx2(float *out, const float *q, int G, const void *kc, const void *vc, int type_k, int type_v,
                            size_t row_k, size_t row_v, int e0, int n_kv, int hd, float scale, float *att, float *buf) {
    const attn_rows kr = { kc, type_k, row_k, e0, buf }, vr = { vc, type_v, row_v, e0, buf };
    attn_group(out, q, G, &kr, &vr, n_kv, hd, scale, att);
}

/* ref.c - scalar reference CPU ops: plain loops, double accumulation where it
 * costs nothing to be exact. Every SIMD kernel is tested against these. */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "quant.h"
#include "util.h"

void cpu_ref_matmul(float *out, int ld_out, const float *x, const mf_weight *w, const mf_weight *bias,
                    int n, int64_t r0, int64_t r1, float *wrow) {
    const int64_t cols = w->cols;
    const uint64_t row_bytes = qtype_row_size(w->type, (uint64_t)cols);
    const uint8_t *base = w->host;
    for (int64_t r = r0; r < r1; r++) {
        quant_dequantize_row(w->type, base + (uint64_t)r * row_bytes, wrow, cols);
        float b = 0.0f;
        if (bias && bias->host) {
            float tmp;
            const uint64_t bsz = qtype_row_size(bias->type, 1);
            quant_dequantize_row(bias->type, (const uint8_t *)bias->host + (uint64_t)r * bsz, &tmp, 1);
            b = tmp;
        }
        for (int t = 0; t < n; t++) {
            const float *xt = x + (int64_t)t * cols;
            double acc = 0.0;
            for (int64_t c = 0; c < cols; c++) acc += (double)wrow[c] * (double)xt[c];
            out[(int64_t)t * ld_out + r] = (float)acc + b;
        }
    }
}

void cpu_ref_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (int64_t)t * dim;
        float *ot = out + (int64_t)t * dim;
        double ss = 0.0;
        for (int i = 0; i < dim; i++) ss += (double)xt[i] * xt[i];
        float scale = (float)(1.0 / sqrt(ss / dim + eps));
        for (int i = 0; i < dim; i++) ot[i] = xt[i] * scale * w[i];
    }
}

/* Pair i rotated by rope_cs's angle (theta_i = pos * base^(-2i/rope_dim) with the file's
 * scaling: rope.h). NORM rotates (x[2i], x[2i+1]); NEOX rotates (x[i], x[i + rope_dim/2]).
 * Dims beyond rope_dim pass through. */
void cpu_ref_rope(float *x, const int32_t *pos, int n, int n_heads, int head_dim, const mf_rope *r) {
    const int half = r->dim / 2;
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((int64_t)t * n_heads + h) * head_dim;
            for (int i = 0; i < half; i++) {
                float c, s;
                rope_cs(r, pos[t], i, &c, &s);
                int i0 = r->mode == MF_ROPE_NEOX ? i : 2 * i;
                int i1 = r->mode == MF_ROPE_NEOX ? i + half : 2 * i + 1;
                float a = v[i0], b = v[i1];
                v[i0] = a * c - b * s;
                v[i1] = a * s + b * c;
            }
        }
    }
}

/* ---- KV cache rows (f32, f16, q8_0): see cpu.h ---- */

void cpu_kv_store_row(int type, void *dst, const float *src, int n) {
    if (type == QTYPE_F32) memcpy(dst, src, sizeof(float) * (size_t)n);
    else quant_quantize_row((uint32_t)type, src, dst, n); /* f16: round to nearest even; q8_0: ggml's _ref */
}

void cpu_kv_load_ref(int type, const void *row, int e0, int n, float *dst) {
    if (type == QTYPE_F32) {
        memcpy(dst, (const float *)row + e0, sizeof(float) * (size_t)n);
    } else if (type == QTYPE_F16) {
        const uint16_t *h = (const uint16_t *)row + e0;
        for (int i = 0; i < n; i++) dst[i] = mf_f16_to_f32(h[i]);
    } else { /* QTYPE_Q8_0: element e is qs[e % 32] of block e / 32, times its d */
        const block_q8_0 *b = row;
        for (int i = 0; i < n; i++) {
            const int e = e0 + i;
            dst[i] = mf_f16_to_f32(b[e / QK8_0].d) * (float)b[e / QK8_0].qs[e % QK8_0];
        }
    }
}

/* Values e0 .. e0 + n - 1 of cached row j (rows of row_bytes): in place for f32, else
 * dequantized into buf. */
static const float *ref_kv_row(const void *cache, int type, size_t row_bytes, int j, int e0, int n, float *buf) {
    const uint8_t *r = (const uint8_t *)cache + (size_t)j * row_bytes;
    if (type == QTYPE_F32) return (const float *)r + e0;
    cpu_kv_load_ref(type, r, e0, n, buf);
    return buf;
}

void cpu_ref_attention_token_kv(float *out, const float *q, const void *kc, const void *vc, int type_k, int type_v,
                                int n_kv, int n_head, int n_head_kv, int hd, float *att, float *buf) {
    const int group = n_head / n_head_kv;
    const int kv_dim = n_head_kv * hd;
    const size_t row_k = (size_t)qtype_row_size((uint32_t)type_k, (uint64_t)kv_dim);
    const size_t row_v = (size_t)qtype_row_size((uint32_t)type_v, (uint64_t)kv_dim);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < n_head; h++) {
        const int kh = h / group;
        const float *qh = q + h * hd;
        float mx = -INFINITY;
        for (int j = 0; j < n_kv; j++) {
            const float *k = ref_kv_row(kc, type_k, row_k, j, kh * hd, hd, buf);
            double s = 0.0;
            for (int i = 0; i < hd; i++) s += (double)qh[i] * k[i];
            att[j] = (float)s * scale;
            if (att[j] > mx) mx = att[j];
        }
        double sum = 0.0;
        for (int j = 0; j < n_kv; j++) {
            att[j] = expf(att[j] - mx);
            sum += att[j];
        }
        float *oh = out + h * hd;
        for (int i = 0; i < hd; i++) oh[i] = 0.0f;
        for (int j = 0; j < n_kv; j++) {
            const float p = (float)(att[j] / sum);
            const float *v = ref_kv_row(vc, type_v, row_v, j, kh * hd, hd, buf);
            for (int i = 0; i < hd; i++) oh[i] += p * v[i];
        }
    }
}

void cpu_ref_attention_token(float *out, const float *q, const float *kc, const float *vc, int n_kv,
                             int n_head, int n_head_kv, int hd, float *att) {
    cpu_ref_attention_token_kv(out, q, kc, vc, QTYPE_F32, QTYPE_F32, n_kv, n_head, n_head_kv, hd, att, NULL);
}

void cpu_ref_swiglu(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void cpu_weight_f32(const mf_weight *w, float *dst) {
    quant_dequantize_row(w->type, w->host, dst, w->cols);
}

/* gelu_tanh(g) * up in double: the oracle of cpu_geglu_avx2 (llama.cpp's ggml_gelu is the
 * same formula, read from a table of f16 inputs on its CPU). */
void cpu_ref_geglu(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const double g = gate[i];
        const double gl = 0.5 * g * (1.0 + tanh(0.79788456080286535588 * g * (1.0 + 0.044715 * g * g)));
        out[i] = (float)(gl * up[i]);
    }
}

void cpu_ref_softcap(float *x, float c, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(c * tanh((double)x[i] / c));
}

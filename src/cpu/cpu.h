/* cpu.h - CPU backend internals shared by backend_cpu.c and the kernel files.
 *
 * ref.c holds the scalar reference ops (the oracle for every SIMD kernel);
 * backend_cpu.c wires ops into the mf_backend interface and chooses, per op,
 * the fastest available kernel. */
#ifndef MINFER_CPU_H
#define MINFER_CPU_H

#include <stdint.h>

#include "backend.h"
#include "model.h"

/* ---- scalar reference ops (ref.c) ---- */

/* out[t][r] = sum_c W[r][c] * x[t][c] (+ bias[r]) for rows r in [r0, r1).
 * ld_out = row stride of out (normally w->rows). wrow: scratch of w->cols floats. */
void cpu_ref_matmul(float *out, int ld_out, const float *x, const mf_weight *w, const mf_weight *bias,
                    int n, int64_t r0, int64_t r1, float *wrow);
void cpu_ref_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps);
void cpu_ref_rope(float *x, const int32_t *pos, int n, int n_heads, int head_dim, const mf_rope *r);
/* Causal GQA attention of one token against kv cache rows 0..n_kv-1.
 * q, out: [n_head][hd]; kc, vc: [n_kv][n_head_kv][hd] (f32). att: scratch [n_kv]. */
void cpu_ref_attention_token(float *out, const float *q, const float *kc, const float *vc, int n_kv,
                             int n_head, int n_head_kv, int hd, float *att);
void cpu_ref_swiglu(float *out, const float *gate, const float *up, int64_t n);
/* Dequantizes 1-D norm/bias weights to f32 (they are tiny): dst[w->cols]. */
void cpu_weight_f32(const mf_weight *w, float *dst);

#endif

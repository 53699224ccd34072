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
/* The same over cache rows of types type_k / type_v (f32, f16, q8_0: a row is
 * n_head_kv * hd values, qtype_row_size bytes), each row dequantized (cpu_kv_load_ref)
 * before the f32 arithmetic above, which an f32 row reads in place. buf: scratch [hd]
 * (unused when both are f32). */
void cpu_ref_attention_token_kv(float *out, const float *q, const void *kc, const void *vc, int type_k, int type_v,
                                int n_kv, int n_head, int n_head_kv, int hd, float *att, float *buf);

/* ---- KV cache rows (ref.c) ----
 * A cached position is one row of kv_dim = n_head_kv * hd values per layer, K and V
 * apart, of the context's cache type: f32 (the CPU's default), f16, or q8_0 (blocks of
 * 32 values along the row, ggml's block_q8_0; with a head dim of 32 or more each block
 * lies inside one head, below that a block spans 32 / hd heads). */
/* dst (the row's bytes) = src[0..n) as type; q8_0: n % 32 == 0. */
void cpu_kv_store_row(int type, void *dst, const float *src, int n);
/* dst[0..n) = values e0 .. e0 + n - 1 of a row of type (any e0, n inside the row): the
 * reference that cpu_kv_load_avx2 matches bit for bit (a value is d * q or an f16, exact
 * in f32). */
void cpu_kv_load_ref(int type, const void *row, int e0, int n, float *dst);
void cpu_ref_swiglu(float *out, const float *gate, const float *up, int64_t n);
/* Dequantizes 1-D norm/bias weights to f32 (they are tiny): dst[w->cols]. */
void cpu_weight_f32(const mf_weight *w, float *dst);

#endif

/* kernels.h - CPU compute kernels: 8-bit activation blocks, row dot products,
 * interleaved ("x8") weight packing with GEMM micro-kernels, and element-wise ops.
 *
 * Two implementations of everything here:
 *   - scalar C (qdot.c, pack.c): the oracle for the integer maths, runs anywhere;
 *   - AVX2/FMA/F16C (*_avx2.c): what the backend runs when the CPU has AVX2.
 * The f32 reference ops of ref.c remain the oracle for the end result (they use
 * f32 activations; the kernels here quantize activations to 8 bits like
 * llama.cpp, so they agree with ref.c to a tolerance, not exactly).
 *
 * Matmul data flow (out[t][r] = W[r] . x[t]):
 *
 *   x[t] (f32) --cpu_quantize_*--> 8-bit blocks (block_q8a32 / block_q8a256)
 *   W (GGUF rows) --cpu_pack--> groups of 8 rows, interleaved 4 bytes per row
 *   micro-kernel: 8 rows x T tokens (T <= 4): one 32-byte weight load serves
 *   8 rows x 4 values, multiplied with a 4-byte broadcast of each token's
 *   activations (vpmaddubsw), so weights are read once per T tokens and every
 *   32-bit lane of the accumulators belongs to one row (no horizontal sums).
 *
 * Formats without a packed kernel, and rows that are not packed, use the row
 * dot products cpu_vdot_* (one row x one token, lanes = positions). */
#ifndef MINFER_CPU_KERNELS_H
#define MINFER_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "quant.h"

/* ------------------------------------------------------------------------- */
/* 8-bit activation blocks                                                   */
/* ------------------------------------------------------------------------- */

/* 32 activations for 32-value weight formats (q4_0 .. q8_0, iq4_nl): x[i] ~ d * qs[i].
 * s = d * sum(qs) serves the formats with an offset or a min. |qs| <= 127. */
typedef struct {
    float d;
    float s;
    int8_t qs[32];
} block_q8a32;

/* 256 activations for K-quant and iq4_xs weights: x[i] ~ d * qs[i], |qs| <= 127.
 * bs16[j] = sum of qs[16j..16j+15] (the 16-value groups of q2_K/q3_K/q6_K: q2_K's
 * mins, the -4 and -32 offsets); bs32[j] = sum of qs[32j..32j+31] (q4_K/q5_K's
 * sub-blocks, the mins). */
typedef struct {
    float d;
    int16_t bs16[16];
    int16_t bs32[8];
    int8_t qs[256];
} block_q8a256;

_Static_assert(sizeof(block_q8a32) == 40, "q8a32 size");
_Static_assert(sizeof(block_q8a256) == 308, "q8a256 size");

typedef enum cpu_act {
    CPU_ACT_F32 = 0,   /* f32/f16/bf16 weights: activations stay f32 */
    CPU_ACT_Q8A32,     /* 32-value formats */
    CPU_ACT_Q8A256,    /* K-quants */
} cpu_act;

/* Activation format for a weight type. */
cpu_act cpu_act_kind(uint32_t wtype);
/* Bytes of one quantized activation row of n values (n a multiple of the block). */
size_t cpu_act_row_size(cpu_act kind, int64_t n);

/* Quantization (n a multiple of 32 / 256). d = amax/127, q = round-half-even(x * 127/amax),
 * so the scalar and AVX2 versions agree bit for bit. */
void cpu_quantize_q8a32(const float *x, block_q8a32 *y, int64_t n);
void cpu_quantize_q8a256(const float *x, block_q8a256 *y, int64_t n);
void cpu_quantize_q8a32_avx2(const float *x, block_q8a32 *y, int64_t n);
void cpu_quantize_q8a256_avx2(const float *x, block_q8a256 *y, int64_t n);

/* ------------------------------------------------------------------------- */
/* Row dot products: one weight row (GGUF layout) . one activation row       */
/* ------------------------------------------------------------------------- */

/* a points at f32 values for CPU_ACT_F32 types, else at quantized blocks of the
 * type's cpu_act_kind. n = values in the row. */
typedef float (*cpu_vdot_fn)(int64_t n, const void *w, const void *a);

/* Scalar: integer dot per block, combined in float exactly like the AVX2 kernels
 * (the oracle for exact tests). NULL for types without one. */
cpu_vdot_fn cpu_vdot_scalar(uint32_t wtype);
/* AVX2: NULL for types without a kernel. */
cpu_vdot_fn cpu_vdot_avx2(uint32_t wtype);

/* Float-weight tile (f32/f16/bf16 x f32 activations): out[t*ld_out + r] for
 * r < nr (<= 4), t < nt (<= 4); rows at w + r*w_stride bytes, tokens at x + t*ldx. */
void cpu_tile_float_avx2(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int nr,
                         const float *x, int64_t ldx, int nt, float *out, int64_t ld_out);

/* ------------------------------------------------------------------------- */
/* Packed weights: groups of 8 rows, interleaved                              */
/* ------------------------------------------------------------------------- */

/* Layout of one "x8 block" (8 rows x one GGUF block) per type, in order:
 *   q4_0: f16 d[8]; u8 qs[4][8][4]                          144 bytes
 *   q4_1: f16 d[8]; f16 m[8]; u8 qs[4][8][4]                160
 *   q5_0: f16 d[8]; u8 qh[8][4]; u8 qs[4][8][4]             176
 *   q5_1: f16 d[8]; f16 m[8]; u8 qh[8][4]; u8 qs[4][8][4]   192
 *   q8_0: f16 d[8]; i8 qs[8][8][4]                          272
 *   q4_K: f16 d[8]; f16 dmin[8]; u8 sc[8][8]; u8 m[4][8][2]; u8 qs[4][8][8][4]        1184
 *   q5_K: as q4_K, then u8 qh[4][2][8][4]                                             1440
 *   q6_K: f16 d[8]; i8 sc[8][8][2]; u8 ql[4][8][8][4]; u8 qh[4][4][8][4]              1680
 *   q2_K: f16 d[8]; f16 dmin[8]; u8 scm[8][8][2]; u8 qs[16][8][4]                       672
 *   q3_K: f16 d[8]; i8 sc[8][8][2]; u8 qs[16][8][4]; u8 qh[8][8][4]                      912
 *   iq4_nl: f16 d[8]; u8 qs[4][8][4] (q4_0's)                                            144
 *   iq4_xs: f16 d[8]; i8 sc[8][8]; u8 qs[8][4][8][4]                                     1104
 * qs[..][r][0..3] are the 4 bytes of row r for one 32-byte load: for 32-value
 * formats unit k holds GGUF bytes qs[4k..4k+3] (low nibbles = values 4k.., high
 * nibbles = values 16+4k..); for K-quants unit (g,k) holds bytes qs[32g+4k..]
 * (low nibbles: values 64g+4k.., high: 64g+32+4k..); iq4_xs unit (j,k) is iq4_nl's
 * unit k of sub-block j. q2_K/q3_K unit g is 16-value group g: bits 2k..2k+1 of
 * byte b = the 2-bit code of value 16g+4k+b. Scales [p][r][e] are pairs of groups
 * (2p, 2p+1) per row (q2_K: scale | min << 4; q3_K, iq4_xs: code - 32, signed).
 * High bits (q5, q6, q3_K) are re-packed so that one shift and one mask extract
 * them per 32-byte unit; see pack.c for the bit positions. Rows past the end of
 * the matrix are zero. */
typedef struct cpu_packed {
    uint32_t type;
    int64_t rows, cols;
    int64_t n_groups;       /* ceil(rows / 8) */
    size_t group_bytes;     /* bytes of one group of 8 rows (all its x8 blocks) */
    uint8_t *data;          /* [n_groups][group_bytes], 64-byte aligned */
} cpu_packed;

/* Bytes of one x8 block of the type, 0 when the type has no packed layout. */
size_t cpu_pack_block_bytes(uint32_t type);
/* Packs rows [g0*8, g1*8) of W (GGUF rows of row_bytes each) into p->data
 * (p->type/rows/cols/n_groups/group_bytes set by cpu_pack_init). */
int cpu_pack_init(cpu_packed *p, uint32_t type, int64_t rows, int64_t cols);
void cpu_pack_groups(const cpu_packed *p, const void *w, int64_t g0, int64_t g1);

/* Micro-kernel: out[t][r] (t < nt <= 4, r < 8, row stride 8) = group . activations
 * of nt tokens (act rows act_stride bytes apart, format cpu_act_kind(type)). */
typedef void (*cpu_gemm_fn)(const uint8_t *group, int64_t cols, const void *act, size_t act_stride, int nt,
                            float out[][8]);
/* Scalar micro-kernel (the oracle for the packed layout) and the AVX2 one;
 * NULL when the type has none. */
cpu_gemm_fn cpu_gemm_scalar(uint32_t type);
cpu_gemm_fn cpu_gemm_avx2(uint32_t type);
int cpu_gemm_nt(uint32_t type);   /* tokens per call of the AVX2 kernel that run fastest */

/* Prefill variant for q4_K/q5_K/q6_K: a group expanded once into int8 values and ready
 * scale vectors (cpu_unpack_bytes(type, cols) bytes, layout in gemm_avx2.c), then
 * read by cpu_gemm_unpacked_avx2(type) for every cpu_gemm_unpacked_nt(type)
 * tokens of a block ("expanded" path). 0 / NULL for types without it. */
size_t cpu_unpack_bytes(uint32_t type, int64_t cols);
void cpu_unpack_group_avx2(uint32_t type, const uint8_t *group, int64_t cols, uint8_t *dst);
cpu_gemm_fn cpu_gemm_unpacked_avx2(uint32_t type);
int cpu_gemm_unpacked_nt(uint32_t type);   /* tokens per call to use (<= 4) */

/* ------------------------------------------------------------------------- */
/* Kernel sets: the packed GEMM family of one instruction set                 */
/* ------------------------------------------------------------------------- */

/* One instruction set's packed micro-kernels, its prefill expansion and the
 * expanded kernel that reads it (an expanded tile is only valid for the set
 * that wrote it). All read the same x8 layout and give the same bits: the
 * integer dot of each block is exact and the float epilogue of every set is
 * the AVX2 one, in the same order. The backend picks one set per backend
 * (paths_cpu.c); the row dots, quantization and element-wise ops stay AVX2. */
typedef struct cpu_kernels {
    const char *name;                                 /* "avx2", "avx512", "avx512-vnni" */
    cpu_gemm_fn (*gemm)(uint32_t type);               /* packed micro-kernel, NULL: none */
    int (*gemm_nt)(uint32_t type);                    /* tokens per call that run fastest */
    size_t (*unpack_bytes)(uint32_t type, int64_t cols);  /* 0: no expanded path */
    void (*unpack_group)(uint32_t type, const uint8_t *group, int64_t cols, uint8_t *dst);
    cpu_gemm_fn (*gemm_unpacked)(uint32_t type);
    int (*gemm_unpacked_nt)(uint32_t type);
    /* Token blocks of at least this many tokens take the expanded path; 0: never.
     * Measured per set (bench/RESULTS.md, 'CPU prefill under load, and when to
     * expand K-quants'): gemma-3-270m Q4_K_M, 1 thread, pp8/16/64 tok/s expanded vs
     * packed: avx2 498/487-514/676-718 vs 514/499-511/605-618; avx512 520-537/696-722/
     * 916-925 vs 621-645/725-746/819-868; avx512-vnni 531/791/964 (pp256 1004) vs
     * 715/926/1088 (1100). */
    int unpack_min;
} cpu_kernels;

extern const cpu_kernels cpu_kernels_avx2;        /* gemm_avx2.c */
extern const cpu_kernels cpu_kernels_avx512;      /* gemm_avx512.c: F/BW/DQ/VL, vpmaddubsw + vpmaddwd */
extern const cpu_kernels cpu_kernels_avx512vnni;  /* gemm_avx512_vnni.c: the same with vpdpbusd */

/* ------------------------------------------------------------------------- */
/* Element-wise and attention kernels (AVX2)                                  */
/* ------------------------------------------------------------------------- */

void cpu_rmsnorm_avx2(float *out, const float *x, const float *w, int dim, float eps);  /* one row */
void cpu_swiglu_avx2(float *out, const float *gate, const float *up, int64_t n);
/* out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU); out may equal gate. tanh(z) is computed as
 * 1 - 2 / (exp(2z) + 1) with exp_ps; a tail shorter than 8 goes through the same vector
 * formula (an element's value does not depend on where it falls in a row). The scalar
 * oracles (ref.c, double): */
void cpu_geglu_avx2(float *out, const float *gate, const float *up, int64_t n);
void cpu_ref_geglu(float *out, const float *gate, const float *up, int64_t n);
/* x[i] = c * tanh(x[i] / c) (logit soft-capping): the double oracle; the backend runs it. */
void cpu_ref_softcap(float *x, float c, int64_t n);
void cpu_add_avx2(float *x, const float *y, int64_t n);
/* In-place rotation of one head: v[i0], v[i1] by (cs[2i], cs[2i+1]) = (cos, sin)
 * for i < rope_dim/2, pairs as in cpu_ref_rope. */
void cpu_rope_head_avx2(float *v, const float *cs, int rope_dim, int neox);
/* One query head against n_kv cached rows (stride kv_stride floats):
 * out[hd] = softmax(scale * q.k_j) . v_j. att: scratch [n_kv]. */
void cpu_attn_head_avx2(float *out, const float *q, const float *kc, const float *vc, int64_t kv_stride,
                        int n_kv, int hd, float scale, float *att);
/* The G query heads sharing one KV head (GQA), keys in chunks of CPU_ATTN_CHUNK so each
 * K/V row is read once per group: q, out [G][hd] contiguous; att: scratch [G][n_kv]. */
#define CPU_ATTN_CHUNK 64
void cpu_attn_group_avx2(float *out, const float *q, int G, const float *kc, const float *vc, int64_t kv_stride,
                         int n_kv, int hd, float scale, float *att);
/* The same over cache rows of types type_k / type_v (f32, f16, q8_0; row_k / row_v bytes
 * apart), values e0 .. e0 + hd - 1 of each (the KV head's): a chunk of f16 or q8_0 rows is
 * dequantized (cpu_kv_load_avx2) into buf [CPU_ATTN_CHUNK][hd] for the G heads, so the
 * result is bit for bit cpu_attn_group_avx2's over the dequantized rows. */
void cpu_attn_group_kv_avx2(float *out, const float *q, int G, const void *kc, const void *vc, int type_k, int type_v,
                            size_t row_k, size_t row_v, int e0, int n_kv, int hd, float scale, float *att, float *buf);
/* cpu_kv_load_ref (cpu.h) with F16C / AVX2 conversions: the same bits. */
void cpu_kv_load_avx2(int type, const void *row, int e0, int n, float *dst);

#endif

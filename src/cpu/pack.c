/* pack.c - interleaving weights into groups of 8 rows ("x8 blocks", layouts in
 * kernels.h) and the scalar micro-kernel that reads them back.
 *
 * Packing runs once per weight at backend init. The scalar micro-kernel turns each
 * x8 block back into the 8 GGUF blocks (the exact inverse of packing) and calls
 * the scalar row dot, so a test of the AVX2 micro-kernel against it checks both
 * the layout and the arithmetic.
 *
 * High-bit placement, per 32-byte unit of 8 rows x 4 bytes (r = row, b = byte):
 *   q5_0/q5_1  qh[r][b] bit 2k   = bit 4 of value 4k+b       (low-nibble unit k)
 *                       bit 2k+1 = bit 4 of value 16+4k+b    (high-nibble unit k)
 *   q5_K       qh[g][h][r][b] bit k = bit 4 of value 64g+32h+4k+b
 *   q6_K       qh[s2][kk][r][b] bits 2f..2f+1, f = 2*(k&1) + (s&1), = bits 4..5 of
 *              value 32s+4k+b for sub-block s in {2*s2, 2*s2+1}, k in {2kk, 2kk+1};
 *              ql[s2][k][r][b] low nibble: value 64*s2+4k+b, high: 64*s2+32+4k+b.
 *   q3_K       qh[p][r][b] bit k + 4e = bit 2 of the code of value 16(2p+e)+4k+b
 *              (the low 2 bits: qs[g][r][b] bits 2k..2k+1, value 16g+4k+b). */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "util.h"

size_t cpu_pack_block_bytes(uint32_t type) {
    switch (type) {
    case QTYPE_Q4_0: return 144;
    case QTYPE_Q4_1: return 160;
    case QTYPE_Q5_0: return 176;
    case QTYPE_Q5_1: return 192;
    case QTYPE_Q8_0: return 272;
    case QTYPE_Q4_K: return 1184;
    case QTYPE_Q5_K: return 1440;
    case QTYPE_Q6_K: return 1680;
    case QTYPE_IQ4_NL: return 144;
    case QTYPE_IQ4_XS: return 1104;
    case QTYPE_Q2_K: return 672;
    case QTYPE_Q3_K: return 912;
    default: return 0;
    }
}

int cpu_pack_init(cpu_packed *p, uint32_t type, int64_t rows, int64_t cols) {
    memset(p, 0, sizeof *p);
    const qtype_traits *tr = qtype_get(type);
    const size_t xb = cpu_pack_block_bytes(type);
    if (!tr || !xb || cols % tr->blck || rows <= 0) return -1;
    p->type = type;
    p->rows = rows;
    p->cols = cols;
    p->n_groups = (rows + 7) / 8;
    p->group_bytes = (size_t)(cols / tr->blck) * xb;
    return 0;
}

/* ---- q4 nibble units: byte b of row r of unit k = GGUF qs[4k + b] ---- */

static void put_qs(uint8_t *dst, int units, int r, const uint8_t *qs) {
    for (int k = 0; k < units; k++) memcpy(dst + 32 * k + 4 * r, qs + 4 * k, 4);
}

static void get_qs(const uint8_t *src, int units, int r, uint8_t *qs) {
    for (int k = 0; k < units; k++) memcpy(qs + 4 * k, src + 32 * k + 4 * r, 4);
}

static void put_f16(uint8_t *dst, int r, f16_t v) { memcpy(dst + 2 * r, &v, 2); }
static f16_t get_f16(const uint8_t *src, int r) {
    f16_t v;
    memcpy(&v, src + 2 * r, 2);
    return v;
}

/* q5_0/q5_1 32-bit qh of one row <-> the 4 bytes of qh[r][0..3]. */
static void put_qh5(uint8_t *dst, int r, const uint8_t qh[4]) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
    for (int b = 0; b < 4; b++) {
        uint8_t v = 0;
        for (int k = 0; k < 4; k++) {
            v |= (uint8_t)(((bits >> (4 * k + b)) & 1) << (2 * k));
            v |= (uint8_t)(((bits >> (16 + 4 * k + b)) & 1) << (2 * k + 1));
        }
        dst[4 * r + b] = v;
    }
}

static void get_qh5(const uint8_t *src, int r, uint8_t qh[4]) {
    uint32_t bits = 0;
    for (int b = 0; b < 4; b++) {
        const uint8_t v = src[4 * r + b];
        for (int k = 0; k < 4; k++) {
            bits |= (uint32_t)((v >> (2 * k)) & 1) << (4 * k + b);
            bits |= (uint32_t)((v >> (2 * k + 1)) & 1) << (16 + 4 * k + b);
        }
    }
    memcpy(qh, &bits, 4);
}

/* q2_K / q3_K 2-bit code of value j of a GGUF block (quant.c's layout). */
static int q2k_code(const uint8_t *qs, int j) { return (qs[32 * (j / 128) + j % 32] >> (2 * ((j % 128) / 32))) & 3; }

/* ---- per-type x8 block <-> 8 GGUF blocks ---- */

static void pack_block(uint32_t type, uint8_t *dst, const uint8_t *const src[8]) {
    switch (type) {
    case QTYPE_Q4_0:
        for (int r = 0; r < 8; r++) {
            const block_q4_0 *x = (const block_q4_0 *)src[r];
            put_f16(dst, r, x->d);
            put_qs(dst + 16, 4, r, x->qs);
        }
        break;
    case QTYPE_Q4_1:
        for (int r = 0; r < 8; r++) {
            const block_q4_1 *x = (const block_q4_1 *)src[r];
            put_f16(dst, r, x->d);
            put_f16(dst + 16, r, x->m);
            put_qs(dst + 32, 4, r, x->qs);
        }
        break;
    case QTYPE_Q5_0:
        for (int r = 0; r < 8; r++) {
            const block_q5_0 *x = (const block_q5_0 *)src[r];
            put_f16(dst, r, x->d);
            put_qh5(dst + 16, r, x->qh);
            put_qs(dst + 48, 4, r, x->qs);
        }
        break;
    case QTYPE_Q5_1:
        for (int r = 0; r < 8; r++) {
            const block_q5_1 *x = (const block_q5_1 *)src[r];
            put_f16(dst, r, x->d);
            put_f16(dst + 16, r, x->m);
            put_qh5(dst + 32, r, x->qh);
            put_qs(dst + 64, 4, r, x->qs);
        }
        break;
    case QTYPE_Q8_0:
        for (int r = 0; r < 8; r++) {
            const block_q8_0 *x = (const block_q8_0 *)src[r];
            put_f16(dst, r, x->d);
            put_qs(dst + 16, 8, r, (const uint8_t *)x->qs);
        }
        break;
    case QTYPE_Q4_K:
    case QTYPE_Q5_K:
        for (int r = 0; r < 8; r++) {
            /* q4_K and q5_K share the first fields (d, dmin, scales); q5_K's qs
             * follow its qh. */
            const block_q4_K *x = (const block_q4_K *)src[r];
            const uint8_t *qs = type == QTYPE_Q4_K ? x->qs : ((const block_q5_K *)src[r])->qs;
            put_f16(dst, r, x->d);
            put_f16(dst + 16, r, x->dmin);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                quant_get_scale_min_k4(j, x->scales, &sc, &m);
                dst[32 + 8 * j + r] = sc;
                dst[96 + 16 * (j / 2) + 2 * r + (j & 1)] = m;
            }
            for (int g = 0; g < 4; g++) put_qs(dst + 160 + 256 * g, 8, r, qs + 32 * g);
            if (type == QTYPE_Q5_K) {
                const uint8_t *qh = ((const block_q5_K *)src[r])->qh;
                for (int g = 0; g < 4; g++)
                    for (int h = 0; h < 2; h++)
                        for (int b = 0; b < 4; b++) {
                            uint8_t v = 0;
                            for (int k = 0; k < 8; k++) v |= (uint8_t)(((qh[4 * k + b] >> (2 * g + h)) & 1) << k);
                            dst[1184 + 64 * g + 32 * h + 4 * r + b] = v;
                        }
            }
        }
        break;
    case QTYPE_Q6_K:
        memset(dst, 0, 1680);
        for (int r = 0; r < 8; r++) {
            const block_q6_K *x = (const block_q6_K *)src[r];
            put_f16(dst, r, x->d);
            for (int p = 0; p < 8; p++) {
                dst[16 + 16 * p + 2 * r] = (uint8_t)x->scales[2 * p];
                dst[16 + 16 * p + 2 * r + 1] = (uint8_t)x->scales[2 * p + 1];
            }
            /* The 256 values in order (see qdot.c q6k_at), low 4 and high 2 bits. */
            uint8_t lo[256], hi[256];
            for (int h = 0; h < 2; h++)
                for (int l = 0; l < 32; l++) {
                    const uint8_t a = x->ql[64 * h + l], b = x->ql[64 * h + l + 32], q = x->qh[32 * h + l];
                    const int v = 128 * h + l;
                    lo[v] = a & 15, lo[v + 32] = b & 15, lo[v + 64] = a >> 4, lo[v + 96] = b >> 4;
                    hi[v] = q & 3, hi[v + 32] = (q >> 2) & 3, hi[v + 64] = (q >> 4) & 3, hi[v + 96] = q >> 6;
                }
            /* Packed position of value v = 32s + 4k + b: ql unit (s/2, k) nibble s&1;
             * qh unit (s/2, k/2) field 2*(k&1) + (s&1). */
            for (int s2 = 0; s2 < 4; s2++)
                for (int k = 0; k < 8; k++)
                    for (int b = 0; b < 4; b++) {
                        const int va = 64 * s2 + 4 * k + b, vb = va + 32;
                        dst[144 + 256 * s2 + 32 * k + 4 * r + b] = (uint8_t)(lo[va] | (lo[vb] << 4));
                        dst[1168 + 128 * s2 + 32 * (k / 2) + 4 * r + b] |=
                            (uint8_t)((hi[va] | (hi[vb] << 2)) << (4 * (k & 1)));
                    }
        }
        break;
    case QTYPE_IQ4_NL:
        for (int r = 0; r < 8; r++) {
            const block_iq4_nl *x = (const block_iq4_nl *)src[r];
            put_f16(dst, r, x->d);
            put_qs(dst + 16, 4, r, x->qs);
        }
        break;
    case QTYPE_IQ4_XS:
        for (int r = 0; r < 8; r++) {
            const block_iq4_xs *x = (const block_iq4_xs *)src[r];
            put_f16(dst, r, x->d);
            for (int j = 0; j < 8; j++) {
                dst[16 + 8 * j + r] = (uint8_t)(int8_t)(quant_iq4_xs_scale(x, j) - 32);
                put_qs(dst + 80 + 128 * j, 4, r, x->qs + 16 * j);
            }
        }
        break;
    case QTYPE_Q2_K:
    case QTYPE_Q3_K:
        for (int r = 0; r < 8; r++) {
            const int q3 = type == QTYPE_Q3_K;
            const uint8_t *qs = q3 ? ((const block_q3_K *)src[r])->qs : ((const block_q2_K *)src[r])->qs;
            if (q3) {
                const block_q3_K *x = (const block_q3_K *)src[r];
                put_f16(dst, r, x->d);
                for (int g = 0; g < 16; g++) dst[16 + 16 * (g / 2) + 2 * r + (g & 1)] = (uint8_t)(int8_t)(quant_q3_K_scale(x->scales, g) - 32);
            } else {
                const block_q2_K *x = (const block_q2_K *)src[r];
                put_f16(dst, r, x->d);
                put_f16(dst + 16, r, x->dmin);
                for (int g = 0; g < 16; g++) dst[32 + 16 * (g / 2) + 2 * r + (g & 1)] = x->scales[g];
            }
            /* unit g, byte b: bits 2k..2k+1 = low 2 bits of value 16g + 4k + b */
            uint8_t *u = dst + (q3 ? 144 : 160);
            for (int g = 0; g < 16; g++)
                for (int b = 0; b < 4; b++) {
                    uint8_t v = 0;
                    for (int k = 0; k < 4; k++) v |= (uint8_t)(q2k_code(qs, 16 * g + 4 * k + b) << (2 * k));
                    u[32 * g + 4 * r + b] = v;
                }
            if (q3) {
                /* unit h, byte b: bit k + 4e = third bit of value 16(2h + e) + 4k + b */
                const uint8_t *hm = ((const block_q3_K *)src[r])->hmask;
                for (int h = 0; h < 8; h++)
                    for (int b = 0; b < 4; b++) {
                        uint8_t v = 0;
                        for (int e = 0; e < 2; e++)
                            for (int k = 0; k < 4; k++) {
                                const int j = 16 * (2 * h + e) + 4 * k + b;
                                v |= (uint8_t)(((hm[j % 32] >> (j / 32)) & 1) << (k + 4 * e));
                            }
                        dst[656 + 32 * h + 4 * r + b] = v;
                    }
            }
        }
        break;
    default:
        break;
    }
}

/* Inverse of pack_block for one row r (the K-quant scales are re-encoded into the
 * GGUF 12-byte form, which is bijective for 6-bit values). */
static void unpack_block_row(uint32_t type, const uint8_t *src, int r, uint8_t *dst) {
    switch (type) {
    case QTYPE_Q4_0: {
        block_q4_0 *x = (block_q4_0 *)dst;
        x->d = get_f16(src, r);
        get_qs(src + 16, 4, r, x->qs);
        break;
    }
    case QTYPE_Q4_1: {
        block_q4_1 *x = (block_q4_1 *)dst;
        x->d = get_f16(src, r);
        x->m = get_f16(src + 16, r);
        get_qs(src + 32, 4, r, x->qs);
        break;
    }
    case QTYPE_Q5_0: {
        block_q5_0 *x = (block_q5_0 *)dst;
        x->d = get_f16(src, r);
        get_qh5(src + 16, r, x->qh);
        get_qs(src + 48, 4, r, x->qs);
        break;
    }
    case QTYPE_Q5_1: {
        block_q5_1 *x = (block_q5_1 *)dst;
        x->d = get_f16(src, r);
        x->m = get_f16(src + 16, r);
        get_qh5(src + 32, r, x->qh);
        get_qs(src + 64, 4, r, x->qs);
        break;
    }
    case QTYPE_Q8_0: {
        block_q8_0 *x = (block_q8_0 *)dst;
        x->d = get_f16(src, r);
        get_qs(src + 16, 8, r, (uint8_t *)x->qs);
        break;
    }
    case QTYPE_Q4_K:
    case QTYPE_Q5_K: {
        block_q4_K *x = (block_q4_K *)dst;
        uint8_t *qs = type == QTYPE_Q4_K ? x->qs : ((block_q5_K *)dst)->qs;
        x->d = get_f16(src, r);
        x->dmin = get_f16(src + 16, r);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = src[32 + 8 * j + r];
            m[j] = src[96 + 16 * (j / 2) + 2 * r + (j & 1)];
        }
        for (int j = 0; j < 4; j++) {
            x->scales[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
            x->scales[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
            x->scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
        }
        for (int g = 0; g < 4; g++) get_qs(src + 160 + 256 * g, 8, r, qs + 32 * g);
        if (type == QTYPE_Q5_K) {
            uint8_t *qh = ((block_q5_K *)dst)->qh;
            memset(qh, 0, 32);
            for (int g = 0; g < 4; g++)
                for (int h = 0; h < 2; h++)
                    for (int b = 0; b < 4; b++) {
                        const uint8_t v = src[1184 + 64 * g + 32 * h + 4 * r + b];
                        for (int k = 0; k < 8; k++) qh[4 * k + b] |= (uint8_t)(((v >> k) & 1) << (2 * g + h));
                    }
        }
        break;
    }
    case QTYPE_Q6_K: {
        block_q6_K *x = (block_q6_K *)dst;
        memset(x, 0, sizeof *x);
        x->d = get_f16(src, r);
        for (int p = 0; p < 8; p++) {
            x->scales[2 * p] = (int8_t)src[16 + 16 * p + 2 * r];
            x->scales[2 * p + 1] = (int8_t)src[16 + 16 * p + 2 * r + 1];
        }
        for (int v = 0; v < 256; v++) {
            const int s = v / 32, k = (v % 32) / 4, b = v % 4, s2 = s / 2;
            const int lo = (src[144 + 256 * s2 + 32 * k + 4 * r + b] >> (4 * (s & 1))) & 15;
            const int hi = (src[1168 + 128 * s2 + 32 * (k / 2) + 4 * r + b] >> (2 * (2 * (k & 1) + (s & 1)))) & 3;
            const int h = v / 128, k4 = (v % 128) / 32, l = v % 32;
            x->ql[64 * h + l + 32 * (k4 & 1)] |= (uint8_t)(lo << (k4 < 2 ? 0 : 4));
            x->qh[32 * h + l] |= (uint8_t)(hi << (2 * k4));
        }
        break;
    }
    case QTYPE_IQ4_NL: {
        block_iq4_nl *x = (block_iq4_nl *)dst;
        x->d = get_f16(src, r);
        get_qs(src + 16, 4, r, x->qs);
        break;
    }
    case QTYPE_IQ4_XS: {
        block_iq4_xs *x = (block_iq4_xs *)dst;
        x->d = get_f16(src, r);
        x->scales_h = 0;
        memset(x->scales_l, 0, sizeof x->scales_l);
        for (int j = 0; j < 8; j++) {
            const int c = (int8_t)src[16 + 8 * j + r] + 32;
            x->scales_l[j / 2] |= (uint8_t)((c & 15) << (4 * (j % 2)));
            x->scales_h |= (uint16_t)((c >> 4) << (2 * j));
            get_qs(src + 80 + 128 * j, 4, r, x->qs + 16 * j);
        }
        break;
    }
    case QTYPE_Q2_K:
    case QTYPE_Q3_K: {
        const int q3 = type == QTYPE_Q3_K;
        uint8_t *qs = q3 ? ((block_q3_K *)dst)->qs : ((block_q2_K *)dst)->qs;
        if (q3) {
            block_q3_K *x = (block_q3_K *)dst;
            x->d = get_f16(src, r);
            memset(x->scales, 0, sizeof x->scales);
            for (int g = 0; g < 16; g++) {
                const int c = (int8_t)src[16 + 16 * (g / 2) + 2 * r + (g & 1)] + 32;
                x->scales[g % 8] |= (uint8_t)((c & 15) << (g < 8 ? 0 : 4));
                x->scales[8 + g % 4] |= (uint8_t)((c >> 4) << (2 * (g / 4)));
            }
        } else {
            block_q2_K *x = (block_q2_K *)dst;
            x->d = get_f16(src, r);
            x->dmin = get_f16(src + 16, r);
            for (int g = 0; g < 16; g++) x->scales[g] = src[32 + 16 * (g / 2) + 2 * r + (g & 1)];
        }
        const uint8_t *u = src + (q3 ? 144 : 160);
        memset(qs, 0, 64);
        for (int j = 0; j < 256; j++) {
            const int g = j / 16, k = (j % 16) / 4, b = j % 4;
            const int c = (u[32 * g + 4 * r + b] >> (2 * k)) & 3;
            qs[32 * (j / 128) + j % 32] |= (uint8_t)(c << (2 * ((j % 128) / 32)));
        }
        if (q3) {
            uint8_t *hm = ((block_q3_K *)dst)->hmask;
            memset(hm, 0, 32);
            for (int j = 0; j < 256; j++) {
                const int g = j / 16, k = (j % 16) / 4, b = j % 4;
                const int bit = (src[656 + 32 * (g / 2) + 4 * r + b] >> (k + 4 * (g & 1))) & 1;
                hm[j % 32] |= (uint8_t)(bit << (j / 32));
            }
        }
        break;
    }
    default:
        break;
    }
}

void cpu_pack_groups(const cpu_packed *p, const void *w, int64_t g0, int64_t g1) {
    const qtype_traits *tr = qtype_get(p->type);
    const size_t xb = cpu_pack_block_bytes(p->type);
    const uint64_t row_bytes = qtype_row_size(p->type, (uint64_t)p->cols);
    const int64_t nb = p->cols / tr->blck;
    uint8_t zero[sizeof(block_q6_K) > sizeof(block_q5_K) ? sizeof(block_q6_K) : sizeof(block_q5_K)];
    memset(zero, 0, sizeof zero);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *dst = p->data + (size_t)g * p->group_bytes;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *src[8];
            for (int r = 0; r < 8; r++) {
                const int64_t row = 8 * g + r;
                src[r] = row < p->rows ? (const uint8_t *)w + (uint64_t)row * row_bytes + (uint64_t)b * tr->type_size
                                       : zero;
            }
            pack_block(p->type, dst + (size_t)b * xb, src);
        }
    }
}

/* ---- scalar micro-kernel over the packed layout ---- */

static void gemm_scalar(uint32_t type, const uint8_t *group, int64_t cols, const void *act, size_t act_stride, int nt,
                        float out[][8]) {
    const qtype_traits *tr = qtype_get(type);
    const size_t xb = cpu_pack_block_bytes(type);
    const int64_t nb = cols / tr->blck;
    const cpu_vdot_fn dot = cpu_vdot_scalar(type);
    const size_t ablk = cpu_act_row_size(cpu_act_kind(type), tr->blck);
    uint8_t blk[sizeof(block_q6_K) > sizeof(block_q5_K) ? sizeof(block_q6_K) : sizeof(block_q5_K)];
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < 8; r++) out[t][r] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        for (int r = 0; r < 8; r++) {
            unpack_block_row(type, group + (size_t)b * xb, r, blk);
            for (int t = 0; t < nt; t++) {
                const uint8_t *a = (const uint8_t *)act + (size_t)t * act_stride + (size_t)b * ablk;
                out[t][r] += dot(tr->blck, blk, a);
            }
        }
    }
}

#define GEMM_SCALAR(T, NAME)                                                                                      \
    static void NAME(const uint8_t *g, int64_t cols, const void *a, size_t as, int nt, float out[][8]) {         \
        gemm_scalar(T, g, cols, a, as, nt, out);                                                                 \
    }
GEMM_SCALAR(QTYPE_Q4_0, gemm_q4_0)
GEMM_SCALAR(QTYPE_Q4_1, gemm_q4_1)
GEMM_SCALAR(QTYPE_Q5_0, gemm_q5_0)
GEMM_SCALAR(QTYPE_Q5_1, gemm_q5_1)
GEMM_SCALAR(QTYPE_Q8_0, gemm_q8_0)
GEMM_SCALAR(QTYPE_Q4_K, gemm_q4_K)
GEMM_SCALAR(QTYPE_Q5_K, gemm_q5_K)
GEMM_SCALAR(QTYPE_Q6_K, gemm_q6_K)
GEMM_SCALAR(QTYPE_Q2_K, gemm_q2_K)
GEMM_SCALAR(QTYPE_Q3_K, gemm_q3_K)
GEMM_SCALAR(QTYPE_IQ4_NL, gemm_iq4_nl)
GEMM_SCALAR(QTYPE_IQ4_XS, gemm_iq4_xs)

cpu_gemm_fn cpu_gemm_scalar(uint32_t type) {
    switch (type) {
    case QTYPE_Q4_0: return gemm_q4_0;
    case QTYPE_Q4_1: return gemm_q4_1;
    case QTYPE_Q5_0: return gemm_q5_0;
    case QTYPE_Q5_1: return gemm_q5_1;
    case QTYPE_Q8_0: return gemm_q8_0;
    case QTYPE_Q4_K: return gemm_q4_K;
    case QTYPE_Q5_K: return gemm_q5_K;
    case QTYPE_Q6_K: return gemm_q6_K;
    case QTYPE_Q2_K: return gemm_q2_K;
    case QTYPE_Q3_K: return gemm_q3_K;
    case QTYPE_IQ4_NL: return gemm_iq4_nl;
    case QTYPE_IQ4_XS: return gemm_iq4_xs;
    default: return NULL;
    }
}

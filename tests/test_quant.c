/* test_quant.c - block formats: round-trip error, dot, bit layouts, f16/bf16.
 *
 * What each part guards:
 *   roundtrip  quantize -> dequantize error per type under several input
 *              distributions (a broken scale search or packing shows up here);
 *   dot        quant_dot_f32 is the double dot of the dequantized row;
 *   layouts    hand-built blocks whose expected values were worked out by hand
 *              from FORMATS.md, independent of quant.c's own packing code;
 *   golden     the quantizers' bytes for a fixed input, hashed: these hashes
 *              were produced by ggml's own quantize_row_*_ref (ggml-quants.c of
 *              llama.cpp at commit 398446dd) and quant.c matched them, so a change
 *              that drifts from ggml's reference quantizers fails here;
 *   f16/bf16   conversion edge cases (subnormals, inf, nan, ties). */
#include <stdint.h>

#include "quant.h"
#include "test.h"
#include "util.h"

/* ------------------------------------------------------------------------- */
/* Inputs                                                                    */
/* ------------------------------------------------------------------------- */

enum { DIST_NORMAL, DIST_WEIGHTS, DIST_UNIFORM, DIST_POSITIVE, DIST_OUTLIERS, DIST_SPARSE,
       DIST_SHIFTED, DIST_COUNT };
static const char *dist_name[DIST_COUNT] = { "normal", "weights(0.02)", "uniform[-1,1]", "uniform[0,1]",
                                             "outliers", "sparse", "shifted(+3)" };

static float draw(mf_rng *r, int dist) {
    switch (dist) {
    case DIST_NORMAL: return mf_rng_normal(r);
    case DIST_WEIGHTS: return 0.02f * mf_rng_normal(r);
    case DIST_UNIFORM: return 2 * mf_rng_uniform(r) - 1;
    case DIST_POSITIVE: return mf_rng_uniform(r);
    case DIST_OUTLIERS: { float v = mf_rng_normal(r); return mf_rng_uniform(r) < 0.01f ? 30 * v : v; }
    case DIST_SPARSE: return mf_rng_uniform(r) < 0.5f ? 0.0f : mf_rng_normal(r);
    default: return 3 + mf_rng_normal(r);
    }
}

/* Upper bounds on normalised RMSE, sqrt(sum (x - y)^2 / sum x^2), for each
 * type: `typical` over every distribution but "outliers", `outliers` for that
 * one (a 30x value in a block forces a coarse step on its 31 neighbours, an
 * inherent cost of one scale per block). Both over 1..8 blocks, seed 1234.
 * Measured maxima (worst distribution) and the bounds, about 1.3x measured:
 *
 *   type   typical measured          bound    outliers measured  bound
 *   f32    0                         0        0                  0
 *   f16    0.00025  normal           3.5e-4   0.00023            3.5e-4
 *   bf16   0.0019   weights          2.4e-3   0.0034             4.5e-3
 *   q8_0   0.0061   weights          8e-3     0.013              1.7e-2
 *   q8_1   0.0066   weights          8.5e-3   0.013              1.7e-2
 *   q8_K   0.0073   normal           9.5e-3   0.034              4.4e-2
 *   q6_K   0.018    weights          2.3e-2   0.036              4.7e-2
 *   q5_1   0.051    sparse           6.5e-2   0.062              8e-2
 *   q5_0   0.055    sparse           7e-2     0.100              0.13
 *   q5_K   0.041    sparse           5.2e-2   0.055              7.2e-2
 *   q4_1   0.108    sparse           0.135    0.139              0.18
 *   q4_0   0.097    weights          0.125    0.170              0.22
 *   q4_K   0.077    weights          0.10     0.103              0.135
 *   iq4_nl 0.089    normal           0.115    0.148              0.19
 *   iq4_xs 0.080    weights          0.104    0.129              0.17
 *   q3_K   0.152    normal           0.20     0.162              0.21
 *   q2_K   0.436    sparse           0.57     0.279              0.36
 *
 * (q4_K beats q4_1 at the same 4.5 bits thanks to the scale/min search; the
 * symmetric q4_0/q5_0 pay most on shifted or one-signed data.) */
typedef struct { uint32_t type; double typical, outliers; } rmse_bound;
static const rmse_bound bounds[] = {
    { QTYPE_F32, 0, 0 },
    { QTYPE_F16, 3.5e-4, 3.5e-4 },
    { QTYPE_BF16, 2.4e-3, 4.5e-3 },
    { QTYPE_Q8_0, 8e-3, 1.7e-2 },
    { QTYPE_Q8_1, 8.5e-3, 1.7e-2 },
    { QTYPE_Q8_K, 9.5e-3, 4.4e-2 },
    { QTYPE_Q6_K, 2.3e-2, 4.7e-2 },
    { QTYPE_Q5_1, 6.5e-2, 8e-2 },
    { QTYPE_Q5_0, 7e-2, 0.13 },
    { QTYPE_Q5_K, 5.2e-2, 7.2e-2 },
    { QTYPE_Q4_1, 0.135, 0.18 },
    { QTYPE_Q4_0, 0.125, 0.22 },
    { QTYPE_Q4_K, 0.10, 0.135 },
    { QTYPE_IQ4_NL, 0.115, 0.19 },
    { QTYPE_IQ4_XS, 0.104, 0.17 },
    { QTYPE_Q3_K, 0.20, 0.21 },
    { QTYPE_Q2_K, 0.57, 0.36 },
};

static void fill_nan(float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = NAN;
}

/* ------------------------------------------------------------------------- */
/* Round trip and dot                                                        */
/* ------------------------------------------------------------------------- */

static void test_roundtrip_and_dot(void) {
    mf_rng r;
    mf_rng_seed(&r, 1234);
    enum { MAXN = 8 * QK_K };
    static float x[MAXN], y[MAXN], act[MAXN];
    static uint8_t q1[MAXN * 4], q2[MAXN * 4];

    for (size_t bi = 0; bi < MF_ARRAY_LEN(bounds); bi++) {
        const uint32_t type = bounds[bi].type;
        const qtype_traits *t = qtype_get(type);
        const int64_t unit = t->blck > 1 ? t->blck : 32;
        double worst[DIST_COUNT] = { 0 };
        int ok_bytes = 1, ok_finite = 1, ok_dot = 1, n_dot = 0;
        for (int dist = 0; dist < DIST_COUNT; dist++) {
            for (int nblk = 1; nblk <= 8; nblk++) {
                const int64_t n = nblk * unit;
                for (int64_t i = 0; i < n; i++) x[i] = draw(&r, dist);
                const uint64_t nbytes = qtype_row_size(type, n);

                /* Poisoned twice with different bytes: every output byte must be
                 * written, and deterministically. */
                memset(q1, 0xAA, nbytes);
                memset(q2, 0x55, nbytes);
                quant_quantize_row(type, x, q1, n);
                quant_quantize_row(type, x, q2, n);
                if (memcmp(q1, q2, nbytes)) ok_bytes = 0;

                fill_nan(y, n);
                quant_dequantize_row(type, q1, y, n);
                double se = 0, sx = 0;
                for (int64_t i = 0; i < n; i++) {
                    if (!isfinite(y[i])) ok_finite = 0;
                    se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
                    sx += (double)x[i] * x[i];
                }
                const double nrmse = sx > 0 ? sqrt(se / sx) : sqrt(se);
                worst[dist] = MF_MAX(worst[dist], nrmse);

                /* Dot against fresh activations: the reference is the double dot
                 * of the dequantized row; the tolerance allows only the final
                 * rounding to float (and a different summation order, should the
                 * reference ever block its sum). */
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < n; i++) {
                    act[i] = mf_rng_normal(&r);
                    ref += (double)y[i] * act[i];
                    mag += fabs((double)y[i] * act[i]);
                }
                const float got = quant_dot_f32(type, q1, act, n);
                n_dot++;
                if (!(fabs(got - ref) <= 1e-6 * mag + 1e-30)) {
                    ok_dot = 0;
                    fprintf(stderr, "  %s dot n=%lld: got %.9g want %.9g\n", t->name, (long long)n, got, ref);
                }
            }
        }
        double typical = 0;
        int typical_dist = 0;
        printf("  %-5s nrmse:", t->name);
        for (int dist = 0; dist < DIST_COUNT; dist++) {
            printf(" %s %.3g", dist_name[dist], worst[dist]);
            if (dist != DIST_OUTLIERS && worst[dist] > typical) {
                typical = worst[dist];
                typical_dist = dist;
            }
        }
        printf("\n");
        CHECK(typical <= bounds[bi].typical, "%s: nrmse %.4g > bound %.4g (%s)", t->name, typical, bounds[bi].typical,
              dist_name[typical_dist]);
        CHECK(worst[DIST_OUTLIERS] <= bounds[bi].outliers, "%s: nrmse %.4g > bound %.4g (outliers)", t->name,
              worst[DIST_OUTLIERS], bounds[bi].outliers);
        CHECK(ok_bytes, "%s: quantize left bytes unwritten or is not deterministic", t->name);
        CHECK(ok_finite, "%s: dequantize left an element unwritten or non-finite", t->name);
        CHECK(ok_dot, "%s: quant_dot_f32 disagrees with the double dot (%d rows)", t->name, n_dot);
    }
}

/* Zero rows must come back exactly zero from every format (no 0/0 scales). */
static void test_zero_rows(void) {
    static float x[2 * QK_K], y[2 * QK_K];
    static uint8_t q[2 * QK_K * 4];
    for (size_t bi = 0; bi < MF_ARRAY_LEN(bounds); bi++) {
        const uint32_t type = bounds[bi].type;
        memset(x, 0, sizeof x);
        memset(q, 0xAA, sizeof q);
        quant_quantize_row(type, x, q, 2 * QK_K);
        fill_nan(y, 2 * QK_K);
        quant_dequantize_row(type, q, y, 2 * QK_K);
        int ok = 1;
        for (int i = 0; i < 2 * QK_K; i++) ok &= y[i] == 0.0f;
        CHECK(ok, "%s: zero row does not round-trip to zeros", qtype_name(type));
    }
    /* Q8_K: bsums of a zero block must be zero too (ggml leaves them unwritten). */
    block_q8_K b;
    memset(&b, 0xAA, sizeof b);
    quant_quantize_row(QTYPE_Q8_K, x, &b, QK_K);
    int ok = b.d == 0.0f;
    for (int j = 0; j < QK_K / 16; j++) ok &= b.bsums[j] == 0;
    CHECK(ok, "q8_K zero block: d and bsums must be zero");
}

/* ------------------------------------------------------------------------- */
/* Hand-built blocks                                                         */
/* ------------------------------------------------------------------------- */

#define F16_ONE 0x3c00
#define F16_HALF 0x3800
#define F16_TWO 0x4000

/* Q4_0: qs[j] low nibble = element j, high nibble = element j + 16. */
static void test_layout_q4_0(void) {
    block_q4_0 b;
    b.d = F16_TWO;
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    fill_nan(y, 32);
    quant_dequantize_row(QTYPE_Q4_0, &b, y, 32);
    int ok = 1;
    for (int j = 0; j < 16; j++) {
        ok &= y[j] == 2.0f * (j - 8);
        ok &= y[j + 16] == 2.0f * (15 - j - 8);
    }
    CHECK(ok, "q4_0 nibble order: y[0]=%g y[16]=%g (want -16, 14)", y[0], y[16]);

    /* Q4_1 shares the order; value = d*q + m. */
    block_q4_1 c;
    c.d = F16_HALF;
    c.m = 0xc000; /* -2 */
    for (int j = 0; j < 16; j++) c.qs[j] = (uint8_t)(j | (15 - j) << 4);
    quant_dequantize_row(QTYPE_Q4_1, &c, y, 32);
    ok = 1;
    for (int j = 0; j < 16; j++) ok &= y[j] == 0.5f * j - 2 && y[j + 16] == 0.5f * (15 - j) - 2;
    CHECK(ok, "q4_1: d*q + m with q4_0's nibble order");
}

/* Q5_0 / Q5_1: bit j of the little-endian u32 qh is element j's fifth bit. */
static void test_layout_q5(void) {
    block_q5_0 b;
    b.d = F16_ONE;
    memset(b.qs, 0, sizeof b.qs);
    /* Fifth bits set for elements 0, 9, 16, 31:
     *   qh[0] = 0x01 (element 0), qh[1] = 0x02 (element 9),
     *   qh[2] = 0x01 (element 16), qh[3] = 0x80 (element 31). */
    b.qh[0] = 0x01;
    b.qh[1] = 0x02;
    b.qh[2] = 0x01;
    b.qh[3] = 0x80;
    b.qs[9] = 0x30; /* element 9: low 0; element 25: low 3 */
    float y[32];
    fill_nan(y, 32);
    quant_dequantize_row(QTYPE_Q5_0, &b, y, 32);
    int ok = 1;
    for (int j = 0; j < 32; j++) {
        int q = 0;
        if (j == 0 || j == 9 || j == 16 || j == 31) q = 16;
        if (j == 25) q = 3;
        if (y[j] != (float)(q - 16)) {
            ok = 0;
            fprintf(stderr, "  q5_0 element %d: %g want %d\n", j, y[j], q - 16);
        }
    }
    CHECK(ok, "q5_0 qh bit order");

    /* The quantizer writes the same order: a block that is -16 (the absmax,
     * code 0) except element 5 = +15 * (16/16) -> code 31 -> fifth bit 5. */
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = -16;
    x[5] = 15;
    block_q5_0 e;
    quant_quantize_row(QTYPE_Q5_0, x, &e, 32);
    CHECK(e.d == F16_ONE && e.qh[0] == 0x20 && e.qh[1] == 0 && e.qh[2] == 0 && e.qh[3] == 0 &&
          (e.qs[5] & 0xF) == 0xF,
          "q5_0 quantize: d=%04x qh=%02x %02x %02x %02x qs[5]=%02x", e.d, e.qh[0], e.qh[1], e.qh[2], e.qh[3],
          e.qs[5]);

    block_q5_1 c;
    c.d = F16_ONE;
    c.m = F16_ONE;
    memset(c.qs, 0, sizeof c.qs);
    memset(c.qh, 0, sizeof c.qh);
    c.qh[3] = 0x40; /* element 30 */
    c.qs[14] = 0x70; /* element 30: low 7 -> q = 23 */
    quant_dequantize_row(QTYPE_Q5_1, &c, y, 32);
    ok = y[30] == 24.0f;
    for (int j = 0; j < 32; j++) ok &= j == 30 || y[j] == 1.0f;
    CHECK(ok, "q5_1: element 30 = %g (want 24), others m", y[30]);
}

/* Q4_K scale packing, worked by hand for
 *   sc = {10, 20, 30, 40, 50, 60, 33, 17}
 *   m  = { 1,  2, 63,  4,  5, 48,  7, 31}
 * j < 4 : byte j = sc[j] (6 bits), byte j+4 = m[j] (6 bits);
 * j >= 4: byte j+4 = m lo4 << 4 | sc lo4; top 2 bits of sc into byte j-4 bits
 *         7..6, top 2 bits of m into byte j bits 7..6:
 *   j=4 sc 50 = 11 0010, m 5  = 00 0101: byte 8 = 0x52, byte 0 |= 3<<6
 *   j=5 sc 60 = 11 1100, m 48 = 11 0000: byte 9 = 0x0C, byte 1 |= 3<<6, byte 5 |= 3<<6
 *   j=6 sc 33 = 10 0001, m 7  = 00 0111: byte 10 = 0x71, byte 2 |= 2<<6
 *   j=7 sc 17 = 01 0001, m 31 = 01 1111: byte 11 = 0xF1, byte 3 |= 1<<6, byte 7 |= 1<<6
 *   bytes: CA D4 9E 68 | 01 C2 3F 44 | 52 0C 71 F1 */
static const uint8_t k4_scales[12] = { 0xCA, 0xD4, 0x9E, 0x68, 0x01, 0xC2, 0x3F, 0x44, 0x52, 0x0C, 0x71, 0xF1 };
static const int k4_sc[8] = { 10, 20, 30, 40, 50, 60, 33, 17 };
static const int k4_m[8] = { 1, 2, 63, 4, 5, 48, 7, 31 };

static void test_layout_q4_K(void) {
    int ok = 1;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        quant_get_scale_min_k4(j, k4_scales, &sc, &m);
        if (sc != k4_sc[j] || m != k4_m[j]) {
            ok = 0;
            fprintf(stderr, "  q4_K sub-block %d: sc %d m %d, want %d %d\n", j, sc, m, k4_sc[j], k4_m[j]);
        }
    }
    CHECK(ok, "q4_K scale unpacking (j < 4 and j >= 4)");

    /* Full block: d = 1, dmin = 0.5; qs[32g + l] low nibble l%16 (sub-block 2g),
     * high nibble 15 - l%16 (sub-block 2g+1). Expected values are exact. */
    block_q4_K b;
    b.d = F16_ONE;
    b.dmin = F16_HALF;
    memcpy(b.scales, k4_scales, 12);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) b.qs[32 * g + l] = (uint8_t)((l % 16) | (15 - l % 16) << 4);
    float y[QK_K];
    fill_nan(y, QK_K);
    quant_dequantize_row(QTYPE_Q4_K, &b, y, QK_K);
    ok = 1;
    for (int i = 0; i < QK_K; i++) {
        const int g = i / 64, hi = (i % 64) >= 32, l = i % 32, sb = 2 * g + hi;
        const int q = hi ? 15 - l % 16 : l % 16;
        const float want = (float)(k4_sc[sb] * q) - 0.5f * k4_m[sb];
        if (y[i] != want) {
            ok = 0;
            fprintf(stderr, "  q4_K value %d: %g want %g\n", i, y[i], want);
            break;
        }
    }
    CHECK(ok, "q4_K value order (4 groups of 64: low nibbles then high nibbles)");

    /* Q5_K: same scales; qh[l] bit j = fifth bit of value 32*j + l. Set it for
     * l = 3 in sub-blocks 1 and 6 (values 35, 195) and nothing else. */
    block_q5_K c;
    c.d = F16_ONE;
    c.dmin = 0;
    memcpy(c.scales, k4_scales, 12);
    memset(c.qs, 0, sizeof c.qs);
    memset(c.qh, 0, sizeof c.qh);
    c.qh[3] = (1 << 1) | (1 << 6);
    quant_dequantize_row(QTYPE_Q5_K, &c, y, QK_K);
    ok = 1;
    for (int i = 0; i < QK_K; i++) {
        const float want = (i == 35 || i == 195) ? 16.0f * k4_sc[i / 32] : 0.0f;
        if (y[i] != want) {
            ok = 0;
            fprintf(stderr, "  q5_K value %d: %g want %g\n", i, y[i], want);
        }
    }
    CHECK(ok, "q5_K qh bit order");
}

/* Q6_K: ql/qh ordering. Codes set by hand (everything else code 0 -> -32):
 *   half 0, l = 0: ql[0] = 0x21, ql[32] = 0x43, qh[0] = 11 10 01 00b
 *     value 0  : lo 1, hi 00 -> q = 1
 *     value 32 : lo 3, hi 01 -> q = 19
 *     value 64 : lo 2, hi 10 -> q = 34
 *     value 96 : lo 4, hi 11 -> q = 52
 *   half 1, l = 17: ql[64+17] = 0xF5, ql[64+49] = 0x0A, qh[32+17] = 00 01 11 10b
 *     value 145: lo 5, hi 10 -> q = 37
 *     value 177: lo A, hi 11 -> q = 58
 *     value 209: lo F, hi 01 -> q = 31
 *     value 241: lo 0, hi 00 -> q = 0
 * scales[i] = i - 8 (so some are negative), d = 2. */
static void test_layout_q6_K(void) {
    block_q6_K b;
    memset(&b, 0, sizeof b);
    b.d = F16_TWO;
    for (int i = 0; i < 16; i++) b.scales[i] = (int8_t)(i - 8);
    b.ql[0] = 0x21;
    b.ql[32] = 0x43;
    b.qh[0] = 0xE4;
    b.ql[64 + 17] = 0xF5;
    b.ql[64 + 49] = 0x0A;
    b.qh[32 + 17] = 0x1E;
    int code[QK_K] = { 0 };
    code[0] = 1;
    code[32] = 19;
    code[64] = 34;
    code[96] = 52;
    code[145] = 37;
    code[177] = 58;
    code[209] = 31;
    code[241] = 0;
    float y[QK_K];
    fill_nan(y, QK_K);
    quant_dequantize_row(QTYPE_Q6_K, &b, y, QK_K);
    int ok = 1;
    for (int i = 0; i < QK_K; i++) {
        const float want = 2.0f * (i / 16 - 8) * (code[i] - 32);
        if (y[i] != want) {
            ok = 0;
            fprintf(stderr, "  q6_K value %d: %g want %g\n", i, y[i], want);
        }
    }
    CHECK(ok, "q6_K ql/qh/scales ordering");

    /* And the quantizer packs in that order: quantize the dequantized block (its
     * values are exactly representable by the same codes and scales, up to the
     * sign convention and global scale the quantizer picks), dequantize again
     * and expect the identical values. */
    block_q6_K c;
    quant_quantize_row(QTYPE_Q6_K, y, &c, QK_K);
    float z[QK_K];
    quant_dequantize_row(QTYPE_Q6_K, &c, z, QK_K);
    double se = 0, sx = 0;
    for (int i = 0; i < QK_K; i++) {
        se += (double)(z[i] - y[i]) * (z[i] - y[i]);
        sx += (double)y[i] * y[i];
    }
    CHECK(sqrt(se / sx) < 2e-3, "q6_K quantize of a q6_K-exact block: nrmse %g", sqrt(se / sx));
}

/* Q2_K / Q3_K: value v = 128h + 32s + l sits in bits 2s..2s+1 of qs[32h + l];
 * 16-value group v / 16 owns a scale. Hand-set codes (everything else 0):
 *   qs[0]  = 11 10 01 00b: values 0, 32, 64, 96 have codes 0, 1, 2, 3
 *   qs[49] = 00 01 10 11b: values 145, 177, 209, 241 have codes 3, 2, 1, 0 */
static void set_2bit_codes(uint8_t qs[64], int code[QK_K]) {
    memset(qs, 0, 64);
    qs[0] = 0xE4;
    qs[49] = 0x1B;
    memset(code, 0, sizeof(int) * QK_K);
    code[32] = 1, code[64] = 2, code[96] = 3;
    code[145] = 3, code[177] = 2, code[209] = 1;
}

static void test_layout_q2_q3(void) {
    int code[QK_K];
    float y[QK_K];
    /* Q2_K: d = 1, dmin = 0.5, group j: scale j, min 15 - j. */
    block_q2_K b;
    set_2bit_codes(b.qs, code);
    for (int j = 0; j < 16; j++) b.scales[j] = (uint8_t)(j | (15 - j) << 4);
    b.d = F16_ONE;
    b.dmin = F16_HALF;
    fill_nan(y, QK_K);
    quant_dequantize_row(QTYPE_Q2_K, &b, y, QK_K);
    int ok = 1;
    for (int i = 0; i < QK_K; i++) {
        const float want = (float)(i / 16 * code[i]) - 0.5f * (15 - i / 16);
        if (y[i] != want) {
            ok = 0;
            fprintf(stderr, "  q2_K value %d: %g want %g\n", i, y[i], want);
        }
    }
    CHECK(ok, "q2_K code order, scale | min << 4");

    /* Q3_K: 6-bit scale codes c[j] packed by hand: bytes 0..7 low nibbles of
     * groups 0..7 (low) and 8..15 (high); byte 8 + i, bits 2k..2k+1: top bits of
     * group i + 4k. Third bits: hmask[l] bit k = value 32k + l; set for value
     * 101 (hmask[5] bit 3) and value 64 (hmask[0] bit 2). Value = (c - 32) *
     * (code - 4) with code = low | third << 2, d = 1. */
    static const int c[16] = { 0, 63, 32, 31, 1, 62, 17, 46, 5, 40, 33, 20, 60, 3, 48, 15 };
    block_q3_K q;
    set_2bit_codes(q.qs, code);
    memset(q.scales, 0, sizeof q.scales);
    for (int j = 0; j < 8; j++) q.scales[j] = (uint8_t)((c[j] & 15) | (c[j + 8] & 15) << 4);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) q.scales[8 + i] |= (uint8_t)((c[i + 4 * k] >> 4) << (2 * k));
    memset(q.hmask, 0, sizeof q.hmask);
    q.hmask[5] = 1 << 3;
    q.hmask[0] = 1 << 2;
    code[101] |= 4;
    code[64] |= 4;
    q.d = F16_ONE;
    ok = 1;
    for (int j = 0; j < 16; j++) ok &= quant_q3_K_scale(q.scales, j) == c[j];
    CHECK(ok, "q3_K 6-bit scale unpacking");
    fill_nan(y, QK_K);
    quant_dequantize_row(QTYPE_Q3_K, &q, y, QK_K);
    ok = 1;
    for (int i = 0; i < QK_K; i++) {
        const float want = (float)((c[i / 16] - 32) * (code[i] - 4));
        if (y[i] != want) {
            ok = 0;
            fprintf(stderr, "  q3_K value %d: %g want %g\n", i, y[i], want);
        }
    }
    CHECK(ok, "q3_K code order, hmask bits, signed scales");
}

/* IQ4_NL / IQ4_XS: nibbles in Q4_0's order index this grid (ggml's kvalues_iq4nl). */
static void test_layout_iq4(void) {
    static const int grid[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };
    block_iq4_nl b;
    b.d = F16_TWO;
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    float y[QK_K];
    fill_nan(y, 32);
    quant_dequantize_row(QTYPE_IQ4_NL, &b, y, 32);
    int ok = 1;
    for (int j = 0; j < 16; j++) ok &= y[j] == 2.0f * grid[j] && y[j + 16] == 2.0f * grid[15 - j];
    CHECK(ok, "iq4_nl grid and nibble order");

    /* IQ4_XS: sub-block j's 6-bit code: low nibble in scales_l[j / 2] (j even:
     * low), top 2 bits in scales_h bits 2j..2j+1; scale = code - 32. */
    static const int c[8] = { 33, 31, 0, 63, 37, 32, 10, 50 };
    block_iq4_xs x;
    x.d = F16_HALF;
    x.scales_h = 0;
    memset(x.scales_l, 0, sizeof x.scales_l);
    for (int j = 0; j < 8; j++) {
        x.scales_l[j / 2] |= (uint8_t)((c[j] & 15) << (j % 2 ? 4 : 0));
        x.scales_h |= (uint16_t)((c[j] >> 4) << (2 * j));
    }
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 16; l++) x.qs[16 * j + l] = (uint8_t)(((l + j) & 15) | ((3 * l) & 15) << 4);
    fill_nan(y, QK_K);
    quant_dequantize_row(QTYPE_IQ4_XS, &x, y, QK_K);
    ok = 1;
    for (int j = 0; j < 8; j++) {
        ok &= quant_iq4_xs_scale(&x, j) == c[j];
        for (int l = 0; l < 16; l++) {
            ok &= y[32 * j + l] == 0.5f * (float)((c[j] - 32) * grid[(l + j) & 15]);
            ok &= y[32 * j + 16 + l] == 0.5f * (float)((c[j] - 32) * grid[(3 * l) & 15]);
        }
    }
    CHECK(ok, "iq4_xs scales (low nibbles, scales_h pairs) and sub-block order");
}

/* Rounding rules of the 8-bit formats: Q8_0/Q8_1 use roundf (half away from
 * zero), Q8_K uses round-half-even (ggml's nearest_int). */
static void test_q8_rounding(void) {
    float x[QK_K];
    memset(x, 0, sizeof x);
    x[0] = 127; /* absmax: d = 1 exactly */
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 3.5f;
    block_q8_0 b;
    quant_quantize_row(QTYPE_Q8_0, x, &b, 32);
    CHECK(b.d == F16_ONE && b.qs[0] == 127 && b.qs[1] == 3 && b.qs[2] == -3 && b.qs[3] == 4,
          "q8_0 roundf: d=%04x qs=%d %d %d %d", b.d, b.qs[0], b.qs[1], b.qs[2], b.qs[3]);

    block_q8_1 c;
    quant_quantize_row(QTYPE_Q8_1, x, &c, 32);
    CHECK(c.d == F16_ONE && c.qs[1] == 3 && c.s == mf_f32_to_f16(127 + 3 - 3 + 4), "q8_1: s = d * sum(qs), s=%04x",
          c.s);

    x[0] = -127; /* signed absmax negative: iscale = 1, d = 1 */
    block_q8_K k;
    quant_quantize_row(QTYPE_Q8_K, x, &k, QK_K);
    CHECK(k.d == 1.0f && k.qs[0] == -127 && k.qs[1] == 2 && k.qs[2] == -2 && k.qs[3] == 4,
          "q8_K round-half-even: d=%g qs=%d %d %d %d", k.d, k.qs[0], k.qs[1], k.qs[2], k.qs[3]);
    CHECK(k.bsums[0] == -127 + 2 - 2 + 4 && k.bsums[1] == 0, "q8_K bsums[0]=%d", k.bsums[0]);

    /* bsums on random data: sums of each 16 codes. */
    mf_rng r;
    mf_rng_seed(&r, 99);
    for (int i = 0; i < QK_K; i++) x[i] = mf_rng_normal(&r);
    quant_quantize_row(QTYPE_Q8_K, x, &k, QK_K);
    int ok = 1;
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += k.qs[16 * j + l];
        ok &= s == k.bsums[j];
    }
    CHECK(ok, "q8_K bsums are the sums of each 16 codes");

    /* Q4_0: integers -8..7 with absmax -8 are exact (d = 1, codes x + 8); +8
     * clamps to code 15. */
    for (int j = 0; j < 32; j++) x[j] = (float)(j % 16 - 8);
    x[31] = 8;
    block_q4_0 q;
    quant_quantize_row(QTYPE_Q4_0, x, &q, 32);
    float y[32];
    quant_dequantize_row(QTYPE_Q4_0, &q, y, 32);
    ok = q.d == F16_ONE;
    for (int j = 0; j < 31; j++) ok &= y[j] == x[j];
    ok &= y[31] == 7;
    CHECK(ok, "q4_0 exact integers and top clamp");
}

/* ------------------------------------------------------------------------- */
/* Golden quantizer output (bytes identical to ggml's reference quantizers)  */
/* ------------------------------------------------------------------------- */

/* Input independent of util.c's RNG: a 32-bit LCG, approximately normal values
 * from the sum of four uniforms, every third row scaled by 0.02 and every
 * fifth value of row 1 made an outlier. Pure float arithmetic, so the input is
 * the same on every IEEE machine. */
static void golden_input(float *x, int n) {
    uint32_t s = 12345;
    for (int i = 0; i < n; i++) {
        float u = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 1664525u + 1013904223u;
            u += (float)(s >> 8) * (1.0f / 16777216.0f);
        }
        float v = (u - 2.0f) * 1.7f;
        const int row = i / 1024;
        if (row % 3 == 2) v *= 0.02f;
        if (row == 1 && i % 5 == 0) v *= 10;
        if (row == 3) v = v + 1.5f;
        x[i] = v;
    }
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void test_golden(void) {
    /* FNV-1a of ggml's quantize_row_<type>_ref(golden_input(4096)) bytes
     * (ggml-quants.c at llama.cpp commit 398446dd, gcc -O2, x86-64). q2_K, q3_K,
     * iq4_nl, iq4_xs: ggml-quants.c at d32676d7 (gcc 12 -O2 -std=c11, x86-64):
     * quantize_row_q2_K_ref, quantize_row_q3_K_ref, and for the iq4 types
     * quantize_iq4_nl / quantize_iq4_xs without an importance matrix (what
     * llama-quantize writes; quantize_row_iq4_nl_ref itself searches less). */
    static const struct { uint32_t type; uint64_t hash; } golden[] = {
        { QTYPE_Q4_0, 0xc5df737ab20d03beull }, { QTYPE_Q4_1, 0x6c2bedffaf61caf4ull },
        { QTYPE_Q5_0, 0x0c12bf11da080666ull }, { QTYPE_Q5_1, 0x1a79a2e712eb99ddull },
        { QTYPE_Q8_0, 0xc59c5e9cb6bc83ceull }, { QTYPE_Q8_1, 0x8e335f2e7ac0d62dull },
        { QTYPE_Q4_K, 0x0ced192081e6254cull }, { QTYPE_Q5_K, 0x5425ecdbfc233c94ull },
        { QTYPE_Q6_K, 0x2f8563133f578ba9ull }, { QTYPE_Q8_K, 0x327f394526b74c26ull },
        { QTYPE_Q2_K, 0xccb2b91a0a5b9fd4ull }, { QTYPE_Q3_K, 0xb23747e74495325eull },
        { QTYPE_IQ4_NL, 0x0366ce8dfa8ae282ull }, { QTYPE_IQ4_XS, 0x1867134b5001fe95ull },
    };
    enum { N = 4096 };
    static float x[N];
    static uint8_t q[N * 2];
    golden_input(x, N);
    for (size_t i = 0; i < MF_ARRAY_LEN(golden); i++) {
        const uint64_t nbytes = qtype_row_size(golden[i].type, N);
        quant_quantize_row(golden[i].type, x, q, N);
        const uint64_t h = fnv1a(q, nbytes);
        CHECK(h == golden[i].hash, "%s: quantized bytes hash %016llx, ggml reference %016llx",
              qtype_name(golden[i].type), (unsigned long long)h, (unsigned long long)golden[i].hash);
    }
}

/* ------------------------------------------------------------------------- */
/* f16 / bf16 conversions                                                    */
/* ------------------------------------------------------------------------- */

static float bits_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static void test_f16_bf16(void) {
    /* f16 -> f32 is exact. */
    static const struct { uint16_t h; float f; } dec[] = {
        { 0x0000, 0.0f },          { 0x0001, 0x1p-24f },        { 0x03ff, 1023 * 0x1p-24f },
        { 0x0400, 0x1p-14f },      { 0x3c00, 1.0f },            { 0x3c01, 1.0f + 0x1p-10f },
        { 0x7bff, 65504.0f },      { 0xc000, -2.0f },           { 0x8001, -0x1p-24f },
    };
    for (size_t i = 0; i < MF_ARRAY_LEN(dec); i++)
        CHECK(mf_f16_to_f32(dec[i].h) == dec[i].f, "f16 %04x -> %g, want %g", dec[i].h, mf_f16_to_f32(dec[i].h),
              dec[i].f);
    CHECK(signbit(mf_f16_to_f32(0x8000)) && mf_f16_to_f32(0x8000) == 0, "f16 -0");
    CHECK(isinf(mf_f16_to_f32(0x7c00)) && mf_f16_to_f32(0x7c00) > 0, "f16 +inf");
    CHECK(isinf(mf_f16_to_f32(0xfc00)) && mf_f16_to_f32(0xfc00) < 0, "f16 -inf");
    CHECK(isnan(mf_f16_to_f32(0x7e00)) && isnan(mf_f16_to_f32(0x7c01)) && isnan(mf_f16_to_f32(0xfe00)), "f16 nan");

    /* f32 -> f16: round to nearest, ties to even, overflow to inf, underflow
     * through the subnormals. */
    static const struct { float f; uint16_t h; const char *what; } enc[] = {
        { 65504.0f, 0x7bff, "max finite" },
        { 65519.99f, 0x7bff, "just below the max/inf midpoint" },
        { 65520.0f, 0x7c00, "max/inf midpoint ties to even (inf)" },
        { 1e10f, 0x7c00, "overflow" },
        { -1e10f, 0xfc00, "negative overflow" },
        { 1.0f + 0x1p-11f, 0x3c00, "tie 1 | 1+ulp -> even (1)" },
        { 1.0f + 3 * 0x1p-11f, 0x3c02, "tie 1+ulp | 1+2ulp -> even" },
        { 1.0f + 0x1p-11f + 0x1p-20f, 0x3c01, "just above a tie" },
        { 0x1p-24f, 0x0001, "min subnormal" },
        { 0x1p-25f, 0x0000, "half the min subnormal ties to even (0)" },
        { 0x1p-25f * 1.0001f, 0x0001, "just above it" },
        { 3 * 0x1p-25f, 0x0002, "1.5 subnormal units ties to even (2)" },
        { 1023.5f * 0x1p-24f, 0x0400, "max subnormal + half ulp -> min normal" },
        { 0x1p-14f, 0x0400, "min normal" },
        { 1e-8f, 0x0000, "underflow" },
        { -0.0f, 0x8000, "negative zero" },
        { -3.0f, 0xc200, "negative" },
    };
    for (size_t i = 0; i < MF_ARRAY_LEN(enc); i++)
        CHECK(mf_f32_to_f16(enc[i].f) == enc[i].h, "f32 %.9g -> f16 %04x, want %04x (%s)", enc[i].f,
              mf_f32_to_f16(enc[i].f), enc[i].h, enc[i].what);
    CHECK(mf_f32_to_f16(INFINITY) == 0x7c00 && mf_f32_to_f16(-INFINITY) == 0xfc00, "f16 inf");
    const uint16_t hn = mf_f32_to_f16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0, "f16 nan stays nan: %04x", hn);
    /* A NaN whose payload is only in the low f32 bits must not become inf. */
    const uint16_t hn2 = mf_f32_to_f16(bits_f32(0x7f800001));
    CHECK((hn2 & 0x7c00) == 0x7c00 && (hn2 & 0x3ff) != 0, "f16 low-payload nan: %04x", hn2);

    /* Every f16 value round-trips through f32 (NaNs stay NaN). */
    int ok = 1;
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float f = mf_f16_to_f32((uint16_t)h);
        const uint16_t back = mf_f32_to_f16(f);
        if (isnan(f) ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h) ok = 0;
    }
    CHECK(ok, "all 65536 f16 values round-trip through f32");

    /* bf16 = the upper half of an f32, rounded to nearest even on narrowing. */
    static const struct { uint32_t f; uint16_t h; const char *what; } benc[] = {
        { 0x3f800000, 0x3f80, "1.0" },
        { 0x3f808000, 0x3f80, "tie to even (down)" },
        { 0x3f818000, 0x3f82, "tie to even (up)" },
        { 0x3f808001, 0x3f81, "above the tie" },
        { 0x7f7fffff, 0x7f80, "max float rounds to inf" },
        { 0x7f800000, 0x7f80, "inf" },
        { 0xff800000, 0xff80, "-inf" },
        { 0x00000001, 0x0000, "f32 subnormal underflows" },
        { 0x00008000, 0x0000, "subnormal tie to even (0)" },
        { 0x00018000, 0x0002, "subnormal tie to even (2)" },
        { 0x80000000, 0x8000, "-0" },
    };
    for (size_t i = 0; i < MF_ARRAY_LEN(benc); i++)
        CHECK(mf_f32_to_bf16(bits_f32(benc[i].f)) == benc[i].h, "f32 %08x -> bf16 %04x, want %04x (%s)", benc[i].f,
              mf_f32_to_bf16(bits_f32(benc[i].f)), benc[i].h, benc[i].what);
    const uint16_t bn = mf_f32_to_bf16(bits_f32(0x7f800001)); /* would round to inf without the NaN rule */
    CHECK((bn & 0x7f80) == 0x7f80 && (bn & 0x7f) != 0, "bf16 nan stays nan: %04x", bn);
    CHECK(mf_bf16_to_f32(0x3f80) == 1.0f && mf_bf16_to_f32(0xc040) == -3.0f && isnan(mf_bf16_to_f32(0x7fc0)),
          "bf16 -> f32");

    /* Through the quant API: f16/bf16 rows are little-endian 2-byte values. */
    const float xs[4] = { 1.0f, -2.0f, 65520.0f, 0x1p-24f };
    uint8_t raw[8];
    quant_quantize_row(QTYPE_F16, xs, raw, 4);
    CHECK(raw[0] == 0x00 && raw[1] == 0x3c && raw[2] == 0x00 && raw[3] == 0xc0 && raw[4] == 0x00 && raw[5] == 0x7c &&
          raw[6] == 0x01 && raw[7] == 0x00, "f16 row bytes");
    float ys[4];
    quant_dequantize_row(QTYPE_BF16, (const uint8_t[]){ 0x80, 0x3f, 0x40, 0xc0, 0x80, 0x7f, 0x00, 0x00 }, ys, 4);
    CHECK(ys[0] == 1.0f && ys[1] == -3.0f && isinf(ys[2]) && ys[3] == 0, "bf16 row values");
}

/* ------------------------------------------------------------------------- */

static void test_table(void) {
    CHECK(qtype_row_size(QTYPE_Q4_K, 512) == 288 && qtype_row_size(QTYPE_Q4_K, 100) == 0, "q4_K row size");
    CHECK(qtype_row_size(QTYPE_Q8_0, 64) == 68 && qtype_row_size(QTYPE_F16, 3) == 6, "row sizes");
    CHECK(qtype_get(5) == NULL && qtype_get(1000) == NULL && !strcmp(qtype_name(5), "unknown"), "unknown ids");
    CHECK(qtype_get(QTYPE_Q8_K) && !qtype_get(QTYPE_Q8_K)->supported, "q8_K known, not a weight type");
    CHECK(qtype_row_size(QTYPE_Q2_K, 512) == 168 && qtype_row_size(QTYPE_Q3_K, 256) == 110 &&
              qtype_row_size(QTYPE_IQ4_NL, 64) == 36 && qtype_row_size(QTYPE_IQ4_XS, 256) == 136 &&
              qtype_row_size(QTYPE_IQ4_XS, 32) == 0,
          "q2_K, q3_K, iq4_nl, iq4_xs row sizes");
    CHECK(!strcmp(qtype_name(QTYPE_IQ4_NL), "iq4_nl") && !strcmp(qtype_name(QTYPE_IQ4_XS), "iq4_xs") &&
              qtype_get(21) == NULL && qtype_get(22) == NULL,
          "iq4 names; the IQ types minfer lacks stay unknown");
}

int main(void) {
    test_table();
    test_roundtrip_and_dot();
    test_zero_rows();
    test_layout_q4_0();
    test_layout_q5();
    test_layout_q4_K();
    test_layout_q6_K();
    test_layout_q2_q3();
    test_layout_iq4();
    test_q8_rounding();
    test_golden();
    test_f16_bf16();
    return test_summary("test_quant");
}

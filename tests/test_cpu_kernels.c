/* test_cpu_kernels.c - the CPU kernels against their scalar references.
 *
 * Oracles, from the innermost out:
 *   - activation quantization: AVX2 == scalar, byte for byte;
 *   - quantized row dots and packed micro-kernels: AVX2 vs the scalar integer dots
 *     of qdot.c, exactly equal on inputs whose float arithmetic is exact
 *     (power-of-two scales, small integers) and within 1e-5 (normalised by
 *     sum |w_i x_i|) on random inputs, where only the order of float additions
 *     differs; and vs the f32 reference quant_dot_f32 within the bound of 8-bit
 *     activation rounding (sum_i |w_i| * d_block / 2, d = amax/127);
 *   - element-wise ops and attention: vs ref.c within float rounding;
 *   - the backend (threads, packing, dispatch) vs cpu_ref_matmul / ref ops.
 * Every kernel set the CPU has (avx2, avx512, avx512-vnni) runs the packed
 * tests, and the AVX-512 sets must give the AVX2 set's bits on every input
 * (same integers, same float epilogue); a set the CPU lacks is skipped with a
 * message naming it, and a line lists the sets that ran.
 * Every output is poisoned (NaN) first, so an element a kernel forgets fails.
 * Shapes include tails: 1..13 tokens, odd row counts, n not a multiple of 8. */
#include "test.h"

#include <float.h>
#include <stdint.h>
#include <unistd.h>

#include "backend.h"
#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "cpu/paths_cpu.h"
#include "cpu/threads.h"
#include "quant.h"
#include "util.h"

static mf_rng rng;

static int have_avx2(void) { return cpu_has_avx2(); }

/* The packed kernel sets, with what the CPU needs for each. */
typedef struct kset {
    const cpu_kernels *k;
    int (*has)(void);
    const char *needs;   /* for the SKIP line */
} kset;
static const kset KSETS[] = {
    { &cpu_kernels_avx2, cpu_has_avx2, "AVX2/FMA/F16C" },
    { &cpu_kernels_avx512, cpu_has_avx512, "AVX-512 F/BW/DQ/VL" },
    { &cpu_kernels_avx512vnni, cpu_has_avx512vnni, "AVX-512 F/BW/DQ/VL + VNNI" },
};

static float frand(float lo, float hi) { return lo + (hi - lo) * mf_rng_uniform(&rng); }
static int irand(int lo, int hi) { return lo + (int)(mf_rng_u64(&rng) % (uint64_t)(hi - lo + 1)); }

static void poison(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

static void fill_normal(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * mf_rng_normal(&rng);
}

static const uint32_t QTYPES[] = { QTYPE_Q4_0, QTYPE_Q4_1, QTYPE_Q5_0, QTYPE_Q5_1, QTYPE_Q8_0, QTYPE_IQ4_NL,
                                   QTYPE_Q2_K, QTYPE_Q3_K, QTYPE_Q4_K, QTYPE_Q5_K, QTYPE_Q6_K, QTYPE_IQ4_XS };
static const uint32_t FTYPES[] = { QTYPE_F32, QTYPE_F16, QTYPE_BF16 };

/* ------------------------------------------------------------------------- */
/* Random weights                                                            */
/* ------------------------------------------------------------------------- */

static f16_t h(float f) { return mf_f32_to_f16(f); }

/* Random blocks of a quantized type: random bytes, then sane scales. exact = 1:
 * power-of-two scales (and q6_K scales |s| <= 15) so dots are exact in f32. */
static void rand_qrow(uint32_t type, uint8_t *dst, int64_t n, int exact) {
    const qtype_traits *tr = qtype_get(type);
    const int64_t nb = n / tr->blck;
    for (int64_t i = 0; i < nb * (int64_t)tr->type_size; i++) dst[i] = (uint8_t)mf_rng_u64(&rng);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = dst + b * tr->type_size;
        const float d = exact ? 1.0f / 64 : frand(0.002f, 0.03f);
        const float m = exact ? -1.0f / 32 : frand(-0.2f, 0.0f);
        switch (type) {
        case QTYPE_Q4_0: ((block_q4_0 *)p)->d = h(d); break;
        case QTYPE_Q4_1: ((block_q4_1 *)p)->d = h(d); ((block_q4_1 *)p)->m = h(m); break;
        case QTYPE_Q5_0: ((block_q5_0 *)p)->d = h(d); break;
        case QTYPE_Q5_1: ((block_q5_1 *)p)->d = h(d); ((block_q5_1 *)p)->m = h(m); break;
        case QTYPE_Q8_0: {
            block_q8_0 *x = (block_q8_0 *)p;
            x->d = h(d);
            for (int i = 0; i < 32; i++)
                if (x->qs[i] == -128) x->qs[i] = -127;   /* quantizers never emit -128 */
            break;
        }
        case QTYPE_Q4_K: ((block_q4_K *)p)->d = h(d); ((block_q4_K *)p)->dmin = h(exact ? 1.0f / 128 : d * 0.5f); break;
        case QTYPE_Q5_K: ((block_q5_K *)p)->d = h(d); ((block_q5_K *)p)->dmin = h(exact ? 1.0f / 128 : d * 0.5f); break;
        case QTYPE_Q6_K: {
            block_q6_K *x = (block_q6_K *)p;
            x->d = h(exact ? 1.0f / 64 : d * 0.1f);
            if (exact)
                for (int i = 0; i < 16; i++) x->scales[i] = (int8_t)irand(-15, 15);
            else
                for (int i = 0; i < 16; i++)
                    if (x->scales[i] == -128) x->scales[i] = -127;
            break;
        }
        case QTYPE_Q2_K: ((block_q2_K *)p)->d = h(d); ((block_q2_K *)p)->dmin = h(exact ? 1.0f / 128 : d * 0.5f); break;
        case QTYPE_Q3_K: ((block_q3_K *)p)->d = h(exact ? 1.0f / 64 : d * 0.1f); break;
        case QTYPE_IQ4_NL: ((block_iq4_nl *)p)->d = h(exact ? 1.0f / 64 : d * 0.05f); break;
        case QTYPE_IQ4_XS: ((block_iq4_xs *)p)->d = h(exact ? 1.0f / 64 : d * 0.005f); break;
        default: break;
        }
    }
}

static void rand_frow(uint32_t type, uint8_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float v = 0.05f * mf_rng_normal(&rng);
        if (type == QTYPE_F32) ((float *)dst)[i] = v;
        else if (type == QTYPE_F16) ((uint16_t *)dst)[i] = mf_f32_to_f16(v);
        else ((uint16_t *)dst)[i] = mf_f32_to_bf16(v);
    }
}

/* Exact-mode activations: d = 1/8, |q| <= 7, sums consistent. */
static void exact_act(cpu_act kind, uint8_t *dst, int64_t n) {
    if (kind == CPU_ACT_Q8A32) {
        block_q8a32 *y = (block_q8a32 *)dst;
        for (int64_t b = 0; b < n / 32; b++) {
            int sum = 0;
            for (int i = 0; i < 32; i++) sum += y[b].qs[i] = (int8_t)irand(-7, 7);
            y[b].d = 0.125f;
            y[b].s = 0.125f * (float)sum;
        }
    } else {
        block_q8a256 *y = (block_q8a256 *)dst;
        for (int64_t b = 0; b < n / 256; b++) {
            for (int i = 0; i < 256; i++) y[b].qs[i] = (int8_t)irand(-7, 7);
            y[b].d = 0.125f;
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += y[b].qs[16 * j + i];
                y[b].bs16[j] = (int16_t)s;
            }
            for (int j = 0; j < 8; j++) y[b].bs32[j] = (int16_t)(y[b].bs16[2 * j] + y[b].bs16[2 * j + 1]);
        }
    }
}

/* Dequantized activations (what the integer kernels actually multiply). */
static void act_dequant(cpu_act kind, const uint8_t *a, float *x, int64_t n) {
    if (kind == CPU_ACT_Q8A32) {
        const block_q8a32 *y = (const block_q8a32 *)a;
        for (int64_t i = 0; i < n; i++) x[i] = y[i / 32].d * y[i / 32].qs[i % 32];
    } else {
        const block_q8a256 *y = (const block_q8a256 *)a;
        for (int64_t i = 0; i < n; i++) x[i] = y[i / 256].d * y[i / 256].qs[i % 256];
    }
}

static void quantize_act(cpu_act kind, const float *x, uint8_t *dst, int64_t n, int simd) {
    if (kind == CPU_ACT_Q8A32) {
        if (simd) cpu_quantize_q8a32_avx2(x, (block_q8a32 *)dst, n);
        else cpu_quantize_q8a32(x, (block_q8a32 *)dst, n);
    } else {
        if (simd) cpu_quantize_q8a256_avx2(x, (block_q8a256 *)dst, n);
        else cpu_quantize_q8a256(x, (block_q8a256 *)dst, n);
    }
}

/* sum_i |w_i * x_i| with w dequantized by the reference. */
static double abs_norm(uint32_t type, const void *w, const float *x, int64_t n, float *wbuf) {
    quant_dequantize_row(type, w, wbuf, n);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += fabs((double)wbuf[i] * x[i]);
    return s;
}

/* Bound of the 8-bit activation rounding: sum_i |w_i| * d(block of i) / 2. */
static double quant_bound(uint32_t type, const void *w, const float *x, int64_t n, float *wbuf) {
    const int bs = cpu_act_kind(type) == CPU_ACT_Q8A32 ? 32 : 256;
    quant_dequantize_row(type, w, wbuf, n);
    double s = 0.0;
    for (int64_t b = 0; b < n / bs; b++) {
        float amax = 0.0f, sw = 0.0f;
        for (int i = 0; i < bs; i++) {
            amax = fmaxf(amax, fabsf(x[b * bs + i]));
            sw += fabsf(wbuf[b * bs + i]);
        }
        s += (double)sw * amax / 127.0 / 2.0;
    }
    return s;
}

/* ------------------------------------------------------------------------- */
/* Thread pool                                                               */
/* ------------------------------------------------------------------------- */

typedef struct pool_ctx {
    cpu_pool *p;
    int hits[16];
    int64_t sum[16];
    int after[16];
    int runs_nth[17];   /* runs by the nth they were given (part 0 counts them) */
    int n;
    int sleep_part;     /* > 0: this part sleeps 20 ms at its end (a late worker) */
} pool_ctx;

static void pool_task(void *ctx, int ith, int nth) {
    pool_ctx *c = ctx;
    c->hits[ith]++;
    if (ith == 0) c->runs_nth[nth]++;
    int64_t b, e;
    cpu_split(c->n, 3, ith, nth, &b, &e);
    for (int64_t i = b; i < e; i++) c->sum[ith] += i;
    /* barrier: every part must see every other part's hit before continuing */
    cpu_pool_barrier(c->p, nth);
    int all = 1;
    for (int i = 0; i < nth; i++) all &= c->hits[i] == c->hits[ith];
    c->after[ith] += all;
    /* after the barrier: a part late before it holds part 0 in the barrier, and the
     * dispatcher's lateness bound counts from its own parts' end */
    if (c->sleep_part > 0 && ith == c->sleep_part) usleep(20000);
}

/* reps runs of pool_task on a pool of nt; solo: whether solo mode is allowed. Every
 * run is checked against the nth it was given: parts 0..nth-1 each ran once and met at
 * the barrier, the split covered [0,n) once. With solo mode off every run must have had
 * nth = nt, however loaded the machine is (the barrier makes the dispatcher wait for
 * every part, late or not). With it on, runs in a solo period have nth = 1 by design
 * (a worker was late: another process has its core), so part i ran in exactly the
 * runs whose nth was above i. */
static void pool_runs(int nt, int solo, int reps) {
    pool_ctx c;
    memset(&c, 0, sizeof c);
    c.p = cpu_pool_new(nt);
    cpu_pool_set_solo(c.p, solo);
    c.n = 1000;
    for (int r = 0; r < reps; r++) cpu_pool_run(c.p, pool_task, &c, 0);
    const int multi = c.runs_nth[nt], single = nt > 1 ? c.runs_nth[1] : 0;
    int64_t tot = 0;
    int ok = multi + single == reps;
    for (int i = 0; i < nt; i++) {
        tot += c.sum[i];
        const int want = i == 0 ? reps : multi;
        ok &= c.hits[i] == want && c.after[i] == want;
    }
    const char *mode = solo ? "solo allowed" : "solo off";
    CHECK(ok, "pool of %d, %s: every part ran once in each of the %d runs of its nth (%d of %d runs on %d parts, "
          "%lld solo periods) and met at the barrier", nt, mode, reps, multi, reps, nt,
          (long long)cpu_pool_solo_periods(c.p));
    if (!solo) CHECK(multi == reps && cpu_pool_solo_periods(c.p) == 0, "pool of %d, solo off: all %d runs on %d parts "
                     "(%d)", nt, reps, nt, multi);
    const cpu_pool_stats st = cpu_pool_get_stats(c.p);
    CHECK(st.parallel_tasks == (nt > 1 ? multi : 0) && st.solo_tasks == (nt > 1 ? single : 0) &&
              st.solo_periods == cpu_pool_solo_periods(c.p) && st.late <= st.waits && st.waits <= st.parallel_tasks &&
              st.wait_s >= 0.0,
          "pool of %d, %s: the stats count the runs (%lld split, %lld alone, %lld waits, %lld late)", nt, mode,
          (long long)st.parallel_tasks, (long long)st.solo_tasks, (long long)st.waits, (long long)st.late);
    CHECK(tot == (int64_t)reps * 999 * 1000 / 2, "pool of %d, %s: split covers [0,n) once (%lld)", nt, mode,
          (long long)tot);
    /* nth_max: a task on one thread only */
    memset(c.hits, 0, sizeof c.hits);
    cpu_pool_run(c.p, pool_task, &c, 1);
    CHECK(c.hits[0] == 1 && (nt == 1 || c.hits[1] == 0), "pool of %d: nth_max=1 runs part 0 only", nt);
    cpu_pool_free(c.p);
}

static void test_pool(void) {
    for (int nt = 1; nt <= 4; nt++) {
        pool_runs(nt, 0, 2000);
        pool_runs(nt, 1, 2000);
    }
    /* Solo mode begins when a worker is late: part 1 sleeps 20 ms, 40 times the 0.5 ms
     * bound. The dispatcher can still miss it when it is preempted itself before it
     * first reads the clock (the bound grows with that delay), so a few tries. */
    {
        pool_ctx c;
        memset(&c, 0, sizeof c);
        c.p = cpu_pool_new(2);
        c.n = 10;
        c.sleep_part = 1;
        int tries = 0;
        while (cpu_pool_solo_periods(c.p) == 0 && tries < 10) {
            cpu_pool_run(c.p, pool_task, &c, 0);
            tries++;
        }
        CHECK(cpu_pool_solo_periods(c.p) >= 1, "pool of 2: a worker 20 ms late starts solo mode (%d tries)", tries);
        {
            const cpu_pool_stats st = cpu_pool_get_stats(c.p);
            CHECK(st.late >= 1 && st.wait_s >= 0.015 * (double)st.late, "pool of 2: the late wait counted (%lld late, %.3f s)",
                  (long long)st.late, st.wait_s);
        }
        CHECK(c.hits[1] == tries && c.after[0] == tries && c.after[1] == tries,
              "pool of 2: the late part still ran and met at the barrier each time (%d/%d of %d)", c.hits[1],
              c.after[1], tries);
        /* the same pool with solo mode off is not switched, however late */
        cpu_pool_set_solo(c.p, 0);
        const int64_t periods = cpu_pool_solo_periods(c.p);
        memset(c.runs_nth, 0, sizeof c.runs_nth);
        for (int r = 0; r < 3; r++) cpu_pool_run(c.p, pool_task, &c, 0);
        CHECK(c.runs_nth[2] == 3 && cpu_pool_solo_periods(c.p) == periods,
              "pool of 2, solo off: 3 late runs on 2 parts, no solo period (%d)", c.runs_nth[2]);
        cpu_pool_free(c.p);
    }
    /* cpu_split: alignment and balance */
    int ok = 1;
    for (int64_t n = 0; n < 70; n++)
        for (int nth = 1; nth <= 5; nth++) {
            int64_t prev = 0;
            for (int i = 0; i < nth; i++) {
                int64_t b, e;
                cpu_split(n, 8, i, nth, &b, &e);
                ok &= b == prev && e >= b && (b % 8 == 0 || b == n);
                prev = e;
            }
            ok &= prev == n;
        }
    CHECK(ok, "cpu_split partitions [0,n) in order on multiples of the alignment");
}

/* ------------------------------------------------------------------------- */
/* Quantization                                                              */
/* ------------------------------------------------------------------------- */

static void test_quantize(void) {
    for (int kind = CPU_ACT_Q8A32; kind <= CPU_ACT_Q8A256; kind++) {
        const int bs = kind == CPU_ACT_Q8A32 ? 32 : 256;
        for (int nb = 1; nb <= 9; nb += 2) {
            const int64_t n = (int64_t)nb * bs;
            float *x = malloc(sizeof(float) * n);
            for (int64_t b = 0; b < nb; b++) {
                const float sc = powf(10.0f, frand(-4.0f, 3.0f));
                fill_normal(x + b * bs, bs, sc);
            }
            if (nb > 1) memset(x + bs, 0, sizeof(float) * bs);   /* an all-zero block */
            /* block 0 with amax 127: x * (127/amax) is exact, so halves are ties */
            for (int i = 0; i < bs; i++) x[i] = (float)irand(-126, 126) + (i % 3 ? 0.5f : 0.0f);
            x[0] = 127.0f;
            const size_t sz = cpu_act_row_size(kind, n);
            uint8_t *a = malloc(sz), *b = malloc(sz);
            memset(a, 0xAB, sz);
            memset(b, 0xCD, sz);
            quantize_act(kind, x, a, n, 0);
            quantize_act(kind, x, b, n, 1);
            CHECK(memcmp(a, b, sz) == 0, "quantize %s nb=%d: AVX2 == scalar byte for byte",
                  kind == CPU_ACT_Q8A32 ? "q8a32" : "q8a256", nb);
            /* the scalar blocks themselves: |q| <= 127, sums consistent, error <= d/2 */
            float *xd = malloc(sizeof(float) * n);
            act_dequant(kind, a, xd, n);
            int ok = 1;
            for (int64_t i = 0; i < n; i++) {
                const float d = kind == CPU_ACT_Q8A32 ? ((block_q8a32 *)a)[i / 32].d : ((block_q8a256 *)a)[i / 256].d;
                ok &= fabsf(xd[i] - x[i]) <= d * 0.5f * 1.0001f + 1e-30f;
            }
            if (kind == CPU_ACT_Q8A256) {
                const block_q8a256 *y = (const block_q8a256 *)a;
                for (int64_t bb = 0; bb < nb; bb++)
                    for (int j = 0; j < 16; j++) {
                        int s = 0;
                        for (int i = 0; i < 16; i++) s += y[bb].qs[16 * j + i];
                        ok &= y[bb].bs16[j] == s && (j % 2 || y[bb].bs32[j / 2] == s + y[bb].bs16[j + 1]);
                    }
            }
            CHECK(ok, "quantize kind %d nb=%d: rounding error <= d/2, block sums right", kind, nb);
            free(x);
            free(xd);
            free(a);
            free(b);
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Row dots                                                                  */
/* ------------------------------------------------------------------------- */

static void test_vdot_q(uint32_t type, int simd) {
    const qtype_traits *tr = qtype_get(type);
    const cpu_act kind = cpu_act_kind(type);
    const cpu_vdot_fn sdot = cpu_vdot_scalar(type), vdot = simd ? cpu_vdot_avx2(type) : NULL;
    CHECK(sdot != NULL, "%s: scalar dot exists", tr->name);
    if (simd) CHECK(vdot != NULL, "%s: AVX2 dot exists", tr->name);
    const int nbs[] = { 1, 2, 3, 4, 7 };
    for (size_t k = 0; k < MF_ARRAY_LEN(nbs); k++) {
        const int64_t n = (int64_t)nbs[k] * tr->blck;
        uint8_t *w = malloc(qtype_row_size(type, n));
        uint8_t *a = malloc(cpu_act_row_size(kind, n));
        float *x = malloc(sizeof(float) * n), *xd = malloc(sizeof(float) * n), *wb = malloc(sizeof(float) * n);
        /* exact inputs: the AVX2 result must equal the scalar one bit for bit */
        if (vdot && (kind == CPU_ACT_Q8A32 || nbs[k] <= 4)) {
            int ok = 1;
            for (int rep = 0; rep < 20; rep++) {
                rand_qrow(type, w, n, 1);
                exact_act(kind, a, n);
                ok &= vdot(n, w, a) == sdot(n, w, a);
            }
            CHECK(ok, "%s n=%lld exact inputs: AVX2 dot == scalar dot", tr->name, (long long)n);
        }
        double worst_s = 0.0, worst_r = 0.0, worst_q = 0.0;
        for (int rep = 0; rep < 20; rep++) {
            rand_qrow(type, w, n, 0);
            fill_normal(x, n, frand(0.1f, 3.0f));
            quantize_act(kind, x, a, n, simd);
            act_dequant(kind, a, xd, n);
            const float s = sdot(n, w, a);
            /* the scalar integer dot vs the f32 reference on the dequantized activations */
            const double nrm = abs_norm(type, w, xd, n, wb) + 1e-30;
            worst_s = fmax(worst_s, fabs(s - quant_dot_f32(type, w, xd, n)) / nrm);
            if (vdot) worst_r = fmax(worst_r, fabs(vdot(n, w, a) - s) / nrm);
            /* vs the reference on unquantized activations: within the rounding bound */
            const double bound = quant_bound(type, w, x, n, wb) * 1.001 + 1e-5 * abs_norm(type, w, x, n, wb);
            worst_q = fmax(worst_q, fabs(s - quant_dot_f32(type, w, x, n)) / bound);
        }
        CHECK(worst_s < 1e-5, "%s n=%lld: scalar q8 dot vs f32 reference on the same activations: %.2e", tr->name,
              (long long)n, worst_s);
        if (vdot)
            CHECK(worst_r < 1e-5, "%s n=%lld: AVX2 dot vs scalar dot: %.2e (normalised)", tr->name, (long long)n,
                  worst_r);
        CHECK(worst_q <= 1.0, "%s n=%lld: q8 dot vs f32 reference within the 8-bit rounding bound: %.2f of it",
              tr->name, (long long)n, worst_q);
        free(w);
        free(a);
        free(x);
        free(xd);
        free(wb);
    }
}

static void test_vdot_f(uint32_t type) {
    const cpu_vdot_fn vdot = cpu_vdot_avx2(type), sdot = cpu_vdot_scalar(type);
    const int64_t ns[] = { 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257 };
    double worst = 0.0, worst_s = 0.0;
    for (size_t k = 0; k < MF_ARRAY_LEN(ns); k++) {
        const int64_t n = ns[k];
        uint8_t *w = malloc((size_t)n * 4);
        float *x = malloc(sizeof(float) * n), *wb = malloc(sizeof(float) * n);
        rand_frow(type, w, n);
        fill_normal(x, n, 1.0f);
        const double ref = quant_dot_f32(type, w, x, n), nrm = abs_norm(type, w, x, n, wb) + 1e-30;
        worst = fmax(worst, fabs(vdot(n, w, x) - ref) / nrm);
        worst_s = fmax(worst_s, fabs(sdot(n, w, x) - ref) / nrm);
        free(w);
        free(x);
        free(wb);
    }
    CHECK(worst < 1e-5, "%s: AVX2 dot vs f32 reference: %.2e", qtype_name(type), worst);
    CHECK(worst_s < 1e-5, "%s: scalar dot vs f32 reference: %.2e", qtype_name(type), worst_s);
}

/* ------------------------------------------------------------------------- */
/* Packed micro-kernels                                                      */
/* ------------------------------------------------------------------------- */

static void test_gemm(const cpu_kernels *ks, uint32_t type) {
    const qtype_traits *tr = qtype_get(type);
    const cpu_act kind = cpu_act_kind(type);
    const char *kn = ks->name;
    const cpu_gemm_fn fast = ks->gemm(type), slow = cpu_gemm_scalar(type), base = cpu_gemm_avx2(type);
    const cpu_vdot_fn sdot = cpu_vdot_scalar(type);
    const cpu_gemm_fn unp = ks->gemm_unpacked(type);
    CHECK((ks->unpack_bytes(type, 256) != 0) == (unp != NULL), "%s %s: expanded size and kernel agree", kn, tr->name);
    uint8_t *ubuf = unp ? malloc(ks->unpack_bytes(type, 3 * 256)) : NULL;
    int ok_unp = 1, ok_base = 1;
    CHECK(fast && slow, "%s %s: packed kernels exist", kn, tr->name);
    if (!fast || !slow) return;
    const int rows_list[] = { 1, 5, 8, 13, 24 };
    const int nb_list[] = { 1, 2, 3 };
    for (int exact = 0; exact <= 1; exact++) {
        double worst = 0.0;
        int ok_exact = 1, ok_slow = 1, ok_pad = 1;
        for (size_t ri = 0; ri < MF_ARRAY_LEN(rows_list); ri++) {
            for (size_t bi = 0; bi < MF_ARRAY_LEN(nb_list); bi++) {
                const int rows = rows_list[ri], ntok = irand(1, 13);
                const int64_t cols = (int64_t)nb_list[bi] * tr->blck;
                const uint64_t rb = qtype_row_size(type, cols);
                const size_t ab = cpu_act_row_size(kind, cols);
                uint8_t *w = malloc(rb * rows), *act = malloc(ab * ntok);
                float *x = malloc(sizeof(float) * cols * ntok), *xd = malloc(sizeof(float) * cols), *wb = malloc(sizeof(float) * cols);
                for (int r = 0; r < rows; r++) rand_qrow(type, w + rb * r, cols, exact);
                if (exact) {
                    exact_act(kind, act, cols * ntok);
                } else {
                    fill_normal(x, cols * ntok, 1.0f);
                    for (int t = 0; t < ntok; t++) quantize_act(kind, x + cols * t, act + ab * t, cols, 1);
                }
                cpu_packed pk;
                CHECK(cpu_pack_init(&pk, type, rows, cols) == 0, "pack init");
                pk.data = malloc(pk.group_bytes * pk.n_groups);
                memset(pk.data, 0x5A, pk.group_bytes * pk.n_groups);
                cpu_pack_groups(&pk, w, 0, pk.n_groups);
                for (int64_t g = 0; g < pk.n_groups; g++) {
                    for (int t0 = 0; t0 < ntok; t0 += 4) {
                        const int nt = MF_MIN(4, ntok - t0);
                        float of[4][8], os[4][8];
                        poison(&of[0][0], 32);
                        poison(&os[0][0], 32);
                        const uint8_t *gp = pk.data + g * pk.group_bytes;
                        fast(gp, cols, act + ab * t0, ab, nt, of);
                        slow(gp, cols, act + ab * t0, ab, nt, os);
                        if (ks != &cpu_kernels_avx2) {
                            /* another set: the AVX2 kernel's bits, every input */
                            float ob[4][8];
                            poison(&ob[0][0], 32);
                            base(gp, cols, act + ab * t0, ab, nt, ob);
                            ok_base &= memcmp(ob, of, sizeof(float) * 8 * (size_t)nt) == 0;
                        }
                        if (unp) {
                            /* prefill path: expand once, same results */
                            memset(ubuf, 0xA5, ks->unpack_bytes(type, cols));
                            ks->unpack_group(type, gp, cols, ubuf);
                            float ou[4][8];
                            poison(&ou[0][0], 32);
                            unp(ubuf, cols, act + ab * t0, ab, nt, ou);
                            for (int t = 0; t < nt; t++)
                                for (int r = 0; r < 8; r++) ok_unp &= memcmp(&ou[t][r], &of[t][r], 4) == 0 || (exact ? 0 : fabsf(ou[t][r] - of[t][r]) <= 1e-6f * (fabsf(of[t][r]) + 1e-3f));
                        }
                        for (int t = 0; t < nt; t++) {
                            for (int r = 0; r < 8; r++) {
                                const int64_t row = 8 * g + r;
                                if (row >= rows) {
                                    ok_pad &= of[t][r] == 0.0f;
                                    continue;
                                }
                                const uint8_t *a = act + ab * (t0 + t);
                                const float ref = sdot(cols, w + rb * row, a);
                                ok_slow &= os[t][r] == ref;
                                if (exact) {
                                    ok_exact &= of[t][r] == ref;
                                } else {
                                    act_dequant(kind, a, xd, cols);
                                    const double nrm = abs_norm(type, w + rb * row, xd, cols, wb) + 1e-30;
                                    const double e = fabs(of[t][r] - ref) / nrm;
                                    worst = isnan(e) ? INFINITY : fmax(worst, e);
                                }
                            }
                        }
                    }
                }
                free(pk.data);
                free(w);
                free(act);
                free(x);
                free(xd);
                free(wb);
            }
        }
        CHECK(ok_slow, "%s%s: scalar packed kernel == scalar row dot (pack is invertible)", tr->name,
              exact ? " exact" : "");
        CHECK(ok_pad, "%s %s%s: padding rows of the last group give 0", kn, tr->name, exact ? " exact" : "");
        if (exact) CHECK(ok_exact, "%s %s exact inputs: packed kernel == scalar row dot", kn, tr->name);
        else CHECK(worst < 1e-5, "%s %s: packed kernel vs scalar row dot: %.2e (normalised)", kn, tr->name, worst);
    }
    if (ks != &cpu_kernels_avx2)
        CHECK(ok_base, "%s %s: packed kernel == the avx2 kernel bit for bit (random and exact inputs, 1-4 tokens)", kn,
              tr->name);
    if (unp) CHECK(ok_unp, "%s %s: expanded (prefill) kernel == packed kernel (exact inputs: bit for bit)", kn, tr->name);
    free(ubuf);
}

static void test_float_tile(uint32_t type) {
    const int64_t ns[] = { 1, 7, 8, 9, 33, 64, 130 };
    double worst = 0.0;
    for (size_t k = 0; k < MF_ARRAY_LEN(ns); k++) {
        const int64_t n = ns[k];
        const size_t rb = (size_t)qtype_row_size(type, n);
        uint8_t *w = malloc(rb * 4);
        float *x = malloc(sizeof(float) * n * 4), *wb = malloc(sizeof(float) * n);
        for (int r = 0; r < 4; r++) rand_frow(type, w + rb * r, n);
        fill_normal(x, n * 4, 1.0f);
        for (int nr = 1; nr <= 4; nr++)
            for (int nt = 1; nt <= 4; nt++) {
                float out[4 * 5];
                poison(out, 20);
                cpu_tile_float_avx2(type, n, w, rb, nr, x, n, nt, out, 5);
                for (int t = 0; t < nt; t++)
                    for (int r = 0; r < nr; r++) {
                        const double ref = quant_dot_f32(type, w + rb * r, x + n * t, n);
                        const double e = fabs(out[t * 5 + r] - ref) / (abs_norm(type, w + rb * r, x + n * t, n, wb) + 1e-30);
                        worst = isnan(e) ? INFINITY : fmax(worst, e);
                    }
            }
        free(w);
        free(x);
        free(wb);
    }
    CHECK(worst < 1e-5, "%s float tile (1..4 rows x 1..4 tokens, n tails) vs reference: %.2e", qtype_name(type), worst);
}

/* ------------------------------------------------------------------------- */
/* Element-wise ops and attention                                            */
/* ------------------------------------------------------------------------- */

static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / (den + 1e-30);
}

static void test_elementwise(void) {
    const int dims[] = { 1, 7, 8, 17, 64, 576, 2048 };
    double we = 0.0;
    for (size_t k = 0; k < MF_ARRAY_LEN(dims); k++) {
        const int d = dims[k];
        float *x = malloc(sizeof(float) * d), *w = malloc(sizeof(float) * d), *o = malloc(sizeof(float) * d),
              *r = malloc(sizeof(float) * d);
        fill_normal(x, d, 2.0f);
        fill_normal(w, d, 1.0f);
        poison(o, d);
        cpu_rmsnorm_avx2(o, x, w, d, 1e-5f);
        cpu_ref_rmsnorm(r, x, w, 1, d, 1e-5f);
        we = fmax(we, rel_err(o, r, d));
        free(x);
        free(w);
        free(o);
        free(r);
    }
    CHECK(we < 1e-6, "rmsnorm vs reference: %.2e", we);

    double ws = 0.0, wa = 0.0;
    for (int64_t n = 1; n <= 1000; n = n < 40 ? n + 1 : n * 5) {
        float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n), *o = malloc(sizeof(float) * n),
              *r = malloc(sizeof(float) * n);
        fill_normal(g, n, 4.0f);
        fill_normal(u, n, 1.0f);
        if (n > 3) { g[0] = -100.0f; g[1] = 100.0f; g[2] = 0.0f; }
        poison(o, n);
        cpu_swiglu_avx2(o, g, u, n);
        cpu_ref_swiglu(r, g, u, n);
        for (int64_t i = 0; i < n; i++) {
            const double e = fabs((double)o[i] - r[i]) / (fabs(r[i]) + 1e-30);
            ws = fmax(ws, isnan(e) ? INFINITY : (fabs(r[i]) < 1e-30 ? fabs(o[i]) : e));
        }
        memcpy(o, g, sizeof(float) * n);
        memcpy(r, g, sizeof(float) * n);
        cpu_add_avx2(o, u, n);
        for (int64_t i = 0; i < n; i++) r[i] += u[i];
        wa = fmax(wa, memcmp(o, r, sizeof(float) * n) ? 1.0 : 0.0);
        free(g);
        free(u);
        free(o);
        free(r);
    }
    CHECK(ws < 2e-6, "swiglu (vectorised exp) vs reference, elementwise relative: %.2e", ws);
    CHECK(wa == 0.0, "add == reference exactly");
}

static void test_rope(void) {
    const int rds[] = { 8, 16, 64, 128, 24 };
    double worst = 0.0;
    for (int mode = 0; mode <= 1; mode++)
        for (size_t k = 0; k < MF_ARRAY_LEN(rds); k++) {
            const int rope_dim = rds[k], head_dim = rope_dim + (k == 4 ? 8 : 0), n_heads = 3, n = 5;
            const float base = k % 2 ? 10000.0f : 500000.0f;
            int32_t pos[5] = { 0, 1, 17, 1000, 4095 };
            float *x = malloc(sizeof(float) * n * n_heads * head_dim), *y = malloc(sizeof(float) * n * n_heads * head_dim);
            fill_normal(x, (int64_t)n * n_heads * head_dim, 1.0f);
            memcpy(y, x, sizeof(float) * n * n_heads * head_dim);
            {
                const mf_rope rp = rope_plain(rope_dim, base, (mf_rope_mode)mode);
                cpu_ref_rope(y, pos, n, n_heads, head_dim, &rp);
            }
            float *cs = malloc(sizeof(float) * rope_dim);
            for (int t = 0; t < n; t++) {
                for (int i = 0; i < rope_dim / 2; i++) {
                    const double theta = (double)pos[t] * pow((double)base, -2.0 * i / rope_dim);
                    cs[2 * i] = (float)cos(theta);
                    cs[2 * i + 1] = (float)sin(theta);
                }
                for (int hh = 0; hh < n_heads; hh++)
                    cpu_rope_head_avx2(x + ((int64_t)t * n_heads + hh) * head_dim, cs, rope_dim, mode);
            }
            worst = fmax(worst, rel_err(x, y, (int64_t)n * n_heads * head_dim));
            free(x);
            free(y);
            free(cs);
        }
    CHECK(worst < 1e-6, "rope (norm and neox, partial rotary) vs reference: %.2e", worst);
}

static void test_attention(void) {
    const int nkvs[] = { 1, 2, 3, 4, 5, 8, 17, 100, 130 };
    const int hds[] = { 64, 128, 40 };
    double worst = 0.0, worst_g = 0.0;
    for (size_t hi = 0; hi < MF_ARRAY_LEN(hds); hi++)
        for (size_t ki = 0; ki < MF_ARRAY_LEN(nkvs); ki++) {
            const int hd = hds[hi], n_kv = nkvs[ki], n_head = 4, n_head_kv = 2, kv_dim = n_head_kv * hd;
            float *q = malloc(sizeof(float) * n_head * hd), *kc = malloc(sizeof(float) * n_kv * kv_dim),
                  *vc = malloc(sizeof(float) * n_kv * kv_dim), *o = malloc(sizeof(float) * n_head * hd),
                  *r = malloc(sizeof(float) * n_head * hd), *att = malloc(sizeof(float) * n_kv);
            fill_normal(q, n_head * hd, 1.0f);
            fill_normal(kc, (int64_t)n_kv * kv_dim, 1.0f);
            fill_normal(vc, (int64_t)n_kv * kv_dim, 1.0f);
            cpu_ref_attention_token(r, q, kc, vc, n_kv, n_head, n_head_kv, hd, att);
            poison(o, n_head * hd);
            for (int hh = 0; hh < n_head; hh++)
                cpu_attn_head_avx2(o + hh * hd, q + hh * hd, kc + (hh / 2) * hd, vc + (hh / 2) * hd, kv_dim, n_kv, hd,
                                   1.0f / sqrtf((float)hd), att);
            worst = fmax(worst, rel_err(o, r, n_head * hd));
            /* grouped: the 2 heads of each KV head at once */
            float *att2 = malloc(sizeof(float) * 2 * n_kv);
            poison(o, n_head * hd);
            for (int kh = 0; kh < n_head_kv; kh++)
                cpu_attn_group_avx2(o + kh * 2 * hd, q + kh * 2 * hd, 2, kc + kh * hd, vc + kh * hd, kv_dim, n_kv, hd,
                                    1.0f / sqrtf((float)hd), att2);
            worst_g = fmax(worst_g, rel_err(o, r, n_head * hd));
            free(att2);
            free(q);
            free(kc);
            free(vc);
            free(o);
            free(r);
            free(att);
        }
    CHECK(worst < 1e-5, "attention head (GQA, n_kv 1..100, hd 40/64/128) vs reference: %.2e", worst);
    CHECK(worst_g < 1e-5, "attention GQA group kernel vs reference: %.2e", worst_g);
}

/* ------------------------------------------------------------------------- */
/* KV cache rows: f16 and q8_0 (--cache-type-k / -v)                          */
/* ------------------------------------------------------------------------- */

/* The q8_0 row as ggml's quantize_row_q8_0_ref writes it, written out here apart from
 * quant.c: per block of 32, d = amax / 127 (stored as f16), q = roundf(x / d) through
 * the f32 reciprocal. */
static void kv_q8_oracle(const float *x, uint8_t *dst, int n) {
    for (int b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
        const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t dh = mf_f32_to_f16(d);
        memcpy(dst + 34 * b, &dh, 2);
        for (int i = 0; i < 32; i++) dst[34 * b + 2 + i] = (uint8_t)(int8_t)roundf(x[32 * b + i] * id);
    }
}

static void test_kv_rows(int simd) {
    const int dims[] = { 32, 64, 96, 256 };
    int store_ok = 1, load_ok = 1, slice_ok = 1, simd_ok = 1;
    double worst_bound = 0.0; /* q8_0: max |x - x'| / d over elements, d = the block's amax / 127 */
    for (size_t di = 0; di < MF_ARRAY_LEN(dims); di++) {
        const int n = dims[di];
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *z = malloc(sizeof(float) * n);
        uint8_t *row = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
        for (int rep = 0; rep < 20; rep++) {
            fill_normal(x, n, rep % 3 ? 1.0f : 30.0f);
            if (rep == 1) memset(x, 0, sizeof(float) * 32);  /* a block of zeros: d = 0 */
            if (rep == 2) x[5] = 1000.0f;                    /* an outlier in the first block */
            for (int ti = 0; ti < 2; ti++) {
                const int type = ti ? QTYPE_Q8_0 : QTYPE_F16;
                const size_t rb = (size_t)qtype_row_size((uint32_t)type, (uint64_t)n);
                cpu_kv_store_row(type, row, x, n);
                if (type == QTYPE_Q8_0) kv_q8_oracle(x, want, n);
                else
                    for (int i = 0; i < n; i++) {
                        const uint16_t hh = mf_f32_to_f16(x[i]);
                        memcpy(want + 2 * i, &hh, 2);
                    }
                store_ok &= memcmp(row, want, rb) == 0;
                poison(y, (size_t)n);
                cpu_kv_load_ref(type, row, 0, n, y);
                quant_dequantize_row((uint32_t)type, row, z, n);
                load_ok &= memcmp(y, z, sizeof(float) * n) == 0;
                if (type == QTYPE_Q8_0)
                    for (int i = 0; i < n; i++) {
                        float amax = 0.0f;
                        for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++) amax = fmaxf(amax, fabsf(x[j]));
                        if (amax > 0.0f) worst_bound = fmax(worst_bound, fabs((double)y[i] - x[i]) / (amax / 127.0));
                        else if (y[i] != 0.0f) worst_bound = INFINITY;
                    }
                /* slices: any start, any length (a head's values, or a part of a block) */
                for (int k = 0; k < 12; k++) {
                    const int e0 = irand(0, n - 1), len = irand(1, n - e0);
                    poison(y, (size_t)len);
                    cpu_kv_load_ref(type, row, e0, len, y);
                    slice_ok &= memcmp(y, z + e0, sizeof(float) * len) == 0;
                    if (simd) {
                        poison(y, (size_t)len);
                        cpu_kv_load_avx2(type, row, e0, len, y);
                        simd_ok &= memcmp(y, z + e0, sizeof(float) * len) == 0;
                    }
                }
            }
        }
        free(x); free(y); free(z); free(row); free(want);
    }
    CHECK(store_ok, "kv rows: f16 and q8_0 stores give the oracle's bytes (ggml's q8_0 reference)");
    CHECK(load_ok, "kv rows: a whole row loads as quant_dequantize_row");
    CHECK(slice_ok, "kv rows: slices (any start and length) load as the whole row's values");
    if (simd) CHECK(simd_ok, "kv rows: cpu_kv_load_avx2 == cpu_kv_load_ref, bit for bit");
    /* |x - d16 q| <= d / 2 + 127 |d - d16|, with |d - d16| <= d * 2^-11 */
    CHECK(worst_bound <= 0.5 + 127.0 / 2048 + 1e-6, "kv rows: q8_0 error within d/2 + the f16 rounding of d: %.4f d",
          worst_bound);
}

/* The attention over typed caches: the same bits as over the f32 rows they dequantize
 * to (the kernels dequantize, then do the f32 arithmetic), and the SIMD group kernel
 * within float rounding of the reference. Head dim 8 has q8_0 blocks spanning 4 heads
 * (stories260K's shape). */
static void test_kv_attention(void) {
    const int hds[] = { 8, 32, 64, 128 };
    const int nkvs[] = { 1, 5, 64, 65, 130 };
    const int pairs[][2] = { { QTYPE_Q8_0, QTYPE_Q8_0 }, { QTYPE_F16, QTYPE_F16 }, { QTYPE_Q8_0, QTYPE_F32 },
                             { QTYPE_F32, QTYPE_F16 } };
    int same_simd = 1, same_ref = 1;
    double worst = 0.0;
    for (size_t hi = 0; hi < MF_ARRAY_LEN(hds); hi++)
        for (size_t ki = 0; ki < MF_ARRAY_LEN(nkvs); ki++)
            for (size_t pi = 0; pi < MF_ARRAY_LEN(pairs); pi++) {
                const int hd = hds[hi], n_kv = nkvs[ki], tk = pairs[pi][0], tv = pairs[pi][1];
                const int n_head_kv = hd < 32 ? 32 / hd : 2, G = 2, n_head = G * n_head_kv, kv_dim = n_head_kv * hd;
                const size_t rk = (size_t)qtype_row_size((uint32_t)tk, (uint64_t)kv_dim);
                const size_t rv = (size_t)qtype_row_size((uint32_t)tv, (uint64_t)kv_dim);
                float *q = malloc(sizeof(float) * n_head * hd), *kf = malloc(sizeof(float) * n_kv * kv_dim),
                      *vf = malloc(sizeof(float) * n_kv * kv_dim), *o = malloc(sizeof(float) * n_head * hd),
                      *o2 = malloc(sizeof(float) * n_head * hd), *r = malloc(sizeof(float) * n_head * hd),
                      *att = malloc(sizeof(float) * G * n_kv), *buf = malloc(sizeof(float) * CPU_ATTN_CHUNK * hd);
                uint8_t *kc = malloc(rk * n_kv), *vc = malloc(rv * n_kv);
                fill_normal(q, n_head * hd, 1.0f);
                fill_normal(kf, (int64_t)n_kv * kv_dim, 1.0f);
                fill_normal(vf, (int64_t)n_kv * kv_dim, 1.0f);
                for (int j = 0; j < n_kv; j++) {
                    cpu_kv_store_row(tk, kc + rk * j, kf + (int64_t)j * kv_dim, kv_dim);
                    cpu_kv_store_row(tv, vc + rv * j, vf + (int64_t)j * kv_dim, kv_dim);
                    /* kf, vf: the values the typed rows hold */
                    cpu_kv_load_ref(tk, kc + rk * j, 0, kv_dim, kf + (int64_t)j * kv_dim);
                    cpu_kv_load_ref(tv, vc + rv * j, 0, kv_dim, vf + (int64_t)j * kv_dim);
                }
                const float scale = 1.0f / sqrtf((float)hd);
                poison(o, (size_t)n_head * hd);
                poison(o2, (size_t)n_head * hd);
                for (int kh = 0; kh < n_head_kv; kh++) {
                    cpu_attn_group_kv_avx2(o + kh * G * hd, q + kh * G * hd, G, kc, vc, tk, tv, rk, rv, kh * hd, n_kv,
                                           hd, scale, att, buf);
                    cpu_attn_group_avx2(o2 + kh * G * hd, q + kh * G * hd, G, kf + kh * hd, vf + kh * hd, kv_dim, n_kv,
                                        hd, scale, att);
                }
                same_simd &= memcmp(o, o2, sizeof(float) * n_head * hd) == 0;
                poison(r, (size_t)n_head * hd);
                poison(o2, (size_t)n_head * hd);
                cpu_ref_attention_token_kv(r, q, kc, vc, tk, tv, n_kv, n_head, n_head_kv, hd, att, buf);
                cpu_ref_attention_token(o2, q, kf, vf, n_kv, n_head, n_head_kv, hd, att);
                same_ref &= memcmp(r, o2, sizeof(float) * n_head * hd) == 0;
                worst = fmax(worst, rel_err(o, r, n_head * hd));
                free(q); free(kf); free(vf); free(o); free(o2); free(r); free(att); free(buf); free(kc); free(vc);
            }
    CHECK(same_simd, "kv attention: group kernel over f16/q8_0 rows == over their f32 values, bit for bit");
    CHECK(same_ref, "kv attention: reference over f16/q8_0 rows == over their f32 values, bit for bit");
    CHECK(worst < 1e-5, "kv attention: group kernel over typed rows vs the reference (hd 8..128): %.2e", worst);
}

/* ------------------------------------------------------------------------- */
/* The backend: threads, packing, dispatch                                   */
/* ------------------------------------------------------------------------- */

typedef struct fake_model {
    mf_model m;
    mf_layer layer;
} fake_model;

static void fake_init(fake_model *f, int dim, int n_ff, int n_head, int n_head_kv, int hd) {
    memset(f, 0, sizeof *f);
    f->m.hp.n_embd = dim;
    f->m.hp.n_ff = n_ff;
    f->m.hp.n_head = n_head;
    f->m.hp.n_head_kv = n_head_kv;
    f->m.hp.head_dim = hd;
    f->m.hp.n_layer = 1;
    f->m.layers = &f->layer;
}

/* simd "0": MINFER_CPU_DISABLE=avx2; repack "0": repack off; also off: the
 * paths named in g_disable (the kernel set under test). */
static const char *g_disable = "";
static const mf_kv_types *g_kvt; /* the KV cache types of the backends made (NULL: default) */
static mf_backend *make_backend(fake_model *f, int threads, const char *simd, const char *repack) {
    char list[128];
    snprintf(list, sizeof list, "%s%s%s", g_disable, strcmp(simd, "0") == 0 ? ",avx2" : "",
             strcmp(repack, "0") == 0 ? ",repack" : "");
    setenv("MINFER_CPU_DISABLE", list, 1);
    mf_err err;
    mf_backend *be = cpu_backend_new(threads, &err);
    if (be && be->init(be, &f->m, 64, 2, 16, g_kvt, &err) != MF_OK) {
        fprintf(stderr, "init: %s\n", err.msg);
        be->destroy(be);
        be = NULL;
    }
    unsetenv("MINFER_CPU_DISABLE");
    return be;
}

/* FNV-1a over the bytes of a float array: results must not depend on threads. */
static uint64_t fnv(const float *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* set: index into KSETS (simd) or -1 (scalar). */
static void test_backend_matmul(int simd, int set) {
    static uint64_t hash1[16][4][40];   /* [type][rows][n] with 1 thread */
    static uint64_t hash_avx2[16][4][40];  /* the same with the avx2 set */
    int same_as_1 = 1, same_as_avx2 = 1;
    const char *kn = simd ? KSETS[set].k->name : "scalar";
    const uint32_t types[] = { QTYPE_Q4_K, QTYPE_Q6_K, QTYPE_Q8_0, QTYPE_Q4_1, QTYPE_Q4_0, QTYPE_Q5_0, QTYPE_Q5_1,
                               QTYPE_Q5_K, QTYPE_F16, QTYPE_F32, QTYPE_BF16, QTYPE_Q2_K, QTYPE_Q3_K, QTYPE_IQ4_NL,
                               QTYPE_IQ4_XS };
    const int cols = 512;
    const int rows_list[] = { 13, 64, 200 };
    /* Weight buffers live until the backends are gone: packed copies are keyed by
     * the weight's address (weights are immutable while a backend lives). */
    uint8_t *keep[64];
    int n_keep = 0;
    const mf_rng start = rng;   /* the same weights and inputs for every thread count */
    for (int threads = 1; threads <= 3; threads++) {
        rng = start;
        fake_model f;
        fake_init(&f, cols, cols, 8, 4, 64);
        mf_backend *bp = make_backend(&f, threads, simd ? "1" : "0", "1");
        mf_backend *br = make_backend(&f, threads, simd ? "1" : "0", "0");
        CHECK(bp && br, "backend with %d threads", threads);
        if (!bp || !br) return;
        for (size_t ti = 0; ti < MF_ARRAY_LEN(types); ti++) {
            const uint32_t type = types[ti];
            const int quantized = cpu_act_kind(type) != CPU_ACT_F32;
            double worst_q = 0.0, worst_pr = 0.0, worst_f = 0.0;
            int exact_scalar = 1;
            for (size_t ri = 0; ri < MF_ARRAY_LEN(rows_list); ri++) {
                const int rows = rows_list[ri];
                const uint64_t rb = qtype_row_size(type, cols);
                uint8_t *wd = malloc(rb * rows);
                for (int r = 0; r < rows; r++) {
                    if (quantized) rand_qrow(type, wd + rb * r, cols, 0);
                    else rand_frow(type, wd + rb * r, cols);
                }
                float bias[200];
                fill_normal(bias, rows, 0.1f);
                mf_weight w = { .type = type, .cols = cols, .rows = rows, .host = wd, .nbytes = rb * rows, .name = "w" };
                mf_weight bw = { .type = QTYPE_F32, .cols = rows, .rows = 1, .host = bias, .nbytes = 4u * rows, .name = "b" };
                /* 37: above every set's unpack_min (the expanded path of avx2 and avx512) */
                for (int n = 1; n <= 37; n += (n < 5 ? 1 : n < 13 ? 4 : 24)) {
                    float *x = malloc(sizeof(float) * cols * n), *op = malloc(sizeof(float) * rows * n),
                          *orr = malloc(sizeof(float) * rows * n), *ref = malloc(sizeof(float) * rows * n),
                          *wrow = malloc(sizeof(float) * cols), *wb = malloc(sizeof(float) * cols);
                    fill_normal(x, (int64_t)cols * n, 1.0f);
                    poison(op, (size_t)rows * n);
                    poison(orr, (size_t)rows * n);
                    const mf_weight *bptr = (n & 1) ? &bw : NULL;
                    bp->ops->matmul(bp, op, x, &w, bptr, n);
                    br->ops->matmul(br, orr, x, &w, bptr, n);
                    const uint64_t hv = fnv(op, (size_t)rows * n) ^ (fnv(orr, (size_t)rows * n) * 3);
                    if (threads == 1) hash1[ti][ri][n] = hv;
                    else same_as_1 &= hash1[ti][ri][n] == hv;
                    if (simd && set == 0 && threads == 1) hash_avx2[ti][ri][n] = hv;
                    else if (simd && threads == 1) same_as_avx2 &= hash_avx2[ti][ri][n] == hv;
                    cpu_ref_matmul(ref, rows, x, &w, bptr, n, 0, rows, wrow);
                    for (int t = 0; t < n; t++)
                        for (int r = 0; r < rows; r++) {
                            const int64_t i = (int64_t)t * rows + r;
                            const double nrm = abs_norm(type, wd + rb * r, x + (int64_t)cols * t, cols, wb) + 1e-30;
                            if (!simd) {
                                exact_scalar &= op[i] == ref[i] && orr[i] == ref[i];
                            } else if (quantized) {
                                const double bound = quant_bound(type, wd + rb * r, x + (int64_t)cols * t, cols, wb) * 1.001 + 1e-5 * nrm;
                                const double e = fabs(op[i] - ref[i]) / bound;
                                worst_q = isnan(e) ? INFINITY : fmax(worst_q, e);
                                const double e2 = fabs(op[i] - orr[i]) / nrm;
                                worst_pr = isnan(e2) ? INFINITY : fmax(worst_pr, e2);
                            } else {
                                const double e = fabs(op[i] - ref[i]) / nrm;
                                worst_f = isnan(e) ? INFINITY : fmax(worst_f, fmax(e, fabs(orr[i] - ref[i]) / nrm));
                            }
                        }
                    free(x);
                    free(op);
                    free(orr);
                    free(ref);
                    free(wrow);
                    free(wb);
                }
                keep[n_keep++] = wd;
            }
            const char *tn = qtype_name(type);
            if (!simd) {
                CHECK(exact_scalar, "backend scalar, %d threads, %s: matmul == cpu_ref_matmul exactly", threads, tn);
            } else if (quantized) {
                CHECK(worst_q <= 1.0, "backend %s, %d threads, %s: matmul vs f32 reference within the 8-bit bound (%.2f)",
                      kn, threads, tn, worst_q);
                CHECK(worst_pr < 1e-5, "backend %s, %d threads, %s: packed vs row path %.2e", kn, threads, tn, worst_pr);
            } else {
                CHECK(worst_f < 1e-5, "backend %s, %d threads, %s: matmul vs reference %.2e", kn, threads, tn, worst_f);
            }
        }
        bp->destroy(bp);
        br->destroy(br);
        while (n_keep > 0) free(keep[--n_keep]);
    }
    CHECK(same_as_1, "backend %s matmul: bit-identical results with 1, 2 and 3 threads", kn);
    if (simd && set > 0)
        CHECK(same_as_avx2, "backend %s matmul: bit-identical to the avx2 set (15 types, 1-37 tokens, packed and rows)",
              kn);
}

/* The table of paths: names resolve to the expected kernel set on this CPU. */
static void test_paths(void) {
    cpu_choice c;
    mf_err err;
    CHECK(cpu_choose_list(&c, "", &err) == MF_OK, "paths: empty list");
    const cpu_kernels *best = !cpu_has_avx2() ? NULL
                              : cpu_has_avx512vnni() ? &cpu_kernels_avx512vnni
                              : cpu_has_avx512() ? &cpu_kernels_avx512 : &cpu_kernels_avx2;
    CHECK(c.kernels == best && c.simd == cpu_has_avx2() && c.repack == c.simd && c.disabled[0] == 0,
          "paths: nothing disabled -> the best set the CPU has (%s)", best ? best->name : "scalar");
    CHECK(cpu_choose_list(&c, "avx512-vnni", &err) == MF_OK &&
              c.kernels == (cpu_has_avx512() ? &cpu_kernels_avx512 : best) && strcmp(c.disabled, "avx512-vnni") == 0,
          "paths: avx512-vnni off -> avx512 where the CPU has it");
    CHECK(cpu_choose_list(&c, "avx512", &err) == MF_OK && c.kernels == (best ? &cpu_kernels_avx2 : NULL),
          "paths: avx512 off -> avx2");
    CHECK(cpu_choose_list(&c, " repack , avx512", &err) == MF_OK && !c.repack && c.simd == cpu_has_avx2() &&
              strcmp(c.disabled, "avx512 repack") == 0,
          "paths: two names with spaces (disabled: '%s')", c.disabled);
    CHECK(cpu_choose_list(&c, "all", &err) == MF_OK && !c.simd && !c.repack && !c.kernels, "paths: all -> scalar");
    CHECK(cpu_choose_list(&c, "avx2", &err) == MF_OK && !c.simd && !c.kernels, "paths: avx2 off -> scalar");
    CHECK(cpu_choose_list(&c, "avx512,sse9", &err) == MF_ERR_USAGE && strstr(err.msg, "sse9") &&
              strstr(err.msg, "avx512-vnni"),
          "paths: unknown name is a usage error naming it and the known ones (%s)", err.msg);
    setenv("MINFER_CPU_DISABLE", "nosuch", 1);
    mf_backend *be = cpu_backend_new(1, &err);
    unsetenv("MINFER_CPU_DISABLE");
    CHECK(be == NULL && strstr(err.msg, "nosuch"), "backend: MINFER_CPU_DISABLE=nosuch refused (%s)", err.msg);
    if (be) be->destroy(be);
}

static void test_backend_ops(int simd) {
    const int n_head = 6, n_head_kv = 2, hd = 64, dim = n_head * hd, kv_dim = n_head_kv * hd;
    /* the default cache (f32), then f16 and q8_0 K and V (-ctk / -ctv), and a mix */
    const mf_kv_types kvts[] = { { MF_KV_DEFAULT, MF_KV_DEFAULT }, { QTYPE_F16, QTYPE_F16 }, { QTYPE_Q8_0, QTYPE_Q8_0 },
                                 { QTYPE_Q8_0, QTYPE_F16 } };
    for (size_t ki = 0; ki < MF_ARRAY_LEN(kvts); ki++)
    for (int threads = 1; threads <= 2; threads++) {
        g_kvt = &kvts[ki];
        fake_model f;
        fake_init(&f, dim, 3 * dim, n_head, n_head_kv, hd);
        mf_backend *be = make_backend(&f, threads, simd ? "1" : "0", "1");
        CHECK(be != NULL, "backend for ops");
        if (!be) return;
        /* A prompt of 13 tokens in seq 1, then one more token: attention, rope,
         * rmsnorm, swiglu, add against the reference. */
        const int n = 13;
        int32_t tok[14] = { 0 }, pos[14], seq[14];
        for (int i = 0; i < 14; i++) { pos[i] = i; seq[i] = 1; }
        mf_batch b = { .n = n, .tok = tok, .pos = pos, .seq = seq };
        float *q = malloc(sizeof(float) * 14 * dim), *k = malloc(sizeof(float) * 14 * kv_dim),
              *v = malloc(sizeof(float) * 14 * kv_dim), *o = malloc(sizeof(float) * 14 * dim),
              *r = malloc(sizeof(float) * 14 * dim), *att = malloc(sizeof(float) * 64);
        fill_normal(q, 14 * dim, 1.0f);
        fill_normal(k, 14 * kv_dim, 1.0f);
        fill_normal(v, 14 * kv_dim, 1.0f);
        /* rope on copies */
        float *qr = malloc(sizeof(float) * 14 * dim);
        memcpy(qr, q, sizeof(float) * 14 * dim);
        const mf_rope rp = rope_plain(hd, 10000.0f, MF_ROPE_NORM);
        be->ops->rope(be, q, &b, n_head, hd, &rp);
        cpu_ref_rope(qr, pos, n, n_head, hd, &rp);
        CHECK(rel_err(q, qr, (int64_t)n * dim) < 1e-6, "backend %s rope, %d threads", simd ? "avx2" : "scalar", threads);
        poison(o, 14 * dim);
        be->ops->attention(be, o, q, k, v, 0, &b);
        mf_batch b1 = { .n = 1, .tok = tok, .pos = pos + n, .seq = seq + n };
        be->ops->attention(be, o + n * dim, q + n * dim, k + n * kv_dim, v + n * kv_dim, 0, &b1);
        const int tk = kvts[ki].k == MF_KV_DEFAULT ? QTYPE_F32 : kvts[ki].k;
        const int tv = kvts[ki].v == MF_KV_DEFAULT ? QTYPE_F32 : kvts[ki].v;
        CHECK(be->kv_type_k == tk && be->kv_type_v == tv, "backend reports its cache types %s/%s", qtype_name(tk),
              qtype_name(tv));
        /* the reference over the rows as the backend stores them */
        const size_t rk = (size_t)qtype_row_size((uint32_t)tk, kv_dim), rv = (size_t)qtype_row_size((uint32_t)tv, kv_dim);
        uint8_t *kq = malloc(rk * 14), *vq = malloc(rv * 14);
        float kvbuf[64];
        for (int i = 0; i < 14; i++) {
            cpu_kv_store_row(tk, kq + rk * i, k + i * kv_dim, kv_dim);
            cpu_kv_store_row(tv, vq + rv * i, v + i * kv_dim, kv_dim);
        }
        for (int i = 0; i < 14; i++)
            cpu_ref_attention_token_kv(r + i * dim, q + i * dim, kq, vq, tk, tv, i + 1, n_head, n_head_kv, hd, att,
                                       kvbuf);
        free(kq);
        free(vq);
        CHECK(rel_err(o, r, 14 * dim) < 1e-5, "backend %s attention (prompt of 13 + 1 token), KV %s/%s, %d threads: %.2e",
              simd ? "avx2" : "scalar", qtype_name(tk), qtype_name(tv), threads, rel_err(o, r, 14 * dim));
        /* rmsnorm with an f32 weight, swiglu, add over a large buffer (threaded) */
        const int64_t big = 3 * 64 * 1024 + 5;
        float *g = malloc(sizeof(float) * big), *u = malloc(sizeof(float) * big), *go = malloc(sizeof(float) * big),
              *gr = malloc(sizeof(float) * big);
        fill_normal(g, big, 3.0f);
        fill_normal(u, big, 1.0f);
        poison(go, big);
        be->ops->swiglu(be, go, g, u, big);
        cpu_ref_swiglu(gr, g, u, big);
        CHECK(rel_err(go, gr, big) < 1e-6, "backend swiglu over %lld values, %d threads", (long long)big, threads);
        memcpy(go, g, sizeof(float) * big);
        memcpy(gr, g, sizeof(float) * big);
        be->ops->add(be, go, u, big);
        for (int64_t i = 0; i < big; i++) gr[i] += u[i];
        CHECK(memcmp(go, gr, sizeof(float) * big) == 0, "backend add, %d threads", threads);
        float nw[384];
        fill_normal(nw, dim, 1.0f);
        mf_weight wn = { .type = QTYPE_F32, .cols = dim, .rows = 1, .host = nw, .nbytes = sizeof nw, .name = "norm" };
        const int nrows = (int)(big / dim);
        poison(go, (size_t)nrows * dim);
        be->ops->rmsnorm(be, go, g, &wn, nrows, dim, 1e-6f);
        cpu_ref_rmsnorm(gr, g, nw, nrows, dim, 1e-6f);
        CHECK(rel_err(go, gr, (int64_t)nrows * dim) < 1e-6, "backend rmsnorm of %d rows, %d threads", nrows, threads);
        free(g); free(u); free(go); free(gr);
        free(q); free(k); free(v); free(o); free(r); free(att); free(qr);
        be->destroy(be);
    }
    g_kvt = NULL;
    /* a q8_0 row must hold whole blocks: 2 kv heads of 8 are 16 values */
    fake_model f;
    fake_init(&f, 64, 128, 4, 2, 8);
    mf_err err = { { 0 } };
    mf_backend *be = cpu_backend_new(1, &err);
    const mf_kv_types q8 = { QTYPE_Q8_0, QTYPE_F32 }, bad = { QTYPE_Q4_0, QTYPE_F32 };
    CHECK(be && be->init(be, &f.m, 16, 1, 4, &q8, &err) == MF_ERR_USAGE && strstr(err.msg, "--cache-type-k q8_0") &&
              strstr(err.msg, "16 values"),
          "backend: q8_0 over rows of 16 values refused (%s)", err.msg);
    CHECK(be && be->init(be, &f.m, 16, 1, 4, &bad, &err) == MF_ERR_USAGE && strstr(err.msg, "q4_0"),
          "backend: a cache type it cannot hold refused (%s)", err.msg);
    if (be) be->destroy(be);
}

int main(void) {
    mf_rng_seed(&rng, 20261129);
    const int simd = have_avx2();
    if (!simd) SKIP("no AVX2/FMA/F16C on this CPU: AVX2 kernels not tested");
    test_pool();
    for (size_t i = 0; i < MF_ARRAY_LEN(QTYPES); i++) test_vdot_q(QTYPES[i], simd);
    if (simd) {
        test_quantize();
        for (size_t i = 0; i < MF_ARRAY_LEN(FTYPES); i++) {
            test_vdot_f(FTYPES[i]);
            test_float_tile(FTYPES[i]);
        }
        char ran[128] = "";
        for (size_t k = 0; k < MF_ARRAY_LEN(KSETS); k++) {
            if (!KSETS[k].has()) {
                SKIP("no %s on this CPU: %s kernels not tested", KSETS[k].needs, KSETS[k].k->name);
                continue;
            }
            for (size_t i = 0; i < MF_ARRAY_LEN(QTYPES); i++) test_gemm(KSETS[k].k, QTYPES[i]);
            snprintf(ran + strlen(ran), sizeof ran - strlen(ran), " %s", KSETS[k].k->name);
        }
        fprintf(stderr, "test_cpu_kernels: kernel sets tested:%s\n", ran);
        test_elementwise();
        test_rope();
        test_attention();
        test_kv_attention();
    }
    test_kv_rows(simd);
    test_paths();
    test_backend_matmul(0, -1);
    test_backend_ops(0);
    if (simd) {
        /* each set alone: turn off the better ones */
        static const char *const off[] = { "avx512", "avx512-vnni", "" };
        const mf_rng start = rng;   /* the same weights and inputs for every set */
        for (size_t k = 0; k < MF_ARRAY_LEN(KSETS); k++) {
            if (!KSETS[k].has()) continue;
            rng = start;
            g_disable = off[k];
            test_backend_matmul(1, (int)k);
        }
        g_disable = "";
        test_backend_ops(1);
    }
    return test_summary("test_cpu_kernels");
}

/* cpu_gemm.c - kernel lab for the CPU matmul paths: packed x8 micro-kernels vs
 * row dots, decode (1 token) and prefill (many tokens), one thread and all.
 *
 *   make bench-cpu-lab && build/bench/cpu_gemm [threads | micro]
 *   (env: ONLY=q4_K one type; DOWN=1 also the 2048 x 5632 shape; NO_UNPACK=1,
 *   TBLOCK=n, NO_OUT=1 prefill variants; KSET=avx2|avx512|avx512-vnni the packed
 *   kernel set, default the best this CPU has)
 *
 * Reports, per weight type and shape:
 *   gemv-cold  GB/s of weight bytes, matrix larger than the caches (decode speed)
 *   gemv-hot   GB/s with the matrix in L2 (the kernel's own ceiling)
 *   gemm       GMAC/s with 128 tokens (prefill speed), i.e. rows*cols*tokens/s
 * Each row of the output is the best of a few repetitions. `micro`: one group of
 * 8 rows x 2048 hot in cache, ns per x8 block and GMAC/s per tokens-per-call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/paths_cpu.h"
#include "cpu/threads.h"
#include "quant.h"
#include "util.h"

typedef struct job {
    const cpu_packed *pk;
    const uint8_t *wraw;      /* GGUF rows (row path) */
    uint32_t type;
    const uint8_t *act;
    size_t as;
    int n;
    float *out;
    int packed;
    int reps_inner;
} job;

static const cpu_kernels *KS;   /* the kernel set under test */

static void run_job(void *ctx, int ith, int nth) {
    const job *j = ctx;
    const int64_t rows = j->pk->rows, cols = j->pk->cols;
    float tile[4][8];
    if (j->packed) {
        /* as the backend: K-quants expand each group once per token block */
        const cpu_gemm_fn gemm = KS->gemm(j->type), gu = KS->gemm_unpacked(j->type);
        const int unpack = gu && j->n >= 8 && !getenv("NO_UNPACK");
        const int step = unpack ? KS->gemm_unpacked_nt(j->type) : 4;
        const int tblock = getenv("TBLOCK") ? atoi(getenv("TBLOCK")) : 64;
        uint8_t *ub = unpack ? aligned_alloc(64, KS->unpack_bytes(j->type, cols)) : NULL;
        int64_t g0, g1;
        cpu_split(j->pk->n_groups, 1, ith, nth, &g0, &g1);
        for (int rep = 0; rep < j->reps_inner; rep++)
            for (int tb = 0; tb < j->n; tb += tblock) {
                const int te = MF_MIN(j->n, tb + tblock);
                for (int64_t g = g0; g < g1; g++) {
                    const uint8_t *gp = j->pk->data + g * j->pk->group_bytes;
                    if (unpack) KS->unpack_group(j->type, gp, cols, ub);
                    for (int t0 = tb; t0 < te; t0 += step) {
                        const int nt = MF_MIN(step, te - t0);
                        if (unpack) gu(ub, cols, j->act + (size_t)t0 * j->as, j->as, nt, tile);
                        else gemm(gp, cols, j->act + (size_t)t0 * j->as, j->as, nt, tile);
                        if (!getenv("NO_OUT"))
                            for (int i = 0; i < nt; i++) memcpy(j->out + (int64_t)(t0 + i) * rows + 8 * g, tile[i], 32);
                    }
                }
            }
        free(ub);
    } else {
        const cpu_vdot_fn dot = cpu_vdot_avx2(j->type);
        const uint64_t rb = qtype_row_size(j->type, (uint64_t)cols);
        int64_t r0, r1;
        cpu_split(rows, 4, ith, nth, &r0, &r1);
        for (int rep = 0; rep < j->reps_inner; rep++)
            for (int64_t r = r0; r < r1; r++)
                for (int t = 0; t < j->n; t++)
                    j->out[(int64_t)t * rows + r] = dot(cols, j->wraw + r * rb, j->act + (size_t)t * j->as);
    }
}

static double time_job(cpu_pool *pool, job *j, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = mf_time_s();
        cpu_pool_run(pool, run_job, j, 0);
        const double t = mf_time_s() - t0;
        if (t < best) best = t;
    }
    return best;
}

static void bench_type(cpu_pool *pool, uint32_t type, int64_t rows, int64_t cols, int n_copies) {
    mf_rng rng;
    mf_rng_seed(&rng, 1);
    const qtype_traits *tr = qtype_get(type);
    const uint64_t rb = qtype_row_size(type, (uint64_t)cols);
    /* random bytes with sane f16 scales (the speed does not depend on values) */
    uint8_t *w = malloc(rb * rows);
    for (uint64_t i = 0; i < rb * rows; i++) w[i] = (uint8_t)mf_rng_u64(&rng);
    cpu_packed pk;
    cpu_pack_init(&pk, type, rows, cols);
    pk.data = aligned_alloc(64, pk.group_bytes * pk.n_groups);
    cpu_pack_groups(&pk, w, 0, pk.n_groups);
    const cpu_act kind = cpu_act_kind(type);
    const size_t as = cpu_act_row_size(kind, cols);
    const int nmax = 128;
    float *x = malloc(sizeof(float) * cols * nmax);
    for (int64_t i = 0; i < cols * nmax; i++) x[i] = mf_rng_normal(&rng);
    uint8_t *act = malloc(as * nmax);
    for (int t = 0; t < nmax; t++) {
        if (kind == CPU_ACT_Q8A32) cpu_quantize_q8a32_avx2(x + cols * t, (block_q8a32 *)(act + as * t), cols);
        else cpu_quantize_q8a256_avx2(x + cols * t, (block_q8a256 *)(act + as * t), cols);
    }
    float *out = malloc(sizeof(float) * rows * nmax);
    const double wbytes = (double)rb * rows;

    /* cold: many copies of the packed matrix, walked in turn */
    cpu_packed *copies = malloc(sizeof *copies * n_copies);
    uint8_t **raw = malloc(sizeof *raw * n_copies);
    for (int c = 0; c < n_copies; c++) {
        copies[c] = pk;
        copies[c].data = aligned_alloc(64, pk.group_bytes * pk.n_groups);
        memcpy(copies[c].data, pk.data, pk.group_bytes * pk.n_groups);
        raw[c] = malloc(rb * rows);
        memcpy(raw[c], w, rb * rows);
    }
    for (int packed = 1; packed >= 0; packed--) {
        job j = { .pk = &pk, .wraw = w, .type = type, .act = act, .as = as, .n = 1, .out = out, .packed = packed,
                  .reps_inner = 1 };
        double tc = 0.0;
        for (int r = 0; r < 3; r++) {
            double t0 = mf_time_s();
            for (int c = 0; c < n_copies; c++) {
                j.pk = &copies[c];
                j.wraw = raw[c];
                cpu_pool_run(pool, run_job, &j, 0);
            }
            double t = mf_time_s() - t0;
            if (r == 0 || t < tc) tc = t;
        }
        j.pk = &pk;
        j.wraw = w;
        /* hot: a slice that fits L2 (256 rows) */
        cpu_packed hot = pk;
        hot.rows = MF_MIN(rows, 256);
        hot.n_groups = (hot.rows + 7) / 8;
        j.pk = &hot;
        j.reps_inner = 50;
        const double th = time_job(pool, &j, 3);
        const double hbytes = (double)rb * hot.rows * 50;
        j.pk = &pk;
        j.reps_inner = 1;
        j.n = nmax;
        const double tg = time_job(pool, &j, 2);
        printf("%-5s %5lldx%-5lld %-6s gemv-cold %6.2f GB/s  gemv-hot %6.2f GB/s  gemm(128) %7.2f GMAC/s\n", tr->name,
               (long long)rows, (long long)cols, packed ? "packed" : "rows", wbytes * n_copies / tc / 1e9,
               hbytes / th / 1e9, (double)rows * cols * nmax / tg / 1e9);
    }
    for (int c = 0; c < n_copies; c++) {
        free(copies[c].data);
        free(raw[c]);
    }
    free(copies);
    free(raw);
    free(pk.data);
    free(w);
    free(x);
    free(act);
    free(out);
}

/* One group of 8 rows x 2048 hot in L1/L2: ns per x8 block per call, per NT.
 * Isolates the micro-kernel's arithmetic from memory and threading. */
static void micro(uint32_t type) {
    mf_rng rng;
    mf_rng_seed(&rng, 2);
    const int64_t cols = 2048;
    const qtype_traits *tr = qtype_get(type);
    const uint64_t rb = qtype_row_size(type, (uint64_t)cols);
    uint8_t *w = malloc(rb * 8);
    for (uint64_t i = 0; i < rb * 8; i++) w[i] = (uint8_t)mf_rng_u64(&rng);
    cpu_packed pk;
    cpu_pack_init(&pk, type, 8, cols);
    pk.data = aligned_alloc(64, pk.group_bytes);
    cpu_pack_groups(&pk, w, 0, 1);
    const cpu_act kind = cpu_act_kind(type);
    const size_t as = cpu_act_row_size(kind, cols);
    float x[2048 * 4];
    for (int i = 0; i < 2048 * 4; i++) x[i] = mf_rng_normal(&rng);
    uint8_t *act = malloc(as * 4);
    for (int t = 0; t < 4; t++) {
        if (kind == CPU_ACT_Q8A32) cpu_quantize_q8a32_avx2(x + cols * t, (block_q8a32 *)(act + as * t), cols);
        else cpu_quantize_q8a256_avx2(x + cols * t, (block_q8a256 *)(act + as * t), cols);
    }
    const cpu_gemm_fn gemm = KS->gemm(type);
    const int64_t nblk = cols / tr->blck;
    printf("%-5s micro (8 rows x %lld, hot):", tr->name, (long long)cols);
    for (int nt = 1; nt <= 4; nt++) {
        float out[4][8];
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            const int iters = 2000;
            const double t0 = mf_time_s();
            for (int i = 0; i < iters; i++) gemm(pk.data, cols, act, as, nt, out);
            const double t = (mf_time_s() - t0) / iters;
            if (t < best) best = t;
        }
        /* per x8 block, and MACs per ns over all tokens */
        printf("  nt=%d %6.1f ns/blk %5.1f GMAC/s", nt, 1e9 * best / nblk, 8.0 * cols * nt / best / 1e9);
    }
    printf("\n");
    const cpu_gemm_fn gu = KS->gemm_unpacked(type);
    if (gu) {
        uint8_t *ub = aligned_alloc(64, KS->unpack_bytes(type, cols));
        double bu = 1e30;
        for (int r = 0; r < 5; r++) {
            const double t0 = mf_time_s();
            for (int i = 0; i < 2000; i++) KS->unpack_group(type, pk.data, cols, ub);
            bu = MF_MIN(bu, (mf_time_s() - t0) / 2000);
        }
        printf("%-5s unpacked: unpack %6.1f ns/blk;", tr->name, 1e9 * bu / nblk);
        for (int nt = 1; nt <= 4; nt++) {
            float out[4][8];
            double best = 1e30;
            for (int r = 0; r < 5; r++) {
                const double t0 = mf_time_s();
                for (int i = 0; i < 2000; i++) gu(ub, cols, act, as, nt, out);
                best = MF_MIN(best, (mf_time_s() - t0) / 2000);
            }
            printf("  nt=%d %6.1f ns/blk %5.1f GMAC/s", nt, 1e9 * best / nblk, 8.0 * cols * nt / best / 1e9);
        }
        printf("\n");
        free(ub);
    }
    free(w);
    free(pk.data);
    free(act);
}

int main(int argc, char **argv) {
    const char *kn = getenv("KSET");
    KS = cpu_has_avx512vnni() ? &cpu_kernels_avx512vnni : cpu_has_avx512() ? &cpu_kernels_avx512 : &cpu_kernels_avx2;
    if (kn && !strcmp(kn, "avx2")) KS = &cpu_kernels_avx2;
    if (kn && !strcmp(kn, "avx512") && cpu_has_avx512()) KS = &cpu_kernels_avx512;
    if (kn && strcmp(kn, KS->name)) {
        fprintf(stderr, "cpu_gemm: KSET=%s not available here\n", kn);
        return 1;
    }
    printf("kernel set %s\n", KS->name);
    if (argc > 1 && !strcmp(argv[1], "micro")) {
        const uint32_t mt[] = { QTYPE_Q4_K, QTYPE_Q6_K, QTYPE_Q8_0, QTYPE_Q4_1, QTYPE_Q4_0, QTYPE_Q5_0, QTYPE_Q5_1,
                                QTYPE_Q5_K, QTYPE_Q2_K, QTYPE_Q3_K, QTYPE_IQ4_NL, QTYPE_IQ4_XS };
        for (size_t i = 0; i < MF_ARRAY_LEN(mt); i++) micro(mt[i]);
        return 0;
    }
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    cpu_pool *pool = cpu_pool_new(threads);
    printf("threads %d\n", cpu_pool_size(pool));
    const uint32_t types[] = { QTYPE_Q4_K, QTYPE_Q6_K, QTYPE_Q8_0, QTYPE_Q4_1, QTYPE_Q4_0, QTYPE_Q5_0, QTYPE_Q5_1,
                               QTYPE_Q5_K, QTYPE_Q2_K, QTYPE_Q3_K, QTYPE_IQ4_NL, QTYPE_IQ4_XS };
    const char *only = getenv("ONLY");
    for (size_t i = 0; i < MF_ARRAY_LEN(types); i++) {
        if (only && strcmp(only, qtype_name(types[i]))) continue;
        /* 5632 x 2048: a TinyLlama ffn_up; 40 copies = ~0.26 GB for q4_K */
        bench_type(pool, types[i], 5632, 2048, 40);
        if (getenv("DOWN")) bench_type(pool, types[i], 2048, 5632, 40);   /* ffn_down */
    }
    cpu_pool_free(pool);
    return 0;
}

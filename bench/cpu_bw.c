/* cpu_bw.c - read-bandwidth ceiling for CPU decode: threads stream disjoint
 * halves of a 1 GiB buffer with 32-byte AVX2 loads (no compute), best of 3.
 *
 *   make bench-cpu-lab && build/bench/cpu_bw [max_threads]
 *
 * Decode of a model reading B bytes of weights per token cannot beat
 * (this figure) / B tokens per second. */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct part {
    const __m256i *p;
    size_t n;          /* 32-byte vectors, a multiple of 4 */
    long long sink;
} part;

static void *reader(void *arg) {
    part *a = arg;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < a->n; i += 4) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256(a->p + i));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256(a->p + i + 1));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256(a->p + i + 2));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256(a->p + i + 3));
    }
    s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    a->sink = _mm256_extract_epi64(s0, 0);
    return NULL;
}

int main(int argc, char **argv) {
    const int max_t = argc > 1 ? atoi(argv[1]) : 2;
    const size_t bytes = (size_t)1 << 30;
    char *buf = aligned_alloc(64, bytes);
    if (!buf) return 1;
    memset(buf, 1, bytes);
    for (int nt = 1; nt <= max_t; nt++) {
        double best = 1e30;
        for (int r = 0; r < 3; r++) {
            pthread_t th[64];
            part parts[64];
            const double t0 = now();
            for (int i = 0; i < nt; i++) {
                parts[i].p = (const __m256i *)(buf + bytes / nt * i);
                parts[i].n = bytes / nt / 32 / 4 * 4;
                pthread_create(&th[i], NULL, reader, &parts[i]);
            }
            for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
            const double t = now() - t0;
            if (t < best) best = t;
        }
        printf("threads %d: %.2f GB/s\n", nt, (double)bytes / best / 1e9);
    }
    free(buf);
    return 0;
}

/* tok_bench.c - tokenizer throughput: tok_bench MODEL FILE [-r REPEATS]
 * Loads the vocab once (timed), encodes FILE REPEATS times (no BOS, no special-token
 * parsing, as `minfer tokenize --no-bos` does), prints MB/s (1 MB = 1e6 bytes) of the
 * best and the mean run, the token count, and a decode round-trip check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"
#include "util.h"

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 1 << 20, n = 0, r;
    char *buf = mf_xmalloc(cap);
    while ((r = fread(buf + n, 1, cap - n, fp)) > 0) {
        n += r;
        if (n == cap) buf = mf_xrealloc(buf, cap *= 2);
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) { free(buf); return NULL; }
    *len = n;
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tok_bench MODEL FILE [-r REPEATS]\n");
        return 1;
    }
    int reps = 5;
    if (argc >= 5 && !strcmp(argv[3], "-r")) reps = atoi(argv[4]);
    if (reps < 1 || reps > 1000) { fprintf(stderr, "tok_bench: bad repeat count\n"); return 1; }

    mf_err err = { { 0 } };
    gguf_file f;
    mf_vocab *v = NULL;
    double t0 = mf_time_s();
    if (gguf_open(&f, argv[1], &err) || tok_load(&v, &f, &err)) {
        fprintf(stderr, "tok_bench: %s: %s\n", argv[1], err.msg);
        return 2;
    }
    double t_load = mf_time_s() - t0;
    size_t len;
    char *text = read_file(argv[2], &len);
    if (!text) { fprintf(stderr, "tok_bench: cannot read %s\n", argv[2]); return 2; }

    double best = 1e30, sum = 0;
    int n = 0;
    for (int r = 0; r < reps; r++) {
        int32_t *ids = NULL;
        double t = mf_time_s();
        n = tok_encode(v, text, len, 0, 0, &ids, &err);
        t = mf_time_s() - t;
        if (n < 0) { fprintf(stderr, "tok_bench: %s\n", err.msg); return 2; }
        if (r == reps - 1) { /* round trip once, outside the timing */
            size_t o = 0;
            char *dec = mf_xmalloc(len + 16);
            int same = 1;
            for (int i = 0; i < n && same; i++) {
                char piece[256];
                int pl = tok_piece(v, ids[i], 0, piece, sizeof piece);
                if (pl > (int)sizeof piece || o + (size_t)pl > len + 1) { same = 0; break; }
                memcpy(dec + o, piece, (size_t)pl);
                o += (size_t)pl;
            }
            const char *d = dec;
            if (tok_get_kind(v) == TOK_KIND_SPM && o && d[0] == ' ') { d++; o--; }
            same = same && o == len && !memcmp(d, text, len);
            printf("round trip: %s\n", same ? "identical" : "DIFFERS");
            free(dec);
        }
        free(ids);
        if (t < best) best = t;
        sum += t;
    }
    printf("vocab load %.1f ms; %zu bytes -> %d tokens (%.2f bytes/token)\n", t_load * 1e3, len, n,
           n ? (double)len / n : 0.0);
    printf("encode: best %.2f MB/s (%.1f ms), mean %.2f MB/s over %d runs; %.0f tokens/s\n", len / best / 1e6,
           best * 1e3, len / (sum / reps) / 1e6, reps, n / best);
    free(text);
    tok_free(v);
    gguf_close(&f);
    return 0;
}

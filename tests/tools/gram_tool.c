/* gram_tool.c - the grammar engine from the command line, for the python tests
 * (tests/grammar_test.py, tests/json_schema_test.py) and for debugging a grammar:
 *
 *   gram_tool check GRAMMAR.gbnf            parse; print the compiled rules (exit 2 + message if bad)
 *   gram_tool schema SCHEMA.json            print the GBNF of a JSON schema (exit 2 + message if bad)
 *   gram_tool match GRAMMAR.gbnf TEXTFILE   exit 0 when the whole text is a sentence of the grammar,
 *                                           3 when it is a prefix of one, 4 when it leaves the grammar
 *   gram_tool gen (GRAMMAR.gbnf | --schema SCHEMA.json) SEED N [MAXLEN]
 *       N random sentences, one a line as a JSON string (so any bytes survive), drawn by
 *       walking token masks over a toy vocabulary (bytes, a few UTF-8 characters and JSON
 *       pieces) with weights that favour closing punctuation, so walks end. A walk that
 *       reaches MAXLEN tokens (default 400) without a complete sentence prints null.
 *   gram_tool bench MODEL.gguf (GRAMMAR.gbnf | --schema SCHEMA.json) TEXTFILE
 *       the cost of constraining a model's vocabulary: the trie's and the grammar's build
 *       times, then along the tokens of TEXT (which must be a sentence of the grammar)
 *       each mask computed afresh and through the cache (mean and worst, ms).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constraint.h"
#include "gguf.h"
#include "grammar.h"
#include "tokenizer.h"
#include "json_schema.h"
#include "util.h"

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    size_t cap = 1 << 16, n = 0, got;
    char *b = mf_xmalloc(cap);
    while ((got = fread(b + n, 1, cap - n - 1, f)) > 0)
        if ((n += got) + 1 == cap) b = mf_xrealloc(b, cap *= 2);
    fclose(f);
    b[n] = 0;
    *len = n;
    return b;
}

static gram *load(const char *path, int schema) {
    size_t n;
    char *t = read_all(path, &n);
    gram *g;
    mf_err err = { { 0 } };
    int rc = constraint_compile(&g, schema ? CONSTRAINT_JSON_SCHEMA : CONSTRAINT_GBNF, t, n, &err);
    free(t);
    if (rc) { fprintf(stderr, "gram_tool: %s: %s\n", path, err.msg); exit(2); }
    return g;
}

static void put_json_string(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7f) printf("\\u%04x", c); /* bytes, decoded by the test */
        else putchar(c);
    }
    puts("\"");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: gram_tool check|schema|match|gen ...\n");
        return 1;
    }
    const char *cmd = argv[1];
    mf_err err = { { 0 } };
    if (!strcmp(cmd, "check")) {
        gram *g = load(argv[2], 0);
        gram_print(g, stdout);
        gram_free(g);
        return 0;
    }
    if (!strcmp(cmd, "schema")) {
        size_t n, m;
        char *t = read_all(argv[2], &n), *out;
        if (json_schema_to_gbnf(t, n, &out, &m, &err)) { fprintf(stderr, "gram_tool: %s\n", err.msg); free(t); return 2; }
        fwrite(out, 1, m, stdout);
        free(out);
        free(t);
        return 0;
    }
    if (!strcmp(cmd, "match") && argc >= 4) {
        gram *g = load(argv[2], 0);
        size_t n;
        char *t = read_all(argv[3], &n);
        gram_state *s = gram_state_new(g, &err);
        if (!s) { fprintf(stderr, "gram_tool: %s\n", err.msg); return 2; }
        int rc = gram_state_accept(s, t, n) ? (gram_state_is_accepting(s) ? 0 : 3) : 4;
        gram_state_free(s);
        gram_free(g);
        free(t);
        return rc;
    }
    if (!strcmp(cmd, "gen") && argc >= 5) {
        int schema = !strcmp(argv[2], "--schema");
        const char *path = argv[2 + schema];
        if (argc < 5 + schema) { fprintf(stderr, "usage: gram_tool gen (G | --schema S) SEED N [MAXLEN]\n"); return 1; }
        uint64_t seed = strtoull(argv[3 + schema], NULL, 10);
        int n = atoi(argv[4 + schema]), maxlen = argc > 5 + schema ? atoi(argv[5 + schema]) : 400;
        /* the toy vocabulary: every byte, some characters and pieces, an end token */
        static const char *extra[] = { "é", "日本", "😀", "\"", "\":", "\", \"", "{\"", "}", "]", "true", "false",
                                       "null", ", ", "  ", "\n", "-", "0", "12", "3.5", "\\n", "\\u00e9", "T", "Z",
                                       ":", "2024-", "ab", "\"}" };
        const int n_extra = (int)MF_ARRAY_LEN(extra), nv = 256 + n_extra + 1;
        const char **toks = mf_xmalloc((size_t)nv * sizeof *toks);
        size_t *lens = mf_xmalloc((size_t)nv * sizeof *lens);
        uint8_t *eog = mf_xcalloc((size_t)nv, 1);
        static char bytes[256];
        for (int i = 0; i < 256; i++) bytes[i] = (char)i, toks[i] = bytes + i, lens[i] = 1;
        for (int i = 0; i < n_extra; i++) toks[256 + i] = extra[i], lens[256 + i] = strlen(extra[i]);
        toks[nv - 1] = "", lens[nv - 1] = 0, eog[nv - 1] = 1;
        gram_vocab *tv = gram_vocab_new(nv, toks, lens, eog, &err);
        if (!tv) { fprintf(stderr, "gram_tool: %s\n", err.msg); return 2; }
        float *w = mf_xmalloc((size_t)nv * sizeof *w);
        for (int i = 0; i < nv; i++) {
            const char *t = toks[i];
            int closing = lens[i] && (strchr("\"}],", t[0]) || (lens[i] > 1 && strchr("\"}]", t[lens[i] - 1])));
            w[i] = closing ? 40.0f : i < 256 && (i < 0x20 || i >= 0x80) ? 0.2f : 1.0f;
        }
        w[nv - 1] = 200.0f;
        mf_rng rng;
        mf_rng_seed(&rng, seed);
        gram *g = load(path, schema);
        char *text = mf_xmalloc(1 << 16);
        mf_constraint *c = constraint_new(g, tv, 0, &err);
        if (!c) { fprintf(stderr, "gram_tool: %s\n", err.msg); return 2; }
        for (int k = 0; k < n; k++) {
            if (k && constraint_reset(c, 0, &err)) { fprintf(stderr, "gram_tool: %s\n", err.msg); return 2; }
            size_t tl = 0;
            int done = 0;
            for (int step = 0; step < maxlen && !done; step++) {
                int allowed;
                const uint32_t *bits = constraint_mask(c, &allowed);
                if (!bits || allowed == 0) { fprintf(stderr, "gram_tool: dead end after %zu bytes\n", tl); return 5; }
                double sum = 0;
                for (int i = 0; i < nv; i++)
                    if (bits[i >> 5] >> (i & 31) & 1) sum += w[i];
                double r = (double)mf_rng_uniform(&rng) * sum;
                int pick = -1;
                for (int i = 0; i < nv; i++)
                    if (bits[i >> 5] >> (i & 31) & 1) {
                        pick = i;
                        if ((r -= w[i]) < 0) break;
                    }
                if (constraint_accept(c, pick, &err)) { fprintf(stderr, "gram_tool: %s\n", err.msg); return 6; }
                if (eog[pick]) { done = 1; break; }
                if (tl + lens[pick] < (1 << 16)) memcpy(text + tl, toks[pick], lens[pick]), tl += lens[pick];
                if (constraint_is_done(c)) done = 1;
            }
            if (done) put_json_string(text, tl);
            else puts("null");
        }
        constraint_free(c);
        gram_free(g);
        free(text); free(w); free(toks); free(lens); free(eog);
        gram_vocab_free(tv);
        return 0;
    }
    if (!strcmp(cmd, "bench") && argc >= 5) {
        int schema = !strcmp(argv[3], "--schema");
        if (argc < 5 + schema) { fprintf(stderr, "usage: gram_tool bench MODEL (G | --schema S) TEXT\n"); return 1; }
        gguf_file f;
        mf_vocab *v = NULL;
        if (gguf_open(&f, argv[2], &err) || tok_load(&v, &f, &err)) { fprintf(stderr, "gram_tool: %s\n", err.msg); return 2; }
        double t0 = mf_time_s();
        gram_vocab *tv = constraint_vocab(v, &err);
        double t_trie = mf_time_s() - t0;
        if (!tv) { fprintf(stderr, "gram_tool: %s\n", err.msg); return 2; }
        t0 = mf_time_s();
        gram *g = load(argv[3 + schema], schema);
        double t_compile = mf_time_s() - t0;
        size_t n;
        char *text = read_all(argv[4 + schema], &n);
        int32_t *ids = NULL;
        int nt = tok_encode(v, text, n, 0, 0, &ids, &err);
        mf_constraint *cached = constraint_new(g, tv, 0, &err);
        if (nt < 0 || !cached) { fprintf(stderr, "gram_tool: %s\n", err.msg); return 2; }
        gram_state *st = gram_state_new(g, &err);
        uint32_t *bits = mf_xmalloc((size_t)gram_mask_words(tv) * sizeof *bits);
        double fresh = 0, fresh_max = 0, hit = 0, hit_max = 0;
        for (int i = 0; i < nt; i++) {
            double a = mf_time_s();
            gram_mask(st, tv, 0, bits);
            double b = mf_time_s();
            int na;
            constraint_mask(cached, &na);
            double c = mf_time_s();
            fresh += b - a, hit += c - b;
            fresh_max = b - a > fresh_max ? b - a : fresh_max;
            hit_max = c - b > hit_max ? c - b : hit_max;
            size_t len;
            const char *p = gram_vocab_token(tv, ids[i], &len);
            if (!gram_state_accept(st, p, len) || constraint_accept(cached, ids[i], &err)) {
                fprintf(stderr, "gram_tool: token %d (%d) of the text is refused\n", i, ids[i]);
                return 3;
            }
        }
        uint64_t hits, misses;
        constraint_stats(cached, &hits, &misses);
        printf("vocab %d tokens: trie %.1f ms; grammar %.2f ms; %d tokens: mask %.3f ms mean, %.3f worst; with the "
               "cache %.3f mean, %.3f worst (%llu hits, %llu misses)\n",
               gram_vocab_n(tv), t_trie * 1e3, t_compile * 1e3, nt, fresh / nt * 1e3, fresh_max * 1e3, hit / nt * 1e3,
               hit_max * 1e3, (unsigned long long)hits, (unsigned long long)misses);
        free(bits); free(ids); free(text);
        gram_state_free(st);
        constraint_free(cached);
        gram_free(g);
        gram_vocab_free(tv);
        tok_free(v);
        gguf_close(&f);
        return 0;
    }
    fprintf(stderr, "gram_tool: unknown command or missing arguments\n");
    return 1;
}

/* fuzz_tokenizer.c - libFuzzer target: encode and decode on real vocabularies.
 *
 * The vocabularies are every *.gguf in $MINFER_FUZZ_VOCAB_DIR (default
 * $MINFER_SHARED/vocab, else ../shared/vocab: GPT-2 byte-level BPE and llama SPM),
 * plus the files named in $MINFER_FUZZ_VOCABS (colon separated, e.g. a model's GGUF).
 *
 * Input: byte 0 picks the vocabulary (low 4 bits, modulo the count) and the mode:
 *   bit 4 add_bos, bit 5 parse_special, bit 6 decode mode. Encode mode: the rest is
 *   text; the ids must be in range; with both flags off the decode round trip must give
 *   the text back (the rules of tests/test_tokenizer.c's check_roundtrip: SPM loses only
 *   its added leading space and turns U+2581 into a space, valid UTF-8 only; BPE gives
 *   llama.cpp's sanitised text minus bytes the vocab has no token for), and the stream
 *   decoder must give what tok_piece gives and only valid UTF-8. Decode mode: the rest
 *   is little-endian int32 ids, any value, through tok_piece / tok_text / tok_type /
 *   tok_is_eog and the streaming decoder with small and exact caps. */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"
#include "unicode.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Set when no vocabulary could be loaded (the replay harness skips then). */
const char *fuzz_unavailable;

#define MAX_VOCABS 16
static struct {
    gguf_file f;
    mf_vocab *v;
    int has[256];     /* BPE: byte b has a token for its GPT-2 character */
} vocabs[MAX_VOCABS];
static int n_vocabs;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void load_one(const char *path) {
    if (n_vocabs == MAX_VOCABS) return;
    mf_err err = { { 0 } };
    if (gguf_open(&vocabs[n_vocabs].f, path, &err) != 0) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, err.msg);
        exit(1);
    }
    if (tok_load(&vocabs[n_vocabs].v, &vocabs[n_vocabs].f, &err) != 0) {
        fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, err.msg);
        exit(1);
    }
    mf_vocab *v = vocabs[n_vocabs].v;
    for (int b = 0; b < 256; b++) {
        uint8_t c[5] = { 0 };
        uni_encode(uni_gpt2_cp((uint8_t)b), c);
        vocabs[n_vocabs].has[b] = tok_find(v, (const char *)c) >= 0;
    }
    fprintf(stderr, "fuzz_tokenizer: vocab %d: %s (%s, %d tokens)\n", n_vocabs, path,
            tok_get_kind(v) == TOK_KIND_BPE ? "bpe" : "spm", tok_n_vocab(v));
    n_vocabs++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    mf_log_quiet = 1;
    char dir[1024];
    const char *d = getenv("MINFER_FUZZ_VOCAB_DIR");
    const char *sh = getenv("MINFER_SHARED");
    if (d && *d) snprintf(dir, sizeof dir, "%s", d);
    else snprintf(dir, sizeof dir, "%s/vocab", sh && *sh ? sh : "../shared");
    DIR *dp = opendir(dir);
    if (dp) {
        char *names[64];
        int n = 0;
        struct dirent *e;
        while ((e = readdir(dp)) && n < 64) {
            size_t l = strlen(e->d_name);
            if (l > 5 && !strcmp(e->d_name + l - 5, ".gguf")) names[n++] = mf_xstrdup(e->d_name);
        }
        closedir(dp);
        qsort(names, (size_t)n, sizeof *names, cmp_str); /* stable vocab numbering */
        for (int i = 0; i < n; i++) {
            char p[2048];
            snprintf(p, sizeof p, "%s/%s", dir, names[i]);
            load_one(p);
            free(names[i]);
        }
    }
    const char *extra = getenv("MINFER_FUZZ_VOCABS");
    if (extra && *extra) {
        char *list = mf_xstrdup(extra), *save = NULL;
        for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) load_one(p);
        free(list);
    }
    if (n_vocabs == 0) {
        fuzz_unavailable = "no vocabulary: ../shared/vocab absent and MINFER_FUZZ_VOCABS unset";
        fprintf(stderr, "fuzz_tokenizer: %s\n", fuzz_unavailable);
    }
    return 0;
}

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = uni_decode((const uint8_t *)s + i, n - i, &cp);
        if (!l) return 0;
        i += (size_t)l;
    }
    return 1;
}

static void fail_text(const char *what, const char *a, size_t an, const char *b, size_t bn) {
    fprintf(stderr, "fuzz_tokenizer: %s (%zu vs %zu bytes)\n", what, an, bn);
    for (size_t i = 0; i < an && i < 200; i++) fprintf(stderr, "%02x", (unsigned char)a[i]);
    fputc('\n', stderr);
    for (size_t i = 0; i < bn && i < 200; i++) fprintf(stderr, "%02x", (unsigned char)b[i]);
    fputc('\n', stderr);
    abort();
}

/* Pieces of ids concatenated (tok_piece), malloc'd. */
static char *pieces(const mf_vocab *v, const int32_t *ids, int n, int special, size_t *len) {
    size_t o = 0;
    for (int i = 0; i < n; i++) o += (size_t)tok_piece(v, ids[i], special, NULL, 0);
    char *out = malloc(o + 1);
    if (!out) abort();
    size_t w = 0;
    for (int i = 0; i < n; i++) {
        int l = tok_piece(v, ids[i], special, out + w, o - w);
        if (l < 0 || (size_t)l > o - w) abort();
        w += (size_t)l;
    }
    *len = w;
    return out;
}

/* Streams ids; caps are exactly 64 + 3 * piece, each output in its own heap block so
 * ASan sees a write past the promised bound. Returns the text, malloc'd. */
static char *stream(const mf_vocab *v, const int32_t *ids, int n, int first, size_t *len) {
    size_t cap = 256, o = 0;
    char *all = malloc(cap);
    if (!all) abort();
    tok_stream ts;
    tok_stream_init(&ts);
    ts.first = first;
    for (int i = 0; i <= n; i++) {
        size_t pl = i < n ? (size_t)tok_piece(v, ids[i], 0, NULL, 0) : 0;
        size_t need = 64 + 3 * pl;
        char *buf = malloc(need);
        if (!buf) abort();
        int w = i < n ? tok_stream_push(&ts, v, ids[i], buf, need) : tok_stream_flush(&ts, buf, need);
        if (w < 0 || (size_t)w > need) abort();
        if (!valid_utf8(buf, (size_t)w)) fail_text("stream wrote invalid UTF-8", buf, (size_t)w, "", 0);
        while (o + (size_t)w > cap) { cap *= 2; all = realloc(all, cap); if (!all) abort(); }
        memcpy(all + o, buf, (size_t)w);
        o += (size_t)w;
        free(buf);
    }
    *len = o;
    return all;
}

static void fuzz_encode(int vi, const char *text, size_t len, int add_bos, int special) {
    const mf_vocab *v = vocabs[vi].v;
    int nv = tok_n_vocab(v);
    mf_err err = { { 0 } };
    int32_t *ids = NULL;
    int n = tok_encode(v, text, len, add_bos, special, &ids, &err);
    if (n < 0) {
        if (err.msg[0] == 0) abort();
        return; /* an error with a message is allowed (none expected; see README) */
    }
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv) { fprintf(stderr, "fuzz_tokenizer: id %d of %d\n", ids[i], nv); abort(); }
    size_t dl;
    char *dec = pieces(v, ids, n, 0, &dl);
    int spm = tok_get_kind(v) == TOK_KIND_SPM;
    if (!add_bos && !special) {
        char *exp = malloc(3 * len + 1);
        if (!exp) abort();
        size_t el = 0;
        int check = 1;
        if (!spm) {
            size_t m = uni_sanitize_lax((const uint8_t *)text, len, (uint8_t *)exp, NULL);
            for (size_t i = 0; i < m; i++)
                if (vocabs[vi].has[(uint8_t)exp[i]]) exp[el++] = exp[i];
        } else {
            check = valid_utf8(text, len);
            for (size_t i = 0; i < len;) {
                if (i + 3 <= len && !memcmp(text + i, "\xE2\x96\x81", 3)) { exp[el++] = ' '; i += 3; }
                else exp[el++] = text[i++];
            }
        }
        const char *d = dec;
        size_t dn = dl;
        if (spm && len > 0 && dn > 0 && d[0] == ' ') { d++; dn--; }
        if (check && (dn != el || memcmp(d, exp, el))) fail_text("round trip differs", exp, el, d, dn);
        if (check && valid_utf8(exp, el)) {
            size_t sl;
            char *st = stream(v, ids, n, spm, &sl);
            if (sl != el || memcmp(st, exp, el)) fail_text("streamed text differs", exp, el, st, sl);
            free(st);
        }
        free(exp);
    } else {
        size_t sl;
        free(stream(v, ids, n, spm && add_bos, &sl));
    }
    free(dec);
    free(ids);
}

static void fuzz_decode(int vi, const uint8_t *p, size_t len) {
    const mf_vocab *v = vocabs[vi].v;
    int n = (int)(len / 4);
    int32_t *ids = calloc((size_t)n + 1, sizeof *ids);
    if (!ids) abort();
    int nv = tok_n_vocab(v);
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p + 4 * (size_t)i, 4);
        /* mostly ids in range (the top bit off), sometimes any value */
        ids[i] = (u & 0x80000000u) ? (int32_t)(u << 1) : (int32_t)((u & 0x7fffffffu) % (uint32_t)(nv + 2)) - 1;
    }
    volatile unsigned acc = 0;
    for (int i = 0; i < n; i++) {
        size_t tl;
        const char *t = tok_text(v, ids[i], &tl);
        for (size_t j = 0; j < tl; j++) acc += (unsigned char)t[j];
        acc += (unsigned)tok_type(v, ids[i]) + (unsigned)tok_is_eog(v, ids[i]);
        /* a piece into a buffer of every small cap: never more than cap bytes */
        int full = tok_piece(v, ids[i], i & 1, NULL, 0);
        if (full < 0) abort();
        for (size_t cap = 1; cap <= (size_t)full && cap <= 8; cap++) {
            char *b = malloc(cap);
            if (!b) abort();
            int l = tok_piece(v, ids[i], i & 1, b, cap);
            if (l != full) abort();
            free(b);
        }
    }
    (void)acc;
    size_t dl;
    free(pieces(v, ids, n, 1, &dl));
    size_t sl;
    free(stream(v, ids, n, 1, &sl));
    /* a stream whose caps are below the promise: output is cut, never overrun */
    tok_stream ts;
    tok_stream_init(&ts);
    for (int i = 0; i < n; i++) {
        size_t cap = (size_t)(p[4 * (size_t)i] & 7) + 1;
        char *b = malloc(cap);
        if (!b) abort();
        int w = tok_stream_push(&ts, v, ids[i], b, cap);
        if (w < 0 || (size_t)w > cap) abort();
        free(b);
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (n_vocabs == 0 || size == 0) return 0;
    int vi = (data[0] & 15) % n_vocabs;
    int add_bos = (data[0] >> 4) & 1, special = (data[0] >> 5) & 1;
    if (data[0] & 0x40) fuzz_decode(vi, data + 1, size - 1);
    else fuzz_encode(vi, (const char *)data + 1, size - 1, add_bos, special);
    return 0;
}

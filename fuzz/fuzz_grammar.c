/* fuzz_grammar.c - libFuzzer target: the GBNF parser, the matcher, token masks and
 * the JSON-schema converter (src/grammar.c, src/json_schema.c, src/constraint.c).
 *
 * Input: byte 0 picks the mode (bit 0: the source is a JSON schema, else GBNF; bit 1:
 * strip the first token's space); the rest splits at the first NUL into the source
 * and a text (at most 256 bytes of it are used).
 *
 * Checked beyond ASan/UBSan: a refused source has a message; a schema's grammar
 * always parses (or hits a size limit, said so); the text fed in pieces gives the
 * same answer as fed whole, and a refused piece leaves the state unchanged; along the
 * accepted prefix of the text, the token mask over a toy vocabulary allows exactly
 * the tokens a clone of the matcher accepts one by one, and end of generation exactly
 * where the text is complete. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constraint.h"
#include "grammar.h"
#include "json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *words[] = {
    "a", "b", "ab", " a", " ", "\"", "{", "}", "[", "]", ",", ":", "0", "1", "12", "-", ".", "e", "true", "null",
    "\n", "\\", "\\n", "\xc3", "\xa9", "é", "日", "\xe6\x97", "😀", "\xf0\x9f", "x", "(", ")", "\":", "\", \"",
};
enum { N_WORDS = sizeof words / sizeof *words, NV = N_WORDS + 2 };

static gram_vocab *vocab(void) {
    static gram_vocab *tv;
    if (tv) return tv;
    const char *toks[NV];
    size_t lens[NV];
    uint8_t eog[NV] = { 0 };
    for (int i = 0; i < N_WORDS; i++) toks[i] = words[i], lens[i] = strlen(words[i]);
    toks[N_WORDS] = "", lens[N_WORDS] = 0;
    toks[N_WORDS + 1] = "", lens[N_WORDS + 1] = 0, eog[N_WORDS + 1] = 1;
    mf_err err;
    tv = gram_vocab_new(NV, toks, lens, eog, &err);
    if (!tv) abort();
    return tv;
}

static void check_mask(gram_state *s, int strip) {
    uint32_t bits[(NV + 31) / 32];
    int n = gram_mask(s, vocab(), strip, bits);
    if (n < 0) abort();
    if (gram_state_overflowed(s)) return; /* a limit was hit: the mask may leave tokens out */
    int count = 0;
    for (int i = 0; i < NV; i++) {
        int want;
        if (i == N_WORDS + 1) want = gram_state_is_accepting(s);
        else if (i == N_WORDS) want = 0;
        else {
            const char *p = words[i];
            size_t len = strlen(p);
            if (strip && p[0] == ' ') p++, len--;
            want = len && gram_state_can_accept(s, p, len);
        }
        if (gram_state_overflowed(s)) return;
        count += want;
        if ((int)(bits[i >> 5] >> (i & 31) & 1) != want) {
            fprintf(stderr, "fuzz_grammar: token %d mask %d, one by one %d\n", i, !want, want);
            abort();
        }
    }
    if (count != n) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int schema = data[0] & 1, strip = data[0] >> 1 & 1;
    const char *src = (const char *)data + 1;
    size_t n = size - 1;
    const char *nul = memchr(src, 0, n);
    size_t src_len = nul ? (size_t)(nul - src) : n;
    const char *text = nul ? nul + 1 : "";
    size_t text_len = nul ? n - src_len - 1 : 0;
    if (text_len > 256) text_len = 256;

    mf_err err;
    err.msg[0] = 0;
    gram *g = NULL;
    int rc;
    if (schema) {
        char *gbnf = NULL;
        size_t gl = 0;
        rc = json_schema_to_gbnf(src, src_len, &gbnf, &gl, &err);
        if (rc) {
            if (!err.msg[0] || gbnf) abort();
            return 0;
        }
        if (!gbnf || strlen(gbnf) != gl) abort();
        rc = gram_parse(&g, gbnf, gl, &err);
        if (rc && !strstr(err.msg, "too large") && !strstr(err.msg, "too many rules") && !strstr(err.msg, "more than")) {
            fprintf(stderr, "fuzz_grammar: the converter's grammar does not parse: %s\n%s\n", err.msg, gbnf);
            abort();
        }
        free(gbnf);
        if (rc) return 0;
    } else {
        rc = gram_parse(&g, src, src_len, &err);
        if (rc) {
            if (!err.msg[0] || g) abort();
            return 0;
        }
    }
    gram_state *s = gram_state_new(g, &err);
    if (!s) {
        if (!err.msg[0]) abort();
        gram_free(g);
        return 0;
    }
    /* whole vs in pieces of 1..3 bytes */
    gram_state *whole = gram_state_clone(s);
    if (!whole) abort();
    int ok_whole = gram_state_accept(whole, text, text_len);
    size_t at = 0, accepted = 0;
    int steps = 0;
    while (at < text_len) {
        size_t piece = 1 + (size_t)(text[at] & 3) % 3;
        if (piece > text_len - at) piece = text_len - at;
        if (steps++ < 8) check_mask(s, strip && at == 0);
        int can = gram_state_can_accept(s, text + at, piece);
        int did = gram_state_accept(s, text + at, piece);
        if (can != did) abort();
        if (!did) break;
        at += piece;
        accepted = at;
    }
    if (!gram_state_overflowed(s) && !gram_state_overflowed(whole)) {
        if (ok_whole != (accepted == text_len)) abort();
        if (ok_whole && gram_state_is_accepting(whole) != gram_state_is_accepting(s)) abort();
    }
    gram_state_free(whole);
    gram_state_free(s);
    gram_free(g);
    return 0;
}

/* test_server_text.c - the server's text helpers (src/server/text.c): strict UTF-8
 * checking, the token-bytes decoder that holds back a cut character, stop strings.
 * text.c is pure (no model, no library state), so it is compiled into this test
 * directly rather than into libminfer. */
#include "test.h"

#include "server/text.c"

static void test_valid(void) {
    static const struct { const char *s; int ok; } cases[] = {
        { "", 1 }, { "plain", 1 }, { "caf\xc3\xa9", 1 }, { "\xe6\x97\xa5\xe6\x9c\xac", 1 },
        { "\xf0\x9f\x98\x80", 1 }, { "\xef\xbf\xbd", 1 }, { "\xf4\x8f\xbf\xbf", 1 },  /* U+10FFFF */
        { "\xed\x9f\xbf", 1 },                                                       /* U+D7FF */
        { "\xff", 0 }, { "\xfe", 0 }, { "\x80", 0 }, { "caf\xc3", 0 }, { "\xc3(", 0 },
        { "\xc0\xaf", 0 }, { "\xc1\xbf", 0 }, { "\xe0\x80\xaf", 0 }, { "\xf0\x80\x80\xaf", 0 }, /* overlong */
        { "\xed\xa0\x80", 0 }, { "\xed\xbf\xbf", 0 },                                 /* surrogates */
        { "\xf4\x90\x80\x80", 0 }, { "\xf5\x80\x80\x80", 0 },                         /* above U+10FFFF */
        { "\xe6\x97", 0 }, { "\xf0\x9f\x98", 0 },                                      /* cut */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(srv_utf8_valid(cases[i].s, strlen(cases[i].s)) == cases[i].ok, "case %zu", i);
}

/* Decodes s split into pieces at every possible pair of cut points; returns the
 * number of splits whose output differs from want. */
static int split_mismatches(const char *s, const char *want) {
    size_t n = strlen(s), wl = strlen(want);
    int bad = 0;
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            char out[256];
            size_t o = 0;
            srv_utf8_dec d = { { 0 }, 0 };
            o += srv_utf8_push(&d, s, a, out + o);
            o += srv_utf8_push(&d, s + a, b - a, out + o);
            o += srv_utf8_push(&d, s + b, n - b, out + o);
            o += srv_utf8_flush(&d, out + o);
            if (o != wl || memcmp(out, want, wl)) bad++;
            if (!srv_utf8_valid(out, o)) bad++;
        }
    return bad;
}

static void test_decoder(void) {
    /* well-formed text comes out unchanged however the bytes are split */
    const char *good = "a\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80z";
    CHECK(split_mismatches(good, good) == 0, "valid text");
    /* a cut character is held, not sent: "\xe6\x97" alone gives nothing until the end */
    srv_utf8_dec d = { { 0 }, 0 };
    char out[64];
    CHECK(srv_utf8_push(&d, "x\xe6\x97", 3, out) == 1 && out[0] == 'x' && d.n_held == 2, "held %d", d.n_held);
    CHECK(srv_utf8_push(&d, "\xa5", 1, out) == 3 && !memcmp(out, "\xe6\x97\xa5", 3), "completed");
    /* malformed bytes become U+FFFD, one per byte that cannot start or continue */
    CHECK(split_mismatches("a\xff" "b", "a\xef\xbf\xbd" "b") == 0, "0xff");
    CHECK(split_mismatches("\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd") == 0, "overlong");
    CHECK(split_mismatches("\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd") == 0, "surrogate");
    CHECK(split_mismatches("\xe6\x97" "a", "\xef\xbf\xbd\xef\xbf\xbd" "a") == 0, "cut then ASCII");
    CHECK(split_mismatches("\xe6\x97", "\xef\xbf\xbd\xef\xbf\xbd") == 0, "cut at the end (flush)");
    CHECK(split_mismatches("\xf0\x9f\xc3\xa9", "\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9") == 0, "cut then a new character");
    /* every byte string of length 1..3 over a mixed alphabet: output always valid UTF-8 */
    static const unsigned char alpha[] = { 'a', 0x80, 0xbf, 0xc3, 0xa9, 0xe6, 0xed, 0xf0, 0x9f, 0xf4, 0xff };
    int invalid = 0, n_alpha = (int)sizeof alpha;
    for (int i = 0; i < n_alpha * n_alpha * n_alpha; i++) {
        char s[3] = { (char)alpha[i % n_alpha], (char)alpha[i / n_alpha % n_alpha], (char)alpha[i / n_alpha / n_alpha] };
        srv_utf8_dec e = { { 0 }, 0 };
        size_t o = 0;
        for (int k = 0; k < 3; k++) o += srv_utf8_push(&e, s + k, 1, out + o);
        o += srv_utf8_flush(&e, out + o);
        invalid += !srv_utf8_valid(out, o);
        /* byte at a time gives what all at once gives */
        char all[64];
        srv_utf8_dec f = { { 0 }, 0 };
        size_t p = srv_utf8_push(&f, s, 3, all);
        p += srv_utf8_flush(&f, all + p);
        invalid += p != o || memcmp(all, out, o);
    }
    CHECK(invalid == 0, "%d of %d byte strings", invalid, n_alpha * n_alpha * n_alpha);
}

static void test_stop(void) {
    char *stops[] = { "END", "\xc3\xa9t\xc3\xa9", "x" };
    int which = -1;
    const char *t = "summer \xc3\xa9t\xc3\xa9 then END";
    CHECK(srv_stop_find(t, strlen(t), 0, stops, 2, &which) == 7 && which == 1, "earliest of two");
    /* only occurrences that end in the new part count (from = length before the append) */
    CHECK(srv_stop_find(t, strlen(t), 20, stops, 2, &which) == 18 && which == 0, "new part");
    CHECK(srv_stop_find("abcEN", 5, 3, stops, 1, &which) == -1, "not yet");
    CHECK(srv_stop_find("END abc", 7, 5, stops, 1, &which) == -1, "an old occurrence is not found again");
    CHECK(srv_stop_find("abcEND", 6, 5, stops, 1, &which) == 3, "straddles the append");
    /* held back: the longest suffix that a stop string could still start with */
    CHECK(srv_stop_hold("abcEN", 5, stops, 1) == 2, "EN held");
    CHECK(srv_stop_hold("abcE", 4, stops, 1) == 1, "E held");
    CHECK(srv_stop_hold("abcEND", 6, stops, 1) == 0, "a full match is find's business");
    CHECK(srv_stop_hold("abc", 3, stops, 1) == 0, "nothing held");
    CHECK(srv_stop_hold("caf\xc3", 4, stops + 1, 1) == 1, "a lead byte of a multibyte stop held");
    CHECK(srv_stop_hold("d\xc3\xa9t", 4, stops + 1, 1) == 3, "é t held whole");
    CHECK(srv_stop_hold("abx", 3, stops + 2, 1) == 0, "one-byte stop: nothing to hold");
    CHECK(srv_stop_hold("", 0, stops, 2) == 0, "empty text");
}

int main(void) {
    test_valid();
    test_decoder();
    test_stop();
    return test_summary("test_server_text");
}

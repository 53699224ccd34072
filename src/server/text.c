/* text.c - see text.h. */
#include "server/text.h"

#include <string.h>

int srv_utf8_seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Whether b[1] may follow lead byte b[0] (the narrowed ranges of RFC 3629's table:
 * E0 A0.., ED ..9F (no surrogates), F0 90.., F4 ..8F (no code point above U+10FFFF)). */
static int second_ok(unsigned char lead, unsigned char b) {
    if (b < 0x80 || b > 0xBF) return 0;
    if (lead == 0xE0) return b >= 0xA0;
    if (lead == 0xED) return b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90;
    if (lead == 0xF4) return b <= 0x8F;
    return 1;
}

/* Bytes of a well-formed sequence at s[0..n): 1..4; 0 when malformed; -1 when what
 * there is is a valid beginning that the end of the buffer cuts off. */
static int seq_at(const unsigned char *s, size_t n) {
    int len = srv_utf8_seq_len(s[0]);
    if (len <= 1) return len;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -1;
        if (i == 1 ? !second_ok(s[0], s[1]) : (s[i] < 0x80 || s[i] > 0xBF)) return 0;
    }
    return len;
}

int srv_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int len = seq_at(s + i, n - i);
        if (len <= 0) return 0;
        i += (size_t)len;
    }
    return 1;
}

static const char fffd[3] = { (char)0xEF, (char)0xBF, (char)0xBD };

size_t srv_utf8_push(srv_utf8_dec *d, const char *in, size_t n, char *out) {
    /* work on held + in without copying in: the held bytes (< 4) are completed first */
    size_t o = 0, i = 0;
    while (d->n_held > 0) {
        /* fill the held sequence from in, one byte at a time, until it decides */
        unsigned char buf[4];
        memcpy(buf, d->held, (size_t)d->n_held);
        size_t take = 0;
        int len = seq_at(buf, (size_t)d->n_held); /* 0 at once when the first held byte cannot lead */
        while (len == -1 && i + take < n && d->n_held + take < 4) {
            buf[d->n_held + take] = (unsigned char)in[i + take];
            take++;
            len = seq_at(buf, (size_t)d->n_held + take);
        }
        if (len == -1) { /* still incomplete: hold everything */
            memcpy(d->held + d->n_held, in + i, take);
            d->n_held += (int)take;
            return o;
        }
        if (len > 0) { /* complete */
            memcpy(out + o, buf, (size_t)len);
            o += (size_t)len;
            i += take;
            d->n_held = 0;
        } else { /* malformed: the first held byte is replaced, the rest retried */
            memcpy(out + o, fffd, 3);
            o += 3;
            memmove(d->held, d->held + 1, (size_t)--d->n_held);
        }
    }
    const unsigned char *s = (const unsigned char *)in;
    while (i < n) {
        if (s[i] < 0x80) { out[o++] = (char)s[i++]; continue; }
        int len = seq_at(s + i, n - i);
        if (len == -1) {
            d->n_held = (int)(n - i);
            memcpy(d->held, s + i, n - i);
            return o;
        }
        if (len == 0) { memcpy(out + o, fffd, 3); o += 3; i++; continue; }
        memcpy(out + o, s + i, (size_t)len);
        o += (size_t)len;
        i += (size_t)len;
    }
    return o;
}

size_t srv_utf8_flush(srv_utf8_dec *d, char *out) {
    size_t o = 0;
    for (int k = 0; k < d->n_held; k++, o += 3) memcpy(out + o, fffd, 3);
    d->n_held = 0;
    return o;
}

long srv_stop_find(const char *text, size_t n, size_t from, char *const *stops, int n_stop, int *which) {
    long best = -1;
    for (int k = 0; k < n_stop; k++) {
        size_t L = strlen(stops[k]);
        if (L == 0 || L > n) continue;
        /* a new occurrence ends after `from`: it starts at or after from - L + 1 */
        size_t start = from >= L ? from - L + 1 : 0;
        for (size_t p = start; p + L <= n; p++) {
            if (best >= 0 && (long)p >= best) break;
            if (!memcmp(text + p, stops[k], L)) {
                best = (long)p;
                *which = k;
                break;
            }
        }
    }
    return best;
}

size_t srv_stop_hold(const char *text, size_t n, char *const *stops, int n_stop) {
    size_t hold = 0;
    for (int k = 0; k < n_stop; k++) {
        size_t L = strlen(stops[k]);
        for (size_t m = L > 1 ? L - 1 : 0; m > hold; m--) /* longest first */
            if (m <= n && !memcmp(text + n - m, stops[k], m)) { hold = m; break; }
    }
    return hold;
}

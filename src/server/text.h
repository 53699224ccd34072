/* text.h - the server's text helpers: strict UTF-8 checking, a byte-stream decoder
 * that holds back an incomplete UTF-8 sequence (token pieces can end mid-character),
 * and stop-string matching that never sends a byte a stop string could still claim.
 * Pure functions on plain buffers: no model, no globals. */
#ifndef MINFER_SERVER_TEXT_H
#define MINFER_SERVER_TEXT_H

#include <stddef.h>

/* 1 when s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF), else 0. */
int srv_utf8_valid(const char *s, size_t n);

/* Length of the sequence starting with lead byte c (1..4), or 0 for a byte that
 * cannot start one (a continuation byte, 0xC0, 0xC1, 0xF5..0xFF). */
int srv_utf8_seq_len(unsigned char c);

/* Turns token bytes into well-formed UTF-8: complete sequences pass through, an
 * incomplete one at the end is held (at most 3 bytes) until the next push, and a
 * byte that cannot be part of a well-formed sequence becomes U+FFFD. */
typedef struct srv_utf8_dec {
    unsigned char held[4];
    int n_held;
} srv_utf8_dec;

/* Decodes in[0..n) after what is held; appends to out (which must have room for
 * 3 * (n + 3) bytes) and returns the bytes written. */
size_t srv_utf8_push(srv_utf8_dec *d, const char *in, size_t n, char *out);
/* The end of the stream: each held byte becomes U+FFFD (out: room for 12 bytes). */
size_t srv_utf8_flush(srv_utf8_dec *d, char *out);

/* Stop strings over a growing text. srv_stop_find returns the offset of the earliest
 * occurrence of any stop string that ends at or after `from` (the caller passes the
 * length before the latest append), or -1; *which is set to its index.
 * srv_stop_hold returns the length of the longest suffix of text[0..n) that is a
 * proper prefix of some stop string: bytes that must not be sent yet. Both take
 * n_stop non-empty strings. */
long srv_stop_find(const char *text, size_t n, size_t from, char *const *stops, int n_stop, int *which);
size_t srv_stop_hold(const char *text, size_t n, char *const *stops, int n_stop);

#endif

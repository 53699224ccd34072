/* unicode.h - the small amount of UTF-8 handling the tokenizer (and anyone printing
 * model output) needs: strict decoding, sanitising hostile bytes, and GPT-2's
 * byte <-> printable-codepoint alphabet. Character classes (\p{L}, \p{N}, ...) are
 * PCRE2's business (tokenizer.c); no category tables live here. */
#ifndef MINFER_UNICODE_H
#define MINFER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#define UNI_REPLACEMENT 0xFFFDu

/* Length of the UTF-8 sequence announced by lead byte c, from its high nibble only
 * (1 for ASCII and stray continuation bytes, 2, 3 or 4). This is the lax rule
 * llama.cpp's SPM tokenizer uses to cut text into symbols; never trust it for
 * validation. */
static inline int uni_len_lax(uint8_t c) {
    static const uint8_t len[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    return len[c >> 4];
}

/* Decodes one strictly valid UTF-8 sequence at s[0..n) (no overlongs, no surrogates,
 * nothing above U+10FFFF). Returns its length (1..4) and sets *cp, or 0 when the bytes
 * at s do not start a valid sequence (including a sequence cut short by n). */
int uni_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Encodes cp (<= 0x10FFFF, not a surrogate) into out[0..4); returns 1..4, or 0 for an
 * invalid code point. */
int uni_encode(uint32_t cp, uint8_t out[4]);

/* Copies src to dst replacing every byte that is not part of a valid sequence by
 * U+FFFD (EF BF BD), one per byte, which is what llama.cpp's decoder does for
 * truncated sequences and stray bytes. dst needs 3 * n bytes. Returns the output
 * length. */
size_t uni_sanitize(const uint8_t *src, size_t n, uint8_t *dst);

/* llama.cpp's lenient decoding, for the BPE tokenizer to split text exactly as it
 * does: a lead byte with enough continuation bytes is accepted even when overlong
 * (C0 80 -> U+0000) or a surrogate (ED A0 80 -> U+D800); such code points are written
 * back in their shortest form, surrogates as their 3-byte ED form. Bytes that start
 * no sequence, and code points above U+10FFFF (where llama.cpp throws), become U+FFFD
 * one per byte. dst needs 3 * n bytes; *n_surrogates counts surrogates written.
 * Returns the output length; strictly valid input comes back unchanged. */
size_t uni_sanitize_lax(const uint8_t *src, size_t n, uint8_t *dst, size_t *n_surrogates);

/* Length of the longest prefix of s[0..n) that ends on a character boundary, for
 * streaming: a trailing incomplete-but-so-far-valid sequence (at most 3 bytes) is
 * excluded, everything else (valid or not) is included. */
size_t uni_complete_prefix(const uint8_t *s, size_t n);

/* GPT-2 byte-level alphabet: byte b is shown as code point uni_gpt2_cp(b): the
 * printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF stand for themselves, the other 68
 * bytes are shifted to U+0100.. in byte order. uni_gpt2_byte is the inverse: the byte
 * for code point cp, or -1 when cp is not in the alphabet. */
uint32_t uni_gpt2_cp(uint8_t b);
int uni_gpt2_byte(uint32_t cp);

#endif

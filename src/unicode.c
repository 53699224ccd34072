/* unicode.c - see unicode.h. */
#include "unicode.h"

/* Bounds of the second byte of a sequence by lead byte (Unicode table 3-7): these
 * exclude overlongs (E0 80, F0 80), surrogates (ED A0) and code points above
 * U+10FFFF (F4 90) at the earliest byte, so a prefix check needs no decoding. */
static int second_ok(uint8_t lead, uint8_t b) {
    if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
    if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
    if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
    return b >= 0x80 && b <= 0xBF;
}

/* Expected length for a lead byte; 0 when the byte can never start a sequence. */
static int seq_len(uint8_t c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

int uni_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    int len = seq_len(s[0]);
    if (len == 0 || (size_t)len > n) return 0;
    if (len == 1) { *cp = s[0]; return 1; }
    if (!second_ok(s[0], s[1])) return 0;
    for (int i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    uint32_t c;
    if (len == 2) c = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    else if (len == 3) c = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    else c = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    *cp = c;
    return len;
}

int uni_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xC0 | (cp >> 6)); out[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12)); out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        out[0] = (uint8_t)(0xF0 | (cp >> 18)); out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (uint8_t)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

size_t uni_sanitize(const uint8_t *src, size_t n, uint8_t *dst) {
    size_t i = 0, o = 0;
    while (i < n) {
        if (src[i] < 0x80) { dst[o++] = src[i++]; continue; }
        uint32_t cp;
        int len = uni_decode(src + i, n - i, &cp);
        if (len == 0) {
            dst[o++] = 0xEF; dst[o++] = 0xBF; dst[o++] = 0xBD;
            i++;
            continue;
        }
        for (int k = 0; k < len; k++) dst[o++] = src[i + k];
        i += (size_t)len;
    }
    return o;
}

size_t uni_sanitize_lax(const uint8_t *src, size_t n, uint8_t *dst, size_t *n_surrogates) {
    size_t i = 0, o = 0, ns = 0;
    while (i < n) {
        uint8_t c = src[i];
        if (c < 0x80) { dst[o++] = c; i++; continue; }
        /* length from the lead byte's high bits, as llama.cpp's unicode_cpt_from_utf8 */
        int len = (c & 0x40) == 0 ? 0 : (c & 0x20) == 0 ? 2 : (c & 0x10) == 0 ? 3 : (c & 0x08) == 0 ? 4 : 0;
        uint32_t cp = 0;
        int ok = len > 0 && (size_t)len <= n - i;
        for (int k = 1; ok && k < len; k++) ok = (src[i + k] & 0xC0) == 0x80;
        if (ok) {
            cp = len == 2 ? (uint32_t)(c & 0x1F) : len == 3 ? (uint32_t)(c & 0x0F) : (uint32_t)(c & 0x07);
            for (int k = 1; k < len; k++) cp = (cp << 6) | (src[i + k] & 0x3F);
            ok = cp <= 0x10FFFF;
        }
        if (!ok) {
            dst[o++] = 0xEF; dst[o++] = 0xBF; dst[o++] = 0xBD;
            i++;
            continue;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            dst[o++] = 0xED; dst[o++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); dst[o++] = (uint8_t)(0x80 | (cp & 0x3F));
            ns++;
        } else {
            o += (size_t)uni_encode(cp, dst + o);
        }
        i += (size_t)len;
    }
    if (n_surrogates) *n_surrogates = ns;
    return o;
}

size_t uni_complete_prefix(const uint8_t *s, size_t n) {
    /* Only the last 3 bytes can hold an unfinished sequence; look for its lead. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t c = s[n - back];
        if ((c & 0xC0) == 0x80) continue;          /* continuation: keep looking */
        int len = seq_len(c);
        if (len <= (int)back) return n;            /* ASCII, invalid lead, or complete */
        /* An unfinished sequence: hold it back only if what we have could still
         * become valid, otherwise it is garbage that waiting will not fix. */
        if (back >= 2 && !second_ok(c, s[n - back + 1])) return n;
        return n - back;
    }
    return n;
}

uint32_t uni_gpt2_cp(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    /* The shifted bytes, in order: 0x00-0x20 (33), 0x7F-0xA0 (34), 0xAD (1). */
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100u + 33 + (uint32_t)(b - 0x7F);
    return 0x100u + 33 + 34; /* 0xAD */
}

int uni_gpt2_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp < 0x100 || cp > 0x100 + 67) return -1;
    uint32_t k = cp - 0x100;
    if (k < 33) return (int)k;
    if (k < 33 + 34) return (int)(0x7F + (k - 33));
    return 0xAD;
}

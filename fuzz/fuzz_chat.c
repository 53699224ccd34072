/* fuzz_chat.c - libFuzzer target: chat templates (src/chat.c).
 *
 * Input: byte 0 picks the template (modulo CHAT_TMPL_COUNT + 1; the last value means
 * "detect it from the source"), byte 1 the flags (bit 0 add_generation_prompt, bits 1-2
 * the EOS text given to detection, bits 3-7 the buffer size for chat_default_system);
 * the rest splits at NUL bytes into the template source (a GGUF's
 * tokenizer.chat_template, any bytes) and then role, content, role, content, ... (a
 * one-byte role names one of system/user/assistant/tool, a longer one is used as is).
 *
 * Checked beyond ASan/UBSan: detection always yields a family in range; the default
 * system message fits its buffer and is NUL-terminated at the length returned; render
 * returns a NUL-terminated string for valid arguments, both for the chosen family and
 * for every other family over the same messages, and every message's content, trimmed
 * of ASCII whitespace, appears in it (no family drops or cuts a message; gemma's
 * system message with no later turn but the model's is the documented exception). */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MSGS 64

static const char *role_of(const char *s, size_t n) {
    static const char *roles[] = { "system", "user", "assistant", "tool" };
    if (n == 1) return roles[(unsigned char)s[0] & 3];
    return s;
}

/* content trimmed of leading/trailing ASCII whitespace appears in out */
static int contains_trimmed(const char *out, const char *c) {
    size_t a = 0, b = strlen(c);
    while (a < b && isspace((unsigned char)c[a])) a++;
    while (b > a && isspace((unsigned char)c[b - 1])) b--;
    if (a == b) return 1;
    return memmem(out, strlen(out), c + a, b - a) != NULL;
}

static void render_check(chat_tmpl t, const chat_msg *msgs, int n, int add) {
    char *out = chat_render(t, msgs, n, add);
    if (!out) { fprintf(stderr, "fuzz_chat: %s: render returned NULL\n", chat_name(t)); abort(); }
    for (int i = 0; i < n; i++) {
        /* gemma carries a system message into the next turn that is not the model's
         * (role "assistant" or a literal "model") and drops one that has none after
         * it (chat.c, as llama.cpp) */
        if (t == CHAT_TMPL_GEMMA && !strcmp(msgs[i].role, "system")) {
            int carried = 0;
            for (int j = i + 1; j < n && !carried; j++)
                carried = strcmp(msgs[j].role, "system") && strcmp(msgs[j].role, "assistant") &&
                          strcmp(msgs[j].role, "model");
            if (!carried) continue;
        }
        if (!contains_trimmed(out, msgs[i].content)) {
            fprintf(stderr, "fuzz_chat: %s: message %d (%s) missing from the output\n", chat_name(t), i,
                    msgs[i].role);
            abort();
        }
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    unsigned pick = data[0] % (CHAT_TMPL_COUNT + 1);
    int add = data[1] & 1;
    static const char *eos_texts[] = { NULL, "</s>", "<|endoftext|>", "<|im_end|>" };
    const char *eos = eos_texts[(data[1] >> 1) & 3];
    size_t sys_cap = (size_t)(data[1] >> 3) * 8; /* 0..248 */
    /* a NUL-terminated copy to split in place */
    size_t n = size - 2;
    char *buf = malloc(n + 1);
    if (!buf) abort();
    memcpy(buf, data + 2, n);
    buf[n] = 0;
    size_t src_len = strlen(buf);

    /* the source as a GGUF view: a heap block of exactly src_len bytes, no NUL */
    char *src = malloc(src_len ? src_len : 1);
    if (!src) abort();
    memcpy(src, buf, src_len);
    chat_tmpl det;
    int rc = chat_detect_len(src, src_len, eos, &det);
    if ((rc != 0 && rc != 1) || (unsigned)det >= CHAT_TMPL_COUNT) abort();
    if (rc == 1 && det != CHAT_TMPL_CHATML) abort();
    chat_tmpl byname;
    if (chat_from_name(buf, &byname) == 0 && strcmp(chat_name(byname), buf) != 0) abort();
    char *sys = sys_cap ? malloc(sys_cap) : NULL;
    size_t sl = chat_default_system(src, src_len, sys, sys_cap);
    if (sl && (sl >= sys_cap || strlen(sys) != sl)) abort();
    free(sys);
    free(src);

    chat_msg msgs[MAX_MSGS];
    int nm = 0;
    size_t p = src_len + 1;
    while (p <= n && nm < MAX_MSGS) {
        const char *role = buf + p;
        size_t rl = strlen(role);
        p += rl + 1;
        const char *content = p <= n ? buf + p : "";
        if (p <= n) p += strlen(content) + 1;
        msgs[nm].role = role_of(role, rl);
        msgs[nm].content = content;
        nm++;
    }
    chat_tmpl t = pick == CHAT_TMPL_COUNT ? det : (chat_tmpl)pick;
    render_check(t, msgs, nm, add);
    /* the same conversation through every family (cheap: the inputs are short) */
    for (int f = 0; f < CHAT_TMPL_COUNT; f++) render_check((chat_tmpl)f, msgs, nm, !add);
    /* bad arguments: NULL, never a crash */
    if (chat_render(CHAT_TMPL_COUNT, msgs, nm, add) || chat_render(t, NULL, 1, add) ||
        chat_render(t, msgs, -1, add))
        abort();
    free(buf);
    return 0;
}

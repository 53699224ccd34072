/* chat.c - chat template detection and rendering (see chat.h for the contract).
 *
 * The facts (which substrings identify a family, what each family renders) follow
 * llama.cpp's built-in templates, src/llama-chat.cpp as of 2026-08; the code is
 * minfer's own. */
#include "chat.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- names */

static const char *const chat_names[CHAT_TMPL_COUNT] = {
    [CHAT_TMPL_CHATML] = "chatml",
    [CHAT_TMPL_LLAMA2] = "llama2",
    [CHAT_TMPL_LLAMA2_SYS] = "llama2-sys",
    [CHAT_TMPL_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [CHAT_TMPL_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [CHAT_TMPL_MISTRAL_V1] = "mistral-v1",
    [CHAT_TMPL_MISTRAL_V3] = "mistral-v3",
    [CHAT_TMPL_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_TMPL_MISTRAL_V7] = "mistral-v7",
    [CHAT_TMPL_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [CHAT_TMPL_LLAMA3] = "llama3",
    [CHAT_TMPL_GEMMA] = "gemma",
    [CHAT_TMPL_PHI3] = "phi3",
    [CHAT_TMPL_PHI4] = "phi4",
    [CHAT_TMPL_FALCON3] = "falcon3",
    [CHAT_TMPL_GLMEDGE] = "glmedge",
    [CHAT_TMPL_ZEPHYR] = "zephyr",
    [CHAT_TMPL_ZEPHYR_EOS] = "zephyr-eos",
};

const char *chat_name(chat_tmpl t) {
    if ((int)t < 0 || t >= CHAT_TMPL_COUNT) return "unknown";
    return chat_names[t];
}

int chat_from_name(const char *name, chat_tmpl *out) {
    if (!name) return -1;
    for (int i = 0; i < CHAT_TMPL_COUNT; i++) {
        if (strcmp(name, chat_names[i]) == 0) {
            *out = (chat_tmpl)i;
            return 0;
        }
    }
    return -1;
}

int chat_for_arch(const char *arch, chat_tmpl *out) {
    if (!arch) return -1;
    if (!strcmp(arch, "gemma") || !strcmp(arch, "gemma2") || !strcmp(arch, "gemma3")) {
        *out = CHAT_TMPL_GEMMA;
        return 0;
    }
    return -1;
}

/* ---------------------------------------------------------------- detection */

/* A template source as a (pointer, length) view: GGUF strings are not NUL-terminated. */
typedef struct chat_src { const char *p; size_t n; } chat_src;

static int src_has(chat_src s, const char *needle) {
    return memmem(s.p, s.n, needle, strlen(needle)) != NULL;
}

/* Result of the detection chain: a family minfer renders, or "llama.cpp knows this
 * one but minfer does not render it" (which must stop the chain, so that a later,
 * looser rule does not misfire on it), or nothing matched. */
enum { DETECT_NONE = -1, DETECT_UNSUPPORTED = -2 };

/* The order of the rules matters and is llama.cpp's: a llama-3 template, say, is
 * only recognised after every earlier rule has failed. The chain stops after the
 * llama-3 rule because no later rule names a family minfer renders. */
static int detect_chain(chat_src s, const char *eos_text) {
    if (src_has(s, "<|im_start|>")) {
        if (src_has(s, "<|im_sep|>")) return CHAT_TMPL_PHI4;
        /* SmolVLM uses <|im_start|> as BOS text but is not chatml. */
        if (src_has(s, "<end_of_utterance>")) return DETECT_UNSUPPORTED;
        return CHAT_TMPL_CHATML;
    }
    if ((s.n >= 7 && memcmp(s.p, "mistral", 7) == 0) || src_has(s, "[INST]")) {
        if (src_has(s, "[SYSTEM_PROMPT]")) return CHAT_TMPL_MISTRAL_V7;
        /* Mistral's official v1 template builds "' [INST] ' + system_message";
         * v3 and v3-tekken carry tool markers. */
        if (src_has(s, "' [INST] ' + system_message") || src_has(s, "[AVAILABLE_TOOLS]")) {
            if (src_has(s, " [INST]")) return CHAT_TMPL_MISTRAL_V1;
            if (src_has(s, "\"[INST]\"")) return CHAT_TMPL_MISTRAL_V3_TEKKEN;
            return CHAT_TMPL_MISTRAL_V3;
        }
        /* Llama-2 and the older Mistral-Instruct templates. */
        if (src_has(s, "content.strip()")) return CHAT_TMPL_LLAMA2_SYS_STRIP;
        if (src_has(s, "bos_token + '[INST]")) return CHAT_TMPL_LLAMA2_SYS_BOS;
        if (src_has(s, "<<SYS>>")) return CHAT_TMPL_LLAMA2_SYS;
        return CHAT_TMPL_LLAMA2;
    }
    if (src_has(s, "<|assistant|>") && src_has(s, "<|end|>")) return CHAT_TMPL_PHI3;
    if (src_has(s, "[gMASK]<sop>")) return DETECT_UNSUPPORTED; /* chatglm4 */
    if (src_has(s, "<|assistant|>") && src_has(s, "<|user|>")) {
        if (src_has(s, "<|tool_declare|>")) return DETECT_UNSUPPORTED; /* exaone-moe */
        if (src_has(s, "</s>")) return CHAT_TMPL_FALCON3;
        /* minfer's addition: llama.cpp's built-in detector calls every remaining
         * template here glmedge, including the zephyr-7b-beta / TinyLlama-Chat /
         * stablelm-2-zephyr template, which ends each message with eos_token;
         * glmedge has no terminator and would be wrong for them. llama.cpp's Jinja
         * engine renders them as zephyr with the vocab's EOS text. */
        if (src_has(s, "eos_token")) {
            if (!eos_text || strcmp(eos_text, "</s>") == 0) return CHAT_TMPL_ZEPHYR_EOS;
            if (strcmp(eos_text, "<|endoftext|>") == 0) return CHAT_TMPL_ZEPHYR;
            return DETECT_UNSUPPORTED;
        }
        return CHAT_TMPL_GLMEDGE;
    }
    if (src_has(s, "<|{{ item['role'] }}|>") && src_has(s, "<|begin_of_image|>"))
        return CHAT_TMPL_GLMEDGE;
    if (src_has(s, "<|user|>") && src_has(s, "<|endoftext|>")) return CHAT_TMPL_ZEPHYR;
    if (src_has(s, "bos_token + message['role']")) return DETECT_UNSUPPORTED; /* monarch */
    if (src_has(s, "<start_of_turn>")) return CHAT_TMPL_GEMMA;
    if (src_has(s, "'\\n\\nAssistant: ' + eos_token")) return DETECT_UNSUPPORTED; /* orion */
    if (src_has(s, "GPT4 Correct ")) return DETECT_UNSUPPORTED; /* openchat */
    if (src_has(s, "USER: ") && src_has(s, "ASSISTANT: ")) return DETECT_UNSUPPORTED; /* vicuna */
    if (src_has(s, "### Instruction:") && src_has(s, "<|EOT|>")) return DETECT_UNSUPPORTED;
    if (src_has(s, "<|START_OF_TURN_TOKEN|>") && src_has(s, "<|USER_TOKEN|>"))
        return DETECT_UNSUPPORTED; /* command-r */
    if (src_has(s, "<|start_header_id|>") && src_has(s, "<|end_header_id|>"))
        return CHAT_TMPL_LLAMA3;
    return DETECT_NONE;
}

int chat_detect_len(const char *src, size_t len, const char *eos_text, chat_tmpl *out) {
    *out = CHAT_TMPL_CHATML;
    if (!src || len == 0) return 1;
    /* A bare name ("llama3") is accepted too, as llama.cpp does. */
    for (int i = 0; i < CHAT_TMPL_COUNT; i++) {
        if (strlen(chat_names[i]) == len && memcmp(src, chat_names[i], len) == 0) {
            *out = (chat_tmpl)i;
            return 0;
        }
    }
    int r = detect_chain((chat_src){ src, len }, eos_text);
    if (r < 0) return 1;
    *out = (chat_tmpl)r;
    return 0;
}

int chat_detect(const char *src, chat_tmpl *out) {
    return chat_detect_len(src, src ? strlen(src) : 0, NULL, out);
}

/* ---------------------------------------------------------------- rendering */

/* Growable output string. An allocation failure or size overflow sets oom and
 * turns later writes into no-ops, so the renderers need not check each write. */
typedef struct sbuf { char *p; size_t len, cap; int oom; } sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX - 1 - b->len) { b->oom = 1; return; }
    size_t need = b->len + n + 1;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* Whitespace trim with isspace() in the C locale, as llama.cpp's trim(). */
typedef struct strv { const char *p; size_t n; } strv;

static strv trim(const char *s) {
    size_t a = 0, b = strlen(s);
    while (a < b && isspace((unsigned char)s[a])) a++;
    while (b > a && isspace((unsigned char)s[b - 1])) b--;
    return (strv){ s + a, b - a };
}

static void sb_putv(sbuf *b, strv v) { sb_put(b, v.p, v.n); }

static int is_role(const chat_msg *m, const char *role) { return strcmp(m->role, role) == 0; }

/* <|im_start|>role\ncontent<|im_end|>\n. The SmolLM2 and Qwen2 templates add a
 * default system message when the conversation has none; llama.cpp's built-in
 * chatml does not, and neither does this renderer: the caller adds it as a message
 * (chat_default_system, minfer chat), as the model's own template would. */
static void render_chatml(sbuf *b, const chat_msg *m, int n, int add_ass) {
    for (int i = 0; i < n; i++) {
        sb_puts(b, "<|im_start|>"); sb_puts(b, m[i].role); sb_puts(b, "\n");
        sb_puts(b, m[i].content); sb_puts(b, "<|im_end|>\n");
    }
    if (add_ass) sb_puts(b, "<|im_start|>assistant\n");
}

/* Mistral v7: system, user and assistant each have their own markers, so a system
 * message may appear anywhere. Any role other than system/user renders as an answer.
 * Nothing is appended for the generation prompt: the prompt already ends in [/INST]. */
static void render_mistral_v7(sbuf *b, const chat_msg *m, int n, int tekken) {
    const char *sp = tekken ? "" : " ";
    for (int i = 0; i < n; i++) {
        if (is_role(&m[i], "system")) {
            sb_puts(b, "[SYSTEM_PROMPT]"); sb_puts(b, sp); sb_puts(b, m[i].content);
            sb_puts(b, "[/SYSTEM_PROMPT]");
        } else if (is_role(&m[i], "user")) {
            sb_puts(b, "[INST]"); sb_puts(b, sp); sb_puts(b, m[i].content); sb_puts(b, "[/INST]");
        } else {
            sb_puts(b, sp); sb_puts(b, m[i].content); sb_puts(b, "</s>");
        }
    }
}

/* Mistral v1 / v3 / v3-tekken: one [INST] opens a turn that an answer closes; a
 * system message is written inside the turn, before the user text. (The official
 * templates move the system message to the last user turn; llama.cpp's built-in
 * renderer keeps it where it is, and so does this.) */
static void render_mistral_v1_v3(sbuf *b, const chat_msg *m, int n, chat_tmpl t) {
    const char *lead = t == CHAT_TMPL_MISTRAL_V1 ? " " : "";
    const char *trail = t == CHAT_TMPL_MISTRAL_V3_TEKKEN ? "" : " ";
    int trim_answer = t == CHAT_TMPL_MISTRAL_V3;
    int in_turn = 0;
    for (int i = 0; i < n; i++) {
        if (!in_turn) {
            sb_puts(b, lead); sb_puts(b, "[INST]"); sb_puts(b, trail);
            in_turn = 1;
        }
        if (is_role(&m[i], "system")) {
            sb_puts(b, m[i].content); sb_puts(b, "\n\n");
        } else if (is_role(&m[i], "user")) {
            sb_puts(b, m[i].content); sb_puts(b, lead); sb_puts(b, "[/INST]");
        } else {
            sb_puts(b, trail);
            if (trim_answer) sb_putv(b, trim(m[i].content));
            else sb_puts(b, m[i].content);
            sb_puts(b, "</s>");
            in_turn = 0;
        }
    }
}

/* Llama-2 and variants. The first "[INST] " is written unconditionally (the BOS
 * before it is the tokenizer's); later turns reopen with "[INST] " or, for the
 * -bos variant, "<s>[INST] ". Without <<SYS>> support the system text is written as
 * a plain line at the start of the turn. */
static void render_llama2(sbuf *b, const chat_msg *m, int n, chat_tmpl t) {
    int sys = t != CHAT_TMPL_LLAMA2;
    int bos_inside = t == CHAT_TMPL_LLAMA2_SYS_BOS;
    int strip = t == CHAT_TMPL_LLAMA2_SYS_STRIP;
    int in_turn = 1;
    sb_puts(b, "[INST] ");
    for (int i = 0; i < n; i++) {
        strv c = strip ? trim(m[i].content) : (strv){ m[i].content, strlen(m[i].content) };
        if (!in_turn) {
            in_turn = 1;
            sb_puts(b, bos_inside ? "<s>[INST] " : "[INST] ");
        }
        if (is_role(&m[i], "system")) {
            if (sys) { sb_puts(b, "<<SYS>>\n"); sb_putv(b, c); sb_puts(b, "\n<</SYS>>\n\n"); }
            else { sb_putv(b, c); sb_puts(b, "\n"); }
        } else if (is_role(&m[i], "user")) {
            sb_putv(b, c); sb_puts(b, " [/INST]");
        } else {
            sb_putv(b, c); sb_puts(b, "</s>");
            in_turn = 0;
        }
    }
}

/* Llama-3: contents trimmed. The template's leading bos_token is the tokenizer's. */
static void render_llama3(sbuf *b, const chat_msg *m, int n, int add_ass) {
    for (int i = 0; i < n; i++) {
        sb_puts(b, "<|start_header_id|>"); sb_puts(b, m[i].role);
        sb_puts(b, "<|end_header_id|>\n\n"); sb_putv(b, trim(m[i].content));
        sb_puts(b, "<|eot_id|>");
    }
    if (add_ass) sb_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Gemma has no system role (its template raises an error on one); the trimmed
 * system text is carried into the next non-model turn, followed by a blank line.
 * Several system messages are concatenated as they are; one never followed by a
 * user turn is dropped. "assistant" is called "model"; contents are trimmed. */
static void render_gemma(sbuf *b, const chat_msg *m, int n, int add_ass) {
    sbuf sys = { 0 };
    for (int i = 0; i < n; i++) {
        if (is_role(&m[i], "system")) {
            sb_putv(&sys, trim(m[i].content));
            continue;
        }
        const char *role = is_role(&m[i], "assistant") ? "model" : m[i].role;
        sb_puts(b, "<start_of_turn>"); sb_puts(b, role); sb_puts(b, "\n");
        if (sys.len > 0 && strcmp(role, "model") != 0) {
            sb_put(b, sys.p, sys.len); sb_puts(b, "\n\n");
            sys.len = 0;
        }
        sb_putv(b, trim(m[i].content)); sb_puts(b, "<end_of_turn>\n");
    }
    if (sys.oom) b->oom = 1;
    free(sys.p);
    if (add_ass) sb_puts(b, "<start_of_turn>model\n");
}

/* The <|role|> families: phi3, falcon3, glmedge, zephyr, zephyr-eos differ only in
 * what follows the content and in the generation prompt. */
static void render_role_tag(sbuf *b, const chat_msg *m, int n, int add_ass,
                            const char *after, const char *gen) {
    for (int i = 0; i < n; i++) {
        sb_puts(b, "<|"); sb_puts(b, m[i].role); sb_puts(b, "|>\n");
        sb_puts(b, m[i].content); sb_puts(b, after);
    }
    if (add_ass) sb_puts(b, gen);
}

static void render_phi4(sbuf *b, const chat_msg *m, int n, int add_ass) {
    for (int i = 0; i < n; i++) {
        sb_puts(b, "<|im_start|>"); sb_puts(b, m[i].role); sb_puts(b, "<|im_sep|>");
        sb_puts(b, m[i].content); sb_puts(b, "<|im_end|>");
    }
    if (add_ass) sb_puts(b, "<|im_start|>assistant<|im_sep|>");
}

char *chat_render(chat_tmpl t, const chat_msg *msgs, int n, int add_generation_prompt) {
    if ((int)t < 0 || t >= CHAT_TMPL_COUNT || n < 0 || (n > 0 && !msgs)) return NULL;
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) return NULL;
    int add = add_generation_prompt != 0;
    sbuf b = { 0 };
    sb_put(&b, "", 0); /* an empty conversation still yields "" rather than NULL */
    switch (t) {
    case CHAT_TMPL_CHATML: render_chatml(&b, msgs, n, add); break;
    case CHAT_TMPL_LLAMA2:
    case CHAT_TMPL_LLAMA2_SYS:
    case CHAT_TMPL_LLAMA2_SYS_BOS:
    case CHAT_TMPL_LLAMA2_SYS_STRIP: render_llama2(&b, msgs, n, t); break;
    case CHAT_TMPL_MISTRAL_V1:
    case CHAT_TMPL_MISTRAL_V3:
    case CHAT_TMPL_MISTRAL_V3_TEKKEN: render_mistral_v1_v3(&b, msgs, n, t); break;
    case CHAT_TMPL_MISTRAL_V7: render_mistral_v7(&b, msgs, n, 0); break;
    case CHAT_TMPL_MISTRAL_V7_TEKKEN: render_mistral_v7(&b, msgs, n, 1); break;
    case CHAT_TMPL_LLAMA3: render_llama3(&b, msgs, n, add); break;
    case CHAT_TMPL_GEMMA: render_gemma(&b, msgs, n, add); break;
    case CHAT_TMPL_PHI3: render_role_tag(&b, msgs, n, add, "<|end|>\n", "<|assistant|>\n"); break;
    case CHAT_TMPL_PHI4: render_phi4(&b, msgs, n, add); break;
    case CHAT_TMPL_FALCON3: render_role_tag(&b, msgs, n, add, "\n", "<|assistant|>\n"); break;
    case CHAT_TMPL_GLMEDGE: render_role_tag(&b, msgs, n, add, "", "<|assistant|>"); break;
    case CHAT_TMPL_ZEPHYR:
        render_role_tag(&b, msgs, n, add, "<|endoftext|>\n", "<|assistant|>\n");
        break;
    case CHAT_TMPL_ZEPHYR_EOS: render_role_tag(&b, msgs, n, add, "</s>\n", "<|assistant|>\n"); break;
    case CHAT_TMPL_COUNT: break;
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

size_t chat_default_system(const char *src, size_t len, char *out, size_t cap) {
    static const char open[] = "<|im_start|>system", close[] = "<|im_end|>";
    if (!src || !out || cap == 0) return 0;
    out[0] = 0;
    chat_src t = { src, len };
    if (!src_has(t, "!= 'system'") && !src_has(t, "== 'system'") && !src_has(t, "!= \"system\"") &&
        !src_has(t, "== \"system\""))
        return 0;
    const size_t no = sizeof open - 1, nc = sizeof close - 1;
    for (size_t i = 0; i + no <= len; i++) {
        if (memcmp(src + i, open, no)) continue;
        size_t p = i + no;
        if (p < len && src[p] == '\n') p++;
        else if (p + 1 < len && src[p] == '\\' && src[p + 1] == 'n') p += 2;
        else continue;
        size_t e = p;
        while (e + nc <= len && memcmp(src + e, close, nc)) e++;
        if (e + nc > len) return 0;
        size_t o = 0;
        int ok = e > p;
        for (size_t k = p; ok && k < e; k++) {
            char ch = src[k];
            /* a NUL byte (a GGUF string may hold one) would cut the C string the
             * caller gets short of the length returned: no default then */
            if (ch == '\'' || ch == '"' || ch == '{' || ch == '}' || ch == '+' || ch == 0) ok = 0;
            else if (ch == '\\' && k + 1 < e && src[k + 1] == 'n') { ch = '\n'; k++; }
            if (ok) {
                if (o + 1 >= cap) ok = 0;
                else out[o++] = ch;
            }
        }
        if (ok) {
            out[o] = 0;
            return o;
        }
        out[0] = 0;
    }
    return 0;
}

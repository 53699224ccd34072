/* chat.h - chat templates: recognise a model's template family from the Jinja source
 * in the GGUF (tokenizer.chat_template) and render a conversation into prompt text.
 *
 * This is not a Jinja interpreter. Like llama.cpp's built-in templates
 * (llm_chat_detect_template / llm_chat_apply_template in src/llama-chat.cpp), a
 * template is recognised by distinctive substrings and each family is rendered by
 * hand-written code that produces exactly what llama.cpp's built-in renderer
 * produces for it, including its quirks (a system message folded into the first
 * user turn where the family has no system role, content trimmed where llama.cpp
 * trims it). BOS text such as "<s>" appears only where llama.cpp's renderer writes
 * it inside the history; the leading BOS token is the tokenizer's business.
 *
 * Where llama.cpp's Jinja engine (its default since 2025) would render the real
 * template differently, the differences are small and noted per family in chat.c
 * (for example a default system prompt the template adds when none is given). */
#ifndef MINFER_CHAT_H
#define MINFER_CHAT_H

#include <stddef.h>

typedef enum chat_tmpl {
    CHAT_TMPL_CHATML = 0,        /* <|im_start|>role\n...<|im_end|>\n  (qwen2, smollm) */
    CHAT_TMPL_LLAMA2,            /* [INST] ... [/INST], no system role */
    CHAT_TMPL_LLAMA2_SYS,        /* [INST] <<SYS>>\n...\n<</SYS>>\n\n ... [/INST] */
    CHAT_TMPL_LLAMA2_SYS_BOS,    /* as LLAMA2_SYS, "<s>" before each later [INST] */
    CHAT_TMPL_LLAMA2_SYS_STRIP,  /* as LLAMA2_SYS, contents trimmed */
    CHAT_TMPL_MISTRAL_V1,        /* " [INST] ... [/INST] answer</s>" */
    CHAT_TMPL_MISTRAL_V3,        /* "[INST] ...[/INST] answer</s>" (answers trimmed) */
    CHAT_TMPL_MISTRAL_V3_TEKKEN, /* "[INST]...[/INST]answer</s>" */
    CHAT_TMPL_MISTRAL_V7,        /* [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] */
    CHAT_TMPL_MISTRAL_V7_TEKKEN, /* as V7 without the spaces */
    CHAT_TMPL_LLAMA3,            /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_TMPL_GEMMA,             /* <start_of_turn>user|model\n...<end_of_turn>\n */
    CHAT_TMPL_PHI3,              /* <|role|>\n...<|end|>\n */
    CHAT_TMPL_PHI4,              /* <|im_start|>role<|im_sep|>...<|im_end|> */
    CHAT_TMPL_FALCON3,           /* <|role|>\n...\n */
    CHAT_TMPL_GLMEDGE,           /* <|role|>\n... (no terminator) */
    CHAT_TMPL_ZEPHYR,            /* <|role|>\n...<|endoftext|>\n (stablelm-2-zephyr) */
    CHAT_TMPL_ZEPHYR_EOS,        /* <|role|>\n...</s>\n (zephyr-7b-beta, TinyLlama-Chat);
                                    minfer's addition, see chat_detect */
    CHAT_TMPL_COUNT
} chat_tmpl;

typedef struct chat_msg {
    const char *role;     /* "system", "user", "assistant" (others passed through) */
    const char *content;  /* UTF-8, NUL-terminated */
} chat_msg;

/* Recognises the family of a Jinja chat template (the GGUF's tokenizer.chat_template)
 * or of a template name (chat_from_name's names). Returns 0 when recognised; 1 when
 * src is NULL, empty, or a template minfer cannot render, in which case *out is
 * CHAT_TMPL_CHATML and the caller should warn.
 *
 * chat_detect_len takes a source that need not be NUL-terminated (a gguf_str view)
 * and the text of the vocab's EOS token (may be NULL): zephyr-style templates end
 * each message with eos_token, which is "</s>" for zephyr-7b-beta and TinyLlama-Chat
 * (-> CHAT_TMPL_ZEPHYR_EOS) but "<|endoftext|>" for stablelm-2-zephyr
 * (-> CHAT_TMPL_ZEPHYR); another EOS text makes the template unsupported. NULL
 * means "</s>", which is what chat_detect assumes. */
int chat_detect(const char *src, chat_tmpl *out);
int chat_detect_len(const char *src, size_t len, const char *eos_text, chat_tmpl *out);

/* Template by name ("chatml", "llama2", "llama2-sys", "llama2-sys-bos",
 * "llama2-sys-strip", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
 * "mistral-v7-tekken", "llama3", "gemma", "phi3", "phi4", "falcon3", "glmedge",
 * "zephyr", "zephyr-eos"): the names llama.cpp's --chat-template accepts, plus
 * zephyr-eos. Returns 0, or -1 for an unknown name (*out untouched). */
int chat_from_name(const char *name, chat_tmpl *out);
/* The family of a model whose GGUF has no tokenizer.chat_template, by its architecture
 * (general.architecture): gemma, gemma2 and gemma3 are trained on the gemma turns (the
 * Gemma-3-270M GGUF of scripts/get-model carries no template). Returns 0 and sets *out,
 * or -1 for an architecture without one (*out untouched). */
int chat_for_arch(const char *arch, chat_tmpl *out);
const char *chat_name(chat_tmpl t); /* "unknown" for an out-of-range value */

/* The default system message a chatml template writes when the conversation has none
 * (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
 * Qwen2.5: "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."):
 * the literal text between "<|im_start|>system" + a newline (or the two characters
 * \n) and "<|im_end|>" that holds no template syntax (no quote, brace or '+'), in a
 * template that also tests for a system message of the conversation's own. Writes it
 * NUL-terminated into out (newline escapes decoded) and returns its length, or 0
 * when there is none or it does not fit in cap. */
size_t chat_default_system(const char *src, size_t len, char *out, size_t cap);

/* Renders n messages as prompt text; add_generation_prompt appends the opening of an
 * assistant turn where the family has one. Returns a malloc'd NUL-terminated string
 * (caller frees), or NULL for bad arguments (t out of range, n < 0, msgs NULL with
 * n > 0, a NULL role or content) or when memory runs out. */
char *chat_render(chat_tmpl t, const chat_msg *msgs, int n, int add_generation_prompt);

#endif

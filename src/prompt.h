/* prompt.h - the prompt text of a conversation: the model's own chat template (the
 * GGUF's tokenizer.chat_template, or a --chat-template-file), rendered by the Jinja
 * engine (jinja.h) as transformers renders it; or, where there is none (or it does
 * not parse), one of the built-in families of chat.h, labelled as a fallback.
 *
 * A conversation is given as template values (OpenAI's message objects, normalized by
 * prompt_messages), so the server, `minfer chat`, `minfer run` and `minfer template`
 * render the same text for the same messages. */
#ifndef MINFER_PROMPT_H
#define MINFER_PROMPT_H

#include <stddef.h>

#include "chat.h"
#include "jinja.h"
#include "toolcall.h"

/* Where a model's template comes from; the caller reads these off the model. */
typedef struct prompt_source {
    const char *src;      /* tokenizer.chat_template (not NUL-terminated), or NULL */
    size_t len;
    const char *arch;     /* general.architecture (gemma has a family without a template) */
    const char *bos_text; /* the vocabulary's BOS and EOS text ("<s>", "<|im_end|>"); NULL: none */
    const char *eos_text;
    const char *file;     /* --chat-template-file: a Jinja template file to use instead, or NULL */
    const char *name;     /* --chat-template: a built-in family to use instead, or NULL */
} prompt_source;

typedef struct prompt_tmpl {
    jinja_tmpl *jinja;          /* the Jinja template; NULL: the built-in family renders */
    chat_tmpl family;           /* the family: the fallback, or the one named */
    char default_system[1024];  /* family only: a chatml template's own default system message */
    char bos[64], eos[64];      /* bos_token, eos_token of the render ("" when none) */
    char label[512];            /* what renders, for logs: "the model's own chat template (...)",
                                   "built-in chatml (fallback: ...)" */
    int takes_tools;            /* the Jinja template reads `tools` (a family never does) */
    tc_format tool_format;      /* how the template has the model write a tool call (toolcall.h) */
    tc_think thinks;            /* the reasoning markup the template writes (a reasoning model's), or none */
    int string_args;            /* the template takes tool-call arguments as JSON text, not objects
                                   (Functionary v3.2 concatenates them): found by rendering a probe */
    int thinking_key;           /* the template reads an assistant message's reasoning from "thinking",
                                   not "reasoning_content" (gpt-oss, LFM2.5): given both */
} prompt_tmpl;

/* Chooses a model's template: file > name > the model's Jinja template > the family
 * detected from it, the architecture's, or chatml (a fallback, said so in the label;
 * a model template that does not parse falls back too, the parse error in the label).
 * Returns 0; 1 for an unknown family name (a usage error); 2 when the file cannot be
 * read or does not parse (the error, with its line and column, in err). */
int prompt_init(prompt_tmpl *p, const prompt_source *s, char *err, size_t cap);
void prompt_free(prompt_tmpl *p);
/* How a Jinja template's answers are read, for logs: "; tool calls: hermes; reasoning:
 * think" (and "; tool-call arguments as JSON text" where string_args); "" for a family. */
const char *prompt_traits(const prompt_tmpl *p, char *buf, size_t cap);

/* OpenAI-style messages (a list of objects, e.g. from jinja_json_parse of a request) as
 * the templates expect them, copied into e: text content parts joined into one string,
 * a null or absent content "", tool-call arguments given as a JSON string parsed into an
 * object (the Hugging Face convention the templates follow; a string that is not a JSON
 * object stays a string), "developer" read as "system". NULL with err when msgs is not
 * a list of objects with a string role, or memory runs out. */
jinja_value *prompt_messages(jinja_env *e, const jinja_value *msgs, char *err, size_t cap);

typedef struct prompt_request {
    jinja_value *messages;     /* from prompt_messages */
    jinja_value *tools;        /* a list of tool objects, or NULL (the template sees None) */
    jinja_value *kwargs;       /* extra variables (chat_template_kwargs: enable_thinking, ...), or NULL */
    int add_generation_prompt;
} prompt_request;

/* The prompt text (malloc'd, NUL-terminated, *len its length when len is non-NULL), or
 * NULL with err: the template's own error (raise_exception's message, a limit), or, for
 * a family, a role or tools it cannot render. The messages go to the template as the
 * template takes them (string_args, thinking_key above). */
char *prompt_render(const prompt_tmpl *p, jinja_env *e, const prompt_request *r, size_t *len, char *err, size_t cap);

/* Whether tokenizing the rendered text should add BOS: the vocabulary asks for it
 * (add_bos) and the text does not start with the BOS text already (templates that
 * write {{ bos_token }} themselves: Llama 3, Gemma). */
int prompt_add_bos(const prompt_tmpl *p, const char *text, int add_bos);

#endif

/* toolcall.h - tool calls and reasoning in a model's output (issue 53): the text a chat
 * model generates, split into its reasoning (<think>...</think>), its answer and the
 * tool calls it wrote in its template's format, for the server's reasoning_content,
 * content and tool_calls.
 *
 * Formats (what the chat template teaches the model; tc_detect reads it off the source):
 *   hermes        <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, one block a
 *                 call (Qwen2.5, Qwen3, QwQ, Hermes 2 Pro / 3, SmolLM3)
 *   llama3        the whole answer one JSON object {"name": N, "parameters": {...}}, after
 *                 an optional <|python_tag|> (Llama 3.1, 3.2, 3.3)
 *   mistral       [TOOL_CALLS][{"name": N, "arguments": {...}, "id": I}, ...] (Mistral
 *                 v3, Nemo)
 *   mistral-args  [TOOL_CALLS]N[ARGS]{...}, repeated (Mistral Small 3.2, Devstral,
 *                 Ministral 3)
 *   deepseek      <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```
 *                 <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (DeepSeek-R1 and its distills), or
 *                 N<｜tool▁sep｜>{...} inside the call markers (DeepSeek-V3.1)
 *   generic       a template of none of these: the hermes forms
 * Inside <tool_call>, besides a JSON object: <function=N><parameter=K>V</parameter>...
 * </function> (Qwen3-Coder, Qwen3.5, Nemotron 3) and N<arg_key>K</arg_key><arg_value>V
 * </arg_value>... (GLM-4.5/4.6), their arguments made a JSON object (a value that reads as
 * JSON as itself, else a string).
 * A call's arguments are the JSON object exactly as the model wrote it (the streamed
 * deltas and the whole answer agree byte for byte); a block that does not hold a valid
 * call stays text.
 *
 * Streaming: a parse of a prefix of the output (final = 0) holds back what may still
 * change meaning (a marker's first bytes, an open call, trailing whitespace, an answer
 * that may yet be a llama3 call) and reports calls only once complete, so every later
 * parse extends the reasoning and content of an earlier one and keeps its calls. */
#ifndef MINFER_TOOLCALL_H
#define MINFER_TOOLCALL_H

#include <stddef.h>

typedef enum tc_format {
    TC_FORMAT_NONE = 0, /* no tool calls parsed (no tools, or tool_choice none) */
    TC_FORMAT_HERMES,
    TC_FORMAT_LLAMA3,
    TC_FORMAT_MISTRAL,
    TC_FORMAT_MISTRAL_ARGS,
    TC_FORMAT_GENERIC,
    TC_FORMAT_DEEPSEEK,
} tc_format;

/* The format a chat template's source implies (TC_FORMAT_GENERIC when it shows none). */
tc_format tc_detect(const char *src, size_t len);
const char *tc_format_name(tc_format f);
/* Whether a template writes <think> blocks (a reasoning model's). */
int tc_template_thinks(const char *src, size_t len);
/* Whether a rendered prompt ends inside an open <think> block (the template opened it for
 * the answer: DeepSeek-R1, QwQ), so the output starts as reasoning. */
int tc_prompt_opens_think(const char *prompt, size_t len);

/* What a call of a format looks like, for a grammar that forces one (tool_choice
 * "required" or a named function: json_tool_call_gbnf of issue 54 takes these). */
typedef struct tc_shape {
    const char *list_prefix, *list_suffix, *separator; /* around and between calls */
    const char *call_prefix, *call_suffix;             /* around each call's JSON object */
    const char *name_key, *args_key;                   /* the object's keys */
} tc_shape;
void tc_format_shape(tc_format f, tc_shape *out);

typedef struct tc_call {
    char *name;      /* malloc'd, NUL-terminated */
    char *arguments; /* the arguments JSON object as the model wrote it (malloc'd) */
    char *id;        /* the id the model wrote (mistral), or NULL */
} tc_call;

typedef struct tc_result {
    char *reasoning; /* malloc'd, never NULL ("" when none) */
    size_t reasoning_len;
    char *content;   /* malloc'd, never NULL */
    size_t content_len;
    tc_call *calls;  /* [n_calls] */
    int n_calls;
} tc_result;

typedef struct tc_opts {
    tc_format format;      /* TC_FORMAT_NONE: calls stay text */
    char *const *tools;    /* the request's tool names (a bare JSON object counts as a call only with one of them) */
    int n_tools;
    int reasoning;         /* take <think>...</think> at the start out as reasoning */
    int think_open;        /* the prompt opened the <think> block: the output starts inside it */
} tc_opts;

/* Parses text[0..n) (a prefix of the output unless final). Returns 0, or -1 when memory
 * runs out (out then empty). */
int tc_parse(const char *text, size_t n, int final, const tc_opts *o, tc_result *out);
void tc_result_free(tc_result *r);

#endif

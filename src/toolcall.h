/* toolcall.h - tool calls and reasoning in a model's output (issue 53): the text a chat
 * model generates, split into its reasoning, its answer and the tool calls it wrote in
 * its template's format, for the server's reasoning_content, content and tool_calls.
 *
 * Formats (what the chat template teaches the model; tc_detect reads it off the source):
 *   hermes        <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>, one block a
 *                 call (Qwen2.5, Qwen3, QwQ, Hermes 2 Pro / 3, SmolLM3, Granite 4)
 *   llama3        the whole answer one JSON object {"name": N, "parameters": {...}}, after
 *                 an optional <|python_tag|> (Llama 3.1, 3.2, 3.3)
 *   mistral       [TOOL_CALLS][{"name": N, "arguments": {...}, "id": I}, ...] (Mistral
 *                 v3, Nemo)
 *   mistral-args  [TOOL_CALLS]N[ARGS]{...}, repeated (Mistral Small 3.2, Devstral,
 *                 Ministral 3)
 *   deepseek      <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```
 *                 <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (DeepSeek-R1 and its distills)
 *   deepseek-v3.1 the same list, each call N<｜tool▁sep｜>{...} (DeepSeek-V3.1); both
 *                 parse either form
 *   functionary-v3.1  <function=N>{...}</function>, and <|python_tag|>CODE for a tool
 *                 named "python" (Functionary medium v3.1)
 *   functionary-v3.2  the answer as messages >>>RECIPIENT\nBODY (the prompt writes the
 *                 first >>>): "all" is text, another recipient a call with BODY its JSON
 *                 arguments (Functionary medium v3.2)
 *   command-r     Action: ```json\n[{"tool_name": N, "parameters": {...}}, ...]\n```
 *                 (Command R+; the pseudo-tool directly-answer is no call)
 *   command-r7b   <|START_ACTION|>[{"tool_call_id": "0", "tool_name": N, "parameters":
 *                 {...}}, ...]<|END_ACTION|> (Command R7B, Command A)
 *   granite       <|tool_call|>[{"name": N, "arguments": {...}}, ...] (Granite 3.x)
 *   gpt-oss       OpenAI's harmony messages: <|channel|>analysis<|message|>...<|end|> is
 *                 reasoning, <|channel|>final<|message|>... content, and
 *                 <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}
 *                 a call (the recipient may come before <|channel|> too); later messages
 *                 start <|start|>assistant
 *   kimi-k2       <|tool_calls_section_begin|><|tool_call_begin|>functions.N:I<|tool_call_argument_begin|>{...}
 *                 <|tool_call_end|>...<|tool_calls_section_end|>, the id functions.N:I kept
 *   seed-oss      <seed:tool_call>\n<function=N>\n<parameter=K>V</parameter>...\n</function>\n</seed:tool_call>
 *   nemotron-v2   <TOOLCALL>[{"name": N, "arguments": {...}}, ...]</TOOLCALL> (Nemotron Nano v2)
 *   apriel        <tool_calls>[{"name": N, "arguments": {...}}, ...]</tool_calls> (Apriel 1.5, 1.6)
 *   generic       a template of none of these: the hermes forms
 * Inside <tool_call> and <seed:tool_call>, besides a JSON object: <function=N><parameter=K>
 * V</parameter>...</function> (Qwen3-Coder, Qwen3.5, Nemotron 3, Seed-OSS) and N<arg_key>K
 * </arg_key><arg_value>V</arg_value>... (GLM-4.5/4.6), their arguments made a JSON object
 * (a value that reads as JSON as itself, else a string).
 * A call's arguments are the JSON object exactly as the model wrote it (the streamed
 * deltas and the whole answer agree byte for byte); a block that does not hold a valid
 * call stays text.
 *
 * Reasoning (tc_think, also read off the template): <think>...</think> (DeepSeek-R1,
 * Qwen3, QwQ, Kimi K2 Thinking, ...), <seed:think>...</seed:think> (Seed-OSS),
 * <|START_THINKING|>...<|END_THINKING|> then <|START_RESPONSE|>...<|END_RESPONSE|> around
 * the answer (Command R7B / A), <think>...</think><response>...</response> (Granite 3.3),
 * harmony's analysis channel (gpt-oss), [THINK]...[/THINK] (Ministral 3 Reasoning), the
 * reasoning that Apriel's prompt opens with "Here are my reasoning steps:" up to
 * [BEGIN FINAL RESPONSE], the answer then up to [END FINAL RESPONSE] (Apriel 1.5's
 * prompt opens nothing, yet it reasons first: the server sets think_open for it). A
 * reasoning block counts only at the start of the
 * output, or from the start where the prompt opened it.
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
    TC_FORMAT_DEEPSEEK_V31,
    TC_FORMAT_FUNCTIONARY_V31,
    TC_FORMAT_FUNCTIONARY_V32,
    TC_FORMAT_COMMAND_R,
    TC_FORMAT_COMMAND_R7B,
    TC_FORMAT_GRANITE,
    TC_FORMAT_GPT_OSS,
    TC_FORMAT_KIMI_K2,
    TC_FORMAT_SEED_OSS,
    TC_FORMAT_NEMOTRON_V2,
    TC_FORMAT_APRIEL,
    TC_FORMAT_MINIMAX_M2, /* <minimax:tool_call><invoke name="N"><parameter name="K">V</parameter></invoke>... */
    TC_FORMAT_DEEPSEEK_DSML, /* DeepSeek V3.2: <｜DSML｜function_calls><｜DSML｜invoke name="N"><｜DSML｜parameter name="K" string="true">V... */
    TC_FORMAT_COUNT
} tc_format;

typedef enum tc_think {
    TC_THINK_NONE = 0, /* no reasoning taken out */
    TC_THINK_TAGS,     /* <think>...</think> */
    TC_THINK_SEED,     /* <seed:think>...</seed:think> */
    TC_THINK_COHERE,   /* <|START_THINKING|>...<|END_THINKING|>, <|START_RESPONSE|>...<|END_RESPONSE|> */
    TC_THINK_GRANITE,  /* <think>...</think>, <response>...</response> */
    TC_THINK_HARMONY,  /* gpt-oss: the analysis channel */
    TC_THINK_MISTRAL,  /* [THINK]...[/THINK] (Ministral 3 Reasoning, Magistral) */
    TC_THINK_APRIEL,   /* Here are my reasoning steps: ... [BEGIN FINAL RESPONSE] ... [END FINAL RESPONSE] */
    TC_THINK_COUNT
} tc_think;

/* The format a chat template's source implies (TC_FORMAT_GENERIC when it shows none). */
tc_format tc_detect(const char *src, size_t len);
const char *tc_format_name(tc_format f);
/* The reasoning markup a template writes (TC_THINK_NONE: none). */
tc_think tc_template_thinks(const char *src, size_t len);
const char *tc_think_name(tc_think t);
/* Whether a rendered prompt ends inside an open reasoning block (the template opened it
 * for the answer: DeepSeek-R1, QwQ), so the output starts as reasoning: the block's
 * markup, or TC_THINK_NONE. */
tc_think tc_prompt_opens_think(const char *prompt, size_t len);

/* Markers of a format and of a reasoning markup that a model's vocabulary may hold as
 * special (control) tokens, which a detokenizer drops unless told: the server renders
 * these tokens as their text so that the parser sees them. Fills out[0..cap), returns
 * the count. */
int tc_markers(tc_format f, tc_think t, const char **out, int cap);

/* What a call of a format looks like, for a grammar that forces one (tool_choice
 * "required" or a named function: json_tool_call_gbnf of issue 54 takes these). Either
 * the name is a member of the call's JSON object (name_key, with the arguments under
 * args_key), or it stands bare before the arguments object (bare_name: call_prefix NAME
 * name_suffix ARGS call_suffix). Formats whose arguments are no JSON object (seed-oss's
 * <parameter=K> tags) take the generic JSON object inside their call markers, which
 * their parser reads as well. */
typedef struct tc_shape {
    const char *list_prefix, *list_suffix, *separator; /* around and between calls */
    const char *call_prefix, *call_suffix;             /* around each call */
    const char *name_key, *args_key;                   /* the object's keys */
    int bare_name;                                     /* the name outside the object */
    const char *name_suffix;                           /* bare_name: between the name and the arguments */
    int max_calls;                                     /* the format's own limit (gpt-oss: 1 a message); 0: none */
} tc_shape;
void tc_format_shape(tc_format f, tc_shape *out);

typedef struct tc_call {
    char *name;      /* malloc'd, NUL-terminated */
    char *arguments; /* the arguments JSON object as the model wrote it (malloc'd) */
    char *id;        /* the id the model wrote (mistral, kimi-k2), or NULL */
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
    tc_think reasoning;    /* the reasoning markup taken out (TC_THINK_NONE: none) */
    int think_open;        /* the prompt opened the reasoning block: the output starts inside it */
} tc_opts;

/* Parses text[0..n) (a prefix of the output unless final). Returns 0, or -1 when memory
 * runs out (out then empty). */
int tc_parse(const char *text, size_t n, int final, const tc_opts *o, tc_result *out);
void tc_result_free(tc_result *r);

#endif

/* request.h - the JSON bodies of the server's POST endpoints to plain C structs, with
 * every check the API makes before a model is involved (types, ranges, unknown and
 * duplicate fields, UTF-8). Pure: no globals, no model; safe to fuzz. Checks that need
 * the model (prompt length against the context, token ids against the vocabulary)
 * come later, in http.c. */
#ifndef MINFER_SERVER_REQUEST_H
#define MINFER_SERVER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#define SRV_MAX_STOP 4          /* OpenAI's limit on stop strings */
#define SRV_MAX_STOP_LEN 256    /* bytes of one stop string */
#define SRV_MAX_TOP_LOGPROBS 20 /* chat's top_logprobs limit (completions: 5) */
#define SRV_MAX_TOKENS (1 << 24)
#define SRV_MAX_TOOLS 128       /* OpenAI's limit on tools */

typedef enum srv_tool_choice {
    SRV_TOOL_AUTO = 0,  /* the model may call a tool (the default where tools are given) */
    SRV_TOOL_NONE,      /* no tool calls: the tools are not shown to the model */
    SRV_TOOL_REQUIRED,  /* a call of some tool (constrained decoding: issue 54) */
    SRV_TOOL_NAMED,     /* a call of tool_choice_name (constrained decoding: issue 54) */
} srv_tool_choice;

typedef struct srv_msg {
    char *role;    /* "system", "user", "assistant", "tool" ("developer" is read as "system") */
    char *content; /* text parts joined ("" for an assistant message of tool calls alone) */
} srv_msg;

typedef struct srv_request {
    int is_chat;
    char *model;          /* as given, or NULL; the server answers with its own name */
    srv_msg *msgs;        /* chat: n_msgs >= 1 */
    int n_msgs;
    char *prompt;         /* completions: the text, or NULL when given as token ids */
    int32_t *prompt_ids;  /* completions: token ids (checked against the vocabulary later) */
    int n_prompt_ids;
    int max_tokens;       /* -1: until end-of-generation or the context is full */
    /* sampling; the defaults are llama.cpp's server's (sampler_params_default) */
    float temperature, top_p, min_p;
    int top_k;
    float presence_penalty, frequency_penalty;
    int has_seed;
    uint64_t seed;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int logprobs;         /* report the chosen tokens' log-probabilities */
    int top_logprobs;     /* and this many alternatives per token (0..20) */
    int stream;
    int include_usage;    /* stream_options.include_usage */
    /* structured output: response_format {"type": "json_object"} or {"type":
     * "json_schema", "json_schema": {"schema": ...}}, or llama.cpp's "grammar" (GBNF)
     * and "json_schema" fields; compiled later (http.c), against the model */
    int constraint;       /* -1: none, else MINFER_GRAMMAR_GBNF / _JSON_SCHEMA / _JSON_OBJECT */
    char *constraint_text; /* the GBNF text, or the schema as JSON text; NULL for JSON_OBJECT */
    /* chat: tools (issue 53); the template gets tools, tool calls and tool results from
     * the body itself (http.c), these are what the server needs to know about them */
    char **tool_names;    /* [n_tools] the functions' names */
    int n_tools;
    srv_tool_choice tool_choice;
    char *tool_choice_name; /* SRV_TOOL_NAMED */
    int parallel_tool_calls; /* default 1 */
} srv_request;

/* Parses body[0..len) (need not be NUL-terminated) for /v1/chat/completions
 * (is_chat) or /v1/completions. Returns 0 with *out filled (free with
 * srv_request_free), or an HTTP status (400) with a one-line message in err that
 * names the field; *out is then empty (freeing it is harmless). */
int srv_request_parse(const char *body, size_t len, int is_chat, srv_request *out, char *err, size_t cap);
void srv_request_free(srv_request *r);

/* POST /tokenize {"content": str, "add_special": bool = true, "parse_special": bool = true}
 * (llama.cpp's server's names). *content is malloc'd. Returns 0 or 400. */
int srv_tokenize_parse(const char *body, size_t len, char **content, int *add_special, int *parse_special, char *err,
                       size_t cap);
/* POST /detokenize {"tokens": [int, ...]}: *ids malloc'd (NULL when empty). 0 or 400. */
int srv_detokenize_parse(const char *body, size_t len, int32_t **ids, int *n, char *err, size_t cap);

#endif

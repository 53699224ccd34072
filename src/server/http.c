/* http.c - see http.h. Handler threads parse and check a request, tokenize it
 * (minfer_tokenize only reads the model), submit a job and then either wait for it
 * (a JSON reply) or stream it (server-sent events from a content-reader callback
 * that blocks on the job). While waiting they watch the socket: a client that hangs
 * up cancels its job at once, which frees its slot before the next engine step. */
#include "server/http.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "chat.h"
#include "jinja.h"
#include "json_schema.h"
#include "minfer.h"
#include "prompt.h"
#include "sampler.h"
#include "server/request.h"
#include "server/text.h"
#include "toolcall.h"
#include "server/webui.h"
#include "util.h"

enum { N_STATUS = 12 };
static const int status_codes[N_STATUS] = { 200, 400, 401, 404, 405, 413, 500, 503, 0 };

struct srv_http {
    srv_config cfg;
    struct MHD_Daemon *d;
    minfer_model *m;
    srv_engine *e;
    int n_ctx, n_vocab, port;
    prompt_tmpl tmpl;          /* the model's chat template (read-only after the start: shared by handlers) */
    char tmpl_short[64];       /* srv_http_template's words */
    int refusing;
    int in_flight;             /* requests begun and not yet completed (atomic): a stream
                                  whose generation ended may still be sending */
    pthread_mutex_t mu;        /* counters below */
    uint64_t by_status[N_STATUS], other_status;
    uint64_t next_id;
    long started;
};

enum route {
    R_NONE, R_HEALTH, R_MODELS, R_METRICS, R_CHAT, R_COMPLETIONS, R_TOKENIZE, R_DETOKENIZE, R_WEBUI,
};

static const struct { const char *path; const char *method; enum route r; } routes[] = {
    { "/health", "GET", R_HEALTH },
    { "/v1/models", "GET", R_MODELS },
    { "/models", "GET", R_MODELS },
    { "/metrics", "GET", R_METRICS },
    { "/v1/chat/completions", "POST", R_CHAT },
    { "/chat/completions", "POST", R_CHAT },
    { "/v1/completions", "POST", R_COMPLETIONS },
    { "/completions", "POST", R_COMPLETIONS },
    { "/tokenize", "POST", R_TOKENIZE },
    { "/detokenize", "POST", R_DETOKENIZE },
    { "/", "GET", R_WEBUI },
};

typedef struct conn {
    enum route route;
    char *body;
    size_t len, cap;
    int too_big;
    int answered;  /* a response was queued on the first call */
    /* the access log line, written when the request completes */
    double t_start;            /* mf_time_s() at the headers */
    struct timespec wall;      /* the same moment, CLOCK_REALTIME */
    char client[INET6_ADDRSTRLEN];
    char method[8], path[256]; /* as received, control bytes escaped: no forged lines */
    int status;                /* of the response queued; 0: none */
    int n_prompt, n_gen;       /* of the job; -1: not a generation */
    int gone;                  /* the client hung up */
} conn;

/* The request this thread is answering. With one thread per connection, a request's
 * handler calls, its stream reader, libmicrohttpd's log lines about it and its
 * completion all run on its connection's thread: count_status and mhd_log reach the
 * request's access-log fields through this, without a conn argument in every call. */
static _Thread_local conn *tl_conn;

/* ---------------------------------------------------------------- responses */

static void count_status(srv_http *h, int status) {
    pthread_mutex_lock(&h->mu);
    int k = 0;
    while (status_codes[k] && status_codes[k] != status) k++;
    if (status_codes[k]) h->by_status[k]++;
    else h->other_status++;
    pthread_mutex_unlock(&h->mu);
    if (tl_conn) tl_conn->status = status;
}

static enum MHD_Result send_text(srv_http *h, struct MHD_Connection *con, int status, const char *type, char *text,
                                 size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(text); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 405) MHD_add_response_header(r, "Allow", "GET, POST");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    /* a long wait for the job left the connection's idle timer behind: restart it */
    if (h->cfg.timeout_s > 0)
        MHD_set_connection_option(con, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)h->cfg.timeout_s);
    enum MHD_Result rc = MHD_queue_response(con, (unsigned int)status, r);
    MHD_destroy_response(r);
    count_status(h, status);
    return rc;
}

static enum MHD_Result send_json(srv_http *h, struct MHD_Connection *con, int status, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return MHD_NO;
    return send_text(h, con, status, "application/json", s, strlen(s));
}

/* The chat page. Its policy keeps every request on this server (connect-src 'self',
 * nothing else loaded: the assets are in the page) and the page out of frames. */
static enum MHD_Result send_webui(srv_http *h, struct MHD_Connection *con) {
    size_t len;
    const char *html = srv_webui_html(&len);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)html, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(con, 200, r);
    MHD_destroy_response(r);
    count_status(h, 200);
    return rc;
}

static cJSON *error_obj(int status, const char *code, const char *msg) {
    const char *type = status == 401 ? "authentication_error"
                     : status >= 500 ? "server_error"
                     : "invalid_request_error";
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    return root;
}

static enum MHD_Result send_error(srv_http *h, struct MHD_Connection *con, int status, const char *code, const char *fmt,
                                  ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_error(srv_http *h, struct MHD_Connection *con, int status, const char *code, const char *fmt,
                                  ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* a message quoting the request may hold cut UTF-8 (vsnprintf's limit): keep it valid */
    size_t n = strlen(msg);
    while (n && !srv_utf8_valid(msg, n)) msg[--n] = 0;
    return send_json(h, con, status, error_obj(status, code, msg));
}

/* ---------------------------------------------------------------- helpers */

static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = { .fd = fd, .events = POLLRDHUP };
    if (poll(&p, 1, 0) <= 0) return 0;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static int conn_fd(struct MHD_Connection *con) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

/* Constant-time comparison, so the key cannot be found a byte at a time by timing. */
static int key_ok(const char *got, const char *want) {
    size_t a = strlen(got), b = strlen(want);
    unsigned diff = (unsigned)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(i < a ? got[i] : 0) ^ (unsigned char)want[i];
    return diff == 0;
}

/* Token text for logprobs: the piece's bytes as valid UTF-8 (a piece that is part of
 * a character shows U+FFFD), and the raw bytes. */
static void add_token_text(cJSON *o, const char *key, srv_http *h, int32_t id, int with_bytes) {
    char piece[256], text[3 * (256 + 3) + 16];
    int n = minfer_token_to_piece(h->m, id, piece, sizeof piece);
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    srv_utf8_dec d = { { 0 }, 0 };
    size_t t = srv_utf8_push(&d, piece, (size_t)n, text);
    t += srv_utf8_flush(&d, text + t);
    text[t] = 0;
    cJSON_AddStringToObject(o, key, text);
    if (with_bytes) {
        cJSON *b = cJSON_AddArrayToObject(o, "bytes");
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)piece[i]));
    }
}

static double lp_json(float lp) { return isfinite(lp) ? lp : -9999.0; } /* OpenAI's floor */

/* logprobs for tokens [from, to) of job j (lock held). */
static cJSON *logprobs_json(srv_http *h, const srv_job *j, int from, int to, int is_chat, size_t *text_off) {
    cJSON *lp = cJSON_CreateObject();
    if (is_chat) {
        cJSON *content = cJSON_AddArrayToObject(lp, "content");
        for (int i = from; i < to; i++) {
            const srv_tok *t = &j->toks[i];
            cJSON *e = cJSON_CreateObject();
            add_token_text(e, "token", h, t->id, 1);
            cJSON_AddNumberToObject(e, "logprob", lp_json(t->logprob));
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < t->n_top; k++) {
                cJSON *a = cJSON_CreateObject();
                add_token_text(a, "token", h, t->top[k].id, 1);
                cJSON_AddNumberToObject(a, "logprob", lp_json(t->top[k].logprob));
                cJSON_AddItemToArray(top, a);
            }
            cJSON_AddItemToArray(content, e);
        }
    } else {
        cJSON *toks = cJSON_AddArrayToObject(lp, "tokens"), *lps = cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON *tops = cJSON_AddArrayToObject(lp, "top_logprobs"), *offs = cJSON_AddArrayToObject(lp, "text_offset");
        for (int i = from; i < to; i++) {
            const srv_tok *t = &j->toks[i];
            cJSON *tmp = cJSON_CreateObject();
            add_token_text(tmp, "t", h, t->id, 0);
            cJSON_AddItemToArray(toks, cJSON_CreateString(cJSON_GetObjectItem(tmp, "t")->valuestring));
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp_json(t->logprob)));
            cJSON *top = cJSON_CreateObject();
            for (int k = 0; k < t->n_top; k++) {
                cJSON *a = cJSON_CreateObject();
                add_token_text(a, "t", h, t->top[k].id, 0);
                const char *name = cJSON_GetObjectItem(a, "t")->valuestring;
                if (!cJSON_GetObjectItemCaseSensitive(top, name)) /* two ids can share a text */
                    cJSON_AddNumberToObject(top, name, lp_json(t->top[k].logprob));
                cJSON_Delete(a);
            }
            cJSON_AddItemToArray(tops, top);
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*text_off));
            *text_off = t->text_end;
            cJSON_Delete(tmp);
        }
    }
    return lp;
}

static const char *finish_name(srv_finish f) {
    return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : NULL;
}

static cJSON *usage_json(const srv_job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", j->n_reused > 0 ? j->n_reused : 0);
    return u;
}

/* llama.cpp's server's "timings" names, plus the time to the first token. */
static cJSON *timings_json(const srv_job *j) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "cache_n", j->n_reused > 0 ? j->n_reused : 0);
    cJSON_AddNumberToObject(t, "prompt_n", j->n_prefilled);
    cJSON_AddNumberToObject(t, "predicted_n", j->n_gen);
    cJSON_AddNumberToObject(t, "ttft_ms", j->t_first > 0 ? 1e3 * (j->t_first - j->t_submit) : 0.0);
    cJSON_AddNumberToObject(t, "total_ms", 1e3 * (mf_time_s() - j->t_submit));
    return t;
}

static cJSON *head_json(srv_http *h, const char *id, long created, const char *object) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", id);
    cJSON_AddStringToObject(r, "object", object);
    cJSON_AddNumberToObject(r, "created", (double)created);
    cJSON_AddStringToObject(r, "model", h->cfg.model_name);
    return r;
}

/* ---------------------------------------------------------------- prompts */

/* text's token ids into *ids (malloc'd, *cap of them): a first try with about a token
 * per byte (plus BOS/EOS), then again with the count where more came out
 * (SentencePiece's byte fallback spells an escaped space, 3 bytes of U+2581, as 3
 * tokens); at most `limit` ids are stored. Returns the count, which exceeds *cap when
 * the text has more than `limit` tokens (then only the count means anything), or < 0. */
static int tokenize_text(const srv_http *h, const char *text, size_t len, int add_bos, int parse_special, int limit,
                         int32_t **ids, int *cap) {
    *cap = (int)MF_MIN(len + 8, (size_t)limit);
    *ids = mf_xmalloc(sizeof(int32_t) * (size_t)*cap);
    int got = minfer_tokenize(h->m, text, len, add_bos, parse_special, *ids, *cap);
    if (got > *cap && got <= limit) {
        *cap = got;
        *ids = mf_xrealloc(*ids, sizeof(int32_t) * (size_t)*cap);
        got = minfer_tokenize(h->m, text, len, add_bos, parse_special, *ids, *cap);
    }
    return got;
}

/* How a chat answer's text becomes the message (toolcall.h): reasoning_content,
 * content and tool_calls. Off (the text is the content as generated) unless the request
 * offers tools or the template is a reasoning model's. */
typedef struct chat_out {
    int on;
    tc_opts o;            /* o.tools: names, owned here */
    int parallel;         /* parallel_tool_calls: false keeps the first call only */
    int short_ids;        /* mistral's templates want 9-character call ids */
    uint64_t id_seed;     /* call ids: "call_" and 24 characters from it */
    int32_t keep[SRV_MAX_KEEP]; /* special tokens rendered as their text for the parser (tc_markers) */
    int n_keep;
} chat_out;

static void chat_out_free(chat_out *co) {
    for (int i = 0; i < co->o.n_tools; i++) free(co->o.tools[i]);
    free((void *)co->o.tools);
    memset(co, 0, sizeof *co);
}

/* The id of call i of an answer (unless the model wrote one). */
static void call_id(const chat_out *co, int i, char *out, size_t cap) {
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = co->id_seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1);
    int len = co->short_ids ? 9 : 24;
    size_t o = 0;
    if (!co->short_ids) o = (size_t)snprintf(out, cap, "call_");
    for (int k = 0; k < len && o + 1 < cap; k++) {
        x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL; x ^= x >> 27; x *= 0x94d049bb133111ebULL; x ^= x >> 31;
        out[o++] = abc[x % (sizeof abc - 1)];
    }
    out[o] = 0;
}

/* Tool choices that need the output constrained to a call (tool_choice "required" or a
 * named function): the grammar of one call or more (one where parallel_tool_calls is false,
 * exactly one of the named function) over the request's tools and their parameters' JSON
 * schemas (json_tool_call_gbnf), in the shape of the template's call format
 * (tc_format_shape), set as the request's GBNF constraint, so the answer always parses as a
 * call (the job compiles it with the rest, below). Returns 0 or an HTTP status. */
static int tool_choice_constraint(srv_http *h, srv_request *rq, const char *body, size_t body_len, char *err, size_t cap) {
    if (rq->tool_choice != SRV_TOOL_REQUIRED && rq->tool_choice != SRV_TOOL_NAMED) return 0;
    if (rq->constraint >= 0) {
        snprintf(err, cap, "'tool_choice' that requires a call cannot go with 'response_format', 'grammar' or "
                 "'json_schema': the call's own grammar constrains the answer");
        return 400;
    }
    tc_shape sh;
    tc_format_shape(h->tmpl.tool_format, &sh);
    if (!sh.name_key && !sh.bare_name) {
        snprintf(err, cap, "'tool_choice' requiring a call: this model's chat template (%.200s) shows no tool-call "
                 "format to constrain to", h->tmpl.label);
        return 400;
    }
    cJSON *root = cJSON_ParseWithLength(body, body_len);
    const cJSON *tools = root ? cJSON_GetObjectItemCaseSensitive(root, "tools") : NULL;
    const int nt = cJSON_GetArraySize(tools);
    json_tool *jt = mf_xcalloc((size_t)(nt > 0 ? nt : 1), sizeof *jt);
    char **texts = mf_xcalloc((size_t)(nt > 0 ? nt : 1), sizeof *texts);
    int n = 0, st = 0;
    for (int i = 0; i < nt; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, i), "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(name)) continue; /* (request.c checked the tools) */
        if (rq->tool_choice == SRV_TOOL_NAMED && strcmp(name->valuestring, rq->tool_choice_name)) continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(f, "parameters");
        jt[n].name = name->valuestring;
        if (params) {
            texts[n] = cJSON_PrintUnformatted(params);
            jt[n].parameters = texts[n];
            jt[n].parameters_len = texts[n] ? strlen(texts[n]) : 0;
        }
        n++;
    }
    json_tool_format fmt = { sh.list_prefix, sh.list_suffix, sh.separator, sh.call_prefix, sh.call_suffix,
                             sh.name_key, sh.args_key, 1,
                             rq->tool_choice == SRV_TOOL_NAMED || !rq->parallel_tool_calls ? 1 : sh.max_calls,
                             sh.bare_name, sh.name_suffix };
    char *gbnf = NULL;
    size_t len = 0;
    mf_err e = { { 0 } };
    if (!n) {
        snprintf(err, cap, "'tool_choice': no function to call");
        st = 400;
    } else if (json_tool_call_gbnf(jt, n, &fmt, &gbnf, &len, &e)) {
        snprintf(err, cap, "'tools': %.400s", e.msg);
        st = 400;
    } else {
        rq->constraint = MINFER_GRAMMAR_GBNF;
        rq->constraint_text = gbnf;
    }
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(jt);
    cJSON_Delete(root);
    return st;
}

/* Token ids of a generation request (body: its JSON, already checked by
 * srv_request_parse), and for chat how its answer is read (co); 0, or an HTTP status
 * with the message. */
static int build_prompt(srv_http *h, srv_request *rq, const char *body, size_t body_len, int32_t **ids, int *n,
                        chat_out *co, char *err, size_t cap) {
    *ids = NULL;
    *n = 0;
    memset(co, 0, sizeof *co);
    if (rq->prompt_ids) {
        for (int i = 0; i < rq->n_prompt_ids; i++)
            if (rq->prompt_ids[i] >= h->n_vocab) {
                snprintf(err, cap, "'prompt' token id %d is outside the vocabulary [0, %d)", rq->prompt_ids[i],
                         h->n_vocab);
                return 400;
            }
        *ids = mf_xmalloc(sizeof(int32_t) * (size_t)rq->n_prompt_ids);
        memcpy(*ids, rq->prompt_ids, sizeof(int32_t) * (size_t)rq->n_prompt_ids);
        *n = rq->n_prompt_ids;
        return 0;
    }
    char *text;
    int add_bos = 1;
    if (rq->is_chat) {
        /* the request's messages as template values, straight from the body (its numbers,
         * key order and unicode exactly as sent), through the model's template */
        int use_tools = rq->n_tools > 0 && rq->tool_choice != SRV_TOOL_NONE;
        int st = tool_choice_constraint(h, rq, body, body_len, err, cap);
        if (st) return st;
        if (use_tools && !h->tmpl.takes_tools) {
            snprintf(err, cap, "'tools': this model's chat template does not show tools to the model (%.300s); "
                     "a template that does (--chat-template-file), or 'tool_choice': 'none'", h->tmpl.label);
            return 400;
        }
        jinja_env *e = jinja_env_new();
        jinja_error je;
        jinja_value *root = e ? jinja_json_parse(e, body, body_len, &je) : NULL;
        prompt_request r = { .add_generation_prompt = 1 };
        size_t tlen = 0;
        text = NULL;
        if (root) {
            if (use_tools) r.tools = jinja_dict_get(root, "tools");
            jinja_value *kw = jinja_dict_get(root, "chat_template_kwargs");
            if (kw && jinja_is_dict(kw)) r.kwargs = kw;
        }
        if (!root) snprintf(err, cap, "out of memory");
        else if ((r.messages = prompt_messages(e, jinja_dict_get(root, "messages"), err, cap)))
            text = prompt_render(&h->tmpl, e, &r, &tlen, err, cap);
        jinja_env_free(e);
        if (!text) return root ? 400 : 500;
        add_bos = prompt_add_bos(&h->tmpl, text, 1);
        /* the answer's reading: tool calls in the template's format, reasoning */
        tc_think opened = tc_prompt_opens_think(text, tlen);
        /* a constrained answer (a forced call, a schema) writes no reasoning: where the
         * prompt opened a think block, the grammar's text is still the answer. Apriel
         * reasons from its first word, with or without the prompt's opening line. */
        co->o.think_open = (opened != TC_THINK_NONE || h->tmpl.thinks == TC_THINK_APRIEL) && rq->constraint < 0;
        co->o.reasoning = h->tmpl.thinks != TC_THINK_NONE ? h->tmpl.thinks : opened;
        co->o.format = use_tools ? h->tmpl.tool_format : TC_FORMAT_NONE;
        co->on = co->o.reasoning != TC_THINK_NONE || co->o.format != TC_FORMAT_NONE;
        co->parallel = rq->parallel_tool_calls;
        co->short_ids = co->o.format == TC_FORMAT_MISTRAL || co->o.format == TC_FORMAT_MISTRAL_ARGS;
        /* the markers the parser reads that the vocabulary holds as special tokens are
         * rendered as their text (a detokenizer drops them otherwise) */
        if (co->on) {
            const char *marks[SRV_MAX_KEEP];
            int nm = tc_markers(co->o.format, co->o.reasoning, marks, SRV_MAX_KEEP);
            for (int i = 0; i < nm; i++) {
                int32_t id[4];
                if (minfer_tokenize(h->m, marks[i], strlen(marks[i]), 0, 1, id, 4) == 1) co->keep[co->n_keep++] = id[0];
            }
        }
        if (use_tools) {
            char **names = mf_xcalloc((size_t)rq->n_tools, sizeof *names);
            for (int i = 0; i < rq->n_tools; i++) names[i] = mf_xstrdup(rq->tool_names[i]);
            co->o.tools = names;
            co->o.n_tools = rq->n_tools;
        }
    } else {
        text = mf_xstrdup(rq->prompt);
    }
    int cap_ids;
    int got = tokenize_text(h, text, strlen(text), add_bos, 1, h->n_ctx + 8, ids, &cap_ids);
    if (got > cap_ids) { /* longer than the context anyway; the count is what matters */
        *n = got;
        free(text);
        return 0;
    }
    free(text);
    if (got < 0) { snprintf(err, cap, "the prompt could not be tokenized"); return 400; }
    if (got == 0) { snprintf(err, cap, "the prompt is empty (and the vocabulary has no BOS token)"); return 400; }
    *n = got;
    return 0;
}

/* ---------------------------------------------------------------- streaming */

typedef struct stream {
    srv_http *h;
    srv_job *j;
    conn *cs;            /* valid while the reader runs (the request is live) */
    struct MHD_Connection *con;
    int fd, is_chat, include_usage, logprobs;
    char id[64];
    long created;
    int started, done;
    size_t sent;         /* text bytes sent */
    int sent_toks;       /* logprob entries sent */
    size_t text_off;     /* completions' text_offset */
    char *buf;           /* the pending bytes of events not yet handed to MHD */
    size_t len, off, cap;
    chat_out co;         /* chat: how the answer is read (co.on: parsed, else sent as it comes) */
    char *sent_reasoning, *sent_content; /* what the deltas have said so far (parsed answers) */
    size_t n_reasoning, n_content;
    int sent_calls;
} stream;

static void put_event(stream *s, cJSON *j) {
    char *t = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!t) return;
    size_t n = strlen(t);
    if (s->len + n + 16 > s->cap) s->buf = mf_xrealloc(s->buf, s->cap = 2 * (s->len + n + 16));
    memcpy(s->buf + s->len, "data: ", 6);
    memcpy(s->buf + s->len + 6, t, n);
    memcpy(s->buf + s->len + 6 + n, "\n\n", 2);
    s->len += n + 8;
    free(t);
}

static cJSON *chunk_json(stream *s, const char *text, size_t n, int role, cJSON *logprobs, const char *finish) {
    cJSON *r = head_json(s->h, s->id, s->created, s->is_chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(r, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *piece = mf_xmalloc(n + 1);
    memcpy(piece, text, n);
    piece[n] = 0;
    if (s->is_chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (n || role) cJSON_AddStringToObject(d, "content", piece);
    } else {
        cJSON_AddStringToObject(c, "text", piece);
    }
    free(piece);
    if (logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    return r;
}

/* A tool call as the API writes it: {"id", "type": "function", "function": {"name", "arguments"}}
 * (with "index" in a stream's delta). */
static cJSON *call_json(const chat_out *co, const tc_call *c, int i, int with_index) {
    cJSON *o = cJSON_CreateObject();
    char id[40];
    if (with_index) cJSON_AddNumberToObject(o, "index", i);
    if (c->id) snprintf(id, sizeof id, "%s", c->id);
    else call_id(co, i, id, sizeof id);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(f, "name", c->name);
    cJSON_AddStringToObject(f, "arguments", c->arguments);
    return o;
}

/* The answer's text parsed (toolcall.h); -1 when memory ran out. */
static int parse_answer(const chat_out *co, const srv_job *j, size_t len, int final, tc_result *r) {
    if (tc_parse(j->text, len, final, &co->o, r)) return -1;
    if (!co->parallel && r->n_calls > 1) { /* parallel_tool_calls false: the first call */
        for (int i = 1; i < r->n_calls; i++) {
            free(r->calls[i].name);
            free(r->calls[i].arguments);
            free(r->calls[i].id);
        }
        r->n_calls = 1;
    }
    return 0;
}

/* a chunk whose delta carries one field of a parsed answer */
static void put_delta(stream *s, const char *key, const char *text, size_t n, cJSON *calls) {
    cJSON *r = head_json(s->h, s->id, s->created, "chat.completion.chunk");
    cJSON *choices = cJSON_AddArrayToObject(r, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    if (calls) cJSON_AddItemToObject(d, "tool_calls", calls);
    else {
        char *piece = mf_xmalloc(n + 1);
        memcpy(piece, text, n);
        piece[n] = 0;
        cJSON_AddStringToObject(d, key, piece);
        free(piece);
    }
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    put_event(s, r);
}

/* The new part of a field: text extends what was sent (the parser's promise); where it
 * would not, nothing is sent rather than a contradiction. */
static void put_field_delta(stream *s, const char *key, const char *text, size_t n, char **sent, size_t *n_sent) {
    if (n <= *n_sent || memcmp(text, *sent ? *sent : "", *n_sent)) return;
    put_delta(s, key, text + *n_sent, n - *n_sent, NULL);
    *sent = mf_xrealloc(*sent, n + 1);
    memcpy(*sent, text, n);
    (*sent)[n] = 0;
    *n_sent = n;
}

/* lock held: a parsed chat answer's new reasoning, content and complete calls as deltas */
static void stream_collect_parsed(stream *s, int fin) {
    srv_job *j = s->j;
    tc_result r;
    if (parse_answer(&s->co, j, j->safe_len, fin, &r)) return;
    put_field_delta(s, "reasoning_content", r.reasoning, r.reasoning_len, &s->sent_reasoning, &s->n_reasoning);
    put_field_delta(s, "content", r.content, r.content_len, &s->sent_content, &s->n_content);
    for (; s->sent_calls < r.n_calls; s->sent_calls++) {
        cJSON *calls = cJSON_CreateArray();
        cJSON_AddItemToArray(calls, call_json(&s->co, &r.calls[s->sent_calls], s->sent_calls, 1));
        put_delta(s, NULL, NULL, 0, calls);
    }
    tc_result_free(&r);
}

/* lock held: turns what the job has produced since the last call into events. */
static void stream_collect(stream *s) {
    srv_job *j = s->j;
    if (!s->started) {
        s->started = 1;
        if (s->is_chat) put_event(s, chunk_json(s, "", 0, 1, NULL, NULL));
    }
    int fin = j->finish != SRV_RUNNING;
    int ntok = j->n_toks;
    if (!fin) /* entries whose text is all sendable */
        while (ntok > s->sent_toks && j->toks[ntok - 1].text_end > j->safe_len) ntok--;
    if (j->finish == SRV_FINISH_ERROR || j->finish == SRV_FINISH_CANCELLED) {
        cJSON *e = error_obj(j->finish == SRV_FINISH_ERROR ? 500 : 503, NULL,
                             j->finish == SRV_FINISH_ERROR ? j->err : "the request was cancelled (server shutting down)");
        put_event(s, e);
    } else if (j->safe_len > s->sent || ntok > s->sent_toks || fin) {
        cJSON *lp = s->logprobs && ntok > s->sent_toks ? logprobs_json(s->h, j, s->sent_toks, ntok, s->is_chat, &s->text_off)
                                                       : NULL;
        if (s->co.on) {
            stream_collect_parsed(s, fin);
            if (lp) put_event(s, chunk_json(s, "", 0, 0, lp, NULL)); /* the tokens' logprobs in a delta of their own */
        } else if (j->safe_len > s->sent || lp) {
            put_event(s, chunk_json(s, j->text + s->sent, j->safe_len - s->sent, 0, lp, NULL));
        }
        s->sent = j->safe_len;
        s->sent_toks = ntok;
        if (fin) {
            const char *finish = finish_name(j->finish);
            if (s->sent_calls && j->finish == SRV_FINISH_STOP) finish = "tool_calls";
            put_event(s, chunk_json(s, "", 0, 0, NULL, finish));
            if (s->include_usage) {
                cJSON *r = head_json(s->h, s->id, s->created, s->is_chat ? "chat.completion.chunk" : "text_completion");
                cJSON_AddArrayToObject(r, "choices");
                cJSON_AddItemToObject(r, "usage", usage_json(j));
                cJSON_AddItemToObject(r, "timings", timings_json(j));
                put_event(s, r);
            }
        }
    }
    if (fin) {
        static const char done[] = "data: [DONE]\n\n";
        if (s->len + sizeof done > s->cap) s->buf = mf_xrealloc(s->buf, s->cap = 2 * (s->len + sizeof done));
        memcpy(s->buf + s->len, done, sizeof done - 1);
        s->len += sizeof done - 1;
        s->done = 1;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream *s = cls;
    while (s->off == s->len) {
        s->off = s->len = 0;
        if (s->done) return MHD_CONTENT_READER_END_OF_STREAM;
        srv_engine_lock(s->h->e);
        while (s->started && s->j->finish == SRV_RUNNING && s->j->safe_len == s->sent) {
            srv_engine_wait(s->h->e, s->j, 50);
            if (s->j->finish != SRV_RUNNING || s->j->safe_len != s->sent) break;
            srv_engine_unlock(s->h->e);
            int gone = client_gone(s->fd);
            srv_engine_lock(s->h->e);
            if (gone) {
                s->cs->n_gen = s->j->n_gen;
                s->cs->gone = 1; /* libmicrohttpd's "application reported error" is not news */
                srv_engine_unlock(s->h->e);
                srv_engine_cancel(s->h->e, s->j);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        stream_collect(s);
        s->cs->n_prompt = s->j->n_prompt;
        s->cs->n_gen = s->j->n_gen;
        srv_engine_unlock(s->h->e);
    }
    size_t n = s->len - s->off < max ? s->len - s->off : max;
    memcpy(out, s->buf + s->off, n);
    s->off += n;
    if (s->h->cfg.timeout_s > 0) /* the time spent waiting was not idleness */
        MHD_set_connection_option(s->con, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)s->h->cfg.timeout_s);
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *s = cls;
    srv_engine_cancel(s->h->e, s->j); /* no-op when it finished */
    srv_job_release(s->h->e, s->j);
    chat_out_free(&s->co);
    free(s->sent_reasoning);
    free(s->sent_content);
    free(s->buf);
    free(s);
}

/* ---------------------------------------------------------------- endpoints */

static enum MHD_Result do_generate(srv_http *h, struct MHD_Connection *con, conn *cs, int is_chat) {
    char err[512];
    srv_request rq;
    int st = srv_request_parse(cs->body ? cs->body : "", cs->len, is_chat, &rq, err, sizeof err);
    if (st) return send_error(h, con, st, NULL, "%s", err);
    int32_t *ids = NULL;
    int n = 0;
    chat_out co;
    st = build_prompt(h, &rq, cs->body, cs->len, &ids, &n, &co, err, sizeof err);
    if (st) {
        srv_request_free(&rq);
        chat_out_free(&co);
        free(ids);
        return send_error(h, con, st, NULL, "%s", err);
    }
    if (n >= h->n_ctx || (rq.max_tokens > 0 && n + rq.max_tokens > h->n_ctx)) {
        const int max_tokens = rq.max_tokens; /* read before the free: it zeroes rq (issue 56) */
        srv_request_free(&rq);
        chat_out_free(&co);
        free(ids);
        if (n >= h->n_ctx)
            return send_error(h, con, 400, "context_length_exceeded",
                              "the prompt is %d tokens; this server's context is %d tokens per request (--ctx), "
                              "with room for at least one generated token", n, h->n_ctx);
        return send_error(h, con, 400, "context_length_exceeded",
                          "the prompt (%d tokens) plus max_tokens (%d) is more than the context of %d tokens", n,
                          max_tokens, h->n_ctx);
    }
    srv_job *j = srv_job_new(ids, n);
    free(ids);
    j->max_tokens = rq.max_tokens > 0 ? rq.max_tokens : h->n_ctx - n;
    sampler_params_default(&j->sp);
    j->sp.temp = rq.temperature;
    j->sp.top_k = rq.top_k;
    j->sp.top_p = rq.top_p;
    j->sp.min_p = rq.min_p;
    j->sp.presence_penalty = rq.presence_penalty;
    j->sp.frequency_penalty = rq.frequency_penalty;
    j->sp.repeat_last_n = -1; /* the penalties see every generated token (the prompt's are not counted) */
    j->sp.seed = rq.has_seed ? rq.seed : SAMPLER_SEED_RANDOM;
    j->logprobs = rq.logprobs;
    j->top_logprobs = rq.top_logprobs;
    for (int i = 0; i < rq.n_stop; i++) j->stop[i] = mf_xstrdup(rq.stop[i]);
    j->n_stop = rq.n_stop;
    memcpy(j->keep, co.keep, sizeof co.keep);
    j->n_keep = co.n_keep;
    if (rq.constraint >= 0) { /* compiled here, in the HTTP thread: a bad grammar is the client's 400 */
        const char *t = rq.constraint_text;
        j->grammar = minfer_grammar_new(h->m, rq.constraint, t, t ? strlen(t) : 0, err, sizeof err);
        if (!j->grammar) {
            srv_request_free(&rq);
            chat_out_free(&co);
            srv_job_release(h->e, j);
            return send_error(h, con, 400, NULL, "%s", err);
        }
    }
    int want_stream = rq.stream, include_usage = rq.include_usage;
    srv_request_free(&rq);
    if (__atomic_load_n(&h->refusing, __ATOMIC_SEQ_CST) || srv_engine_submit(h->e, j)) {
        int shutting = __atomic_load_n(&h->refusing, __ATOMIC_SEQ_CST) || !strcmp(j->err, "the server is shutting down");
        enum MHD_Result r = shutting ? send_error(h, con, 503, "unavailable", "the server is shutting down")
                                     : send_error(h, con, 400, NULL, "%s", j->err);
        srv_job_release(h->e, j);
        chat_out_free(&co);
        return r;
    }
    char id[64];
    pthread_mutex_lock(&h->mu);
    uint64_t seq = ++h->next_id;
    pthread_mutex_unlock(&h->mu);
    snprintf(id, sizeof id, "%s-%lx%06llx", is_chat ? "chatcmpl" : "cmpl", h->started, (unsigned long long)seq);
    long created = (long)time(NULL);
    co.id_seed = ((uint64_t)h->started << 20) ^ seq ^ ((uint64_t)(mf_time_s() * 1e6) << 7);
    int fd = conn_fd(con);

    if (want_stream) {
        stream *s = mf_xmalloc(sizeof *s);
        memset(s, 0, sizeof *s);
        s->h = h;
        s->j = j;
        s->cs = cs;
        s->con = con;
        s->fd = fd;
        s->is_chat = is_chat;
        s->include_usage = include_usage;
        s->logprobs = j->logprobs;
        s->created = created;
        s->co = co; /* the stream owns it now */
        snprintf(s->id, sizeof s->id, "%s", id);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
        if (!r) { stream_free(s); return MHD_NO; }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result rc = MHD_queue_response(con, 200, r);
        MHD_destroy_response(r);
        count_status(h, 200);
        return rc;
    }

    /* wait for the whole answer, watching the socket */
    srv_engine_lock(h->e);
    while (j->finish == SRV_RUNNING) {
        srv_engine_wait(h->e, j, 50);
        if (j->finish != SRV_RUNNING) break;
        srv_engine_unlock(h->e);
        int gone = client_gone(fd);
        srv_engine_lock(h->e);
        if (gone) {
            cs->n_prompt = j->n_prompt;
            cs->n_gen = j->n_gen;
            cs->gone = 1; /* libmicrohttpd's "application reported internal error" is not news */
            srv_engine_unlock(h->e);
            srv_engine_cancel(h->e, j);
            srv_job_release(h->e, j);
            chat_out_free(&co);
            return MHD_NO; /* nobody to answer: close */
        }
    }
    cs->n_prompt = j->n_prompt;
    cs->n_gen = j->n_gen;
    if (j->finish == SRV_FINISH_ERROR || j->finish == SRV_FINISH_CANCELLED) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", j->finish == SRV_FINISH_ERROR ? j->err : "the request was cancelled (server shutting down)");
        int code = j->finish == SRV_FINISH_ERROR ? 500 : 503;
        srv_engine_unlock(h->e);
        srv_job_release(h->e, j);
        chat_out_free(&co);
        return send_error(h, con, code, NULL, "%s", msg);
    }
    cJSON *r = head_json(h, id, created, is_chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(r, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    const char *finish = finish_name(j->finish);
    if (is_chat) {
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        tc_result tr;
        if (co.on && !parse_answer(&co, j, j->text_len, 1, &tr)) {
            /* content null where the answer is tool calls alone, as OpenAI's */
            if (tr.content_len || !tr.n_calls) cJSON_AddStringToObject(msg, "content", tr.content);
            else cJSON_AddNullToObject(msg, "content");
            if (tr.reasoning_len) cJSON_AddStringToObject(msg, "reasoning_content", tr.reasoning);
            if (tr.n_calls) {
                cJSON *calls = cJSON_AddArrayToObject(msg, "tool_calls");
                for (int i = 0; i < tr.n_calls; i++) cJSON_AddItemToArray(calls, call_json(&co, &tr.calls[i], i, 0));
                if (j->finish == SRV_FINISH_STOP) finish = "tool_calls";
            }
            tc_result_free(&tr);
        } else {
            cJSON_AddStringToObject(msg, "content", j->text);
        }
    } else {
        cJSON_AddStringToObject(c, "text", j->text);
    }
    chat_out_free(&co);
    size_t off = 0;
    if (j->logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs_json(h, j, 0, j->n_toks, is_chat, &off));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", finish);
    cJSON_AddItemToArray(choices, c);
    cJSON_AddItemToObject(r, "usage", usage_json(j));
    cJSON_AddItemToObject(r, "timings", timings_json(j));
    srv_engine_unlock(h->e);
    srv_job_release(h->e, j);
    return send_json(h, con, 200, r);
}

static enum MHD_Result do_tokenize(srv_http *h, struct MHD_Connection *con, conn *cs) {
    char err[512], *content;
    int add_special, parse_special;
    int st = srv_tokenize_parse(cs->body ? cs->body : "", cs->len, &content, &add_special, &parse_special, err, sizeof err);
    if (st) return send_error(h, con, st, NULL, "%s", err);
    int32_t *ids;
    int cap;
    int n = tokenize_text(h, content, strlen(content), add_special, parse_special, 1 << 24, &ids, &cap);
    free(content);
    if (n < 0 || n > cap) {
        free(ids);
        return send_error(h, con, 400, NULL, "the content could not be tokenized");
    }
    cJSON *r = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(r, "tokens");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    free(ids);
    return send_json(h, con, 200, r);
}

static enum MHD_Result do_detokenize(srv_http *h, struct MHD_Connection *con, conn *cs) {
    char err[512];
    int32_t *ids;
    int n;
    int st = srv_detokenize_parse(cs->body ? cs->body : "", cs->len, &ids, &n, err, sizeof err);
    if (st) return send_error(h, con, st, NULL, "%s", err);
    size_t cap = 256, len = 0;
    char *text = mf_xmalloc(cap);
    srv_utf8_dec d = { { 0 }, 0 };
    char piece[256];
    for (int i = 0; i < n; i++) {
        if (ids[i] >= h->n_vocab) {
            const int32_t bad = ids[i]; /* read before the free (ASan under make test SAN=1) */
            free(ids);
            free(text);
            return send_error(h, con, 400, NULL, "token id %d is outside the vocabulary [0, %d)", bad, h->n_vocab);
        }
        int m = minfer_token_to_piece(h->m, ids[i], piece, sizeof piece);
        if (m > (int)sizeof piece) m = (int)sizeof piece;
        if (len + 3 * ((size_t)m + 3) + 16 > cap) text = mf_xrealloc(text, cap = 2 * (len + 3 * ((size_t)m + 3) + 16));
        len += srv_utf8_push(&d, piece, (size_t)m, text + len);
    }
    if (len + 16 > cap) text = mf_xrealloc(text, cap = len + 16);
    len += srv_utf8_flush(&d, text + len);
    text[len] = 0;
    free(ids);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "content", text);
    free(text);
    return send_json(h, con, 200, r);
}

static void metric(char **buf, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void metric(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if ((size_t)n < *cap - *len) { *len += (size_t)n; return; }
        *buf = mf_xrealloc(*buf, *cap *= 2);
    }
}

static enum MHD_Result do_metrics(srv_http *h, struct MHD_Connection *con) {
    srv_metrics m;
    srv_engine_metrics(h->e, &m);
    size_t cap = 4096, len = 0;
    char *b = mf_xmalloc(cap);
    b[0] = 0;
    metric(&b, &len, &cap, "# HELP minfer_requests_total HTTP requests answered, by status code.\n"
                           "# TYPE minfer_requests_total counter\n");
    pthread_mutex_lock(&h->mu);
    for (int k = 0; status_codes[k]; k++)
        metric(&b, &len, &cap, "minfer_requests_total{status=\"%d\"} %llu\n", status_codes[k],
               (unsigned long long)h->by_status[k]);
    metric(&b, &len, &cap, "minfer_requests_total{status=\"other\"} %llu\n", (unsigned long long)h->other_status);
    pthread_mutex_unlock(&h->mu);
#define COUNTER(name, help, v) \
    metric(&b, &len, &cap, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %llu\n", (unsigned long long)(v))
#define GAUGE(name, help, fmt, v) \
    metric(&b, &len, &cap, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n", v)
    COUNTER("minfer_prompt_tokens_total", "Prompt tokens of accepted generation requests.", m.prompt_tokens);
    COUNTER("minfer_generated_tokens_total", "Tokens generated.", m.generated_tokens);
    COUNTER("minfer_prefilled_tokens_total", "Prompt tokens run through the model (not taken from the cache).",
            m.prefilled_tokens);
    COUNTER("minfer_prompt_cache_hits_total", "Requests that reused a cached prompt prefix.", m.cache_hits);
    COUNTER("minfer_prompt_cache_reused_tokens_total", "Prompt tokens taken from the cache.", m.reused_tokens);
    COUNTER("minfer_requests_finished_total", "Generation requests finished (stop, length or error).", m.jobs_done);
    COUNTER("minfer_requests_cancelled_total", "Generation requests cancelled (client gone, shutdown).",
            m.jobs_cancelled);
    COUNTER("minfer_decode_steps_total", "Decode steps (one token of every generating slot).", m.decode_steps);
    GAUGE("minfer_prefill_seconds_total", "Seconds spent in prompt evaluation.", "%.6f", m.prefill_s);
    GAUGE("minfer_decode_seconds_total", "Seconds spent in decode steps.", "%.6f", m.decode_s);
    GAUGE("minfer_queue_depth", "Requests waiting for a slot.", "%d", m.queue_depth);
    GAUGE("minfer_slots_busy", "Slots running a request.", "%d", m.busy_slots);
    GAUGE("minfer_slots", "Slots (--parallel).", "%d", m.n_slots);
    GAUGE("minfer_prefill_tokens_per_second", "Prompt tokens evaluated per second of prefill, since start.", "%.3f",
          m.prefill_s > 0 ? (double)m.prefilled_tokens / m.prefill_s : 0.0);
    GAUGE("minfer_decode_tokens_per_second", "Tokens decoded per second of decode steps (all slots), since start.",
          "%.3f", m.decode_s > 0 ? (double)m.decode_rows / m.decode_s : 0.0);
#undef COUNTER
#undef GAUGE
    return send_text(h, con, 200, "text/plain; version=0.0.4", b, len);
}

static enum MHD_Result do_models(srv_http *h, struct MHD_Connection *con) {
    cJSON *r = cJSON_CreateObject(), *a;
    cJSON_AddStringToObject(r, "object", "list");
    a = cJSON_AddArrayToObject(r, "data");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", h->cfg.model_name);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)h->started);
    cJSON_AddStringToObject(o, "owned_by", "minfer");
    cJSON_AddItemToArray(a, o);
    return send_json(h, con, 200, r);
}

/* ---------------------------------------------------------------- access log */

/* Copies s into out (cap bytes) with bytes below 0x21 and from 0x7f up written %XX:
 * the URL is the client's (libmicrohttpd has decoded its %XX), and a newline in it
 * must not start a line of its own in the log. Cut with "..." past cap. */
static void log_escape(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int esc = c < 0x21 || c >= 0x7f;
        if (o + (esc ? 3 : 1) + 4 > cap) { memcpy(out + o, "...", 3); o += 3; break; }
        if (esc) o += (size_t)snprintf(out + o, cap - o, "%%%02X", c);
        else out[o++] = (char)c;
    }
    out[o] = 0;
}

static void access_begin(conn *cs, struct MHD_Connection *con, const char *method, const char *url) {
    cs->t_start = mf_time_s();
    clock_gettime(CLOCK_REALTIME, &cs->wall);
    cs->n_prompt = cs->n_gen = -1;
    log_escape(cs->method, sizeof cs->method, method);
    log_escape(cs->path, sizeof cs->path, url);
    snprintf(cs->client, sizeof cs->client, "-");
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, cs->client, sizeof cs->client);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, cs->client, sizeof cs->client);
}

/* One line a request, when its response has been sent (or the client went away):
 *   minfer: serve: 2026-12-07T21:30:01.123Z 127.0.0.1 POST /v1/completions 200 prompt=5 generated=34 0.456s
 * UTC time of the request, client, method, path, status ("-": none was sent), the
 * tokens of a generation, the seconds until the last byte; "(client hung up)" or
 * another reason at the end when the request did not complete. -q: none. */
static void access_log(const conn *cs, enum MHD_RequestTerminationCode toe) {
    struct tm tm;
    gmtime_r(&cs->wall.tv_sec, &tm);
    char when[80], status[16] = "-", toks[48] = "";
    snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(cs->wall.tv_nsec / 1000000));
    if (cs->status) snprintf(status, sizeof status, "%d", cs->status);
    if (cs->n_prompt >= 0) snprintf(toks, sizeof toks, " prompt=%d generated=%d", cs->n_prompt, cs->n_gen);
    const char *why = cs->gone || toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT || toe == MHD_REQUEST_TERMINATED_READ_ERROR
                          ? " (client hung up)"
                      : toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? " (timed out: --timeout)"
                      : toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? " (server stopped)"
                      : toe == MHD_REQUEST_TERMINATED_WITH_ERROR      ? " (error while sending)"
                                                                      : "";
    mf_log("serve: %s %s %s %s %s%s %.3fs%s", when, cs->client, cs->method, cs->path, status, toks,
           mf_time_s() - cs->t_start, why);
}

/* ---------------------------------------------------------------- dispatch */

static enum MHD_Result handler(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_http *h = cls;
    conn *cs = *con_cls;
    tl_conn = cs;
    if (!cs) { /* headers only: everything that can be answered before the body */
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        tl_conn = cs;
        __atomic_add_fetch(&h->in_flight, 1, __ATOMIC_SEQ_CST);
        access_begin(cs, con, method, url);
        int path_known = 0;
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
            if (strcmp(url, routes[i].path) || (routes[i].r == R_WEBUI && !h->cfg.webui)) continue;
            path_known = 1;
            if (!strcmp(method, routes[i].method)) cs->route = routes[i].r;
        }
        cs->answered = 1;
        if (!path_known) return send_error(h, con, 404, "not_found", "no endpoint %s %s", method, url);
        if (cs->route == R_NONE) return send_error(h, con, 405, "method_not_allowed", "%s is not allowed on %s", method, url);
        /* the page itself is public: it asks for the key, and sends it with every request */
        if (h->cfg.api_key && cs->route != R_HEALTH && cs->route != R_WEBUI) {
            const char *auth = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
            if (!auth) return send_error(h, con, 401, "invalid_api_key", "missing API key: send 'Authorization: Bearer KEY'");
            if (strncmp(auth, "Bearer ", 7) || !key_ok(auth + 7, h->cfg.api_key))
                return send_error(h, con, 401, "invalid_api_key", "incorrect API key");
        }
        const char *cl = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            unsigned long long v = strtoull(cl, &end, 10);
            if (v > h->cfg.max_body)
                return send_error(h, con, 413, "request_too_large", "the request body is %llu bytes; the limit is %zu (--max-body)",
                                  v, h->cfg.max_body);
        }
        cs->answered = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->answered && !cs->too_big) {
            if (cs->len + *upload_size > h->cfg.max_body) {
                cs->too_big = 1; /* chunked upload past the limit: read and drop the rest */
            } else {
                if (cs->len + *upload_size + 1 > cs->cap)
                    cs->body = mf_xrealloc(cs->body, cs->cap = MF_MIN(2 * (cs->len + *upload_size) + 1, h->cfg.max_body + 1));
                memcpy(cs->body + cs->len, upload, *upload_size);
                cs->len += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->answered) return MHD_YES;
    cs->answered = 1;
    if (cs->too_big)
        return send_error(h, con, 413, "request_too_large", "the request body is over the limit of %zu bytes (--max-body)",
                          h->cfg.max_body);
    switch (cs->route) {
    case R_HEALTH:
        if (__atomic_load_n(&h->refusing, __ATOMIC_SEQ_CST)) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "status", "shutting down");
            return send_json(h, con, 503, r);
        } else {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "status", "ok");
            return send_json(h, con, 200, r);
        }
    case R_MODELS: return do_models(h, con);
    case R_METRICS: return do_metrics(h, con);
    case R_CHAT: return do_generate(h, con, cs, 1);
    case R_COMPLETIONS: return do_generate(h, con, cs, 0);
    case R_TOKENIZE: return do_tokenize(h, con, cs);
    case R_DETOKENIZE: return do_detokenize(h, con, cs);
    case R_WEBUI: return send_webui(h, con);
    case R_NONE: break;
    }
    return MHD_NO;
}

static void completed(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)con;
    srv_http *h = cls;
    conn *cs = *con_cls;
    tl_conn = NULL;
    if (!cs) return;
    access_log(cs, toe);
    __atomic_sub_fetch(&h->in_flight, 1, __ATOMIC_SEQ_CST);
    free(cs->body);
    free(cs);
    *con_cls = NULL;
}

/* libmicrohttpd's own messages. Those about a client that hung up (a reset or closed
 * socket while sending, or our reader or handler ending a request whose client is
 * gone) are ordinary: the access line says "client hung up" instead (issue 56). */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    static const char *const hangups[] = {
        "forcibly closed by remote peer", "no longer available for sending", "socket is not connected",
        "Socket has been disconnected", "Connection socket is closed",
    };
    int hangup = 0;
    for (size_t i = 0; i < MF_ARRAY_LEN(hangups); i++) hangup |= strstr(line, hangups[i]) != NULL;
    if (hangup && tl_conn) tl_conn->gone = 1;
    if (hangup || (tl_conn && tl_conn->gone)) return;
    mf_log("serve: http: %s", line);
}

/* ---------------------------------------------------------------- start / stop */

srv_http *srv_http_start(const srv_config *cfg, minfer_model *m, srv_engine *e, int n_ctx, char *err, size_t cap) {
    srv_http *h = calloc(1, sizeof *h);
    if (!h) { snprintf(err, cap, "out of memory"); return NULL; }
    h->cfg = *cfg;
    h->m = m;
    h->e = e;
    h->n_ctx = n_ctx;
    h->n_vocab = minfer_n_vocab(m);
    h->started = (long)time(NULL);
    pthread_mutex_init(&h->mu, NULL);

    {
        size_t len = 0, alen = 0;
        const char *src = minfer_model_meta_str(m, "tokenizer.chat_template", &len);
        const char *arch = minfer_model_meta_str(m, "general.architecture", &alen);
        char arch_name[64] = "", bos[64] = "", eos[64] = "";
        if (arch && alen < sizeof arch_name) memcpy(arch_name, arch, alen);
        int32_t ids[2] = { minfer_token_bos(m), minfer_token_eos(m) };
        char *texts[2] = { bos, eos };
        for (int k = 0; k < 2; k++)
            if (ids[k] >= 0) {
                int tn = minfer_token_to_text(m, ids[k], texts[k], sizeof bos - 1);
                texts[k][tn >= 0 && tn < (int)sizeof bos ? tn : 0] = 0;
            }
        prompt_source ps = { .src = src, .len = src ? len : 0, .arch = arch_name, .bos_text = bos[0] ? bos : NULL,
                             .eos_text = eos[0] ? eos : NULL, .file = cfg->chat_template_file, .name = cfg->chat_template };
        if (prompt_init(&h->tmpl, &ps, err, cap)) goto fail;
        if (h->tmpl.jinja) snprintf(h->tmpl_short, sizeof h->tmpl_short, "%s", cfg->chat_template_file ? "from --chat-template-file" : "the model's own");
        else snprintf(h->tmpl_short, sizeof h->tmpl_short, "%s (built-in%s)", chat_name(h->tmpl.family),
                      cfg->chat_template ? "" : ", fallback");
        char traits[160];
        if (!h->tmpl.jinja && src && !cfg->chat_template) mf_log("serve: warning: chat template: %s", h->tmpl.label);
        else mf_log("serve: chat template: %s%s", h->tmpl.label, prompt_traits(&h->tmpl, traits, sizeof traits));
    }

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai || !ai) {
        snprintf(err, cap, "cannot resolve --host '%s': %s", cfg->host, gai ? gai_strerror(gai) : "no address");
        goto fail;
    }
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    int v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, handler, h,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, /* first: it applies to the options after it */
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->max_connections,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, h,
                            MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, cap, "cannot listen on %s port %d (in use, or not an address of this machine?)", cfg->host, cfg->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : cfg->port;
    return h;
fail:
    prompt_free(&h->tmpl);
    pthread_mutex_destroy(&h->mu);
    free(h);
    return NULL;
}

int srv_http_port(const srv_http *h) { return h->port; }
const char *srv_http_template(const srv_http *h) { return h->tmpl_short; }
void srv_http_refuse(srv_http *h) { __atomic_store_n(&h->refusing, 1, __ATOMIC_SEQ_CST); }
int srv_http_in_flight(srv_http *h) { return __atomic_load_n(&h->in_flight, __ATOMIC_SEQ_CST); }

void srv_http_stop(srv_http *h) {
    if (!h) return;
    if (h->d) MHD_stop_daemon(h->d);
    prompt_free(&h->tmpl);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* request.c - see request.h. Every field of a body is either known (checked for
 * type and range, null meaning "not given" as in the OpenAI API) or an error: a
 * misspelt "max_token" must not silently become "until the context is full". */
#include "server/request.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/text.h"

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && cap) vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return 400;
}

/* A \u0000 escape would end the C string cJSON hands back, cutting the text short
 * without a word: refuse it. Backslashes only occur inside strings in valid JSON, so
 * a plain scan sees every escape (a "\\" pair is skipped as one). */
static int has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return 1;
        i++; /* the escaped character */
    }
    return 0;
}

/* The body as a JSON object: well-formed UTF-8, one value, nothing after it but
 * whitespace. Returns 0 with *root (caller deletes) or 400. */
static int parse_root(const char *body, size_t len, cJSON **root, char *err, size_t cap) {
    *root = NULL;
    if (len == 0) return fail(err, cap, "the request body is empty; a JSON object is expected");
    if (!srv_utf8_valid(body, len)) return fail(err, cap, "the request body is not valid UTF-8");
    if (memchr(body, 0, len)) return fail(err, cap, "the request body contains a NUL byte");
    if (has_nul_escape(body, len)) return fail(err, cap, "strings must not contain U+0000 (\\u0000)");
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!j) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return fail(err, cap, "the request body is not valid JSON (error near byte %zu)", at);
    }
    for (const char *p = end; p && p < body + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(j);
            return fail(err, cap, "the request body has text after the JSON value (byte %zu)", (size_t)(p - body));
        }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return fail(err, cap, "the request body must be a JSON object");
    }
    *root = j;
    return 0;
}

/* Fields of OpenAI's API (and llama.cpp's) that this server does not do: a request that
 * uses one is refused, saying so (not "unknown": a client should learn that the field is
 * real but not served here). README lists what is served. */
static const char *const unsupported_fields[] = {
    "response_format", "functions", "function_call", "audio", "modalities", "prediction", "reasoning_effort",
    "service_tier", "store", "metadata", "web_search_options", "prompt_cache_key", "safety_identifier", "verbosity",
    "suffix", "tools", "tool_choice", "parallel_tool_calls", "grammar", "json_schema", "cache_prompt", "n_probs",
    "id_slot", "samplers", "typical_p", "mirostat", "dry_multiplier", "xtc_probability", "chat_template_kwargs",
    NULL
};

/* Every member of obj is one of names[] and none appears twice. */
static int check_fields(const cJSON *obj, const char *const *names, const char *where, char *err, size_t cap) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        int known = 0;
        for (int i = 0; names[i]; i++) known |= !strcmp(c->string, names[i]);
        if (!known && !where)
            for (int i = 0; unsupported_fields[i]; i++)
                if (!strcmp(c->string, unsupported_fields[i]))
                    return fail(err, cap, "'%s' is not supported%s (the supported fields: README, \"The server\")",
                                c->string,
                                !strcmp(c->string, "functions") || !strcmp(c->string, "function_call")
                                    ? " (the legacy function calling: use 'tools')"
                                    : (!strcmp(c->string, "tools") || !strcmp(c->string, "tool_choice") ||
                                       !strcmp(c->string, "parallel_tool_calls") || !strcmp(c->string, "chat_template_kwargs"))
                                    ? " on /v1/completions (chat only)" : "");
        if (!known) return fail(err, cap, "unknown field '%s'%s%s", c->string, where ? " in " : "", where ? where : "");
        for (const cJSON *d = obj->child; d != c; d = d->next)
            if (!strcmp(d->string, c->string))
                return fail(err, cap, "field '%s'%s%s given twice", c->string, where ? " in " : "", where ? where : "");
    }
    return 0;
}

static const cJSON *field(const cJSON *obj, const char *name) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(obj, name);
    return c && !cJSON_IsNull(c) ? c : NULL; /* null: not given */
}

/* A number in [lo, hi]; integral when asked. 0 not given, 1 given, 400 bad. */
static int get_num(const cJSON *obj, const char *name, double lo, double hi, int integral, double *v, char *err,
                   size_t cap) {
    const cJSON *c = field(obj, name);
    if (!c) return 0;
    if (!cJSON_IsNumber(c)) return fail(err, cap, "'%s' must be a number", name);
    double x = c->valuedouble;
    if (!isfinite(x)) return fail(err, cap, "'%s' is not a finite number", name);
    if (integral && x != floor(x)) return fail(err, cap, "'%s' must be an integer, got %g", name, x);
    if (x < lo || x > hi) { /* integers as integers: not "1e+08, outside [1, 1.67772e+07]" */
        if (integral) /* (a value past 2^53 is not one integer: %g then) */
            return fail(err, cap, fabs(x) < 0x1p53 ? "'%s' is %.0f, outside [%.0f, %.0f]" : "'%s' is %g, outside [%.0f, %.0f]",
                        name, x, lo, hi);
        return fail(err, cap, "'%s' is %g, outside [%g, %g]", name, x, lo, hi);
    }
    *v = x;
    return 1;
}

static int get_bool(const cJSON *obj, const char *name, int *v, char *err, size_t cap) {
    const cJSON *c = field(obj, name);
    if (!c) return 0;
    if (!cJSON_IsBool(c)) return fail(err, cap, "'%s' must be true or false", name);
    *v = cJSON_IsTrue(c);
    return 0;
}

/* Fields every generation request shares. */
static int parse_common(const cJSON *root, srv_request *r, char *err, size_t cap) {
    int rc;
    double v;
    const cJSON *c;
    if ((c = field(root, "model"))) {
        if (!cJSON_IsString(c)) return fail(err, cap, "'model' must be a string");
        if (!(r->model = strdup(c->valuestring))) return fail(err, cap, "out of memory");
    }
    if ((c = field(root, "user")) && !cJSON_IsString(c)) return fail(err, cap, "'user' must be a string");
    const char *mt = r->is_chat && field(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (r->is_chat && field(root, "max_completion_tokens") && field(root, "max_tokens"))
        return fail(err, cap, "give 'max_tokens' or 'max_completion_tokens', not both");
    if ((rc = get_num(root, mt, 1, SRV_MAX_TOKENS, 1, &v, err, cap)) > 1) return rc;
    if (rc) r->max_tokens = (int)v;
    if ((rc = get_num(root, "temperature", 0, 2, 0, &v, err, cap)) > 1) return rc;
    if (rc) r->temperature = (float)v;
    if ((rc = get_num(root, "top_p", 0, 1, 0, &v, err, cap)) > 1) return rc;
    if (rc) r->top_p = (float)v;
    if ((rc = get_num(root, "min_p", 0, 1, 0, &v, err, cap)) > 1) return rc;
    if (rc) r->min_p = (float)v;
    if ((rc = get_num(root, "top_k", 0, 1 << 30, 1, &v, err, cap)) > 1) return rc;
    if (rc) r->top_k = (int)v;
    if ((rc = get_num(root, "presence_penalty", -2, 2, 0, &v, err, cap)) > 1) return rc;
    if (rc) r->presence_penalty = (float)v;
    if ((rc = get_num(root, "frequency_penalty", -2, 2, 0, &v, err, cap)) > 1) return rc;
    if (rc) r->frequency_penalty = (float)v;
    /* a double holds integers exactly to 2^53; larger seeds are still repeatable */
    if ((rc = get_num(root, "seed", -9223372036854775808.0, 18446744073709549568.0, 1, &v, err, cap)) > 1) return rc;
    if (rc) {
        r->has_seed = 1;
        r->seed = v < 0 ? (uint64_t)(int64_t)v : (uint64_t)v;
    }
    if ((rc = get_num(root, "n", 1, 1, 1, &v, err, cap)) > 1)
        return fail(err, cap, "'n' must be 1 (one choice per request)");
    if ((rc = get_bool(root, "stream", &r->stream, err, cap))) return rc;
    if ((c = field(root, "stream_options"))) {
        static const char *const so[] = { "include_usage", NULL };
        if (!cJSON_IsObject(c)) return fail(err, cap, "'stream_options' must be an object");
        if ((rc = check_fields(c, so, "'stream_options'", err, cap))) return rc;
        if ((rc = get_bool(c, "include_usage", &r->include_usage, err, cap))) return rc;
    }
    if ((c = field(root, "logit_bias")) && (!cJSON_IsObject(c) || c->child))
        return fail(err, cap, "'logit_bias' is not supported (only an empty object)");
    if ((c = field(root, "stop"))) {
        if (cJSON_IsString(c)) {
            if (!(r->stop[0] = strdup(c->valuestring))) return fail(err, cap, "out of memory");
            r->n_stop = 1;
        } else if (cJSON_IsArray(c)) {
            int n = cJSON_GetArraySize(c);
            if (n > SRV_MAX_STOP) return fail(err, cap, "'stop' has %d strings; at most %d", n, SRV_MAX_STOP);
            for (const cJSON *s = c->child; s; s = s->next) {
                if (!cJSON_IsString(s)) return fail(err, cap, "'stop' must be a string or a list of strings");
                if (!(r->stop[r->n_stop] = strdup(s->valuestring))) return fail(err, cap, "out of memory");
                r->n_stop++;
            }
        } else {
            return fail(err, cap, "'stop' must be a string or a list of strings");
        }
        for (int i = 0; i < r->n_stop; i++) {
            size_t L = strlen(r->stop[i]);
            if (L == 0) return fail(err, cap, "'stop' strings must not be empty");
            if (L > SRV_MAX_STOP_LEN) return fail(err, cap, "a 'stop' string is %zu bytes; at most %d", L, SRV_MAX_STOP_LEN);
        }
    }
    return 0;
}

/* Structured output: at most one of response_format (OpenAI: text, json_object,
 * json_schema), grammar (GBNF text) and json_schema (a schema; llama.cpp's server
 * takes both of these). The schema is kept as JSON text for the converter. */
static int parse_constraint(const cJSON *root, srv_request *r, char *err, size_t cap) {
    const cJSON *rf = field(root, "response_format"), *gr = field(root, "grammar"), *js = field(root, "json_schema");
    if (!!rf + !!gr + !!js > 1) return fail(err, cap, "give one of 'response_format', 'grammar' and 'json_schema'");
    const cJSON *schema = NULL;
    if (gr) {
        if (!cJSON_IsString(gr)) return fail(err, cap, "'grammar' must be a string (a GBNF grammar)");
        if (!(r->constraint_text = strdup(gr->valuestring))) return fail(err, cap, "out of memory");
        r->constraint = 0; /* MINFER_GRAMMAR_GBNF */
        return 0;
    }
    if (js) schema = js;
    if (rf) {
        static const char *const rff[] = { "type", "json_schema", "schema", NULL };
        if (!cJSON_IsObject(rf)) return fail(err, cap, "'response_format' must be an object");
        int rc = check_fields(rf, rff, "'response_format'", err, cap);
        if (rc) return rc;
        const cJSON *t = field(rf, "type");
        if (!t || !cJSON_IsString(t))
            return fail(err, cap, "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
        const char *ts = t->valuestring;
        if (!strcmp(ts, "text")) {
            if (field(rf, "json_schema") || field(rf, "schema"))
                return fail(err, cap, "'response_format' of type 'text' takes no schema");
            return 0;
        }
        if (!strcmp(ts, "json_object")) { /* llama.cpp's server also takes a "schema" here */
            if (field(rf, "json_schema")) return fail(err, cap, "'response_format.json_schema' needs type 'json_schema'");
            schema = field(rf, "schema");
            if (!schema) { r->constraint = 2; return 0; } /* MINFER_GRAMMAR_JSON_OBJECT */
        } else if (!strcmp(ts, "json_schema")) {
            static const char *const jsf[] = { "name", "description", "schema", "strict", NULL };
            const cJSON *o = field(rf, "json_schema");
            if (field(rf, "schema")) return fail(err, cap, "the schema goes in 'response_format.json_schema.schema'");
            if (!o || !cJSON_IsObject(o))
                return fail(err, cap, "'response_format.json_schema' must be an object with a 'schema'");
            if ((rc = check_fields(o, jsf, "'response_format.json_schema'", err, cap))) return rc;
            const cJSON *nm = field(o, "name"), *st = field(o, "strict"), *ds = field(o, "description");
            if (nm && !cJSON_IsString(nm)) return fail(err, cap, "'response_format.json_schema.name' must be a string");
            if (ds && !cJSON_IsString(ds))
                return fail(err, cap, "'response_format.json_schema.description' must be a string");
            if (st && !cJSON_IsBool(st)) return fail(err, cap, "'response_format.json_schema.strict' must be true or false");
            schema = field(o, "schema");
            if (!schema) return fail(err, cap, "'response_format.json_schema.schema' is required");
        } else {
            return fail(err, cap, "'response_format.type' '%.40s' is not supported (text, json_object, json_schema)", ts);
        }
    }
    if (!schema) return 0;
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema)) return fail(err, cap, "a JSON schema must be an object or a boolean");
    char *text = cJSON_PrintUnformatted(schema);
    r->constraint_text = text ? strdup(text) : NULL;
    cJSON_free(text);
    if (!r->constraint_text) return fail(err, cap, "out of memory");
    r->constraint = 1; /* MINFER_GRAMMAR_JSON_SCHEMA */
    return 0;
}

/* Message content: a string, or a list of {"type": "text", "text": ...} parts
 * (joined); images and other part types are not supported. */
static int parse_content(const cJSON *c, int i, char **out, char *err, size_t cap) {
    if (cJSON_IsString(c)) {
        *out = strdup(c->valuestring);
        return *out ? 0 : fail(err, cap, "out of memory");
    }
    if (!cJSON_IsArray(c)) return fail(err, cap, "messages[%d].content must be a string or a list of text parts", i);
    size_t len = 0;
    for (const cJSON *p = c->child; p; p = p->next) {
        static const char *const pf[] = { "type", "text", NULL };
        const cJSON *t = cJSON_IsObject(p) ? field(p, "type") : NULL;
        if (!t || !cJSON_IsString(t) || strcmp(t->valuestring, "text"))
            return fail(err, cap, "messages[%d].content: only parts of type 'text' are supported", i);
        int rc = check_fields(p, pf, "a content part", err, cap);
        if (rc) return rc;
        const cJSON *x = field(p, "text");
        if (!x || !cJSON_IsString(x)) return fail(err, cap, "messages[%d].content: a text part needs a string 'text'", i);
        len += strlen(x->valuestring);
    }
    char *s = malloc(len + 1);
    if (!s) return fail(err, cap, "out of memory");
    size_t o = 0;
    for (const cJSON *p = c->child; p; p = p->next) {
        const char *x = field(p, "text")->valuestring;
        size_t L = strlen(x);
        memcpy(s + o, x, L);
        o += L;
    }
    s[o] = 0;
    *out = s;
    return 0;
}

/* An assistant message's tool_calls: [{"id": str, "type": "function", "function":
 * {"name": str, "arguments": str (JSON text, as OpenAI sends it) or object}}]. */
static int check_tool_calls(const cJSON *calls, int i, char *err, size_t cap) {
    if (!cJSON_IsArray(calls)) return fail(err, cap, "messages[%d].tool_calls must be a list", i);
    int k = 0;
    for (const cJSON *c = calls->child; c; c = c->next, k++) {
        static const char *const cf[] = { "id", "type", "function", NULL };
        static const char *const ff[] = { "name", "arguments", NULL };
        char where[64];
        snprintf(where, sizeof where, "messages[%d].tool_calls[%d]", i, k);
        if (!cJSON_IsObject(c)) return fail(err, cap, "%s must be an object", where);
        int rc = check_fields(c, cf, where, err, cap);
        if (rc) return rc;
        const cJSON *id = field(c, "id"), *type = field(c, "type"), *f = field(c, "function");
        if (id && !cJSON_IsString(id)) return fail(err, cap, "%s.id must be a string", where);
        if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function")))
            return fail(err, cap, "%s.type must be 'function'", where);
        if (!f || !cJSON_IsObject(f)) return fail(err, cap, "%s.function must be an object", where);
        snprintf(where, sizeof where, "messages[%d].tool_calls[%d].function", i, k);
        if ((rc = check_fields(f, ff, where, err, cap))) return rc;
        const cJSON *name = field(f, "name"), *args = field(f, "arguments");
        if (!name || !cJSON_IsString(name) || !name->valuestring[0]) return fail(err, cap, "%s.name must be a non-empty string", where);
        if (args && !cJSON_IsString(args) && !cJSON_IsObject(args))
            return fail(err, cap, "%s.arguments must be a string (JSON text) or an object", where);
    }
    return 0;
}

static int parse_messages(const cJSON *root, srv_request *r, char *err, size_t cap) {
    const cJSON *m = field(root, "messages");
    if (!m) return fail(err, cap, "'messages' is required");
    if (!cJSON_IsArray(m)) return fail(err, cap, "'messages' must be a list of message objects");
    int n = cJSON_GetArraySize(m);
    if (n < 1) return fail(err, cap, "'messages' must not be empty");
    if (!(r->msgs = calloc((size_t)n, sizeof *r->msgs))) return fail(err, cap, "out of memory");
    int i = 0;
    for (const cJSON *e = m->child; e; e = e->next, i++) {
        /* refusal, annotations, audio, function_call: what a client sends back of an
         * earlier answer, accepted when null */
        static const char *const mf[] = { "role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content",
                                          "refusal", "annotations", "audio", "function_call", NULL };
        char where[48];
        snprintf(where, sizeof where, "messages[%d]", i);
        if (!cJSON_IsObject(e)) return fail(err, cap, "messages[%d] must be an object", i);
        int rc = check_fields(e, mf, where, err, cap);
        if (rc) return rc;
        static const char *const null_only[] = { "refusal", "annotations", "audio", "function_call" };
        for (size_t k = 0; k < sizeof null_only / sizeof null_only[0]; k++)
            if (field(e, null_only[k]))
                return fail(err, cap, "messages[%d].%s is not supported (null only)", i, null_only[k]);
        const cJSON *role = field(e, "role"), *content = field(e, "content"), *name = field(e, "name");
        const cJSON *calls = field(e, "tool_calls"), *call_id = field(e, "tool_call_id"), *rc_ = field(e, "reasoning_content");
        if (!role || !cJSON_IsString(role)) return fail(err, cap, "messages[%d].role must be a string", i);
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system"; /* OpenAI's newer name for it */
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool"))
            return fail(err, cap, "messages[%d].role '%s' is not supported (system, developer, user, assistant, tool)", i, rs);
        if (name && !cJSON_IsString(name)) return fail(err, cap, "messages[%d].name must be a string", i);
        if (calls && strcmp(rs, "assistant")) return fail(err, cap, "messages[%d].tool_calls: only an assistant message has them", i);
        if (calls && (rc = check_tool_calls(calls, i, err, cap))) return rc;
        if (rc_ && (strcmp(rs, "assistant") || !cJSON_IsString(rc_)))
            return fail(err, cap, "messages[%d].reasoning_content must be a string, of an assistant message", i);
        if (!strcmp(rs, "tool")) {
            if (!call_id || !cJSON_IsString(call_id))
                return fail(err, cap, "messages[%d]: a tool message needs the 'tool_call_id' (a string) of the call it answers", i);
        } else if (call_id) {
            return fail(err, cap, "messages[%d].tool_call_id: only a tool message has one", i);
        }
        if (!content && !(calls && cJSON_GetArraySize(calls) > 0)) return fail(err, cap, "messages[%d].content is required", i);
        if (!(r->msgs[i].role = strdup(rs))) return fail(err, cap, "out of memory");
        r->n_msgs = i + 1;
        if (!content) {
            if (!(r->msgs[i].content = strdup(""))) return fail(err, cap, "out of memory");
        } else if ((rc = parse_content(content, i, &r->msgs[i].content, err, cap))) {
            return rc;
        }
    }
    return 0;
}

/* tools: [{"type": "function", "function": {"name": [a-zA-Z0-9_-]{1,64}, "description": str,
 * "parameters": {JSON schema}, "strict": bool}}], names unique; tool_choice: "auto",
 * "none", "required" or {"type": "function", "function": {"name": one of them}};
 * parallel_tool_calls: bool. */
static int parse_tools(const cJSON *root, srv_request *r, char *err, size_t cap) {
    const cJSON *t = field(root, "tools"), *tc = field(root, "tool_choice");
    r->parallel_tool_calls = 1;
    int rc = get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, err, cap);
    if (rc) return rc;
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw)) return fail(err, cap, "'chat_template_kwargs' must be an object");
    if (t) {
        if (!cJSON_IsArray(t)) return fail(err, cap, "'tools' must be a list of tool objects");
        int n = cJSON_GetArraySize(t);
        if (n > SRV_MAX_TOOLS) return fail(err, cap, "'tools' has %d tools; at most %d", n, SRV_MAX_TOOLS);
        if (n && !(r->tool_names = calloc((size_t)n, sizeof *r->tool_names))) return fail(err, cap, "out of memory");
        int k = 0;
        for (const cJSON *x = t->child; x; x = x->next, k++) {
            static const char *const tf[] = { "type", "function", NULL };
            static const char *const ff[] = { "name", "description", "parameters", "strict", NULL };
            char where[48];
            snprintf(where, sizeof where, "tools[%d]", k);
            if (!cJSON_IsObject(x)) return fail(err, cap, "tools[%d] must be an object", k);
            if ((rc = check_fields(x, tf, where, err, cap))) return rc;
            const cJSON *type = field(x, "type"), *f = field(x, "function");
            if (!type || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
                return fail(err, cap, "tools[%d].type must be 'function' (the only tool type supported)", k);
            if (!f || !cJSON_IsObject(f)) return fail(err, cap, "tools[%d].function must be an object", k);
            snprintf(where, sizeof where, "tools[%d].function", k);
            if ((rc = check_fields(f, ff, where, err, cap))) return rc;
            const cJSON *name = field(f, "name"), *desc = field(f, "description"), *params = field(f, "parameters");
            const cJSON *strict = field(f, "strict");
            if (!name || !cJSON_IsString(name)) return fail(err, cap, "tools[%d].function.name must be a string", k);
            size_t L = strlen(name->valuestring);
            if (L == 0 || L > 64) return fail(err, cap, "tools[%d].function.name must be 1 to 64 characters", k);
            for (size_t q = 0; q < L; q++) {
                char ch = name->valuestring[q];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
                    return fail(err, cap, "tools[%d].function.name '%s' may hold only a-z, A-Z, 0-9, _ and -", k, name->valuestring);
            }
            if (desc && !cJSON_IsString(desc)) return fail(err, cap, "tools[%d].function.description must be a string", k);
            if (params && !cJSON_IsObject(params)) return fail(err, cap, "tools[%d].function.parameters must be an object (a JSON schema)", k);
            if (strict && !cJSON_IsBool(strict)) return fail(err, cap, "tools[%d].function.strict must be true or false", k);
            for (int q = 0; q < k; q++)
                if (!strcmp(r->tool_names[q], name->valuestring))
                    return fail(err, cap, "tools[%d]: the function name '%s' is given twice", k, name->valuestring);
            if (!(r->tool_names[k] = strdup(name->valuestring))) return fail(err, cap, "out of memory");
            r->n_tools = k + 1;
        }
    }
    r->tool_choice = SRV_TOOL_AUTO;
    if (tc) {
        if (cJSON_IsString(tc)) {
            const char *v = tc->valuestring;
            if (!strcmp(v, "auto")) r->tool_choice = SRV_TOOL_AUTO;
            else if (!strcmp(v, "none")) r->tool_choice = SRV_TOOL_NONE;
            else if (!strcmp(v, "required")) r->tool_choice = SRV_TOOL_REQUIRED;
            else return fail(err, cap, "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        } else if (cJSON_IsObject(tc)) {
            static const char *const cf[] = { "type", "function", NULL };
            static const char *const ff[] = { "name", NULL };
            if ((rc = check_fields(tc, cf, "'tool_choice'", err, cap))) return rc;
            const cJSON *type = field(tc, "type"), *f = field(tc, "function"), *name = f && cJSON_IsObject(f) ? field(f, "name") : NULL;
            if (!type || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !name || !cJSON_IsString(name))
                return fail(err, cap, "'tool_choice' as an object is {\"type\": \"function\", \"function\": {\"name\": NAME}}");
            if ((rc = check_fields(f, ff, "'tool_choice.function'", err, cap))) return rc;
            int found = 0;
            for (int q = 0; q < r->n_tools; q++) found |= !strcmp(r->tool_names[q], name->valuestring);
            if (!found) return fail(err, cap, "'tool_choice' names the function '%s', which is not among 'tools'", name->valuestring);
            r->tool_choice = SRV_TOOL_NAMED;
            if (!(r->tool_choice_name = strdup(name->valuestring))) return fail(err, cap, "out of memory");
        } else {
            return fail(err, cap, "'tool_choice' must be a string or an object");
        }
        if ((r->tool_choice == SRV_TOOL_REQUIRED) && !r->n_tools)
            return fail(err, cap, "'tool_choice' 'required' needs 'tools'");
    }
    return 0;
}

/* A prompt: a string, a list of one string, a list of token ids, or a list of one
 * list of token ids (one prompt per request: n = 1). */
static int parse_prompt(const cJSON *root, srv_request *r, char *err, size_t cap) {
    const cJSON *p = field(root, "prompt");
    if (!p) return fail(err, cap, "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child;
    if (cJSON_IsString(p)) {
        r->prompt = strdup(p->valuestring);
        return r->prompt ? 0 : fail(err, cap, "out of memory");
    }
    if (!cJSON_IsArray(p)) return fail(err, cap, "'prompt' must be a string, or a list of token ids");
    int n = cJSON_GetArraySize(p);
    if (n < 1) return fail(err, cap, "'prompt' must not be an empty list");
    if (!(r->prompt_ids = malloc(sizeof(int32_t) * (size_t)n))) return fail(err, cap, "out of memory");
    for (const cJSON *e = p->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble != floor(e->valuedouble) ||
            e->valuedouble < 0 || e->valuedouble > 2147483647.0)
            return fail(err, cap, "'prompt' as a list holds one string or non-negative integer token ids");
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)e->valuedouble;
    }
    return 0;
}

int srv_request_parse(const char *body, size_t len, int is_chat, srv_request *out, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    out->is_chat = is_chat;
    out->max_tokens = -1;
    out->constraint = -1;
    /* llama.cpp's server's sampling defaults (src/sampler.c sampler_params_default) */
    out->temperature = 0.8f;
    out->top_k = 40;
    out->top_p = 0.95f;
    out->min_p = 0.05f;
    cJSON *root;
    int rc = parse_root(body, len, &root, err, cap);
    if (rc) return rc;
    static const char *const chat_fields[] = {
        "messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
        "seed", "stop", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "n", "stream",
        "stream_options", "user", "logit_bias", "response_format", "grammar", "json_schema", "tools", "tool_choice",
        "parallel_tool_calls", "chat_template_kwargs", NULL
    };
    static const char *const cmpl_fields[] = {
        "prompt", "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
        "presence_penalty", "frequency_penalty", "logprobs", "n", "stream", "stream_options", "user",
        "logit_bias", "echo", "best_of", "response_format", "grammar", "json_schema", NULL
    };
    rc = check_fields(root, is_chat ? chat_fields : cmpl_fields, NULL, err, cap);
    if (!rc) rc = parse_common(root, out, err, cap);
    if (!rc) rc = parse_constraint(root, out, err, cap);
    if (!rc && is_chat) {
        rc = parse_messages(root, out, err, cap);
        if (!rc) rc = parse_tools(root, out, err, cap);
        double v;
        if (!rc && (rc = get_bool(root, "logprobs", &out->logprobs, err, cap)) == 0) {
            int g = get_num(root, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, 1, &v, err, cap);
            if (g > 1) rc = g;
            else if (g) {
                out->top_logprobs = (int)v;
                if (!out->logprobs) rc = fail(err, cap, "'top_logprobs' needs 'logprobs': true");
            }
        }
    } else if (!rc) {
        rc = parse_prompt(root, out, err, cap);
        double v;
        int g = rc ? 0 : get_num(root, "logprobs", 0, 5, 1, &v, err, cap);
        if (g > 1) rc = g;
        else if (g) { out->logprobs = 1; out->top_logprobs = (int)v; }
        const cJSON *c;
        if (!rc && (c = field(root, "echo")) && !cJSON_IsFalse(c)) rc = fail(err, cap, "'echo' is not supported (false only)");
        if (!rc && (g = get_num(root, "best_of", 1, 1, 1, &v, err, cap)) > 1)
            rc = fail(err, cap, "'best_of' must be 1");
    }
    cJSON_Delete(root);
    if (rc) srv_request_free(out);
    return rc;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    free(r->model);
    for (int i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].role);
        free(r->msgs[i].content);
    }
    free(r->msgs);
    free(r->prompt);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->constraint_text);
    if (r->tool_names)
        for (int i = 0; i < r->n_tools; i++) free(r->tool_names[i]);
    free(r->tool_names);
    free(r->tool_choice_name);
    int is_chat = r->is_chat;
    memset(r, 0, sizeof *r);
    r->is_chat = is_chat;
    r->constraint = -1;
}

int srv_tokenize_parse(const char *body, size_t len, char **content, int *add_special, int *parse_special, char *err,
                       size_t cap) {
    *content = NULL;
    *add_special = 1;
    *parse_special = 1;
    cJSON *root;
    int rc = parse_root(body, len, &root, err, cap);
    if (rc) return rc;
    static const char *const f[] = { "content", "add_special", "parse_special", "with_pieces", NULL };
    const cJSON *c;
    int pieces = 0;
    if (!(rc = check_fields(root, f, NULL, err, cap)) && !(rc = get_bool(root, "add_special", add_special, err, cap)) &&
        !(rc = get_bool(root, "parse_special", parse_special, err, cap)) &&
        !(rc = get_bool(root, "with_pieces", &pieces, err, cap))) {
        if (pieces) rc = fail(err, cap, "'with_pieces' is not supported");
        else if (!(c = field(root, "content")) || !cJSON_IsString(c)) rc = fail(err, cap, "'content' must be a string");
        else if (!(*content = strdup(c->valuestring))) rc = fail(err, cap, "out of memory");
    }
    cJSON_Delete(root);
    return rc;
}

int srv_detokenize_parse(const char *body, size_t len, int32_t **ids, int *n, char *err, size_t cap) {
    *ids = NULL;
    *n = 0;
    cJSON *root;
    int rc = parse_root(body, len, &root, err, cap);
    if (rc) return rc;
    static const char *const f[] = { "tokens", NULL };
    const cJSON *c = NULL;
    if (!(rc = check_fields(root, f, NULL, err, cap))) {
        if (!(c = field(root, "tokens")) || !cJSON_IsArray(c)) rc = fail(err, cap, "'tokens' must be a list of integers");
    }
    if (!rc) {
        int m = cJSON_GetArraySize(c);
        if (m > 0 && !(*ids = malloc(sizeof(int32_t) * (size_t)m))) rc = fail(err, cap, "out of memory");
        for (const cJSON *e = rc ? NULL : c->child; e; e = e->next) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                e->valuedouble > 2147483647.0) {
                rc = fail(err, cap, "'tokens' must hold non-negative integers");
                break;
            }
            (*ids)[(*n)++] = (int32_t)e->valuedouble;
        }
        if (rc) { free(*ids); *ids = NULL; *n = 0; }
    }
    cJSON_Delete(root);
    return rc;
}

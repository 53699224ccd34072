/* prompt.c - see prompt.h. */
#include "prompt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void copy_text(char *dst, size_t cap, const char *s) {
    snprintf(dst, cap, "%s", s ? s : "");
}

/* A file's bytes (malloc'd), or NULL with the reason in err. */
static char *read_file(const char *path, size_t *len, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t n = 0, c = 1 << 14, got;
    char *buf = malloc(c);
    while (buf && (got = fread(buf + n, 1, c - n, f)) > 0) {
        n += got;
        if (n == c) {
            if (c > (64u << 20)) { free(buf); buf = NULL; snprintf(err, cap, "%s: over 64 MiB: not a chat template", path); break; }
            char *q = realloc(buf, c *= 2);
            if (!q) { free(buf); buf = NULL; }
            else buf = q;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) {
        if (!err[0]) snprintf(err, cap, "out of memory reading %s", path);
        return NULL;
    }
    if (bad) {
        free(buf);
        snprintf(err, cap, "error reading %s", path);
        return NULL;
    }
    *len = n;
    return buf;
}

static int render_jinja(const prompt_tmpl *p, jinja_env *e, const prompt_request *r, char **out, size_t *n,
                        jinja_error *je);

/* Whether the template renders a conversation with a tool call whose arguments are
 * args_json (an object, or a JSON string of one). */
static int probe_renders(const prompt_tmpl *p, const char *args_json) {
    static const char tools[] = "[{\"type\": \"function\", \"function\": {\"name\": \"probe_tool\", \"description\": "
                                "\"A probe.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": "
                                "{\"type\": \"string\"}}, \"required\": [\"x\"]}}}]";
    char msgs[1024];
    snprintf(msgs, sizeof msgs,
             "[{\"role\": \"user\", \"content\": \"probe\"}, {\"role\": \"assistant\", \"content\": \"\", "
             "\"tool_calls\": [{\"id\": \"call_probe_1\", \"type\": \"function\", \"function\": {\"name\": "
             "\"probe_tool\", \"arguments\": %s}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_probe_1\", "
             "\"name\": \"probe_tool\", \"content\": \"ok\"}, {\"role\": \"user\", \"content\": \"again\"}]",
             args_json);
    jinja_env *e = jinja_env_new();
    jinja_error je;
    prompt_request r = { .add_generation_prompt = 1 };
    char *out = NULL;
    size_t n = 0;
    int ok = e && (r.messages = jinja_json_parse(e, msgs, strlen(msgs), &je)) &&
             (r.tools = jinja_json_parse(e, tools, strlen(tools), &je)) && !render_jinja(p, e, &r, &out, &n, &je);
    free(out);
    jinja_env_free(e);
    return ok;
}

static int src_has(const char *src, size_t len, const char *s) { return memmem(src, len, s, strlen(s)) != NULL; }

/* What a Jinja template shows of tools and reasoning (its source read as toolcall.h
 * does), and how it takes an assistant message's tool calls and reasoning. */
static void set_tool_traits(prompt_tmpl *p, const char *src, size_t len) {
    p->takes_tools = jinja_tmpl_uses(p->jinja, "tools");
    p->tool_format = p->takes_tools ? tc_detect(src, len) : TC_FORMAT_NONE;
    p->thinks = tc_template_thinks(src, len);
    p->thinking_key = !src_has(src, len, "reasoning_content") &&
                      (src_has(src, len, ".thinking") || src_has(src, len, "['thinking']") ||
                       src_has(src, len, "\"thinking\" in") || src_has(src, len, "'thinking' in"));
    /* arguments as objects is the Hugging Face convention; a template that cannot take
     * them but renders JSON text takes text */
    p->string_args = p->takes_tools && !probe_renders(p, "{\"x\": \"probe\"}") && probe_renders(p, "\"{\\\"x\\\": \\\"probe\\\"}\"");
}

int prompt_init(prompt_tmpl *p, const prompt_source *s, char *err, size_t cap) {
    memset(p, 0, sizeof *p);
    if (err && cap) err[0] = 0;
    copy_text(p->bos, sizeof p->bos, s->bos_text);
    copy_text(p->eos, sizeof p->eos, s->eos_text);
    p->family = CHAT_TMPL_CHATML;
    jinja_error je;
    char where[300];
    if (s->file) {
        size_t n = 0;
        char *src = read_file(s->file, &n, err, cap);
        if (!src) return 2;
        p->jinja = jinja_parse(src, n, &je);
        if (p->jinja) set_tool_traits(p, src, n);
        free(src);
        if (!p->jinja) {
            snprintf(err, cap, "%s: %s", s->file, jinja_error_str(&je, where, sizeof where));
            return 2;
        }
        snprintf(p->label, sizeof p->label, "the chat template of %s (--chat-template-file)", s->file);
        return 0;
    }
    if (s->name) {
        if (chat_from_name(s->name, &p->family)) {
            char names[512];
            size_t o = 0;
            names[0] = 0;
            for (int t = 0; t < CHAT_TMPL_COUNT; t++)
                o += (size_t)snprintf(names + o, o < sizeof names ? sizeof names - o : 0, "%s%s", t ? ", " : "",
                                      chat_name((chat_tmpl)t));
            snprintf(err, cap, "unknown chat template '%s' (built-in families: %s; --chat-template-file FILE for a Jinja file)",
                     s->name, names);
            return 1;
        }
        snprintf(p->label, sizeof p->label, "built-in %s (--chat-template)", chat_name(p->family));
        return 0;
    }
    const char *why = NULL;
    if (s->src && s->len) {
        p->jinja = jinja_parse(s->src, s->len, &je);
        if (p->jinja) {
            set_tool_traits(p, s->src, s->len);
            snprintf(p->label, sizeof p->label, "the model's own chat template (tokenizer.chat_template, %zu bytes)", s->len);
            return 0;
        }
        char msg[300];
        snprintf(where, sizeof where, "the model's chat template does not parse: %s", jinja_error_str(&je, msg, sizeof msg));
        why = where;
    }
    /* the fallback: a built-in family */
    if (s->src && s->len && !chat_detect_len(s->src, s->len, s->eos_text, &p->family)) {
        if (p->family == CHAT_TMPL_CHATML)
            chat_default_system(s->src, s->len, p->default_system, sizeof p->default_system);
        snprintf(p->label, sizeof p->label, "built-in %s (fallback: %s)", chat_name(p->family), why ? why : "");
    } else if (!(s->src && s->len) && s->arch && chat_for_arch(s->arch, &p->family) == 0) {
        snprintf(p->label, sizeof p->label, "built-in %s (fallback: no chat template in the model; the %s architecture's)",
                 chat_name(p->family), s->arch);
    } else {
        p->family = CHAT_TMPL_CHATML;
        snprintf(p->label, sizeof p->label, "built-in chatml (fallback: %s; --chat-template NAME or --chat-template-file FILE to choose)",
                 why ? why : s->src && s->len ? "a template minfer cannot read" : "no chat template in the model");
    }
    return 0;
}

void prompt_free(prompt_tmpl *p) {
    if (!p) return;
    jinja_tmpl_free(p->jinja);
    p->jinja = NULL;
}

const char *prompt_traits(const prompt_tmpl *p, char *buf, size_t cap) {
    if (!cap) return "";
    buf[0] = 0;
    if (p->jinja)
        snprintf(buf, cap, "; tool calls: %s; reasoning: %s%s", p->takes_tools ? tc_format_name(p->tool_format) : "none",
                 tc_think_name(p->thinks), p->string_args ? "; tool-call arguments as JSON text" : "");
    return buf;
}

/* ---------------------------------------------------------------- messages */

static int set(jinja_env *e, jinja_value *d, const char *k, jinja_value *v, char *err, size_t cap) {
    if (v && !jinja_dict_set(e, d, k, v)) return 0;
    snprintf(err, cap, "out of memory");
    return -1;
}

/* A content value as one string: a string as it is, text parts joined, null "". */
static jinja_value *content_text(jinja_env *e, const jinja_value *c, int i, char *err, size_t cap) {
    if (!c || jinja_is_null(c)) return jinja_string(e, "");
    if (jinja_str(c, NULL)) return (jinja_value *)c;
    if (!jinja_is_list(c)) {
        snprintf(err, cap, "messages[%d].content must be a string or a list of text parts", i);
        return NULL;
    }
    size_t total = 0;
    for (size_t k = 0; k < jinja_list_len(c); k++) {
        const jinja_value *part = jinja_list_at(c, k);
        const char *type = jinja_str(jinja_dict_get(part, "type"), NULL);
        size_t n;
        const char *text = jinja_str(jinja_dict_get(part, "text"), &n);
        if (!type || strcmp(type, "text") || !text) {
            snprintf(err, cap, "messages[%d].content: only parts of type 'text' are supported", i);
            return NULL;
        }
        total += n;
    }
    char *buf = malloc(total + 1);
    if (!buf) { snprintf(err, cap, "out of memory"); return NULL; }
    size_t o = 0;
    for (size_t k = 0; k < jinja_list_len(c); k++) {
        size_t n;
        const char *text = jinja_str(jinja_dict_get(jinja_list_at(c, k), "text"), &n);
        memcpy(buf + o, text, n);
        o += n;
    }
    jinja_value *v = jinja_string_n(e, buf, o);
    free(buf);
    if (!v) snprintf(err, cap, "out of memory");
    return v;
}

/* tool_calls with their arguments as objects where they are JSON object text */
static jinja_value *tool_calls(jinja_env *e, const jinja_value *calls, int i, char *err, size_t cap) {
    if (!jinja_is_list(calls)) {
        snprintf(err, cap, "messages[%d].tool_calls must be a list", i);
        return NULL;
    }
    jinja_value *out = jinja_list_new(e);
    if (!out) { snprintf(err, cap, "out of memory"); return NULL; }
    for (size_t k = 0; k < jinja_list_len(calls); k++) {
        const jinja_value *call = jinja_list_at(calls, k);
        if (!jinja_is_dict(call)) {
            snprintf(err, cap, "messages[%d].tool_calls[%zu] must be an object", i, k);
            return NULL;
        }
        jinja_value *c2 = jinja_dict_new(e);
        if (!c2) { snprintf(err, cap, "out of memory"); return NULL; }
        for (size_t m = 0; m < jinja_dict_len(call); m++) {
            const char *key = jinja_dict_key(call, m);
            jinja_value *val = jinja_dict_val(call, m);
            if (!key) continue;
            if (!strcmp(key, "function") && jinja_is_dict(val)) {
                jinja_value *f2 = jinja_dict_new(e);
                if (!f2) { snprintf(err, cap, "out of memory"); return NULL; }
                for (size_t q = 0; q < jinja_dict_len(val); q++) {
                    const char *fk = jinja_dict_key(val, q);
                    jinja_value *fv = jinja_dict_val(val, q);
                    if (!fk) continue;
                    size_t n;
                    const char *args = !strcmp(fk, "arguments") ? jinja_str(fv, &n) : NULL;
                    if (args) {
                        jinja_error je;
                        jinja_value *obj = jinja_json_parse(e, args, n, &je);
                        if (obj && jinja_is_dict(obj)) fv = obj;
                    }
                    if (set(e, f2, fk, fv, err, cap)) return NULL;
                }
                val = f2;
            }
            if (set(e, c2, key, val, err, cap)) return NULL;
        }
        if (jinja_list_push(e, out, c2)) { snprintf(err, cap, "out of memory"); return NULL; }
    }
    return out;
}

jinja_value *prompt_messages(jinja_env *e, const jinja_value *msgs, char *err, size_t cap) {
    if (!jinja_is_list(msgs)) {
        snprintf(err, cap, "'messages' must be a list of message objects");
        return NULL;
    }
    jinja_value *out = jinja_list_new(e);
    if (!out) { snprintf(err, cap, "out of memory"); return NULL; }
    for (size_t i = 0; i < jinja_list_len(msgs); i++) {
        const jinja_value *m = jinja_list_at(msgs, i);
        const char *role = jinja_str(jinja_dict_get(m, "role"), NULL);
        if (!jinja_is_dict(m) || !role) {
            snprintf(err, cap, "messages[%zu] must be an object with a string 'role'", i);
            return NULL;
        }
        jinja_value *m2 = jinja_dict_new(e);
        if (!m2) { snprintf(err, cap, "out of memory"); return NULL; }
        if (set(e, m2, "role", !strcmp(role, "developer") ? jinja_string(e, "system") : jinja_dict_get(m, "role"), err, cap))
            return NULL;
        jinja_value *content = content_text(e, jinja_dict_get(m, "content"), (int)i, err, cap);
        if (!content || set(e, m2, "content", content, err, cap)) return NULL;
        for (size_t k = 0; k < jinja_dict_len(m); k++) {
            const char *key = jinja_dict_key(m, k);
            jinja_value *val = jinja_dict_val(m, k);
            if (!key || !strcmp(key, "role") || !strcmp(key, "content")) continue;
            if (!strcmp(key, "tool_calls")) {
                if (jinja_is_null(val)) continue;
                if (!(val = tool_calls(e, val, (int)i, err, cap))) return NULL;
            }
            if (set(e, m2, key, val, err, cap)) return NULL;
        }
        if (jinja_list_push(e, out, m2)) { snprintf(err, cap, "out of memory"); return NULL; }
    }
    return out;
}

/* ---------------------------------------------------------------- rendering */

static char *render_family(const prompt_tmpl *p, const prompt_request *r, size_t *len, char *err, size_t cap) {
    const jinja_value *msgs = r->messages;
    size_t n = jinja_list_len(msgs);
    if (r->tools && jinja_list_len(r->tools)) {
        snprintf(err, cap, "tools need a chat template that renders them; this model's prompt is the %s", p->label);
        return NULL;
    }
    int has_system = 0;
    for (size_t i = 0; i < n; i++) {
        const jinja_value *m = jinja_list_at(msgs, i);
        if (jinja_dict_get(m, "tool_calls") && jinja_list_len(jinja_dict_get(m, "tool_calls"))) {
            snprintf(err, cap, "messages[%zu]: tool calls need a chat template that renders them; this model's prompt is the %s",
                     i, p->label);
            return NULL;
        }
        has_system |= !strcmp(jinja_str(jinja_dict_get(m, "role"), NULL), "system");
    }
    int extra = !has_system && p->default_system[0];
    chat_msg *cm = malloc((n + 1) * sizeof *cm);
    if (!cm) { snprintf(err, cap, "out of memory"); return NULL; }
    if (extra) cm[0] = (chat_msg){ "system", p->default_system };
    for (size_t i = 0; i < n; i++) {
        const jinja_value *m = jinja_list_at(msgs, i);
        cm[extra + i].role = jinja_str(jinja_dict_get(m, "role"), NULL);
        cm[extra + i].content = jinja_str(jinja_dict_get(m, "content"), NULL);
        if (!cm[extra + i].content) cm[extra + i].content = "";
    }
    char *text = chat_render(p->family, cm, (int)(n + (size_t)extra), r->add_generation_prompt);
    free(cm);
    if (!text) { snprintf(err, cap, "cannot render the conversation with the built-in %s family", chat_name(p->family)); return NULL; }
    if (len) *len = strlen(text);
    return text;
}

/* A copy of dict d with key set to v (added last where d has none); NULL when memory runs out. */
static jinja_value *dict_with(jinja_env *e, const jinja_value *d, const char *key, jinja_value *v) {
    jinja_value *out = jinja_dict_new(e);
    for (size_t i = 0; out && i < jinja_dict_len(d); i++) {
        const char *k = jinja_dict_key(d, i);
        if (k && jinja_dict_set(e, out, k, strcmp(k, key) ? jinja_dict_val(d, i) : v)) return NULL;
    }
    if (!out || !v || (!jinja_dict_get(out, key) && jinja_dict_set(e, out, key, v))) return NULL;
    return out;
}

/* The messages as this template takes them (a copy where it differs): tool-call
 * arguments back to JSON text (string_args), reasoning_content also as "thinking"
 * (thinking_key). NULL when memory runs out. */
static jinja_value *messages_for(const prompt_tmpl *p, jinja_env *e, jinja_value *msgs) {
    if (!p->string_args && !p->thinking_key) return msgs;
    jinja_value *out = jinja_list_new(e);
    for (size_t i = 0; out && i < jinja_list_len(msgs); i++) {
        jinja_value *m = jinja_list_at(msgs, i), *calls = jinja_dict_get(m, "tool_calls");
        if (p->string_args && jinja_is_list(calls)) {
            jinja_value *texts = jinja_list_new(e);
            for (size_t c = 0; texts && c < jinja_list_len(calls); c++) {
                jinja_value *call = jinja_list_at(calls, c), *fn = jinja_dict_get(call, "function");
                jinja_value *args = jinja_dict_get(fn, "arguments");
                if (jinja_is_dict(args)) {
                    size_t n;
                    char *text = jinja_json_dump(args, &n);
                    jinja_value *sv = text ? jinja_string_n(e, text, n) : NULL;
                    free(text);
                    call = dict_with(e, call, "function", dict_with(e, fn, "arguments", sv));
                }
                if (!call || jinja_list_push(e, texts, call)) return NULL;
            }
            if (!(m = dict_with(e, m, "tool_calls", texts))) return NULL;
        }
        jinja_value *rc = jinja_dict_get(m, "reasoning_content");
        if (p->thinking_key && jinja_str(rc, NULL) && !jinja_dict_get(m, "thinking") && !(m = dict_with(e, m, "thinking", rc)))
            return NULL;
        if (jinja_list_push(e, out, m)) return NULL;
    }
    return out;
}

/* transformers' render(messages=, tools=, documents=, add_generation_prompt=, **special
 * tokens, **kwargs): 0, or -1 with je */
static int render_jinja(const prompt_tmpl *p, jinja_env *e, const prompt_request *r, char **out, size_t *n,
                        jinja_error *je) {
    jinja_value *msgs = messages_for(p, e, r->messages);
    if (!msgs || jinja_env_set(e, "messages", msgs) || jinja_env_set(e, "tools", r->tools ? r->tools : jinja_none(e)) ||
        jinja_env_set(e, "documents", jinja_none(e)) ||
        jinja_env_set(e, "add_generation_prompt", jinja_bool(e, r->add_generation_prompt)) ||
        (p->bos[0] && jinja_env_set(e, "bos_token", jinja_string(e, p->bos))) ||
        (p->eos[0] && jinja_env_set(e, "eos_token", jinja_string(e, p->eos))) ||
        (r->kwargs && jinja_env_set_all(e, r->kwargs))) {
        memset(je, 0, sizeof *je);
        snprintf(je->msg, sizeof je->msg, "out of memory");
        return -1;
    }
    return jinja_render(p->jinja, e, NULL, out, n, je);
}

char *prompt_render(const prompt_tmpl *p, jinja_env *e, const prompt_request *r, size_t *len, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!r->messages) { snprintf(err, cap, "no messages"); return NULL; }
    if (!p->jinja) return render_family(p, r, len, err, cap);
    char *out = NULL;
    size_t n = 0;
    jinja_error je;
    if (render_jinja(p, e, r, &out, &n, &je)) {
        char where[300];
        snprintf(err, cap, "the chat template: %s", jinja_error_str(&je, where, sizeof where));
        return NULL;
    }
    if (memchr(out, 0, n)) { /* a NUL would cut the C string the tokenizer gets */
        free(out);
        snprintf(err, cap, "the chat template rendered a NUL character");
        return NULL;
    }
    if (len) *len = n;
    return out;
}

int prompt_add_bos(const prompt_tmpl *p, const char *text, int add_bos) {
    if (!add_bos) return 0;
    size_t n = strlen(p->bos);
    return !(n && !strncmp(text, p->bos, n));
}

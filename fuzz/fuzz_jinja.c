/* fuzz_jinja.c - libFuzzer target: the Jinja template engine (src/jinja.c) on hostile
 * templates and contexts.
 *
 * Input: the template source, then (after the first NUL byte, if any) a JSON object
 * whose members are the render's variables; without one, or when it does not parse,
 * a fixed chat context (messages with a tool call, tools, add_generation_prompt).
 *
 * The render runs under small limits (1 MiB of output, 64 MiB of memory, 100,000
 * steps, 16 nested calls) so that one input takes milliseconds.
 *
 * Checked beyond ASan/UBSan: parse and render either succeed or fail with a message;
 * a rendered text is NUL-terminated at its length and valid UTF-8 (every string the
 * engine makes is); the same template and context render the same text twice, in two
 * environments (no state leaks between renders). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char default_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"Hi é\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [true, null, 2.5]}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"42\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"a\": {\"type\": \"integer\"}}}}}], \"add_generation_prompt\": true,"
    " \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static int utf8_ok(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        if (!len || i + len > n) return 0;
        for (size_t k = 1; k < len; k++)
            if ((u[i + k] & 0xc0) != 0x80) return 0;
        i += len;
    }
    return 1;
}

/* One render in a fresh environment; 0 with *out, or -1. */
static int render_once(const jinja_tmpl *t, const char *ctx, size_t ctx_len, char **out, size_t *len) {
    static const jinja_limits lim = { .max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 100000, .max_depth = 16 };
    jinja_env *e = jinja_env_new();
    if (!e) abort();
    jinja_env_set_time(e, 1765000000);
    jinja_error err;
    jinja_value *v = jinja_json_parse(e, ctx, ctx_len, &err);
    if (!v || !jinja_is_dict(v)) v = jinja_json_parse(e, default_ctx, sizeof default_ctx - 1, &err);
    if (!v || jinja_env_set_all(e, v)) { fprintf(stderr, "fuzz_jinja: the default context failed: %s\n", err.msg); abort(); }
    int rc = jinja_render(t, e, &lim, out, len, &err);
    if (rc && !err.msg[0]) { fprintf(stderr, "fuzz_jinja: a failed render without a message\n"); abort(); }
    if (rc == 0) {
        if (!*out || (*out)[*len] != 0) { fprintf(stderr, "fuzz_jinja: output not NUL-terminated at its length\n"); abort(); }
        if (!utf8_ok(*out, *len)) { fprintf(stderr, "fuzz_jinja: output is not valid UTF-8\n"); abort(); }
    }
    jinja_env_free(e);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const char *nul = memchr(data, 0, size);
    size_t src_len = nul ? (size_t)(nul - src) : size;
    const char *ctx = nul ? nul + 1 : "";
    size_t ctx_len = nul ? size - src_len - 1 : 0;
    jinja_error err;
    jinja_tmpl *t = jinja_parse(src, src_len, &err);
    if (!t) {
        if (!err.msg[0]) { fprintf(stderr, "fuzz_jinja: a failed parse without a message\n"); abort(); }
        return 0;
    }
    jinja_tmpl_uses(t, "tools");
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    int ra = render_once(t, ctx, ctx_len, &a, &la);
    int rb = render_once(t, ctx, ctx_len, &b, &lb);
    if (ra != rb || (ra == 0 && (la != lb || memcmp(a, b, la)))) {
        fprintf(stderr, "fuzz_jinja: two renders of one input differ (%d/%d, %zu/%zu bytes)\n", ra, rb, la, lb);
        abort();
    }
    free(a);
    free(b);
    jinja_tmpl_free(t);
    return 0;
}

/* jinja_render.c - renders templates with minfer's Jinja engine for the jinja2
 * comparison (tests/jinja_oracle_test.py).
 *
 *   jinja_render TEMPLATE [CONTEXT.json]   the rendered text on stdout; an error on
 *                                          stderr, exit 1 (render) or 2 (parse)
 *   jinja_render --batch < cases.jsonl     one JSON object a line in:
 *        {"template": str, "context": {...}, "time": seconds since the epoch (optional)}
 *     and one a line out: {"ok": true, "out": str} or {"ok": false, "parse": bool, "err": str}
 *
 * Each context member is a top-level variable of the render. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0, got;
    char *p = malloc(cap);
    if (!p) return NULL;
    while ((got = fread(p + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *q = realloc(p, cap *= 2);
            if (!q) { free(p); return NULL; }
            p = q;
        }
    }
    p[n] = 0;
    *len = n;
    return p;
}

/* Renders src with the members of ctx; returns 0 with *out, or 1 (render) / 2 (parse) with err. */
static int render(jinja_env *e, const char *src, size_t len, const jinja_value *ctx, char **out, size_t *out_len,
                  jinja_error *err) {
    jinja_tmpl *t = jinja_parse(src, len, err);
    if (!t) return 2;
    if (ctx && jinja_env_set_all(e, ctx)) {
        jinja_tmpl_free(t);
        snprintf(err->msg, sizeof err->msg, "the context must be a JSON object");
        err->line = 0;
        return 1;
    }
    int rc = jinja_render(t, e, NULL, out, out_len, err);
    jinja_tmpl_free(t);
    return rc ? 1 : 0;
}

static int batch(void) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (!n) continue;
        jinja_env *e = jinja_env_new();
        jinja_error err;
        jinja_value *c = e ? jinja_json_parse(e, line, (size_t)n, &err) : NULL;
        jinja_value *res = jinja_dict_new(e);
        const char *src;
        size_t slen;
        if (!c || !(src = jinja_str(jinja_dict_get(c, "template"), &slen))) {
            fprintf(stderr, "jinja_render: a batch line is not {\"template\": str, ...}: %s\n", c ? "" : err.msg);
            jinja_env_free(e);
            free(line);
            return 2;
        }
        jinja_value *tm = jinja_dict_get(c, "time");
        if (tm) {
            char *js = jinja_json_dump(tm, NULL);
            if (js) jinja_env_set_time(e, atoll(js));
            free(js);
        }
        char *out = NULL;
        size_t out_len = 0;
        int rc = render(e, src, slen, jinja_dict_get(c, "context"), &out, &out_len, &err);
        if (rc == 0) {
            jinja_dict_set(e, res, "ok", jinja_bool(e, 1));
            jinja_dict_set(e, res, "out", jinja_string_n(e, out, out_len));
        } else {
            char msg[400];
            jinja_dict_set(e, res, "ok", jinja_bool(e, 0));
            jinja_dict_set(e, res, "parse", jinja_bool(e, rc == 2));
            jinja_dict_set(e, res, "err", jinja_string(e, jinja_error_str(&err, msg, sizeof msg)));
        }
        free(out);
        char *js = jinja_json_dump(res, NULL);
        if (!js) {
            fprintf(stderr, "jinja_render: cannot write a result\n");
            jinja_env_free(e);
            free(line);
            return 2;
        }
        puts(js);
        fflush(stdout);
        free(js);
        jinja_env_free(e);
    }
    free(line);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--batch")) return batch();
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: jinja_render TEMPLATE [CONTEXT.json] | --batch < cases.jsonl\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    size_t len, clen;
    char *src = read_all(f, &len);
    fclose(f);
    if (!src) { fprintf(stderr, "jinja_render: out of memory\n"); return 2; }
    jinja_env *e = jinja_env_new();
    jinja_value *ctx = NULL;
    jinja_error err;
    if (argc == 3) {
        FILE *g = fopen(argv[2], "rb");
        if (!g) { perror(argv[2]); return 2; }
        char *cs = read_all(g, &clen);
        fclose(g);
        if (!cs || !(ctx = jinja_json_parse(e, cs, clen, &err))) {
            fprintf(stderr, "jinja_render: %s: %s\n", argv[2], cs ? err.msg : "out of memory");
            return 2;
        }
        free(cs);
    }
    char *out = NULL;
    size_t out_len = 0;
    int rc = render(e, src, len, ctx, &out, &out_len, &err);
    if (rc == 0) fwrite(out, 1, out_len, stdout);
    else {
        char msg[400];
        fprintf(stderr, "jinja_render: %s\n", jinja_error_str(&err, msg, sizeof msg));
    }
    free(out);
    free(src);
    jinja_env_free(e);
    return rc;
}

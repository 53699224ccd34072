/* opts.c - see opts.h. */
#include "opts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cpu/threads.h"
#include "util.h"

int cli_opts_context(cli_opt *o, mf_context_params *cp) {
    int n = 0;
    o[n++] = (cli_opt){ "-c, --ctx", "N", CLI_OPT_INT, &cp->n_ctx, 1, 1 << 24, 0, 0,
                        "context size in tokens (more than the model's trained context: a warning)",
                        "min(model's, 4096)", NULL };
    o[n++] = (cli_opt){ "--device", "D", CLI_OPT_STR, &cp->device, 0, 0, 0, 0,
                        "cpu | cuda | cuda:N | auto (auto: cuda, GPU 0, when one is present)", "auto", NULL };
    o[n++] = (cli_opt){ "-t, --threads", "N", CLI_OPT_INT, &cp->n_threads, 1, 4095, 0, 0,
                        "CPU threads (more than the cores here: capped, with a warning)", "all cores", NULL };
    o[n++] = (cli_opt){ "--gpus", "N", CLI_OPT_INT, &cp->n_gpus, 1, MF_TP_MAX, 0, 0,
                        "split the model over N GPUs from --device's (tensor parallelism, NCCL: libnccl.so.2 on the "
                        "library path; with --device cpu, N CPU backends)", "1", NULL };
    o[n++] = (cli_opt){ "--tensor-split", "LIST", CLI_OPT_STR, &cp->tensor_split_arg, 0, 0, 0, 0,
                        "with --gpus N: N proportions of the split, e.g. 3,1 (kv heads and FFN rows)", "even", NULL };
    o[n++] = (cli_opt){ "-ctk, --cache-type-k", "TYPE", CLI_OPT_CHOICE, &cp->cache_type_k, 0, 0, 0, 0,
                        "KV cache type of K (q8_0: blocks of 32 values with an f16 scale; CUDA: f16 or q8_0, "
                        "K and V alike)",
                        "f32 on the CPU, f16 on CUDA", MF_KV_TYPE_NAMES };
    o[n++] = (cli_opt){ "-ctv, --cache-type-v", "TYPE", CLI_OPT_CHOICE, &cp->cache_type_v, 0, 0, 0, 0,
                        "KV cache type of V (as -ctk)", "f32 on the CPU, f16 on CUDA", MF_KV_TYPE_NAMES };
    return n;
}

int cli_opts_sampler(cli_opt *o, mf_sampler_params *sp) {
    int n = 0;
    o[n++] = (cli_opt){ "--temp", "T", CLI_OPT_FLOAT, &sp->temp, 0, 100, 0, 0, "temperature (0 = greedy)", NULL, NULL };
    o[n++] = (cli_opt){ "--top-k", "K", CLI_OPT_INT, &sp->top_k, 0, 1 << 30, 0, 0, "top-k filter (0 = off)", NULL, NULL };
    o[n++] = (cli_opt){ "--top-p", "P", CLI_OPT_FLOAT, &sp->top_p, 0, 1, 0, 0, "top-p filter (1 = off)", NULL, NULL };
    o[n++] = (cli_opt){ "--min-p", "P", CLI_OPT_FLOAT, &sp->min_p, 0, 1, 0, 0, "min-p filter (0 = off)", NULL, NULL };
    o[n++] = (cli_opt){ "--repeat-penalty", "R", CLI_OPT_FLOAT, &sp->repeat_penalty, 0, 10, 1, 0,
                        "repetition penalty over the last 64 tokens (1 = off)", NULL, NULL };
    o[n++] = (cli_opt){ "--seed", "S", CLI_OPT_SEED, &sp->seed, 0, 0, 0, 0, "RNG seed (-1 = random)", "from the clock",
                        NULL };
    return n;
}

int cli_opts_constraint(cli_opt *o, cli_constraint_opts *co) {
    int n = 0;
    o[n++] = (cli_opt){ "--grammar", "GBNF", CLI_OPT_STR, &co->grammar, 0, 0, 0, 0,
                        "constrain the output to a GBNF grammar (llama.cpp's syntax; rule root)", "", NULL };
    o[n++] = (cli_opt){ "--grammar-file", "PATH", CLI_OPT_STR, &co->grammar_file, 0, 0, 0, 0,
                        "the same, the grammar read from a file", "", NULL };
    o[n++] = (cli_opt){ "-j, --json-schema", "SCHEMA", CLI_OPT_STR, &co->json_schema, 0, 0, 0, 0,
                        "constrain the output to JSON valid against a JSON schema ('{}': any JSON value)", "", NULL };
    o[n++] = (cli_opt){ "--json-schema-file", "PATH", CLI_OPT_STR, &co->json_schema_file, 0, 0, 0, 0,
                        "the same, the schema read from a file", "", NULL };
    return n;
}

int cli_opts_verbosity(cli_opt *o, int *verbose) {
    int n = 0;
    o[n++] = (cli_opt){ "-v, --verbose", NULL, CLI_OPT_FLAG, verbose, 0, 0, 0, 1,
                        "loading and timing details on stderr", "on", NULL };
    o[n++] = (cli_opt){ "-q, --quiet", NULL, CLI_OPT_FLAG, verbose, 0, 0, 0, 0,
                        "no diagnostics except errors (and no backend notice line)", "", NULL };
    return n;
}

/* Does `a` equal one of the comma-separated spellings in names? */
static int opt_matches(const char *names, const char *a) {
    const size_t la = strlen(a);
    for (const char *s = names; *s;) {
        while (*s == ' ' || *s == ',') s++;
        const char *e = s;
        while (*e && *e != ',') e++;
        if ((size_t)(e - s) == la && !strncmp(s, a, la)) return 1;
        s = e;
    }
    return 0;
}

/* "md|json" -> "md, json" */
static void choices_text(const char *choices, char *buf, size_t cap) {
    size_t n = 0;
    for (const char *c = choices; *c && n + 3 < cap; c++) {
        if (*c == '|') buf[n++] = ',', buf[n++] = ' ';
        else buf[n++] = *c;
    }
    buf[n] = 0;
}

static void fmt_num(char *buf, size_t cap, double v, cli_opt_kind kind) {
    if (kind == CLI_OPT_FLOAT) snprintf(buf, cap, "%g", v);
    else snprintf(buf, cap, "%.0f", v);
}

/* Parses s as o's kind, range-checked, into *o->dst. 0 or 1 (message printed). */
static int opt_store(const char *cmd, const cli_opt *o, const char *name, const char *s) {
    char lo[32], hi[32];
    fmt_num(lo, sizeof lo, o->lo, o->kind);
    fmt_num(hi, sizeof hi, o->hi, o->kind);
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_OPT_STR: *(const char **)o->dst = s; return 0;
    case CLI_OPT_INT: {
        const long long v = strtoll(s, &end, 10);
        if (end == s || *end) return cli_error(1, "%s: option %s: '%s' is not an integer", cmd, name, s);
        if (errno == ERANGE || v < (long long)o->lo || v > (long long)o->hi)
            return cli_error(1, "%s: option %s: %s is out of range [%s, %s]", cmd, name, s, lo, hi);
        *(int *)o->dst = (int)v;
        return 0;
    }
    case CLI_OPT_SEED:
        if (!strcmp(s, "-1")) {
            *(uint64_t *)o->dst = SAMPLER_SEED_RANDOM;
            return 0;
        }
        /* fall through */
    case CLI_OPT_U64: {
        while (*s == ' ') s++;
        const unsigned long long v = strtoull(s, &end, 10);
        if (end == s || *end || *s == '-')
            return cli_error(1, "%s: option %s: '%s' is not a non-negative integer%s", cmd, name, s,
                             o->kind == CLI_OPT_SEED ? " (or -1: a random seed)" : "");
        if (errno == ERANGE) return cli_error(1, "%s: option %s: %s is out of range [0, 2^64)", cmd, name, s);
        *(uint64_t *)o->dst = v;
        return 0;
    }
    case CLI_OPT_FLOAT: {
        const float v = strtof(s, &end);
        if (end == s || *end || isnan(v)) return cli_error(1, "%s: option %s: '%s' is not a number", cmd, name, s);
        if (!isfinite(v) || v < o->lo || v > o->hi || (o->lo_open && v == o->lo))
            return cli_error(1, "%s: option %s: %s is out of range %s%s, %s]", cmd, name, s, o->lo_open ? "(" : "[",
                             lo, hi);
        *(float *)o->dst = v;
        return 0;
    }
    case CLI_OPT_INT_LIST: {
        cli_int_list *l = o->dst;
        cli_int_list got = { .n = 0 };
        for (const char *p = s;; p = end + 1) {
            /* strtoll would skip the spaces of " 8" and accept "1,,2" through strtok */
            if (*p == ',' || *p == 0 || *p == ' ')
                return cli_error(1, "%s: option %s: '%s' has an empty or blank item (want N,N,...)", cmd, name, s);
            errno = 0;
            const long long v = strtoll(p, &end, 10);
            if (end == p || (*end && *end != ','))
                return cli_error(1, "%s: option %s: '%s' is not a comma-separated list of integers", cmd, name, s);
            if (errno == ERANGE || v < (long long)o->lo || v > (long long)o->hi)
                return cli_error(1, "%s: option %s: %.*s is out of range [%s, %s]", cmd, name, (int)(end - p), p, lo,
                                 hi);
            if (got.n == CLI_LIST_MAX) return cli_error(1, "%s: option %s: at most %d values", cmd, name, CLI_LIST_MAX);
            got.v[got.n++] = (int)v;
            if (!*end) break;
        }
        *l = got;
        return 0;
    }
    case CLI_OPT_CHOICE: {
        const size_t ls = strlen(s);
        for (const char *c = o->choices; *c;) {
            const char *e = strchr(c, '|');
            const size_t lc = e ? (size_t)(e - c) : strlen(c);
            if (lc == ls && !strncmp(c, s, ls)) {
                *(const char **)o->dst = s;
                return 0;
            }
            c += lc + (e != NULL);
        }
        char names[256];
        choices_text(o->choices, names, sizeof names);
        return cli_error(1, "%s: option %s: '%s' is not one of: %s", cmd, name, s, names);
    }
    case CLI_OPT_FLAG: break;
    }
    return cli_error(1, "%s: option %s: internal error (kind %d)", cmd, name, (int)o->kind);
}

/* The "default ..." text of a row, or "" for none. */
static void opt_default(const cli_opt *o, char *buf, size_t cap) {
    buf[0] = 0;
    if (o->dflt) {
        if (*o->dflt) snprintf(buf, cap, "default %s", o->dflt);
        return;
    }
    switch (o->kind) {
    case CLI_OPT_STR: {
        const char *v = *(const char **)o->dst;
        if (v) snprintf(buf, cap, "default %s", v);
        break;
    }
    case CLI_OPT_INT: snprintf(buf, cap, "default %d", *(const int *)o->dst); break;
    case CLI_OPT_U64:
    case CLI_OPT_SEED: snprintf(buf, cap, "default %llu", (unsigned long long)*(const uint64_t *)o->dst); break;
    case CLI_OPT_FLOAT: snprintf(buf, cap, "default %g", (double)*(const float *)o->dst); break;
    case CLI_OPT_INT_LIST: {
        const cli_int_list *l = o->dst;
        size_t k = (size_t)snprintf(buf, cap, "default");
        for (int i = 0; i < l->n && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%c%d", i ? ',' : ' ', l->v[i]);
        if (!l->n) snprintf(buf, cap, "default none");
        break;
    }
    case CLI_OPT_CHOICE: {
        const char *v = *(const char **)o->dst;
        if (v) snprintf(buf, cap, "default %s", v);
        break;
    }
    case CLI_OPT_FLAG: break;
    }
}

void cli_usage(FILE *f, const char *synopsis, const char *notes, const cli_opt *opts, int n) {
    fprintf(f, "%s\n", synopsis);
    if (notes) fprintf(f, "%s", notes);
    fprintf(f, "  -h, --help            this text\n");
    for (int i = 0; i < n; i++) {
        char head[64], dflt[192];
        snprintf(head, sizeof head, "%s%s%s", opts[i].names, opts[i].metavar ? " " : "",
                 opts[i].metavar ? opts[i].metavar : "");
        opt_default(&opts[i], dflt, sizeof dflt);
        if (opts[i].kind == CLI_OPT_CHOICE && opts[i].choices) { /* the names the parser takes, from the row */
            char names[80], d[96];
            choices_text(opts[i].choices, names, sizeof names);
            snprintf(d, sizeof d, "%s", dflt);
            snprintf(dflt, sizeof dflt, "one of: %s%s%s", names, d[0] ? "; " : "", d);
        }
        /* "text (0 = off)" + " (default 40)" reads as "text (0 = off; default 40)" */
        const char *h = opts[i].help;
        const size_t hl = strlen(h);
        const int merge = dflt[0] && hl && h[hl - 1] == ')';
        if (strlen(head) > 20) fprintf(f, "  %s\n", head), head[0] = 0;
        if (merge) fprintf(f, "  %-20s  %.*s; %s)\n", head, (int)hl - 1, h, dflt);
        else if (dflt[0]) fprintf(f, "  %-20s  %s (%s)\n", head, h, dflt);
        else fprintf(f, "  %-20s  %s\n", head, h);
    }
}

int cli_parse(const char *cmd, const char *synopsis, const char *notes, const cli_opt *opts, int n, int argc,
              char **argv) {
    /* --help shows the defaults, so it is printed from the values before parsing:
     * find it first (`minfer run --temp 0 --help` still shows the default 0.8). */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            cli_usage(stdout, synopsis, notes, opts, n);
            return -1;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const cli_opt *o = NULL;
        for (int k = 0; k < n && !o; k++)
            if (opt_matches(opts[k].names, a)) o = &opts[k];
        if (!o) {
            if (a[0] != '-' || !a[1])
                return cli_error(1, "%s: unexpected argument '%s' (options take the form -x VALUE; see minfer %s --help)",
                                 cmd, a, cmd);
            return cli_error(1, "%s: unknown option '%s' (see minfer %s --help)", cmd, a, cmd);
        }
        if (o->kind == CLI_OPT_FLAG) {
            *(int *)o->dst = o->set;
            continue;
        }
        if (i + 1 >= argc) return cli_error(1, "%s: option %s needs a value (%s)", cmd, a, o->metavar);
        if (opt_store(cmd, o, a, argv[++i])) return 1;
    }
    return 0;
}

int cli_context_check(mf_context_params *cp) {
    int use_cuda = 0, gpu = 0;
    mf_err err = { { 0 } };
    if (context_device_check(cp->device, &use_cuda, &gpu, &err)) return cli_error(1, "%s", err.msg);
    if (cp->tensor_split_arg) {
        if (cp->n_gpus < 2) return cli_error(1, "--tensor-split needs --gpus 2 or more");
        if (tp_parse_split(cp->tensor_split_arg, cp->n_gpus, cp->tensor_split_buf, &err))
            return cli_error(1, "%s", err.msg);
        cp->tensor_split = cp->tensor_split_buf;
    }
    if (context_gpus_check(cp->device, cp->n_gpus, &err)) return cli_error(1, "%s", err.msg);
    /* More threads than cores only adds waiting: the pool's threads each hold a part
     * of every step, and a thread without a core holds it until the kernel runs it
     * again (issue 32: -t 1000 on 2 cores had not printed 4 tokens after 60 s). */
    const int cores = cpu_count_cores();
    if (!use_cuda && cp->n_threads > cores) {
        mf_log("warning: -t %d is more than the %d core%s this process may use; using %d", cp->n_threads, cores,
               cores == 1 ? "" : "s", cores);
        cp->n_threads = cores;
    }
    return 0;
}

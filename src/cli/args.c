/* args.c - see args.h. */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int arg_value(int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) return cli_error(1, "option %s needs a value", argv[*i]);
    *out = argv[++*i];
    return 0;
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end) return cli_error(1, "option %s: '%s' is not an integer", opt, s);
    if (errno == ERANGE || v < lo || v > hi) return cli_error(1, "option %s: %s is out of range [%ld, %ld]", opt, s, lo, hi);
    *out = v;
    return 0;
}

int arg_int(int argc, char **argv, int *i, long lo, long hi, int *out) {
    const char *opt = argv[*i], *s = NULL;
    long v;
    if (arg_value(argc, argv, i, &s) || parse_long(opt, s, lo, hi, &v)) return 1;
    *out = (int)v;
    return 0;
}

int arg_u64(int argc, char **argv, int *i, uint64_t *out) {
    const char *opt = argv[*i], *s = NULL;
    if (arg_value(argc, argv, i, &s)) return 1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') return cli_error(1, "option %s: '%s' is not a non-negative integer", opt, s);
    *out = v;
    return 0;
}

int arg_float(int argc, char **argv, int *i, float lo, float hi, float *out) {
    const char *opt = argv[*i], *s = NULL;
    if (arg_value(argc, argv, i, &s)) return 1;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return cli_error(1, "option %s: '%s' is not a number", opt, s);
    if (v < lo || v > hi) return cli_error(1, "option %s: %g out of range [%g, %g]", opt, v, lo, hi);
    *out = v;
    return 0;
}

int arg_int_list(int argc, char **argv, int *i, long lo, long hi, int *out, int cap, int *n) {
    const char *opt = argv[*i], *s = NULL;
    if (arg_value(argc, argv, i, &s)) return 1;
    *n = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf) return cli_error(1, "option %s: list too long", opt);
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        long v;
        if (*n >= cap) return cli_error(1, "option %s: at most %d values", opt, cap);
        if (parse_long(opt, tok, lo, hi, &v)) return 1;
        out[(*n)++] = (int)v;
    }
    if (*n == 0) return cli_error(1, "option %s: empty list", opt);
    return 0;
}

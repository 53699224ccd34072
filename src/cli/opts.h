/* opts.h - one table of options per command: the parser and the --help text are
 * both made from it, so they cannot disagree (issue 32).
 *
 * A command lists its options as cli_opt rows pointing at its own variables, then
 * calls cli_parse. Defaults shown by --help are read from those variables before
 * parsing (or given as text where the value alone would mislead, e.g. "all cores"
 * for 0). Every number is checked against its row's range when parsed, so a bad
 * value is a usage error before anything is loaded. */
#ifndef MINFER_CLI_OPTS_H
#define MINFER_CLI_OPTS_H

#include <stdint.h>
#include <stdio.h>

#include "context.h"
#include "sampler.h"

typedef enum cli_opt_kind {
    CLI_OPT_FLAG,   /* no value: stores `set` into *(int *)dst */
    CLI_OPT_STR,    /* const char ** */
    CLI_OPT_INT,    /* int *, in [lo, hi] */
    CLI_OPT_U64,    /* uint64_t *, non-negative */
    CLI_OPT_SEED,   /* uint64_t *, non-negative, or -1: SAMPLER_SEED_RANDOM (llama.cpp's --seed -1) */
    CLI_OPT_FLOAT,  /* float *, finite, in [lo, hi] ((lo, hi] with lo_open) */
    CLI_OPT_INT_LIST, /* cli_int_list *: comma separated, each in [lo, hi], at most CLI_LIST_MAX */
    CLI_OPT_CHOICE, /* const char **: one of the '|'-separated names in `choices` */
} cli_opt_kind;

/* The value of a CLI_OPT_INT_LIST row ("512,3314"). A command sets its default
 * (v, n) before parsing; a given value replaces it whole. */
#define CLI_LIST_MAX 16
typedef struct cli_int_list {
    int v[CLI_LIST_MAX];
    int n;
} cli_int_list;

typedef struct cli_opt {
    const char *names;     /* "-m, --model": every spelling, comma separated */
    const char *metavar;   /* "PATH" (NULL for flags) */
    cli_opt_kind kind;
    void *dst;
    double lo, hi;         /* numbers: the accepted range */
    int lo_open;           /* FLOAT: lo itself is not accepted */
    int set;               /* FLAG: the value stored */
    const char *help;      /* one line */
    const char *dflt;      /* --help's "(default ...)": NULL = read from *dst, "" = none shown */
    const char *choices;   /* CHOICE: "md|json"; --help lists them ("one of: md, json") */
} cli_opt;

/* The rows shared by run, chat (and the option names of bench): context options
 * (--ctx, --device, -t) and sampler options (--temp ... --seed). Each writes at
 * most CLI_OPTS_MAX_GROUP rows into out and returns how many. */
#define CLI_OPTS_MAX_GROUP 8
int cli_opts_context(cli_opt *out, mf_context_params *cp);
int cli_opts_sampler(cli_opt *out, mf_sampler_params *sp);
/* --grammar, --grammar-file, --json-schema, --json-schema-file (run and chat): the
 * output constrained to a GBNF grammar or a JSON schema (at most one of the four). */
typedef struct cli_constraint_opts {
    const char *grammar, *grammar_file, *json_schema, *json_schema_file;
} cli_constraint_opts;
int cli_opts_constraint(cli_opt *out, cli_constraint_opts *co);
/* -v/--verbose and -q/--quiet, both writing *verbose. */
int cli_opts_verbosity(cli_opt *out, int *verbose);

/* Parses argv[1..argc) against opts[0..n). Returns 0 when parsing succeeded, 1 after
 * a usage error (one "minfer: error: CMD: ..." line printed), or -1 when -h/--help
 * was given (the usage was printed to stdout; the command should exit 0). */
int cli_parse(const char *cmd, const char *synopsis, const char *notes, const cli_opt *opts, int n, int argc,
              char **argv);
/* The usage text: synopsis, notes (may be NULL), then one line per option. */
void cli_usage(FILE *f, const char *synopsis, const char *notes, const cli_opt *opts, int n);

/* After parsing run/chat/bench options: the checks that need no model. Clamps more
 * threads than cores (one warning line), checks the device name against this build
 * and machine. Returns 0 or an exit code (1) with the error printed. */
int cli_context_check(mf_context_params *cp);

#endif

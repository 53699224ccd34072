/* common.h - what run/chat/bench share: loading a model with progress on stderr,
 * and reading a whole file. */
#ifndef MINFER_CLI_COMMON_H
#define MINFER_CLI_COMMON_H

#include <stddef.h>

#include "context.h"
#include "model.h"
#include "sampler.h"

/* Loads the model and creates a context; prints one line of progress and one line
 * describing model and device on stderr. Returns an exit code (0 ok). */
int cli_load(const char *path, const mf_context_params *cp, mf_model *m, mf_context *c, int verbose);
/* Options shared by run, chat and bench. Each returns 1 when argv[*i] is one of its
 * options (consuming its value; *bad set to 1 on a bad value), 0 otherwise.
 *   context: --ctx N, --device D, -t/--threads N
 *   sampler: --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed */
int cli_context_opt(int argc, char **argv, int *i, mf_context_params *cp, int *bad);
int cli_sampler_opt(int argc, char **argv, int *i, mf_sampler_params *sp, int *bad);

/* Generation loop shared by run and chat: sample, stop at end-of-generation,
 * stream the text to stdout (partial UTF-8 held back), evaluate the token. */
typedef struct cli_gen {
    int n_max;        /* tokens to sample at most */
    int ignore_eog;   /* keep going past end-of-generation tokens */
    int decode_last;  /* also evaluate the last sampled token (chat: the cache must
                         hold every token it printed); else the last is only printed */
    int strip_first;  /* SPM: drop the leading space of the first piece (after BOS) */
    int keep_text;    /* collect the printed text in text/len (malloc'd, NUL-terminated) */
    char *text;
    size_t len, cap;
    int32_t *toks;    /* when non-NULL: the evaluated ids are appended at toks[n_toks] */
    int n_toks;
} cli_gen;

/* Starts from the logits of the last evaluated token of seq. Stops early when the
 * sequence's cache is full and a token would need evaluating. Ends the printed text
 * with a newline. Returns the number of tokens sampled (the end-of-generation token
 * not counted), or a negative status with err filled. */
int cli_generate(mf_context *c, mf_sampler *smp, int seq, const float *logits, cli_gen *g, mf_err *err);

/* Reads a whole file (text prompt); NULL + message on failure. *len set. */
char *cli_read_file(const char *path, size_t *len);

#endif

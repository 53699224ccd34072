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

/* Reads a whole file (text prompt); NULL + message on failure. *len set. */
char *cli_read_file(const char *path, size_t *len);

#endif

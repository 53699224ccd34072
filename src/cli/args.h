/* args.h - small, strict option-value parsers shared by the subcommands.
 * Each returns 0 on success or prints "minfer: error: ..." and returns 1 (usage). */
#ifndef MINFER_ARGS_H
#define MINFER_ARGS_H

#include <stdint.h>

/* Takes the value of option argv[*i] (advancing *i); error when missing. */
int arg_value(int argc, char **argv, int *i, const char **out);
int arg_int(int argc, char **argv, int *i, long lo, long hi, int *out);
int arg_u64(int argc, char **argv, int *i, uint64_t *out);
int arg_float(int argc, char **argv, int *i, float lo, float hi, float *out);
/* Comma-separated list of ints in [lo, hi]; at most cap values. */
int arg_int_list(int argc, char **argv, int *i, long lo, long hi, int *out, int cap, int *n);

#endif

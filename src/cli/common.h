/* common.h - what run/chat/bench share: loading a model with progress on stderr,
 * and reading a whole file. */
#ifndef MINFER_CLI_COMMON_H
#define MINFER_CLI_COMMON_H

#include <signal.h>
#include <stddef.h>

#include "constraint.h"
#include "context.h"
#include "model.h"
#include "opts.h"
#include "prompt.h"
#include "sampler.h"

/* Loads the model and creates a context; prints one line of progress and one line
 * describing model and device on stderr. First checks the device and the thread
 * count (cli_context_check), and after loading warns when --ctx exceeds the
 * model's trained context. Returns an exit code (0 ok). */
int cli_load(const char *path, const mf_context_params *cp, mf_model *m, mf_context *c, int verbose);
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
    volatile sig_atomic_t *stop; /* when non-NULL and non-zero: stop before the next token (Ctrl-C) */
    int stopped;                 /* set when *stop ended the generation */
    int ctx_full;                /* set when the sequence's cache filled (decode_last) */
    mf_constraint *con;          /* when non-NULL: only tokens it allows are sampled, and the
                                    generation ends where its grammar's text is done */
} cli_gen;

/* Starts from the logits of the last evaluated token of seq. Stops early when the
 * sequence's cache is full and a token would need evaluating. Ends the printed text
 * with a newline. Returns the number of tokens sampled (the end-of-generation token
 * not counted), or a negative status with err filled; a write to stdout that fails
 * (a full disk, a closed pipe) stops it with MF_ERR_IO and the reason. */
int cli_generate(mf_context *c, mf_sampler *smp, int seq, const float *logits, cli_gen *g, mf_err *err);

/* The chat template of a model (prompt.h) read off its GGUF and vocabulary: file
 * (--chat-template-file) or name (--chat-template) override the model's own. Logs
 * "CMD: chat template: LABEL" unless quiet. Returns 0, or an exit code (1 unknown
 * name, 2 unreadable or unparseable file) with the error printed. */
int cli_prompt_init(prompt_tmpl *p, const gguf_file *g, const mf_vocab *v, const char *file, const char *name,
                    const char *cmd, int verbose);

/* Reads a whole file (text prompt), "-" standard input; NULL + message (with the
 * reason: strerror) on failure. *len set. */
char *cli_read_file(const char *path, size_t *len);

/* The constraint options (cli_opts_constraint) compiled, before a model is loaded:
 * 0 with *g (NULL when none was given), or an exit code with the error printed (1:
 * two of them given, 2: a file that cannot be read, a grammar or schema refused). */
int cli_constraint_compile(const cli_constraint_opts *co, gram **g);
/* The model's vocabulary trie and a constraint over g: 0, or an exit code (2) with
 * the error printed. */
int cli_constraint_new(const gram *g, const mf_model *m, int strip_first, gram_vocab **tv, mf_constraint **con);

#endif

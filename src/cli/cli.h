/* cli.h - subcommands of the minfer binary. Each returns the process exit status:
 * 0 success, 1 usage error, 2 invalid input (DESIGN.md). Diagnostics go to stderr
 * as "minfer: error: ..."; only generated text / requested output goes to stdout. */
#ifndef MINFER_CLI_H
#define MINFER_CLI_H

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_template(int argc, char **argv);

/* Prints "minfer: error: <msg>" and returns code (for `return cli_error(2, ...)`). */
int cli_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A load error: "minfer: error: PATH: MSG", or MSG alone where it names PATH already
 * (the GGUF parser's messages do: not "X: gguf: X: ..."). Returns code. */
int cli_load_error(int code, const char *path, const char *msg);
/* Maps a negative mf_status to an exit code (usage -> 1, everything else -> 2). */
int cli_status_exit(int status);

#endif

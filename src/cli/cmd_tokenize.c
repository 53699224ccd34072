/* cmd_tokenize.c - `minfer tokenize -m MODEL [--no-bos] [--special]`: UTF-8 text on
 * stdin -> token ids, space separated, one line on stdout. Only the GGUF metadata is
 * needed (vocab-only files work): the weights are never touched. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "gguf.h"
#include "tokenizer.h"
#include "util.h"

/* Reads all of stdin (any bytes). NULL on failure, with a message already printed. */
static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) { cli_error(2, "tokenize: out of memory"); return NULL; }
    for (;;) {
        if (n == cap) {
            if (cap > ((size_t)1 << 40)) { free(buf); cli_error(2, "tokenize: input too large"); return NULL; }
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); cli_error(2, "tokenize: out of memory reading stdin (%zu bytes so far)", n); return NULL; }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (r == 0) {
            if (ferror(stdin)) { free(buf); cli_error(2, "tokenize: error reading stdin"); return NULL; }
            break;
        }
    }
    *len = n;
    return buf;
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL;
    int no_bos = 0, special = 0, verbose = 1;
    cli_opt opts[3 + CLI_OPTS_MAX_GROUP] = {
        { "-m, --model", "PATH", CLI_OPT_STR, &path, .help = "GGUF model file (the vocabulary is enough)", .dflt = "" },
        { "--no-bos", NULL, CLI_OPT_FLAG, &no_bos, .set = 1, .help = "no BOS (or EOS) even where the tokenizer adds them",
          .dflt = "" },
        { "--special", NULL, CLI_OPT_FLAG, &special, .set = 1,
          .help = "control-token texts in the input (e.g. <|im_start|>) become those tokens", .dflt = "" },
    };
    const int n_opts = 3 + cli_opts_verbosity(opts + 3, &verbose);
    int prc = cli_parse("tokenize", "usage: minfer tokenize -m MODEL [--no-bos] [--special]",
                        "  reads UTF-8 text on stdin, prints its token ids space separated on one line\n", opts,
                        n_opts, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose;
    if (!path) return cli_error(1, "tokenize: -m MODEL is required");

    mf_err err = { { 0 } };
    gguf_file f;
    int rc = gguf_open(&f, path, &err);
    if (rc) return cli_load_error(2, path, err.msg);
    mf_vocab *v = NULL;
    rc = tok_load(&v, &f, &err);
    gguf_close(&f); /* the vocab keeps its own copies of everything it needs */
    if (rc) return cli_load_error(2, path, err.msg);

    size_t len = 0;
    char *text = read_stdin(&len);
    if (!text) { tok_free(v); return 2; }
    int32_t *ids = NULL;
    int n = tok_encode(v, text, len, !no_bos, special, &ids, &err);
    free(text);
    tok_free(v);
    if (n < 0) return cli_error(2, "tokenize: %s", err.msg);

    /* Formatted by hand into one buffer: printf per id cost as much as encoding. Ids
     * are in [0, 2^31), at most 10 digits + a separator each. */
    char *line = malloc((size_t)n * 11 + 2);
    if (!line) { free(ids); return cli_error(2, "tokenize: out of memory for %d ids", n); }
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        char digits[12];
        int k = 0;
        uint32_t x = (uint32_t)ids[i];
        do { digits[k++] = (char)('0' + x % 10); x /= 10; } while (x);
        if (i) line[o++] = ' ';
        while (k) line[o++] = digits[--k];
    }
    line[o++] = '\n';
    free(ids);
    size_t w = fwrite(line, 1, o, stdout);
    free(line);
    if (w != o || fflush(stdout) != 0) return cli_error(2, "tokenize: error writing stdout");
    return 0;
}

/* main.c - the minfer command line: dispatch to subcommands (cli.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "cpu/paths_cpu.h"
#include "cuda/paths.h"
#include "util.h"

int cli_error(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("minfer: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int cli_load_error(int code, const char *path, const char *msg) {
    if (path && *path && strstr(msg, path)) return cli_error(code, "%s", msg);
    return cli_error(code, "%s: %s", path, msg);
}

int cli_status_exit(int status) { return status == MF_ERR_USAGE ? 1 : 2; }

static const char usage[] =
    "usage: minfer COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  run       generate text from a prompt          minfer run -m MODEL -p PROMPT [-n N] [--temp T] ...\n"
    "  chat      interactive multi-turn chat          minfer chat -m MODEL\n"
    "  tokenize  print the token ids of stdin         minfer tokenize -m MODEL [--no-bos] [--special]\n"
    "  bench     prefill/decode throughput            minfer bench -m MODEL [-p 512] [-n 128] [-r 3]\n"
    "  synth     write a random-weight llama model    minfer synth --shape 1b --quant q4_k_m -o OUT.gguf\n"
    "  info      describe a GGUF model                minfer info -m MODEL\n"
    "  serve     OpenAI-compatible HTTP server        minfer serve -m MODEL [--port 8080] [--parallel N]\n"
    "  perplexity  of a text, as llama-perplexity     minfer perplexity -m MODEL -f TEXT [--ctx 512]\n"
    "  template  the rendered prompt of a request    minfer template -m MODEL < request.json\n"
    "  paths     the backends' optional fast paths    minfer paths (names for MINFER_CPU/CUDA_DISABLE)\n"
    "\n"
    "Run `minfer COMMAND --help` for the options of a command; `minfer --version` for the version.\n"
    "Exit status: 0 success, 1 usage error, 2 invalid input (bad model file, unsupported type, ...).\n";

/* The release this tree is; bumped by hand with the README's figures. */
#define MINFER_VERSION "0.1.0"

static void print_version(void) {
    printf("minfer %s (CPU: AVX-512/AVX2 kernels chosen at run time; CUDA backend: %s)\n", MINFER_VERSION,
#ifdef MINFER_CUDA
           "built in"
#else
           "not built (CUDA=0)"
#endif
    );
}

static const char paths_notes[] =
    "  Each backend's optional fast paths (a SIMD kernel set, a weight plane, a fused launch, the\n"
    "  decode graph): what runs when one is on and what runs instead when it is off. The notice\n"
    "  line a run prints at the start names the paths that ran; an environment variable turns\n"
    "  paths off for a run (MINFER_CUDA_DISABLE=graph,mmq minfer run ...), to compare speed or to\n"
    "  rule a path out when output looks wrong: the fallbacks give the same tokens.\n";

/* `minfer paths`: the backends' tables of optional paths, as the notice lines name them
 * (moved out of the top-level --help: issue 56). */
static int cmd_paths(int argc, char **argv) {
    int prc = cli_parse("paths", "usage: minfer paths", paths_notes, NULL, 0, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    fputs("CPU backend: ", stdout);
    paths_print(cpu_paths, CPU_PATH_COUNT, "MINFER_CPU_DISABLE", stdout);
#ifdef MINFER_CUDA
    fputs("\nCUDA backend: ", stdout);
#else
    fputs("\nCUDA backend (not in this build: CUDA=0): ", stdout);
#endif
    paths_print(cu_paths, CU_PATH_COUNT, "MINFER_CUDA_DISABLE", stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        if (argc < 2) return cli_error(1, "no command given");
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) {
        print_version();
        return 0;
    }
    const char *cmd = argv[1];
    static const struct { const char *name; int (*fn)(int, char **); } cmds[] = {
        { "run", cmd_run },     { "chat", cmd_chat },   { "tokenize", cmd_tokenize },
        { "bench", cmd_bench }, { "synth", cmd_synth }, { "info", cmd_info },   { "serve", cmd_serve },
        { "perplexity", cmd_perplexity }, { "paths", cmd_paths }, { "template", cmd_template },
    };
    for (size_t i = 0; i < MF_ARRAY_LEN(cmds); i++) {
        if (strcmp(cmd, cmds[i].name)) continue;
        int rc = cmds[i].fn(argc - 1, argv + 1);
        /* Output that did not reach its file is a failure, whichever command wrote it
         * (`minfer info > /dev/full` exited 0: issue 56). A command that saw its write
         * fail has said so already (rc != 0). */
        errno = 0;
        if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))
            rc = cli_error(2, "%s: writing standard output: %s", cmd, errno ? strerror(errno) : "write error");
        return rc;
    }
    return cli_error(1, "unknown %s '%s' (commands: run, chat, tokenize, bench, synth, info, perplexity, serve, template, paths; see minfer --help)",
                     cmd[0] == '-' ? "option" : "command", cmd);
}

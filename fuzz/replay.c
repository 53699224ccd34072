/* replay.c - runs a fuzz target's LLVMFuzzerTestOneInput over files, without
 * libFuzzer: `make test` links each fuzz/fuzz_*.c with this main and the ASan+UBSan
 * library (gcc), and replays fuzz/corpus/<target>/ and fuzz/regress/<target>/ (the
 * inputs that once crashed or hung a target) on every run.
 *
 * Usage: replay_<target> DIR|FILE ...   Each file runs in a child process, so one
 * crash is counted as one failure and the rest still run; a child that runs longer
 * than 20 s counts as a hang. Prints "RESULT replay_<target> passed=P failed=F
 * skipped=S" for tests/run.sh. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);
/* A target sets this when its inputs are unavailable (the tokenizer's vocabularies). */
__attribute__((weak)) extern const char *fuzz_unavailable;

static int passed, failed, skipped;
static const char *name = "replay";

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "FAIL %s: %s\n", path, strerror(errno)); return -1; }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) { cap *= 2; uint8_t *nb = realloc(buf, cap); if (!nb) { free(buf); buf = NULL; } else buf = nb; }
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "FAIL %s: out of memory\n", path); return -1; }
    /* an exact-size copy, so a read past the input's end is an ASan report */
    uint8_t *in = malloc(n ? n : 1);
    if (!in) { free(buf); return -1; }
    memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

static void one(const char *path) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { fprintf(stderr, "FAIL %s: fork: %s\n", path, strerror(errno)); failed++; return; }
    if (pid == 0) {
        alarm(20);
        _exit(run_file(path) == 0 ? 0 : 3);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) { passed++; return; }
    failed++;
    if (WIFSIGNALED(st))
        fprintf(stderr, "FAIL %s %s: %s\n", name, path,
                WTERMSIG(st) == SIGALRM ? "hang (over 20 s)" : strsignal(WTERMSIG(st)));
    else fprintf(stderr, "FAIL %s %s: exit %d\n", name, path, WEXITSTATUS(st));
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void walk(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return; /* an absent directory holds no inputs */
    if (!S_ISDIR(sb.st_mode)) { one(path); return; }
    DIR *d = opendir(path);
    if (!d) { fprintf(stderr, "FAIL %s: %s\n", path, strerror(errno)); failed++; return; }
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (nn == cap) {
            cap = cap ? 2 * cap : 64;
            char **nb = realloc(names, cap * sizeof *names);
            if (!nb) break;
            names = nb;
        }
        names[nn] = strdup(e->d_name);
        if (names[nn]) nn++;
    }
    closedir(d);
    qsort(names, nn, sizeof *names, cmp_str);
    for (size_t i = 0; i < nn; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        walk(p);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv) {
    const char *slash = strrchr(argv[0], '/');
    name = slash ? slash + 1 : argv[0];
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    if (&fuzz_unavailable && fuzz_unavailable) {
        fprintf(stderr, "SKIP: %s: %s\n", name, fuzz_unavailable);
        skipped++;
    } else {
        for (int i = 1; i < argc; i++) walk(argv[i]);
        if (passed + failed == 0) { fprintf(stderr, "FAIL %s: no inputs\n", name); failed++; }
    }
    printf("RESULT %s passed=%d failed=%d skipped=%d\n", name, passed, failed, skipped);
    return failed ? 1 : 0;
}

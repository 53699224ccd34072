/* test.h - a minimal test harness: CHECK macros that count, and a summary line
 * that tests/run.sh adds up ("RESULT passed=P failed=F skipped=S"). */
#ifndef MINFER_TEST_H
#define MINFER_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_passed, test_failed, test_skipped;

#define CHECK(cond, ...) do { \
    if (cond) { test_passed++; } else { test_failed++; \
        fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

#define SKIP(...) do { test_skipped++; fprintf(stderr, "SKIP: "); fprintf(stderr, __VA_ARGS__); \
    fputc('\n', stderr); } while (0)

/* Path to ../shared relative to the repo root (tests run from the root); NULL when absent. */
static inline const char *test_shared_dir(void) {
    const char *env = getenv("MINFER_SHARED");
    static char buf[1024];
    const char *cands[] = { env, "../shared", NULL };
    for (int i = 0; i < 2; i++) {
        if (!cands[i]) continue;
        snprintf(buf, sizeof buf, "%s/DESIGN.md", cands[i]);
        FILE *f = fopen(buf, "rb");
        if (f) { fclose(f); snprintf(buf, sizeof buf, "%s", cands[i]); return buf; }
    }
    return NULL;
}

/* The index of x's largest value (the first of equals) and, where margin, how far the
 * runner-up is below it (0 for n == 1). */
static inline int test_argmax(const float *x, int n, float *margin) {
    int a = 0, b = -1;
    for (int i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    for (int i = 0; i < n; i++)
        if (i != a && (b < 0 || x[i] > x[b])) b = i;
    if (margin) *margin = b >= 0 ? x[a] - x[b] : 0.0f;
    return a;
}

static inline int test_summary(const char *name) {
    printf("RESULT %s passed=%d failed=%d skipped=%d\n", name, test_passed, test_failed, test_skipped);
    return test_failed ? 1 : 0;
}

#endif

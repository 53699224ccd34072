/* paths.h - a backend's table of optional fast paths.
 *
 * Each optional path (a SIMD kernel set, a weight plane, a fused launch, the decode
 * graph) is one row: a name, a one-line doc and its default. One environment
 * variable per backend (MINFER_CPU_DISABLE, MINFER_CUDA_DISABLE) lists the names to
 * turn off, comma separated. The notice line, `minfer paths`, the README and the tests all
 * read the same table, so a path cannot exist without its name, doc and off-switch.
 *
 *   static const mf_path TAB[] = { { "avx2", "AVX2/FMA kernels", 1 }, ... };
 *   int on[MF_ARRAY_LEN(TAB)];
 *   if (paths_resolve(TAB, MF_ARRAY_LEN(TAB), "MINFER_CPU_DISABLE", on, err)) ...
 */
#ifndef MINFER_PATHS_H
#define MINFER_PATHS_H

#include <stddef.h>

#include "util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_path {
    const char *name;  /* [a-z0-9-]+, unique in its table */
    const char *doc;   /* one line: what runs when it is on, what runs instead when off */
    int dflt;          /* 1: on unless disabled */
} mf_path;

/* on[i] = tab[i].dflt && tab[i].name not listed in getenv(var). "all" disables every
 * path. An unknown name is MF_ERR_USAGE with a message that lists the valid names. */
int paths_resolve(const mf_path *tab, int n, const char *var, int *on, mf_err *err);
/* Parses a list given directly (the same rules; list may be NULL or empty). */
int paths_parse(const mf_path *tab, int n, const char *list, const char *var, int *on, mf_err *err);
/* Index of name in tab, or -1. */
int paths_find(const mf_path *tab, int n, const char *name);
/* Writes "name name ..." of the paths that are off although on by default (the
 * notice's "disabled:" part); returns the count. */
int paths_disabled(const mf_path *tab, int n, const int *on, char *buf, size_t cap);
/* Prints the table as `minfer paths` and the README show it: one line per path. */
void paths_print(const mf_path *tab, int n, const char *var, void *file /* FILE* */);

#ifdef __cplusplus
}
#endif
#endif

/* paths.c - the table of optional fast paths (paths.h). */
#include "paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int paths_find(const mf_path *tab, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(tab[i].name, name) == 0) return i;
    return -1;
}

static void list_names(const mf_path *tab, int n, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o < cap; i++) {
        int w = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", tab[i].name);
        if (w < 0) break;
        o += (size_t)w;
    }
}

int paths_parse(const mf_path *tab, int n, const char *list, const char *var, int *on, mf_err *err) {
    for (int i = 0; i < n; i++) on[i] = tab[i].dflt != 0;
    if (!list || !*list) return MF_OK;
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char name[64];
        while (len && (*p == ' ')) { p++; len--; }
        while (len && p[len - 1] == ' ') len--;
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, p, len);
        name[len] = 0;
        if (len == 0) {
            /* "a,,b" or a trailing comma: nothing to disable */
        } else if (strcmp(name, "all") == 0) {
            for (int i = 0; i < n; i++) on[i] = 0;
        } else {
            int i = paths_find(tab, n, name);
            if (i < 0) {
                char names[400];
                list_names(tab, n, names, sizeof names);
                return mf_fail(err, MF_ERR_USAGE, "%s: unknown path '%s' (known: %s, all)", var, name, names);
            }
            on[i] = 0;
        }
        if (!e) break;
        p = e + 1;
    }
    return MF_OK;
}

int paths_resolve(const mf_path *tab, int n, const char *var, int *on, mf_err *err) {
    return paths_parse(tab, n, getenv(var), var, on, err);
}

int paths_disabled(const mf_path *tab, int n, const int *on, char *buf, size_t cap) {
    size_t o = 0;
    int k = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < n; i++) {
        if (!tab[i].dflt || on[i]) continue;
        if (o < cap) {
            int w = snprintf(buf + o, cap - o, "%s%s", k ? " " : "", tab[i].name);
            if (w > 0) o += (size_t)w;
        }
        k++;
    }
    return k;
}

void paths_print(const mf_path *tab, int n, const char *var, void *file) {
    FILE *f = file;
    fprintf(f, "optional paths (%s=name,... or all turns them off):\n", var);
    for (int i = 0; i < n; i++)
        fprintf(f, "  %-16s %s%s\n", tab[i].name, tab[i].doc, tab[i].dflt ? "" : " (off by default)");
}

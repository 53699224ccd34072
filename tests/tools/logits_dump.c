/* logits_dump - evaluates a token list and writes the last token's logits as raw
 * f32 to stdout, through the public API. Used by tests/forward_oracle_test.py and
 * by GPU-vs-CPU comparisons.
 *   logits_dump MODEL DEVICE ID [ID...]      (DEVICE: cpu | cuda) */
#include <stdio.h>
#include <stdlib.h>

#include "minfer.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: logits_dump MODEL cpu|cuda ID [ID...]\n");
        return 1;
    }
    char err[512];
    minfer_model *m = minfer_model_load(argv[1], err, sizeof err);
    if (!m) { fprintf(stderr, "minfer: error: %s\n", err); return 2; }
    int n = argc - 3;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)atoi(argv[3 + i]);
    minfer_ctx_params p = { .n_ctx = n < 256 ? 256 : n, .device = argv[2] };
    minfer_ctx *c = minfer_ctx_new(m, &p, err, sizeof err);
    if (!c) { fprintf(stderr, "minfer: error: %s\n", err); return 2; }
    const float *lg = minfer_eval(c, 0, ids, n, err, sizeof err);
    if (!lg) { fprintf(stderr, "minfer: error: %s\n", err); return 2; }
    fwrite(lg, sizeof(float), (size_t)minfer_n_vocab(m), stdout);
    minfer_ctx_free(c);
    minfer_model_free(m);
    free(ids);
    return 0;
}

/* greedy_trace.c - greedy decoding with the top-2 of every step, for comparing minfer's
 * greedy output with another engine's (bench/greedy_vs_llama.sh):
 *   greedy_trace MODEL PROMPT N [cpu|cuda]
 * prints one line per generated token: step, id, top-1 logit, runner-up id, its logit,
 * the margin (top-1 - top-2) and the piece's bytes as a C-escaped string. The prompt is
 * tokenized with BOS where the vocab adds one and special-token text parsed (as
 * llama.cpp's llama-simple does). Stops at end-of-generation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: greedy_trace MODEL PROMPT N [cpu|cuda]\n");
        return 1;
    }
    const int n_gen = atoi(argv[3]);
    mf_model m;
    mf_err err = { { 0 } };
    if (model_load(&m, argv[1], &err)) { fprintf(stderr, "greedy_trace: %s\n", err.msg); return 2; }
    mf_context c;
    mf_context_params p;
    context_params_default(&p);
    p.n_ctx = 4096; /* prompts up to 4k tokens (tests/fixtures/variants) */
    p.device = argc > 4 ? argv[4] : "cpu";
    if (context_init(&c, &m, &p, &err)) { fprintf(stderr, "greedy_trace: %s\n", err.msg); model_free(&m); return 2; }
    int32_t *ids = NULL;
    const int n = tok_encode(m.vocab, argv[2], strlen(argv[2]), 1, 1, &ids, &err);
    if (n <= 0 || n + n_gen > c.n_ctx) { fprintf(stderr, "greedy_trace: prompt: %s\n", n < 0 ? err.msg : "size"); return 2; }
    const float *lg;
    if (context_eval(&c, 0, ids, n, &lg, &err)) { fprintf(stderr, "greedy_trace: %s\n", err.msg); return 2; }
    for (int s = 0; s < n_gen; s++) {
        int b1 = 0, b2 = -1;
        for (int i = 1; i < m.hp.n_vocab; i++) {
            if (lg[i] > lg[b1]) { b2 = b1; b1 = i; }
            else if (b2 < 0 || lg[i] > lg[b2]) b2 = i;
        }
        char piece[256];
        const int len = tok_piece(m.vocab, b1, 0, piece, sizeof piece - 1);
        printf("%d\t%d\t%.4f\t%d\t%.4f\t%.4f\t\"", s, b1, lg[b1], b2, lg[b2], lg[b1] - lg[b2]);
        for (int i = 0; i < len && i < (int)sizeof piece - 1; i++) {
            const unsigned char ch = (unsigned char)piece[i];
            if (ch == '\n') fputs("\\n", stdout);
            else if (ch == '"' || ch == '\\') printf("\\%c", ch);
            else if (ch < 32 || ch > 126) printf("\\x%02x", ch);
            else putchar(ch);
        }
        printf("\"\n");
        if (tok_is_eog(m.vocab, b1)) break;
        if (context_decode1(&c, 0, b1, &lg, &err)) { fprintf(stderr, "greedy_trace: %s\n", err.msg); return 2; }
    }
    free(ids);
    context_free(&c);
    model_free(&m);
    return 0;
}

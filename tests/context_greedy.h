/* context_greedy.h - the run behind tests/test_tp.c (CPU ranks) and
 * tests/cuda/test_tp_cuda.c (GPUs): one context of the given parameters, the prompt
 * toks[0..prompt) through context_eval, then `steps` greedy context_decode1 steps.
 * The greedy tokens go to toks[prompt..prompt + steps), the logits of the prompt's
 * last position and of every step to lg[steps + 1][n_vocab]. Returns 0 or an error
 * code with err set. */
#ifndef MINFER_TESTS_CONTEXT_GREEDY_H
#define MINFER_TESTS_CONTEXT_GREEDY_H

#include <string.h>

#include "context.h"
#include "test.h"

static inline int context_greedy(mf_model *m, const mf_context_params *cp, int prompt, int steps, int32_t *toks,
                                 float *lg, mf_err *err) {
    mf_context c;
    int rc = context_init(&c, m, cp, err);
    if (rc) return rc;
    const int nv = m->hp.n_vocab;
    const float *l;
    rc = context_eval(&c, 0, toks, prompt, &l, err);
    for (int s = 0; !rc && s <= steps; s++) {
        memcpy(lg + (size_t)s * nv, l, sizeof(float) * (size_t)nv);
        if (s == steps) break;
        toks[prompt + s] = test_argmax(l, nv, NULL);
        rc = context_decode1(&c, 0, toks[prompt + s], &l, err);
    }
    context_free(&c);
    return rc;
}

#endif

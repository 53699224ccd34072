/* test_tp.c - tensor parallelism (src/tp.c) on the CPU, where its ranks are CPU backends
 * and the all-reduce is the host one:
 *   - the plan: even and uneven splits of kv heads and FFN rows, rounded to whole heads
 *     and to ffn.down's blocks; refused: more ranks than kv heads or than FFN blocks, a wo
 *     split inside a block of its type, --tensor-split lists that do not parse;
 *   - the shards: each rank's row slices are the model's bytes, its wo / ffn_down column
 *     slices each row's blocks, byte for byte, and its hparams count its heads and rows;
 *   - whole forward steps: the tiny gemma3 (post-norms after the reduce, q/k norms, GeGLU,
 *     sliding layers), qwen2 (sliced q/k/v biases) and llama+window models of
 *     arch_models.h, and stories260K when ../shared has it, split over 2, 3 (uneven) and 4
 *     ranks where the kv heads allow (gemma3 also through the split path with one rank), against the same model on one backend: a 10-token
 *     prompt then 12 greedy steps, the same tokens and logits within 1e-4 (normalised;
 *     the partial sums add in another order). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "context_greedy.h"
#include "model.h"
#include "quant.h"
#include "test.h"
#include "tp.h"
#include "arch_models.h"

/* ------------------------------------------------------------------ plan */

/* A model with hparams and layer types only (no tensor bytes): enough for tp_plan. */
static void fake_model(mf_model *m, mf_layer *L, int nl, int nh, int nkv, int hd, int ff, uint32_t wo_t,
                       uint32_t down_t) {
    memset(m, 0, sizeof *m);
    memset(L, 0, sizeof(mf_layer) * (size_t)nl);
    m->hp.n_layer = nl, m->hp.n_head = nh, m->hp.n_head_kv = nkv, m->hp.head_dim = hd, m->hp.n_ff = ff;
    m->hp.n_embd = nh * hd;
    for (int l = 0; l < nl; l++) L[l].wo.type = wo_t, L[l].ffn.down.type = down_t;
    m->layers = L;
}

static void test_plan(void) {
    mf_model m;
    mf_layer L[2];
    mf_tp_plan p;
    mf_err err = { { 0 } };
    /* llama-3-8B's shape, q4_K */
    fake_model(&m, L, 2, 32, 8, 128, 14336, QTYPE_Q4_K, QTYPE_Q6_K);
    CHECK(tp_plan(&m, 2, NULL, &p, &err) == MF_OK && p.kv0[1] == 4 && p.kv0[2] == 8 && p.ff0[1] == 7168 &&
              p.ff0[2] == 14336, "8B over 2: %s kv %d ff %d", err.msg, p.kv0[1], p.ff0[1]);
    CHECK(tp_plan(&m, 4, NULL, &p, &err) == MF_OK && p.kv0[1] == 2 && p.kv0[2] == 4 && p.kv0[3] == 6 &&
              p.ff0[1] == 3584 && p.ff0[3] == 10752, "8B over 4: %s", err.msg);
    CHECK(tp_plan(&m, 8, NULL, &p, &err) == MF_OK && p.kv0[7] == 7 && p.ff0[1] == 1792, "8B over 8: %s", err.msg);
    const float s31[] = { 3, 1 };
    CHECK(tp_plan(&m, 2, s31, &p, &err) == MF_OK && p.kv0[1] == 6 && p.ff0[1] == 10752, "8B split 3,1: %s kv %d ff %d",
          err.msg, p.kv0[1], p.ff0[1]);
    /* every rank keeps a head and a block however lopsided the proportions */
    const float s_lop[] = { 1000, 1, 1 };
    CHECK(tp_plan(&m, 3, s_lop, &p, &err) == MF_OK && p.kv0[1] == 6 && p.kv0[2] == 7 && p.ff0[2] - p.ff0[1] == 256 &&
              p.ff0[3] - p.ff0[2] == 256, "split 1000,1,1: %s kv %d %d", err.msg, p.kv0[1], p.kv0[2]);
    err.msg[0] = 0;
    CHECK(tp_plan(&m, 9, NULL, &p, &err) == MF_ERR_USAGE && strstr(err.msg, "1 to 8"), "9 ranks: %s", err.msg);
    /* 2 kv heads, 4 ranks */
    fake_model(&m, L, 2, 4, 2, 128, 1024, QTYPE_Q4_K, QTYPE_Q4_K);
    CHECK(tp_plan(&m, 4, NULL, &p, &err) == MF_ERR_USAGE && strstr(err.msg, "2 kv heads"), "4 ranks, 2 kv: %s",
          err.msg);
    /* wo split inside a q4_K block: 2 query heads of 64 = 128 columns */
    fake_model(&m, L, 2, 4, 2, 64, 1024, QTYPE_Q4_K, QTYPE_Q4_K);
    CHECK(tp_plan(&m, 2, NULL, &p, &err) == MF_ERR_USAGE && strstr(err.msg, "inside a block"), "wo block: %s",
          err.msg);
    /* the same with q8_0 (32-value blocks): fine */
    fake_model(&m, L, 2, 4, 2, 64, 1024, QTYPE_Q8_0, QTYPE_Q8_0);
    CHECK(tp_plan(&m, 2, NULL, &p, &err) == MF_OK && p.ff0[1] == 512, "q8_0 over 2: %s", err.msg);
    /* one FFN block for two ranks */
    fake_model(&m, L, 2, 4, 2, 64, 256, QTYPE_Q8_0, QTYPE_Q4_K);
    CHECK(tp_plan(&m, 2, NULL, &p, &err) == MF_ERR_USAGE && strstr(err.msg, "FFN"), "ffn blocks: %s", err.msg);

    float sp[MF_TP_MAX];
    CHECK(tp_parse_split("3,1", 2, sp, &err) == MF_OK && sp[0] == 3 && sp[1] == 1, "parse 3,1");
    CHECK(tp_parse_split("0.5,0.25,0.25", 3, sp, &err) == MF_OK && sp[2] == 0.25f, "parse 3 values");
    CHECK(tp_parse_split("3", 2, sp, &err) == MF_ERR_USAGE, "parse: too few");
    CHECK(tp_parse_split("1,2,3", 2, sp, &err) == MF_ERR_USAGE, "parse: too many");
    CHECK(tp_parse_split("1,-1", 2, sp, &err) == MF_ERR_USAGE, "parse: negative");
    CHECK(tp_parse_split("1,0", 2, sp, &err) == MF_ERR_USAGE, "parse: zero");
    CHECK(tp_parse_split("1,nan", 2, sp, &err) == MF_ERR_USAGE, "parse: nan");
}

/* ------------------------------------------------------------------ shards */

static void test_shards(const char *what, const mf_model *m, int n) {
    mf_tp_plan p;
    mf_err err = { { 0 } };
    if (tp_plan(m, n, NULL, &p, &err)) {
        CHECK(0, "%s over %d: plan: %s", what, n, err.msg);
        return;
    }
    const mf_hparams *hp = &m->hp;
    const int G = hp->n_head / hp->n_head_kv, hd = hp->head_dim;
    for (int r = 0; r < n; r++) {
        mf_tp_shard s;
        if (tp_shard(m, &p, r, &s, &err)) {
            CHECK(0, "%s rank %d: %s", what, r, err.msg);
            continue;
        }
        const int nk = p.kv0[r + 1] - p.kv0[r], nf = p.ff0[r + 1] - p.ff0[r];
        CHECK(s.m.hp.n_head_kv == nk && s.m.hp.n_head == nk * G && s.m.hp.n_ff == nf && s.m.hp.n_embd == hp->n_embd,
              "%s rank %d: hparams", what, r);
        int bad = 0;
        for (int l = 0; l < hp->n_layer; l++) {
            const mf_layer *A = &m->layers[l], *B = &s.m.layers[l];
            const uint64_t rq = qtype_row_size(A->wq.type, (uint64_t)A->wq.cols);
            bad += B->wq.rows != (int64_t)nk * G * hd ||
                   memcmp(B->wq.host, (const uint8_t *)A->wq.host + rq * (uint64_t)p.kv0[r] * G * hd, B->wq.nbytes);
            bad += B->ffn.up.rows != nf ||
                   B->ffn.up.host != (const uint8_t *)A->ffn.up.host +
                                       qtype_row_size(A->ffn.up.type, (uint64_t)A->ffn.up.cols) * (uint64_t)p.ff0[r];
            /* wo: row y of the shard is row y's blocks from column kv0 * G * hd */
            const uint64_t ro = qtype_row_size(A->wo.type, (uint64_t)A->wo.cols);
            const uint64_t so = qtype_row_size(A->wo.type, (uint64_t)B->wo.cols);
            const uint64_t off = qtype_row_size(A->wo.type, (uint64_t)p.kv0[r] * G * hd);
            bad += B->wo.cols != (int64_t)nk * G * hd || B->wo.rows != A->wo.rows;
            for (int64_t y = 0; y < A->wo.rows && !bad; y++)
                bad += memcmp((const uint8_t *)B->wo.host + so * (uint64_t)y,
                              (const uint8_t *)A->wo.host + ro * (uint64_t)y + off, so) != 0;
            const uint64_t rd = qtype_row_size(A->ffn.down.type, (uint64_t)A->ffn.down.cols);
            const uint64_t sd = qtype_row_size(A->ffn.down.type, (uint64_t)nf);
            const uint64_t offd = qtype_row_size(A->ffn.down.type, (uint64_t)p.ff0[r]);
            for (int64_t y = 0; y < A->ffn.down.rows && !bad; y++)
                bad += memcmp((const uint8_t *)B->ffn.down.host + sd * (uint64_t)y,
                              (const uint8_t *)A->ffn.down.host + rd * (uint64_t)y + offd, sd) != 0;
            if (A->bq.host)
                bad += B->bq.cols != (int64_t)nk * G * hd ||
                       memcmp(B->bq.host, (const float *)A->bq.host + (int64_t)p.kv0[r] * G * hd, 4 * (size_t)B->bq.cols);
        }
        CHECK(!bad, "%s rank %d of %d: slices (%d wrong)", what, r, n, bad);
        tp_shard_free(&s);
    }
}

/* ------------------------------------------------------------------ forward */

static double nerr(const float *a, const float *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

/* The prompt then greedy steps, with n ranks (split: NULL = even); toks[PROMPT + STEPS]
 * and the logits of every step into lg[STEPS + 1][nv]. */
enum { PROMPT = 10, STEPS = 12 };
static int run(mf_model *m, int n, int always, const float *split, int32_t *toks, float *lg, mf_err *err) {
    mf_context_params cp;
    context_params_default(&cp);
    cp.device = "cpu";
    cp.n_threads = 2;
    cp.n_ctx = 64;
    cp.n_gpus = n;
    cp.tensor_split = split;
    cp.tp_always = always;
    return context_greedy(m, &cp, PROMPT, STEPS, toks, lg, err);
}

static void test_forward(const char *what, mf_model *m, const int *ranks, int n_ranks) {
    const int nv = m->hp.n_vocab;
    int32_t t1[PROMPT + STEPS], tn[PROMPT + STEPS];
    float *l1 = malloc(sizeof(float) * (size_t)nv * (STEPS + 1)), *ln = malloc(sizeof(float) * (size_t)nv * (STEPS + 1));
    mf_err err = { { 0 } };
    for (int i = 0; i < PROMPT; i++) t1[i] = (int32_t)(3 + (i * 37) % (nv - 3));
    if (run(m, 1, 0, NULL, t1, l1, &err)) {
        CHECK(0, "%s: one backend: %s", what, err.msg);
        free(l1), free(ln);
        return;
    }
    for (int k = 0; k < n_ranks; k++) {
        const int n = ranks[k] > 0 ? ranks[k] : -ranks[k];
        /* a negative count: the uneven split 2,1,1,... */
        float split[MF_TP_MAX];
        for (int r = 0; r < n; r++) split[r] = r == 0 ? 2.0f : 1.0f;
        memcpy(tn, t1, sizeof(int32_t) * PROMPT);
        /* (1: the split path with one rank, its reduce over one) */
        if (run(m, n, n == 1, ranks[k] < 0 ? split : NULL, tn, ln, &err)) {
            CHECK(0, "%s over %d: %s", what, n, err.msg);
            continue;
        }
        double worst = 0;
        for (int s = 0; s <= STEPS; s++) {
            const double e = nerr(ln + (size_t)s * nv, l1 + (size_t)s * nv, nv);
            if (e > worst) worst = e;
        }
        CHECK(!memcmp(tn, t1, sizeof t1), "%s over %d%s: the same %d greedy tokens", what, n,
              ranks[k] < 0 ? " (2,1,..)" : "", STEPS);
        CHECK(worst < 1e-4, "%s over %d%s: logits err %.3g", what, n, ranks[k] < 0 ? " (2,1,..)" : "", worst);
        printf("  %s over %d ranks%s: %d tokens the same, logits err %.3g\n", what, n,
               ranks[k] < 0 ? " (split 2,1,..)" : "", STEPS, worst);
    }
    free(l1), free(ln);
}

static void test_arch_model(const char *what, const spec *s, const int *ranks, int n_ranks) {
    char path[] = "/tmp/minfer_test_tp_XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) {
        CHECK(0, "%s: temp file", what);
        return;
    }
    close(fd);
    mf_model m;
    mf_err err = { { 0 } };
    if (write_model(path, s) || model_load(&m, path, &err)) {
        CHECK(0, "%s: model: %s", what, err.msg);
        unlink(path);
        return;
    }
    test_shards(what, &m, 2);
    test_forward(what, &m, ranks, n_ranks);
    model_free(&m);
    unlink(path);
}

int main(void) {
    test_plan();
    /* name, layers, heads, kv heads, head dim, window, pattern, base, swa base, cap, skip, dim, ff */
    const spec gemma = { "gemma3", 3, 4, 2, 32, 4, 3, 1e6f, 1e4f, 30.0f, NULL, 0, 64, .rope_type = NULL };
    const spec qwen = { "qwen2", 2, 6, 3, 8, 0, 0, 1e6f, 0, 0, NULL, 48, 96, .rope_type = NULL };
    const spec llama = { "llama", 2, 8, 4, 8, 5, 0, 1e4f, 0, 0, NULL, 0, 64, .rope_type = NULL };
    const int r2[] = { 1, 2 }, r3[] = { 2, 3, -3 }, r4[] = { 2, -3, 4 };
    test_arch_model("gemma3", &gemma, r2, 2);
    test_arch_model("qwen2", &qwen, r3, 3);
    test_arch_model("llama+window", &llama, r4, 3);
    const char *sh = test_shared_dir();
    if (sh) {
        char p[1100];
        snprintf(p, sizeof p, "%s/models/stories260K.gguf", sh);
        mf_model m;
        mf_err err = { { 0 } };
        if (model_load(&m, p, &err) == MF_OK) {
            test_shards("stories260K", &m, 4);
            test_forward("stories260K", &m, r4, 3);
            model_free(&m);
        } else {
            CHECK(0, "stories260K: %s", err.msg);
        }
    } else {
        SKIP("stories260K: ../shared not found (MINFER_SHARED)");
    }
    return test_summary("tp");
}

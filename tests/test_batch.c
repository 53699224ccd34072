/* test_batch.c - many sequences per decode step on the CPU (minfer_decode_batch).
 *
 * 8 sequences with different prompts decoded together for 40 greedy steps give
 * each sequence the tokens (and, checked too, the bitwise logits) it gets decoded
 * alone, on two models:
 *   - a K-quant llama this test writes (q4_K, q6_K, q8_0 weights as in a q4_k_m
 *     file, dim 256): the CPU's packed kernels run 1-4 tokens a call below 8 tokens
 *     and expand each weight group to int8 tiles at 8 or more, so a step of 8 pairs
 *     and a step of 1 take different kernels;
 *   - the same with an FFN of 6 experts, 2 used a token (issue 51: the experts' rows of a
 *     batch grouped per expert);
 *   - ../shared/models/stories260K.gguf (f32 weights: the float tiles), when present.
 * Each runs with all 8 pairs in one call and with calls of 1..8 pairs (the order
 * rotating every step); the written model also with 80 sequences (calls of 80, 17, 33,
 * 64: above 64 pairs the logits come out in two passes).
 * Then the errors: empty batch, above the batch size, a sequence out of range or
 * twice, a full context, a bad token, NULL arrays; a rejected call changes no
 * sequence; a cleared sequence decodes as a fresh one; 64 sequences of 16 positions
 * take a step of 64 pairs (the batch size is capped at n_ctx * n_seq, not n_ctx). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch_check.h"
#include "gguf.h"
#include "minfer.h"
#include "quant.h"
#include "test.h"
#include "util.h"

enum { DIM = 256, NL = 2, FF = 512, NH = 4, NKV = 2, HD = DIM / NH, NV = 300, STEPS = 40 };

typedef struct tinfo { uint32_t type; int cols, rows, norm; } tinfo;
typedef struct wmodel { tinfo t[64]; int n; } wmodel;

static int fill(void *user, int i, void *dst, uint64_t nbytes) {
    const wmodel *wm = user;
    const tinfo *t = &wm->t[i];
    mf_rng r;
    mf_rng_seed(&r, 1000 + (uint64_t)i);
    float *row = malloc(sizeof(float) * (size_t)t->cols);
    if (!row) return -1;
    const uint64_t rb = qtype_row_size(t->type, (uint64_t)t->cols);
    if (rb * (uint64_t)t->rows != nbytes) { free(row); return -1; }
    for (int y = 0; y < t->rows; y++) {
        /* norms near 1; matrices of std ~0.1 so two layers give logits with clear winners */
        for (int x = 0; x < t->cols; x++)
            row[x] = t->norm ? 1.0f + 0.2f * (mf_rng_uniform(&r) - 0.5f) : 0.35f * (mf_rng_uniform(&r) - 0.5f);
        quant_quantize_row(t->type, row, (uint8_t *)dst + rb * (uint64_t)y, t->cols);
    }
    free(row);
    return 0;
}

/* n_expert > 1: every layer's FFN is n_expert experts of FF, 2 used a token (a Mixtral-style
 * llama file: an f32 router, 3-D q4_K / q6_K expert tensors) */
static int write_kquant_model(const char *path, int n_expert) {
    static wmodel wm;
    wm.n = 0;
    gguf_writer *w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    gguf_w_str(w, "general.architecture", "llama");
    if (n_expert > 1) {
        gguf_w_u32(w, "llama.expert_count", (uint32_t)n_expert);
        gguf_w_u32(w, "llama.expert_used_count", 2);
    }
    gguf_w_u32(w, "llama.embedding_length", DIM);
    gguf_w_u32(w, "llama.block_count", NL);
    gguf_w_u32(w, "llama.feed_forward_length", FF);
    gguf_w_u32(w, "llama.attention.head_count", NH);
    gguf_w_u32(w, "llama.attention.head_count_kv", NKV);
    gguf_w_u32(w, "llama.context_length", 1024);
    gguf_w_u32(w, "llama.rope.dimension_count", HD);
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    static char bufs[NV][16];
    gguf_str toks[NV];
    float scores[NV];
    int32_t types[NV];
    for (int i = 0; i < NV; i++) {
        if (i < 3) snprintf(bufs[i], 16, "%s", (const char *[]){ "<unk>", "<s>", "</s>" }[i]);
        else if (i < 259) snprintf(bufs[i], 16, "<0x%02X>", i - 3);
        else snprintf(bufs[i], 16, "\xe2\x96\x81w%d", i);
        toks[i] = (gguf_str){ bufs[i], strlen(bufs[i]) };
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr(w, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, toks, NV);
    gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_F32, scores, NV);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, types, NV);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    char name[64];
#define TENSOR(nm, ty, c, r, nrm) do { \
        uint64_t ne[2] = { (c), (r) }; \
        wm.t[wm.n++] = (tinfo){ (ty), (c), (r), (nrm) }; \
        gguf_w_tensor(w, nm, (ty), (r) == 1 ? 1 : 2, ne); } while (0)
#define TENSOR3(nm, ty, c, r, e) do { \
        uint64_t ne[3] = { (c), (r), (uint64_t)(e) }; \
        wm.t[wm.n++] = (tinfo){ (ty), (c), (r) * (e), 0 }; \
        gguf_w_tensor(w, nm, (ty), 3, ne); } while (0)
    TENSOR("token_embd.weight", QTYPE_Q4_K, DIM, NV, 0);
    TENSOR("output_norm.weight", QTYPE_F32, DIM, 1, 1);
    TENSOR("output.weight", QTYPE_Q6_K, DIM, NV, 0);
    for (int l = 0; l < NL; l++) {
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l); TENSOR(name, QTYPE_F32, DIM, 1, 1);
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l); TENSOR(name, QTYPE_Q4_K, DIM, DIM, 0);
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", l); TENSOR(name, QTYPE_Q4_K, DIM, NKV * HD, 0);
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        TENSOR(name, l == 0 ? QTYPE_Q6_K : QTYPE_Q8_0, DIM, NKV * HD, 0);
        snprintf(name, sizeof name, "blk.%d.attn_output.weight", l); TENSOR(name, QTYPE_Q4_K, DIM, DIM, 0);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l); TENSOR(name, QTYPE_F32, DIM, 1, 1);
        if (n_expert > 1) {
            snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l); TENSOR(name, QTYPE_F32, DIM, n_expert, 0);
            snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l); TENSOR3(name, QTYPE_Q4_K, DIM, FF, n_expert);
            snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l); TENSOR3(name, QTYPE_Q4_K, DIM, FF, n_expert);
            snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l); TENSOR3(name, QTYPE_Q6_K, FF, DIM, n_expert);
            continue;
        }
        snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", l); TENSOR(name, QTYPE_Q4_K, DIM, FF, 0);
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l); TENSOR(name, QTYPE_Q4_K, DIM, FF, 0);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l); TENSOR(name, QTYPE_Q6_K, FF, DIM, 0);
    }
#undef TENSOR
#undef TENSOR3
    mf_err err = { { 0 } };
    int rc = gguf_writer_write(w, path, fill, &wm, &err);
    if (rc) fprintf(stderr, "writing %s: %s\n", path, err.msg);
    gguf_writer_free(w);
    return rc;
}

static minfer_ctx *ctx_new(minfer_model *m, int n_seq, int n_ctx, int n_batch) {
    char err[512] = "";
    minfer_ctx_params p = { .n_ctx = n_ctx, .n_seq = n_seq, .n_batch = n_batch, .device = "cpu", .n_threads = 2 };
    minfer_ctx *c = minfer_ctx_new(m, &p, err, sizeof err);
    CHECK(c != NULL, "context of %d sequences: %s", n_seq, err);
    return c;
}

/* n sequences: alone, then together under each chunk schedule; tokens must match
 * and (the CPU computes a row the same way whatever the batch) so must the bits. */
static void check_together(const char *what, minfer_model *m, int n, const char *const *texts, int n_texts,
                           const int *const *scheds, const int *n_sched, int n_scheds) {
    char err[512] = "";
    batch_prompts p;
    if (batch_prompts_make(&p, m, n, texts, n_texts, 42)) {
        CHECK(0, "%s: prompts", what);
        return;
    }
    const int nv = minfer_n_vocab(m);
    batch_trace solo, bt;
    CHECK(batch_trace_init(&solo, n, STEPS, nv) == 0 && batch_trace_init(&bt, n, STEPS, nv) == 0, "traces");
    minfer_ctx *c1 = ctx_new(m, 1, 256, 0), *cn = ctx_new(m, n, 256, 0);
    if (c1 && cn) {
        CHECK(batch_solo(c1, &p, &solo, err, sizeof err) == 0, "%s: alone: %s", what, err);
        for (int s = 0; s < n_scheds; s++) {
            batch_result r = { 0 };
            char label[160];
            int o = snprintf(label, sizeof label, "%s, calls of", what);
            for (int i = 0; i < n_sched[s] && o < (int)sizeof label; i++)
                o += snprintf(label + o, sizeof label - (size_t)o, "%s%d", i ? "," : " ", scheds[s][i]);
            /* poisoned: a row the run failed to write cannot pass as the last run's */
            memset(bt.logits, 0xff, sizeof(float) * (size_t)n * (STEPS + 1) * (size_t)nv);
            memset(bt.tok, 0xff, sizeof(int32_t) * (size_t)n * (STEPS + 1));
            const int rc = batch_run(cn, &p, &bt, scheds[s], n_sched[s], &r, err, sizeof err);
            CHECK(rc == 0, "%s: together: %s", label, err);
            if (rc) continue;
            batch_compare(&solo, &bt, n, &r);
            batch_report(stdout, label, n, &solo, &r);
            CHECK(r.seqs_diverged == 0, "%s: %d sequences' greedy tokens differ from alone (first: sequence %d step %d, "
                  "top-2 margin %.4g)", label, r.seqs_diverged, r.first_seq, r.first_k, r.margin_solo);
            CHECK(r.bitwise, "%s: logits not bitwise equal to alone (max |diff| %.3g)", label, r.max_diff);
            int calls = 0;
            for (int k = 0; k < STEPS; k++) calls += (n + scheds[s][k % n_sched[s]] - 1) / scheds[s][k % n_sched[s]];
            CHECK(r.calls == calls, "%s: %d calls, want %d", label, r.calls, calls);
            int lens_ok = 1;
            for (int q = 0; q < n; q++) lens_ok &= minfer_seq_len(cn, q) == p.len[q] + STEPS;
            CHECK(lens_ok, "%s: every sequence holds its prompt + %d tokens", label, STEPS);
        }
    }
    minfer_ctx_free(c1);
    minfer_ctx_free(cn);
    batch_trace_free(&solo);
    batch_trace_free(&bt);
    batch_prompts_free(&p);
}

static int has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

static void check_errors(minfer_model *m) {
    char err[512];
    /* 4 slots of 16 positions, at most 3 tokens a step */
    minfer_ctx *c = ctx_new(m, 4, 16, 3);
    if (!c) return;
    CHECK(minfer_ctx_n_seq(c) == 4 && minfer_ctx_n_batch(c) == 3, "n_seq %d n_batch %d", minfer_ctx_n_seq(c),
          minfer_ctx_n_batch(c));
    const int32_t p0[3] = { 1, 300 - 7, 260 }, p1[2] = { 1, 280 };
    CHECK(minfer_eval(c, 0, p0, 3, err, sizeof err) != NULL, "eval seq 0: %s", err);
    CHECK(minfer_eval(c, 1, p1, 2, err, sizeof err) != NULL, "eval seq 1: %s", err);
    const int len0[4] = { 3, 2, 0, 0 };
#define LENS_UNCHANGED() (minfer_seq_len(c, 0) == len0[0] && minfer_seq_len(c, 1) == len0[1] && \
                          minfer_seq_len(c, 2) == len0[2] && minfer_seq_len(c, 3) == len0[3])
    struct { const char *what; int seqs[4]; int32_t toks[4]; int n; const char *needle; } bad[] = {
        { "empty batch", { 0 }, { 5 }, 0, "empty" },
        { "4 pairs above n_batch 3", { 0, 1, 2, 3 }, { 5, 6, 7, 8 }, 4, "batch size 3" },
        { "sequence 4 of 4", { 0, 4 }, { 5, 6 }, 2, "sequence 4 out of range" },
        { "sequence -1", { -1 }, { 5 }, 1, "sequence -1 out of range" },
        { "sequence 1 twice", { 1, 2, 1 }, { 5, 6, 7 }, 3, "sequence 1 given twice" },
        { "token id 300 of 300", { 0, 1 }, { 5, NV }, 2, "token id 300" },
        { "token id -2", { 2 }, { -2 }, 1, "token id -2" },
    };
    for (size_t i = 0; i < MF_ARRAY_LEN(bad); i++) {
        err[0] = 0;
        const float *lg = minfer_decode_batch(c, bad[i].seqs, bad[i].toks, bad[i].n, err, sizeof err);
        CHECK(lg == NULL && has(err, bad[i].needle), "%s: %s (message '%s', want '%s')", bad[i].what,
              lg ? "accepted" : "rejected", err, bad[i].needle);
        CHECK(LENS_UNCHANGED(), "%s: a rejected step changed a sequence", bad[i].what);
    }
    err[0] = 0;
    CHECK(minfer_decode_batch(c, NULL, p0, 1, err, sizeof err) == NULL && has(err, "NULL"), "NULL seqs: '%s'", err);
    CHECK(LENS_UNCHANGED(), "lengths after the rejected steps");
    CHECK(minfer_seq_len(c, 4) == -1 && minfer_seq_len(c, -1) == -1, "seq_len out of range is -1");
    CHECK(minfer_seq_clear(c, 4, err, sizeof err) == -1 && has(err, "out of range"), "seq_clear 4: '%s'", err);

    /* After the rejections, a step of sequences 1 and 0 gives the logits that a fresh
     * context gives: nothing of the rejected steps reached the cache. */
    const int s10[2] = { 1, 0 };
    const int32_t t10[2] = { 270, 290 };
    float got[2][NV], want[2][NV];
    const float *lg = minfer_decode_batch(c, s10, t10, 2, err, sizeof err);
    CHECK(lg != NULL, "step of sequences 1, 0: %s", err);
    if (lg) memcpy(got, lg, sizeof got);
    CHECK(minfer_seq_len(c, 0) == 4 && minfer_seq_len(c, 1) == 3, "lengths after one step: %d %d", minfer_seq_len(c, 0),
          minfer_seq_len(c, 1));
    minfer_ctx *f = ctx_new(m, 4, 16, 3);
    if (f) {
        int ok = minfer_eval(f, 0, p0, 3, err, sizeof err) && minfer_eval(f, 1, p1, 2, err, sizeof err);
        lg = ok ? minfer_decode(f, 1, 270, err, sizeof err) : NULL;
        if (lg) memcpy(want[0], lg, sizeof want[0]);
        lg = lg ? minfer_decode(f, 0, 290, err, sizeof err) : NULL;
        if (lg) memcpy(want[1], lg, sizeof want[1]);
        CHECK(lg != NULL, "fresh context: %s", err);
        CHECK(lg && !memcmp(got, want, sizeof got), "rows of the step after rejections == a fresh context's");
        minfer_ctx_free(f);
    }

    /* A full context: sequence 2 filled to 16 positions, then any step naming it fails
     * and leaves the others as they were. */
    int32_t fill16[16];
    for (int i = 0; i < 16; i++) fill16[i] = 3 + 11 * i;
    CHECK(minfer_eval(c, 2, fill16, 16, err, sizeof err) != NULL, "fill seq 2: %s", err);
    const int s32[2] = { 3, 2 };
    const int32_t t32[2] = { 5, 6 };
    err[0] = 0;
    CHECK(minfer_decode_batch(c, s32, t32, 2, err, sizeof err) == NULL && has(err, "context full") &&
              has(err, "sequence 2"), "full sequence 2: '%s'", err);
    CHECK(minfer_seq_len(c, 3) == 0 && minfer_seq_len(c, 2) == 16, "full: lengths %d %d", minfer_seq_len(c, 3),
          minfer_seq_len(c, 2));
    err[0] = 0;
    CHECK(minfer_decode(c, 2, 5, err, sizeof err) == NULL && has(err, "context full"), "decode full: '%s'", err);

    /* Clear: sequence 2 starts again at position 0 and decodes as a fresh sequence does. */
    CHECK(minfer_seq_clear(c, 2, err, sizeof err) == 0 && minfer_seq_len(c, 2) == 0, "clear seq 2: %s", err);
    const int s2[1] = { 2 };
    const int32_t t2[1] = { 1 };
    lg = minfer_decode_batch(c, s2, t2, 1, err, sizeof err);
    CHECK(lg != NULL && minfer_seq_len(c, 2) == 1, "decode after clear: %s", err);
    if (lg) memcpy(got[0], lg, sizeof got[0]);
    f = ctx_new(m, 1, 16, 3);
    if (f) {
        lg = minfer_eval(f, 0, t2, 1, err, sizeof err);
        CHECK(lg && !memcmp(got[0], lg, sizeof got[0]), "cleared sequence's first token == a fresh context's: %s",
              err);
        minfer_ctx_free(f);
    }
#undef LENS_UNCHANGED
    minfer_ctx_free(c);
}

/* The batch size is capped by what one step can hold: n_ctx tokens of one sequence,
 * or one token of each of n_seq (64 sequences of 16 positions: a step of 64 pairs). */
static void check_batch_cap(minfer_model *m) {
    char err[512] = "";
    minfer_ctx *c = ctx_new(m, 1, 16, 512);
    if (c) CHECK(minfer_ctx_n_batch(c) == 16, "one sequence of 16: batch %d", minfer_ctx_n_batch(c));
    minfer_ctx_free(c);
    c = ctx_new(m, 3, 16, 512);
    if (c) CHECK(minfer_ctx_n_batch(c) == 48, "3 sequences of 16: batch %d", minfer_ctx_n_batch(c));
    minfer_ctx_free(c);
    c = ctx_new(m, 64, 16, 512);
    if (!c) return;
    CHECK(minfer_ctx_n_batch(c) == 512, "64 sequences of 16 (1024 positions), batch 512 asked: %d",
          minfer_ctx_n_batch(c));
    int seqs[64];
    int32_t toks[64];
    for (int i = 0; i < 64; i++) seqs[i] = 63 - i, toks[i] = 1;
    const float *lg = minfer_decode_batch(c, seqs, toks, 64, err, sizeof err);
    CHECK(lg != NULL && minfer_seq_len(c, 0) == 1 && minfer_seq_len(c, 63) == 1, "a step of 64 pairs: %s", err);
    /* every sequence got BOS at position 0: 64 equal rows */
    int same = lg != NULL;
    for (int i = 1; same && i < 64; i++) same = !memcmp(lg, lg + (size_t)i * NV, sizeof(float) * NV);
    CHECK(same, "64 sequences given the same token at position 0 get the same logits row");
    minfer_ctx_free(c);
}

int main(void) {
    char path[] = "/tmp/minfer_test_batch_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    char err[512] = "";
    minfer_model *m = NULL;
    if (fd >= 0 && write_kquant_model(path, 0) == 0) m = minfer_model_load(path, err, sizeof err);
    CHECK(m != NULL, "the K-quant test model: %s", err);
    if (m) {
        static const int all8[] = { 8 }, mixed[] = { 8, 3, 5, 1, 4, 6, 7, 2 }, s80[] = { 80, 17, 33, 64 };
        const int *sch[] = { all8, mixed };
        const int nsch[] = { 1, 8 };
        check_together("k-quant model, 8 sequences", m, 8, NULL, 0, sch, nsch, 2);
        /* 80 pairs: logits come out FORWARD_LOGIT_ROWS (64) rows at a time */
        const int *sch80[] = { s80 };
        const int nsch80[] = { 4 };
        check_together("k-quant model, 80 sequences", m, 80, NULL, 0, sch80, nsch80, 1);
        check_errors(m);
        check_batch_cap(m);
        minfer_model_free(m);
    }
    /* experts (issue 51): each token's routing, the experts' rows gathered per expert over the
     * whole batch - a sequence's tokens beside others' still give its own bits */
    m = NULL;
    if (write_kquant_model(path, 6) == 0) m = minfer_model_load(path, err, sizeof err);
    CHECK(m != NULL, "the experts' test model: %s", err);
    if (m) {
        static const int all8[] = { 8 }, mixed[] = { 8, 3, 5, 1, 4, 6, 7, 2 };
        const int *sch[] = { all8, mixed };
        const int nsch[] = { 1, 8 };
        check_together("experts (6, 2 used), 8 sequences", m, 8, NULL, 0, sch, nsch, 2);
        minfer_model_free(m);
    }
    unlink(path);

    const char *shared = test_shared_dir();
    char sp[1100];
    snprintf(sp, sizeof sp, "%s/models/stories260K.gguf", shared ? shared : "");
    if (!shared || access(sp, R_OK)) {
        SKIP("stories260K batch check: no ../shared/models/stories260K.gguf (set MINFER_SHARED)");
    } else if (!(m = minfer_model_load(sp, err, sizeof err))) {
        CHECK(0, "load %s: %s", sp, err);
    } else {
        static const char *const texts[8] = {
            "Once upon a time", "Lily and Tom went to the park.", "The cat sat", "One day, a little bird",
            "Max had a big red ball. He", "Sue was sad because", "The sun was hot and the", "Tim",
        };
        static const int all8[] = { 8 }, mixed[] = { 8, 3, 5, 1, 4, 6, 7, 2 };
        const int *sch[] = { all8, mixed };
        const int nsch[] = { 1, 8 };
        check_together("stories260K, 8 sequences", m, 8, texts, 8, sch, nsch, 2);
        minfer_model_free(m);
    }
    return test_summary("test_batch");
}

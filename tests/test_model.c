/* test_model.c - model binding and the forward step on hand-made GGUF files:
 * a valid tiny llama (f32 weights) loads and produces finite logits that do not
 * depend on the batch split; each metadata or tensor defect gives MF_ERR_INPUT
 * with a message naming it, never a crash. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "forward.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "test.h"

enum { DIM = 32, NL = 2, FF = 64, NH = 4, NKV = 2, HD = DIM / NH, NV = 300 };

/* What to break in the generated file. */
typedef struct defect {
    const char *skip_key;     /* metadata key to leave out */
    const char *skip_tensor;  /* tensor to leave out */
    const char *arch;         /* general.architecture value */
    int head_count;           /* llama.attention.head_count */
    int rope_dim;
    int q_rows;               /* rows of attn_q (shape defect) */
    int no_vocab;             /* leave out the tokenizer */
    int block_count;          /* llama.block_count (0: NL) */
    int key_length;           /* llama.attention.key_length (0: not written) */
} defect;

static int fill_f32(void *user, int i, void *dst, uint64_t nbytes) {
    mf_rng r;
    mf_rng_seed(&r, 77 + (uint64_t)i);
    float *f = dst;
    (void)user;
    for (uint64_t k = 0; k < nbytes / 4; k++) f[k] = 0.2f * (mf_rng_uniform(&r) - 0.5f);
    return 0;
}

static int write_model(const char *path, const defect *d) {
    gguf_writer *w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    if (!d->skip_key || strcmp(d->skip_key, "general.architecture")) gguf_w_str(w, "general.architecture", d->arch ? d->arch : "llama");
#define U32(k, v) if (!d->skip_key || strcmp(d->skip_key, k)) gguf_w_u32(w, k, (uint32_t)(v))
    U32("llama.embedding_length", DIM);
    U32("llama.block_count", d->block_count ? d->block_count : NL);
    U32("llama.feed_forward_length", FF);
    U32("llama.attention.head_count", d->head_count ? d->head_count : NH);
    U32("llama.attention.head_count_kv", NKV);
    U32("llama.context_length", 128);
    if (d->key_length) U32("llama.attention.key_length", d->key_length);
    U32("llama.rope.dimension_count", d->rope_dim ? d->rope_dim : HD);
#undef U32
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (!d->no_vocab) {
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
    }
    char name[64];
#define TENSOR(nm, c, r) do { \
        if (!d->skip_tensor || strcmp(d->skip_tensor, nm)) { \
            uint64_t ne[2] = { (c), (r) }; \
            gguf_w_tensor(w, nm, QTYPE_F32, (r) == 1 ? 1 : 2, ne); } } while (0)
    TENSOR("token_embd.weight", DIM, NV);
    TENSOR("output_norm.weight", DIM, 1);
    for (int l = 0; l < NL; l++) {
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l); TENSOR(name, DIM, 1);
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l); TENSOR(name, DIM, d->q_rows ? d->q_rows : DIM);
        snprintf(name, sizeof name, "blk.%d.attn_k.weight", l); TENSOR(name, DIM, NKV * HD);
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l); TENSOR(name, DIM, NKV * HD);
        snprintf(name, sizeof name, "blk.%d.attn_output.weight", l); TENSOR(name, DIM, DIM);
        snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l); TENSOR(name, DIM, 1);
        snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", l); TENSOR(name, DIM, FF);
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l); TENSOR(name, DIM, FF);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l); TENSOR(name, FF, DIM);
    }
#undef TENSOR
    mf_err err;
    int rc = gguf_writer_write(w, path, fill_f32, NULL, &err);
    gguf_writer_free(w);
    return rc;
}

static void expect_error(const char *what, const defect *d, const char *needle) {
    char path[] = "/tmp/minfer_test_model_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK(write_model(path, d) == 0, "%s: writing the file", what);
    mf_model m;
    mf_err err = { { 0 } };
    int rc = model_load(&m, path, &err);
    CHECK(rc == MF_ERR_INPUT, "%s: model_load returned %d (%s)", what, rc, err.msg);
    CHECK(strstr(err.msg, needle) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, needle);
    if (rc == MF_OK) model_free(&m);
    unlink(path);
}

int main(void) {
    /* A valid model: loads, ties the output to the embedding, and gives the same
     * logits for a prompt evaluated in one batch or token by token. */
    char path[] = "/tmp/minfer_test_model_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    defect none = { 0 };
    CHECK(write_model(path, &none) == 0, "write valid model");
    mf_model m;
    mf_err err = { { 0 } };
    int rc = model_load(&m, path, &err);
    CHECK(rc == MF_OK, "valid model loads: %s", err.msg);
    if (rc == MF_OK) {
        CHECK(m.tied_output && m.hp.n_vocab == NV && m.hp.n_head_kv == NKV, "hparams bound");
        mf_context_params cp;
        context_params_default(&cp);
        cp.device = "cpu";
        cp.n_threads = 2;
        int32_t toks[6] = { 1, 300 - 1, 280, 17, 42, 299 };
        float one_batch[NV], stepwise[NV];
        mf_context c;
        const float *lg;
        rc = context_init(&c, &m, &cp, &err);
        CHECK(rc == MF_OK, "context: %s", err.msg);
        if (rc == MF_OK) {
            CHECK(context_eval(&c, 0, toks, 6, &lg, &err) == MF_OK, "eval: %s", err.msg);
            memcpy(one_batch, lg, sizeof one_batch);
            int finite = 1;
            for (int i = 0; i < NV; i++) finite &= isfinite(one_batch[i]);
            CHECK(finite, "logits finite");
            context_free(&c);
        }
        cp.n_batch = 1;
        rc = context_init(&c, &m, &cp, &err);
        if (rc == MF_OK) {
            CHECK(context_eval(&c, 0, toks, 6, &lg, &err) == MF_OK, "eval stepwise: %s", err.msg);
            memcpy(stepwise, lg, sizeof stepwise);
            double maxd = 0, maxa = 0;
            for (int i = 0; i < NV; i++) {
                maxd = fmax(maxd, fabs(one_batch[i] - stepwise[i]));
                maxa = fmax(maxa, fabs(one_batch[i]));
            }
            /* The GEMM and GEMV paths quantize activations the same way, so only
             * summation order differs. */
            CHECK(maxd <= 1e-4 * maxa, "batch split changes logits: %g of %g", maxd, maxa);
            /* Prefix reuse: the same prompt again evaluates one token only. */
            CHECK(context_eval(&c, 0, toks, 6, &lg, &err) == MF_OK && c.last_reused == 5 && c.last_evaluated == 1,
                  "prefix reuse: reused %d evaluated %d", c.last_reused, c.last_evaluated);
            /* Out-of-range token from a caller: an error, not a crash. */
            int32_t bad[2] = { 1, NV + 5 };
            CHECK(context_eval(&c, 0, bad, 2, &lg, &err) == MF_ERR_INPUT, "token id out of range rejected");
            context_free(&c);
        }
        /* Logits of every row of a 100-token batch (computed FORWARD_LOGIT_ROWS = 64
         * rows at a time) equal the last-token logits of each prefix. */
        cp.n_batch = 128;
        mf_context c2;
        rc = context_init(&c, &m, &cp, &err);
        int rc2 = context_init(&c2, &m, &cp, &err);
        CHECK(rc == MF_OK && rc2 == MF_OK, "contexts for all-rows logits: %s", err.msg);
        if (rc == MF_OK && rc2 == MF_OK) {
            enum { NT = 100 };
            int32_t tk[NT], ps[NT], sq[NT];
            int8_t want[NT];
            for (int i = 0; i < NT; i++) tk[i] = (int32_t)((i * 37 + 11) % NV), ps[i] = i, sq[i] = 0, want[i] = 1;
            mf_batch b = { NT, tk, ps, sq, want };
            float *all = malloc(sizeof(float) * NT * NV);
            CHECK(all && forward_step(&c.fw, &b, all, &err) == NT, "all-rows forward: %s", err.msg);
            const int rows[] = { 0, 63, 64, 99 };
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
                const int i = rows[r];
                CHECK(context_eval(&c2, 0, tk, i + 1, &lg, &err) == MF_OK, "prefix %d: %s", i + 1, err.msg);
                double maxd = 0, maxa = 0;
                for (int v = 0; v < NV; v++) {
                    maxd = fmax(maxd, fabs(all[(size_t)i * NV + v] - lg[v]));
                    maxa = fmax(maxa, fabs(lg[v]));
                }
                CHECK(maxa > 0 && maxd <= 1e-4 * maxa, "row %d of the all-rows batch vs its prefix: %g of %g", i, maxd,
                      maxa);
            }
            free(all);
        }
        if (rc == MF_OK) context_free(&c);
        if (rc2 == MF_OK) context_free(&c2);
        model_free(&m);
    }
    unlink(path);

    expect_error("no architecture", &(defect){ .skip_key = "general.architecture" }, "general.architecture");
    expect_error("unsupported architecture", &(defect){ .arch = "gpt2" }, "unsupported architecture");
    expect_error("no block_count", &(defect){ .skip_key = "llama.block_count" }, "llama.block_count");
    expect_error("head_count not dividing dim", &(defect){ .head_count = 5 }, "not divisible");
    expect_error("rope dim > head dim", &(defect){ .rope_dim = 2 * HD }, "rope.dimension_count");
    expect_error("missing tensor", &(defect){ .skip_tensor = "blk.1.ffn_up.weight" }, "blk.1.ffn_up.weight");
    expect_error("wrong shape", &(defect){ .q_rows = DIM + 8 }, "blk.0.attn_q.weight");
    expect_error("no tokenizer", &(defect){ .no_vocab = 1 }, "tokenizer");
    /* 2^30 layers claimed by a small file: an error before the per-layer array (a 75 GB
     * calloc; found by fuzz/fuzz_gguf.c) */
    expect_error("block_count 2^30", &(defect){ .block_count = 1 << 30 }, "block_count");
    /* heads x head dim past an int (UBSan: signed overflow in the shapes; found by
     * fuzz/fuzz_gguf.c) */
    expect_error("head_count x key_length 2^31", &(defect){ .head_count = 2, .key_length = 1 << 30 }, "key_length");
    return test_summary("test_model");
}

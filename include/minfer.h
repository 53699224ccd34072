/* minfer.h - the public C API of minfer.
 *
 *   minfer_model *m = minfer_model_load("model.gguf", err, sizeof err);
 *   minfer_ctx *c = minfer_ctx_new(m, &(minfer_ctx_params){ .n_ctx = 4096, .device = "auto" }, err, sizeof err);
 *   int n = minfer_tokenize(m, "Hello", 5, 1, 0, ids, cap);
 *   const float *logits = minfer_eval(c, 0, ids, n, err, sizeof err);   // prefill (prefix reused)
 *   ... pick a token, then logits = minfer_decode(c, 0, tok, err, sizeof err);
 *
 * Several sequences (.n_seq = 8): minfer_eval each one's prompt, then each step
 *   logits = minfer_decode_batch(c, seqs, toks, 8, err, sizeof err);  // [8][n_vocab]
 *
 * Functions that can fail return NULL / a negative value and write a one-line
 * message into err. Thread safety: one context per thread. */
#ifndef MINFER_H
#define MINFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct minfer_model minfer_model;
typedef struct minfer_ctx minfer_ctx;

typedef struct minfer_ctx_params {
    int n_ctx;          /* positions per sequence; 0 = min(model's, 4096) */
    int n_seq;          /* sequence slots; 0 = 1 */
    int n_batch;        /* max tokens per step; 0 = 512 on the CPU, 2048 on CUDA */
    const char *device; /* "cpu", "cuda", NULL = auto */
    int n_threads;      /* CPU threads; 0 = all cores */
    /* Tensor parallelism: the model split over n_gpus GPUs (device "cuda:N": GPUs N ..
     * N+n_gpus-1), an NCCL all-reduce after each layer's attention output and FFN down
     * projections; with device "cpu", n_gpus CPU backends sharing the threads (the
     * split's reference). 0 or 1: one backend. */
    int n_gpus;
    const float *tensor_split; /* [n_gpus] proportions of the split (heads, FFN rows); NULL = even */
    /* The KV cache's element types, K and V: "f32", "f16" or "q8_0" (blocks of 32 values
     * with an f16 scale, as ggml's); NULL = the backend's own (f32 on the CPU, f16 on
     * CUDA, which takes f16 or q8_0, the same for K and V). A type the backend cannot
     * hold: an error. */
    const char *cache_type_k, *cache_type_v;
} minfer_ctx_params;

minfer_model *minfer_model_load(const char *path, char *err, size_t err_cap);
void minfer_model_free(minfer_model *m);
int minfer_n_vocab(const minfer_model *m);
int32_t minfer_token_bos(const minfer_model *m);
int minfer_token_is_eog(const minfer_model *m, int32_t tok);

/* Returns the number of ids (may exceed cap: then only cap were written), or -1. */
int minfer_tokenize(const minfer_model *m, const char *text, size_t len, int add_bos, int parse_special,
                    int32_t *ids, int cap);
/* Bytes of a token's text (not NUL-terminated); returns the full length. */
int minfer_token_to_piece(const minfer_model *m, int32_t tok, char *buf, size_t cap);
/* As minfer_token_to_piece, but a control token renders as its own text ("</s>",
 * "<|im_end|>") instead of "": what a chat template writes for it. */
int minfer_token_to_text(const minfer_model *m, int32_t tok, char *buf, size_t cap);
/* The EOS token, or -1 when the vocabulary has none. */
int32_t minfer_token_eos(const minfer_model *m);
/* A string value of the model file's metadata (e.g. "tokenizer.chat_template",
 * "general.name"): a view into the mapped file, not NUL-terminated, *len bytes,
 * valid while the model is loaded; NULL when the key is absent or not a string. */
const char *minfer_model_meta_str(const minfer_model *m, const char *key, size_t *len);
/* The names of the file's tensors that this architecture does not use ("a, b"), or NULL
 * when it uses them all; valid while the model is loaded. */
const char *minfer_model_unused_tensors(const minfer_model *m);

minfer_ctx *minfer_ctx_new(minfer_model *m, const minfer_ctx_params *p, char *err, size_t err_cap);
void minfer_ctx_free(minfer_ctx *c);
/* Makes sequence seq hold exactly ids[0..n) (reusing the cached prefix) and returns
 * the logits of the last token [n_vocab], valid until the next call. */
const float *minfer_eval(minfer_ctx *c, int seq, const int32_t *ids, int n, char *err, size_t err_cap);
/* Appends one token to seq and returns its logits (minfer_decode_batch of one pair). */
const float *minfer_decode(minfer_ctx *c, int seq, int32_t tok, char *err, size_t err_cap);
/* One decode step over several sequences: toks[i] is appended to sequence seqs[i]
 * at that sequence's position (its cached length), for i < n, all in one forward
 * step. Returns logits [n][n_vocab], row i for pair i, valid until the next call.
 * Fails (NULL, nothing evaluated, no sequence changed) when n < 1 or n > n_batch,
 * a sequence is out of range or named twice, a sequence's context is full, or a
 * token is out of range. Prefill each sequence first with minfer_eval. */
const float *minfer_decode_batch(minfer_ctx *c, const int *seqs, const int32_t *toks, int n, char *err,
                                 size_t err_cap);
/* Tokens sequence seq holds (its next position), or -1 when seq is out of range. */
int minfer_seq_len(const minfer_ctx *c, int seq);
/* Forgets every token of seq; 0, or -1 (with err) when seq is out of range. */
int minfer_seq_clear(minfer_ctx *c, int seq, char *err, size_t err_cap);
/* The context's sequence slots and its most tokens per step (after defaults). */
int minfer_ctx_n_seq(const minfer_ctx *c);
int minfer_ctx_n_batch(const minfer_ctx *c);
/* Positions per sequence (after defaults). */
int minfer_ctx_n_ctx(const minfer_ctx *c);
/* 1 when the context runs on a GPU (the host waits during a forward step). */
int minfer_ctx_on_gpu(const minfer_ctx *c);
/* What the last minfer_eval did: tokens it took from the cache and tokens it ran
 * through the model (the server's prompt-cache figures). */
void minfer_ctx_last_eval(const minfer_ctx *c, int *reused, int *evaluated);

/* Structured output: the tokens sampled constrained to a GBNF grammar (llama.cpp's
 * syntax, rule "root"), to JSON valid against a JSON schema, or to any JSON object.
 *
 *   minfer_grammar *g = minfer_grammar_new(m, MINFER_GRAMMAR_JSON_SCHEMA, schema, len, err, sizeof err);
 *   minfer_constraint *k = minfer_constraint_new(g, err, sizeof err);     // one per sequence
 *   each step: row = minfer_constraint_apply(k, logits, &n_allowed);    // other tokens -inf
 *              tok = (your sampler over row); minfer_constraint_accept(k, tok, err, sizeof err);
 *              stop at end of generation, or when minfer_constraint_done(k)
 *
 * A grammar is read-only once made: any number of constraints and threads may share
 * it; it must outlive them, and the model must outlive it. A constraint belongs to
 * one sequence and one thread at a time. */
typedef struct minfer_grammar minfer_grammar;
typedef struct minfer_constraint minfer_constraint;
enum { MINFER_GRAMMAR_GBNF = 0, MINFER_GRAMMAR_JSON_SCHEMA = 1, MINFER_GRAMMAR_JSON_OBJECT = 2 };

/* Compiles text[0..len) (unused for JSON_OBJECT); NULL with a message naming the
 * problem (a grammar's line and column, a schema's keyword and path). The first call
 * on a model builds its vocabulary trie (shared by all its grammars). */
minfer_grammar *minfer_grammar_new(minfer_model *m, int kind, const char *text, size_t len, char *err, size_t err_cap);
void minfer_grammar_free(minfer_grammar *g);
minfer_constraint *minfer_constraint_new(const minfer_grammar *g, char *err, size_t err_cap);
void minfer_constraint_free(minfer_constraint *k);
/* logits[n_vocab] with the tokens the grammar does not allow next at -inf (a buffer
 * of k, valid until the next call); *n_allowed = how many it allows (0: it cannot go
 * on with this vocabulary; stop with an error). End-of-generation tokens are allowed
 * only where the text is complete. */
const float *minfer_constraint_apply(minfer_constraint *k, const float *logits, int *n_allowed);
/* Advances over the sampled token: 0, or -1 (with err) when the grammar does not
 * allow it (k unchanged). */
int minfer_constraint_accept(minfer_constraint *k, int32_t tok, char *err, size_t err_cap);
/* Starts making the current state's mask on a helper thread, to overlap the next
 * forward step (a GPU's: on the CPU the forward has the cores); k must not be used
 * until minfer_constraint_prefetch_wait. */
void minfer_constraint_prefetch(minfer_constraint *k);
void minfer_constraint_prefetch_wait(minfer_constraint *k);
/* 1 when the grammar allows tok next (k unchanged): for greedy decoding, the
 * model's best token, when allowed, is the best allowed one (no mask needed). */
int minfer_constraint_allows(minfer_constraint *k, int32_t tok);
/* 1 when the text so far is complete (end of generation allowed), resp. when nothing
 * more can follow (generation should end). */
int minfer_constraint_complete(const minfer_constraint *k);
int minfer_constraint_done(const minfer_constraint *k);

#ifdef __cplusplus
}
#endif
#endif

/* make_seeds.c - writes the GGUF fuzz target's seed corpus (fuzz/corpus/gguf/):
 * small files that reach past the header checks into every loader: all value types,
 * an SPM llama model, a byte-level BPE qwen2 model, a gemma3 model with its window
 * keys, each with a chat template. Tensors are zero-filled (the loaders never read
 * weight values). Run by hand when the loaders learn new keys:
 *   make fuzz-seeds   (builds this with the normal library and rewrites the seeds) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "util.h"

static void add_tensor(gguf_writer *w, const char *name, uint32_t type, uint64_t c, uint64_t r) {
    uint64_t ne[2] = { c, r };
    gguf_w_tensor(w, name, type, r == 1 ? 1 : 2, ne);
}

/* A model of dim 32, one layer, 2 heads (1 kv head), ff 32, n_vocab tokens. */
static void add_model(gguf_writer *w, const char *arch, int n_vocab, int bias, int gemma) {
    char k[128];
    gguf_w_str(w, "general.architecture", arch);
#define HP(suffix, v) snprintf(k, sizeof k, "%s." suffix, arch), gguf_w_u32(w, k, v)
    HP("embedding_length", 32);
    HP("block_count", 1);
    HP("feed_forward_length", 32);
    HP("attention.head_count", 2);
    HP("attention.head_count_kv", 1);
    HP("context_length", 64);
    HP("rope.dimension_count", 16);
    if (gemma) {
        HP("attention.key_length", 16);
        HP("attention.sliding_window", 8);
        HP("attention.sliding_window_pattern", 2);
        snprintf(k, sizeof k, "%s.rope.freq_base_swa", arch), gguf_w_f32(w, k, 10000.0f);
        snprintf(k, sizeof k, "%s.final_logit_softcapping", arch), gguf_w_f32(w, k, 30.0f);
    }
#undef HP
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch), gguf_w_f32(w, k, 1e-6f);
    snprintf(k, sizeof k, "%s.rope.freq_base", arch), gguf_w_f32(w, k, 10000.0f);
    add_tensor(w, "token_embd.weight", QTYPE_Q8_0, 32, (uint64_t)n_vocab);
    add_tensor(w, "output_norm.weight", QTYPE_F32, 32, 1);
    add_tensor(w, "blk.0.attn_norm.weight", QTYPE_F32, 32, 1);
    add_tensor(w, "blk.0.attn_q.weight", QTYPE_Q8_0, 32, 32);
    add_tensor(w, "blk.0.attn_k.weight", QTYPE_Q4_0, 32, 16);
    add_tensor(w, "blk.0.attn_v.weight", QTYPE_F16, 32, 16);
    if (bias) {
        add_tensor(w, "blk.0.attn_q.bias", QTYPE_F32, 32, 1);
        add_tensor(w, "blk.0.attn_k.bias", QTYPE_F32, 16, 1);
        add_tensor(w, "blk.0.attn_v.bias", QTYPE_F32, 16, 1);
    }
    add_tensor(w, "blk.0.attn_output.weight", QTYPE_Q8_0, 32, 32);
    add_tensor(w, "blk.0.ffn_norm.weight", QTYPE_F32, 32, 1);
    add_tensor(w, "blk.0.ffn_gate.weight", QTYPE_Q5_0, 32, 32);
    add_tensor(w, "blk.0.ffn_up.weight", QTYPE_Q4_1, 32, 32);
    add_tensor(w, "blk.0.ffn_down.weight", QTYPE_Q5_1, 32, 32);
    if (gemma) {
        add_tensor(w, "blk.0.attn_q_norm.weight", QTYPE_F32, 16, 1);
        add_tensor(w, "blk.0.attn_k_norm.weight", QTYPE_F32, 16, 1);
        add_tensor(w, "blk.0.post_attention_norm.weight", QTYPE_F32, 32, 1);
        add_tensor(w, "blk.0.post_ffw_norm.weight", QTYPE_F32, 32, 1);
    } else {
        add_tensor(w, "output.weight", QTYPE_Q8_0, 32, (uint64_t)n_vocab);
    }
}

static const char *spm_tokens[] = {
    "<unk>", "<s>", "</s>", "<0x0A>", "<0x20>", "<0xC3>", "<0xA9>", "\xe2\x96\x81", "\xe2\x96\x81the",
    "\xe2\x96\x81a", "t", "h", "e", "a", "o", "n", "s", "<start_of_turn>", "<end_of_turn>", "\xe2\x96\x81\xe2\x96\x81",
};

static void add_spm(gguf_writer *w, int gemma) {
    int n = (int)MF_ARRAY_LEN(spm_tokens);
    gguf_str toks[MF_ARRAY_LEN(spm_tokens)];
    float scores[MF_ARRAY_LEN(spm_tokens)];
    int32_t types[MF_ARRAY_LEN(spm_tokens)];
    for (int i = 0; i < n; i++) {
        toks[i].ptr = spm_tokens[i];
        toks[i].len = strlen(spm_tokens[i]);
        scores[i] = -(float)i;
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 7 ? 6 : (i == 17 || i == 18) ? 4 : 1;
    }
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr(w, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, toks, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_F32, scores, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, types, (uint64_t)n);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1);
    gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", 1);
    gguf_w_str(w, "tokenizer.chat_template",
               gemma ? "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['role'] }}\n"
                       "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
                     : "{% if messages[0]['role'] == 'system' %}{{ '[INST] <<SYS>>\\n' }}{% endif %}"
                       "{{ bos_token + '[INST] ' + message['content'].strip() + ' [/INST]' }}");
}

static void add_bpe(gguf_writer *w) {
    /* GPT-2 alphabet: 'Ġ' (U+0120) is space, 'Ċ' (U+010A) newline */
    static const char *t[] = { "a", "b", "c", "d", "e", "h", "l", "o", "r", "t", "w", "\xc4\xa0", "\xc4\x8a",
                               "he", "ll", "\xc4\xa0t", "\xc4\xa0w", "hell", "hello", "<|im_start|>",
                               "<|im_end|>", "<|endoftext|>", "0", "1", "!", "," };
    static const char *m[] = { "h e", "l l", "\xc4\xa0 t", "\xc4\xa0 w", "he ll", "hell o" };
    int n = (int)MF_ARRAY_LEN(t), nm = (int)MF_ARRAY_LEN(m);
    gguf_str toks[MF_ARRAY_LEN(t)], merges[MF_ARRAY_LEN(m)];
    int32_t types[MF_ARRAY_LEN(t)];
    for (int i = 0; i < n; i++) {
        toks[i].ptr = t[i];
        toks[i].len = strlen(t[i]);
        types[i] = (i >= 19 && i <= 21) ? 3 : 1;
    }
    for (int i = 0; i < nm; i++) { merges[i].ptr = m[i]; merges[i].len = strlen(m[i]); }
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_w_arr(w, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, toks, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.merges", GGUF_VTYPE_STRING, merges, (uint64_t)nm);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, types, (uint64_t)n);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 21);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 20);
    gguf_w_u32(w, "tokenizer.ggml.padding_token_id", 21);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0);
    gguf_w_str(w, "tokenizer.chat_template",
               "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
               "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
               "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
               "{% endfor %}");
}

static void add_all_types(gguf_writer *w) {
    uint8_t u8 = 200; int8_t i8 = -100; uint16_t u16 = 60000; int16_t i16 = -30000;
    uint64_t u64 = 1ull << 40; int64_t i64 = -(1ll << 40); double f64 = 2.5;
    gguf_w_scalar(w, "t.u8", GGUF_VTYPE_U8, &u8);
    gguf_w_scalar(w, "t.i8", GGUF_VTYPE_I8, &i8);
    gguf_w_scalar(w, "t.u16", GGUF_VTYPE_U16, &u16);
    gguf_w_scalar(w, "t.i16", GGUF_VTYPE_I16, &i16);
    gguf_w_u32(w, "t.u32", 4000000000u);
    gguf_w_i32(w, "t.i32", -2000000000);
    gguf_w_f32(w, "t.f32", 1.5f);
    gguf_w_bool(w, "t.bool", 1);
    gguf_w_str(w, "t.str", "caf\xc3\xa9");
    gguf_w_scalar(w, "t.u64", GGUF_VTYPE_U64, &u64);
    gguf_w_scalar(w, "t.i64", GGUF_VTYPE_I64, &i64);
    gguf_w_scalar(w, "t.f64", GGUF_VTYPE_F64, &f64);
    uint8_t a8[3] = { 1, 2, 3 };
    int32_t a32[2] = { -1, 7 };
    float af[2] = { 0.5f, -0.25f };
    gguf_str as[2] = { { "x", 1 }, { "", 0 } };
    gguf_w_arr(w, "t.arr_u8", GGUF_VTYPE_U8, a8, 3);
    gguf_w_arr(w, "t.arr_i32", GGUF_VTYPE_I32, a32, 2);
    gguf_w_arr(w, "t.arr_f32", GGUF_VTYPE_F32, af, 2);
    gguf_w_arr(w, "t.arr_str", GGUF_VTYPE_STRING, as, 2);
    gguf_w_arr(w, "t.arr_empty", GGUF_VTYPE_I32, a32, 0);
    add_tensor(w, "a", QTYPE_F32, 4, 1);
    add_tensor(w, "b", QTYPE_Q8_0, 32, 2);
    add_tensor(w, "c", QTYPE_Q4_K, 256, 1);
    add_tensor(w, "d", QTYPE_BF16, 2, 2);
}

static int write(const char *dir, const char *name, gguf_writer *w) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mf_err err = { { 0 } };
    int rc = gguf_writer_write(w, path, NULL, NULL, &err);
    gguf_writer_free(w);
    if (rc) fprintf(stderr, "make_seeds: %s: %s\n", path, err.msg);
    else fprintf(stderr, "make_seeds: wrote %s\n", path);
    return rc;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "fuzz/corpus/gguf";
    int bad = 0;
    gguf_writer *w;
    w = gguf_writer_new(32); add_all_types(w); bad |= write(dir, "all_types.gguf", w);
    w = gguf_writer_new(32); add_model(w, "llama", (int)MF_ARRAY_LEN(spm_tokens), 0, 0); add_spm(w, 0);
    bad |= write(dir, "llama_spm.gguf", w);
    w = gguf_writer_new(32); add_model(w, "qwen2", 26, 1, 0); add_bpe(w); bad |= write(dir, "qwen2_bpe.gguf", w);
    w = gguf_writer_new(32); add_model(w, "gemma3", (int)MF_ARRAY_LEN(spm_tokens), 0, 1); add_spm(w, 1);
    bad |= write(dir, "gemma3_spm.gguf", w);
    w = gguf_writer_new(64); gguf_w_str(w, "general.architecture", "mistral"); bad |= write(dir, "header_only.gguf", w);
    return bad ? 1 : 0;
}

/* tokenizer.h - SPM and byte-level BPE tokenizers loaded from GGUF metadata,
 * detokenization and special tokens. */
#ifndef MINFER_TOKENIZER_H
#define MINFER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "util.h"

typedef struct mf_vocab mf_vocab;

typedef enum tok_kind { TOK_KIND_SPM = 0, TOK_KIND_BPE = 1 } tok_kind;

/* Loads tokenizer.ggml.* from f. Errors (missing/invalid keys) -> MF_ERR_INPUT. */
int tok_load(mf_vocab **out, const gguf_file *f, mf_err *err);
void tok_free(mf_vocab *v);

tok_kind tok_get_kind(const mf_vocab *v);
int tok_n_vocab(const mf_vocab *v);
int32_t tok_bos(const mf_vocab *v);        /* -1 when none */
int32_t tok_eos(const mf_vocab *v);        /* -1 when none */
int tok_add_bos(const mf_vocab *v);        /* tokenizer.ggml.add_bos_token (default per kind) */
int tok_is_eog(const mf_vocab *v, int32_t id); /* end of generation: eos, eot, <|im_end|>, ... */
/* Id of a token given its exact text, or -1. */
int32_t tok_find(const mf_vocab *v, const char *text);
int32_t tok_unk(const mf_vocab *v);        /* -1 when none */
int32_t tok_pad(const mf_vocab *v);        /* -1 when none */
/* Raw text of token id as stored in the vocab (U+2581 / GPT-2 alphabet not decoded),
 * "" for an id out of range; *len gets its length (it may hold NUL bytes). */
const char *tok_text(const mf_vocab *v, int32_t id, size_t *len);
/* tokenizer.ggml.token_type of id (1 normal, 2 unknown, 3 control, 4 user-defined,
 * 5 unused, 6 byte), 0 for an id out of range. */
int tok_type(const mf_vocab *v, int32_t id);

/* Encodes len bytes of text (any bytes: NULs and invalid UTF-8 are ordinary input).
 * add_bos: add the special tokens the vocab asks for, like llama.cpp's add_special:
 * BOS when tok_add_bos() and a BOS exists, EOS when tokenizer.ggml.add_eos_token is
 * set; so passing 1 or tok_add_bos(v) are the same.
 * parse_special: recognise control/unknown token texts in the input (user-defined
 * tokens are always recognised, as in llama.cpp and HF tokenizers).
 * Returns the number of ids (ids is malloc'd, caller frees) or a negative status. */
int tok_encode(const mf_vocab *v, const char *text, size_t len, int add_bos, int parse_special,
               int32_t **ids, mf_err *err);

/* BPE only, for tests and debugging: the pre-tokenizer's words of text (after invalid
 * UTF-8 became U+FFFD; special tokens are not looked for), one fn call per word, in
 * order. Returns the number of words or a negative status. */
int tok_pretokenize(const mf_vocab *v, const char *text, size_t len,
                    void (*fn)(void *user, const char *word, size_t n), void *user, mf_err *err);

/* Bytes of token id's text as it should appear in output (byte tokens decoded,
 * SPM's U+2581 -> space, BPE's byte alphabet -> bytes; control tokens render as ""
 * unless special). Writes up to cap bytes, returns the full length. */
int tok_piece(const mf_vocab *v, int32_t id, int special, char *buf, size_t cap);

/* Streaming detokenizer: holds back incomplete UTF-8 sequences; what it writes is
 * always valid UTF-8 (bytes that can never complete a character become U+FFFD). */
typedef struct tok_stream {
    char pending[8];
    int n_pending;
    int first;      /* SPM: strip the leading space of the next non-empty piece; set by
                       pushing BOS (init leaves it 0; a caller that starts generation
                       from BOS alone may set it to 1 itself) */
} tok_stream;
void tok_stream_init(tok_stream *s);
/* Appends token's bytes; writes the complete UTF-8 prefix to out and returns its
 * length (<= cap). cap >= 64 + 3 * piece length is always enough (an invalid byte
 * grows to a 3-byte U+FFFD); with less, output is cut at a character boundary. */
int tok_stream_push(tok_stream *s, const mf_vocab *v, int32_t id, char *out, size_t cap);
/* Flushes what is held back (invalid trailing bytes are emitted as U+FFFD). */
int tok_stream_flush(tok_stream *s, char *out, size_t cap);

#endif

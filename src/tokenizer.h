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

/* Encodes len bytes of text. add_bos: prepend BOS when the vocab has one.
 * parse_special: recognise control/user-defined token texts in the input.
 * Returns the number of ids (ids is malloc'd, caller frees) or a negative status. */
int tok_encode(const mf_vocab *v, const char *text, size_t len, int add_bos, int parse_special,
               int32_t **ids, mf_err *err);

/* Bytes of token id's text as it should appear in output (byte tokens decoded,
 * SPM's U+2581 -> space, BPE's byte alphabet -> bytes; control tokens render as ""
 * unless special). Writes up to cap bytes, returns the full length. */
int tok_piece(const mf_vocab *v, int32_t id, int special, char *buf, size_t cap);

/* Streaming detokenizer: holds back incomplete UTF-8 sequences. */
typedef struct tok_stream {
    char pending[8];
    int n_pending;
    int first;      /* SPM: strip the leading space of the first piece after BOS */
} tok_stream;
void tok_stream_init(tok_stream *s);
/* Appends token's bytes; writes the complete UTF-8 prefix to out (cap >= 64 + piece
 * length is always enough) and returns its length. */
int tok_stream_push(tok_stream *s, const mf_vocab *v, int32_t id, char *out, size_t cap);
/* Flushes what is held back (invalid trailing bytes are emitted as U+FFFD). */
int tok_stream_flush(tok_stream *s, char *out, size_t cap);

#endif

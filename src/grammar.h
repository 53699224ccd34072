/* grammar.h - GBNF grammars (as llama.cpp writes them) and the matcher that
 * constrains sampling to them.
 *
 * A grammar compiles to one flat array of elements (llama.cpp's layout): each rule is
 * its alternatives one after another, separated by GRAM_ALT and closed by GRAM_END;
 * a character class is a GRAM_CHAR or GRAM_CHAR_NOT followed by GRAM_CHAR_RNG_UPPER /
 * GRAM_CHAR_ALT elements. Repetitions (`*` `+` `?` `{m,n}`) and groups become
 * synthesized rules while parsing, so the matcher sees only sequences, rule
 * references and character classes.
 *
 * The matcher is a pushdown automaton held as a set of stacks of element positions
 * (the top is the next terminal to match), advanced one UTF-8 code point at a time;
 * a code point split over tokens is carried as a partial sequence. The stack set is
 * what the grammar allows next: an empty stack means the text so far is a complete
 * sentence.
 *
 * Hostile input: the source length, rule and element counts, group nesting and
 * repetition counts are bounded at parse time (an error naming line and column), left
 * recursion (also through rules that can match nothing) is an error, and at match
 * time the number and depth of stacks and the work of one step and of one mask are
 * bounded: a step that would exceed them is rejected (a mask leaves the tokens it did
 * not reach disallowed) and counted in gram_state_overflowed. */
#ifndef MINFER_GRAMMAR_H
#define MINFER_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util.h"

/* Limits (hostile grammars get a clear error or bounded work). */
enum {
    GRAM_MAX_SOURCE = 1 << 20,    /* bytes of GBNF text */
    GRAM_MAX_RULES = 1 << 16,     /* rules, synthesized ones included */
    GRAM_MAX_ELEMS = 1 << 21,     /* elements of all rules together */
    GRAM_MAX_NEST = 128,          /* ( ) nesting */
    GRAM_MAX_REPEAT = 4096,       /* m and n of {m,n} */
    GRAM_MAX_STACKS = 2048,       /* stacks alive at once in a matcher */
    GRAM_MAX_DEPTH = 4096,        /* elements on one stack (nesting of the text) */
    GRAM_MAX_EXPAND = 1 << 16,    /* stack expansions of one code point step */
    GRAM_MAX_SET_INTS = 1 << 20,  /* ints of one stack set (stacks times their depth) */
    GRAM_MAX_ARENA_INTS = 1 << 24, /* ints of the distinct stack sets one mask walk stores */
    GRAM_MAX_MASK_WORK = 1 << 26, /* steps and expansions of one mask: past it the rest is disallowed */
    GRAM_MAX_VOCAB = 1 << 24,     /* tokens of a vocabulary */
    GRAM_MAX_TOKEN_BYTES = 1 << 16, /* bytes of one token */
};

typedef enum gram_etype {
    GRAM_END = 0,            /* end of a rule */
    GRAM_ALT = 1,            /* start of another alternative */
    GRAM_RULE_REF = 2,       /* value: rule id */
    GRAM_CHAR = 3,           /* value: code point; starts a class */
    GRAM_CHAR_NOT = 4,       /* value: code point; starts a negated class */
    GRAM_CHAR_RNG_UPPER = 5, /* value: upper bound of the range the previous char starts */
    GRAM_CHAR_ALT = 6,       /* value: another code point of the class */
    GRAM_CHAR_ANY = 7,       /* `.`: any code point */
} gram_etype;

typedef struct gram_elem {
    uint32_t type;  /* gram_etype */
    uint32_t value;
} gram_elem;

typedef struct gram {
    gram_elem *elems;      /* [n_elems] all rules, each closed by GRAM_END */
    uint32_t n_elems;
    uint32_t *rule_start;  /* [n_rules] index of each rule's first element */
    char **rule_name;      /* [n_rules] names ("value", "value_3" for synthesized ones) */
    uint32_t n_rules;
    uint32_t root;         /* id of the rule named "root" */
} gram;

/* Parses GBNF text src[0..len) (any bytes; need not be NUL-terminated). Returns MF_OK
 * and *out, or MF_ERR_INPUT with err naming the line, column and problem (or
 * MF_ERR_NOMEM). */
int gram_parse(gram **out, const char *src, size_t len, mf_err *err);
void gram_free(gram *g);
/* Writes the compiled grammar back as GBNF (one rule a line), for tests and -v. */
void gram_print(const gram *g, FILE *f);

/* ---------------------------------------------------------------- matcher */

typedef struct gram_state gram_state;

/* A matcher at the start of g's root rule. g must outlive it. NULL + err when the
 * root's expansion exceeds the limits. */
gram_state *gram_state_new(const gram *g, mf_err *err);
gram_state *gram_state_clone(const gram_state *s);
void gram_state_free(gram_state *s);
/* Feeds bytes[0..n): returns 1 and advances s when the grammar allows them (a
 * trailing incomplete UTF-8 sequence is kept for the next call), else returns 0 and
 * leaves s as it was. */
int gram_state_accept(gram_state *s, const char *bytes, size_t n);
/* Would gram_state_accept return 1? Does not change s. */
int gram_state_can_accept(gram_state *s, const char *bytes, size_t n);
/* 1 when the text so far is a complete sentence (end of generation allowed). */
int gram_state_is_accepting(const gram_state *s);
/* 1 when nothing more can follow: accepting and no stack wants more text, or no
 * stack at all (a dead state). */
int gram_state_is_done(const gram_state *s);
/* Number of steps refused because a limit (GRAM_MAX_STACKS, _DEPTH, _EXPAND) was hit. */
int gram_state_overflowed(const gram_state *s);

/* ---------------------------------------------------------------- token masks */

/* The vocabulary as a trie of token byte strings (each token's bytes as it appears in
 * output), built once per vocabulary and shared by every matcher. Tokens whose bytes
 * are empty (control tokens) are never in the trie; end-of-generation tokens are
 * listed apart and allowed only where the grammar accepts. */
typedef struct gram_vocab gram_vocab;

/* tokens[i] / lens[i]: the bytes of token i (copied); eog[i] (NULL: none):
 * end-of-generation token. */
gram_vocab *gram_vocab_new(int n_vocab, const char *const *tokens, const size_t *lens, const uint8_t *eog,
                           mf_err *err);
void gram_vocab_free(gram_vocab *tv);
int gram_vocab_n(const gram_vocab *tv);
/* Token id's bytes (*len of them; "" for an id out of range). */
const char *gram_vocab_token(const gram_vocab *tv, int32_t id, size_t *len);
int gram_vocab_is_eog(const gram_vocab *tv, int32_t id);

/* Words of a token bitset: (n_vocab + 31) / 32; token t is bit t & 31 of word t >> 5. */
int gram_mask_words(const gram_vocab *tv);
/* bits[0..gram_mask_words) = the tokens the grammar allows next (end-of-generation
 * tokens only where the text so far is a complete sentence); returns how many, or -1
 * when memory ran out. strip_space: a token's leading space is not output (SPM's
 * first piece after BOS, see tok_stream) and is not matched; the token " " alone is
 * then not allowed. Steps that hit a limit count in gram_state_overflowed and leave
 * their tokens out. */
int gram_mask(gram_state *s, const gram_vocab *tv, int strip_space, uint32_t *bits);
/* The matcher's whole state as ints (the same text read so far gives the same key):
 * a cache key for masks. Valid until s changes. */
const int32_t *gram_state_key(const gram_state *s, size_t *n);

#endif

/* tokenizer.c - SPM and byte-level BPE tokenizers, llama.cpp-compatible.
 *
 * Encoding, in data-flow order:
 *
 *   text --special-token partition--> fragments (raw text | special token id)
 *   SPM: raw fragment --" " -> U+2581, leading space--> symbols (one per UTF-8 char)
 *        --merge the adjacent pair whose concatenation is the highest-scoring token--
 *        --> tokens; a symbol that is no token falls back to <0xNN> byte tokens
 *   BPE: raw fragment --invalid UTF-8 decoded as llama.cpp does--> pre-tokenizer regexes (PCRE2)
 *        --> words; word bytes --GPT-2 byte alphabet--> symbols (one per byte)
 *        --merge the adjacent pair with the lowest merge rank--> tokens
 *
 * Both merge loops are llama.cpp's (llm_tokenizer_spm / llm_tokenizer_bpe): a priority
 * queue of candidate pairs, ties broken by the leftmost pair, stale entries skipped
 * when popped. Same queue order = same tokens, so the order rules below are load-bearing.
 *
 * Pre-tokenizer regexes. llama.cpp applies a pre-type's regexes one after another, each
 * one splitting every fragment the previous one produced (matches and the gaps between
 * them both become fragments), with its own Unicode category tables. We run the same
 * regexes with PCRE2 in UTF+UCP mode, whose \p{L}/\p{N}/\p{P}/\p{M} are the same
 * general categories. One difference matters: PCRE2's UCP \s also matches U+180E
 * (via \h), which is not White_Space and not whitespace for llama.cpp or HF; so every
 * \s / \S is rewritten to an explicit White_Space class before compiling (re_expand).
 * llama.cpp's hand-written splitters for the gpt2, llama3 and qwen2 regexes were
 * checked against the regex semantics they stand for (tests/test_tokenizer.c has the
 * cases: digit triples, "\s+(?!\S)" backing off one space, "\s*[\r\n]+"), and every
 * pre-tokenizer here was compared with llama.cpp itself on thousands of strings.
 *
 * Every byte of the input is hostile: lengths are explicit (NULs are text), invalid
 * UTF-8 is decoded leniently like llama.cpp (BPE) or byte-encoded (SPM), nothing
 * recurses on input size. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

enum {
    TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3,
    TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6,
};

#define TOK_MAX_RE 6
#define TOK_MAX_TEXT ((size_t)256 << 20) /* keeps every offset (even x3 after U+FFFD) in 32 bits */

/* ============================== pre-tokenizers ============================== */

/* The regexes, as in llama.cpp's llama-vocab.cpp (llm_tokenizer_bpe). */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* CJK ranges of deepseek's pre-tokenizers. U+0800-U+4E00 contains whitespace
 * (U+1680, U+2000-U+200A, U+3000, ...), which llama.cpp turns into a vertical tab
 * before matching, so there it never matches this class: exclude \s to agree. */
#define RE_DEEPSEEK_CJK "(?:(?!\\s)[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}])+"

typedef struct pretok_def {
    const char *names;           /* tokenizer.ggml.pre values, space separated */
    const char *re[TOK_MAX_RE];  /* applied in order; NULL-terminated */
    int ignore_merges;           /* a whole word that is a token is taken as is (llama3) */
    int add_bos;                 /* default of add_bos_token */
} pretok_def;

static const pretok_def PRETOKS[] = {
    { "default",
      { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" }, 0, 0 },
    { "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
      { RE_LLAMA3 }, 1, 1 },
    { "dbrx smaug-bpe chatglm-bpe glm4", { RE_LLAMA3 }, 0, 0 },
    { "deepseek-llm",
      { "[\r\n]",
        "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
        /* llama.cpp's range is U+3000-U+3002, but its U+3000 was turned into a
         * vertical tab before matching (see RE_DEEPSEEK_CJK): start at U+3001. */
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+",
        "\\s+$",
        RE_DEEPSEEK_CJK,
        "\\p{N}+" }, 0, 0 },
    { "deepseek-coder",
      { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DEEPSEEK_CJK, "\\p{N}" }, 0, 0 },
    { "falcon", { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" }, 0, 0 },
    { "starcoder refact command-r smollm codeshell exaone minerva-7b mellum2",
      { "\\p{N}", RE_GPT2 }, 0, 0 },
    { "gpt-2 gpt2 phi-2 mpt olmo jais trillion granite-docling exaone4 jina-es jina-de "
      "jina-v1-en jina-v2-es jina-v2-de jina-v2-code roberta-bpe gigachat a.x-4.0 mellum modern-bert",
      { RE_GPT2 }, 0, 0 },
    { "qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2",
      { RE_QWEN2 }, 0, 0 },
    { "qwen35",
      { RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      0, 0 },
    { "tekken",
      { "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      1, 1 },
    { "gpt-4o llama4 kanana2 talkie",
      { "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" RE_CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" RE_CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      0, 0 },
    { "poro-chat bloom gpt3-finnish", { " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+" }, 0, 0 },
    { "viking", { " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+", "\\p{N}" }, 0, 0 },
    { "seed-coder",
      { RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      0, 0 },
    { "minicpm5",
      { "\\p{N}{1,3}",
        RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      1, 0 },
};

/* White_Space (what llama.cpp's tables, HF's Oniguruma and Python call whitespace). */
#define WS_CLASS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Rewrites \s and \S of a regex into explicit White_Space classes. Returns a malloc'd
 * string, or NULL (out of memory, or \S inside a class, which has no class form). */
static char *re_expand(const char *re) {
    size_t n = strlen(re), cap = n + 1, o = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (re[i] == '\\') cap += sizeof WS_CLASS + 3;
    char *out = malloc(cap);
    if (!out) return NULL;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = re[i];
        if (c == '\\' && i + 1 < n) {
            char d = re[++i];
            if (d == 's' || d == 'S') {
                if (in_class && d == 'S') { free(out); return NULL; }
                if (!in_class) { out[o++] = '['; if (d == 'S') out[o++] = '^'; }
                memcpy(out + o, WS_CLASS, sizeof WS_CLASS - 1);
                o += sizeof WS_CLASS - 1;
                if (!in_class) out[o++] = ']';
            } else {
                out[o++] = c;
                out[o++] = d;
            }
            continue;
        }
        if (c == '[' && !in_class) in_class = 1;
        else if (c == ']' && in_class) in_class = 0;
        out[o++] = c;
    }
    out[o] = 0;
    return out;
}

static int names_has(const char *names, const char *name, size_t len) {
    const char *p = names;
    while (*p) {
        const char *e = strchr(p, ' ');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && !memcmp(p, name, len)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* ================================ the vocab ================================ */

/* One BPE merge: (left string id, right string id) -> rank and the merged string id. */
typedef struct merge_slot {
    uint64_t key;  /* left << 32 | right; MERGE_EMPTY when free */
    int32_t rank;
    int32_t res;
} merge_slot;
#define MERGE_EMPTY UINT64_MAX

struct mf_vocab {
    tok_kind kind;
    int32_t n_vocab;
    /* String table: ids [0, n_vocab) are the tokens themselves (a text that occurs
     * twice maps to its last id, like llama.cpp's token_to_id); BPE adds merge halves
     * and results that are not tokens after them, so every symbol a merge can make
     * has an id and the merge loop never builds strings. */
    int32_t n_str, cap_str;
    size_t *str_off;       /* [cap_str] into pool */
    uint32_t *str_len;     /* [cap_str] */
    uint32_t *str_hash;    /* [cap_str] */
    char *pool;
    size_t pool_len, pool_cap;
    int32_t *slots;        /* open addressing, -1 free; [slot_mask + 1] */
    size_t slot_mask;

    float *score;          /* [n_vocab] SPM merge priority */
    uint8_t *type;         /* [n_vocab] TT_* */
    uint8_t *eog;          /* [n_vocab] 1 = ends generation */
    char *piece;           /* rendered text of every token, special = 0 */
    size_t *piece_off;     /* [n_vocab] */
    uint32_t *piece_len;   /* [n_vocab] */

    int32_t bos, eos, unk, pad, eot, eom;
    int add_bos, add_eos, add_space_prefix;

    int32_t *special;      /* control / user-defined / unknown ids, longest text first */
    int32_t n_special;

    /* SPM */
    int32_t byte_tok[256]; /* token of <0xNN> (or of the raw byte), -1 if none */
    int spm_segments;      /* 1: no token has U+2581 inside after a non-U+2581, so no
                              merge crosses the start of a "▁word" (see spm_fragment) */

    /* BPE */
    int32_t byte_sid[256];         /* string id of byte b's GPT-2 character, -1 if none */
    uint8_t byte_enc[256][2];      /* byte b's GPT-2 character in UTF-8 */
    uint8_t byte_enc_len[256];
    merge_slot *merges;
    size_t merge_mask;
    int ignore_merges;
    pcre2_code *re[TOK_MAX_RE];
    int n_re;
};

static uint32_t hash_bytes(const void *p, size_t n) {
    /* FNV-1a, folded: strings here are short, and this keeps the loop tiny. */
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 0x100000001b3ull; }
    return (uint32_t)(h ^ (h >> 32));
}

static int32_t str_find_h(const mf_vocab *v, const void *s, size_t n, uint32_t h) {
    if (!v->slots || n > UINT32_MAX) return -1;
    for (size_t i = h & v->slot_mask;; i = (i + 1) & v->slot_mask) {
        int32_t id = v->slots[i];
        if (id < 0) return -1;
        if (v->str_hash[id] == h && v->str_len[id] == n && !memcmp(v->pool + v->str_off[id], s, n)) return id;
    }
}

static int32_t str_find(const mf_vocab *v, const void *s, size_t n) {
    return str_find_h(v, s, n, hash_bytes(s, n));
}

static int slots_grow(mf_vocab *v) {
    size_t cap = v->slots ? (v->slot_mask + 1) * 2 : 1024;
    int32_t *slots = malloc(cap * sizeof *slots);
    if (!slots) return -1;
    memset(slots, 0xFF, cap * sizeof *slots);
    size_t mask = cap - 1;
    if (v->slots) {
        for (size_t i = 0; i <= v->slot_mask; i++) {
            int32_t id = v->slots[i];
            if (id < 0) continue;
            size_t j = v->str_hash[id] & mask;
            while (slots[j] >= 0) j = (j + 1) & mask;
            slots[j] = id;
        }
        free(v->slots);
    }
    v->slots = slots;
    v->slot_mask = mask;
    return 0;
}

/* Appends string s as id n_str. replace: if the text is already present, point it at
 * the new id (tokens: last wins); otherwise return the existing id. Returns the id
 * the text maps to, or -1 when out of memory. */
static int32_t str_add(mf_vocab *v, const char *s, size_t n, int replace) {
    if (n > UINT32_MAX || v->n_str == INT32_MAX) return -1;
    uint32_t h = hash_bytes(s, n);
    int32_t old = str_find_h(v, s, n, h);
    if (old >= 0 && !replace) return old;
    if (v->n_str == v->cap_str) {
        int32_t cap = v->cap_str ? (v->cap_str > INT32_MAX / 2 ? INT32_MAX : v->cap_str * 2) : 1024;
        size_t *off = realloc(v->str_off, (size_t)cap * sizeof *off);
        if (!off) return -1;
        v->str_off = off;
        uint32_t *len = realloc(v->str_len, (size_t)cap * sizeof *len);
        if (!len) return -1;
        v->str_len = len;
        uint32_t *hs = realloc(v->str_hash, (size_t)cap * sizeof *hs);
        if (!hs) return -1;
        v->str_hash = hs;
        v->cap_str = cap;
    }
    if (v->pool_len + n > v->pool_cap) {
        size_t cap = v->pool_cap ? v->pool_cap : 4096;
        while (cap < v->pool_len + n) {
            if (cap > SIZE_MAX / 2) return -1;
            cap *= 2;
        }
        char *p = realloc(v->pool, cap);
        if (!p) return -1;
        v->pool = p;
        v->pool_cap = cap;
    }
    int32_t id = v->n_str++;
    memcpy(v->pool + v->pool_len, s, n);
    v->str_off[id] = v->pool_len;
    v->str_len[id] = (uint32_t)n;
    v->str_hash[id] = h;
    v->pool_len += n;
    if (old >= 0) { /* same text, newer id: repoint the slot */
        for (size_t i = h & v->slot_mask;; i = (i + 1) & v->slot_mask)
            if (v->slots[i] == old) { v->slots[i] = id; return id; }
    }
    if (!v->slots || (size_t)v->n_str * 2 > v->slot_mask + 1) {
        if (slots_grow(v)) return -1;
    }
    size_t i = h & v->slot_mask;
    while (v->slots[i] >= 0) i = (i + 1) & v->slot_mask;
    v->slots[i] = id;
    return id;
}

static const merge_slot *merge_find(const mf_vocab *v, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & v->merge_mask;
    for (;; i = (i + 1) & v->merge_mask) {
        const merge_slot *m = &v->merges[i];
        if (m->key == key) return m;
        if (m->key == MERGE_EMPTY) return NULL;
    }
}

void tok_free(mf_vocab *v) {
    if (!v) return;
    free(v->str_off); free(v->str_len); free(v->str_hash); free(v->pool); free(v->slots);
    free(v->score); free(v->type); free(v->eog);
    free(v->piece); free(v->piece_off); free(v->piece_len);
    free(v->special); free(v->merges);
    for (int i = 0; i < v->n_re; i++) pcre2_code_free(v->re[i]);
    free(v);
}

/* ---------------------------------- loading ---------------------------------- */

/* Reads a token id key: absent -> dflt; present but not a token of the vocab -> dflt
 * (llama.cpp does the same; 0xFFFFFFFF is the converters' "none" and stays quiet). */
static int load_id(const gguf_file *f, const char *key, int32_t n_vocab, int32_t dflt, int32_t *out, mf_err *err) {
    uint32_t u;
    *out = dflt >= 0 && dflt < n_vocab ? dflt : -1;
    int rc = gguf_get_u32(f, key, &u, err);
    if (rc < 0) return rc;
    if (rc == 1) return 0;
    if (u >= (uint32_t)n_vocab) {
        if (u != UINT32_MAX) mf_log("tokenizer: %s = %u is outside the vocab of %d tokens, ignored", key, u, n_vocab);
        return 0;
    }
    *out = (int32_t)u;
    return 0;
}

static int load_flag(const gguf_file *f, const char *key, int *flag, mf_err *err) {
    int b;
    int rc = gguf_get_bool(f, key, &b, err);
    if (rc < 0) return rc;
    if (rc == 0) *flag = b != 0;
    return 0;
}

/* Parses a byte token's text "<0xNN>"; -1 if it is not one. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Renders every token once (special = 0), so tok_piece is a copy. */
static int build_pieces(mf_vocab *v) {
    size_t total = 0;
    for (int32_t i = 0; i < v->n_vocab; i++) total += v->str_len[i];
    v->piece = malloc(total ? total : 1);
    v->piece_off = malloc((size_t)v->n_vocab * sizeof *v->piece_off);
    v->piece_len = malloc((size_t)v->n_vocab * sizeof *v->piece_len);
    if (!v->piece || !v->piece_off || !v->piece_len) return -1;
    size_t o = 0;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        const char *s = v->pool + v->str_off[i];
        size_t n = v->str_len[i];
        v->piece_off[i] = o;
        switch (v->type[i]) {
        case TT_USER:
            memcpy(v->piece + o, s, n);
            o += n;
            break;
        case TT_BYTE: {
            int b = parse_byte_token(s, n);
            if (b >= 0) v->piece[o++] = (char)b;
            break;
        }
        case TT_NORMAL:
            if (v->kind == TOK_KIND_SPM) {
                for (size_t k = 0; k < n;) { /* U+2581 -> ' ' */
                    if (k + 3 <= n && !memcmp(s + k, "\xE2\x96\x81", 3)) { v->piece[o++] = ' '; k += 3; }
                    else v->piece[o++] = s[k++];
                }
            } else {
                for (size_t k = 0; k < n;) { /* GPT-2 alphabet -> bytes */
                    uint32_t cp;
                    int l = uni_decode((const uint8_t *)s + k, n - k, &cp);
                    int b = l ? uni_gpt2_byte(cp) : -1;
                    if (b >= 0) { v->piece[o++] = (char)b; k += (size_t)l; continue; }
                    /* Not in the alphabet: keep the bytes as they are (llama.cpp prints
                     * an [UNK_BYTE_...] marker here; the text itself is more useful). */
                    size_t m = l ? (size_t)l : 1;
                    memcpy(v->piece + o, s + k, m);
                    o += m;
                    k += m;
                }
            }
            break;
        default: /* control, unknown: only with special; unused, undefined: never */
            break;
        }
        v->piece_len[i] = (uint32_t)(o - v->piece_off[i]);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static const char *const EOG_NAMES[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "</s>", "<|endoftext|>", "<|eom_id|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "<|return|>", "<|call|>", "<end_of_utterance>", "<eos>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", /* deepseek */
};

static int load_specials(mf_vocab *v, const gguf_file *f, mf_err *err) {
    int rc;
    int32_t n = v->n_vocab;
    int spm = v->kind == TOK_KIND_SPM;
    /* Defaults: SentencePiece's conventional ids for SPM; nothing for BPE (llama.cpp
     * guesses 11, Falcon's, which would be a random token for any other vocab). */
    if ((rc = load_id(f, "tokenizer.ggml.bos_token_id", n, spm ? 1 : -1, &v->bos, err))) return rc;
    if ((rc = load_id(f, "tokenizer.ggml.eos_token_id", n, spm ? 2 : -1, &v->eos, err))) return rc;
    if ((rc = load_id(f, "tokenizer.ggml.unknown_token_id", n, spm ? 0 : -1, &v->unk, err))) return rc;
    if ((rc = load_id(f, "tokenizer.ggml.padding_token_id", n, -1, &v->pad, err))) return rc;
    if ((rc = load_id(f, "tokenizer.ggml.eot_token_id", n, -1, &v->eot, err))) return rc;
    if ((rc = load_id(f, "tokenizer.ggml.eom_token_id", n, -1, &v->eom, err))) return rc;
    int32_t fim[3];
    if ((rc = load_id(f, "tokenizer.ggml.fim_pad_token_id", n, -1, &fim[0], err))) return rc;
    if ((rc = load_id(f, "tokenizer.ggml.fim_rep_token_id", n, -1, &fim[1], err))) return rc;
    if ((rc = load_id(f, "tokenizer.ggml.fim_sep_token_id", n, -1, &fim[2], err))) return rc;

    if ((rc = load_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos, err))) return rc;
    if ((rc = load_flag(f, "tokenizer.ggml.add_eos_token", &v->add_eos, err))) return rc;
    if (spm && (rc = load_flag(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err))) return rc;

    v->eog = calloc((size_t)n, 1);
    if (!v->eog) return mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory");
    int32_t ids[] = { v->eos, v->eot, v->eom, fim[0], fim[1], fim[2] };
    for (size_t i = 0; i < MF_ARRAY_LEN(ids); i++)
        if (ids[i] >= 0) v->eog[ids[i]] = 1;
    int32_t named[MF_ARRAY_LEN(EOG_NAMES)];
    for (size_t i = 0; i < MF_ARRAY_LEN(EOG_NAMES); i++) {
        int32_t id = str_find(v, EOG_NAMES[i], strlen(EOG_NAMES[i]));
        named[i] = id >= 0 && id < n && v->type[id] == TT_CONTROL ? id : -1;
        if (named[i] >= 0) v->eog[named[i]] = 1;
    }
    /* gpt-oss (harmony): <|end|> closes a message, not the generation, when the vocab
     * has <|return|> and <|call|> (llama.cpp's rule). */
    if (named[2] >= 0 && named[10] >= 0 && named[11] >= 0 && named[2] != v->eos) v->eog[named[2]] = 0;

    /* Special tokens matched in the text, longest first so that a token containing
     * another wins; ties by id for a deterministic order (llama.cpp's std::sort leaves
     * ties unspecified). */
    int32_t cnt = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t t = v->type[i];
        if ((t == TT_CONTROL || t == TT_USER || t == TT_UNKNOWN) && v->str_len[i] > 0) cnt++;
    }
    v->n_special = cnt;
    v->special = malloc((size_t)(cnt ? cnt : 1) * sizeof *v->special);
    uint64_t *keys = malloc((size_t)(cnt ? cnt : 1) * sizeof *keys);
    if (!v->special || !keys) { free(keys); return mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory"); }
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t t = v->type[i];
        if ((t == TT_CONTROL || t == TT_USER || t == TT_UNKNOWN) && v->str_len[i] > 0)
            keys[k++] = ((uint64_t)(UINT32_MAX - v->str_len[i]) << 32) | (uint32_t)i; /* length desc, id asc */
    }
    qsort(keys, (size_t)cnt, sizeof *keys, cmp_u64);
    for (int32_t i = 0; i < cnt; i++) v->special[i] = (int32_t)(keys[i] & 0xFFFFFFFFu);
    free(keys);
    return 0;
}

static int load_bpe(mf_vocab *v, const gguf_file *f, gguf_str pre, int has_pre, mf_err *err) {
    const gguf_kv *mk;
    int rc = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_VTYPE_STRING, &mk, err);
    if (rc < 0) return rc;
    if (rc == 1) return mf_fail(err, MF_ERR_INPUT, "tokenizer: gpt2 model without tokenizer.ggml.merges");
    if (mk->arr_count > (uint64_t)INT32_MAX / 4)
        return mf_fail(err, MF_ERR_INPUT, "tokenizer: %llu merges is too many", (unsigned long long)mk->arr_count);
    size_t n_merges = (size_t)mk->arr_count;
    size_t cap = 1024;
    while (cap < n_merges * 2) cap *= 2;
    v->merges = malloc(cap * sizeof *v->merges);
    if (!v->merges) return mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory for %zu merges", n_merges);
    for (size_t i = 0; i < cap; i++) v->merges[i].key = MERGE_EMPTY;
    v->merge_mask = cap - 1;

    char *buf = NULL;
    size_t buf_cap = 0;
    for (size_t i = 0; i < n_merges; i++) {
        gguf_str m = gguf_arr_str(mk, i);
        if (m.len < 3 || m.len > UINT32_MAX) continue;
        /* "a b" splits at the first space at or after byte 1 (llama.cpp's
         * find(' ', 1)), so a may itself be a space. */
        const char *sp = memchr(m.ptr + 1, ' ', (size_t)m.len - 1);
        if (!sp || sp == m.ptr + m.len - 1) continue;
        size_t la = (size_t)(sp - m.ptr), lb = (size_t)m.len - la - 1;
        if (la + lb > buf_cap) {
            buf_cap = (la + lb) * 2;
            char *nb = realloc(buf, buf_cap);
            if (!nb) { free(buf); return mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory"); }
            buf = nb;
        }
        memcpy(buf, m.ptr, la);
        memcpy(buf + la, sp + 1, lb);
        int32_t a = str_add(v, m.ptr, la, 0);
        int32_t b = a >= 0 ? str_add(v, sp + 1, lb, 0) : -1;
        int32_t ab = b >= 0 ? str_add(v, buf, la + lb, 0) : -1;
        if (ab < 0) { free(buf); return mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory"); }
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        size_t j = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & v->merge_mask;
        while (v->merges[j].key != MERGE_EMPTY && v->merges[j].key != key) j = (j + 1) & v->merge_mask;
        if (v->merges[j].key == key) continue; /* duplicate merge: the first (lowest) rank stays */
        v->merges[j].key = key;
        v->merges[j].rank = (int32_t)i;
        v->merges[j].res = ab;
    }
    free(buf);

    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        int l = uni_encode(uni_gpt2_cp((uint8_t)b), u);
        memcpy(v->byte_enc[b], u, 2);
        v->byte_enc_len[b] = (uint8_t)l;
        v->byte_sid[b] = str_find(v, u, (size_t)l);
    }

    /* Pre-tokenizer by name; unknown -> default, as llama.cpp would refuse the file. */
    const pretok_def *def = &PRETOKS[0];
    if (has_pre) {
        size_t k;
        for (k = 0; k < MF_ARRAY_LEN(PRETOKS); k++)
            if (names_has(PRETOKS[k].names, pre.ptr, (size_t)pre.len)) break;
        if (k < MF_ARRAY_LEN(PRETOKS)) def = &PRETOKS[k];
        else mf_log("warning: tokenizer: unknown pre-tokenizer '%.*s', using 'default' (tokens may differ from the model's)",
                    (int)MF_MIN(pre.len, 64), pre.ptr);
    } else {
        mf_log("warning: tokenizer: no tokenizer.ggml.pre, using the 'default' pre-tokenizer");
    }
    v->ignore_merges = def->ignore_merges;
    v->add_bos = def->add_bos;
    for (int k = 0; k < TOK_MAX_RE && def->re[k]; k++) {
        char *pat = re_expand(def->re[k]);
        if (!pat) return mf_fail(err, MF_ERR_NOMEM, "tokenizer: cannot expand regex %d", k);
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
        free(pat);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return mf_fail(err, MF_ERR_INPUT, "tokenizer: pre-tokenizer regex %d: %s at %zu", k, (char *)msg, (size_t)eo);
        }
        v->re[v->n_re++] = re;
        /* The JIT is 5-10x faster here; without it (some platforms) the interpreter
         * gives the same splits. */
        if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0)
            mf_log_once(jit_warned, "tokenizer: PCRE2 JIT unavailable, using the PCRE2 interpreter");
    }
    return 0;
}

int tok_load(mf_vocab **out, const gguf_file *f, mf_err *err) {
    *out = NULL;
    int rc;
    gguf_str model, pre = { 0 };
    if ((rc = gguf_get_str(f, "tokenizer.ggml.model", &model, err)) < 0) return rc;
    if (rc == 1) return mf_fail(err, MF_ERR_INPUT, "tokenizer: missing tokenizer.ggml.model");
    tok_kind kind;
    if (gguf_str_eq(model, "llama")) kind = TOK_KIND_SPM;
    else if (gguf_str_eq(model, "gpt2")) kind = TOK_KIND_BPE;
    else return mf_fail(err, MF_ERR_INPUT, "tokenizer: unsupported tokenizer.ggml.model '%.*s' (llama and gpt2 are)",
                        (int)MF_MIN(model.len, 64), model.ptr);
    int has_pre = 0;
    if ((rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre, err)) < 0) return rc;
    has_pre = rc == 0;

    const gguf_kv *tk, *sk = NULL, *yk = NULL;
    if ((rc = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VTYPE_STRING, &tk, err)) < 0) return rc;
    if (rc == 1) return mf_fail(err, MF_ERR_INPUT, "tokenizer: missing tokenizer.ggml.tokens");
    if (tk->arr_count == 0 || tk->arr_count > (uint64_t)INT32_MAX / 4)
        return mf_fail(err, MF_ERR_INPUT, "tokenizer: vocab of %llu tokens", (unsigned long long)tk->arr_count);
    int32_t n = (int32_t)tk->arr_count;
    if ((rc = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_VTYPE_F32, &sk, err)) < 0) return rc;
    if (rc == 1) sk = NULL;
    if ((rc = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, &yk, err)) < 0) return rc;
    if (rc == 1) yk = NULL;
    if (sk && sk->arr_count < (uint64_t)n)
        return mf_fail(err, MF_ERR_INPUT, "tokenizer: %llu scores for %d tokens", (unsigned long long)sk->arr_count, n);
    if (yk && yk->arr_count < (uint64_t)n)
        return mf_fail(err, MF_ERR_INPUT, "tokenizer: %llu token types for %d tokens", (unsigned long long)yk->arr_count, n);

    mf_vocab *v = calloc(1, sizeof *v);
    if (!v) return mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory");
    v->kind = kind;
    v->n_vocab = n;
    v->add_bos = kind == TOK_KIND_SPM;
    v->add_space_prefix = kind == TOK_KIND_SPM;
    v->score = malloc((size_t)n * sizeof *v->score);
    v->type = malloc((size_t)n);
    if (!v->score || !v->type) { rc = mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory for %d tokens", n); goto fail; }
    for (int32_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(tk, (uint64_t)i);
        char empty[32];
        if (s.len == 0) { /* llama.cpp names empty tokens so they cannot match text */
            snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            s.ptr = empty;
            s.len = strlen(empty);
        }
        if (s.len > UINT32_MAX) { rc = mf_fail(err, MF_ERR_INPUT, "tokenizer: token %d is %llu bytes", i, (unsigned long long)s.len); goto fail; }
        if (str_add(v, s.ptr, (size_t)s.len, 1) != i) { rc = mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory"); goto fail; }
        v->score[i] = sk ? gguf_arr_f32(sk, (uint64_t)i) : 0.0f;
        int32_t t = yk ? gguf_arr_i32(yk, (uint64_t)i) : TT_NORMAL;
        v->type[i] = t >= TT_NORMAL && t <= TT_BYTE ? (uint8_t)t : TT_UNDEFINED;
    }

    if (kind == TOK_KIND_BPE) {
        if ((rc = load_bpe(v, f, pre, has_pre, err))) goto fail;
    } else {
        for (int b = 0; b < 256; b++) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            int32_t id = str_find(v, hex, 6);
            if (id < 0) { char c = (char)b; id = str_find(v, &c, 1); }
            v->byte_tok[b] = id;
        }
        v->spm_segments = 1;
        for (int32_t i = 0; i < n && v->spm_segments; i++) {
            const char *t = v->pool + v->str_off[i];
            size_t l = v->str_len[i];
            for (size_t k = 1; k + 3 <= l; k++)
                if (!memcmp(t + k, "\xE2\x96\x81", 3) && (k < 3 || memcmp(t + k - 3, "\xE2\x96\x81", 3))) {
                    v->spm_segments = 0;
                    mf_log("tokenizer: token %d has U+2581 inside; SPM runs unsegmented (slower, same tokens)", i);
                    break;
                }
        }
    }
    if ((rc = load_specials(v, f, err))) goto fail;
    if (build_pieces(v)) { rc = mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory"); goto fail; }
    *out = v;
    return 0;
fail:
    tok_free(v);
    return rc;
}

/* -------------------------------- accessors -------------------------------- */

tok_kind tok_get_kind(const mf_vocab *v) { return v->kind; }
int tok_n_vocab(const mf_vocab *v) { return v->n_vocab; }
int32_t tok_bos(const mf_vocab *v) { return v->bos; }
int32_t tok_eos(const mf_vocab *v) { return v->eos; }
int32_t tok_unk(const mf_vocab *v) { return v->unk; }
int32_t tok_pad(const mf_vocab *v) { return v->pad; }
int tok_add_bos(const mf_vocab *v) { return v->add_bos && v->bos >= 0; }
int tok_is_eog(const mf_vocab *v, int32_t id) { return id >= 0 && id < v->n_vocab && v->eog[id]; }

int32_t tok_find(const mf_vocab *v, const char *text) {
    int32_t id = str_find(v, text, strlen(text));
    return id < v->n_vocab ? id : -1;
}

const char *tok_text(const mf_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_vocab) { if (len) *len = 0; return ""; }
    if (len) *len = v->str_len[id];
    return v->pool + v->str_off[id];
}

int tok_type(const mf_vocab *v, int32_t id) {
    return id >= 0 && id < v->n_vocab ? v->type[id] : 0;
}

/* ================================= encoding ================================= */

typedef struct sym {
    int32_t sid;     /* BPE: string id of the symbol's text (-1: none) */
    int32_t prev, next;
    uint32_t start;  /* byte offset in the word / fragment */
    uint32_t n;      /* bytes; 0 once merged into its left neighbour */
} sym;

/* A candidate merge of symbols left and right. ln/rn are their sizes when queued: if
 * either changed since, the pair was consumed by another merge (stale). */
typedef struct bigram {
    double score;    /* higher first: SPM token score, BPE -rank */
    int32_t left, right;
    uint32_t ln, rn;
} bigram;

typedef struct span { uint32_t off, len; } span;
typedef struct frag { size_t off, len; int32_t id; } frag; /* id >= 0: special token */

typedef struct enc {
    const mf_vocab *v;
    mf_err *err;
    int32_t *out; size_t n_out, cap_out;
    sym *syms; size_t cap_syms;
    bigram *heap; size_t n_heap, cap_heap;
    span *spans, *spans2; size_t n_spans, cap_spans, n_spans2, cap_spans2;
    frag *frags, *frags2; size_t n_frags, cap_frags, n_frags2, cap_frags2;
    uint8_t *buf; size_t cap_buf;   /* escaped (SPM) or sanitised (BPE) fragment */
    uint8_t *wbuf; size_t cap_wbuf; /* a BPE word in the GPT-2 alphabet */
    uint8_t *rbuf; size_t cap_rbuf; /* the regexes' copy of a fragment with surrogates */
    pcre2_match_data *md;
    /* Word cache for this call: a word (BPE) or segment (SPM) seen before reuses its
     * ids. English repeats words so much that this triples throughput; the cache is
     * per call so the vocab stays read-only and shareable between threads. */
    uint32_t *wc_slots; size_t wc_mask;          /* entry index + 1; 0 free */
    struct wc_entry { uint32_t hash, klen, nids; size_t koff, ioff; } *wc; size_t n_wc, cap_wc;
    uint8_t *wc_keys; size_t n_wc_keys, cap_wc_keys;
    int32_t *wc_ids; size_t n_wc_ids, cap_wc_ids;
} enc;

#define WC_MAX_KEY 256            /* longer words are not cached */
#define WC_MAX_ENTRIES (1u << 20)

/* Grows *p to hold at least need elements of size sz. 0 or MF_ERR_NOMEM. */
static int grow(void **p, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    if (c > SIZE_MAX / sz) return MF_ERR_NOMEM;
    void *q = realloc(*p, c * sz);
    if (!q) return MF_ERR_NOMEM;
    *p = q;
    *cap = c;
    return 0;
}
#define GROW(e, arr, cap, need) grow((void **)&(e)->arr, &(e)->cap, (need), sizeof *(e)->arr)

static int emit(enc *e, int32_t id) {
    if (e->n_out == e->cap_out && GROW(e, out, cap_out, e->n_out + 1))
        return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
    e->out[e->n_out++] = id;
    return 0;
}

static int bigram_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int heap_push(enc *e, bigram b) {
    if (e->n_heap == e->cap_heap && GROW(e, heap, cap_heap, e->n_heap + 1))
        return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
    size_t i = e->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = b;
    return 0;
}

static bigram heap_pop(enc *e) {
    bigram top = e->heap[0];
    bigram last = e->heap[--e->n_heap];
    size_t n = e->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&e->heap[c + 1], &e->heap[c])) c++;
        if (!bigram_before(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = last;
    return top;
}

/* Merged symbol l absorbs its right neighbour r. */
static void sym_merge(sym *s, int32_t l, int32_t r) {
    s[l].n += s[r].n;
    s[r].n = 0;
    s[l].next = s[r].next;
    if (s[r].next >= 0) s[s[r].next].prev = l;
}

/* Emits the ids of word w[0..n) through fn, reusing them when the word was seen
 * before in this call. */
static int cached(enc *e, const uint8_t *w, size_t n, int (*fn)(enc *, const uint8_t *, uint32_t)) {
    if (n > WC_MAX_KEY) return fn(e, w, (uint32_t)n);
    uint32_t h = hash_bytes(w, n);
    if (e->wc_slots) {
        for (size_t i = h & e->wc_mask;; i = (i + 1) & e->wc_mask) {
            uint32_t k = e->wc_slots[i];
            if (!k) break;
            const struct wc_entry *en = &e->wc[k - 1];
            if (en->hash == h && en->klen == n && !memcmp(e->wc_keys + en->koff, w, n)) {
                if (GROW(e, out, cap_out, e->n_out + en->nids)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
                memcpy(e->out + e->n_out, e->wc_ids + en->ioff, en->nids * sizeof(int32_t));
                e->n_out += en->nids;
                return 0;
            }
        }
    }
    size_t before = e->n_out;
    int rc = fn(e, w, (uint32_t)n);
    if (rc || e->n_wc >= WC_MAX_ENTRIES) return rc;
    /* Remember it. Failing to grow the cache only costs speed: keep going without. */
    size_t nids = e->n_out - before;
    if (!e->wc_slots || (e->n_wc + 1) * 2 > e->wc_mask + 1) {
        size_t cap = e->wc_slots ? (e->wc_mask + 1) * 2 : 4096;
        uint32_t *sl = calloc(cap, sizeof *sl);
        if (!sl) return 0;
        for (size_t j = 0; j < e->n_wc; j++) {
            size_t i = e->wc[j].hash & (cap - 1);
            while (sl[i]) i = (i + 1) & (cap - 1);
            sl[i] = (uint32_t)j + 1;
        }
        free(e->wc_slots);
        e->wc_slots = sl;
        e->wc_mask = cap - 1;
    }
    if (GROW(e, wc, cap_wc, e->n_wc + 1) || GROW(e, wc_keys, cap_wc_keys, e->n_wc_keys + n) ||
        GROW(e, wc_ids, cap_wc_ids, e->n_wc_ids + nids))
        return 0;
    struct wc_entry *en = &e->wc[e->n_wc];
    *en = (struct wc_entry){ h, (uint32_t)n, (uint32_t)nids, e->n_wc_keys, e->n_wc_ids };
    memcpy(e->wc_keys + e->n_wc_keys, w, n);
    /* a word may encode to no ids (BPE bytes the vocab has no token for): then both
     * arrays may still be NULL, and NULL + 0 / memcpy(NULL, ..) are undefined
     * (found by fuzz/fuzz_gguf.c) */
    if (nids) memcpy(e->wc_ids + e->n_wc_ids, e->out + before, nids * sizeof(int32_t));
    e->n_wc_keys += n;
    e->n_wc_ids += nids;
    size_t i = h & e->wc_mask;
    while (e->wc_slots[i]) i = (i + 1) & e->wc_mask;
    e->wc_slots[i] = (uint32_t)++e->n_wc;
    return 0;
}

/* ---------------------------------- SPM ---------------------------------- */

static int spm_try_pair(enc *e, const uint8_t *text, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return 0;
    const sym *s = e->syms;
    int32_t id = str_find(e->v, text + s[l].start, (size_t)s[l].n + s[r].n);
    if (id < 0 || id >= e->v->n_vocab) return 0;
    bigram b = { e->v->score[id], l, r, s[l].n, s[r].n };
    return heap_push(e, b);
}

/* Tokenizes escaped text t[0..m) as one unit: llama.cpp's llm_tokenizer_spm. */
static int spm_segment(enc *e, const uint8_t *t, uint32_t m) {
    const mf_vocab *v = e->v;
    /* One symbol per UTF-8 character, cut by the lead byte alone (llama.cpp's rule:
     * invalid bytes become 1-byte symbols that fall back to byte tokens). */
    size_t ns = 0;
    for (size_t o = 0; o < m;) {
        size_t l = (size_t)uni_len_lax(t[o]);
        o += l < m - o ? l : m - o;
        ns++;
    }
    if (ns == 0) return 0;
    if (GROW(e, syms, cap_syms, ns)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
    sym *sy = e->syms;
    size_t k = 0;
    for (size_t o = 0; o < m; k++) {
        size_t l = (size_t)uni_len_lax(t[o]);
        if (l > m - o) l = m - o;
        sy[k] = (sym){ -1, (int32_t)k - 1, k + 1 < ns ? (int32_t)k + 1 : -1, (uint32_t)o, (uint32_t)l };
        o += l;
    }
    int rc;
    e->n_heap = 0;
    for (size_t i = 1; i < ns; i++)
        if ((rc = spm_try_pair(e, t, (int32_t)i - 1, (int32_t)i))) return rc;
    while (e->n_heap) {
        bigram b = heap_pop(e);
        sy = e->syms;
        if (sy[b.left].n != b.ln || sy[b.right].n != b.rn || b.ln == 0 || b.rn == 0) continue;
        sym_merge(sy, b.left, b.right);
        if ((rc = spm_try_pair(e, t, sy[b.left].prev, b.left))) return rc;
        if ((rc = spm_try_pair(e, t, b.left, sy[b.left].next))) return rc;
    }
    sy = e->syms;
    for (int32_t i = 0; i != -1; i = sy[i].next) {
        int32_t id = str_find(v, t + sy[i].start, sy[i].n);
        if (id >= 0 && id < v->n_vocab) {
            if ((rc = emit(e, id))) return rc;
            continue;
        }
        /* Not a token: one byte token per byte. A vocab without them (llama.cpp would
         * abort) gets <unk>, or nothing. */
        for (uint32_t j = 0; j < sy[i].n; j++) {
            int32_t bt = v->byte_tok[t[sy[i].start + j]];
            if (bt < 0) bt = v->unk;
            if (bt >= 0 && (rc = emit(e, bt))) return rc;
        }
    }
    return 0;
}

/* Tokenizes one raw fragment: spaces become U+2581, and a leading one is added when
 * prefix is set (start of text or after a special token, as llama.cpp does).
 *
 * llama.cpp merges over the whole fragment with one priority queue; with a megabyte
 * of text that queue misses cache on every operation. When the vocab has no token
 * with U+2581 inside after something else (checked at load), no merge can cross a
 * symbol boundary where U+2581 follows a non-U+2581 symbol, and each segment between
 * such boundaries goes through exactly the merges it would have had in the global
 * queue, in the same relative order (score, then position): so segments are
 * tokenized alone (and cached), with the same result. */
static int spm_fragment(enc *e, const uint8_t *s, size_t n, int prefix) {
    size_t need = 3 * n + 3;
    if (GROW(e, buf, cap_buf, need)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
    uint8_t *t = e->buf;
    size_t m = 0;
    if (prefix) { memcpy(t, "\xE2\x96\x81", 3); m = 3; }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(t + m, "\xE2\x96\x81", 3); m += 3; }
        else t[m++] = s[i];
    }
    if (!e->v->spm_segments) return spm_segment(e, t, (uint32_t)m);
    size_t seg = 0;
    int rc;
    for (size_t o = 0; o < m;) {
        if (o > seg && o + 3 <= m && !memcmp(t + o, "\xE2\x96\x81", 3) && (o < 3 || memcmp(t + o - 3, "\xE2\x96\x81", 3))) {
            if ((rc = cached(e, t + seg, o - seg, spm_segment))) return rc;
            seg = o;
        }
        size_t l = (size_t)uni_len_lax(t[o]);
        o += l < m - o ? l : m - o;
    }
    return m > seg ? cached(e, t + seg, m - seg, spm_segment) : 0;
}

/* ---------------------------------- BPE ---------------------------------- */

static int bpe_try_pair(enc *e, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return 0;
    const sym *s = e->syms;
    if (s[l].sid < 0 || s[r].sid < 0) return 0;
    const merge_slot *m = merge_find(e->v, s[l].sid, s[r].sid);
    if (!m) return 0;
    bigram b = { -(double)m->rank, l, r, s[l].n, s[r].n };
    return heap_push(e, b);
}

/* Emits a final symbol that is not a token: each byte of its GPT-2-alphabet text
 * looked up as a one-byte token, dropped when there is none (llama.cpp's fallback;
 * it only ever fires for vocabs missing part of the byte alphabet). */
static int bpe_emit_unknown(enc *e, const uint8_t *word, const sym *s) {
    const mf_vocab *v = e->v;
    const uint8_t *t;
    size_t n;
    if (s->sid >= 0) { t = (const uint8_t *)v->pool + v->str_off[s->sid]; n = v->str_len[s->sid]; }
    else { t = v->byte_enc[word[s->start]]; n = v->byte_enc_len[word[s->start]]; }
    for (size_t j = 0; j < n; j++) {
        int32_t id = str_find(v, t + j, 1);
        if (id >= 0 && id < v->n_vocab) {
            int rc = emit(e, id);
            if (rc) return rc;
        }
    }
    return 0;
}

static int bpe_word(enc *e, const uint8_t *w, uint32_t n) {
    const mf_vocab *v = e->v;
    int rc;
    if (n == 0) return 0;
    if (v->ignore_merges && n > 1) {
        /* llama3: a word that is itself a token is emitted whole, even when the merges
         * would split it differently. */
        if (GROW(e, wbuf, cap_wbuf, (size_t)n * 2)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
        size_t m = 0;
        for (uint32_t i = 0; i < n; i++) {
            memcpy(e->wbuf + m, v->byte_enc[w[i]], v->byte_enc_len[w[i]]);
            m += v->byte_enc_len[w[i]];
        }
        int32_t id = str_find(v, e->wbuf, m);
        if (id >= 0 && id < v->n_vocab) return emit(e, id);
    }
    if (GROW(e, syms, cap_syms, n)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
    sym *s = e->syms;
    for (uint32_t i = 0; i < n; i++)
        s[i] = (sym){ v->byte_sid[w[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, i, 1 };
    e->n_heap = 0;
    for (uint32_t i = 1; i < n; i++)
        if ((rc = bpe_try_pair(e, (int32_t)i - 1, (int32_t)i))) return rc;
    while (e->n_heap) {
        bigram b = heap_pop(e);
        s = e->syms;
        if (s[b.left].n != b.ln || s[b.right].n != b.rn || b.ln == 0 || b.rn == 0) continue;
        const merge_slot *m = merge_find(v, s[b.left].sid, s[b.right].sid);
        s[b.left].sid = m->res;
        sym_merge(s, b.left, b.right);
        if ((rc = bpe_try_pair(e, s[b.left].prev, b.left))) return rc;
        if ((rc = bpe_try_pair(e, b.left, s[b.left].next))) return rc;
    }
    s = e->syms;
    for (int32_t i = 0; i != -1; i = s[i].next) {
        if (s[i].sid >= 0 && s[i].sid < v->n_vocab) rc = emit(e, s[i].sid);
        else rc = bpe_emit_unknown(e, w, &s[i]);
        if (rc) return rc;
    }
    return 0;
}

/* Splits every span of e->spans with regex re into e->spans2 (matches and the gaps
 * between them), then swaps. */
static int pretok_split(enc *e, const pcre2_code *re, const uint8_t *text) {
    e->n_spans2 = 0;
    for (size_t si = 0; si < e->n_spans; si++) {
        const uint8_t *subj = text + e->spans[si].off;
        size_t len = e->spans[si].len, pos = 0, last = 0;
        while (pos < len) {
            int rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK, e->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) /* JIT stack or limits: retry interpreted */
                rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                mf_log_once(re_warned, "warning: tokenizer: regex match failed (PCRE2 error %d); rest of a fragment kept whole", rc);
                break;
            }
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
            size_t ms = ov[0], me = ov[1];
            if (me <= ms) { /* empty match: step over one character, split nothing */
                pos = ms + 1;
                while (pos < len && (subj[pos] & 0xC0) == 0x80) pos++;
                continue;
            }
            if (GROW(e, spans2, cap_spans2, e->n_spans2 + 2)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
            uint32_t base = e->spans[si].off;
            if (ms > last) e->spans2[e->n_spans2++] = (span){ base + (uint32_t)last, (uint32_t)(ms - last) };
            e->spans2[e->n_spans2++] = (span){ base + (uint32_t)ms, (uint32_t)(me - ms) };
            last = pos = me;
        }
        if (last < len) {
            if (GROW(e, spans2, cap_spans2, e->n_spans2 + 1)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
            e->spans2[e->n_spans2++] = (span){ e->spans[si].off + (uint32_t)last, (uint32_t)(len - last) };
        }
    }
    span *t = e->spans; e->spans = e->spans2; e->spans2 = t;
    size_t c = e->cap_spans; e->cap_spans = e->cap_spans2; e->cap_spans2 = c;
    e->n_spans = e->n_spans2;
    return 0;
}

/* Pre-tokenizes one raw fragment into e->spans over *out_text: s itself when it is
 * valid UTF-8, else its llama.cpp-style decoding in e->buf (see uni_sanitize_lax). */
static int pretok_fragment(enc *e, const uint8_t *s, size_t n, const uint8_t **out_text) {
    const mf_vocab *v = e->v;
    int rc;
    e->n_spans = 0;
    *out_text = s;
    if (n == 0) return 0;
    const uint8_t *text = s, *rtext = s; /* rtext: what the regexes see */
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        uint32_t cp;
        int l = uni_decode(s + i, n - i, &cp);
        if (!l) break;
        i += (size_t)l;
    }
    if (i < n) {
        if (GROW(e, buf, cap_buf, 3 * n)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
        size_t n_sur;
        n = uni_sanitize_lax(s, n, e->buf, &n_sur);
        text = rtext = e->buf;
        if (n_sur) {
            /* PCRE2 needs valid UTF-8: the regexes get a private-use stand-in of the
             * same length (U+E000: like a surrogate, neither letter, digit, space
             * nor punctuation, and in no literal range of any pre-tokenizer). */
            if (GROW(e, rbuf, cap_rbuf, n)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
            memcpy(e->rbuf, e->buf, n);
            for (size_t k = 0; k + 2 < n; k++)
                if (e->rbuf[k] == 0xED && e->rbuf[k + 1] >= 0xA0) { /* ED A0..BF = surrogate */
                    e->rbuf[k] = 0xEE; e->rbuf[k + 1] = 0x80; e->rbuf[k + 2] = 0x80;
                    k += 2;
                }
            rtext = e->rbuf;
        }
    }
    if (!e->md) {
        e->md = pcre2_match_data_create(1, NULL);
        if (!e->md) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
    }
    if (GROW(e, spans, cap_spans, 1)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
    e->spans[0] = (span){ 0, (uint32_t)n };
    e->n_spans = 1;
    for (int k = 0; k < v->n_re; k++)
        if ((rc = pretok_split(e, v->re[k], rtext))) return rc;
    *out_text = text;
    return 0;
}

static int bpe_fragment(enc *e, const uint8_t *s, size_t n) {
    const uint8_t *text;
    int rc = pretok_fragment(e, s, n, &text);
    for (size_t k = 0; !rc && k < e->n_spans; k++)
        rc = cached(e, text + e->spans[k].off, e->spans[k].len, bpe_word);
    return rc;
}

/* ----------------------------- special tokens ----------------------------- */

static int frag_push(enc *e, size_t off, size_t len, int32_t id) {
    if (GROW(e, frags2, cap_frags2, e->n_frags2 + 1)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
    e->frags2[e->n_frags2++] = (frag){ off, len, id };
    return 0;
}

/* Cuts the text at every occurrence of a special token, longest tokens first, each
 * token's occurrences found left to right in the raw pieces the previous ones left
 * (llama.cpp's tokenizer_st_partition). */
static int partition(enc *e, const uint8_t *text, size_t len, int parse_special) {
    const mf_vocab *v = e->v;
    int rc;
    e->n_frags = 0;
    if (len == 0) return 0;
    if (GROW(e, frags, cap_frags, 1)) return mf_fail(e->err, MF_ERR_NOMEM, "tokenizer: out of memory");
    e->frags[e->n_frags++] = (frag){ 0, len, -1 };
    uint8_t present[256] = { 0 };
    for (size_t i = 0; i < len; i++) present[text[i]] = 1;
    for (int32_t k = 0; k < v->n_special; k++) {
        int32_t id = v->special[k];
        if (!parse_special && v->type[id] != TT_USER) continue;
        const uint8_t *t = (const uint8_t *)v->pool + v->str_off[id];
        size_t tl = v->str_len[id];
        if (!present[t[0]] || tl > len) continue;
        int found = 0;
        for (size_t f = 0; f < e->n_frags && !found; f++)
            if (e->frags[f].id < 0 && memmem(text + e->frags[f].off, e->frags[f].len, t, tl)) found = 1;
        if (!found) continue;
        e->n_frags2 = 0;
        for (size_t f = 0; f < e->n_frags; f++) {
            frag fr = e->frags[f];
            if (fr.id >= 0) { if ((rc = frag_push(e, fr.off, fr.len, fr.id))) return rc; continue; }
            size_t pos = fr.off, end = fr.off + fr.len;
            const uint8_t *m;
            while (pos < end && (m = memmem(text + pos, end - pos, t, tl))) {
                size_t at = (size_t)(m - text);
                if (at > pos && (rc = frag_push(e, pos, at - pos, -1))) return rc;
                if ((rc = frag_push(e, at, tl, id))) return rc;
                pos = at + tl;
            }
            if (pos < end && (rc = frag_push(e, pos, end - pos, -1))) return rc;
        }
        frag *tmp = e->frags; e->frags = e->frags2; e->frags2 = tmp;
        size_t c = e->cap_frags; e->cap_frags = e->cap_frags2; e->cap_frags2 = c;
        e->n_frags = e->n_frags2;
    }
    return 0;
}

static void enc_free(enc *e) {
    free(e->out); free(e->syms); free(e->heap); free(e->spans); free(e->spans2);
    free(e->frags); free(e->frags2); free(e->buf); free(e->wbuf); free(e->rbuf);
    free(e->wc_slots); free(e->wc); free(e->wc_keys); free(e->wc_ids);
    if (e->md) pcre2_match_data_free(e->md);
}

int tok_encode(const mf_vocab *v, const char *text, size_t len, int add_bos, int parse_special,
               int32_t **ids, mf_err *err) {
    *ids = NULL;
    if (!text && len) return mf_fail(err, MF_ERR_USAGE, "tokenizer: NULL text");
    if (len > TOK_MAX_TEXT)
        return mf_fail(err, MF_ERR_INPUT, "tokenizer: text of %zu bytes is over the %zu MiB limit", len, TOK_MAX_TEXT >> 20);
    enc e = { .v = v, .err = err };
    const uint8_t *t = (const uint8_t *)text;
    int rc = 0;
    if (add_bos && v->add_bos && v->bos >= 0 && (rc = emit(&e, v->bos))) goto out;
    if ((rc = partition(&e, t, len, parse_special))) goto out;
    int prev_special = 1; /* SPM: the text start counts as after a special token */
    for (size_t f = 0; f < e.n_frags; f++) {
        frag fr = e.frags[f];
        if (fr.id >= 0) {
            rc = emit(&e, fr.id);
            prev_special = 1;
        } else if (v->kind == TOK_KIND_SPM) {
            rc = spm_fragment(&e, t + fr.off, fr.len, v->add_space_prefix && prev_special);
            prev_special = 0;
        } else {
            rc = bpe_fragment(&e, t + fr.off, fr.len);
        }
        if (rc) goto out;
    }
    if (add_bos && v->add_eos && v->eos >= 0 && (rc = emit(&e, v->eos))) goto out;
    if (e.n_out > (size_t)INT32_MAX) { rc = mf_fail(err, MF_ERR_INPUT, "tokenizer: too many tokens"); goto out; }
    if (!e.out && GROW(&e, out, cap_out, 1)) { rc = mf_fail(err, MF_ERR_NOMEM, "tokenizer: out of memory"); goto out; }
    *ids = e.out;
    e.out = NULL;
    rc = (int)e.n_out;
out:
    enc_free(&e);
    return rc;
}

int tok_pretokenize(const mf_vocab *v, const char *text, size_t len,
                    void (*fn)(void *user, const char *word, size_t n), void *user, mf_err *err) {
    if (v->kind != TOK_KIND_BPE) return mf_fail(err, MF_ERR_USAGE, "tokenizer: pre-tokenizing needs a BPE vocab");
    if (!text && len) return mf_fail(err, MF_ERR_USAGE, "tokenizer: NULL text");
    if (len > TOK_MAX_TEXT) return mf_fail(err, MF_ERR_INPUT, "tokenizer: text of %zu bytes is too long", len);
    enc e = { .v = v, .err = err };
    const uint8_t *t;
    int rc = pretok_fragment(&e, (const uint8_t *)text, len, &t);
    if (!rc) {
        for (size_t k = 0; k < e.n_spans; k++) fn(user, (const char *)t + e.spans[k].off, e.spans[k].len);
        rc = e.n_spans > (size_t)INT32_MAX ? INT32_MAX : (int)e.n_spans;
    }
    enc_free(&e);
    return rc;
}

/* =============================== detokenizing =============================== */

/* The bytes token id renders to; special: control/unknown tokens show their text. */
static const char *piece_of(const mf_vocab *v, int32_t id, int special, size_t *len) {
    if (id < 0 || id >= v->n_vocab) { *len = 0; return ""; }
    if (special && (v->type[id] == TT_CONTROL || v->type[id] == TT_UNKNOWN)) {
        *len = v->str_len[id];
        return v->pool + v->str_off[id];
    }
    *len = v->piece_len[id];
    return v->piece + v->piece_off[id];
}

int tok_piece(const mf_vocab *v, int32_t id, int special, char *buf, size_t cap) {
    size_t n;
    const char *p = piece_of(v, id, special, &n);
    if (cap) memcpy(buf, p, MF_MIN(n, cap));
    return n > (size_t)INT32_MAX ? INT32_MAX : (int)n;
}

void tok_stream_init(tok_stream *s) { memset(s, 0, sizeof *s); }

/* Writes s[0..n) to out as valid UTF-8 (a byte that starts no valid sequence becomes
 * U+FFFD), stopping at a character that does not fit. Returns bytes written. */
static size_t put_valid(const uint8_t *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = s[i] < 0x80 ? 1 : uni_decode(s + i, n - i, &cp);
        const uint8_t *src = l ? s + i : (const uint8_t *)"\xEF\xBF\xBD";
        size_t m = l ? (size_t)l : 3;
        if (o + m > cap) break;
        memcpy(out + o, src, m);
        o += m;
        i += l ? (size_t)l : 1;
    }
    return o;
}

int tok_stream_push(tok_stream *s, const mf_vocab *v, int32_t id, char *out, size_t cap) {
    int spm_strip = v->kind == TOK_KIND_SPM && v->add_space_prefix;
    if (id == v->bos && id >= 0) {
        s->first = spm_strip;
        return 0;
    }
    size_t n;
    const char *p = piece_of(v, id, 0, &n);
    if (s->first && n > 0) {
        if (spm_strip && p[0] == ' ') { p++; n--; }
        s->first = 0;
    }
    if (s->n_pending < 0 || s->n_pending > (int)sizeof s->pending) s->n_pending = 0;
    /* pending + piece, joined: on the stack for ordinary pieces. */
    uint8_t small[256];
    size_t total = (size_t)s->n_pending + n;
    uint8_t *b = total <= sizeof small ? small : malloc(total);
    if (!b) { /* cannot join: emit what is pending and the piece, each made valid */
        size_t o = put_valid((const uint8_t *)s->pending, (size_t)s->n_pending, out, cap);
        s->n_pending = 0;
        o += put_valid((const uint8_t *)p, n, out + o, cap - o);
        return (int)o;
    }
    memcpy(b, s->pending, (size_t)s->n_pending);
    memcpy(b + s->n_pending, p, n);
    size_t done = uni_complete_prefix(b, total);
    size_t o = put_valid(b, done, out, cap);
    s->n_pending = (int)(total - done); /* <= 3 by uni_complete_prefix */
    memcpy(s->pending, b + done, (size_t)s->n_pending);
    if (b != small) free(b);
    return (int)o;
}

int tok_stream_flush(tok_stream *s, char *out, size_t cap) {
    int had = s->n_pending > 0;
    s->n_pending = 0;
    /* The held bytes were a valid start of one character that never finished. */
    if (!had || cap < 3) return 0;
    memcpy(out, "\xEF\xBF\xBD", 3);
    return 3;
}

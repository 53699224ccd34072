/* test_grammar.c - the GBNF parser, the matcher, token masks and the constraint's
 * cache (src/grammar.c, src/constraint.c), and the JSON-schema converter's output
 * parsed by the grammar engine (issue 54).
 *
 * Masks are checked against brute force: for random grammars' states, every token of
 * a toy vocabulary is fed to a clone of the matcher on its own, and the mask must
 * allow exactly the tokens that clone accepts (end-of-generation exactly where the
 * text is complete). The python tests drive the same engine from the command line
 * (tests/json_schema_test.py, tests/grammar_test.py). */
#include <time.h>

#include "constraint.h"
#include "grammar.h"
#include "json_schema.h"
#include "minfer.h"
#include "test.h"
#include "tokenizer.h"

static gram *parse(const char *src) {
    gram *g = NULL;
    mf_err err = { { 0 } };
    if (gram_parse(&g, src, strlen(src), &err)) {
        fprintf(stderr, "parse failed: %s\n  grammar: %.200s\n", err.msg, src);
        return NULL;
    }
    return g;
}

/* 1: text is a complete sentence, 2: a proper prefix of one, 0: rejected */
static int match(const gram *g, const char *text, size_t n) {
    mf_err err = { { 0 } };
    gram_state *s = gram_state_new(g, &err);
    if (!s) return -1;
    int r = gram_state_accept(s, text, n) ? (gram_state_is_accepting(s) ? 1 : 2) : 0;
    gram_state_free(s);
    return r;
}

static void expect(const char *src, const char *text, int want) {
    gram *g = parse(src);
    CHECK(g != NULL, "grammar parses: %s", src);
    if (!g) return;
    int got = match(g, text, strlen(text));
    CHECK(got == want, "grammar %s, text '%s': got %d, want %d", src, text, got, want);
    gram_free(g);
}

/* The grammar must be refused with a message holding `word`. */
static void refuse(const char *src, size_t len, const char *word) {
    gram *g = NULL;
    mf_err err = { { 0 } };
    int rc = gram_parse(&g, src, len, &err);
    CHECK(rc == MF_ERR_INPUT && g == NULL && strstr(err.msg, word), "grammar '%.60s': rc %d, message '%s', want '%s'",
          src, rc, err.msg, word);
    gram_free(g);
}

static void test_parse_errors(void) {
    refuse("", 0, "no rule named 'root'");
    refuse("root ::= foo", 12, "'foo' is used but never defined");
    refuse("root ::= \"a\"\nroot ::= \"b\"", 25, "defined twice");
    refuse("root ::= root \"a\"", 17, "left recursion");
    refuse("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"", 36, "left recursion");
    refuse("root ::= e a\ne ::= \"\" | \"z\"\na ::= root", 38, "left recursion"); /* through a nullable rule */
    refuse("root ::= \"abc", 13, "unterminated literal");
    refuse("root ::= [abc", 13, "unterminated character class");
    refuse("root ::= []", 11, "empty character class");
    refuse("root ::= [z-a]", 14, "range's end below its start");
    refuse("root ::= \"\\q\"", 13, "unknown escape");
    refuse("root ::= \"\\x4\"", 14, "hex digits");
    refuse("root ::= \"\\U00110000\"", 21, "beyond U+10FFFF");
    refuse("root ::= \"a\"{5000}", 18, "repetition count above 4096");
    refuse("root ::= \"a\"{3,2}", 17, "n < m");
    refuse("root ::= * \"a\"", 14, "repetition without an item");
    refuse("root ::= ( \"a\"", 14, "expected ')'");
    refuse("root ::= <think>", 16, "token references");
    refuse("root = \"a\"", 10, "expected '::='");
    refuse("root ::= \"a\" )", 14, "unexpected ')'");
    refuse("root ::= \"\xff\"", 11, "invalid UTF-8");
    /* the line and column are named */
    gram *g = NULL;
    mf_err err = { { 0 } };
    const char *pos = "root ::= a\n\na ::= \"x\" ]";
    gram_parse(&g, pos, strlen(pos), &err);
    CHECK(strstr(err.msg, "line 3 column 11"), "position in '%s'", err.msg);
    /* nesting deeper than the limit */
    char deep[600];
    size_t n = (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 200; i++) deep[n++] = '(';
    deep[n++] = '"', deep[n++] = 'a', deep[n++] = '"';
    for (int i = 0; i < 200; i++) deep[n++] = ')';
    refuse(deep, n, "nested deeper");
    /* the source size limit */
    size_t big = (size_t)GRAM_MAX_SOURCE + 1;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    refuse(huge, big, "more than the limit");
    free(huge);
}

static void test_matching(void) {
    expect("root ::= \"abc\"", "abc", 1);
    expect("root ::= \"abc\"", "ab", 2);
    expect("root ::= \"abc\"", "abd", 0);
    expect("root ::= \"abc\"", "abcd", 0);
    expect("root ::= [a-c]+ \"!\"", "abcab!", 1);
    expect("root ::= [a-c]+ \"!\"", "!", 0);
    expect("root ::= [^a-c]*", "xyz\n", 1);
    expect("root ::= [^a-c]*", "xaz", 0);
    expect("root ::= \"x\"{2,3}", "x", 2);
    expect("root ::= \"x\"{2,3}", "xx", 1);
    expect("root ::= \"x\"{2,3}", "xxx", 1);
    expect("root ::= \"x\"{2,3}", "xxxx", 0);
    expect("root ::= \"x\"{2,}", "xxxxxxx", 1);
    expect("root ::= \"x\"{0} \"y\"", "y", 1);
    expect("root ::= (\"ab\" | \"cd\")? \"e\"", "cde", 1);
    expect("root ::= (\"ab\" | \"cd\")? \"e\"", "e", 1);
    expect("root ::= (\"ab\" | \"cd\")? \"e\"", "abcde", 0);
    expect("root ::= . . .", "a\n\xc3\xa9", 1); /* '.' is any code point, newline included */
    expect("root ::= [\\u00e0-\\u00ff]", "\xc3\xa9", 1);
    expect("root ::= [\\u00e0-\\u00ff]", "\xc3", 2);  /* a partial character: still possible */
    expect("root ::= [a-z]", "\xc3", 0);             /* no 2-byte character is in [a-z] */
    expect("root ::= [^a]", "\xf0\x9f\x98\x80", 1);  /* U+1F600 */
    expect("root ::= \"日本\"", "日本", 1);
    expect("root ::= [\\x00-\\U0010FFFF]*", "\xed\xa0\x80", 0); /* a surrogate is no character */
    expect("root ::= .*", "\xc0\xaf", 0);            /* an overlong form */
    expect("root ::= .*", "\xe0\x80\xaf", 0);        /* an overlong 3-byte form */
    expect("root ::= .*", "\xf4\x90\x80\x80", 0);    /* past U+10FFFF */
    expect("root ::= \"a\" ws \"b\"\nws ::= [ \\t]*", "a \t b", 1);
    /* comments and newlines inside groups */
    expect("# c\nroot ::= (\n  \"a\" # one\n  | \"b\"\n) \"c\" # two\n", "bc", 1);
    /* a rule reference directly followed by a group (llama.cpp's c.gbnf) */
    expect("root ::= x(\"+\" x)*\nx ::= [0-9]", "1+2+3", 1);
    /* recursion: balanced parentheses */
    const char *par = "root ::= p\np ::= \"(\" p* \")\"";
    expect(par, "(()(()))", 1);
    expect(par, "(()", 2);
    expect(par, "())", 0);
}

/* split points: feeding the text in pieces (a multi-byte character cut anywhere)
 * gives the same answer as feeding it whole */
static void test_pieces(void) {
    gram *g = parse("root ::= ( [a-z] | [\\u0400-\\u04ff] | \"😀\" )+");
    const char *text = "ab\xd0\x96\xf0\x9f\x98\x80z\xd1\x8f";
    size_t n = strlen(text);
    mf_err err = { { 0 } };
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            gram_state *s = gram_state_new(g, &err);
            int ok = gram_state_accept(s, text, a) && gram_state_accept(s, text + a, b - a) &&
                     gram_state_accept(s, text + b, n - b);
            CHECK(ok && gram_state_is_accepting(s), "split at %zu, %zu", a, b);
            gram_state_free(s);
        }
    /* a refused piece leaves the state as it was */
    gram_state *s = gram_state_new(g, &err);
    CHECK(gram_state_accept(s, "ab", 2), "prefix");
    CHECK(!gram_state_accept(s, "c!", 2), "refused piece");
    CHECK(gram_state_accept(s, "c", 1) && gram_state_is_accepting(s), "state unchanged after a refusal");
    CHECK(gram_state_can_accept(s, "zz", 2) && gram_state_accept(s, "d", 1), "can_accept leaves the state");
    gram_state *c = gram_state_clone(s);
    CHECK(c && gram_state_accept(c, "e", 1) && gram_state_is_accepting(c), "clone");
    gram_state_free(c);
    gram_state_free(s);
    gram_free(g);
}

/* ---------------------------------------------------------------- masks */

typedef struct toy {
    int n;
    const char **toks;
    size_t *lens;
    uint8_t *eog;
    gram_vocab *tv;
} toy;

static const char *toy_words[] = {
    "a", "b", "c", "ab", "abc", "ba", "cab", " ", " a", " b", "  ", "(", ")", "()", "((", "))", "x", "1", "12",
    "123", "-", "\"", "\":", "{", "}", "{\"", "é", "\xc3", "\xa9", "\xe6\x97", "\xa5", "日", "\xe6", "\xf0\x9f",
    "\x98\x80", "\xf0", "😀", ",", ", ", "\n", "true", "tru", "e", "null", "[", "]", "[]", "\\", "\\n", "z", "zz",
    "\xc0\xaf", "\xed\xa0\x80", "0", "9", ".", "5",
};

static void toy_init(toy *t) {
    t->n = (int)MF_ARRAY_LEN(toy_words) + 2;
    t->toks = calloc((size_t)t->n, sizeof *t->toks);
    t->lens = calloc((size_t)t->n, sizeof *t->lens);
    t->eog = calloc((size_t)t->n, 1);
    for (int i = 0; i < t->n - 2; i++) t->toks[i] = toy_words[i], t->lens[i] = strlen(toy_words[i]);
    t->toks[t->n - 2] = "", t->lens[t->n - 2] = 0;                   /* a control token: never allowed */
    t->toks[t->n - 1] = "", t->lens[t->n - 1] = 0, t->eog[t->n - 1] = 1; /* end of generation */
    mf_err err = { { 0 } };
    t->tv = gram_vocab_new(t->n, t->toks, t->lens, t->eog, &err);
    CHECK(t->tv != NULL, "toy vocab: %s", err.msg);
}

static void toy_free(toy *t) {
    gram_vocab_free(t->tv);
    free(t->toks); free(t->lens); free(t->eog);
}

/* the mask of s against each token fed to a clone on its own */
static int mask_vs_brute(gram_state *s, const toy *t, int strip, const char *what) {
    int words = gram_mask_words(t->tv);
    uint32_t *bits = calloc((size_t)words, sizeof *bits);
    int n = gram_mask(s, t->tv, strip, bits), bad = 0, count = 0;
    for (int i = 0; i < t->n; i++) {
        int want;
        if (t->eog[i]) want = gram_state_is_accepting(s);
        else if (!t->lens[i]) want = 0;
        else {
            const char *p = t->toks[i];
            size_t len = t->lens[i];
            if (strip && p[0] == ' ') {
                p++, len--;
                if (!len) { want = 0; goto have; }
            }
            want = gram_state_can_accept(s, p, len);
        }
    have:
        count += want;
        int got = bits[i >> 5] >> (i & 31) & 1;
        if (got != want) {
            bad++;
            fprintf(stderr, "FAIL %s: token %d '%s' mask %d, brute force %d\n", what, i, t->toks[i], got, want);
        }
    }
    CHECK(bad == 0 && n == count, "%s: %d tokens differ, count %d vs %d", what, bad, n, count);
    free(bits);
    return count;
}

static void test_masks(void) {
    toy t;
    toy_init(&t);
    const char *grammars[] = {
        "root ::= \"abc\" | \"ab\" \"c\"* | \"ba\"",
        "root ::= p\np ::= \"(\" p* \")\"",
        "root ::= [a-c]+ (\" \" [a-c]+)*",
        "root ::= \"日本\" | \"é\"+ | \"😀\" \"x\"?",
        "root ::= [^a]*",
        "root ::= \"\\\"\" [^\"\\\\]* \"\\\"\" \":\"?",
        "root ::= ( \"true\" | \"null\" | [0-9]+ ( \".\" [0-9]+ )? ) \",\"?",
        "root ::= \"\"",
    };
    mf_rng rng;
    mf_rng_seed(&rng, 54);
    mf_err err = { { 0 } };
    for (size_t k = 0; k < MF_ARRAY_LEN(grammars); k++) {
        gram *g = parse(grammars[k]);
        if (!g) { CHECK(0, "parse %s", grammars[k]); continue; }
        /* random walks: at each step check the mask, then take a random allowed token */
        for (int walk = 0; walk < 6; walk++) {
            gram_state *s = gram_state_new(g, &err);
            for (int step = 0; step < 12; step++) {
                char what[160];
                snprintf(what, sizeof what, "grammar %zu walk %d step %d", k, walk, step);
                int strip = step == 0 && walk % 2;
                if (!mask_vs_brute(s, &t, strip, what)) break;
                uint32_t bits[8] = { 0 };
                gram_mask(s, t.tv, strip, bits);
                int cands[128], nc = 0;
                for (int i = 0; i < t.n; i++)
                    if (bits[i >> 5] >> (i & 31) & 1 && !t.eog[i]) cands[nc++] = i;
                if (!nc) break;
                int pick = cands[mf_rng_u64(&rng) % (uint64_t)nc];
                const char *p = t.toks[pick];
                size_t len = t.lens[pick];
                if (strip && p[0] == ' ') p++, len--;
                CHECK(gram_state_accept(s, p, len), "an allowed token is accepted");
            }
            gram_state_free(s);
        }
        gram_free(g);
    }
    toy_free(&t);
}

/* the constraint: cached masks equal fresh ones, logits masked to -inf, EOG only at
 * the end, tokens refused with a message */
static void test_constraint(void) {
    toy t;
    toy_init(&t);
    mf_err err = { { 0 } };
    gram *g = parse("root ::= \"(\" \"a\"* \")\"");
    mf_constraint *c = constraint_new(g, t.tv, 0, &err);
    CHECK(c != NULL, "constraint_new: %s", err.msg);
    float *logits = malloc((size_t)t.n * sizeof *logits);
    for (int i = 0; i < t.n; i++) logits[i] = (float)i * 0.25f;
    int n;
    const float *row = constraint_apply(c, logits, &n);
    int paren = -1, a = -1, close = -1, eog = t.n - 1;
    for (int i = 0; i < t.n - 2; i++) {
        if (!strcmp(t.toks[i], "(")) paren = i;
        if (!strcmp(t.toks[i], "a")) a = i;
        if (!strcmp(t.toks[i], ")")) close = i;
    }
    CHECK(row[paren] == logits[paren] && isinf(row[a]) && isinf(row[eog]) && isinf(row[t.n - 2]), "first step");
    CHECK(constraint_accept(c, a, &err) == MF_ERR_INPUT && strstr(err.msg, "does not continue"), "refused: %s", err.msg);
    CHECK(constraint_accept(c, eog, &err) == MF_ERR_INPUT && strstr(err.msg, "end of generation"), "early EOG: %s", err.msg);
    CHECK(constraint_accept(c, paren, &err) == MF_OK, "accept (");
    for (int i = 0; i < 5; i++) {
        row = constraint_apply(c, logits, &n);
        CHECK(row[a] == logits[a] && row[close] == logits[close] && isinf(row[eog]) && isinf(row[paren]), "inside, step %d", i);
        CHECK(constraint_accept(c, a, &err) == MF_OK, "accept a");
    }
    uint64_t hits, misses;
    constraint_stats(c, &hits, &misses);
    CHECK(hits >= 4 && misses == 2, "cache: %llu hits, %llu misses", (unsigned long long)hits, (unsigned long long)misses);
    CHECK(constraint_accept(c, close, &err) == MF_OK && constraint_is_complete(c) && constraint_is_done(c), "closed");
    row = constraint_apply(c, logits, &n);
    CHECK(n == 1 && row[eog] == logits[eog], "done: only EOG (%d allowed)", n);
    CHECK(constraint_accept(c, eog, &err) == MF_OK, "EOG at the end");
    CHECK(constraint_reset(c, 0, &err) == MF_OK && !constraint_is_complete(c), "reset");
    /* a mask made ahead on the helper thread is the one constraint_apply then finds */
    for (int round = 0; round < 3; round++) {
        uint64_t h0, m0, h1, m1;
        constraint_stats(c, &h0, &m0);
        constraint_prefetch(c);
        constraint_prefetch_wait(c);
        constraint_stats(c, &h1, &m1);
        row = constraint_apply(c, logits, &n);
        uint64_t h2, m2;
        constraint_stats(c, &h2, &m2);
        CHECK(h1 + m1 == h0 + m0 + 1 && h2 == h1 + 1 && m2 == m1, "prefetch round %d: the apply hits the cache", round);
        CHECK(round ? !isinf(row[a]) : row[paren] == logits[paren], "prefetched mask, round %d", round);
        CHECK(constraint_accept(c, round ? a : paren, &err) == MF_OK, "accept after prefetch");
    }
    constraint_prefetch(c); /* freed while prefetched and waited: the thread is joined */
    constraint_prefetch_wait(c);
    CHECK(constraint_reset(c, 0, &err) == MF_OK, "reset again");
    row = constraint_apply(c, logits, &n);
    CHECK(row[paren] == logits[paren] && isinf(row[a]), "after reset: the first step again");
    constraint_free(c);
    gram_free(g);

    /* strip_first: " a" is matched as "a" for the first token only */
    g = parse("root ::= \"a\" \" b\"");
    c = constraint_new(g, t.tv, 1, &err);
    int sp_a = -1, sp_b = -1, sp = -1;
    for (int i = 0; i < t.n - 2; i++) {
        if (!strcmp(t.toks[i], " a")) sp_a = i;
        if (!strcmp(t.toks[i], " b")) sp_b = i;
        if (!strcmp(t.toks[i], " ")) sp = i;
    }
    row = constraint_apply(c, logits, &n);
    CHECK(!isinf(row[sp_a]) && !isinf(row[a]) && isinf(row[sp]) && isinf(row[sp_b]), "strip: first step");
    CHECK(constraint_accept(c, sp_a, &err) == MF_OK, "strip: ' a' as 'a'");
    row = constraint_apply(c, logits, &n);
    CHECK(!isinf(row[sp_b]) && isinf(row[a]), "strip: later tokens keep their space");
    constraint_free(c);
    gram_free(g);

    /* a grammar this vocabulary cannot write: nothing allowed */
    g = parse("root ::= \"#\"");
    c = constraint_new(g, t.tv, 0, &err);
    constraint_apply(c, logits, &n);
    CHECK(n == 0, "dead end: %d allowed", n);
    constraint_free(c);
    gram_free(g);
    free(logits);
    toy_free(&t);
}

/* the stack and expansion limits: bounded time and memory, counted refusals */
static void test_hostile(void) {
    mf_err err = { { 0 } };
    /* deep nesting of the text: refused past GRAM_MAX_DEPTH, not a crash */
    gram *g = parse("root ::= p\np ::= \"(\" p? \")\"");
    gram_state *s = gram_state_new(g, &err);
    int refused_at = -1;
    for (int i = 0; i < GRAM_MAX_DEPTH + 10 && refused_at < 0; i++)
        if (!gram_state_accept(s, "(", 1)) refused_at = i;
    CHECK(refused_at > 1000 && gram_state_overflowed(s) > 0, "depth limit at %d, %d overflows", refused_at,
          gram_state_overflowed(s));
    gram_state_free(s);
    gram_free(g);
    /* ambiguity that doubles the stacks each character: capped */
    g = parse("root ::= x*\nx ::= \"a\" | \"a\" \"a\"? | \"a\" y\ny ::= \"a\"*");
    s = gram_state_new(g, &err);
    clock_t t0 = clock();
    for (int i = 0; i < 200; i++) gram_state_accept(s, "a", 1);
    double dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(dt < 10.0, "ambiguous grammar: %.2f s for 200 characters", dt);
    gram_state_free(s);
    gram_free(g);
    /* a root that expands to too many stacks: a clear error */
    char *wide = malloc(1 << 20);
    size_t n = 0;
    n += (size_t)sprintf(wide + n, "root ::= ");
    for (int i = 0; i < 5000; i++) n += (size_t)sprintf(wide + n, "%s\"%c%d\"", i ? " | " : "", 'a' + i % 26, i);
    g = parse(wide);
    CHECK(g != NULL, "5000 alternatives parse");
    s = g ? gram_state_new(g, &err) : NULL;
    CHECK(s == NULL && strstr(err.msg, "stacks"), "5000 alternatives: '%s'", err.msg);
    gram_state_free(s);
    gram_free(g);
    /* nested repetitions become rules (bounded); a long item repeated is refused */
    n = (size_t)sprintf(wide, "root ::= ((((\"ab\"{4096}){4096}){4096}){4096})");
    gram *h = NULL;
    t0 = clock();
    int rc = gram_parse(&h, wide, n, &err);
    CHECK(rc == MF_OK && (double)(clock() - t0) / CLOCKS_PER_SEC < 5.0, "nested repetitions: rc %d '%s'", rc, err.msg);
    gram_free(h);
    n = (size_t)sprintf(wide, "root ::= \"");
    for (int i = 0; i < 1000; i++) wide[n++] = 'a';
    n += (size_t)sprintf(wide + n, "\"{4096}");
    h = NULL;
    rc = gram_parse(&h, wide, n, &err);
    CHECK(rc == MF_ERR_INPUT && strstr(err.msg, "too large"), "a long item repeated: rc %d '%s'", rc, err.msg);
    gram_free(h);
    free(wide);
}

/* gram_print writes a grammar that parses back to the same language */
static void test_print(void) {
    gram *g = parse("root ::= [a-c\\]^\"-]+ (\"x\" | \"\\u00e9\")? \"\\n\"{1,2}");
    if (!g) { CHECK(0, "print: the grammar parses"); return; }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    gram_print(g, f);
    fclose(f);
    gram *h = parse(buf);
    CHECK(h != NULL, "printed grammar parses:\n%s", buf);
    const char *texts[] = { "a]-^\"\xc3\xa9\n", "ccx\n\n", "d\n", "a\n\n\n" };
    for (size_t i = 0; h && i < MF_ARRAY_LEN(texts); i++)
        CHECK(match(g, texts[i], strlen(texts[i])) == match(h, texts[i], strlen(texts[i])), "printed grammar, text %zu", i);
    gram_free(g);
    gram_free(h);
    free(buf);
}

/* schema -> GBNF -> matcher: what validates is matched, what does not is refused */
static void test_schema(void) {
    struct { const char *schema; const char *good[4]; const char *bad[4]; } cases[] = {
        { "{\"type\":\"integer\",\"minimum\":-15,\"maximum\":120}", { "-15", "0", "99", "120" }, { "-16", "121", "007", "1.5" } },
        { "{\"type\":\"integer\",\"exclusiveMinimum\":9,\"exclusiveMaximum\":1000}", { "10", "999", "500", "10" },
          { "9", "1000", "-1", "0" } },
        { "{\"type\":\"number\",\"minimum\":-2,\"maximum\":3}", { "-2", "-1.5", "2.999", "3" }, { "-2.5", "3.01", "4", "1e2" } },
        { "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", { "\"ab\"", "\"\\u00e9\\n\"", "\"abc\"", "\"日本\"" },
          { "\"a\"", "\"abcd\"", "\"\\ud800a\"", "ab" } },
        { "{\"type\":\"string\",\"format\":\"date\"}", { "\"2024-02-28\"", "\"0001-12-31\"", "\"1999-04-30\"", "\"2000-01-01\"" },
          { "\"2024-02-30\"", "\"0000-01-01\"", "\"2024-04-31\"", "\"2024-13-01\"" } },
        { "{\"type\":\"string\",\"pattern\":\"^[a-c]{2}(x|yz)?\\\\d$\"}", { "\"ab1\"", "\"ccyz9\"", "\"bax0\"", "\"aa5\"" },
          { "\"a1\"", "\"abx\"", "\"abyz12\"", "\"dd1\"" } },
        { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"}},\"required\":[\"b\"]}",
          { "{\"a\":true,\"b\":null}", "{\"b\":null}", "{ \"a\" : false , \"b\" : null }", "{\"b\":null }" },
          { "{}", "{\"a\":true}", "{\"b\":null,\"a\":true}", "{\"b\":null,\"c\":1}" } },
        { "{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}",
          { "{\"k\":1,\"x\":\"y\"}", "{\"kk\":\"v\"}", "{\"\":\"\",\"k2\":\"\"}", "{}" }, { "{\"k\":\"s\"}", "{\"x\":1}", "{\"k\":1,\"k\":2}", "[]" } },
        { "{\"type\":\"object\"}", { "{}", "{\"a\": [1, {\"b\": null}]}", "{ \"x\" : \"y\" , \"z\": 1 }", "{\"\":0}" },
          { "[]", "{\"a\"}", "{,}", "null" } },
        { "{\"type\":\"array\",\"prefixItems\":[{\"const\":1},{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":3}",
          { "[1]", "[1,\"x\"]", "[1, \"x\", true]", "[ 1 ]" }, { "[]", "[2]", "[1,\"x\",true,false]", "[1,true]" } },
        { "{\"$defs\":{\"l\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/l\"}}},\"$ref\":\"#/$defs/l\"}",
          { "[]", "[[],[[]]]", "[[[[]]]]", "[ [ ] ]" }, { "[1]", "[[]", "{}", "[[],]" } },
        { "{\"enum\":[\"a\\\"b\",[1,{\"c\":null}],1.5]}", { "\"a\\\"b\"", "[1,{\"c\":null}]", "1.5", "1.5" },
          { "\"a\"", "[1, {\"c\":null}]", "1.50", "null" } },
    };
    mf_err err = { { 0 } };
    for (size_t k = 0; k < MF_ARRAY_LEN(cases); k++) {
        gram *g = NULL;
        int rc = constraint_compile(&g, CONSTRAINT_JSON_SCHEMA, cases[k].schema, strlen(cases[k].schema), &err);
        CHECK(rc == MF_OK, "schema %zu: %s", k, err.msg);
        if (rc) continue;
        for (int i = 0; i < 4; i++) {
            CHECK(match(g, cases[k].good[i], strlen(cases[k].good[i])) == 1, "schema %zu %s: '%s' refused", k,
                  cases[k].schema, cases[k].good[i]);
            CHECK(match(g, cases[k].bad[i], strlen(cases[k].bad[i])) != 1, "schema %zu %s: '%s' matched", k,
                  cases[k].schema, cases[k].bad[i]);
        }
        gram_free(g);
    }
    /* json_object: any object, nothing else */
    gram *g = NULL;
    CHECK(constraint_compile(&g, CONSTRAINT_JSON_OBJECT, NULL, 0, &err) == MF_OK, "json_object: %s", err.msg);
    const char *obj = "{\"a\": [1, -2.5e3, \"x\\u00e9\", {\"b\": {}}], \"c\": null}";
    CHECK(g && match(g, obj, strlen(obj)) == 1 && match(g, "[1]", 3) == 0, "json_object grammar");
    gram_free(g);
}

/* tool calls (the chat engine's tools): the function names and argument schemas */
static void test_tool_calls(void) {
    json_tool tools[2] = {
        { "get_weather", "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}", 0 },
        { "now", NULL, 0 },
    };
    tools[0].parameters_len = strlen(tools[0].parameters);
    json_tool_format fmt = { .call_prefix = "<tool_call>\n", .call_suffix = "\n</tool_call>", .separator = "\n",
                             .min_calls = 1, .max_calls = 2 };
    char *gb = NULL;
    size_t n = 0;
    mf_err err = { { 0 } };
    CHECK(json_tool_call_gbnf(tools, 2, &fmt, &gb, &n, &err) == MF_OK, "tool grammar: %s", err.msg);
    gram *g = gb ? parse(gb) : NULL;
    CHECK(g != NULL, "tool grammar parses:\n%s", gb ? gb : "");
    const char *one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const char *two = "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", "
                      "\"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>";
    const char *bad[] = { "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
                          "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>", "hello" };
    if (g) {
        CHECK(match(g, one, strlen(one)) == 1, "one call");
        CHECK(match(g, two, strlen(two)) == 1, "two calls");
        for (size_t i = 0; i < MF_ARRAY_LEN(bad); i++) CHECK(match(g, bad[i], strlen(bad[i])) != 1, "bad call %zu", i);
    }
    gram_free(g);
    free(gb);
    /* a tool whose schema is refused names the tool */
    tools[1].parameters = "{\"type\":\"object\",\"not\":{}}";
    tools[1].parameters_len = strlen(tools[1].parameters);
    CHECK(json_tool_call_gbnf(tools, 2, &fmt, &gb, &n, &err) == MF_ERR_INPUT && strstr(err.msg, "'now'") &&
          strstr(err.msg, "'not'"), "bad tool schema: %s", err.msg);
    fmt.min_calls = 0;
    CHECK(json_tool_call_gbnf(tools, 1, &fmt, &gb, &n, &err) == MF_ERR_USAGE, "min_calls 0: %s", err.msg);
    /* the name outside the arguments (Kimi K2's shape): NAME name_suffix ARGS */
    tools[1].parameters = NULL;
    json_tool_format bare = { .list_prefix = "<|tool_calls_section_begin|>", .list_suffix = "<|tool_calls_section_end|>",
                              .call_prefix = "<|tool_call_begin|>functions.", .call_suffix = "<|tool_call_end|>",
                              .min_calls = 1, .bare_name = 1, .name_suffix = ":0<|tool_call_argument_begin|>" };
    CHECK(json_tool_call_gbnf(tools, 2, &bare, &gb, &n, &err) == MF_OK, "bare-name grammar: %s", err.msg);
    g = gb ? parse(gb) : NULL;
    CHECK(g != NULL, "bare-name grammar parses:\n%s", gb ? gb : "");
    const char *kimi = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
                       "{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.now:0<|tool_call_argument_begin|>{}"
                       "<|tool_call_end|><|tool_calls_section_end|>";
    const char *kbad[] = { "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{}"
                           "<|tool_call_end|><|tool_calls_section_end|>",
                           "<|tool_calls_section_begin|><|tool_call_begin|>functions.other:0<|tool_call_argument_begin|>{}"
                           "<|tool_call_end|><|tool_calls_section_end|>",
                           "<|tool_calls_section_begin|><|tool_calls_section_end|>" };
    if (g) {
        CHECK(match(g, kimi, strlen(kimi)) == 1, "bare-name calls");
        for (size_t i = 0; i < MF_ARRAY_LEN(kbad); i++) CHECK(match(g, kbad[i], strlen(kbad[i])) != 1, "bad bare-name call %zu", i);
    }
    gram_free(g);
    free(gb);
}

/* the vocabulary of a real model: each token's bytes as the detokenizer prints them */
static void test_model_vocab(void) {
    const char *shared = test_shared_dir();
    if (!shared) { SKIP("../shared absent: no model vocabulary"); return; }
    char path[1200];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-2.gguf", shared);
    gguf_file f;
    mf_err err = { { 0 } };
    if (gguf_open(&f, path, &err)) { SKIP("%s: %s", path, err.msg); return; }
    mf_vocab *v = NULL;
    CHECK(tok_load(&v, &f, &err) == MF_OK, "tok_load: %s", err.msg);
    gram_vocab *tv = v ? constraint_vocab(v, &err) : NULL;
    CHECK(tv && gram_vocab_n(tv) == tok_n_vocab(v), "constraint_vocab: %s", err.msg);
    if (tv) {
        /* a JSON-object constraint over 50,257 tokens: masks and the time they take */
        gram *g = NULL;
        constraint_compile(&g, CONSTRAINT_JSON_OBJECT, NULL, 0, &err);
        mf_constraint *c = constraint_new(g, tv, 0, &err);
        const char *text = "{\"name\": \"Ada Lovelace\", \"born\": 1815, \"tags\": [\"math\", true]}";
        int32_t *ids = NULL;
        int n = tok_encode(v, text, strlen(text), 0, 0, &ids, &err);
        double t0 = mf_time_s(), worst = 0;
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            double t1 = mf_time_s();
            int allowed;
            const uint32_t *bits = constraint_mask(c, &allowed);
            double dt = mf_time_s() - t1;
            worst = dt > worst ? dt : worst;
            ok = bits && (bits[ids[i] >> 5] >> (ids[i] & 31) & 1);
            CHECK(ok, "token %d (%d) of the text is allowed", i, ids[i]);
            ok = ok && constraint_accept(c, ids[i], &err) == MF_OK;
        }
        CHECK(ok && constraint_is_complete(c), "the whole object is accepted");
        printf("json_object over GPT-2's vocabulary: %d tokens, %.2f ms, worst mask %.2f ms\n", n,
               (mf_time_s() - t0) * 1e3, worst * 1e3);
        free(ids);
        constraint_free(c);
        gram_free(g);
        gram_vocab_free(tv);
    }
    tok_free(v);
    gguf_close(&f);
}

/* the public API (include/minfer.h): stories260K's vocabulary under a schema, random
 * logits drawn greedily through the mask until the grammar is done */
static void test_public_api(void) {
    const char *shared = test_shared_dir();
    if (!shared) { SKIP("../shared absent: no stories260K"); return; }
    char path[1200], err[256] = "";
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared);
    minfer_model *m = minfer_model_load(path, err, sizeof err);
    if (!m) { SKIP("%s: %s", path, err); return; }
    CHECK(!minfer_grammar_new(m, 7, "x", 1, err, sizeof err) && strstr(err, "unknown kind"), "bad kind: %s", err);
    CHECK(!minfer_grammar_new(m, MINFER_GRAMMAR_JSON_SCHEMA, "{\"type\":1}", 10, err, sizeof err) && strstr(err, "'type'"),
          "bad schema: %s", err);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},"
                         "\"s\":{\"enum\":[\"a\",\"b\"]}},\"required\":[\"n\",\"s\"],\"additionalProperties\":false}";
    minfer_grammar *g = minfer_grammar_new(m, MINFER_GRAMMAR_JSON_SCHEMA, schema, strlen(schema), err, sizeof err);
    CHECK(g != NULL, "grammar: %s", err);
    minfer_constraint *k = g ? minfer_constraint_new(g, err, sizeof err) : NULL;
    CHECK(k != NULL, "constraint: %s", err);
    if (k) {
        const int nv = minfer_n_vocab(m);
        float *logits = malloc((size_t)nv * sizeof *logits);
        mf_rng rng;
        mf_rng_seed(&rng, 54);
        char text[512];
        size_t tl = 0;
        int steps = 0, ok = 1;
        while (!minfer_constraint_done(k) && steps++ < 200 && ok) {
            for (int i = 0; i < nv; i++) logits[i] = mf_rng_normal(&rng);
            int n_allowed;
            const float *row = minfer_constraint_apply(k, logits, &n_allowed);
            int best = -1;
            for (int i = 0; i < nv; i++)
                if (!isinf(row[i]) && (best < 0 || row[i] > row[best])) best = i;
            ok = n_allowed > 0 && best >= 0 && minfer_constraint_allows(k, best) &&
                 minfer_constraint_accept(k, best, err, sizeof err) == 0;
            if (ok && !minfer_token_is_eog(m, best) && tl < sizeof text - 64)
                tl += (size_t)minfer_token_to_piece(m, best, text + tl, sizeof text - 1 - tl);
            if (ok && minfer_token_is_eog(m, best)) break;
        }
        text[tl] = 0;
        CHECK(ok && minfer_constraint_complete(k), "public API walk: '%s' (%s)", text, err);
        CHECK(text[0] == '{' && strstr(text, "\"n\"") && strstr(text, "\"s\""), "public API text: '%s'", text);
        /* a token the grammar does not allow: refused with a message, the state unchanged */
        CHECK(minfer_constraint_accept(k, minfer_token_bos(m), err, sizeof err) == -1 && err[0], "refused: %s", err);
        free(logits);
    }
    minfer_constraint_free(k);
    minfer_grammar_free(g);
    minfer_model_free(m);
}

int main(void) {
    test_parse_errors();
    test_matching();
    test_pieces();
    test_masks();
    test_constraint();
    test_hostile();
    test_print();
    test_schema();
    test_tool_calls();
    test_model_vocab();
    test_public_api();
    return test_summary("test_grammar");
}

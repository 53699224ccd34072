/* cmd_chat.c - `minfer chat`: interactive multi-turn chat. The KV cache is kept
 * between turns: each turn tokenizes only the text that the template adds after
 * what the cache already holds, so only the new turn is prefilled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "chat.h"
#include "cli.h"
#include "common.h"
#include "sampler.h"
#include "tokenizer.h"

static const char chat_usage[] =
    "usage: minfer chat -m MODEL [options]\n"
    "  reads one user message per line on stdin; /reset clears the history, /exit or EOF quits\n"
    "  --chat-template NAME  override the template detected from the model (chatml, llama2, llama3,\n"
    "                        mistral-v1/v3/v7, gemma, phi3, zephyr, ...)\n"
    "  --system TEXT         system message\n"
    "  -n N                  max tokens per answer (default 512)\n"
    "  --temp T, --top-k K, --top-p P, --min-p P, --seed S, --repeat-penalty R   sampling (as in run)\n"
    "  --ctx N, --device D, -t N                                                 as in run\n";

typedef struct chat_state {
    chat_msg *msgs;
    int n, cap;
    char *cached_text;   /* the text whose tokens the KV cache holds */
    int32_t *cached;     /* those tokens */
    int n_cached;
} chat_state;

static void push_msg(chat_state *s, const char *role, const char *content) {
    if (s->n == s->cap) s->msgs = mf_xrealloc(s->msgs, sizeof(chat_msg) * (size_t)(s->cap = s->cap ? 2 * s->cap : 8));
    s->msgs[s->n].role = mf_xstrdup(role);
    s->msgs[s->n].content = mf_xstrdup(content);
    s->n++;
}

static void reset_msgs(chat_state *s, const char *system) {
    for (int i = 0; i < s->n; i++) {
        free((char *)s->msgs[i].role);
        free((char *)s->msgs[i].content);
    }
    s->n = 0;
    free(s->cached_text);
    s->cached_text = mf_xstrdup("");
    s->n_cached = 0;
    if (system) push_msg(s, "system", system);
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *tmpl_name = NULL, *system = NULL;
    int n_predict = 512;
    mf_context_params cp;
    context_params_default(&cp);
    mf_sampler_params sp;
    sampler_params_default(&sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(chat_usage, stdout); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) bad = arg_value(argc, argv, &i, &model);
        else if (!strcmp(a, "--chat-template")) bad = arg_value(argc, argv, &i, &tmpl_name);
        else if (!strcmp(a, "--system")) bad = arg_value(argc, argv, &i, &system);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) bad = arg_int(argc, argv, &i, 1, 1 << 24, &n_predict);
        else if (cli_context_opt(argc, argv, &i, &cp, &bad) || cli_sampler_opt(argc, argv, &i, &sp, &bad)) {}
        else return cli_error(1, "chat: unknown option '%s' (see minfer chat --help)", a);
        if (bad) return 1;
    }
    if (!model) return cli_error(1, "chat: -m MODEL is required");
    chat_tmpl tmpl;
    if (tmpl_name && chat_from_name(tmpl_name, &tmpl)) return cli_error(1, "chat: unknown template '%s'", tmpl_name);

    mf_model m;
    mf_context c;
    int rc = cli_load(model, &cp, &m, &c, 1);
    if (rc) return rc;
    if (!tmpl_name) {
        gguf_str src = { 0 };
        mf_err e;
        char eos_text[64] = "";
        int32_t eos = tok_eos(m.vocab);
        if (eos >= 0) {
            int len = tok_piece(m.vocab, eos, 1, eos_text, sizeof eos_text - 1);
            eos_text[len < (int)sizeof eos_text ? len : (int)sizeof eos_text - 1] = 0;
        }
        int have = gguf_get_str(&m.gguf, "tokenizer.chat_template", &src, &e) == 0;
        if (chat_detect_len(have ? src.ptr : NULL, have ? src.len : 0, eos >= 0 ? eos_text : NULL, &tmpl))
            mf_log("warning: %s chat template; using chatml (override with --chat-template)",
                   have ? "unrecognised" : "no");
    }
    mf_log("chat template: %s", chat_name(tmpl));

    chat_state s = { 0 };
    reset_msgs(&s, system);
    s.cached = mf_xmalloc(sizeof(int32_t) * (size_t)c.n_ctx);
    mf_err err = { { 0 } };
    mf_sampler *smp = sampler_new(&sp, m.hp.n_vocab, &err);
    if (!smp) {
        context_free(&c);
        model_free(&m);
        return cli_error(1, "sampler: %s", err.msg);
    }
    int interactive = isatty(0);
    char line[65536];
    for (;;) {
        if (interactive) { fputs("> ", stderr); fflush(stderr); }
        if (!fgets(line, sizeof line, stdin)) break;
        size_t L = strlen(line);
        while (L && (line[L - 1] == '\n' || line[L - 1] == '\r')) line[--L] = 0;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) { reset_msgs(&s, system); continue; }
        if (!L) continue;
        push_msg(&s, "user", line);
        char *full = chat_render(tmpl, s.msgs, s.n, 1);
        if (!full) { rc = cli_error(2, "chat: cannot render the conversation"); break; }
        /* Tokenize only what follows the cached text; if the template re-rendered the
         * history differently, start over from the whole text. */
        size_t cl = strlen(s.cached_text);
        int32_t *ids = NULL;
        int n_new;
        if (s.n_cached > 0 && !strncmp(full, s.cached_text, cl)) {
            n_new = tok_encode(m.vocab, full + cl, strlen(full + cl), 0, 1, &ids, &err);
        } else {
            s.n_cached = 0;
            n_new = tok_encode(m.vocab, full, strlen(full), tok_add_bos(m.vocab), 1, &ids, &err);
        }
        if (n_new < 0) { free(full); rc = cli_error(2, "tokenizer: %s", err.msg); break; }
        if (s.n_cached + n_new + 1 > c.n_ctx) {
            free(full);
            free(ids);
            cli_error(2, "chat: the conversation no longer fits the context of %d tokens; /reset or use --ctx", c.n_ctx);
            s.n--; /* drop the message that did not fit */
            continue;
        }
        memcpy(s.cached + s.n_cached, ids, sizeof(int32_t) * (size_t)n_new);
        s.n_cached += n_new;
        free(ids);
        free(s.cached_text);
        s.cached_text = full;

        const float *logits;
        if ((rc = context_eval(&c, 0, s.cached, s.n_cached, &logits, &err))) { rc = cli_error(cli_status_exit(rc), "%s", err.msg); break; }
        mf_log("turn %d: prefilled %d new tokens, %d reused from the cache", (s.n + 1) / 2, c.last_evaluated,
               c.last_reused);
        cli_gen g = { .n_max = n_predict, .decode_last = 1, .keep_text = 1, .toks = s.cached,
                      .n_toks = s.n_cached };
        int n_gen = cli_generate(&c, smp, 0, logits, &g, &err);
        s.n_cached = g.n_toks;
        if (n_gen < 0) {
            free(g.text);
            rc = cli_error(cli_status_exit(n_gen), "%s", err.msg);
            break;
        }
        /* The cache now holds the prompt plus the generated tokens: extend the text. */
        size_t tl = strlen(s.cached_text);
        s.cached_text = mf_xrealloc(s.cached_text, tl + g.len + 1);
        memcpy(s.cached_text + tl, g.text, g.len + 1);
        push_msg(&s, "assistant", g.text);
        free(g.text);
    }
    reset_msgs(&s, NULL);
    free(s.msgs);
    free(s.cached_text);
    free(s.cached);
    sampler_free(smp);
    context_free(&c);
    model_free(&m);
    return rc;
}

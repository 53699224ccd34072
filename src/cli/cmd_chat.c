/* cmd_chat.c - `minfer chat`: interactive multi-turn chat. The KV cache is kept
 * between turns: each turn tokenizes only the text that the template adds after
 * what the cache already holds, so only the new turn is prefilled. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "cli.h"
#include "common.h"
#include "opts.h"
#include "sampler.h"
#include "tokenizer.h"

static const char chat_notes[] =
    "  reads one user message per line on stdin. Commands: /help, /reset (clear the history),\n"
    "  /exit (or end of input) to quit; a line starting with // sends the rest, starting with /.\n"
    "  Ctrl-C stops the answer being generated; twice in a row at the prompt, quits.\n";

/* SIGINT: counted, not fatal. The generation loop polls the count between tokens;
 * at the prompt, fgets returns with EINTR (the handler is installed without
 * SA_RESTART) and a second Ctrl-C in a row quits. */
static volatile sig_atomic_t chat_sigint;
static void on_sigint(int sig) {
    (void)sig;
    chat_sigint = chat_sigint + 1;
}

static void chat_help(void) {
    fputs("minfer: chat: type a message and Enter. /help this text, /reset clear the history, /exit quit\n"
          "minfer: chat: Ctrl-C stops an answer (twice at the prompt quits); Ctrl-D (end of input) quits;\n"
          "minfer: chat: a line starting with // is sent as text starting with /\n",
          stderr);
}

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
    if (system && *system) push_msg(s, "system", system);
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *tmpl_name = NULL, *system = NULL;
    int n_predict = 512, verbose = 1, ignore_eos = 0;
    mf_context_params cp;
    context_params_default(&cp);
    mf_sampler_params sp;
    sampler_params_default(&sp);
    cli_opt opts[8 + 3 * CLI_OPTS_MAX_GROUP];
    int n = 0;
    opts[n++] = (cli_opt){ "-m, --model", "PATH", CLI_OPT_STR, &model, .help = "GGUF model file (required)", .dflt = "" };
    opts[n++] = (cli_opt){ "--chat-template", "NAME", CLI_OPT_STR, &tmpl_name,
                           .help = "override the template detected from the model (chatml, llama3, ...)",
                           .dflt = "from the model" };
    opts[n++] = (cli_opt){ "--system", "TEXT", CLI_OPT_STR, &system,
                           .help = "system message (\"\": none, not even the template's own)",
                           .dflt = "the template's own where it has one (SmolLM2, Qwen2.5), else none" };
    opts[n++] = (cli_opt){ "-n, --n-predict", "N", CLI_OPT_INT, &n_predict, 1, 1 << 24, .help = "max tokens per answer" };
    opts[n++] = (cli_opt){ "--ignore-eos", NULL, CLI_OPT_FLAG, &ignore_eos, .set = 1,
                           .help = "answers go on past end-of-generation tokens (to -n or Ctrl-C)", .dflt = "" };
    n += cli_opts_sampler(opts + n, &sp);
    n += cli_opts_context(opts + n, &cp);
    n += cli_opts_verbosity(opts + n, &verbose);
    int prc = cli_parse("chat", "usage: minfer chat -m MODEL [options]", chat_notes, opts, n, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose;
    if (!model) return cli_error(1, "chat: -m MODEL is required (see minfer chat --help)");
    chat_tmpl tmpl;
    if (tmpl_name && chat_from_name(tmpl_name, &tmpl)) {
        char names[512];
        size_t o = 0;
        names[0] = 0;
        for (int t = 0; t < CHAT_TMPL_COUNT; t++)
            o += (size_t)snprintf(names + o, o < sizeof names ? sizeof names - o : 0, "%s%s", t ? ", " : "",
                                  chat_name((chat_tmpl)t));
        return cli_error(1, "chat: unknown template '%s' (one of: %s)", tmpl_name, names);
    }
    if (cli_context_check(&cp)) return 1;
    mf_err perr = { { 0 } };
    if (sampler_params_check(&sp, 1, &perr)) return cli_error(1, "%s", perr.msg);

    mf_model m;
    mf_context c;
    int rc = cli_load(model, &cp, &m, &c, verbose);
    if (rc) return rc;
    static char default_system[1024];
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
        if (!have && chat_for_arch(m.hp.arch_name, &tmpl) == 0)
            mf_log("chat: no template in the model; the %s architecture's", m.hp.arch_name);
        else if (chat_detect_len(have ? src.ptr : NULL, have ? src.len : 0, eos >= 0 ? eos_text : NULL, &tmpl))
            mf_log("warning: %s chat template; using chatml (override with --chat-template)",
                   have ? "unrecognised" : "no");
        /* the template's own default system message where the user gives none (SmolLM2,
         * Qwen2.5), so the model sees the prompt its template would render */
        else if (!system && have && tmpl == CHAT_TMPL_CHATML &&
                 chat_default_system(src.ptr, src.len, default_system, sizeof default_system)) {
            system = default_system;
            mf_log("chat: the template's default system message: \"%s\"", default_system);
        }
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
        return cli_error(1, "%s", err.msg); /* err says "sampler: ..." */
    }
    int interactive = isatty(0);
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: Ctrl-C at the prompt returns from fgets */
    sigaction(SIGINT, &sa, &old_sa);
    if (verbose) chat_help(); /* -q: none, also at a terminal (/help prints them) */
    char line[65536];
    for (;;) {
        if (interactive) { fputs("> ", stderr); fflush(stderr); }
        if (!fgets(line, sizeof line, stdin)) {
            if (ferror(stdin) && errno == EINTR && chat_sigint > 0) {
                clearerr(stdin);
                if (chat_sigint >= 2) break;
                fputs("\nminfer: chat: Ctrl-C again (or /exit) to quit\n", stderr);
                continue;
            }
            break;
        }
        chat_sigint = 0;
        size_t L = strlen(line);
        while (L && (line[L - 1] == '\n' || line[L - 1] == '\r')) line[--L] = 0;
        if (!L) continue;
        const char *text = line;
        if (line[0] == '/' && line[1] == '/') text = line + 1; /* "//x" sends "/x" */
        else if (line[0] == '/') {
            if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
            if (!strcmp(line, "/reset")) { reset_msgs(&s, system); mf_log("chat: history cleared"); continue; }
            if (strcmp(line, "/help")) fprintf(stderr, "minfer: chat: unknown command '%s'\n", line);
            chat_help();
            continue;
        }
        push_msg(&s, "user", text);
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
            free((char *)s.msgs[s.n].role);
            free((char *)s.msgs[s.n].content);
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
        cli_gen g = { .n_max = n_predict, .ignore_eog = ignore_eos, .decode_last = 1, .keep_text = 1,
                      .toks = s.cached, .n_toks = s.n_cached, .stop = &chat_sigint };
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
        if (g.stopped) {
            mf_log("chat: answer stopped (Ctrl-C); %d tokens kept", n_gen);
            chat_sigint = 1; /* a second Ctrl-C at the prompt quits */
        }
        push_msg(&s, "assistant", g.text);
        free(g.text);
    }
    sigaction(SIGINT, &old_sa, NULL);
    reset_msgs(&s, NULL);
    free(s.msgs);
    free(s.cached_text);
    free(s.cached);
    sampler_free(smp);
    context_free(&c);
    model_free(&m);
    return rc;
}

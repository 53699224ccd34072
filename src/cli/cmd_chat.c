/* cmd_chat.c - `minfer chat`: interactive multi-turn chat. The KV cache is kept
 * between turns: each turn tokenizes only the text that the template adds after
 * what the cache already holds, so only the new turn is prefilled. At a terminal,
 * libedit edits the line (arrow keys, Ctrl-A/E/W, ...) and keeps the session's
 * history (up/down). When the conversation outgrows the context, its oldest turns
 * are dropped, the system message kept. */
#include <editline/readline.h>
#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "cli.h"
#include "jinja.h"
#include "prompt.h"
#include "common.h"
#include "opts.h"
#include "sampler.h"
#include "tokenizer.h"

static const char chat_notes[] =
    "  reads one user message per line on stdin. Commands: /help, /reset (clear the history),\n"
    "  /exit (or end of input) to quit; a line starting with // sends the rest, starting with /.\n"
    "  Ctrl-C stops the answer being generated; twice in a row at the prompt, quits.\n"
    "  At a terminal the line can be edited (arrows, Home/End, Ctrl-A/E/K/W) and up/down recall\n"
    "  this session's lines (libedit; ~/.editrc applies). When the conversation no longer fits\n"
    "  --ctx, its oldest turns are dropped (the system message kept), said on stderr.\n";

/* SIGINT: counted, not fatal. The generation loop polls the count between tokens;
 * at the prompt, getline or libedit's readline returns with EINTR (the handler is
 * installed without SA_RESTART, and libedit's own handlers are off) and a second
 * Ctrl-C in a row quits. */
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

static int has_system(const chat_state *s) { return s->n > 0 && !strcmp(s->msgs[0].role, "system"); }

/* The conversation rendered without its `skip` oldest messages after the system
 * message, the assistant's turn opened (malloc'd); NULL with err when the template
 * cannot render it. */
static char *render_from(const chat_state *s, const prompt_tmpl *pt, int skip, char *err, size_t cap) {
    const int first = has_system(s);
    jinja_env *e = jinja_env_new();
    jinja_value *msgs = e ? jinja_list_new(e) : NULL;
    char *out = NULL;
    snprintf(err, cap, "out of memory");
    for (int i = 0; msgs && i < s->n; i++) {
        if (i >= first && i < first + skip) continue;
        jinja_value *mv = jinja_dict_new(e);
        if (!mv || jinja_dict_set(e, mv, "role", jinja_string(e, s->msgs[i].role)) ||
            jinja_dict_set(e, mv, "content", jinja_string(e, s->msgs[i].content)) || jinja_list_push(e, msgs, mv))
            msgs = NULL;
    }
    if (msgs) {
        prompt_request r = { .messages = msgs, .add_generation_prompt = 1 };
        out = prompt_render(pt, e, &r, NULL, err, cap);
    }
    jinja_env_free(e);
    return out;
}

/* skip after one more turn (a user message and the answer that followed it) is
 * dropped; -1 when only the newest message would be left. */
static int skip_turn(const chat_state *s, int skip) {
    const int i = has_system(s) + skip;
    const int k = i + 1 < s->n - 1 && !strcmp(s->msgs[i + 1].role, "assistant") ? 2 : 1;
    return i + k <= s->n - 1 ? skip + k : -1;
}

/* Frees the `skip` oldest messages after the system message. */
static void drop_msgs(chat_state *s, int skip) {
    const int first = has_system(s);
    for (int i = first; i < first + skip; i++) {
        free((char *)s->msgs[i].role);
        free((char *)s->msgs[i].content);
    }
    memmove(s->msgs + first, s->msgs + first + skip, sizeof(chat_msg) * (size_t)(s->n - first - skip));
    s->n -= skip;
}

/* libedit works in the character set of LC_CTYPE: UTF-8 while it starts and edits a
 * line, so that a multi-byte character moves and erases as one (the environment's, or
 * C.UTF-8 where that is not UTF-8: the model's text is UTF-8 anyway); the C locale for
 * the rest of the program. */
static void edit_locale(int on) {
    if (!on) { setlocale(LC_CTYPE, "C"); return; }
    if (!setlocale(LC_CTYPE, "") || strcmp(nl_langinfo(CODESET), "UTF-8")) setlocale(LC_CTYPE, "C.UTF-8");
}

/* One line of input without its line end (malloc'd), or NULL at the end of the input
 * or when Ctrl-C interrupted the wait (chat_sigint > 0). At a terminal, libedit. */
static char *read_line(int tty) {
    if (tty) {
        edit_locale(1);
        char *l = readline("> ");
        edit_locale(0);
        if (l && *l) add_history(l);
        return l;
    }
    char *l = NULL;
    size_t cap = 0;
    ssize_t n = getline(&l, &cap, stdin);
    if (n < 0) {
        free(l);
        return NULL;
    }
    while (n && (l[n - 1] == '\n' || l[n - 1] == '\r')) l[--n] = 0;
    return l;
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
    const char *model = NULL, *tmpl_name = NULL, *tmpl_file = NULL, *system = NULL;
    int n_predict = 512, verbose = 1, ignore_eos = 0;
    mf_context_params cp;
    context_params_default(&cp);
    mf_sampler_params sp;
    sampler_params_default(&sp);
    cli_constraint_opts co = { 0 };
    cli_opt opts[10 + 4 * CLI_OPTS_MAX_GROUP];
    int n = 0;
    opts[n++] = (cli_opt){ "-m, --model", "PATH", CLI_OPT_STR, &model, .help = "GGUF model file (required)", .dflt = "" };
    opts[n++] = (cli_opt){ "--chat-template", "NAME", CLI_OPT_STR, &tmpl_name,
                           .help = "a built-in template family instead of the model's own (chatml, llama3, ...)",
                           .dflt = "the model's own; a built-in family where it has none" };
    opts[n++] = (cli_opt){ "--chat-template-file", "FILE", CLI_OPT_STR, &tmpl_file,
                           .help = "a Jinja chat template to use instead of the model's", .dflt = "" };
    opts[n++] = (cli_opt){ "--system", "TEXT", CLI_OPT_STR, &system,
                           .help = "system message (\"\": none, not even the template's own)",
                           .dflt = "the template's own where it has one (SmolLM2, Qwen2.5), else none" };
    opts[n++] = (cli_opt){ "-n, --n-predict", "N", CLI_OPT_INT, &n_predict, 1, 1 << 24, .help = "max tokens per answer" };
    opts[n++] = (cli_opt){ "--ignore-eos", NULL, CLI_OPT_FLAG, &ignore_eos, .set = 1,
                           .help = "answers go on past end-of-generation tokens (to -n or Ctrl-C)", .dflt = "" };
    n += cli_opts_sampler(opts + n, &sp);
    n += cli_opts_constraint(opts + n, &co);
    n += cli_opts_context(opts + n, &cp);
    n += cli_opts_verbosity(opts + n, &verbose);
    int prc = cli_parse("chat", "usage: minfer chat -m MODEL [options]", chat_notes, opts, n, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose;
    if (!model) return cli_error(1, "chat: -m MODEL is required (see minfer chat --help)");
    chat_tmpl tmpl;
    if (tmpl_name && chat_from_name(tmpl_name, &tmpl)) { /* before the model loads */
        char names[512];
        size_t o = 0;
        names[0] = 0;
        for (int t = 0; t < CHAT_TMPL_COUNT; t++)
            o += (size_t)snprintf(names + o, o < sizeof names ? sizeof names - o : 0, "%s%s", t ? ", " : "",
                                  chat_name((chat_tmpl)t));
        return cli_error(1, "chat: unknown template '%s' (one of: %s)", tmpl_name, names);
    }
    if (tmpl_name && tmpl_file) return cli_error(1, "chat: give --chat-template or --chat-template-file, not both");
    if (cli_context_check(&cp)) return 1;
    mf_err perr = { { 0 } };
    if (sampler_params_check(&sp, 1, &perr)) return cli_error(1, "%s", perr.msg);
    gram *gr = NULL; /* every answer's grammar, when one was given */
    int rc = cli_constraint_compile(&co, &gr);
    if (rc) return rc;

    mf_model m;
    mf_context c;
    rc = cli_load(model, &cp, &m, &c, verbose);
    if (rc) { gram_free(gr); return rc; }
    prompt_tmpl pt;
    if ((rc = cli_prompt_init(&pt, &m.gguf, m.vocab, tmpl_file, tmpl_name, "chat", verbose))) {
        gram_free(gr);
        context_free(&c);
        model_free(&m);
        return rc;
    }
    if (system && !system[0]) {
        /* --system "": no system message at all. A model template that writes a default
         * of its own (SmolLM2's, Qwen2.5's) cannot be told so: the built-in family the
         * template is recognised as renders instead (said), else the template as it is. */
        gguf_str src = { 0 };
        mf_err e;
        chat_tmpl fam;
        if (pt.jinja && !tmpl_file && gguf_get_str(&m.gguf, "tokenizer.chat_template", &src, &e) == 0 &&
            !chat_detect_len(src.ptr, src.len, pt.eos[0] ? pt.eos : NULL, &fam) &&
            chat_default_system(src.ptr, src.len, pt.default_system, sizeof pt.default_system)) {
            jinja_tmpl_free(pt.jinja);
            pt.jinja = NULL;
            pt.family = fam;
            mf_log("chat: --system \"\": the built-in %s renders the conversation (the model's template would add its "
                   "own system message)", chat_name(fam));
        }
        pt.default_system[0] = 0;
    } else if (!pt.jinja && !system && pt.default_system[0]) {
        mf_log("chat: the template's default system message: \"%s\"", pt.default_system);
    }

    chat_state s = { 0 };
    reset_msgs(&s, system);
    s.cached = mf_xmalloc(sizeof(int32_t) * (size_t)c.n_ctx);
    mf_err err = { { 0 } };
    mf_sampler *smp = sampler_new(&sp, m.hp.n_vocab, &err);
    gram_vocab *tv = NULL;
    mf_constraint *con = NULL;
    if (!smp || (gr && (rc = cli_constraint_new(gr, &m, 0, &tv, &con)))) {
        if (!smp) rc = cli_error(1, "%s", err.msg); /* err says "sampler: ..." */
        sampler_free(smp);
        gram_free(gr);
        gram_vocab_free(tv);
        free(s.cached);
        reset_msgs(&s, NULL);
        free(s.msgs);
        free(s.cached_text);
        context_free(&c);
        model_free(&m);
        return rc;
    }
    int interactive = isatty(0);
    if (interactive) {
        rl_readline_name = "minfer"; /* for ~/.editrc */
        rl_catch_signals = 0;         /* Ctrl-C is ours: readline returns, chat_sigint says why */
        rl_instream = stdin;
        rl_outstream = isatty(2) || !isatty(1) ? stderr : stdout; /* the prompt and the echo: not into 2>log */
        edit_locale(1);
        using_history(); /* starts libedit, which reads the character set now */
        edit_locale(0);
    }
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: Ctrl-C at the prompt returns from fgets */
    sigaction(SIGINT, &sa, &old_sa);
    if (verbose) chat_help(); /* -q: none, also at a terminal (/help prints them) */
    int turn = 0;
    char *line = NULL;
    for (;;) {
        free(line);
        if (!(line = read_line(interactive))) {
            if (chat_sigint > 0) {
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
        /* Tokenize only what follows the cached text (if the template re-rendered the
         * history differently, the whole text). Past the context, less the room kept for
         * the answer, drop the oldest turns until it fits (issue 56: every later turn
         * failed); the cache then keeps what still matches, the system message. */
        const int room = MF_MIN(n_predict, c.n_ctx / 4);
        int skip = 0, n_new = -1, reuse = 0, total = 0, cut = 0;
        char *full = NULL, rerr[512];
        int32_t *ids = NULL;
        for (;;) {
            if (!(full = render_from(&s, &pt, skip, rerr, sizeof rerr))) break;
            size_t cl = strlen(s.cached_text);
            reuse = s.n_cached > 0 && !strncmp(full, s.cached_text, cl);
            n_new = reuse ? tok_encode(m.vocab, full + cl, strlen(full + cl), 0, 1, &ids, &err)
                          : tok_encode(m.vocab, full, strlen(full), prompt_add_bos(&pt, full, tok_add_bos(m.vocab)), 1, &ids, &err);
            if (n_new < 0) break;
            total = (reuse ? s.n_cached : 0) + n_new;
            int next = total + room > c.n_ctx ? skip_turn(&s, skip) : -1;
            if (next < 0) break; /* fits with room for the answer, or nothing older to drop */
            free(full);
            free(ids);
            ids = NULL;
            skip = next;
            cut++;
        }
        if (!full) {
            rc = cli_error(2, "chat: %s", rerr);
            break;
        }
        if (n_new < 0) { free(full); rc = cli_error(2, "tokenizer: %s", err.msg); break; }
        if (total + 1 > c.n_ctx) { /* the message alone (with the system message) does not fit */
            free(full);
            free(ids);
            cli_error(2, "chat: the message (%d tokens with the template%s) does not fit the context of %d tokens; use --ctx",
                      total, has_system(&s) ? " and the system message" : "", c.n_ctx);
            s.n--; /* drop the message that did not fit; the history stays */
            free((char *)s.msgs[s.n].role);
            free((char *)s.msgs[s.n].content);
            continue;
        }
        if (skip) {
            drop_msgs(&s, skip);
            mf_log("chat: the conversation outgrew the context of %d tokens: dropped the oldest %d turn%s (%d message%s)%s",
                   c.n_ctx, cut, cut == 1 ? "" : "s", skip, skip == 1 ? "" : "s",
                   has_system(&s) ? "; the system message is kept" : "");
        }
        if (!reuse) s.n_cached = 0;
        memcpy(s.cached + s.n_cached, ids, sizeof(int32_t) * (size_t)n_new);
        s.n_cached += n_new;
        free(ids);
        free(s.cached_text);
        s.cached_text = full;
        turn++;

        const float *logits;
        if ((rc = context_eval(&c, 0, s.cached, s.n_cached, &logits, &err))) { rc = cli_error(cli_status_exit(rc), "%s", err.msg); break; }
        mf_log("turn %d: prefilled %d new tokens, %d reused from the cache", turn, c.last_evaluated, c.last_reused);
        if (con && (rc = constraint_reset(con, 0, &err))) { rc = cli_error(2, "%s", err.msg); break; }
        cli_gen g = { .n_max = n_predict, .ignore_eog = ignore_eos, .decode_last = 1, .keep_text = 1,
                      .toks = s.cached, .n_toks = s.n_cached, .stop = &chat_sigint, .con = con };
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
        } else if (g.ctx_full) {
            mf_log("chat: the answer stopped at the end of the context (%d tokens); the oldest turns make room for "
                   "the next message", c.n_ctx);
        } else if (con && !constraint_is_complete(con)) {
            mf_log("warning: the answer stopped after %d tokens, before the grammar's text was complete (-n)", n_gen);
        }
        push_msg(&s, "assistant", g.text);
        free(g.text);
    }
    free(line);
    sigaction(SIGINT, &old_sa, NULL);
    reset_msgs(&s, NULL);
    free(s.msgs);
    free(s.cached_text);
    free(s.cached);
    sampler_free(smp);
    constraint_free(con);
    gram_vocab_free(tv);
    gram_free(gr);
    prompt_free(&pt);
    context_free(&c);
    model_free(&m);
    return rc;
}

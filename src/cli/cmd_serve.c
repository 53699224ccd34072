/* cmd_serve.c - `minfer serve`: the OpenAI-compatible HTTP server (src/server/).
 * The model and context come from the public API (include/minfer.h); the engine
 * thread owns the context, libmicrohttpd's threads answer the clients. SIGINT and
 * SIGTERM are taken by this thread alone (sigwait): the first drains (no new
 * requests, running ones finish, up to --drain seconds), a second cancels what is
 * left; then the server exits 0. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "minfer.h"
#include "opts.h"
#include "server/engine.h"
#include "server/http.h"
#include "util.h"

static const char serve_notes[] =
    "  Endpoints: POST /v1/chat/completions, POST /v1/completions (\"stream\": true for server-sent\n"
    "  events), GET /v1/models, GET /health, GET /metrics (Prometheus), POST /tokenize, POST /detokenize.\n"
    "  GET / is a chat page (streamed answers, Markdown, settings, conversations kept in the browser;\n"
    "  every asset is in the binary, nothing is fetched from elsewhere; with --api-key it asks for the key).\n"
    "  --parallel slots are decoded together, one token each a step; a waiting prompt is read --chunk\n"
    "  tokens a step beside them; requests beyond the slots queue. A request takes the slot whose cache\n"
    "  shares the longest prefix with its prompt and evaluates only the rest. --ctx is per slot.\n"
    "  Sampling defaults when a request gives none: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05\n"
    "  (llama.cpp's server's); max_tokens: until end-of-generation or the context is full.\n"
    "  SIGINT/SIGTERM: stop taking requests, let running ones finish (--drain seconds), exit 0;\n"
    "  a second signal cancels them at once.\n"
    "  Access log on stderr, a line a request once answered (-q: none): UTC time, client, method,\n"
    "  path, status, prompt=N generated=N of a generation, seconds, and \"(client hung up)\" where so.\n";

/* Waits up to ms for SIGINT/SIGTERM; returns the signal or 0. */
static int wait_signal(const sigset_t *set, int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    int sig = sigtimedwait(set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *api_key = NULL, *alias = NULL, *tmpl = NULL, *tmpl_file = NULL;
    int port = 8080, parallel = 4, chunk = 128, timeout = 30, max_conn = 256, drain = 30, verbose = 1, webui = 1;
    int max_body_kib = 1024;
    mf_context_params cp;
    context_params_default(&cp);
    cli_opt opts[18 + CLI_OPTS_MAX_GROUP];
    int n = 0;
    opts[n++] = (cli_opt){ "-m, --model", "PATH", CLI_OPT_STR, &model, .help = "GGUF model file (required)", .dflt = "" };
    opts[n++] = (cli_opt){ "--host", "ADDR", CLI_OPT_STR, &host, .help = "address to listen on (IPv4/IPv6 literal or name)" };
    opts[n++] = (cli_opt){ "--port", "N", CLI_OPT_INT, &port, 0, 65535, .help = "TCP port (0: any free one, printed at start)" };
    opts[n++] = (cli_opt){ "-np, --parallel", "N", CLI_OPT_INT, &parallel, 1, 256,
                           .help = "sequence slots decoded together (requests beyond them queue)" };
    n += cli_opts_context(opts + n, &cp);
    opts[n++] = (cli_opt){ "--api-key", "KEY", CLI_OPT_STR, &api_key,
                           .help = "require 'Authorization: Bearer KEY' on every endpoint but /health", .dflt = "none" };
    opts[n++] = (cli_opt){ "--alias", "NAME", CLI_OPT_STR, &alias, .help = "the model's name in /v1/models and replies",
                           .dflt = "the file name" };
    opts[n++] = (cli_opt){ "--chat-template", "NAME", CLI_OPT_STR, &tmpl,
                           .help = "a built-in template family instead of the model's own (chatml, llama3, ...)",
                           .dflt = "the model's own; a built-in family where it has none" };
    opts[n++] = (cli_opt){ "--chat-template-file", "FILE", CLI_OPT_STR, &tmpl_file,
                           .help = "a Jinja chat template to use instead of the model's", .dflt = "" };
    opts[n++] = (cli_opt){ "--chunk", "N", CLI_OPT_INT, &chunk, 1, 65536,
                           .help = "prompt tokens evaluated per engine step (running streams decode in between)" };
    opts[n++] = (cli_opt){ "--max-body", "KIB", CLI_OPT_INT, &max_body_kib, 1, 1 << 20,
                           .help = "largest request body in KiB (larger: HTTP 413)" };
    opts[n++] = (cli_opt){ "--timeout", "S", CLI_OPT_INT, &timeout, 1, 86400,
                           .help = "close a connection that sends or takes nothing for S seconds" };
    opts[n++] = (cli_opt){ "--max-connections", "N", CLI_OPT_INT, &max_conn, 1, 65536,
                           .help = "open connections at most (one thread each)" };
    opts[n++] = (cli_opt){ "--drain", "S", CLI_OPT_INT, &drain, 0, 86400,
                           .help = "on SIGINT/SIGTERM, seconds running requests may take to finish" };
    opts[n++] = (cli_opt){ "--no-webui", NULL, CLI_OPT_FLAG, &webui, .set = 0,
                           .help = "no chat page at / (the API alone)", .dflt = "" };
    n += cli_opts_verbosity(opts + n, &verbose);
    int prc = cli_parse("serve", "usage: minfer serve -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel N] [options]",
                        serve_notes, opts, n, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose;
    if (!model) return cli_error(1, "serve: -m MODEL is required (see minfer serve --help)");
    if (api_key && !api_key[0]) return cli_error(1, "serve: --api-key must not be empty");
    if (tmpl && tmpl_file) return cli_error(1, "serve: give --chat-template or --chat-template-file, not both");
    if (cli_context_check(&cp)) return 1;

    /* Every thread made from here on (backend workers, engine, HTTP) inherits this
     * mask, so the signals reach only sigwait below. SIGPIPE: a client that hangs up
     * must not end the server (libmicrohttpd sends with MSG_NOSIGNAL; belt and braces). */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    double t0 = mf_time_s();
    minfer_model *m = minfer_model_load(model, err, sizeof err);
    if (!m) return cli_load_error(2, model, err);
    if (minfer_model_unused_tensors(m))
        mf_log("warning: tensors of the file that this architecture does not use: %s", minfer_model_unused_tensors(m));
    minfer_ctx_params p = { .n_ctx = cp.n_ctx, .n_seq = parallel, .n_batch = parallel > 512 ? parallel : 512,
                            .device = cp.device, .n_threads = cp.n_threads, .n_gpus = cp.n_gpus,
                            .tensor_split = cp.tensor_split, .cache_type_k = cp.cache_type_k,
                            .cache_type_v = cp.cache_type_v };
    minfer_ctx *c = minfer_ctx_new(m, &p, err, sizeof err);
    if (!c) {
        minfer_model_free(m);
        return cli_error(2, "%s", err);
    }
    mf_log("serve: loaded %s in %.2f s: %d slots of %d tokens", model, mf_time_s() - t0, minfer_ctx_n_seq(c),
           minfer_ctx_n_ctx(c));
    srv_engine *e = srv_engine_new(m, c, chunk, err, sizeof err);
    if (!e) {
        minfer_ctx_free(c);
        minfer_model_free(m);
        return cli_error(2, "serve: %s", err);
    }
    const char *base = strrchr(model, '/');
    base = base ? base + 1 : model;
    srv_config cfg = { .host = host, .port = port, .api_key = api_key, .model_name = alias ? alias : base,
                       .chat_template = tmpl, .chat_template_file = tmpl_file,
                       .max_body = (size_t)max_body_kib * 1024, .timeout_s = timeout,
                       .max_connections = max_conn, .webui = webui };
    srv_http *h = srv_http_start(&cfg, m, e, minfer_ctx_n_ctx(c), err, sizeof err);
    if (!h) {
        srv_engine_free(e);
        minfer_ctx_free(c);
        minfer_model_free(m);
        return cli_error(strstr(err, "unknown chat template") ? 1 : 2, "serve: %s", err);
    }
    int v6 = strchr(host, ':') != NULL;
    /* always printed (also with -q): scripts read the port from it */
    fprintf(stderr, "minfer: serve: listening on http://%s%s%s:%d (model %s, chat template %s, %d slots, context %d)\n",
            v6 ? "[" : "", host, v6 ? "]" : "", srv_http_port(h), cfg.model_name, srv_http_template(h), parallel,
            minfer_ctx_n_ctx(c));
    fflush(stderr);
    if (webui)
        mf_log("serve: chat page at http://%s%s%s:%d/ (--no-webui: none)", v6 ? "[" : "", host, v6 ? "]" : "",
               srv_http_port(h));

    int sig;
    while ((sig = wait_signal(&sigs, 1000)) == 0) {}
    mf_log("serve: %s: draining (%d request(s) in flight, up to %d s; again to cancel them)",
           sig == SIGINT ? "SIGINT" : "SIGTERM", srv_engine_active(e), drain);
    srv_http_refuse(h);
    srv_engine_drain(e);
    double deadline = mf_time_s() + drain;
    int again = 0;
    /* (until the answers are sent, not only generated: a stream's last events may still
     * be queued when its generation ends; stopping the daemon then cut it, seen as a
     * ChunkedEncodingError in a loaded CI run of tests/server/test_lifecycle.py) */
    while ((srv_engine_active(e) > 0 || srv_http_in_flight(h) > 0) && mf_time_s() < deadline)
        if (wait_signal(&sigs, 20)) { again = 1; break; }
    int left = srv_engine_active(e);
    if (left) {
        mf_log("serve: cancelling %d request(s)%s", left, again ? " (second signal)" : " (--drain time is up)");
        srv_engine_cancel_all(e);
        for (int i = 0; i < 100 && (srv_engine_active(e) > 0 || srv_http_in_flight(h) > 0); i++) wait_signal(&sigs, 50);
    }
    srv_http_stop(h);
    srv_engine_free(e);
    minfer_ctx_free(c);
    minfer_model_free(m);
    mf_log("serve: stopped");
    return 0;
}

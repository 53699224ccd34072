/* http.h - the OpenAI-compatible HTTP front of the server, on libmicrohttpd (one
 * thread per connection: a handler may block on its job, and a slow or stalled
 * client holds only its own thread) with cJSON for every body read or written.
 *
 * Endpoints: POST /v1/chat/completions, POST /v1/completions (stream: server-sent
 * events ending with "data: [DONE]"), GET /v1/models, GET /health, GET /metrics
 * (Prometheus text), POST /tokenize, POST /detokenize, and GET / the chat page
 * (webui.h; no API key needed for the page itself). Every error is an HTTP status
 * with an OpenAI-style body {"error": {"message", "type", "param", "code"}}.
 * Each request ends with an access line on stderr (mf_log, so -q quiets it); a client
 * that hangs up is said there, not in libmicrohttpd's error lines. */
#ifndef MINFER_SERVER_HTTP_H
#define MINFER_SERVER_HTTP_H

#include <stddef.h>

#include "minfer.h"
#include "server/engine.h"

typedef struct srv_config {
    const char *host;       /* address to bind (IPv4 or IPv6 literal, or a name) */
    int port;               /* 0: any free port (srv_http_port says which) */
    const char *api_key;    /* NULL: none; else "Authorization: Bearer KEY" on all but /health */
    const char *model_name; /* what /v1/models and responses call the model */
    const char *chat_template; /* a built-in family by name, or NULL: the model's own (prompt.h) */
    const char *chat_template_file; /* a Jinja template file instead of the model's, or NULL */
    size_t max_body;        /* request bodies above this are 413 */
    int timeout_s;          /* a connection idle this long (no bytes either way) is closed */
    int max_connections;
    int webui;              /* serve the chat page at / (--no-webui: 0) */
} srv_config;

typedef struct srv_http srv_http;

/* Starts listening; NULL with a one-line message on failure (address in use, ...). */
srv_http *srv_http_start(const srv_config *cfg, minfer_model *m, srv_engine *e, int n_ctx, char *err, size_t cap);
int srv_http_port(const srv_http *h);
/* The chat template in use, in a few words: "the model's own", "chatml (built-in, fallback)". */
const char *srv_http_template(const srv_http *h);
/* From now on generation requests get 503 (shutting down); others are answered. */
void srv_http_refuse(srv_http *h);
/* Requests begun and not yet completed: a response, a stream's last events included,
 * is done only when libmicrohttpd has sent it (the drain waits for this too). */
int srv_http_in_flight(srv_http *h);
/* Closes the listening socket and every connection, then frees. */
void srv_http_stop(srv_http *h);

#endif

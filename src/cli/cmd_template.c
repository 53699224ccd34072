/* cmd_template.c - `minfer template`: the prompt text a chat request renders to, as the
 * server would render it (the model's own chat template, or the labelled fallback):
 * for tests, and for users debugging a prompt. Reads an OpenAI-style request on
 * standard input ({"messages": [...], "tools": [...], "chat_template_kwargs": {...},
 * "add_generation_prompt": bool}; other fields are ignored) and writes the prompt, and
 * nothing else, to standard output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "gguf.h"
#include "jinja.h"
#include "opts.h"
#include "prompt.h"
#include "tokenizer.h"

static const char template_notes[] =
    "  reads a chat request (JSON) on standard input, as POST /v1/chat/completions takes it:\n"
    "  \"messages\" (required), \"tools\", \"chat_template_kwargs\" (extra template variables, e.g.\n"
    "  {\"enable_thinking\": false}) and \"add_generation_prompt\" (default true); other fields are\n"
    "  ignored. Writes the rendered prompt to standard output, exactly (no newline added).\n";

int cmd_template(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *name = NULL;
    int verbose = 1;
    cli_opt opts[8];
    int n = 0;
    opts[n++] = (cli_opt){ "-m, --model", "PATH", CLI_OPT_STR, &model, .help = "GGUF model file (required)", .dflt = "" };
    opts[n++] = (cli_opt){ "--chat-template-file", "FILE", CLI_OPT_STR, &file,
                           .help = "a Jinja chat template to use instead of the model's", .dflt = "the model's own" };
    opts[n++] = (cli_opt){ "--chat-template", "NAME", CLI_OPT_STR, &name,
                           .help = "a built-in template family instead (chatml, llama3, ...)", .dflt = "" };
    n += cli_opts_verbosity(opts + n, &verbose);
    int prc = cli_parse("template", "usage: minfer template -m MODEL [--chat-template-file F] < request.json",
                        template_notes, opts, n, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    mf_log_quiet = !verbose;
    if (!model) return cli_error(1, "template: -m MODEL is required (see minfer template --help)");
    if (file && name) return cli_error(1, "template: give --chat-template-file or --chat-template, not both");

    size_t len = 0;
    char *body = cli_read_file("-", &len);
    if (!body) return 2;
    gguf_file g;
    mf_err err = { { 0 } };
    int rc = gguf_open(&g, model, &err);
    if (rc) {
        free(body);
        return cli_load_error(cli_status_exit(rc), model, err.msg);
    }
    mf_vocab *v = NULL;
    if ((rc = tok_load(&v, &g, &err))) {
        gguf_close(&g);
        free(body);
        return cli_load_error(cli_status_exit(rc), model, err.msg);
    }
    prompt_tmpl p;
    int exit_code = cli_prompt_init(&p, &g, v, file, name, "template", verbose);
    jinja_env *e = jinja_env_new();
    char *text = NULL;
    if (exit_code) goto out;
    if (!e) { exit_code = cli_error(2, "template: out of memory"); goto out; }
    jinja_error je;
    jinja_value *req = jinja_json_parse(e, body, len, &je);
    if (!req) { exit_code = cli_error(2, "template: the request on standard input is not JSON: %s", je.msg); goto out; }
    if (!jinja_is_dict(req)) { exit_code = cli_error(2, "template: the request must be a JSON object"); goto out; }
    char msg[512];
    prompt_request r = { .add_generation_prompt = 1 };
    jinja_value *x;
    if (!(x = jinja_dict_get(req, "messages"))) { exit_code = cli_error(2, "template: the request has no 'messages'"); goto out; }
    if (!(r.messages = prompt_messages(e, x, msg, sizeof msg))) { exit_code = cli_error(2, "template: %s", msg); goto out; }
    if ((x = jinja_dict_get(req, "tools")) && !jinja_is_null(x)) {
        if (!jinja_is_list(x)) { exit_code = cli_error(2, "template: 'tools' must be a list"); goto out; }
        r.tools = x;
    }
    if ((x = jinja_dict_get(req, "chat_template_kwargs")) && !jinja_is_null(x)) {
        if (!jinja_is_dict(x)) { exit_code = cli_error(2, "template: 'chat_template_kwargs' must be an object"); goto out; }
        r.kwargs = x;
    }
    if ((x = jinja_dict_get(req, "add_generation_prompt")) && !jinja_is_null(x)) {
        char *js = jinja_json_dump(x, NULL);
        if (!js || (strcmp(js, "true") && strcmp(js, "false"))) {
            free(js);
            exit_code = cli_error(2, "template: 'add_generation_prompt' must be true or false");
            goto out;
        }
        r.add_generation_prompt = js[0] == 't';
        free(js);
    }
    size_t tlen = 0;
    if (!(text = prompt_render(&p, e, &r, &tlen, msg, sizeof msg))) { exit_code = cli_error(2, "template: %s", msg); goto out; }
    if (fwrite(text, 1, tlen, stdout) != tlen || fflush(stdout)) exit_code = cli_error(2, "template: cannot write the prompt");
out:
    free(text);
    jinja_env_free(e);
    prompt_free(&p);
    tok_free(v);
    gguf_close(&g);
    free(body);
    return exit_code;
}

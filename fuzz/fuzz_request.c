/* fuzz_request.c - libFuzzer target: the server's request parsers (src/server/request.c),
 * JSON body to request parameters, before any model is involved.
 *
 * Input: byte 0 picks the endpoint (mod 4: chat completions, completions, /tokenize,
 * /detokenize); the rest is the body. Checked beyond ASan/UBSan: the answer is 0 or
 * 400, a 400 names its reason (a non-empty message, NUL-terminated inside the buffer,
 * also when that buffer is small); a parsed request keeps the documented limits (at
 * least one message for chat, roles and contents present and valid UTF-8, at most
 * SRV_MAX_STOP non-empty stop strings of at most SRV_MAX_STOP_LEN bytes, top_logprobs in
 * 0..20, max_tokens -1 or 0..SRV_MAX_TOKENS, finite sampling numbers, non-negative
 * token ids); a failed request is empty and freeing it is harmless. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"
#include "server/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "fuzz_request: %s\n", #c); abort(); } } while (0)

static void check_err(int rc, const char *err, size_t cap) {
    REQUIRE(rc == 0 || rc == 400);
    if (rc == 400) REQUIRE(cap == 0 || (memchr(err, 0, cap) != NULL && (cap == 1 || err[0] != 0)));
}

static void check_str(const char *s) {
    REQUIRE(s != NULL);
    REQUIRE(srv_utf8_valid(s, strlen(s)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] & 3;
    size_t cap = (data[0] >> 2) & 1 ? 8 : 256; /* a small error buffer too */
    /* the body in an exact-size heap block without a terminator: the parser must
     * honour len */
    size_t n = size - 1;
    char *body = malloc(n ? n : 1);
    REQUIRE(body);
    memcpy(body, data + 1, n);
    char *err = malloc(cap);
    REQUIRE(err);
    memset(err, 'x', cap);
    if (mode <= 1) {
        srv_request r;
        int rc = srv_request_parse(body, n, mode == 0, &r, err, cap);
        check_err(rc, err, cap);
        if (rc == 0) {
            if (mode == 0) {
                REQUIRE(r.n_msgs >= 1 && r.msgs);
                for (int i = 0; i < r.n_msgs; i++) { check_str(r.msgs[i].role); check_str(r.msgs[i].content); }
                /* tools: at most SRV_MAX_TOOLS names, each 1..64 of [a-zA-Z0-9_-], distinct; a
                 * named tool_choice one of them, "required" only with tools */
                REQUIRE(r.n_tools >= 0 && r.n_tools <= SRV_MAX_TOOLS && (!r.n_tools || r.tool_names));
                for (int i = 0; i < r.n_tools; i++) {
                    check_str(r.tool_names[i]);
                    size_t l = strlen(r.tool_names[i]);
                    REQUIRE(l >= 1 && l <= 64 && strspn(r.tool_names[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == l);
                    for (int k = 0; k < i; k++) REQUIRE(strcmp(r.tool_names[i], r.tool_names[k]));
                }
                if (r.tool_choice == SRV_TOOL_NAMED) {
                    int found = 0;
                    for (int i = 0; i < r.n_tools; i++) found |= !strcmp(r.tool_names[i], r.tool_choice_name);
                    REQUIRE(found);
                }
                REQUIRE(r.tool_choice != SRV_TOOL_REQUIRED || r.n_tools > 0);
            } else {
                REQUIRE(r.prompt || (r.prompt_ids && r.n_prompt_ids >= 1));
                if (r.prompt) check_str(r.prompt);
                for (int i = 0; i < r.n_prompt_ids; i++) REQUIRE(r.prompt_ids[i] >= 0);
            }
            if (r.model) check_str(r.model);
            REQUIRE(r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP);
            for (int i = 0; i < r.n_stop; i++) {
                check_str(r.stop[i]);
                size_t l = strlen(r.stop[i]);
                REQUIRE(l >= 1 && l <= SRV_MAX_STOP_LEN);
            }
            REQUIRE(r.max_tokens == -1 || (r.max_tokens >= 0 && r.max_tokens <= SRV_MAX_TOKENS));
            REQUIRE(r.top_logprobs >= 0 && r.top_logprobs <= SRV_MAX_TOP_LOGPROBS);
            REQUIRE(isfinite(r.temperature) && isfinite(r.top_p) && isfinite(r.min_p));
            REQUIRE(isfinite(r.presence_penalty) && isfinite(r.frequency_penalty));
        }
        srv_request_free(&r);
    } else if (mode == 2) {
        char *content = NULL;
        int add = -1, parse = -1;
        int rc = srv_tokenize_parse(body, n, &content, &add, &parse, err, cap);
        check_err(rc, err, cap);
        if (rc == 0) { check_str(content); REQUIRE((add == 0 || add == 1) && (parse == 0 || parse == 1)); }
        free(content);
    } else {
        int32_t *ids = NULL;
        int k = -1;
        int rc = srv_detokenize_parse(body, n, &ids, &k, err, cap);
        check_err(rc, err, cap);
        if (rc == 0) {
            REQUIRE(k >= 0 && (k == 0 || ids));
            for (int i = 0; i < k; i++) REQUIRE(ids[i] >= 0);
        }
        free(ids);
    }
    free(err);
    free(body);
    return 0;
}

/* fuzz_toolcall.c - libFuzzer target: tool calls and reasoning read out of a model's
 * output (src/toolcall.c). The output is model text, which a user's prompt can steer to
 * anything: hostile input.
 *
 * Input: byte 0 picks the format (modulo 7, the first seven) and the flags (bit 3
 * reasoning in <think> tags, bit 4 the prompt opened it); the rest is the output. Where
 * bit 7 of byte 0 is set, byte 1 picks any format (byte 1 modulo TC_FORMAT_COUNT) and
 * reasoning markup (byte 1 / TC_FORMAT_COUNT, modulo TC_THINK_COUNT), and the output
 * starts at byte 2.
 *
 * Checked beyond ASan/UBSan: the parse succeeds; the reasoning and content are
 * NUL-terminated at their lengths and no longer than the output; each call has a name
 * and JSON arguments; the streaming promise on every prefix that ends at a UTF-8
 * boundary (up to 256 of them): a partial parse's reasoning and content are prefixes of
 * the final ones and its calls the final calls' first ones. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "toolcall.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *const tools[] = { "get_weather", "search", "f", "python" };

#define REQUIRE(c) do { if (!(c)) { fprintf(stderr, "fuzz_toolcall: %s\n", #c); abort(); } } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    tc_opts o = { .format = (tc_format)(data[0] % 7), .tools = tools, .n_tools = 4,
                  .reasoning = (data[0] >> 3) & 1 ? TC_THINK_TAGS : TC_THINK_NONE, .think_open = (data[0] >> 4) & 1 };
    size_t skip = 1;
    if ((data[0] & 0x80) && size >= 2) {
        o.format = (tc_format)(data[1] % TC_FORMAT_COUNT);
        o.reasoning = (tc_think)(data[1] / TC_FORMAT_COUNT % TC_THINK_COUNT);
        skip = 2;
    }
    const char *text = (const char *)data + skip;
    size_t n = size - skip;
    tc_result fin;
    REQUIRE(tc_parse(text, n, 1, &o, &fin) == 0);
    REQUIRE(fin.content && fin.reasoning && fin.content[fin.content_len] == 0 && fin.reasoning[fin.reasoning_len] == 0);
    REQUIRE(fin.content_len <= n && fin.reasoning_len <= n);
    for (int i = 0; i < fin.n_calls; i++) REQUIRE(fin.calls[i].name && fin.calls[i].name[0] && fin.calls[i].arguments);
    size_t step = n / 256 + 1;
    for (size_t k = 0; k <= n; k += step) {
        size_t e = k;
        while (e < n && ((unsigned char)text[e] & 0xc0) == 0x80) e++;
        tc_result p;
        REQUIRE(tc_parse(text, e, 0, &o, &p) == 0);
        REQUIRE(p.content_len <= fin.content_len && !memcmp(p.content, fin.content, p.content_len));
        REQUIRE(p.reasoning_len <= fin.reasoning_len && !memcmp(p.reasoning, fin.reasoning, p.reasoning_len));
        REQUIRE(p.n_calls <= fin.n_calls);
        for (int i = 0; i < p.n_calls; i++)
            REQUIRE(!strcmp(p.calls[i].name, fin.calls[i].name) && !strcmp(p.calls[i].arguments, fin.calls[i].arguments) &&
                    !p.calls[i].id == !fin.calls[i].id && (!p.calls[i].id || !strcmp(p.calls[i].id, fin.calls[i].id)));
        tc_result_free(&p);
    }
    tc_result_free(&fin);
    return 0;
}

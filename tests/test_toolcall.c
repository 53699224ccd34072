/* test_toolcall.c - tool calls and reasoning read out of model outputs (src/toolcall.c):
 * each format's calls, text that only looks like a call, <think> blocks, and the
 * streaming promise checked on every prefix of every sample (and of random outputs made
 * of the formats' pieces): a partial parse's reasoning and content are prefixes of the
 * final ones and its calls are the final calls' first ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "toolcall.h"
#include "util.h"

static char *const tools[] = { "get_weather", "search" };

static tc_opts opts(tc_format f) {
    tc_opts o = { .format = f, .tools = tools, .n_tools = 2, .reasoning = 1 };
    return o;
}

/* want: content, reasoning, then (name, arguments) pairs; NULL ends */
static void expect(const char *what, const char *text, tc_opts o, const char *content, const char *reasoning, int n_calls,
                   const char *const *calls) {
    tc_result r;
    int rc = tc_parse(text, strlen(text), 1, &o, &r);
    CHECK(rc == 0, "%s: parse failed", what);
    if (rc) return;
    CHECK(!strcmp(r.content, content), "%s: content [%s], want [%s]", what, r.content, content);
    CHECK(!strcmp(r.reasoning, reasoning), "%s: reasoning [%s], want [%s]", what, r.reasoning, reasoning);
    CHECK(r.n_calls == n_calls, "%s: %d calls, want %d", what, r.n_calls, n_calls);
    for (int i = 0; i < r.n_calls && i < n_calls; i++) {
        CHECK(!strcmp(r.calls[i].name, calls[2 * i]), "%s: call %d name [%s], want [%s]", what, i, r.calls[i].name, calls[2 * i]);
        CHECK(!strcmp(r.calls[i].arguments, calls[2 * i + 1]), "%s: call %d arguments [%s], want [%s]", what, i,
              r.calls[i].arguments, calls[2 * i + 1]);
    }
    tc_result_free(&r);
}

/* every prefix of text (at UTF-8 boundaries) parses to a prefix of the final result */
static int streaming_ok(const char *text, tc_opts o, char *why, size_t cap) {
    size_t n = strlen(text);
    tc_result fin;
    if (tc_parse(text, n, 1, &o, &fin)) { snprintf(why, cap, "final parse failed"); return 0; }
    int ok = 1;
    for (size_t k = 0; k <= n && ok; k++) {
        if (k < n && ((unsigned char)text[k] & 0xc0) == 0x80) continue;
        tc_result p;
        if (tc_parse(text, k, 0, &o, &p)) { snprintf(why, cap, "partial parse failed at %zu", k); ok = 0; break; }
        if (p.content_len > fin.content_len || memcmp(p.content, fin.content, p.content_len)) {
            snprintf(why, cap, "at %zu: content [%s] is not a prefix of [%s]", k, p.content, fin.content);
            ok = 0;
        } else if (p.reasoning_len > fin.reasoning_len || memcmp(p.reasoning, fin.reasoning, p.reasoning_len)) {
            snprintf(why, cap, "at %zu: reasoning [%s] is not a prefix of [%s]", k, p.reasoning, fin.reasoning);
            ok = 0;
        } else if (p.n_calls > fin.n_calls) {
            snprintf(why, cap, "at %zu: %d calls, the final %d", k, p.n_calls, fin.n_calls);
            ok = 0;
        } else {
            for (int i = 0; i < p.n_calls && ok; i++)
                if (strcmp(p.calls[i].name, fin.calls[i].name) || strcmp(p.calls[i].arguments, fin.calls[i].arguments)) {
                    snprintf(why, cap, "at %zu: call %d differs from the final one", k, i);
                    ok = 0;
                }
        }
        tc_result_free(&p);
    }
    tc_result_free(&fin);
    return ok;
}

static const char *const W[] = { "get_weather", "{\"city\": \"Paris\"}" };
static const char *const WS[] = { "get_weather", "{\"city\": \"Paris\"}", "search", "{\"query\": \"x\", \"n\": [1, {\"a\": \"}\"}]}" };

static void test_formats(void) {
    tc_opts h = opts(TC_FORMAT_HERMES);
    expect("hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", h, "", "", 1, W);
    expect("hermes, text before", "Let me look.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
           h, "Let me look.", "", 1, W);
    expect("hermes, two calls",
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
           "{\"name\": \"search\", \"arguments\": {\"query\": \"x\", \"n\": [1, {\"a\": \"}\"}]}}\n</tool_call>", h, "", "", 2, WS);
    expect("hermes, arguments as a JSON string",
           "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}</tool_call>", h, "", "", 1, W);
    expect("hermes, unclosed at the end (the model stopped after the object)",
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", h, "", "", 1, W);
    expect("hermes, a block that is not a call stays text", "<tool_call>not json</tool_call> ok", h,
           "<tool_call>not json</tool_call> ok", "", 0, NULL);
    expect("hermes, fenced (Qwen2.5-Coder)",
           "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```", h, "", "", 1, W);
    expect("hermes, fenced JSON that is no call stays text", "```json\n{\"a\": 1}\n```", h, "```json\n{\"a\": 1}\n```", "", 0, NULL);
    expect("hermes, a bare object naming a tool", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", h, "", "", 1, W);
    expect("hermes, a bare object naming no tool stays text", "{\"name\": \"Bob\", \"age\": 3}", h, "{\"name\": \"Bob\", \"age\": 3}",
           "", 0, NULL);
    expect("hermes, braces in prose", "Use {x} and `code` here", h, "Use {x} and `code` here", "", 0, NULL);
    tc_opts l = opts(TC_FORMAT_LLAMA3);
    expect("llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", l, "", "", 1, W);
    expect("llama3, python_tag", "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", l, "", "", 1, W);
    expect("llama3, an unknown name stays text", "{\"name\": \"other\", \"parameters\": {}}", l, "{\"name\": \"other\", \"parameters\": {}}",
           "", 0, NULL);
    expect("llama3, prose", "The weather is fine.", l, "The weather is fine.", "", 0, NULL);
    tc_opts m = opts(TC_FORMAT_MISTRAL);
    expect("mistral", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123xyz\"}]", m, "", "", 1, W);
    expect("mistral, two", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"search\", "
           "\"arguments\": {\"query\": \"x\", \"n\": [1, {\"a\": \"}\"}]}}]", m, "", "", 2, WS);
    expect("mistral, not a list of calls", "[TOOL_CALLS][1, 2] hm", m, "[TOOL_CALLS][1, 2] hm", "", 0, NULL);
    tc_opts a = opts(TC_FORMAT_MISTRAL_ARGS);
    expect("mistral-args", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", a, "", "", 1, W);
    expect("mistral-args, two", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]search[ARGS]{\"query\": \"x\", \"n\": [1, {\"a\": \"}\"}]}",
           a, "", "", 2, WS);
    expect("mistral-args, call id", "[TOOL_CALLS]get_weather[CALL_ID]abc123xyz[ARGS]{\"city\": \"Paris\"}", a, "", "", 1, W);
    tc_result r;
    const char *with_id = "[TOOL_CALLS]get_weather[CALL_ID]abc123xyz[ARGS]{}";
    CHECK(!tc_parse(with_id, strlen(with_id), 1, &a, &r) && r.n_calls == 1 && r.calls[0].id &&
          !strcmp(r.calls[0].id, "abc123xyz"), "mistral-args: the call id kept");
    tc_result_free(&r);
    expect("hermes, XML parameters (Qwen3-Coder)",
           "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
           "</function>\n</tool_call>", h, "Checking.", "", 1,
           (const char *const[]){ "get_weather", "{\"city\": \"Paris\", \"days\": 3}" });
    expect("hermes, GLM's arg_key/arg_value", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris \"Nord\"</arg_value>\n"
           "<arg_key>opts</arg_key>\n<arg_value>{\"a\": [1]}</arg_value>\n</tool_call>", h, "", "", 1,
           (const char *const[]){ "get_weather", "{\"city\": \"Paris \\\"Nord\\\"\", \"opts\": {\"a\": [1]}}" });
    expect("hermes, a tag body of neither form stays text", "<tool_call>get weather now</tool_call>", h,
           "<tool_call>get weather now</tool_call>", "", 0, NULL);
    tc_opts d = opts(TC_FORMAT_DEEPSEEK);
#define DSB "<\xef\xbd\x9ctool\xe2\x96\x81"
#define DSE "\xef\xbd\x9c>"
    expect("deepseek-r1", "Let me check." DSB "calls" "\xe2\x96\x81" "begin" DSE DSB "call" "\xe2\x96\x81" "begin" DSE "function" DSB "sep" DSE
           "get_weather\n```json\n{\"city\": \"Paris\"}\n```" DSB "call" "\xe2\x96\x81" "end" DSE DSB "calls" "\xe2\x96\x81" "end" DSE,
           d, "Let me check.", "", 1, W);
    expect("deepseek-v3.1", DSB "calls" "\xe2\x96\x81" "begin" DSE DSB "call" "\xe2\x96\x81" "begin" DSE "get_weather" DSB "sep" DSE
           "{\"city\": \"Paris\"}" DSB "call" "\xe2\x96\x81" "end" DSE DSB "call" "\xe2\x96\x81" "begin" DSE "search" DSB "sep" DSE
           "{\"query\": \"x\", \"n\": [1, {\"a\": \"}\"}]}" DSB "call" "\xe2\x96\x81" "end" DSE DSB "calls" "\xe2\x96\x81" "end" DSE,
           d, "", "", 2, WS);
    static const char ds_tmpl[] = "{{ '" DSB "call" "\xe2\x96\x81" "begin" DSE "' }}";
    CHECK(tc_detect(ds_tmpl, sizeof ds_tmpl - 1) == TC_FORMAT_DEEPSEEK, "tc_detect: deepseek");
    tc_opts none = opts(TC_FORMAT_NONE);
    expect("no format: a call is text", "<tool_call>{\"name\": \"get_weather\"}</tool_call>", none,
           "<tool_call>{\"name\": \"get_weather\"}</tool_call>", "", 0, NULL);
}

static void test_reasoning(void) {
    tc_opts n = opts(TC_FORMAT_NONE);
    expect("think", "<think>\nLet me see.\n</think>\n\nParis.", n, "Paris.", "Let me see.", 0, NULL);
    tc_opts open = n;
    open.think_open = 1;
    expect("think opened by the prompt", "Let me see.\n</think>\n\nParis.", open, "Paris.", "Let me see.", 0, NULL);
    expect("think never closed (cut by max_tokens)", "<think>\nStill thinking", n, "", "Still thinking", 0, NULL);
    expect("think, reasoning off", "<think>x</think>y", (tc_opts){ .format = TC_FORMAT_NONE }, "<think>x</think>y", "", 0, NULL);
    expect("think, not at the start", "Hi <think>x</think>", n, "Hi <think>x</think>", "", 0, NULL);
    tc_opts h = opts(TC_FORMAT_HERMES);
    expect("think, then a call", "<think>I need the weather.</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
           "{\"city\": \"Paris\"}}\n</tool_call>", h, "", "I need the weather.", 1, W);
    const char *opened = "<|im_start|>assistant\n<think>\n";
    CHECK(tc_prompt_opens_think(opened, strlen(opened)) && !tc_prompt_opens_think("x<think>y", 9),
          "tc_prompt_opens_think");
    CHECK(tc_detect("{{ '<tool_call>' }}", 19) == TC_FORMAT_HERMES && tc_detect("[TOOL_CALLS] [ARGS]", 19) == TC_FORMAT_MISTRAL_ARGS &&
          tc_detect("[TOOL_CALLS]", 12) == TC_FORMAT_MISTRAL &&
          tc_detect("<|start_header_id|>ipython", 26) == TC_FORMAT_LLAMA3 && tc_detect("x", 1) == TC_FORMAT_GENERIC,
          "tc_detect");
}

static void test_streaming(void) {
    struct { tc_format f; int open; const char *text; } samples[] = {
        { TC_FORMAT_HERMES, 0, "Let me look.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"é}\"}}\n</tool_call> done" },
        { TC_FORMAT_HERMES, 0, "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```\nThen ```python\nprint(1)\n```" },
        { TC_FORMAT_HERMES, 0, "<think>\nhmm <tool_call> in thought\n</think>\n\nThe answer: {\"name\": \"Bob\"} `x` <tool_call>bad</tool_call>" },
        { TC_FORMAT_LLAMA3, 0, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}" },
        { TC_FORMAT_LLAMA3, 0, "{\"name\": \"nope\", \"parameters\": {}} and text" },
        { TC_FORMAT_MISTRAL, 0, "Sure. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcdefghi\"}]" },
        { TC_FORMAT_MISTRAL_ARGS, 0, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]search[ARGS]{\"q\": 1}" },
        { TC_FORMAT_NONE, 1, "Thinking about Paris...\n</think>\n\nIt is the capital.  \n" },
        { TC_FORMAT_GENERIC, 0, "  Plain answer with <tags>, [brackets] and {braces}.\n\n" },
        { TC_FORMAT_HERMES, 0, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>" },
        { TC_FORMAT_HERMES, 0, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call> ok" },
        { TC_FORMAT_DEEPSEEK, 1, "hm\n</think>\n\nI'll look." DSB "calls" "\xe2\x96\x81" "begin" DSE DSB "call" "\xe2\x96\x81" "begin" DSE
          "function" DSB "sep" DSE "get_weather\n```json\n{\"city\": \"Paris\"}\n```" DSB "call" "\xe2\x96\x81" "end" DSE DSB "calls"
          "\xe2\x96\x81" "end" DSE " after" },
    };
    char why[512];
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        tc_opts o = opts(samples[i].f);
        o.think_open = samples[i].open;
        CHECK(streaming_ok(samples[i].text, o, why, sizeof why), "streaming sample %zu (%s): %s", i, tc_format_name(samples[i].f), why);
    }
    /* random outputs made of the formats' pieces */
    static const char *pieces[] = { "<tool_call>", "</tool_call>", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}",
                                    "{\"name\": \"search\", \"parameters\": {}}", "[TOOL_CALLS]", "[ARGS]", "get_weather", "<think>",
                                    "</think>", "```json\n", "```", "{", "}", "[", "]", "\"", "\\", " ", "\n", "text", "é", "<|python_tag|>",
                                    ";", ",", "[CALL_ID]", "<tool", "```js", "<function=get_weather>", "<parameter=city>",
                                    "</parameter>", "</function>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                                    DSB "calls" "\xe2\x96\x81" "begin" DSE, DSB "call" "\xe2\x96\x81" "begin" DSE, DSB "sep" DSE,
                                    DSB "call" "\xe2\x96\x81" "end" DSE, DSB "calls" "\xe2\x96\x81" "end" DSE, "function" };
    mf_rng rng;
    mf_rng_seed(&rng, 53);
    int bad = 0;
    for (int t = 0; t < 1500 && !bad; t++) {
        char text[600];
        size_t o = 0;
        int np = 1 + (int)(mf_rng_u64(&rng) % 12);
        for (int k = 0; k < np; k++) {
            const char *p = pieces[mf_rng_u64(&rng) % (sizeof pieces / sizeof pieces[0])];
            size_t L = strlen(p);
            if (o + L + 1 >= sizeof text) break;
            memcpy(text + o, p, L);
            o += L;
        }
        text[o] = 0;
        tc_opts op = opts((tc_format)(mf_rng_u64(&rng) % 7));
        op.think_open = (int)(mf_rng_u64(&rng) % 4 == 0);
        if (!streaming_ok(text, op, why, sizeof why)) {
            CHECK(0, "random output %d (%s, think_open %d) [%s]: %s", t, tc_format_name(op.format), op.think_open, text, why);
            bad = 1;
        }
    }
    CHECK(!bad, "1500 random outputs keep the streaming promise");
}

int main(void) {
    test_formats();
    test_reasoning();
    test_streaming();
    return test_summary("test_toolcall");
}

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

/* every prefix of text (cut at any byte: the server cuts at characters, a stream of
 * tokens may cut anywhere) parses to a prefix of the final result */
static int streaming_ok(const char *text, tc_opts o, char *why, size_t cap) {
    size_t n = strlen(text);
    tc_result fin;
    if (tc_parse(text, n, 1, &o, &fin)) { snprintf(why, cap, "final parse failed"); return 0; }
    int ok = 1;
    for (size_t k = 0; k <= n && ok; k++) {
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
                if (strcmp(p.calls[i].name, fin.calls[i].name) || strcmp(p.calls[i].arguments, fin.calls[i].arguments) ||
                    !p.calls[i].id != !fin.calls[i].id || (p.calls[i].id && strcmp(p.calls[i].id, fin.calls[i].id))) {
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
    static const char ds_tmpl[] = "{{ '" DSB "call" "\xe2\x96\x81" "begin" DSE "' + '```json' }}";
    CHECK(tc_detect(ds_tmpl, sizeof ds_tmpl - 1) == TC_FORMAT_DEEPSEEK, "tc_detect: deepseek");
    tc_opts none = opts(TC_FORMAT_NONE);
    expect("no format: a call is text", "<tool_call>{\"name\": \"get_weather\"}</tool_call>", none,
           "<tool_call>{\"name\": \"get_weather\"}</tool_call>", "", 0, NULL);
}

#define KB(x) "<|tool_call" x "|>"
#define DSMLT "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"
/* the formats added after the first five: each one's calls, text beside them, text that
 * only looks like a call */
static void test_more_formats(void) {
    static const char *const WS2[] = { "get_weather", "{\"city\": \"Paris\"}", "search", "{\"query\": \"x\"}" };
    /* functionary v3.1 */
    tc_opts f1 = opts(TC_FORMAT_FUNCTIONARY_V31);
    expect("functionary-v3.1", "<function=get_weather>{\"city\": \"Paris\"}</function>", f1, "", "", 1, W);
    expect("functionary-v3.1, text and two", "Let me check. <function=get_weather>{\"city\": \"Paris\"}</function>"
           "<function=search>{\"query\": \"x\"}</function>", f1, "Let me check.", "", 2, WS2);
    expect("functionary-v3.1, unclosed at the end", "<function=get_weather>{\"city\": \"Paris\"}", f1, "", "", 1, W);
    expect("functionary-v3.1, no JSON stays text", "<function=get_weather>Paris</function>", f1,
           "<function=get_weather>Paris</function>", "", 0, NULL);
    char *const py_tools[] = { "python", "get_weather" };
    tc_opts fp = f1;
    fp.tools = py_tools;
    expect("functionary-v3.1, python tag", "<|python_tag|>print(\"hi\")\nx = 1", fp, "", "", 1,
           (const char *const[]){ "python", "{\"code\": \"print(\\\"hi\\\")\\nx = 1\"}" });
    expect("functionary-v3.1, python tag without a python tool stays text", "<|python_tag|>print(1)", f1,
           "<|python_tag|>print(1)", "", 0, NULL);
    /* functionary v3.2 (the prompt ends with ">>>") */
    tc_opts f2 = opts(TC_FORMAT_FUNCTIONARY_V32);
    expect("functionary-v3.2", "get_weather\n{\"city\": \"Paris\"}", f2, "", "", 1, W);
    expect("functionary-v3.2, text", "all\nHello there!", f2, "Hello there!", "", 0, NULL);
    expect("functionary-v3.2, text then two calls", "all\nLet me check.>>>get_weather\n{\"city\": \"Paris\"}>>>search\n"
           "{\"query\": \"x\"}", f2, "Let me check.", "", 2, WS2);
    expect("functionary-v3.2, no recipient line", "Paris is nice", f2, "Paris is nice", "", 0, NULL);
    expect("functionary-v3.2, a recipient without JSON", "get_weather\nParis", f2, "get_weather\nParis", "", 0, NULL);
    tc_opts f2p = f2;
    f2p.tools = py_tools;
    expect("functionary-v3.2, python", "python\nprint(1)", f2p, "", "", 1,
           (const char *const[]){ "python", "{\"code\": \"print(1)\"}" });
    /* command-r (R+) */
    tc_opts cr = opts(TC_FORMAT_COMMAND_R);
    expect("command-r", "Action: ```json\n[\n    {\n        \"tool_name\": \"get_weather\",\n        \"parameters\": "
           "{\"city\": \"Paris\"}\n    }\n]\n```", cr, "", "", 1, W);
    expect("command-r, two, text before", "I will look.\nAction:\n```json\n[{\"tool_name\": \"get_weather\", \"parameters\": "
           "{\"city\": \"Paris\"}}, {\"tool_name\": \"search\", \"parameters\": {\"query\": \"x\"}}]```", cr, "I will look.", "", 2, WS2);
    expect("command-r, directly-answer is no call", "Action: ```json\n[{\"tool_name\": \"directly-answer\", \"parameters\": {}}]\n```",
           cr, "", "", 0, NULL);
    expect("command-r, prose", "Action: none needed.", cr, "Action: none needed.", "", 0, NULL);
    expect("command-r, a list cut by max_tokens: its complete calls", "Action: ```json\n[{\"tool_name\": \"get_weather\", "
           "\"parameters\": {\"city\": \"Paris\"}}, {\"tool_name\": \"search\", \"param", cr, "", "", 1, W);
    expect("mistral, a list cut by max_tokens", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"na",
           opts(TC_FORMAT_MISTRAL), "", "", 1, W);
    /* command-r7b: thinking, action, response */
    tc_opts c7 = opts(TC_FORMAT_COMMAND_R7B);
    c7.reasoning = TC_THINK_COHERE;
    expect("command-r7b", "<|START_THINKING|>I need the weather.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", "
           "\"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n]<|END_ACTION|>", c7, "", "I need the weather.", 1, W);
    expect("command-r7b, response", "<|START_THINKING|>Easy.<|END_THINKING|><|START_RESPONSE|>Hello!<|END_RESPONSE|>", c7, "Hello!",
           "Easy.", 0, NULL);
    tc_opts c7n = opts(TC_FORMAT_NONE);
    c7n.reasoning = TC_THINK_COHERE;
    expect("command-r7b, no tools", "<|START_RESPONSE|>Hi there.<|END_RESPONSE|>", c7n, "Hi there.", "", 0, NULL);
    /* granite 3.x */
    tc_opts g = opts(TC_FORMAT_GRANITE);
    g.reasoning = TC_THINK_GRANITE;
    expect("granite", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", g, "", "", 1, W);
    expect("granite, thinking and response", "<think>Simple.</think><response>Hello.</response>", g, "Hello.", "Simple.", 0, NULL);
    expect("granite, not a list", "<|tool_call|>get_weather", g, "<|tool_call|>get_weather", "", 0, NULL);
    /* gpt-oss */
    tc_opts h = opts(TC_FORMAT_GPT_OSS);
    h.reasoning = TC_THINK_HARMONY;
    expect("gpt-oss, call", "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
           "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}", h, "", "Need the weather.", 1, W);
    expect("gpt-oss, answer", "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Paris.", h,
           "Paris.", "Easy.", 0, NULL);
    expect("gpt-oss, recipient first", " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}", h, "", "",
           1, W);
    expect("gpt-oss, plain text", "Hello there", h, "Hello there", "", 0, NULL);
    tc_opts hn = opts(TC_FORMAT_NONE);
    hn.reasoning = TC_THINK_HARMONY;
    expect("gpt-oss, no tools", "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>Yes.", hn,
           "Yes.", "Hm.", 0, NULL);
    /* kimi-k2 */
    tc_opts k = opts(TC_FORMAT_KIMI_K2);
    const char *kimi = "Let me check." KB("s_section_begin") KB("_begin") "functions.get_weather:0" KB("_argument_begin")
                       "{\"city\": \"Paris\"}" KB("_end") KB("_begin") "functions.search:1" KB("_argument_begin")
                       "{\"query\": \"x\"}" KB("_end") KB("s_section_end");
    expect("kimi-k2", kimi, k, "Let me check.", "", 2, WS2);
    tc_result r;
    CHECK(!tc_parse(kimi, strlen(kimi), 1, &k, &r) && r.n_calls == 2 && r.calls[0].id && !strcmp(r.calls[0].id, "functions.get_weather:0") &&
          r.calls[1].id && !strcmp(r.calls[1].id, "functions.search:1"), "kimi-k2: the model's ids kept");
    tc_result_free(&r);
    const char *twice = KB("s_section_begin") KB("_begin") "functions.get_weather:0" KB("_argument_begin") "{}" KB("_end")
                        KB("_begin") "functions.get_weather:0" KB("_argument_begin") "{}" KB("_end") KB("s_section_end");
    CHECK(!tc_parse(twice, strlen(twice), 1, &k, &r) && r.n_calls == 2 && r.calls[0].id && !r.calls[1].id,
          "kimi-k2: an id written twice is dropped the second time");
    tc_result_free(&r);
    expect("kimi-k2, an empty section stays text", KB("s_section_begin") KB("s_section_end") " ok", k,
           KB("s_section_begin") KB("s_section_end") " ok", "", 0, NULL);
    /* seed-oss */
    tc_opts sd = opts(TC_FORMAT_SEED_OSS);
    sd.reasoning = TC_THINK_SEED;
    expect("seed-oss", "<seed:think>Weather needed.</seed:think>I'll check.<seed:tool_call>\n<function=get_weather>\n"
           "<parameter=city>Paris</parameter>\n</function>\n</seed:tool_call>", sd, "I'll check.", "Weather needed.", 1, W);
    expect("seed-oss, a JSON object inside (the grammar's form)", "<seed:tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
           "{\"city\": \"Paris\"}}\n</seed:tool_call>", sd, "", "", 1, W);
    /* nemotron-v2, apriel (with its reasoning the prompt opens) */
    expect("nemotron-v2", "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]</TOOLCALL>",
           opts(TC_FORMAT_NEMOTRON_V2), "", "", 1, W);
    tc_opts ap = opts(TC_FORMAT_APRIEL);
    ap.reasoning = TC_THINK_APRIEL;
    ap.think_open = 1;
    expect("apriel", "\nThe weather.\n[BEGIN FINAL RESPONSE]\nChecking. <tool_calls>[{\"name\": \"get_weather\", \"arguments\": "
           "{\"city\": \"Paris\"}}]</tool_calls>\n[END FINAL RESPONSE]", ap, "Checking.", "The weather.", 1, W);
    /* minimax-m2, deepseek-dsml (V3.2) */
    tc_opts mm = opts(TC_FORMAT_MINIMAX_M2);
    mm.reasoning = TC_THINK_TAGS;
    expect("minimax-m2", "<think>Hm.</think>Sure.<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">"
           "Paris</parameter>\n</invoke>\n</minimax:tool_call>", mm, "Sure.", "Hm.", 1, W);
    expect("minimax-m2, a malformed block stays text", "<minimax:tool_call><invoke>x</invoke></minimax:tool_call>", mm,
           "<minimax:tool_call><invoke>x</invoke></minimax:tool_call>", "", 0, NULL);
    tc_opts ds2 = opts(TC_FORMAT_DEEPSEEK_DSML);
    expect("deepseek-dsml", "Ok.\n\n<" DSMLT "function_calls>\n<" DSMLT "invoke name=\"get_weather\">\n<" DSMLT
           "parameter name=\"city\" string=\"true\">Paris</" DSMLT "parameter>\n</" DSMLT "invoke>\n</" DSMLT "function_calls>",
           ds2, "Ok.", "", 1, W);
    r = (tc_result){ 0 };
    const char *two = "<" DSMLT "function_calls><" DSMLT "invoke name=\"search\"><" DSMLT "parameter name=\"q\" string=\"false\">"
                      "[1, 2]</" DSMLT "parameter><" DSMLT "parameter name=\"s\" string=\"true\">12</" DSMLT "parameter></" DSMLT
                      "invoke><" DSMLT "invoke name=\"get_weather\"></" DSMLT "invoke></" DSMLT "function_calls>";
    CHECK(!tc_parse(two, strlen(two), 1, &ds2, &r) && r.n_calls == 2 && !strcmp(r.calls[0].arguments, "{\"q\": [1, 2], \"s\": \"12\"}") &&
          !strcmp(r.calls[1].name, "get_weather") && !strcmp(r.calls[1].arguments, "{}"),
          "deepseek-dsml: string=\"false\" values are JSON, string=\"true\" ones strings, two invokes");
    tc_result_free(&r);
    /* deepseek-v3.1 parses both forms as deepseek */
    tc_opts d31 = opts(TC_FORMAT_DEEPSEEK_V31);
    expect("deepseek-v3.1", DSB "calls" "\xe2\x96\x81" "begin" DSE DSB "call" "\xe2\x96\x81" "begin" DSE "get_weather" DSB "sep" DSE
           "{\"city\": \"Paris\"}" DSB "call" "\xe2\x96\x81" "end" DSE DSB "calls" "\xe2\x96\x81" "end" DSE, d31, "", "", 1, W);
}

/* tc_detect and tc_template_thinks on the markers each family's template writes */
static void test_detect(void) {
    struct { const char *src; tc_format f; tc_think t; } cases[] = {
        { "<|start_header_id|>{{ '<function=' + name + '>' }} ipython", TC_FORMAT_FUNCTIONARY_V31, TC_THINK_NONE },
        { "<|start_header_id|>assistant{{ '>>>all\\n' + content }}", TC_FORMAT_FUNCTIONARY_V32, TC_THINK_NONE },
        { "<|start_header_id|>ipython", TC_FORMAT_LLAMA3, TC_THINK_NONE },
        { "Write 'Action:' ... \"tool_name\": <|START_OF_TURN_TOKEN|>", TC_FORMAT_COMMAND_R, TC_THINK_NONE },
        { "Action: <|START_ACTION|> \"tool_name\" <|START_THINKING|>", TC_FORMAT_COMMAND_R7B, TC_THINK_COHERE },
        { "<|start_of_role|><|tool_call|> <think></think><response></response>", TC_FORMAT_GRANITE, TC_THINK_GRANITE },
        { "<|start|>assistant<|channel|>analysis ... to=functions.", TC_FORMAT_GPT_OSS, TC_THINK_HARMONY },
        { KB("s_section_begin") " <think>", TC_FORMAT_KIMI_K2, TC_THINK_TAGS },
        { "<seed:tool_call><function=x> <seed:think>", TC_FORMAT_SEED_OSS, TC_THINK_SEED },
        { "<tool_call><function=x> <think>", TC_FORMAT_HERMES, TC_THINK_TAGS },
        { DSB "call" "\xe2\x96\x81" "begin" DSE "function" DSB "sep" DSE "```json", TC_FORMAT_DEEPSEEK, TC_THINK_NONE },
        { DSB "call" "\xe2\x96\x81" "begin" DSE "name" DSB "sep" DSE "args", TC_FORMAT_DEEPSEEK_V31, TC_THINK_NONE },
        { "<minimax:tool_call> <invoke name= <think>", TC_FORMAT_MINIMAX_M2, TC_THINK_TAGS },
        { "{{ '<' + dsml_token + 'function_calls>' }} " DSMLT "invoke <think>", TC_FORMAT_DEEPSEEK_DSML, TC_THINK_TAGS },
        { "<TOOLCALL>[...]</TOOLCALL> <think>", TC_FORMAT_NEMOTRON_V2, TC_THINK_TAGS },
        { "within <tool_call></tool_call> tags: <tool_calls>[...]</tool_calls> [BEGIN FINAL RESPONSE]", TC_FORMAT_APRIEL, TC_THINK_APRIEL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tc_format f = tc_detect(cases[i].src, strlen(cases[i].src));
        tc_think t = tc_template_thinks(cases[i].src, strlen(cases[i].src));
        CHECK(f == cases[i].f && t == cases[i].t, "detect case %zu: %s/%s, want %s/%s", i, tc_format_name(f), tc_think_name(t),
              tc_format_name(cases[i].f), tc_think_name(cases[i].t));
    }
    const char *m[16];
    int n = tc_markers(TC_FORMAT_KIMI_K2, TC_THINK_TAGS, m, 16);
    CHECK(n == 7 && !strcmp(m[0], KB("s_section_begin")) && !strcmp(m[6], "</think>"), "tc_markers: kimi + think: %d", n);
    CHECK(tc_markers(TC_FORMAT_GPT_OSS, TC_THINK_HARMONY, m, 16) == 5 && tc_markers(TC_FORMAT_NONE, TC_THINK_HARMONY, m, 16) == 5 &&
          tc_markers(TC_FORMAT_FUNCTIONARY_V32, TC_THINK_NONE, m, 16) == 0 && tc_markers(TC_FORMAT_HERMES, TC_THINK_TAGS, m, 3) == 3,
          "tc_markers: counts and the cap");
    for (int f = 0; f < TC_FORMAT_COUNT; f++)
        CHECK(strcmp(tc_format_name((tc_format)f), "?"), "format %d has a name", f);
}

/* What tc_format_shape says a call looks like (the grammar of a forced call writes it)
 * parses to the call, in every format: two calls (one where the format allows one). */
static void test_shapes(void) {
    for (int f = TC_FORMAT_NONE + 1; f < TC_FORMAT_COUNT; f++) {
        tc_shape sh;
        tc_format_shape((tc_format)f, &sh);
        const char *names[2] = { "get_weather", "search" }, *args[2] = { "{\"city\": \"Paris\"}", "{\"query\": \"x\"}" };
        int n = sh.max_calls == 1 ? 1 : 2;
        char text[1024];
        size_t o = 0;
#define ADD(x) do { if (x) o += (size_t)snprintf(text + o, sizeof text - o, "%s", (x)); } while (0)
        ADD(sh.list_prefix);
        for (int i = 0; i < n; i++) {
            if (i) ADD(sh.separator);
            ADD(sh.call_prefix);
            if (sh.bare_name) {
                ADD(names[i]);
                ADD(sh.name_suffix);
                ADD(args[i]);
            } else {
                o += (size_t)snprintf(text + o, sizeof text - o, "{\"%s\": \"%s\", \"%s\": %s}", sh.name_key, names[i], sh.args_key,
                                      args[i]);
            }
            ADD(sh.call_suffix);
        }
        ADD(sh.list_suffix);
#undef ADD
        tc_opts op = opts((tc_format)f);
        op.reasoning = TC_THINK_NONE;
        char what[64];
        snprintf(what, sizeof what, "shape of %s", tc_format_name((tc_format)f));
        expect(what, text, op, "", "", n, (const char *const[]){ names[0], args[0], names[1], args[1] });
        char why[512];
        CHECK(streaming_ok(text, op, why, sizeof why), "%s, streamed: %s", what, why);
    }
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
    CHECK(tc_prompt_opens_think(opened, strlen(opened)) == TC_THINK_TAGS && !tc_prompt_opens_think("x<think>y", 9) &&
          tc_prompt_opens_think("assistant\n<seed:think>", 22) == TC_THINK_SEED &&
          tc_prompt_opens_think("<|CHATBOT_TOKEN|><|START_THINKING|>", 35) == TC_THINK_COHERE &&
          !tc_prompt_opens_think("<think></think>", 15), "tc_prompt_opens_think");
    tc_opts seed = opts(TC_FORMAT_NONE);
    seed.reasoning = TC_THINK_SEED;
    expect("seed think", "<seed:think>a <think>b</think></seed:think>Answer.", seed, "Answer.", "a <think>b</think>", 0, NULL);
    seed.think_open = 1;
    expect("seed think opened by the prompt", "plan</seed:think>Answer.", seed, "Answer.", "plan", 0, NULL);
    tc_opts mth = opts(TC_FORMAT_MISTRAL_ARGS);
    mth.reasoning = TC_THINK_MISTRAL;
    expect("mistral think, then a call", "[THINK]Weather.[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", mth, "",
           "Weather.", 1, W);
    CHECK(tc_template_thinks("[THINK]x[/THINK]", 16) == TC_THINK_MISTRAL, "tc_template_thinks: mistral");
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
        { TC_FORMAT_FUNCTIONARY_V31, 0, "Sure. <function=get_weather>{\"city\": \"Paris\"}</function> <function=search>{\"q\": \"}\"}</function>ok" },
        { TC_FORMAT_FUNCTIONARY_V32, 0, "all\nLet me check.>>>get_weather\n{\"city\": \"Paris\"}>>>all\nDone >>> there" },
        { TC_FORMAT_COMMAND_R, 0, "Plan.\nAction: ```json\n[{\"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"P\"}}]\n``` after" },
        { TC_FORMAT_COMMAND_R7B, 0, "<|START_THINKING|>t<|END_THINKING|><|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"search\", \"parameters\": {}}]<|END_ACTION|>" },
        { TC_FORMAT_GRANITE, 0, "<think>a</think><response>b <|tool_call|>[{\"name\": \"search\", \"arguments\": {\"q\": 1}}] c</response>" },
        { TC_FORMAT_GPT_OSS, 0, "<|channel|>analysis<|message|>x <|end|><|start|>assistant<|channel|>commentary to=functions.search <|constrain|>json<|message|>{\"q\": \"é\"}<|end|><|start|>assistant<|channel|>final<|message|>done" },
        { TC_FORMAT_KIMI_K2, 0, "<think>k</think>Ok." KB("s_section_begin") KB("_begin") "functions.search:0" KB("_argument_begin") "{\"q\": 2}" KB("_end") KB("s_section_end") " more" },
        { TC_FORMAT_SEED_OSS, 0, "<seed:think>s</seed:think>a<seed:tool_call>\n<function=search>\n<parameter=q>x y</parameter>\n</function>\n</seed:tool_call>b" },
        { TC_FORMAT_APRIEL, 1, "x\n[BEGIN FINAL RESPONSE]\nok <tool_calls>[{\"name\": \"search\", \"arguments\": {}}]</tool_calls> b\n[END FINAL RESPONSE]" },
        { TC_FORMAT_MINIMAX_M2, 0, "<think>t</think>a<minimax:tool_call>\n<invoke name=\"search\">\n<parameter name=\"q\">{\"a\": 1}</parameter>\n<parameter name=\"b\">x y</parameter>\n</invoke>\n<invoke name=\"get_weather\"></invoke>\n</minimax:tool_call> b <minimax:tool" },
        { TC_FORMAT_DEEPSEEK_DSML, 0, "x <" DSMLT "function_calls>\n<" DSMLT "invoke name=\"search\">\n<" DSMLT "parameter name=\"q\" string=\"true\">é</" DSMLT "parameter>\n</" DSMLT "invoke>\n</" DSMLT "function_calls> y" },
        { TC_FORMAT_NEMOTRON_V2, 0, "<think>t</think>a<TOOLCALL>[{\"name\": \"search\", \"arguments\": {\"q\": [1]}}]</TOOLCALL>" },
        { TC_FORMAT_DEEPSEEK, 1, "hm\n</think>\n\nI'll look." DSB "calls" "\xe2\x96\x81" "begin" DSE DSB "call" "\xe2\x96\x81" "begin" DSE
          "function" DSB "sep" DSE "get_weather\n```json\n{\"city\": \"Paris\"}\n```" DSB "call" "\xe2\x96\x81" "end" DSE DSB "calls"
          "\xe2\x96\x81" "end" DSE " after" },
    };
    char why[512];
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        tc_opts o = opts(samples[i].f);
        o.think_open = samples[i].open;
        if (samples[i].f == TC_FORMAT_COMMAND_R7B) o.reasoning = TC_THINK_COHERE;
        if (samples[i].f == TC_FORMAT_GRANITE) o.reasoning = TC_THINK_GRANITE;
        if (samples[i].f == TC_FORMAT_GPT_OSS) o.reasoning = TC_THINK_HARMONY;
        if (samples[i].f == TC_FORMAT_SEED_OSS) o.reasoning = TC_THINK_SEED;
        if (samples[i].f == TC_FORMAT_MINIMAX_M2) o.reasoning = TC_THINK_TAGS;
        if (samples[i].f == TC_FORMAT_APRIEL) o.reasoning = TC_THINK_APRIEL;
        CHECK(streaming_ok(samples[i].text, o, why, sizeof why), "streaming sample %zu (%s): %s", i, tc_format_name(samples[i].f), why);
    }
    /* random outputs made of the formats' pieces */
    static const char *pieces[] = { "<tool_call>", "</tool_call>", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}",
                                    "{\"name\": \"search\", \"parameters\": {}}", "[TOOL_CALLS]", "[ARGS]", "get_weather", "<think>",
                                    "</think>", "```json\n", "```", "{", "}", "[", "]", "\"", "\\", " ", "\n", "text", "é", "<|python_tag|>",
                                    ";", ",", "[CALL_ID]", "<tool", "```js", "<function=get_weather>", "<parameter=city>",
                                    "</parameter>", "</function>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                                    DSB "calls" "\xe2\x96\x81" "begin" DSE, DSB "call" "\xe2\x96\x81" "begin" DSE, DSB "sep" DSE,
                                    DSB "call" "\xe2\x96\x81" "end" DSE, DSB "calls" "\xe2\x96\x81" "end" DSE, "function",
                                    "<function=", ">", ">>>", "all\n", "get_weather\n", "python\n", "<|python_tag|>", "Action:",
                                    "```json\n[", "{\"tool_name\": \"search\", \"parameters\": {}}", "<|START_ACTION|>",
                                    "<|END_ACTION|>", "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>",
                                    "<|END_RESPONSE|>", "<|tool_call|>", "<response>", "</response>", "<|channel|>", "analysis",
                                    "final", "commentary", " to=functions.search", "<|message|>", "<|end|>", "<|start|>assistant",
                                    " <|constrain|>json", KB("s_section_begin"), KB("s_section_end"), KB("_begin"), KB("_end"),
                                    KB("_argument_begin"), "functions.search:0", "<seed:tool_call>", "</seed:tool_call>",
                                    "<seed:think>", "</seed:think>", "<parameter=q>", "{\"q\": 1}", "[THINK]", "[/THINK]",
                                    "<TOOLCALL>", "</TOOLCALL>", "<tool_calls>", "</tool_calls>", "Here are my reasoning steps:",
                                    "[BEGIN FINAL RESPONSE]", "[END FINAL RESPONSE]", "<minimax:tool_call>", "</minimax:tool_call>",
                                    "<invoke name=\"search\">", "</invoke>", "<parameter name=\"q\">", "<" DSMLT "function_calls>",
                                    "</" DSMLT "function_calls>", "<" DSMLT "invoke name=\"search\">", "</" DSMLT "invoke>",
                                    "<" DSMLT "parameter name=\"q\" string=\"false\">", "</" DSMLT "parameter>" };
    mf_rng rng;
    mf_rng_seed(&rng, 53);
    int bad = 0;
    for (int t = 0; t < 3000 && !bad; t++) {
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
        tc_opts op = opts((tc_format)(mf_rng_u64(&rng) % TC_FORMAT_COUNT));
        op.reasoning = (tc_think)(mf_rng_u64(&rng) % TC_THINK_COUNT);
        op.think_open = (int)(mf_rng_u64(&rng) % 4 == 0);
        if (!streaming_ok(text, op, why, sizeof why)) {
            CHECK(0, "random output %d (%s, %s, think_open %d) [%s]: %s", t, tc_format_name(op.format), tc_think_name(op.reasoning),
                  op.think_open, text, why);
            bad = 1;
        }
    }
    CHECK(!bad, "3000 random outputs keep the streaming promise");
}

int main(void) {
    test_formats();
    test_more_formats();
    test_detect();
    test_shapes();
    test_reasoning();
    test_streaming();
    return test_summary("test_toolcall");
}

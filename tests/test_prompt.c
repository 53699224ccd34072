/* test_prompt.c - a conversation rendered through a Jinja template as the template takes
 * it (src/prompt.c, issue 53): tool-call arguments as objects (the Hugging Face
 * convention) or, where a probe render shows the template needs them so (Functionary
 * v3.2 concatenates them), as JSON text; an assistant's reasoning_content also given as
 * "thinking" to a template that reads that (gpt-oss); the traits a log line reports. */
#include "test.h"

#include "prompt.h"

/* messages_json (an OpenAI-style list) through template src; the text, or NULL */
static char *render(const char *src, const char *messages_json, prompt_tmpl *p) {
    prompt_source s = { .src = src, .len = strlen(src), .bos_text = "<s>", .eos_text = "</s>" };
    char err[512];
    if (prompt_init(p, &s, err, sizeof err) || !p->jinja) {
        fprintf(stderr, "prompt_init: %s (%s)\n", err, p->label);
        return NULL;
    }
    jinja_env *e = jinja_env_new();
    jinja_error je;
    jinja_value *msgs = jinja_json_parse(e, messages_json, strlen(messages_json), &je);
    const char *tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {}}}]";
    prompt_request r = { .add_generation_prompt = 1, .tools = jinja_json_parse(e, tools_json, strlen(tools_json), &je) };
    char *out = NULL;
    if (msgs && (r.messages = prompt_messages(e, msgs, err, sizeof err))) out = prompt_render(p, e, &r, NULL, err, sizeof err);
    if (!out) fprintf(stderr, "render: %s\n", err);
    jinja_env_free(e);
    return out;
}

static const char CONV[] =
    "[{\"role\": \"user\", \"content\": \"weather?\"},"
    " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"Need it.\", \"tool_calls\": [{\"id\": \"call_1\","
    " \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"18 C\"}]";

static void test_arguments(void) {
    /* Functionary v3.2's way: '>>>' + name + '\n' + arguments (a str + dict fails in Python) */
    const char *concat = "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ '>>>' + tc.function.name + '\\n' + "
                         "tc.function.arguments }}{% endfor %}{% endfor %}|{{ tools | length }}";
    prompt_tmpl p;
    char *out = render(concat, CONV, &p);
    CHECK(p.string_args == 1, "a template that concatenates the arguments takes text");
    CHECK(out && strstr(out, ">>>get_weather\n{\"city\": \"Paris\"}|1"), "concatenated arguments: [%s]", out ? out : "");
    char traits[160];
    CHECK(strstr(prompt_traits(&p, traits, sizeof traits), "arguments as JSON text") != NULL, "traits: %s", traits);
    free(out);
    prompt_free(&p);
    /* the usual way: arguments | tojson of an object */
    const char *tojson = "{% for m in messages %}{% for tc in m.tool_calls or [] %}{{ tc.function.arguments | tojson }}"
                         "{% endfor %}{% endfor %}{{ tools | length }}";
    out = render(tojson, CONV, &p);
    CHECK(p.string_args == 0 && out && !strcmp(out, "{\"city\": \"Paris\"}1"), "tojson of the object: [%s]", out ? out : "");
    CHECK(!strcmp(prompt_traits(&p, traits, sizeof traits), "; tool calls: generic; reasoning: none"), "traits: %s", traits);
    free(out);
    prompt_free(&p);
    /* a template that fails both ways keeps objects (its own error is the client's) */
    out = render("{{ raise_exception('no') }}{{ tools }}", CONV, &p);
    CHECK(!out && p.string_args == 0, "a template that always fails");
    free(out);
    prompt_free(&p);
}

static void test_thinking(void) {
    const char *harmony = "{# <|channel|>analysis #}{% for m in messages %}{% if 'thinking' in m %}[{{ m.thinking }}]{% endif %}"
                          "{% endfor %}";
    prompt_tmpl p;
    char *out = render(harmony, CONV, &p);
    CHECK(p.thinking_key == 1 && p.thinks == TC_THINK_HARMONY, "a template that reads thinking: %d %d", p.thinking_key, p.thinks);
    CHECK(out && !strcmp(out, "[Need it.]"), "reasoning_content given as thinking: [%s]", out ? out : "");
    free(out);
    prompt_free(&p);
    const char *both = "{% for m in messages %}{{ m.reasoning_content or '' }}{{ m.thinking or '' }}{% endfor %}";
    out = render(both, CONV, &p);
    CHECK(p.thinking_key == 0 && out && !strcmp(out, "Need it."), "a template that reads reasoning_content: [%s]", out ? out : "");
    free(out);
    prompt_free(&p);
}

int main(void) {
    test_arguments();
    test_thinking();
    return test_summary("test_prompt");
}

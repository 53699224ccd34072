/* test_chat.c - chat template detection and rendering.
 *
 * Two conversations: a short one (system, user, assistant, user) with an answer that
 * has surrounding spaces, so each family's trimming shows; and the six-message
 * conversation of llama.cpp's tests/test-chat-template.cpp, whose expected strings
 * there are what llama.cpp's built-in renderer produces for real model templates.
 * Each template source below is a real model's template or an excerpt keeping the
 * substrings that identify it. */
#include "test.h"

#include "chat.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const chat_msg conv_a[] = {
    { "system", "You are helpful." },
    { "user", "Hi" },
    { "assistant", " Hello there. " },
    { "user", "Who are you?" },
};

static const chat_msg conv_b[] = {
    { "system", "You are a helpful assistant" },
    { "user", "Hello" },
    { "assistant", "Hi there" },
    { "user", "Who are you" },
    { "assistant", "   I am an assistant   " },
    { "user", "Another question" },
};

/* Renders conv with t and compares with want; prints both on a mismatch. */
static void check_render(chat_tmpl t, const chat_msg *conv, int n, int add, const char *want,
                         const char *what) {
    char *got = chat_render(t, conv, n, add);
    CHECK(got != NULL, "%s: chat_render(%s) returned NULL", what, chat_name(t));
    if (!got) return;
    CHECK(strcmp(got, want) == 0, "%s (%s):\n--- want\n%s\n--- got\n%s\n---", what, chat_name(t),
          want, got);
    free(got);
}

static void check_detect(const char *src, int want_rc, chat_tmpl want, const char *what) {
    chat_tmpl t = CHAT_TMPL_COUNT;
    int rc = chat_detect(src, &t);
    CHECK(rc == want_rc && t == want, "%s: detect -> rc %d %s, want rc %d %s", what, rc,
          chat_name(t), want_rc, chat_name(want));
}

/* ---------------------------------------------------------------- conversation A */

static void test_render_conv_a(void) {
    const int n = (int)ARRAY_LEN(conv_a);
    check_render(CHAT_TMPL_CHATML, conv_a, n, 1,
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n Hello there. <|im_end|>\n"
        "<|im_start|>user\nWho are you?<|im_end|>\n"
        "<|im_start|>assistant\n", "conv A");
    check_render(CHAT_TMPL_CHATML, conv_a, n, 0,
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n Hello there. <|im_end|>\n"
        "<|im_start|>user\nWho are you?<|im_end|>\n", "conv A, no generation prompt");
    check_render(CHAT_TMPL_LLAMA2, conv_a, n, 1,
        "[INST] You are helpful.\nHi [/INST] Hello there. </s>[INST] Who are you? [/INST]",
        "conv A");
    check_render(CHAT_TMPL_LLAMA2_SYS, conv_a, n, 1,
        "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello there. </s>"
        "[INST] Who are you? [/INST]", "conv A");
    check_render(CHAT_TMPL_LLAMA2_SYS_BOS, conv_a, n, 1,
        "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello there. </s>"
        "<s>[INST] Who are you? [/INST]", "conv A");
    check_render(CHAT_TMPL_LLAMA2_SYS_STRIP, conv_a, n, 1,
        "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST]Hello there.</s>"
        "[INST] Who are you? [/INST]", "conv A");
    check_render(CHAT_TMPL_MISTRAL_V1, conv_a, n, 1,
        " [INST] You are helpful.\n\nHi [/INST]  Hello there. </s> [INST] Who are you? [/INST]",
        "conv A");
    check_render(CHAT_TMPL_MISTRAL_V3, conv_a, n, 1,
        "[INST] You are helpful.\n\nHi[/INST] Hello there.</s>[INST] Who are you?[/INST]",
        "conv A");
    check_render(CHAT_TMPL_MISTRAL_V3_TEKKEN, conv_a, n, 1,
        "[INST]You are helpful.\n\nHi[/INST] Hello there. </s>[INST]Who are you?[/INST]",
        "conv A");
    check_render(CHAT_TMPL_MISTRAL_V7, conv_a, n, 1,
        "[SYSTEM_PROMPT] You are helpful.[/SYSTEM_PROMPT][INST] Hi[/INST]  Hello there. </s>"
        "[INST] Who are you?[/INST]", "conv A");
    check_render(CHAT_TMPL_MISTRAL_V7_TEKKEN, conv_a, n, 1,
        "[SYSTEM_PROMPT]You are helpful.[/SYSTEM_PROMPT][INST]Hi[/INST] Hello there. </s>"
        "[INST]Who are you?[/INST]", "conv A");
    check_render(CHAT_TMPL_LLAMA3, conv_a, n, 1,
        "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello there.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n", "conv A");
    check_render(CHAT_TMPL_LLAMA3, conv_a, n, 0,
        "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello there.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>",
        "conv A, no generation prompt");
    check_render(CHAT_TMPL_GEMMA, conv_a, n, 1,
        "<start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello there.<end_of_turn>\n"
        "<start_of_turn>user\nWho are you?<end_of_turn>\n"
        "<start_of_turn>model\n", "conv A");
    check_render(CHAT_TMPL_GEMMA, conv_a, n, 0,
        "<start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello there.<end_of_turn>\n"
        "<start_of_turn>user\nWho are you?<end_of_turn>\n", "conv A, no generation prompt");
    check_render(CHAT_TMPL_PHI3, conv_a, n, 1,
        "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHi<|end|>\n"
        "<|assistant|>\n Hello there. <|end|>\n<|user|>\nWho are you?<|end|>\n<|assistant|>\n",
        "conv A");
    check_render(CHAT_TMPL_PHI4, conv_a, n, 1,
        "<|im_start|>system<|im_sep|>You are helpful.<|im_end|>"
        "<|im_start|>user<|im_sep|>Hi<|im_end|>"
        "<|im_start|>assistant<|im_sep|> Hello there. <|im_end|>"
        "<|im_start|>user<|im_sep|>Who are you?<|im_end|>"
        "<|im_start|>assistant<|im_sep|>", "conv A");
    check_render(CHAT_TMPL_FALCON3, conv_a, n, 1,
        "<|system|>\nYou are helpful.\n<|user|>\nHi\n<|assistant|>\n Hello there. \n"
        "<|user|>\nWho are you?\n<|assistant|>\n", "conv A");
    check_render(CHAT_TMPL_GLMEDGE, conv_a, n, 1,
        "<|system|>\nYou are helpful.<|user|>\nHi<|assistant|>\n Hello there. "
        "<|user|>\nWho are you?<|assistant|>", "conv A");
    check_render(CHAT_TMPL_ZEPHYR, conv_a, n, 1,
        "<|system|>\nYou are helpful.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n"
        "<|assistant|>\n Hello there. <|endoftext|>\n<|user|>\nWho are you?<|endoftext|>\n"
        "<|assistant|>\n", "conv A");
    check_render(CHAT_TMPL_ZEPHYR_EOS, conv_a, n, 1,
        "<|system|>\nYou are helpful.</s>\n<|user|>\nHi</s>\n"
        "<|assistant|>\n Hello there. </s>\n<|user|>\nWho are you?</s>\n<|assistant|>\n",
        "conv A");
    check_render(CHAT_TMPL_ZEPHYR_EOS, conv_a, n, 0,
        "<|system|>\nYou are helpful.</s>\n<|user|>\nHi</s>\n"
        "<|assistant|>\n Hello there. </s>\n<|user|>\nWho are you?</s>\n",
        "conv A, no generation prompt");
}

/* ------------------------------------------- conversation B on llama.cpp's templates */

typedef struct tmpl_case {
    const char *name;
    const char *src;       /* template source (real, or an identifying excerpt) */
    chat_tmpl want;
    const char *expected;  /* conv_b with the generation prompt */
} tmpl_case;

static const tmpl_case cases_b[] = {
    { "teknium/OpenHermes-2.5-Mistral-7B",
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
      CHAT_TMPL_CHATML,
      "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n" },
    { "mistralai/Mistral-7B-Instruct-v0.2 (old, no system prompt)",
      "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
      CHAT_TMPL_LLAMA2,
      "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]" },
    { "TheBloke/FusionNet_34Bx2_MoE-AWQ",
      "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' -%}\n{%- if idx > 1 -%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n{%- else -%}\n{{- messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n{% elif messages[idx]['role'] == 'system' %}\n{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif messages[idx]['role'] == 'assistant' -%}\n{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}\n{% endif %}\n{% endfor %}",
      CHAT_TMPL_LLAMA2_SYS_BOS,
      "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] Who are you [/INST]   I am an assistant   </s><s>[INST] Another question [/INST]" },
    { "bofenghuang/vigogne-2-70b-chat (excerpt)",
      "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
      CHAT_TMPL_LLAMA2_SYS_STRIP,
      "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you [/INST]I am an assistant</s>[INST] Another question [/INST]" },
    { "google/gemma-7b-it",
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
      CHAT_TMPL_GEMMA,
      "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n" },
    { "Llama-3",
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
      CHAT_TMPL_LLAMA3,
      "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" },
    { "Phi-3-mini",
      "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
      CHAT_TMPL_PHI3,
      "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n" },
    { "phi-4",
      "{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}",
      CHAT_TMPL_PHI4,
      "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>   I am an assistant   <|im_end|><|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant<|im_sep|>" },
    { "GLMEdge",
      "{% for item in messages %}{% if item['role'] == 'system' %}<|system|>\n{{ item['content'] }}{% elif item['role'] == 'user' %}<|user|>\n{{ item['content'] }}{% elif item['role'] == 'assistant' %}<|assistant|>\n{{ item['content'] }}{% endif %}{% endfor %}<|assistant|>",
      CHAT_TMPL_GLMEDGE,
      "<|system|>\nYou are a helpful assistant<|user|>\nHello<|assistant|>\nHi there<|user|>\nWho are you<|assistant|>\n   I am an assistant   <|user|>\nAnother question<|assistant|>" },
    { "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template, excerpt)",
      "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- endif %}\n{%- endfor %}\n",
      CHAT_TMPL_MISTRAL_V1,
      " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an assistant   </s> [INST] Another question [/INST]" },
    { "Mistral-Large-Instruct-2407 (mistralai 'v3' template, excerpt)",
      "{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {%- if tools is not none and (message == user_messages[-1]) %}\n            {{- \"[AVAILABLE_TOOLS] [\" }}\n        {%- endif %}\n        {%- if loop.last and system_message is defined %}\n            {{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n            {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n",
      CHAT_TMPL_MISTRAL_V3,
      "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>[INST] Another question[/INST]" },
    { "Mistral-Nemo-Instruct-2407 (mistralai 'v3-tekken' template, excerpt)",
      "{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {%- if tools is not none and (message == user_messages[-1]) %}\n            {{- \"[AVAILABLE_TOOLS][\" }}\n        {%- endif %}\n        {%- if loop.last and system_message is defined %}\n            {{- \"[INST]\" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n            {{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n",
      CHAT_TMPL_MISTRAL_V3_TEKKEN,
      "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   </s>[INST]Another question[/INST]" },
    { "mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)",
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant roles are supported!') }}{% endif %}{% endfor %}",
      CHAT_TMPL_MISTRAL_V7,
      "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]" },
};

static void test_llamacpp_cases(void) {
    for (size_t i = 0; i < ARRAY_LEN(cases_b); i++) {
        const tmpl_case *c = &cases_b[i];
        check_detect(c->src, 0, c->want, c->name);
        check_render(c->want, conv_b, (int)ARRAY_LEN(conv_b), 1, c->expected, c->name);
    }
}

/* ---------------------------------------------------------------- detection */

static void test_detect_real(void) {
    /* SmolLM2-135M-Instruct (tokenizer.chat_template as stored in its GGUF). */
    check_detect("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
                 "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
                 0, CHAT_TMPL_CHATML, "SmolLM2");
    /* Qwen2.5-Instruct (excerpt). */
    check_detect("{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n{%- else %}\n"
                 "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
                 "{%- endif %}{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n",
                 0, CHAT_TMPL_CHATML, "Qwen2.5");
    /* Llama-2-chat (official): content.strip() makes it the -strip variant. */
    check_detect("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
                 "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
                 "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
                 "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
                 "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
                 "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
                 "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
                 0, CHAT_TMPL_LLAMA2_SYS_STRIP, "Llama-2-chat");
    /* A llama-2 template with <<SYS>> and none of the variant markers. */
    check_detect("{% for message in messages %}{% if message['role'] == 'system' %}"
                 "{{ '[INST] <<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}"
                 "{% elif message['role'] == 'user' %}{{ message['content'] + ' [/INST]' }}"
                 "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
                 0, CHAT_TMPL_LLAMA2_SYS, "llama-2 <<SYS>>");
    /* Meta-Llama-3.1-8B-Instruct (excerpt). */
    check_detect("{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n"
                 "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
                 "{%- for message in messages %}\n        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
                 "{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n",
                 0, CHAT_TMPL_LLAMA3, "Llama-3.1");
    /* gemma-2-2b-it. */
    check_detect("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
                 "{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
                 "{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
                 0, CHAT_TMPL_GEMMA, "gemma-2");
    /* Phi-3.5-mini-instruct. */
    check_detect("{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
                 "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
                 "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
                 "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
                 0, CHAT_TMPL_PHI3, "Phi-3.5");
    /* Mistral-Small-3.1 style v7-tekken is told from v7 only by name; the source says v7. */
    check_detect("{%- if messages[0]['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + messages[0]['content'] + '[/SYSTEM_PROMPT]' }}"
                 "{%- endif %}{%- for message in loop_messages %}{%- if message['role'] == 'user' %}"
                 "{{- '[INST]' + message['content'] + '[/INST]' }}{%- endif %}{%- endfor %}",
                 0, CHAT_TMPL_MISTRAL_V7, "Mistral-Small v7");
    /* zephyr-7b-beta / TinyLlama-1.1B-Chat-v1.0 / stablelm-2-zephyr: eos_token terminated. */
    const char *zephyr =
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
        "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
        "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
    check_detect(zephyr, 0, CHAT_TMPL_ZEPHYR_EOS, "zephyr-7b-beta");
    chat_tmpl t = CHAT_TMPL_COUNT;
    int rc = chat_detect_len(zephyr, strlen(zephyr), "</s>", &t);
    CHECK(rc == 0 && t == CHAT_TMPL_ZEPHYR_EOS, "zephyr, eos </s>: rc %d %s", rc, chat_name(t));
    rc = chat_detect_len(zephyr, strlen(zephyr), "<|endoftext|>", &t);
    CHECK(rc == 0 && t == CHAT_TMPL_ZEPHYR, "zephyr, eos <|endoftext|>: rc %d %s", rc, chat_name(t));
    rc = chat_detect_len(zephyr, strlen(zephyr), "<eos>", &t);
    CHECK(rc == 1 && t == CHAT_TMPL_CHATML, "zephyr, eos <eos>: rc %d %s", rc, chat_name(t));
    /* A zephyr-style template without literal <|assistant|> (llama.cpp's zephyr rule). */
    check_detect("{% for message in messages %}{{'<|' + message['role'] + '|>\n' + message['content'] + '<|endoftext|>\n'}}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|' + 'assistant|>\n' }}{% endif %}"
                 "{# <|user|> #}", 0, CHAT_TMPL_ZEPHYR, "zephyr <|endoftext|>");
    /* Falcon3: <|user|>, <|assistant|> and a literal </s>. */
    check_detect("{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + '\n' }}"
                 "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\n' + message['content'] + '</s>\n' }}"
                 "{% endif %}{% endfor %}", 0, CHAT_TMPL_FALCON3, "falcon3");
}

static void test_detect_fallback(void) {
    check_detect(NULL, 1, CHAT_TMPL_CHATML, "NULL");
    check_detect("", 1, CHAT_TMPL_CHATML, "empty");
    check_detect("{% for m in messages %}{{ m['content'] }}{% endfor %}", 1, CHAT_TMPL_CHATML,
                 "plain template");
    /* Families llama.cpp knows but minfer does not render stop the chain: vicuna must
     * not fall through to anything, SmolVLM is not chatml despite <|im_start|>. */
    check_detect("{%- for message in messages %}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '\n'-}}"
                 "{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' -}}{%- endif -%}{%- endfor -%}",
                 1, CHAT_TMPL_CHATML, "vicuna (unsupported)");
    check_detect("<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}: {{ message['content'] }}<end_of_utterance>\n{% endfor %}",
                 1, CHAT_TMPL_CHATML, "SmolVLM (unsupported)");
    /* Command-R contains neither llama-3 marker but stops the chain anyway. */
    check_detect("{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}",
                 1, CHAT_TMPL_CHATML, "command-r (unsupported)");
    /* Names are accepted as sources, like llama.cpp's --chat-template NAME. */
    for (int i = 0; i < CHAT_TMPL_COUNT; i++) {
        chat_tmpl t = CHAT_TMPL_COUNT;
        const char *name = chat_name((chat_tmpl)i);
        CHECK(chat_detect(name, &t) == 0 && t == (chat_tmpl)i, "detect name %s", name);
        t = CHAT_TMPL_COUNT;
        CHECK(chat_from_name(name, &t) == 0 && t == (chat_tmpl)i, "from_name %s", name);
    }
    chat_tmpl t = CHAT_TMPL_GEMMA;
    CHECK(chat_from_name("vicuna", &t) == -1 && t == CHAT_TMPL_GEMMA, "unknown name");
    CHECK(chat_from_name(NULL, &t) == -1, "NULL name");
    CHECK(strcmp(chat_name(CHAT_TMPL_COUNT), "unknown") == 0, "chat_name out of range");
    /* A source that starts with "mistral" enters llama.cpp's [INST] branch. */
    check_detect("mistral-ish", 0, CHAT_TMPL_LLAMA2, "starts with mistral");
    /* chat_detect_len must not look past len: the marker lies beyond it. */
    const char buf[] = "{{ messages }}<|im_start|>";
    t = CHAT_TMPL_GEMMA;
    CHECK(chat_detect_len(buf, 14, NULL, &t) == 1 && t == CHAT_TMPL_CHATML, "len respected");
    CHECK(chat_detect_len(buf, sizeof buf - 1, NULL, &t) == 0 && t == CHAT_TMPL_CHATML, "len full");
}

/* ---------------------------------------------------------------- edge cases */

static void test_render_edges(void) {
    /* Empty conversation: just the generation prompt (llama-2 always opens [INST]). */
    check_render(CHAT_TMPL_CHATML, NULL, 0, 1, "<|im_start|>assistant\n", "empty chatml");
    check_render(CHAT_TMPL_CHATML, NULL, 0, 0, "", "empty chatml, no prompt");
    check_render(CHAT_TMPL_LLAMA2, NULL, 0, 1, "[INST] ", "empty llama2");
    check_render(CHAT_TMPL_MISTRAL_V7, NULL, 0, 1, "", "empty mistral-v7");
    /* Gemma: two system messages are joined as they are; a system message with no
     * user turn after it is dropped; a custom role passes through. */
    const chat_msg g[] = {
        { "system", " A. " }, { "system", "B" }, { "user", "u" }, { "assistant", "a" },
        { "tool", " t " }, { "system", "late" },
    };
    check_render(CHAT_TMPL_GEMMA, g, 6, 0,
        "<start_of_turn>user\nA.B\n\nu<end_of_turn>\n<start_of_turn>model\na<end_of_turn>\n"
        "<start_of_turn>tool\nt<end_of_turn>\n", "gemma edges");
    /* Bad arguments. */
    const chat_msg bad[] = { { "user", NULL } };
    CHECK(chat_render(CHAT_TMPL_CHATML, bad, 1, 1) == NULL, "NULL content");
    const chat_msg bad2[] = { { NULL, "x" } };
    CHECK(chat_render(CHAT_TMPL_CHATML, bad2, 1, 1) == NULL, "NULL role");
    CHECK(chat_render(CHAT_TMPL_CHATML, NULL, 2, 1) == NULL, "NULL msgs");
    CHECK(chat_render(CHAT_TMPL_CHATML, conv_a, -1, 1) == NULL, "n < 0");
    CHECK(chat_render(CHAT_TMPL_COUNT, conv_a, 1, 1) == NULL, "bad template");
    CHECK(chat_render((chat_tmpl)-1, conv_a, 1, 1) == NULL, "negative template");
    /* A long message grows the buffer many times. */
    size_t big = 1 << 20;
    char *s = malloc(big + 1);
    CHECK(s != NULL, "malloc");
    if (!s) return;
    memset(s, 'x', big);
    s[big] = '\0';
    const chat_msg m[] = { { "user", s } };
    char *out = chat_render(CHAT_TMPL_LLAMA3, m, 1, 1);
    CHECK(out && strlen(out) == big + strlen("<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>"
                                               "<|start_header_id|>assistant<|end_header_id|>\n\n"),
          "long message length");
    free(out);
    free(s);
}

/* The default system message of a chatml template (the texts as the SmolLM2 and
 * Qwen2.5 GGUFs carry them: a real newline in one, the two characters \n in the other). */
static void test_default_system(void) {
    char out[256];
    const char *smol = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                       "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                       "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
                       "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
    size_t n = chat_default_system(smol, strlen(smol), out, sizeof out);
    CHECK(n > 0 && !strcmp(out, "You are a helpful AI assistant named SmolLM, trained by Hugging Face"), "smollm2: '%s'",
          out);
    const char *qwen = "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
                       "{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are "
                       "a helpful assistant.' }}{%- endif %}{{- \"\\n\\n# Tools\" }}{%- else %}"
                       "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
                       "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are "
                       "Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
                       "{%- endif %}";
    n = chat_default_system(qwen, strlen(qwen), out, sizeof out);
    CHECK(n > 0 && !strcmp(out, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."), "qwen2.5: '%s'",
          out);
    /* a template without a default (the system text only from the conversation) */
    const char *plain = "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + "
                        "'<|im_end|>\n'}}{% endfor %}";
    CHECK(chat_default_system(plain, strlen(plain), out, sizeof out) == 0 && out[0] == 0, "no default: '%s'", out);
    /* too small a buffer: none, not a cut text */
    CHECK(chat_default_system(smol, strlen(smol), out, 10) == 0 && out[0] == 0, "cap 10: '%s'", out);
    CHECK(chat_default_system(NULL, 0, out, sizeof out) == 0, "NULL source");
    /* a NUL inside the text (GGUF strings may hold one; found by fuzz/fuzz_gguf.c):
     * none, rather than a C string shorter than the length returned */
    static const char nul[] = "== 'system'<|im_start|>system\nYou are\0 cut<|im_end|>";
    n = chat_default_system(nul, sizeof nul - 1, out, sizeof out);
    CHECK(n == 0 && out[0] == 0, "NUL in the default: %zu '%s'", n, out);
}

int main(void) {
    test_render_conv_a();
    test_llamacpp_cases();
    test_detect_real();
    test_detect_fallback();
    test_render_edges();
    test_default_system();
    return test_summary("test_chat");
}

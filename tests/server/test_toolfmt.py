"""test_toolfmt.py - every tool-call format through the server (issue 53): stories260K
cannot write a real call, so each format's call is forced by tool_choice "required" (the
grammar writes the format's own syntax, src/toolcall.c's tc_format_shape) and read back
by that format's parser. A small chat template per format carries the format's markers
(tc_detect reads them off the template's text, as it does a model's own template).
Checked: the call names the tool and its arguments validate against the schema; the
streamed deltas, assembled as the openai client does, equal the whole answer."""
import json
import os

import pytest
import requests

from conftest import STORIES, Server, need_model

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"], "additionalProperties": False}}}

DS_BAR, DS_SP = "\uff5c", "\u2581"
DS_CALL_BEGIN = f"<{DS_BAR}tool{DS_SP}call{DS_SP}begin{DS_BAR}>"

# format -> the markers its template shows (in a comment: detection reads the source)
FORMATS = {
    "hermes": "<tool_call>",
    "llama3": "<|start_header_id|> ipython",
    "mistral": "[TOOL_CALLS]",
    "mistral-args": "[TOOL_CALLS] [ARGS]",
    "deepseek": DS_CALL_BEGIN + " ```json",
    "deepseek-v3.1": DS_CALL_BEGIN,
    "functionary-v3.1": "<|start_header_id|> <function=",
    "functionary-v3.2": "<|start_header_id|> >>>all",
    "command-r": "Action: \"tool_name\"",
    "command-r7b": "<|START_ACTION|> <|START_THINKING|>",
    "granite": "<|tool_call|>",
    "gpt-oss": "<|channel|>analysis to=",
    "kimi-k2": "<|tool_calls_section_begin|>",
    "seed-oss": "<seed:tool_call>",
    "nemotron-v2": "<TOOLCALL>",
    "apriel": "<tool_calls>",
    "minimax-m2": "<minimax:tool_call>",
    "deepseek-dsml": f"<{DS_BAR}DSML{DS_BAR}function_calls>",
}

BODY = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if tools %}{{ tools | length }} tools{% endif %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def servers(binary, tmp_path_factory):
    need_model(STORIES)
    d = tmp_path_factory.mktemp("fmt")
    made = {}
    yield lambda f: made.get(f) or made.setdefault(f, start(d, f))
    for s in made.values():
        s.stop()


def start(d, fmt):
    path = d / (fmt + ".jinja")
    path.write_text("{# " + FORMATS[fmt] + " #}" + BODY, encoding="utf-8")
    s = Server(STORIES, "--parallel", "1", "--ctx", "1024", "--chat-template-file", str(path))
    assert any(f"tool calls: {fmt};" in line for line in s.log), "".join(s.log)
    return s


def request(**kw):
    body = {"messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER], "tool_choice": "required",
            "max_tokens": 400, "temperature": 0, "parallel_tool_calls": False}
    body.update(kw)
    return body


def ask(srv, **kw):
    return requests.post(srv.url + "/v1/chat/completions", json=request(**kw), timeout=300)


def check_calls(calls):
    for c in calls:
        assert c["function"]["name"] == "get_weather" and c["id"], c
        args = json.loads(c["function"]["arguments"])
        assert isinstance(args, dict) and set(args) == {"city"} and isinstance(args["city"], str), args
        assert len(args["city"]) <= 12


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_forced_call_parses(servers, fmt):
    """one call (parallel_tool_calls false): the grammar ends with it, the answer is the call"""
    srv = servers(fmt)
    r = ask(srv)
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    calls = ch["message"].get("tool_calls")
    assert calls and len(calls) == 1 and ch["finish_reason"] == "tool_calls", (fmt, ch)
    assert ch["message"]["content"] is None, ch
    check_calls(calls)
    # streamed: deltas assembled by index equal the whole answer's calls
    got, content = {}, ""
    with requests.post(srv.url + "/v1/chat/completions", stream=True, timeout=300, json=request(stream=True)) as s:
        finish = None
        for line in s.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            c = ev["choices"][0]
            d = c.get("delta", {})
            content += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                e = got.setdefault(tc["index"], {"name": "", "arguments": ""})
                e["name"] += tc["function"].get("name") or ""
                e["arguments"] += tc["function"].get("arguments") or ""
            finish = c.get("finish_reason") or finish
    assert [(got[i]["name"], got[i]["arguments"]) for i in sorted(got)] == \
        [(c["function"]["name"], c["function"]["arguments"]) for c in calls], fmt
    assert finish == "tool_calls" and content == (ch["message"]["content"] or "")


def test_forced_call_after_an_opened_think(binary, tmp_path):
    """a template that opens <think> for the answer (QwQ, DeepSeek-R1): a forced call is
    the answer, not reasoning (the grammar writes no reasoning)"""
    need_model(STORIES)
    path = tmp_path / "t.jinja"
    path.write_text("{# <tool_call> #}" + BODY.replace("assistant\n{% endif %}", "assistant\n<think>\n{% endif %}"),
                    encoding="utf-8")
    s = Server(STORIES, "--parallel", "1", "--ctx", "1024", "--chat-template-file", str(path))
    try:
        r = ask(s)
        assert r.status_code == 200, r.text
        m = r.json()["choices"][0]["message"]
        assert m.get("tool_calls") and not m.get("reasoning_content"), m
        check_calls(m["tool_calls"])
    finally:
        s.stop()


@pytest.mark.parametrize("fmt", ["deepseek", "kimi-k2", "functionary-v3.2", "command-r"])
def test_parallel_calls_parse(servers, fmt):
    """calls in a row, as many as 400 tokens hold: each one read, none cut short"""
    r = ask(servers(fmt), parallel_tool_calls=True)
    assert r.status_code == 200, r.text
    calls = r.json()["choices"][0]["message"]["tool_calls"]
    assert calls, r.json()
    check_calls(calls)


@pytest.mark.parametrize("fmt", ["gpt-oss", "kimi-k2", "functionary-v3.2", "command-r7b"])
def test_named_function_one_call(servers, fmt):
    r = ask(servers(fmt), tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False)
    assert r.status_code == 200, r.text
    calls = r.json()["choices"][0]["message"]["tool_calls"]
    assert calls and len(calls) == 1 and calls[0]["function"]["name"] == "get_weather"


# reasoning markup -> (the markers its template shows, an answer in it, reasoning, content)
THINKING = {
    "think": ("<think>", "<think>Two and two.</think>Four.", "Two and two.", "Four."),
    "seed": ("<seed:think>", "<seed:think>Two and two.</seed:think>Four.", "Two and two.", "Four."),
    "cohere": ("<|START_THINKING|>", "<|START_THINKING|>Two and two.<|END_THINKING|><|START_RESPONSE|>Four.<|END_RESPONSE|>",
               "Two and two.", "Four."),
    "granite": ("<|start_of_role|> <think> <response>", "<think>Two and two.</think><response>Four.</response>",
                "Two and two.", "Four."),
    "harmony": ("<|channel|>analysis", "<|channel|>analysis<|message|>Two and two.<|end|><|start|>assistant"
                "<|channel|>final<|message|>Four.", "Two and two.", "Four."),
    "mistral": ("[THINK]", "[THINK]Two and two.[/THINK]Four.", "Two and two.", "Four."),
    "apriel": ("[BEGIN FINAL RESPONSE]", "Here are my reasoning steps:\nTwo and two.\n[BEGIN FINAL RESPONSE]\nFour.\n"
               "[END FINAL RESPONSE]", "Two and two.", "Four."),
}


@pytest.mark.parametrize("name", sorted(THINKING))
def test_reasoning_markups(binary, tmp_path, name):
    """each reasoning markup through the server: the answer forced by a grammar of that
    exact text (stories260K writes no reasoning of its own), read back as reasoning_content
    and content, whole and streamed"""
    need_model(STORIES)
    marks, text, reasoning, content = THINKING[name]
    path = tmp_path / "t.jinja"
    path.write_text("{# " + marks + " #}" + BODY, encoding="utf-8")
    s = Server(STORIES, "--parallel", "1", "--ctx", "1024", "--chat-template-file", str(path))
    try:
        assert any(f"reasoning: {name}" in line for line in s.log), "".join(s.log)
        body = {"messages": [{"role": "user", "content": "2 + 2?"}], "max_tokens": 300, "temperature": 0,
                "grammar": "root ::= " + json.dumps(text)}
        r = requests.post(s.url + "/v1/chat/completions", json=body, timeout=300)
        assert r.status_code == 200, r.text
        m = r.json()["choices"][0]["message"]
        assert m.get("reasoning_content") == reasoning and m["content"] == content, m
        got_r, got_c = "", ""
        with requests.post(s.url + "/v1/chat/completions", json=dict(body, stream=True), stream=True, timeout=300) as st:
            for line in st.iter_lines():
                if line.startswith(b"data: {"):
                    d = json.loads(line[6:])["choices"][0].get("delta", {})
                    got_r += d.get("reasoning_content") or ""
                    got_c += d.get("content") or ""
        assert (got_r, got_c) == (reasoning, content)
    finally:
        s.stop()

"""test_structured.py - structured outputs through the server (issue 54):
response_format json_object and json_schema, llama.cpp's grammar and json_schema
fields, in chat and completions, streamed and not; requests the server must refuse
with a 400 that names the problem; unconstrained requests unchanged."""
import json

import openai
import pytest
import requests

try:
    import jsonschema
except ImportError:  # tools/deps.sh --test installs it
    jsonschema = None

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3},
        "born": {"type": "string", "format": "date"},
    },
    "required": ["name", "age", "born"],
    "additionalProperties": False,
}


def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)


def validate(text, schema):
    value = json.loads(text)
    if jsonschema is not None:
        jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(value)
    return value


def test_chat_json_schema(stories):
    c = client(stories)
    for seed in range(1, 5):
        r = c.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Tell me about a person."}], temperature=1, seed=seed,
            max_tokens=400, response_format={"type": "json_schema",
                                             "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
        ch = r.choices[0]
        assert ch.finish_reason == "stop", ch.message.content
        validate(ch.message.content, PERSON)


def test_completion_json_object_streamed(stories):
    c = client(stories)
    for seed in (1, 2):
        parts, finish = [], None
        for ev in c.completions.create(model="x", prompt="Once upon a time", temperature=1, seed=seed, max_tokens=400,
                                       stream=True, extra_body={"response_format": {"type": "json_object"}}):
            parts.append(ev.choices[0].text)
            finish = ev.choices[0].finish_reason or finish
        text = "".join(parts)
        if finish == "stop":
            assert isinstance(json.loads(text), dict)
        else:  # an open-ended object may run to max_tokens; what there is follows the grammar
            assert finish == "length" and text.startswith("{")


def test_streamed_equals_whole(stories):
    c = client(stories)
    args = dict(model="x", prompt="Once", temperature=1, seed=7, max_tokens=300,
                extra_body={"json_schema": PERSON})
    whole = c.completions.create(**args).choices[0].text
    streamed = "".join(ev.choices[0].text for ev in c.completions.create(stream=True, **args))
    assert whole == streamed
    validate(whole, PERSON)


def test_grammar_field(stories):
    g = 'root ::= "Answer: " ("yes" | "no") "."'
    for path, body in (("/v1/completions", {"prompt": "Is it?"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Is it?"}]})):
        r = requests.post(stories.url + path, json={**body, "grammar": g, "temperature": 1, "seed": 3, "max_tokens": 50},
                          timeout=60)
        assert r.status_code == 200, r.text
        ch = r.json()["choices"][0]
        text = ch["text"] if "text" in ch else ch["message"]["content"]
        assert text in ("Answer: yes.", "Answer: no.") and ch["finish_reason"] == "stop"


def test_logprobs_follow_the_mask(stories):
    r = requests.post(stories.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "pick"}], "grammar": 'root ::= [ab]{3}', "temperature": 1,
        "seed": 1, "logprobs": True, "top_logprobs": 5, "max_tokens": 10})
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["logprobs"]["content"]
    for tok in content:
        for alt in tok["top_logprobs"]:  # tokens outside the grammar have probability 0
            assert alt["logprob"] == float("-inf") or alt["logprob"] is None or set(alt["token"]) <= set("ab"), alt


@pytest.mark.parametrize("body,word", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "multipleOf": 2}}}},
     "multipleOf"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "schema"),
    ({"response_format": {"type": "xml"}}, "not supported"),
    ({"response_format": {"type": "json_object", "extra": 1}}, "extra"),
    ({"grammar": "root ::= foo"}, "never defined"),
    ({"grammar": 5}, "'grammar' must be a string"),
    ({"grammar": 'root ::= "a"', "json_schema": {}}, "one of"),
    ({"json_schema": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}}, "cycle"),
])
def test_refused(stories, body, word):
    for path, base in (("/v1/completions", {"prompt": "x"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        r = requests.post(stories.url + path, json={**base, **body, "max_tokens": 5}, timeout=30)
        assert r.status_code == 400, r.text
        assert word in r.json()["error"]["message"], r.text


def test_text_format_and_no_constraint(stories):
    """response_format text is no constraint: the same text as without it (greedy)."""
    c = client(stories)
    base = dict(model="x", prompt="Once upon a time", temperature=0, max_tokens=30)
    plain = c.completions.create(**base).choices[0].text
    text = c.completions.create(extra_body={"response_format": {"type": "text"}}, **base).choices[0].text
    assert plain == text


def test_parallel_constrained(stories):
    """Four slots decode together, each under its own schema or none."""
    import concurrent.futures as cf
    c = client(stories)
    schemas = [PERSON, {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9}, "maxItems": 4}, None,
               {"enum": ["red", "green", "blue"]}]

    def one(i):
        extra = {"json_schema": schemas[i]} if schemas[i] is not None else {}
        return c.completions.create(model="x", prompt="Once upon a time", temperature=1, seed=i, max_tokens=300,
                                    extra_body=extra).choices[0]
    with cf.ThreadPoolExecutor(4) as ex:
        res = list(ex.map(one, range(4)))
    for s, ch in zip(schemas, res):
        if s is not None:
            assert ch.finish_reason == "stop", ch.text
            validate(ch.text, s)


def test_greedy_shortcut_exact(stories):
    """Greedy decoding skips the mask where the model's best token is allowed; with
    logprobs the mask is always made. Both must give the same text."""
    for path, base in (("/v1/completions", {"prompt": "Once upon a time"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Describe a person."}]})):
        out = []
        for lp in (False, True):
            body = {**base, "json_schema": PERSON, "temperature": 0, "max_tokens": 300}
            if lp:
                body["logprobs"] = True if "messages" in base else 1
            r = requests.post(stories.url + path, json=body, timeout=60)
            assert r.status_code == 200, r.text
            ch = r.json()["choices"][0]
            out.append(ch["text"] if "text" in ch else ch["message"]["content"])
        assert out[0] == out[1]
        validate(out[0], PERSON)

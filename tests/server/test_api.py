"""test_api.py - the OpenAI API as the official `openai` client sees it: chat,
completions, streaming, usage, finish reasons, stop strings, logprobs, penalties,
and the side endpoints (/v1/models, /health, /tokenize, /detokenize, /metrics)."""
import math
import subprocess

import openai
import pytest
import requests


def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)


def test_models_and_health(stories):
    c = client(stories)
    models = c.models.list()
    assert [m.id for m in models.data] == ["stories260K.gguf"]
    r = requests.get(stories.url + "/health", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_completion(stories):
    c = client(stories)
    r = c.completions.create(model="x", prompt="Once upon a time", max_tokens=24, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "length"
    assert len(ch.text) > 20
    assert r.usage.completion_tokens == 24
    assert r.usage.prompt_tokens >= 4 and r.usage.total_tokens == r.usage.prompt_tokens + 24
    assert r.object == "text_completion" and r.id.startswith("cmpl-")


def test_completion_greedy_matches_cli(stories, binary):
    """The server's greedy text is `minfer run`'s greedy text for the same prompt."""
    import subprocess
    from conftest import STORIES
    cli = subprocess.run([binary, "run", "-m", STORIES, "-p", "Once upon a time", "-n", "40", "--temp", "0", "-q"],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    r = client(stories).completions.create(model="x", prompt="Once upon a time", max_tokens=40, temperature=0)
    assert r.choices[0].text == cli.stdout.rstrip("\n")


def test_chat(smollm, binary):
    """The server renders the conversation as `minfer chat` does (the model's chatml
    template with its default system message): the same greedy answer."""
    import subprocess
    from conftest import SMOLLM
    q = "What is the capital of France?"
    cli = subprocess.run([binary, "chat", "-m", SMOLLM, "--temp", "0", "-n", "40", "-q"], input=q + "\n",
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    c = client(smollm)
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": q}], max_tokens=40, temperature=0)
    m = r.choices[0].message
    assert m.role == "assistant"
    assert m.content and m.content == cli.stdout.rstrip("\n")
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 10
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")


def test_chat_stops_at_end_of_turn(smollm):
    """A short answer ends with finish_reason stop (the <|im_end|> token), which is not in the text."""
    r = client(smollm).chat.completions.create(
        model="x", messages=[{"role": "user", "content": "Say just the word yes."}], max_tokens=60, temperature=0)
    ch = r.choices[0]
    assert ch.finish_reason == "stop", ch
    assert "<|im_end|>" not in ch.message.content
    assert r.usage.completion_tokens < 60


def test_chat_stream_equals_nonstream(smollm):
    c = client(smollm)
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}]
    full = c.chat.completions.create(model="x", messages=msgs, max_tokens=48, temperature=0.7, seed=11)
    parts, finish, usage, roles = [], None, None, []
    for ev in c.chat.completions.create(model="x", messages=msgs, max_tokens=48, temperature=0.7, seed=11, stream=True,
                                        stream_options={"include_usage": True}):
        if ev.usage:
            usage = ev.usage
        for ch in ev.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    assert roles == ["assistant"]
    assert "".join(parts) == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens


def test_completion_stream_equals_nonstream(stories):
    c = client(stories)
    for seed in (1, 2, 3):
        kw = dict(model="x", prompt="The dog", max_tokens=50, temperature=1.0, seed=seed)
        full = c.completions.create(**kw).choices[0]
        evs = list(c.completions.create(stream=True, **kw))
        assert "".join(e.choices[0].text for e in evs if e.choices) == full.text
        assert [e.choices[0].finish_reason for e in evs if e.choices][-1] == full.finish_reason


def test_stream_without_usage_has_no_usage_chunk(stories):
    evs = list(client(stories).completions.create(model="x", prompt="A", max_tokens=5, stream=True))
    assert all(e.usage is None for e in evs)
    assert all(len(e.choices) == 1 for e in evs)


def test_raw_sse_format(stories):
    """The wire format: data: lines, each a JSON object, ending with data: [DONE]."""
    import json
    r = requests.post(stories.url + "/v1/completions", json={"prompt": "A cat", "max_tokens": 6, "stream": True},
                      stream=True, timeout=60)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    lines = [l for l in r.iter_lines(decode_unicode=True) if l]
    assert lines[-1] == "data: [DONE]"
    for l in lines[:-1]:
        assert l.startswith("data: ")
        json.loads(l[6:])


def test_same_seed_same_output(stories):
    c = client(stories)
    a = c.completions.create(model="x", prompt="Lily", max_tokens=40, temperature=1.0, seed=42).choices[0].text
    b = c.completions.create(model="x", prompt="Lily", max_tokens=40, temperature=1.0, seed=42).choices[0].text
    d = c.completions.create(model="x", prompt="Lily", max_tokens=40, temperature=1.0, seed=43).choices[0].text
    assert a == b
    assert a != d  # 40 tokens at temperature 1: two seeds agreeing throughout is (almost) impossible


def test_stop_strings(stories):
    c = client(stories)
    base = c.completions.create(model="x", prompt="Once upon a time", max_tokens=40, temperature=0).choices[0].text
    word = " little"
    assert word in base
    r = c.completions.create(model="x", prompt="Once upon a time", max_tokens=40, temperature=0, stop=[word, "zzz"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == base[:base.index(word)]
    # streamed, the stop string never shows, not even its first bytes
    evs = list(c.completions.create(model="x", prompt="Once upon a time", max_tokens=40, temperature=0, stop=word,
                                    stream=True))
    assert "".join(e.choices[0].text for e in evs) == base[:base.index(word)]
    # a stop string that never occurs changes nothing
    r = c.completions.create(model="x", prompt="Once upon a time", max_tokens=40, temperature=0, stop="qqqq")
    assert r.choices[0].text == base and r.choices[0].finish_reason == "length"


def test_stop_string_unicode_never_split(smollm):
    """A stop string of multi-byte characters: the text before it arrives whole, and
    no chunk ever carries a broken UTF-8 sequence (the client would fail to decode)."""
    c = client(smollm)
    msgs = [{"role": "user", "content": "Write the word café five times, separated by spaces."}]
    base = c.chat.completions.create(model="x", messages=msgs, max_tokens=40, temperature=0).choices[0].message.content
    if "é" not in base:
        pytest.skip(f"the model wrote no é: {base!r}")
    cut = base[:base.index("é")]
    r = c.chat.completions.create(model="x", messages=msgs, max_tokens=40, temperature=0, stop=["é"])
    assert r.choices[0].message.content == cut and r.choices[0].finish_reason == "stop"
    s = "".join(e.choices[0].delta.content or "" for e in c.chat.completions.create(
        model="x", messages=msgs, max_tokens=40, temperature=0, stop=["é"], stream=True) if e.choices)
    assert s == cut


def test_logprobs_chat(smollm):
    c = client(smollm)
    r = c.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                  temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0.0
        assert len(t.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob, abs=1e-6)
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
        assert sum(math.exp(a.logprob) for a in t.top_logprobs) <= 1.0 + 1e-4
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token or "\ufffd" in t.token


def test_logprobs_completion_stream_equals_nonstream(stories):
    c = client(stories)
    kw = dict(model="x", prompt="The sun", max_tokens=12, temperature=0.9, seed=5, logprobs=2)
    full = c.completions.create(**kw).choices[0]
    assert len(full.logprobs.tokens) == 12 and len(full.logprobs.top_logprobs) == 12
    assert full.logprobs.text_offset[0] == 0
    toks, lps = [], []
    for e in c.completions.create(stream=True, **kw):
        if e.choices and e.choices[0].logprobs:
            toks += e.choices[0].logprobs.tokens
            lps += e.choices[0].logprobs.token_logprobs
    assert toks == full.logprobs.tokens
    assert lps == full.logprobs.token_logprobs


def test_penalties_change_output(stories):
    c = client(stories)
    kw = dict(model="x", prompt="Once upon a time", max_tokens=60, temperature=0)
    plain = c.completions.create(**kw).choices[0].text
    pen = c.completions.create(frequency_penalty=2.0, presence_penalty=2.0, **kw).choices[0].text
    assert pen != plain
    # a repeated word is rarer with the penalties (greedy tiny-story text repeats a lot)
    count = lambda s: max(s.split().count(w) for w in set(s.split()))
    assert count(pen) <= count(plain)


def test_max_tokens_one(stories):
    r = client(stories).completions.create(model="x", prompt="Hello", max_tokens=1, temperature=0)
    assert r.usage.completion_tokens == 1 and r.choices[0].finish_reason == "length"


def test_prompt_as_token_ids(stories):
    ids = requests.post(stories.url + "/tokenize", json={"content": "Once upon a time"}, timeout=10).json()["tokens"]
    c = client(stories)
    a = c.completions.create(model="x", prompt=ids, max_tokens=16, temperature=0).choices[0].text
    b = c.completions.create(model="x", prompt="Once upon a time", max_tokens=16, temperature=0).choices[0].text
    assert a == b


def test_tokenize_more_tokens_than_bytes(binary, tmp_path):
    """A SentencePiece vocabulary without U+2581 spells each (escaped) space as its 3
    UTF-8 bytes: more tokens than bytes (the synthetic vocabulary of `minfer synth`).
    /tokenize and a prompt's count must not stop at a token per byte (they answered 400
    'could not be tokenized' before, and a prompt's ids were cut)."""
    from conftest import Server
    m = str(tmp_path / "m1.gguf")
    subprocess.run([binary, "synth", "--shape", "1b", "--layers", "1", "--quant", "q4_k_m", "--fast", "-o", m],
                   check=True, capture_output=True, timeout=120)
    text = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"
    want = subprocess.run([binary, "tokenize", "-m", m], input=text, capture_output=True, text=True,
                          check=True).stdout.split()
    assert len(want) > len(text.encode()) + 8  # the case: 3 byte tokens per space
    s = Server(m, "--parallel", "1", "--ctx", "256")
    try:
        r = requests.post(s.url + "/tokenize", json={"content": text}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == [int(t) for t in want]
        r = requests.post(s.url + "/v1/completions", json={"prompt": text, "max_tokens": 1, "temperature": 0},
                          timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == len(want)
    finally:
        s.stop()


def test_tokenize_detokenize(stories):
    t = requests.post(stories.url + "/tokenize", json={"content": "Once upon a time"}, timeout=10)
    assert t.status_code == 200
    ids = t.json()["tokens"]
    assert len(ids) >= 4
    t2 = requests.post(stories.url + "/tokenize", json={"content": "Once upon a time", "add_special": False},
                       timeout=10).json()["tokens"]
    assert len(t2) == len(ids) - 1  # without BOS
    d = requests.post(stories.url + "/detokenize", json={"tokens": t2}, timeout=10)
    assert d.status_code == 200 and d.json()["content"].strip() == "Once upon a time"


def test_metrics_format(stories):
    requests.post(stories.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=30)
    r = requests.get(stories.url + "/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    m = stories.metrics()
    for name in ["minfer_prompt_tokens_total", "minfer_generated_tokens_total", "minfer_queue_depth",
                 "minfer_slots_busy", "minfer_prefill_tokens_per_second", "minfer_decode_tokens_per_second",
                 "minfer_prompt_cache_hits_total", "minfer_prompt_cache_reused_tokens_total",
                 'minfer_requests_total{status="200"}', 'minfer_requests_total{status="400"}']:
        assert name in m, name
    assert m['minfer_requests_total{status="200"}'] >= 1
    assert m["minfer_generated_tokens_total"] >= 2
    assert m["minfer_slots"] == 4 and m["minfer_slots_busy"] == 0 and m["minfer_queue_depth"] == 0
    assert m["minfer_decode_tokens_per_second"] > 0

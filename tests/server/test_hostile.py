"""test_hostile.py - one test per item of the issue's hostile-input list (malformed
JSON, wrong types, unknown and missing fields, negative or huge max_tokens, prompts
longer than the context, bodies over the size limit, slow or stalled clients,
invalid UTF-8, a wrong or missing API key): each gets an HTTP 4xx with an
OpenAI-style error object, and after each the server still answers others."""
import json
import socket
import time

import openai
import pytest
import requests

from conftest import STORIES, Server, need_model


@pytest.fixture(scope="module")
def srv(binary):
    s = Server(need_model(STORIES), "--parallel", "2", "--ctx", "512", "--max-body", "64", "--timeout", "3")
    yield s
    assert s.stop() == 0


@pytest.fixture(autouse=True)
def still_serving(request):
    """After every test: the server answers a normal request."""
    yield
    s = request.getfixturevalue("srv") if "srv" in request.fixturenames else None
    if s is None:
        return
    r = requests.post(s.url + "/v1/completions", json={"prompt": "Once", "max_tokens": 3}, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


def post_raw(srv, path, data, headers=None):
    h = {"Content-Type": "application/json", **(headers or {})}
    return requests.post(srv.url + path, data=data, headers=h, timeout=30)


def assert_error(r, status, code=None, words=()):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert set(e) >= {"message", "type", "code"}
    assert isinstance(e["message"], str) and e["message"]
    assert e["type"] == ("authentication_error" if status == 401 else "invalid_request_error")
    if code:
        assert e["code"] == code
    for w in words:
        assert w in e["message"], (w, e["message"])
    return e


CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
MSGS = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("body", [
    b'{"prompt": "x",', b"{prompt: 1}", b"[1, 2", b"", b"   ", b'{"prompt": "x"} trailing', b"nul\x00l",
    b"[" * 60000, b'{"a":' * 5000 + b'1' + b'}' * 5000,
])
def test_malformed_json(srv, body):
    assert_error(post_raw(srv, CMPL, body), 400)


@pytest.mark.parametrize("path,body,field", [
    (CMPL, {"prompt": "x", "max_tokens": "ten"}, "max_tokens"),
    (CMPL, {"prompt": "x", "max_tokens": 2.5}, "max_tokens"),
    (CMPL, {"prompt": "x", "temperature": "hot"}, "temperature"),
    (CMPL, {"prompt": "x", "stream": "yes"}, "stream"),
    (CMPL, {"prompt": "x", "stop": 5}, "stop"),
    (CMPL, {"prompt": "x", "stop": ["a", 1]}, "stop"),
    (CMPL, {"prompt": "x", "seed": "s"}, "seed"),
    (CMPL, {"prompt": 12}, "prompt"),
    (CMPL, {"prompt": [1, "a"]}, "prompt"),
    (CMPL, {"prompt": "x", "stream_options": []}, "stream_options"),
    (CHAT, {"messages": "hi"}, "messages"),
    (CHAT, {"messages": ["hi"]}, "messages[0]"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, "content"),
    (CHAT, {"messages": [{"role": 1, "content": "x"}]}, "role"),
    (CHAT, {"messages": MSGS, "logprobs": 1}, "logprobs"),
    (CHAT, {"messages": MSGS, "top_p": [0.5]}, "top_p"),
    (CMPL, ["not", "an", "object"], "object"),
])
def test_wrong_types(srv, path, body, field):
    assert_error(requests.post(srv.url + path, json=body, timeout=30), 400, words=[field])


@pytest.mark.parametrize("path,body,field", [
    (CMPL, {"prompt": "x", "max_token": 5}, "max_token"),
    (CMPL, {"prompt": "x", "tools": []}, "tools"),
    (CHAT, {"messages": MSGS, "functions": []}, "functions"),
    (CHAT, {"messages": [{"role": "user", "content": "x", "extra": 1}]}, "extra"),
    (CMPL, {"prompt": "x", "stream_options": {"include_usage": True, "more": 1}}, "more"),
])
def test_unknown_fields(srv, path, body, field):
    assert_error(requests.post(srv.url + path, json=body, timeout=30), 400, words=[field])


@pytest.mark.parametrize("path,body,field", [
    (CMPL, {"max_tokens": 5}, "prompt"),
    (CHAT, {"max_tokens": 5}, "messages"),
    (CHAT, {"messages": []}, "messages"),
    (CHAT, {"messages": [{"role": "user"}]}, "content"),
    (CHAT, {"messages": [{"content": "x"}]}, "role"),
    ("/tokenize", {}, "content"),
    ("/detokenize", {}, "tokens"),
])
def test_missing_fields(srv, path, body, field):
    assert_error(requests.post(srv.url + path, json=body, timeout=30), 400, words=[field])


def test_unsupported_values(srv):
    """Values the API defines but this server does not do: a clear 400, not a silent change."""
    cases = [
        (CMPL, {"prompt": "x", "n": 2}, "'n'"),
        (CMPL, {"prompt": "x", "echo": True}, "echo"),
        (CMPL, {"prompt": "x", "logit_bias": {"1": 5}}, "logit_bias"),
        (CHAT, {"messages": [{"role": "tool", "content": "x"}]}, "tool"),
        (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "text"),
        (CHAT, {"messages": MSGS, "top_logprobs": 2}, "logprobs"),
        (CHAT, {"messages": MSGS, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        (CMPL, {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        (CMPL, {"prompt": "x", "stop": [""]}, "stop"),
        (CMPL, {"prompt": "x", "temperature": 2.5}, "temperature"),
        (CMPL, {"prompt": "x", "presence_penalty": -3}, "presence_penalty"),
        (CMPL, {"prompt": "x", "max_tokens": 5, "max_tokens ": 1}, "max_tokens "),
        (CMPL, {"prompt": [99999]}, "vocabulary"),
        ("/detokenize", {"tokens": [1, 99999]}, "vocabulary"),
        ("/detokenize", {"tokens": [-1]}, "tokens"),
    ]
    for path, body, word in cases:
        assert_error(requests.post(srv.url + path, json=body, timeout=30), 400, words=[word])
    # the same field twice in one object (json.dumps cannot write that)
    assert_error(post_raw(srv, CMPL, b'{"prompt": "x", "max_tokens": 2, "max_tokens": 900}'), 400, words=["twice"])


@pytest.mark.parametrize("value", [-1, 0, -100000, 10 ** 9, 2 ** 31, 1e300, 16777217])
def test_bad_max_tokens(srv, value):
    assert_error(requests.post(srv.url + CMPL, json={"prompt": "x", "max_tokens": value}, timeout=30), 400,
                 words=["max_tokens"])


def test_max_tokens_beyond_context(srv):
    """max_tokens under the absolute limit but more than the context leaves: OpenAI's
    context_length_exceeded, as for any prompt + max_tokens over the context."""
    e = assert_error(requests.post(srv.url + CMPL, json={"prompt": "x", "max_tokens": 600}, timeout=30), 400,
                     code="context_length_exceeded")
    assert "512" in e["message"]


def test_prompt_longer_than_context(srv):
    long = "Once upon a time there was a dog. " * 200  # about 1800 tokens, context 512
    for path, body in [(CMPL, {"prompt": long}), (CHAT, {"messages": [{"role": "user", "content": long}]}),
                       (CMPL, {"prompt": list(range(1, 400)) * 2})]:
        assert_error(requests.post(srv.url + path, json=body, timeout=30), 400, code="context_length_exceeded")
    # the openai client raises BadRequestError with that code
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as ei:
        c.completions.create(model="x", prompt=long)
    assert ei.value.code == "context_length_exceeded"


def test_body_over_limit(srv):
    big = json.dumps({"prompt": "a" * (100 * 1024)}).encode()  # limit --max-body 64 KiB
    assert_error(post_raw(srv, CMPL, big), 413, code="request_too_large")

    # the same without Content-Length (chunked upload): read, dropped, then 413
    def gen():
        for i in range(0, len(big), 8192):
            yield big[i:i + 8192]

    assert_error(post_raw(srv, CMPL, gen()), 413, code="request_too_large")
    # just under the limit is fine (and then a 400 for the over-long prompt, not a 413)
    ok = json.dumps({"prompt": "a " * (30 * 1024)}).encode()
    assert post_raw(srv, CMPL, ok).status_code == 400


def test_stalled_and_slow_clients(srv):
    """Clients that stop mid-headers or mid-body hold only their own connection: others
    are served meanwhile, and the server closes them after --timeout (3 s)."""
    stalled = []
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", srv.port))
        if i % 2:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # headers never end
        else:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")  # body stalls
        stalled.append(s)
    t0 = time.time()
    for _ in range(3):
        r = requests.post(srv.url + CMPL, json={"prompt": "Once", "max_tokens": 8}, timeout=10)
        assert r.status_code == 200
    assert time.time() - t0 < 2.5  # answered before the stalled ones time out
    # a slow client: one byte every 0.5 s is activity, so it is not cut off, and gets its answer
    body = json.dumps({"prompt": "Once", "max_tokens": 2}).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    slow = socket.create_connection(("127.0.0.1", srv.port))
    slow.sendall(head + body[:-3])
    for b in body[-3:]:
        time.sleep(0.5)
        slow.sendall(bytes([b]))
    slow.settimeout(10)
    reply = b""
    while True:
        part = slow.recv(65536)
        if not part:
            break
        reply += part
    assert reply.startswith(b"HTTP/1.1 200"), reply[:100]
    slow.close()
    # the stalled ones are closed by the server (recv sees the end) within the timeout + slack
    for s in stalled:
        s.settimeout(10)
        try:
            left = s.recv(65536)
        except (ConnectionResetError, socket.timeout) as e:
            left = e
        assert left == b"" or isinstance(left, ConnectionResetError), left
        s.close()
    assert time.time() - t0 < 10


@pytest.mark.parametrize("raw", [
    b'{"prompt": "\xff\xfe"}', b'{"prompt": "caf\xc3"}', b'{"prompt": "\xc0\xaf"}', b'{"prompt": "\xed\xa0\x80"}',
    b'{"prompt": "\xf4\x90\x80\x80"}', b'{"prompt": "\\ud800"}', b'{"prompt": "\\udc00x"}', b'{"prompt": "a\\u0000b"}',
    b'{"messages": [{"role": "user", "content": "\x80"}]}',
])
def test_invalid_utf8(srv, raw):
    path = CHAT if b"messages" in raw else CMPL
    assert_error(post_raw(srv, path, raw), 400)


def test_valid_utf8_accepted(srv):
    r = post_raw(srv, CMPL, '{"prompt": "café 日本 \\u00e9 \\ud83d\\ude00", "max_tokens": 2}'.encode())
    assert r.status_code == 200, r.text


def test_api_key(binary):
    s = Server(need_model(STORIES), "--api-key", "sekret", "--ctx", "256")
    try:
        body = {"prompt": "x", "max_tokens": 2}
        assert_error(requests.post(s.url + CMPL, json=body, timeout=10), 401, code="invalid_api_key", words=["missing"])
        for bad in ["Bearer wrong", "Bearer sekret2", "Bearer ", "sekret", "Basic c2VrcmV0", "Bearer sekre"]:
            assert_error(requests.post(s.url + CMPL, json=body, headers={"Authorization": bad}, timeout=10), 401,
                         code="invalid_api_key")
        for path in ["/v1/models", "/metrics"]:
            assert requests.get(s.url + path, timeout=10).status_code == 401
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
        ok = requests.post(s.url + CMPL, json=body, headers={"Authorization": "Bearer sekret"}, timeout=30)
        assert ok.status_code == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0).models.list()
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="sekret", max_retries=0)
        assert good.completions.create(model="x", prompt="x", max_tokens=2).usage.completion_tokens == 2
        m = requests.get(s.url + "/metrics", headers={"Authorization": "Bearer sekret"}, timeout=10).text
        assert 'minfer_requests_total{status="401"} ' in m and 'minfer_requests_total{status="401"} 0' not in m
    finally:
        assert s.stop() == 0


def test_unknown_path_and_method(srv):
    assert_error(requests.get(srv.url + "/v1/nothing", timeout=10), 404, code="not_found")
    assert_error(requests.get(srv.url + CMPL, timeout=10), 405)
    assert_error(requests.delete(srv.url + "/health", timeout=10), 405)


def test_errors_counted(srv):
    m = srv.metrics()
    assert m['minfer_requests_total{status="400"}'] > 50
    assert m['minfer_requests_total{status="413"}'] >= 2

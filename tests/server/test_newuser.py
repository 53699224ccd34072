"""test_newuser.py - what a new user of the server hit (issue 56): the messages of
range errors (max_tokens past the context names the max_tokens given; integers print
as integers), the access log (one line a request; -q quiets it) and no libmicrohttpd
noise when a client hangs up, the chat page at / as served (its behaviour in a browser:
tests/webui_test.py), and the README's openai and curl examples run against a server."""
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time

import pytest
import requests

from conftest import STORIES, Server, need_model


@pytest.fixture(scope="module")
def srv(binary):
    s = Server(need_model(STORIES), "--parallel", "2", "--ctx", "512")
    yield s
    assert s.stop() == 0


def error_message(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    return r.json()["error"]["message"]


def test_max_tokens_past_the_context_names_it(srv):
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 510}, timeout=30)
    msg = error_message(r, 400)
    assert re.search(r"plus max_tokens \(510\) is more than the context of 512 tokens", msg), msg
    r = requests.post(srv.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000}, timeout=30)
    assert "max_tokens (5000)" in error_message(r, 400)


def test_integer_ranges_print_as_integers(srv):
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Once", "max_tokens": 100000000}, timeout=30)
    msg = error_message(r, 400)
    assert "'max_tokens' is 100000000, outside [1, 16777216]" in msg, msg
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Once", "top_k": -3}, timeout=30)
    msg = error_message(r, 400)
    assert "'top_k' is -3, outside [0, 1073741824]" in msg, msg
    assert "e+" not in msg
    # a number that is not an integer keeps its fraction
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Once", "temperature": 2.5}, timeout=30)
    assert "'temperature' is 2.5, outside [0, 2]" in error_message(r, 400)


# ---------------------------------------------------------------- access log (item 9)

# minfer: serve: 2026-12-07T21:30:01.123Z 127.0.0.1 POST /v1/completions 200 prompt=5 generated=4 0.012s
ACCESS = re.compile(r"^minfer: serve: (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\S+) (GET|POST|PUT|DELETE|HEAD) (\S+) "
                    r"(\d{3}|-)(?: prompt=(\d+) generated=(\d+))? (\d+\.\d{3})s(?: \((.*)\))?$")


def access_lines(srv, path, n, timeout=10):
    """The access lines of path once there are n of them (a line is written when the
    response has been sent, a moment after the client has read it)."""
    deadline = time.time() + timeout
    while True:
        got = [m for m in (ACCESS.match(l.rstrip("\n")) for l in list(srv.log)) if m and m.group(4) == path]
        if len(got) >= n or time.time() > deadline:
            return got
        time.sleep(0.05)


def test_access_log_one_line_a_request(srv):
    before = len(access_lines(srv, "/v1/completions", 0))
    r = requests.post(srv.url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0},
                      timeout=30)
    assert r.status_code == 200
    usage = r.json()["usage"]
    # (an earlier test's line may land after `before` was counted: ours is the new line
    # with this request's token counts)
    want = (str(usage["prompt_tokens"]), str(usage["completion_tokens"]))
    deadline = time.time() + 10
    while True:
        got = access_lines(srv, "/v1/completions", before + 1)
        mine = [g for g in got[before:] if (g.group(6), g.group(7)) == want]
        if mine or time.time() > deadline:
            break
        time.sleep(0.05)
    assert len(mine) == 1, "".join(srv.log[-10:])
    m = mine[0]
    assert m.group(2) == "127.0.0.1" and m.group(3) == "POST" and m.group(5) == "200"
    assert 0 <= float(m.group(8)) < 30 and m.group(9) is None
    # the time is UTC, now
    t = time.strptime(m.group(1)[:19], "%Y-%m-%dT%H:%M:%S")
    assert abs(time.mktime(t) - time.mktime(time.gmtime())) < 60

    # a stream: its tokens and its duration cover the whole stream
    n_chat = len(access_lines(srv, "/v1/chat/completions", 0))
    r = requests.post(srv.url + "/v1/chat/completions", stream=True, timeout=30,
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True,
                            "stream_options": {"include_usage": True}, "temperature": 0})
    events = [l for l in r.iter_lines() if l.startswith(b"data: {")]
    usage = json.loads(events[-1][6:])["usage"]
    m = access_lines(srv, "/v1/chat/completions", n_chat + 1)[-1]
    assert m.group(5) == "200" and int(m.group(6)) == usage["prompt_tokens"] and int(m.group(7)) == usage["completion_tokens"]

    # errors and other endpoints: status, no token counts
    assert requests.get(srv.url + "/health", timeout=10).status_code == 200
    assert requests.get(srv.url + "/nowhere%0aforged", timeout=10).status_code == 404
    r = requests.post(srv.url + "/v1/completions", data=b"{", timeout=10)
    assert r.status_code == 400
    m = access_lines(srv, "/health", 1)[-1]  # (the first /health of this server)
    assert m.group(3) == "GET" and m.group(5) == "200" and m.group(6) is None
    # a control character in the path is escaped: it cannot forge a log line
    assert not any(l.startswith("forged") for l in srv.log)
    assert access_lines(srv, "/nowhere%0Aforged", 1)[-1].group(5) == "404"
    assert access_lines(srv, "/v1/completions", before + 2)[-1].group(5) == "400"


def test_access_log_quiet(binary):
    s = Server(need_model(STORIES), "-q")
    try:
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
        r = requests.post(s.url + "/v1/completions", json={"prompt": "Once", "max_tokens": 3}, timeout=30)
        assert r.status_code == 200
        time.sleep(0.3)
    finally:
        assert s.stop() == 0
    log = "".join(s.log)
    assert "listening on" in log  # always printed: scripts read the port from it
    assert not any(ACCESS.match(l.rstrip("\n")) for l in s.log), log


def post_raw(port, body, path="/v1/completions"):
    sock = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (path.encode(), len(data)) + data)
    return sock


def test_client_disconnects_are_not_errors(binary):
    """A client that hangs up (mid-stream, before a JSON answer, with a reset) is an
    access line that says so, not libmicrohttpd's error lines."""
    # stories260K rarely ends a story: 8000 tokens are seconds of generation
    s = Server(need_model(STORIES), "--parallel", "2", "--ctx", "8192")
    long = {"prompt": "Once upon a time", "max_tokens": 8000}
    try:
        for how in ("stream-close", "stream-reset", "json-close"):
            sock = post_raw(s.port, {**long, "stream": how.startswith("stream")})
            if how.startswith("stream"):
                assert sock.recv(4096).startswith(b"HTTP/1.1 200")
                sock.recv(4096)
            else:
                time.sleep(0.3)
            if how == "stream-reset":  # RST instead of FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        got = access_lines(s, "/v1/completions", 3, timeout=20)
        assert len(got) == 3, "".join(s.log)
        for m in got:
            assert m.group(9) == "client hung up", m.group(0)
            assert 0 < int(m.group(7)) < 8000, m.group(0)
        assert [m.group(5) for m in got] == ["200", "200", "-"], [m.group(0) for m in got]
        # the next request is served as usual
        r = requests.post(s.url + "/v1/completions", json={"prompt": "Once", "max_tokens": 3}, timeout=30)
        assert r.status_code == 200
    finally:
        assert s.stop() == 0
    noise = [l for l in s.log if "serve: http:" in l]
    assert not noise, noise


# ---------------------------------------------------------------- the chat page at /
# (its behaviour in a browser: tests/webui_test.py)

def test_chat_page_served_from_the_binary(srv):
    r = requests.get(srv.url + "/", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp, csp
    page = r.text
    assert page.startswith("<!doctype html>") and "v1/chat/completions" in page
    # nothing fetched from elsewhere: no absolute or protocol-relative URL in an attribute,
    # an import or a fetch (the only links the page makes are in the model's own text)
    assert not re.search(r"""(src|href|action)\s*=\s*["']?(https?:)?//""", page, re.I)
    assert not re.search(r"""(@import|url\(|fetch\()\s*["']?(https?:)?//""", page, re.I)
    # the page is not an API endpoint: other methods are refused
    assert requests.post(srv.url + "/", timeout=10).status_code == 405


def test_no_webui(binary):
    s = Server(need_model(STORIES), "--no-webui")
    try:
        r = requests.get(s.url + "/", timeout=10)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
    finally:
        assert s.stop() == 0
    assert "chat page at" not in "".join(s.log)


def test_chat_page_with_api_key(binary):
    """The page is public (it asks for the key); the API behind it is not."""
    s = Server(need_model(STORIES), "--api-key", "sekret")
    try:
        assert requests.get(s.url + "/", timeout=10).status_code == 200
        assert requests.get(s.url + "/v1/models", timeout=10).status_code == 401
        r = requests.get(s.url + "/v1/models", headers={"Authorization": "Bearer sekret"}, timeout=10)
        assert r.status_code == 200
    finally:
        assert s.stop() == 0
    assert re.search(r"chat page at http://127\.0\.0\.1:\d+/", "".join(s.log))


# ---------------------------------------------------------------- the README's server snippets (item 11)

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def readme_server_section():
    text = open(README, encoding="utf-8").read()
    start = text.index("\n## The server")
    return text[start:text.index("\n## ", start + 1)]


def test_readme_openai_snippet_runs(srv):
    """The README's openai example, pointed at this server, streams an answer."""
    block = re.search(r"```python\n(.*?)```", readme_server_section(), re.S).group(1)
    code = block.replace("http://127.0.0.1:8080", srv.url).replace("max_tokens=64", "max_tokens=8")
    assert srv.url in code
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), r.stdout


def test_readme_curl_lines_run(srv):
    if not shutil.which("curl"):
        pytest.skip("no curl")
    text = readme_server_section()
    cmds = re.findall(r"^(curl .*?(?:\\\n.*?)*)$", re.search(r"```sh\n(curl.*?)```", text, re.S).group(1), re.M)
    assert len(cmds) == 2, cmds
    for cmd in cmds:
        r = subprocess.run(["bash", "-c", cmd.replace("http://127.0.0.1:8080", srv.url)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and '"choices"' in r.stdout and '"error"' not in r.stdout, (cmd, r.stdout, r.stderr)

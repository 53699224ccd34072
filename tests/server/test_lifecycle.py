"""test_lifecycle.py - starting and stopping: --help, one-line start-up errors, the
listening line, SIGTERM/SIGINT draining in-flight requests and exiting 0, a second
signal cancelling them."""
import json
import signal
import socket
import subprocess
import threading
import time

import pytest
import requests

from conftest import SMOLLM, STORIES, Server, need_model


def test_help(binary):
    r = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    for opt in ["--host", "--port", "--parallel", "--ctx", "--api-key", "--device", "--chunk", "--max-body",
                "--timeout", "--drain", "/v1/chat/completions", "/metrics"]:
        assert opt in r.stdout, opt
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    assert "serve" in r.stdout


@pytest.mark.parametrize("args,code,words", [
    (["serve"], 1, "-m MODEL is required"),
    (["serve", "-m", "/nonexistent.gguf", "--port", "0"], 2, "/nonexistent.gguf"),
    (["serve", "-m", "x", "--port", "70000"], 1, "--port"),
    (["serve", "-m", "x", "--parallel", "0"], 1, "--parallel"),
    (["serve", "-m", "x", "--bogus"], 1, "--bogus"),
    (["serve", "-m", "x", "--api-key", ""], 1, "--api-key"),
])
def test_startup_errors(binary, args, code, words):
    r = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == code, r.stderr
    errs = [l for l in r.stderr.splitlines() if l.startswith("minfer: error:")]
    assert len(errs) == 1 and words in errs[0], r.stderr


def test_port_in_use_and_bad_template(binary):
    need_model(STORIES)
    s = Server(STORIES, "--ctx", "128")
    try:
        r = subprocess.run([binary, "serve", "-m", STORIES, "--port", str(s.port), "-q"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 2
        assert r.stderr.count("minfer: error:") == 1 and str(s.port) in r.stderr, r.stderr
        r = subprocess.run([binary, "serve", "-m", STORIES, "--port", "0", "--chat-template", "nope", "-q"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and "chat template 'nope'" in r.stderr, r.stderr
    finally:
        assert s.stop() == 0


def test_listening_line(binary):
    s = Server(need_model(STORIES), "--ctx", "128", "--parallel", "3", "--alias", "tiny")
    try:
        line = [l for l in s.log if "listening on" in l][0]
        assert f"http://127.0.0.1:{s.port}" in line and "3 slots" in line and "model tiny" in line
        assert requests.get(s.url + "/v1/models", timeout=10).json()["data"][0]["id"] == "tiny"
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_drains_in_flight(binary, sig):
    """A signal while requests run: they finish (whole answers), new ones get 503,
    and the process exits 0."""
    need_model(SMOLLM)
    # (--drain 300: under the sanitizer build on a loaded 2-core CI machine the two
    # 300-token answers once outlasted the default 30 s, so the stream was cancelled)
    s = Server(SMOLLM, "--parallel", "2", "--ctx", "512", "--drain", "300")
    results = {}

    def run(i, stream):
        # (300 tokens: the drain must outlast the late request below; with 60 both answers
        # could finish within its 0.2 s and the server exit first: connection refused, seen
        # once in a fresh-clone CI run)
        body = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 300, "temperature": 0, "stream": stream}
        r = requests.post(s.url + "/v1/completions", json=body, stream=stream, timeout=120)
        if stream:
            evs = [json.loads(l[6:]) for l in r.iter_lines(decode_unicode=True)
                   if l.startswith("data: {")]
            results[i] = (r.status_code, [e["choices"][0]["finish_reason"] for e in evs if e["choices"]][-1])
        else:
            results[i] = (r.status_code, r.json()["choices"][0]["finish_reason"])

    ts = [threading.Thread(target=run, args=(i, i == 1)) for i in range(2)]
    for t in ts:
        t.start()
    deadline = time.time() + 30
    while s.metrics()["minfer_slots_busy"] < 2:
        assert time.time() < deadline
        time.sleep(0.01)
    s.proc.send_signal(sig)
    time.sleep(0.2)
    late = requests.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=30)
    assert late.status_code == 503 and late.json()["error"]["code"] == "unavailable"
    for t in ts:
        t.join(timeout=300)
    assert s.proc.wait(timeout=30) == 0
    assert results == {0: (200, "length"), 1: (200, "length")}
    log = "".join(s.log)
    assert "draining" in log and "stopped" in log and "error" not in log.lower()


def test_second_signal_cancels(binary):
    """With --drain long, a second SIGTERM cancels the running request at once: the
    stream ends with an error event and [DONE], and the process exits 0."""
    need_model(SMOLLM)
    s = Server(SMOLLM, "--parallel", "1", "--ctx", "2048", "--drain", "600")
    lines = []

    def run():
        body = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 1900, "temperature": 0, "stream": True}
        r = requests.post(s.url + "/v1/completions", json=body, stream=True, timeout=120)
        lines.extend(l for l in r.iter_lines(decode_unicode=True) if l)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 30
    while s.metrics()["minfer_generated_tokens_total"] < 10:
        assert time.time() < deadline
        time.sleep(0.02)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=20) == 0
    assert time.time() - t0 < 10
    t.join(timeout=30)
    assert lines[-1] == "data: [DONE]"
    assert "error" in json.loads(lines[-2][6:])
    assert "cancelling 1 request" in "".join(s.log)


def test_idle_keepalive_connections_do_not_block_exit(binary):
    s = Server(need_model(STORIES), "--ctx", "128")
    socks = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(5)]
    sess = requests.Session()
    assert sess.get(s.url + "/health", timeout=10).status_code == 200  # leaves a kept-alive connection
    t0 = time.time()
    assert s.stop(timeout=20) == 0
    assert time.time() - t0 < 10
    for x in socks:
        x.close()

"""test_batching.py - continuous batching and the prompt cache: outputs do not depend
on how many requests share a step (--parallel 1 and 8, 32 clients on 4 slots), a
long prompt is read in chunks while running streams keep flowing, a second turn
reuses the first turn's cache with the output of a cold run, and a client that hangs
up frees its slot at once."""
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import SMOLLM, STORIES, Server, need_model

PROMPTS = ["Once upon a time", "The little dog", "Tom and Sue went", "One day, a bird", "The sun was",
           "Lily had a red ball", "In the park", "The cat sat"]


def complete(url, prompt, seed, n=48, **kw):
    r = requests.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 1.0,
                                                     "seed": seed, **kw}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def stream_text(url, prompt, seed, n=48):
    r = requests.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 1.0,
                                                     "seed": seed, "stream": True}, stream=True, timeout=300)
    assert r.status_code == 200, r.text
    out = []
    for line in r.iter_lines(decode_unicode=True):
        if line.startswith("data: ") and line != "data: [DONE]":
            ev = json.loads(line[6:])
            if ev["choices"]:
                out.append(ev["choices"][0]["text"])
    return "".join(out)


def test_parallel_1_and_8_same_outputs(binary):
    need_model(STORIES)
    jobs = [(PROMPTS[i % len(PROMPTS)], 100 + i) for i in range(8)]
    outs = {}
    for par in (1, 8):
        s = Server(STORIES, "--parallel", str(par), "--ctx", "256")
        try:
            with ThreadPoolExecutor(8) as ex:  # all eight at once: one per slot with -np 8, queued with -np 1
                outs[par] = list(ex.map(lambda j: complete(s.url, *j)["choices"][0]["text"], jobs))
            m = s.metrics()
            steps, toks = m["minfer_decode_steps_total"], m["minfer_generated_tokens_total"]
        finally:
            assert s.stop() == 0
        if par == 8:  # sequences shared decode steps: fewer steps than tokens. (Not a fixed ratio:
            # on a loaded machine the eight requests arrive spread out and stories260K finishes
            # a request in milliseconds; steps < toks / 3 failed that way, 157 vs 384.)
            assert steps < toks, (steps, toks)
    assert outs[1] == outs[8]
    assert len(set(outs[1])) == 8


def test_32_clients_on_4_slots(stories):
    """More clients than slots: every one is answered, with the text it gets alone."""
    jobs = [(PROMPTS[i % len(PROMPTS)], 1000 + i) for i in range(32)]
    alone = [complete(stories.url, p, s, n=64)["choices"][0]["text"] for p, s in jobs]
    before = stories.metrics()
    seen_queue = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            m = stories.metrics()
            seen_queue.append((m["minfer_queue_depth"], m["minfer_slots_busy"]))
            time.sleep(0.005)

    w = threading.Thread(target=watch)
    w.start()
    try:
        def one(i):  # half of them stream
            p, sd = jobs[i]
            return stream_text(stories.url, p, sd, 64) if i % 2 else complete(stories.url, p, sd, n=64)["choices"][0]["text"]

        with ThreadPoolExecutor(32) as ex:
            futs = [ex.submit(one, i) for i in range(32)]
            together = [f.result() for f in futs]
    finally:
        stop.set()
        w.join()
    assert together == alone
    after = stories.metrics()
    assert after["minfer_requests_finished_total"] - before["minfer_requests_finished_total"] == 32
    assert after["minfer_slots_busy"] == 0 and after["minfer_queue_depth"] == 0
    assert max(b for _, b in seen_queue) <= 4
    print("queue depth, busy slots seen:", max(seen_queue))
    steps = after["minfer_decode_steps_total"] - before["minfer_decode_steps_total"]
    toks = after["minfer_generated_tokens_total"] - before["minfer_generated_tokens_total"]
    assert steps < toks / 2, (steps, toks)  # slots decoded together


@pytest.fixture(scope="module")
def smollm_chunked(binary):
    s = Server(need_model(SMOLLM), "--parallel", "2", "--ctx", "2048", "--chunk", "128")
    yield s
    s.stop()


def test_stream_flows_during_long_prefill(smollm_chunked):
    """A 1000-token prompt joins while a stream runs: read --chunk 128 tokens a step,
    so the stream gets tokens during that prefill instead of stalling for all of it."""
    url = smollm_chunked.url
    arrivals = []

    def run_stream():
        r = requests.post(url + "/v1/completions", json={"prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 400,
                                                         "temperature": 0, "stream": True}, stream=True, timeout=300)
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("data: {"):
                arrivals.append(time.time())

    t = threading.Thread(target=run_stream)
    t.start()
    while len(arrivals) < 5:
        time.sleep(0.01)
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 100
    t0 = time.time()
    r = requests.post(url + "/v1/completions", json={"prompt": long_prompt, "max_tokens": 1, "temperature": 0},
                      timeout=300).json()
    t1 = t0 + r["timings"]["ttft_ms"] / 1e3
    t.join()
    assert r["timings"]["prompt_n"] >= 900
    during = [a for a in arrivals if t0 < a < t1]
    # 1001 / 128 = 8 steps of prefill, each beside one decode step of the stream (the
    # whole prompt in one step would leave at most one token in that window)
    print("stream tokens during the prefill:", len(during), "in", t1 - t0, "s")
    assert len(during) >= 6, (len(during), t1 - t0)


def chat(url, msgs, **kw):
    r = requests.post(url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 40, "temperature": 0.7,
                                                          "seed": 9, "logprobs": True, **kw}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_second_turn_reuses_cache(binary):
    need_model(SMOLLM)
    q1, q2 = "Tell me about cats.", "And dogs?"
    other = [{"role": "user", "content": "Give me a number."}]
    warm = Server(SMOLLM, "--parallel", "2", "--ctx", "1024")
    try:
        r1 = chat(warm.url, [{"role": "user", "content": q1}])
        a1 = r1["choices"][0]["message"]["content"]
        chat(warm.url, other)  # another conversation takes the other slot
        turn2 = [{"role": "user", "content": q1}, {"role": "assistant", "content": a1},
                 {"role": "user", "content": q2}]
        before = warm.metrics()
        r2 = chat(warm.url, turn2)
        after = warm.metrics()
    finally:
        assert warm.stop() == 0
    cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    # everything of turn 1 that the cache holds: its prompt and the answer's tokens
    assert cached >= r1["usage"]["prompt_tokens"] + r1["usage"]["completion_tokens"] - 2, (cached, r1["usage"])
    assert r2["timings"]["prompt_n"] == r2["usage"]["prompt_tokens"] - cached
    assert after["minfer_prompt_cache_hits_total"] == before["minfer_prompt_cache_hits_total"] + 1
    assert after["minfer_prompt_cache_reused_tokens_total"] - before["minfer_prompt_cache_reused_tokens_total"] == cached
    assert after["minfer_prefilled_tokens_total"] - before["minfer_prefilled_tokens_total"] == r2["timings"]["prompt_n"]

    cold = Server(SMOLLM, "--parallel", "2", "--ctx", "1024")
    try:
        c2 = chat(cold.url, turn2)
    finally:
        assert cold.stop() == 0
    assert c2["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert c2["timings"]["prompt_n"] == c2["usage"]["prompt_tokens"]
    assert c2["choices"][0]["message"]["content"] == r2["choices"][0]["message"]["content"]
    # and bit for bit the same distributions
    assert [t["logprob"] for t in c2["choices"][0]["logprobs"]["content"]] == \
           [t["logprob"] for t in r2["choices"][0]["logprobs"]["content"]]


def test_disconnect_frees_slot(binary):
    """With one slot, a client that hangs up mid-stream (or before a JSON answer)
    cancels its request: the next request starts at once instead of waiting for
    the 1500 tokens the first one asked for."""
    need_model(SMOLLM)
    s = Server(SMOLLM, "--parallel", "1", "--ctx", "2048")
    body = {"prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 1500, "temperature": 0}
    try:
        for stream in (True, False):
            before = s.metrics()
            sock = socket.create_connection(("127.0.0.1", s.port))
            data = json.dumps({**body, "stream": stream}).encode()
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(data) + data)
            deadline = time.time() + 30
            while s.metrics()["minfer_generated_tokens_total"] - before["minfer_generated_tokens_total"] < 20:
                assert time.time() < deadline
                time.sleep(0.02)
            if stream:
                assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            sock.close()
            t0 = time.time()
            r = requests.post(s.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 4}, timeout=60)
            waited = time.time() - t0
            assert r.status_code == 200
            after = s.metrics()
            assert after["minfer_requests_cancelled_total"] == before["minfer_requests_cancelled_total"] + 1
            # 1500 tokens at SmolLM2's few hundred tok/s would be seconds; the cancel is one step
            assert waited < 2.0, waited
            assert after["minfer_generated_tokens_total"] - before["minfer_generated_tokens_total"] < 1000
    finally:
        assert s.stop() == 0

#!/usr/bin/env python3
"""serve_bench.py - `minfer serve` throughput and time to first token, measured from
clients on loopback (needs requests: $BUILD/venv has it after tools/deps.sh --test).

  python3 bench/serve_bench.py --bin build/minfer -m MODEL [-t 2] [--clients 1,4,8]
         [--prompt-tokens 128] [--gen 128] [--rounds 3]

Part 1: N streaming clients at once (N = each of --clients; the server has
--parallel max(N)), each a different prompt of exactly --prompt-tokens token ids (no
shared prefix beyond BOS) and max_tokens --gen at temperature 0. Aggregate tok/s = all generated tokens /
wall time from the first request to the last [DONE]; TTFT = request to first
content chunk, per client. Median over --rounds.
Part 2: the second turn of a chat, time to first token with the first turn's cache
(same server) against a cold server, --rounds each."""
import argparse
import json
import re
import statistics
import subprocess
import threading
import time

import requests


DEVICE = []


def start(binary, model, *args):
    p = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "-q", *DEVICE, *args], stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"listening on http://[^ ]*:(\d+) ", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, f"http://127.0.0.1:{m.group(1)}"
    raise SystemExit("minfer serve did not start")


def stop(p):
    p.terminate()
    p.wait(timeout=60)


def prompt_for(url, i, n_tokens):
    """Exactly n_tokens ids (BOS included): numbers counted from a different start per
    client, distinct prompts the model continues without stopping."""
    start = 1000 * (i + 1)
    text = ", ".join(str(start + k) for k in range(n_tokens)) + ","
    ids = requests.post(url + "/tokenize", json={"content": text}, timeout=60).json()["tokens"]
    return ids[:n_tokens]


def stream_one(url, prompt, gen, out):
    t0 = time.time()
    r = requests.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": gen, "temperature": 0,
                                                     "stream": True, "stream_options": {"include_usage": True}},
                      stream=True, timeout=600)
    ttft, usage = None, None
    for line in r.iter_lines(decode_unicode=True):
        if not line.startswith("data: {"):
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        elif ttft is None and ev["choices"] and ev["choices"][0]["text"]:
            ttft = time.time() - t0
    out.append((ttft, usage["completion_tokens"], usage["prompt_tokens"], time.time()))


def part1(a):
    clients = [int(x) for x in a.clients.split(",")]
    p, url = start(a.bin, a.model, "-t", str(a.threads), "--parallel", str(max(clients)), "--ctx", "1024")
    rows = []
    try:
        requests.post(url + "/v1/completions", json={"prompt": "warm up", "max_tokens": 8}, timeout=120)
        for n in clients:
            aggs, ttfts, gens, prompts = [], [], [], []
            for r in range(a.rounds):
                out = []
                # distinct prompts per round too, so no round reuses an earlier one's cache
                ts = [threading.Thread(target=stream_one, args=(url, prompt_for(url, 100 * r + i, a.prompt_tokens), a.gen, out))
                      for i in range(n)]
                t0 = time.time()
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                wall = max(o[3] for o in out) - t0
                gen = sum(o[1] for o in out)
                aggs.append(gen / wall)
                ttfts.append(statistics.mean(o[0] for o in out))
                gens.append(gen / n)
                prompts.append(statistics.mean(o[2] for o in out))
            rows.append((n, statistics.median(aggs), min(aggs), max(aggs), statistics.median(ttfts), statistics.mean(gens),
                         statistics.mean(prompts)))
    finally:
        stop(p)
    print(f"| clients | aggregate tok/s (median of {a.rounds}) | min-max | mean TTFT s | gen tokens/client | prompt tokens |")
    print("|---:|---:|---|---:|---:|---:|")
    for n, med, lo, hi, ttft, g, pt in rows:
        print(f"| {n} | {med:.1f} | {lo:.1f}-{hi:.1f} | {ttft:.3f} | {g:.0f} | {pt:.0f} |")


def chat_ttft(url, msgs):
    t0 = time.time()
    r = requests.post(url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 16, "temperature": 0,
                                                          "stream": True, "stream_options": {"include_usage": True}},
                      stream=True, timeout=600)
    ttft, usage = None, None
    for line in r.iter_lines(decode_unicode=True):
        if line.startswith("data: {"):
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            elif ttft is None and ev["choices"] and ev["choices"][0]["delta"].get("content"):
                ttft = time.time() - t0
    return ttft, usage


def part2(a):
    system = "You are a careful assistant. " + " ".join(f"Rule {k}: answer plainly and briefly." for k in range(40))
    warm_t, cold_t, cached = [], [], []
    for r in range(a.rounds):
        turn1 = [{"role": "system", "content": system}, {"role": "user", "content": f"Tell me about the number {r}."}]
        p, url = start(a.bin, a.model, "-t", str(a.threads), "--parallel", "2", "--ctx", "2048")
        try:
            r1 = requests.post(url + "/v1/chat/completions", json={"messages": turn1, "max_tokens": 48, "temperature": 0},
                               timeout=600).json()
            turn2 = turn1 + [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
                             {"role": "user", "content": "And its square?"}]
            t, u = chat_ttft(url, turn2)
            warm_t.append(t)
            cached.append((u["prompt_tokens_details"]["cached_tokens"], u["prompt_tokens"]))
        finally:
            stop(p)
        p, url = start(a.bin, a.model, "-t", str(a.threads), "--parallel", "2", "--ctx", "2048")
        try:
            t, u = chat_ttft(url, turn2)
            cold_t.append(t)
        finally:
            stop(p)
    print(f"| second turn ({cached[0][1]} prompt tokens) | TTFT s, median of {a.rounds} | all |")
    print("|---|---:|---|")
    print(f"| with the first turn's cache ({cached[0][0]} tokens reused) | {statistics.median(warm_t):.3f} | "
          + ", ".join(f"{x:.3f}" for x in warm_t) + " |")
    print(f"| cold server | {statistics.median(cold_t):.3f} | " + ", ".join(f"{x:.3f}" for x in cold_t) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/minfer")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--part", default="1,2")
    ap.add_argument("--device", default=None, help="passed to minfer serve (cpu, cuda, ...)")
    a = ap.parse_args()
    if a.device:
        DEVICE.extend(["--device", a.device])
    if "1" in a.part:
        part1(a)
    if "2" in a.part:
        part2(a)


if __name__ == "__main__":
    main()

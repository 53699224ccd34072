#!/usr/bin/env python3
"""tools/soak.py - `minfer serve` on loopback under a bounded mix of requests.

  tools/soak.py [--bin build/minfer] [--model M] [--minutes 10] [--clients 6]
                [--out bench/soak] [--serve-args "--parallel 4 --ctx 512"]

Starts the server (port 0: the port is read from its "listening on" line), takes the
reference answers of a few greedy requests (temperature 0, fixed prompts; `minfer run`
gives the same completion text: checked once at the start), then runs --clients threads
for --minutes, each picking request kinds in turn from this mix:

  valid       greedy completion / chat, non-streaming: the text must equal the reference
  stream      the same as SSE: the deltas joined must equal the reference, [DONE] last
  cancel      a streaming request abandoned after the first events (socket closed)
  slow        a valid request whose headers and body arrive a few bytes at a time
  stall       half a request, then silence past the server's --timeout: the server must
              close the connection
  invalid     malformed JSON, wrong types, unknown fields, out-of-range values, invalid
              UTF-8, a body over --max-body, unknown paths and methods: 4xx with a JSON
              error object
  tokenize    /tokenize then /detokenize: the text back
  meta        /health, /v1/models, /metrics

Every 2 s the server's resident memory (VmRSS) is sampled. At the end the server gets
SIGTERM and must exit 0. Writes OUT.csv (time, RSS), OUT.png (the RSS curve, when
matplotlib imports) and prints a markdown table of counts and RSS; exits 1 when any
request was answered wrongly, the server died, or RSS grew by more than --rss-slack MiB
between the first and the last tenth of the run.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park", "One day, a girl"]
CHATS = [[{"role": "user", "content": "Tell me a story about a cat."}],
         [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Hi!"}]]
N_TOKENS = 24


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = {}
        self.bad = {}
        self.errors = []

    def count(self, kind, good, why=""):
        with self.lock:
            d = self.ok if good else self.bad
            d[kind] = d.get(kind, 0) + 1
            if not good and len(self.errors) < 50:
                self.errors.append(f"{kind}: {why}")


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def post(port, path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, r.read()
    c.close()
    return out


def completion_body(i, stream=False):
    return {"prompt": PROMPTS[i], "max_tokens": N_TOKENS, "temperature": 0, "stream": stream}


def chat_body(i, stream=False):
    return {"messages": CHATS[i], "max_tokens": N_TOKENS, "temperature": 0, "stream": stream}


def sse_text(port, path, body, is_chat, stop_after=None):
    """Runs a streaming request; returns (text, saw_done). stop_after: close after that many events."""
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    data = json.dumps(body).encode()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    f = s.makefile("rb")
    status = f.readline()
    if b" 200 " not in status:
        s.close()
        raise RuntimeError(f"status {status!r}")
    chunked = False
    while True:  # headers
        h = f.readline()
        if h in (b"\r\n", b""):
            break
        if h.lower().startswith(b"transfer-encoding:") and b"chunked" in h.lower():
            chunked = True
    raw = b""
    text, done, events = "", False, 0
    while not done:
        if chunked:
            size_line = f.readline()
            if not size_line:
                break
            n = int(size_line.split(b";")[0], 16)
            if n == 0:
                break
            raw += f.read(n)
            f.readline()
        else:
            b = f.read1(65536)
            if not b:
                break
            raw += b
        while b"\n\n" in raw:
            ev, raw = raw.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            payload = ev[6:]
            if payload == b"[DONE]":
                done = True
                break
            j = json.loads(payload)
            ch = j["choices"][0] if j.get("choices") else {}
            text += (ch.get("delta", {}).get("content") or "") if is_chat else (ch.get("text") or "")
            events += 1
            if stop_after is not None and events >= stop_after:
                s.close()  # abandon the stream: the server must cancel the job
                return text, False
    s.close()
    return text, done


INVALID = [
    ("/v1/completions", b'{"prompt": "x"', 400),
    ("/v1/completions", b'{"prompt": 5}', 400),
    ("/v1/completions", b'{"prompt": "x", "max_token": 5}', 400),
    ("/v1/completions", b'{"prompt": "x", "temperature": -1}', 400),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1e12}', 400),
    ("/v1/completions", b'{"prompt": "\xff\xfe"}', 400),
    ("/v1/completions", b'[]', 400),
    ("/v1/completions", b'', 400),
    ("/v1/chat/completions", b'{"messages": []}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "x"}]}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a\\u0000b"}]}', 400),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "stop": ["", "a"]}', 400),
    ("/v1/nope", b'{}', 404),
    ("/detokenize", b'{"tokens": [-1]}', 400),
]


def invalid_one(port, rng, max_body):
    k = rng.randrange(len(INVALID) + 2)
    if k == len(INVALID):  # a body over --max-body
        st, body = post(port, "/v1/completions", b'{"prompt": "' + b"a" * (max_body + 10) + b'"}')
        return st == 413, f"oversized body: {st}"
    if k == len(INVALID) + 1:  # wrong method
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/v1/completions")
        r = c.getresponse()
        r.read()
        c.close()
        return r.status == 405, f"GET on a POST endpoint: {r.status}"
    path, body, want = INVALID[k]
    st, out = post(port, path, body)
    try:
        j = json.loads(out)
        has_err = "error" in j
    except ValueError:
        has_err = False
    return st == want and has_err, f"{path} {body[:40]!r}: {st} (want {want}) {out[:80]!r}"


def slow_one(port, rng, ref):
    i = rng.randrange(len(PROMPTS))
    data = json.dumps(completion_body(i)).encode()
    req = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    for p in range(0, len(req), 7):
        s.sendall(req[p:p + 7])
        time.sleep(0.01)
    resp = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        resp += b
    s.close()
    head, _, body = resp.partition(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n")[0]:
        return False, f"slow: {head[:60]!r}"
    if b"chunked" in head.lower():
        out, rest = b"", body
        while rest:
            n_s, _, rest = rest.partition(b"\r\n")
            n = int(n_s.split(b";")[0], 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        body = out
    text = json.loads(body)["choices"][0]["text"]
    return text == ref["c"][i], f"slow: text differs: {text!r}"


def stall_one(port, timeout_s):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s + 30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\": ")
    t0 = time.time()
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    dt = time.time() - t0
    return dt < timeout_s + 20, f"stalled connection closed after {dt:.1f} s (timeout {timeout_s})"


def client(port, stats, ref, stop_at, seed, args):
    rng = random.Random(seed)
    kinds = ["valid", "valid", "stream", "cancel", "slow", "invalid", "invalid", "tokenize", "meta"]
    if seed % 3 == 0:
        kinds.append("stall")
    while time.time() < stop_at:
        kind = rng.choice(kinds)
        try:
            if kind == "valid":
                if rng.random() < 0.5:
                    i = rng.randrange(len(PROMPTS))
                    st, out = post(port, "/v1/completions", completion_body(i))
                    t = json.loads(out)["choices"][0]["text"] if st == 200 else None
                    stats.count(kind, st == 200 and t == ref["c"][i], f"completion {i}: {st} {t!r}")
                else:
                    i = rng.randrange(len(CHATS))
                    st, out = post(port, "/v1/chat/completions", chat_body(i))
                    t = json.loads(out)["choices"][0]["message"]["content"] if st == 200 else None
                    stats.count(kind, st == 200 and t == ref["chat"][i], f"chat {i}: {st} {t!r}")
            elif kind == "stream":
                if rng.random() < 0.5:
                    i = rng.randrange(len(PROMPTS))
                    t, done = sse_text(port, "/v1/completions", completion_body(i, True), False)
                    stats.count(kind, done and t == ref["c"][i], f"stream completion {i}: done={done} {t!r}")
                else:
                    i = rng.randrange(len(CHATS))
                    t, done = sse_text(port, "/v1/chat/completions", chat_body(i, True), True)
                    stats.count(kind, done and t == ref["chat"][i], f"stream chat {i}: done={done} {t!r}")
            elif kind == "cancel":
                i = rng.randrange(len(PROMPTS))
                body = completion_body(i, True)
                body["max_tokens"] = 200
                sse_text(port, "/v1/completions", body, False, stop_after=rng.randrange(1, 4))
                stats.count(kind, True)
            elif kind == "slow":
                good, why = slow_one(port, rng, ref)
                stats.count(kind, good, why)
            elif kind == "stall":
                good, why = stall_one(port, args.timeout)
                stats.count(kind, good, why)
            elif kind == "invalid":
                good, why = invalid_one(port, rng, args.max_body_kib * 1024)
                stats.count(kind, good, why)
            elif kind == "tokenize":
                text = rng.choice(PROMPTS) + " caf\u00e9 \U0001F600"
                st, out = post(port, "/tokenize", {"content": text, "add_special": False})
                toks = json.loads(out)["tokens"] if st == 200 else None
                st2, out2 = post(port, "/detokenize", {"tokens": toks or []})
                back = json.loads(out2).get("content") if st2 == 200 else None
                stats.count(kind, st == 200 and st2 == 200 and back is not None and back.strip() == text.strip(),
                            f"tokenize: {st} {st2} {back!r}")
            else:
                good = True
                for path in ("/health", "/v1/models", "/metrics"):
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    c.request("GET", path)
                    r = c.getresponse()
                    r.read()
                    c.close()
                    good = good and r.status == 200
                stats.count(kind, good, "meta endpoint not 200")
        except Exception as e:  # a refused connection or a malformed reply is a failure
            stats.count(kind, False, f"{type(e).__name__}: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(os.environ.get("BUILD", "build"), "minfer"))
    ap.add_argument("--model", default=os.path.join(os.environ.get("MINFER_SHARED", "../shared"),
                                                    "models/stories260K.gguf"))
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=5, help="the server's --timeout (stall requests wait past it)")
    ap.add_argument("--max-body-kib", type=int, default=64)
    ap.add_argument("--serve-args", default="--parallel 4 --ctx 512")
    ap.add_argument("--rss-slack", type=float, default=16.0, help="MiB of RSS growth allowed")
    ap.add_argument("--out", default="bench/soak")
    args = ap.parse_args()

    cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "--timeout", str(args.timeout),
           "--max-body", str(args.max_body_kib)] + args.serve_args.split()
    log = open(args.out + ".server.log", "w")
    srv = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=log, text=True)
    port = None
    t_end = time.time() + 120
    while time.time() < t_end:
        line = srv.stderr.readline()
        if not line:
            break
        log.write(line)
        m = re.search(r"listening on http://[^ ]*:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        print("soak: the server did not start", file=sys.stderr)
        srv.kill()
        return 1
    # the server's further stderr goes to the log (a thread drains the pipe)
    threading.Thread(target=lambda: [log.write(l) for l in srv.stderr], daemon=True).start()

    ref = {"c": [], "chat": []}
    for i in range(len(PROMPTS)):
        st, out = post(port, "/v1/completions", completion_body(i))
        ref["c"].append(json.loads(out)["choices"][0]["text"])
    for i in range(len(CHATS)):
        st, out = post(port, "/v1/chat/completions", chat_body(i))
        ref["chat"].append(json.loads(out)["choices"][0]["message"]["content"])
    cli = subprocess.run([args.bin, "run", "-m", args.model, "-p", PROMPTS[0], "-n", str(N_TOKENS), "--temp", "0",
                          "-q"], capture_output=True, text=True)
    cli_match = cli.stdout.rstrip("\n") == ref["c"][0].rstrip("\n")
    print(f"soak: port {port}; reference 0 {ref['c'][0]!r}; minfer run gives the same: {cli_match}")

    stats = Stats()
    t0 = time.time()
    stop_at = t0 + args.minutes * 60
    samples = []
    threads = [threading.Thread(target=client, args=(port, stats, ref, stop_at, k, args)) for k in range(args.clients)]
    for t in threads:
        t.start()
    while time.time() < stop_at and srv.poll() is None:
        r = rss_kib(srv.pid)
        if r is not None:
            samples.append((time.time() - t0, r / 1024.0))
        time.sleep(2)
    for t in threads:
        t.join()
    alive = srv.poll() is None
    srv.send_signal(signal.SIGTERM)
    try:
        rc = srv.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.kill()
        rc = "killed after 60 s"

    with open(args.out + ".csv", "w") as f:
        f.write("seconds,rss_mib\n")
        for t, r in samples:
            f.write(f"{t:.1f},{r:.2f}\n")
    n = len(samples)
    tenth = max(1, n // 10)
    first = max(r for _, r in samples[:tenth]) if n else 0
    last = max(r for _, r in samples[-tenth:]) if n else 0
    peak = max(r for _, r in samples) if n else 0
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 3.5))
        ax.plot([t / 60 for t, _ in samples], [r for _, r in samples])
        ax.set_xlabel("minutes")
        ax.set_ylabel("server RSS (MiB)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"minfer serve soak: {args.clients} clients, {os.path.basename(args.model)}")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.out + ".png", dpi=100)
        png = args.out + ".png"
    except ImportError:
        png = "(matplotlib absent: no plot)"

    kinds = sorted(set(stats.ok) | set(stats.bad))
    print(f"\n| kind | answered as expected | wrong |\n|---|---|---|")
    for k in kinds:
        print(f"| {k} | {stats.ok.get(k, 0)} | {stats.bad.get(k, 0)} |")
    total_ok, total_bad = sum(stats.ok.values()), sum(stats.bad.values())
    print(f"| all | {total_ok} | {total_bad} |")
    print(f"\nRSS (MiB): first tenth max {first:.1f}, last tenth max {last:.1f}, peak {peak:.1f}; "
          f"{n} samples over {args.minutes:g} min; plot {png}")
    print(f"server alive at the end: {alive}; exit status after SIGTERM: {rc}")
    for e in stats.errors[:20]:
        print("  wrong:", e)
    good = alive and rc == 0 and total_bad == 0 and last - first <= args.rss_slack and cli_match
    print("soak:", "PASS" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())

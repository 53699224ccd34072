#!/usr/bin/env python3
"""webui_test.py - the chat page of `minfer serve` (GET /, issue 56) in a real headless
browser: Chromium (Debian's chromium-headless-shell or chromium; $CHROME to choose),
driven through its DevTools protocol over a pipe (--remote-debugging-pipe: JSON
messages ending in a NUL byte on fds 3 and 4), so nothing but the standard library is
needed. Against stories260K it checks that the page loads with no console error and
asks nothing of any other host, renders Markdown (and escapes HTML), streams an
answer, stops a long answer with the stop button (the server cancels it), keeps the
conversation over a reload, asks for the key of a server with --api-key, and writes a
screenshot to $BUILD/webui.png.

Prints "RESULT webui passed=P failed=F skipped=S" (tests/run.sh). Without a browser:
a skip that says how to install one, or a failure under CI=true."""
import base64
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
BUILD_DIR = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
BIN = os.path.join(BUILD_DIR, "minfer")
SHARED = os.environ.get("MINFER_SHARED", os.path.join(ROOT, "..", "shared"))
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
BROWSERS = ["chromium-headless-shell", "chromium", "chromium-browser", "google-chrome-stable", "google-chrome"]

P = F = S = 0


def check(what, ok, detail=""):
    global P, F
    if ok:
        P += 1
    else:
        F += 1
        print(f"FAIL: {what}" + (f": {detail}" if detail else ""), file=sys.stderr)
    return ok


def finish():
    print(f"RESULT webui passed={P} failed={F} skipped={S}")
    sys.exit(1 if F else 0)


def wait_for(fn, timeout, step=0.05):
    """fn() until it returns something true, or None after timeout seconds."""
    end = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > end:
            return v
        time.sleep(step)


class Server:
    """`minfer serve` on a free port; its stderr lines in self.log."""

    def __init__(self, *args):
        cmd = [BIN, "serve", "-m", STORIES, "--host", "127.0.0.1", "--port", "0", "-t", "2", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log, self.port = [], None
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://[^ ]*:(\d+) ", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("minfer serve did not start: " + "".join(self.log))
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stderr], daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def metric(self, name):
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class Browser:
    """Headless Chromium and one page, through the DevTools protocol on a pipe."""

    def __init__(self, exe, profile):
        to_r, to_w = os.pipe()      # our commands -> its fd 3
        from_r, from_w = os.pipe()  # its fd 4 -> our events and replies

        def fds():  # (F_DUPFD: copies above 9 first, so that neither pipe end is clobbered)
            a, b = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.errlog = open(os.path.join(profile, "chromium.log"), "w")
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--window-size=1200,860", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.errlog, stderr=self.errlog, preexec_fn=fds, close_fds=False)
        os.close(to_r)
        os.close(from_w)
        self.w, self.r = to_w, from_r
        self.next_id, self.replies, self.events = 0, {}, []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.session = None
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.call(domain + ".enable")

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self.r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cv:
                    self.replies[None] = "closed"
                    self.cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self.cv:
                    if "id" in msg:
                        self.replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self.cv.notify_all()

    def call(self, method, params=None, timeout=30):
        with self.cv:
            self.next_id += 1
            i = self.next_id
        msg = {"id": i, "method": method, "params": params or {}}
        if self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        with self.cv:
            if not self.cv.wait_for(lambda: i in self.replies or None in self.replies, timeout):
                raise RuntimeError(f"{method}: no reply in {timeout} s")
            if i not in self.replies:
                raise RuntimeError(f"{method}: the browser closed the pipe")
            r = self.replies.pop(i)
        if "error" in r:
            raise RuntimeError(f"{method}: {r['error']}")
        return r.get("result", {})

    def js(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr[:80]}: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r["result"].get("value")

    def load(self, url):
        with self.cv:
            n = len(self.events)
        self.call("Page.navigate", {"url": url})
        with self.cv:
            self.cv.wait_for(lambda: any(e["method"] == "Page.loadEventFired" for e in self.events[n:]), 30)

    def console_errors(self, since=0):
        """Console errors, uncaught exceptions and the browser's own error entries (a
        failed load) after event number since."""
        out = []
        with self.cv:
            evs = self.events[since:]
        for e in evs:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append("exception: " + d.get("exception", {}).get("description", d.get("text", "")))
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append("log: " + p["entry"]["text"] + " " + p["entry"].get("url", ""))
        return out

    def requests(self):
        with self.cv:
            return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.errlog.close()


# the page, as the tests use it
LAST = "document.querySelector('#messages .msg.assistant:last-of-type')"


def set_setting(b, name, value):
    b.js("(() => { const e = document.getElementById(%s); e.value = %s; e.dispatchEvent(new Event('change')); })()"
         % (json.dumps(name), json.dumps(str(value))))


def send(b, text):
    b.js("(() => { document.getElementById('input').value = %s; document.getElementById('send').click(); })()"
         % json.dumps(text))


def last_answer(b):
    return b.js("(() => { const e = %s; return e ? { state: e.dataset.state, text: e.querySelector('.body').textContent,"
                " chunks: +(e.dataset.chunks || 0), stats: e.querySelector('.stats').textContent,"
                " error: e.querySelector('.error').textContent } : null; })()" % LAST)


def find_browser():
    exe = os.environ.get("CHROME")
    if exe:
        return shutil.which(exe) or (exe if os.access(exe, os.X_OK) else None)
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def main():
    global S
    exe = find_browser()
    if not exe:
        why = ("no Chromium to run the chat page in (looked for $CHROME, " + ", ".join(BROWSERS) +
               "); as root: apt-get install chromium-headless-shell (tools/deps.sh --test does)")
        if os.environ.get("CI") == "true":
            check(why + " (CI=true: a missing test dependency is a failure)", False)
        else:
            S += 1
            print("SKIP: " + why, file=sys.stderr)
        finish()
    if not os.path.exists(STORIES):
        S += 1
        print(f"SKIP: no {STORIES}", file=sys.stderr)
        finish()
    if not os.access(BIN, os.X_OK):
        check(f"{BIN} is built", False)
        finish()

    profile = tempfile.mkdtemp(prefix="minfer-webui-")
    # 8192 tokens a slot: stories260K seldom ends a story, so an answer of 8000 tokens
    # lasts seconds (a long answer to stop)
    srv = Server("--ctx", "8192", "--parallel", "2")
    b = None
    try:
        b = Browser(exe, profile)
        b.load(srv.url + "/")
        model = wait_for(lambda: b.js("document.getElementById('model').textContent") == "stories260K.gguf", 10)
        check("the page shows the model's name", model, b.js("document.getElementById('model').textContent"))

        # Markdown, and the model's HTML is text
        html = b.js(r"minfer.markdown('# Title\n**bold** and `code` and *it*\n\n```python\nx = 1 < 2\n```\n"
                    r"- one\n- two\n\n1. first\n\n> quoted\n\n<img src=x onerror=alert(1)> [a](https://e.org) [j](javascript:x)')")
        for want in ("<h1>Title</h1>", "<strong>bold</strong>", "<code>code</code>", "<em>it</em>",
                     "<span>python</span>", "<pre><code>x = 1 &lt; 2</code></pre>", "<ul><li>one</li><li>two</li></ul>",
                     "<ol><li>first</li></ol>", "<blockquote><p>quoted</p></blockquote>", "&lt;img src=x",
                     '<a href="https://e.org" target="_blank" rel="noopener noreferrer">a</a>'):
            check(f"markdown renders {want}", want in html, html)
        check("markdown: no tag from the text, no javascript: link", "<img" not in html and 'href="javascript' not in html,
              html)

        # a streamed answer (greedy, 48 tokens)
        set_setting(b, "temperature", 0)
        set_setting(b, "max_tokens", 48)
        set_setting(b, "system", "You are a storyteller.")
        send(b, "Once upon a time")
        a = wait_for(lambda: (lambda x: x if x and x["state"] != "streaming" else None)(last_answer(b)), 30)
        check("an answer comes", a and a["state"] == "done" and a["text"].strip(), a)
        check("the answer was streamed (several events)", a and a["chunks"] > 1, a)
        check("its token counts are shown", a and re.search(r"\d+ prompt tokens, 48 generated", a["stats"]), a)
        check("the user's message is shown",
              b.js("document.querySelector('#messages .msg.user').textContent.includes('Once upon a time')"))

        # the stop button ends a long answer: the server cancels it
        cancelled = srv.metric("minfer_requests_cancelled_total")
        set_setting(b, "max_tokens", 8000)
        send(b, "Tell me a long story")
        started = wait_for(lambda: (lambda x: x if x and x["state"] == "streaming" and len(x["text"]) > 20 else None)(
            last_answer(b)), 30)
        check("a long answer starts streaming", started, last_answer(b))
        check("the stop button shows while it streams", b.js("!document.getElementById('stop').hidden"))
        b.js("document.getElementById('stop').click()")
        a = wait_for(lambda: (lambda x: x if x and x["state"] != "streaming" else None)(last_answer(b)), 5)
        check("the stop button ends the answer", a and a["state"] == "stopped", a)
        n1 = len(a["text"]) if a else -1
        time.sleep(0.5)
        a2 = last_answer(b)
        check("nothing more arrives after stop", a2 and len(a2["text"]) == n1, (n1, a2 and len(a2["text"])))
        check("the page says it stopped", a2 and a2["stats"].startswith("stopped"), a2)
        check("Send is back", b.js("!document.getElementById('send').hidden && document.getElementById('stop').hidden"))
        got = wait_for(lambda: srv.metric("minfer_requests_cancelled_total") == cancelled + 1, 5)
        check("the server cancelled the request", got, (cancelled, srv.metric("minfer_requests_cancelled_total")))
        check("the server's access line says the client hung up",
              wait_for(lambda: any("POST /v1/chat/completions 200" in l and "(client hung up)" in l for l in srv.log), 5))

        # the conversation is in the browser's storage: a reload shows it again
        b.load(srv.url + "/")
        wait_for(lambda: b.js("document.querySelectorAll('#messages .msg').length") == 4, 5)
        check("a reload shows the conversation (4 messages)", b.js("document.querySelectorAll('#messages .msg').length") == 4)
        check("a reload keeps the conversation in the list", b.js("document.querySelectorAll('#convs li').length") == 1)
        check("a reload keeps the settings", b.js("document.getElementById('max_tokens').value") == "8000")
        shot = b.call("Page.captureScreenshot", {"format": "png"})["data"]
        path = os.path.join(BUILD_DIR, "webui.png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot))
        check(f"a screenshot in {path}", os.path.getsize(path) > 10000, os.path.getsize(path))
        print(f"webui: screenshot {path}")

        errors = b.console_errors()
        check("no console error", not errors, errors)
        others = [u for u in b.requests() if not (u.startswith(srv.url + "/") or u.startswith(("data:", "about:")))]
        check("no request leaves the server", not others, others)

        # with --api-key the page asks for the key, then works with it
        keyed = Server("--api-key", "sekret")
        try:
            since = len(b.events)
            b.load(keyed.url + "/")
            asked = wait_for(lambda: b.js("document.getElementById('key-dialog').open"), 10)
            check("with --api-key the page asks for the key", asked)
            b.js("document.getElementById('key').value = 'sekret'; document.getElementById('key-ok').click()")
            check("the model's name comes with the key",
                  wait_for(lambda: b.js("document.getElementById('model').textContent") == "stories260K.gguf", 10))
            set_setting(b, "max_tokens", 8)
            send(b, "Hello")
            a = wait_for(lambda: (lambda x: x if x and x["state"] != "streaming" else None)(last_answer(b)), 30)
            check("an answer with the key", a and a["state"] == "done" and a["text"].strip(), a)
            # the browser reports the first, keyless request's 401 as a failed load: that one only
            errors = [e for e in b.console_errors(since) if "401" not in e]
            check("no other console error with a key", not errors, errors)
        finally:
            check("the keyed server exits 0", keyed.stop() == 0)
    except Exception as e:  # a browser that cannot start, a protocol error: a failure with its reason
        check("the browser session", False, f"{type(e).__name__}: {e}")
        log = os.path.join(profile, "chromium.log")
        if os.path.exists(log):
            print(open(log, errors="replace").read()[-2000:], file=sys.stderr)
    finally:
        if b:
            b.close()
        check("the server exits 0", srv.stop() == 0)
        shutil.rmtree(profile, ignore_errors=True)
    finish()


main()

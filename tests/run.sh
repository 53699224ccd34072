#!/usr/bin/env bash
# tests/run.sh - runs every test and prints the closing "N passed, N failed" line.
# C unit tests print "RESULT name passed=P failed=F skipped=S"; shell end-to-end
# tests (tests/e2e_*.sh) print the same; python oracle tests (tests/*_test.py)
# likewise. A binary that crashes or prints no RESULT line counts as one failure.
set -u
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-python3}
# tools/deps.sh --test puts numpy/gguf in $BUILD/venv when $PYTHON lacks them (Debian's
# python3 cannot pip install: PEP 668); the python tests and the e2e scripts use it then.
if ! "$PYTHON" -c "import gguf, numpy" 2>/dev/null && [ -x "$BUILD/venv/bin/python3" ]; then
    PYTHON=$BUILD/venv/bin/python3
fi
export PYTHON
echo "python for the oracle tests: $PYTHON"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
P=0; F=0; S=0
run_one() { # name, command...
    local name=$1; shift
    local out rc
    echo "== $name"
    # stdout is captured for the RESULT line; stderr (failure details) passes through.
    out=$("$@"); rc=$?
    local line
    line=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
    printf '%s\n' "$out" | grep -v '^RESULT ' | tail -n 20
    if [ -z "$line" ]; then
        echo "FAIL $name: exit $rc, no RESULT line"; F=$((F + 1)); return
    fi
    echo "$line"
    local p f s
    p=$(sed -n 's/.*passed=\([0-9]*\).*/\1/p' <<<"$line")
    f=$(sed -n 's/.*failed=\([0-9]*\).*/\1/p' <<<"$line")
    s=$(sed -n 's/.*skipped=\([0-9]*\).*/\1/p' <<<"$line")
    P=$((P + p)); F=$((F + f)); S=$((S + ${s:-0}))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL $name: exit $rc"; F=$((F + 1)); fi
}
for t in "$BUILD"/asan/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for t in tests/e2e_*.sh; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" env BUILD="$BUILD" bash "$t"
done
for t in tests/*_test.py; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" env BUILD="$BUILD" "$PYTHON" "$t"
done
echo
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]

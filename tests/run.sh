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
VENV=${MINFER_VENV:-$BUILD/venv}  # make test SAN=1 builds in $BUILD/san and keeps the venv of $BUILD
if ! "$PYTHON" -c "import gguf, numpy, jinja2" 2>/dev/null && [ -x "$VENV/bin/python3" ]; then
    PYTHON=$VENV/bin/python3
fi
export PYTHON
echo "python for the oracle tests: $PYTHON"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# SAN=1: minfer and the test tools are sanitized too, and an e2e script may not look at
# every exit status, so sanitizer reports go to files in $SANLOG instead of stderr
# (log_path, one file per reporting process); each one found at the end is printed and
# counted as a failure.
SANLOG=
if [ "${MINFER_SAN:-}" = 1 ]; then
    SANLOG=$(mktemp -d "${TMPDIR:-/tmp}/minfer-san.XXXXXX")
    export ASAN_OPTIONS="$ASAN_OPTIONS:log_path=$SANLOG/asan:log_exe_name=1"
    export UBSAN_OPTIONS="$UBSAN_OPTIONS:log_path=$SANLOG/ubsan:log_exe_name=1"
    export LSAN_OPTIONS=${LSAN_OPTIONS:-max_leaks=10}
    echo "sanitizer reports go to $SANLOG"
fi
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
# fuzz targets replayed over their seed corpora and the inputs that once failed them
for t in "$BUILD"/asan/fuzz/replay_*; do
    [ -x "$t" ] || continue
    n=${t##*/replay_}
    run_one "$(basename "$t")" "$t" "fuzz/corpus/$n" "fuzz/regress/$n"
done
for t in tests/e2e_*.sh; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" env BUILD="$BUILD" bash "$t"
done
for t in tests/*_test.py; do
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" env BUILD="$BUILD" "$PYTHON" "$t"
done
if [ -n "$SANLOG" ]; then
    echo "== sanitizer reports"
    nrep=0
    for r in "$SANLOG"/*; do
        [ -f "$r" ] || continue
        nrep=$((nrep + 1)); F=$((F + 1))
        echo "FAIL sanitizer report $(basename "$r"):"; head -n 30 "$r"
    done
    echo "RESULT sanitizer_reports passed=$([ "$nrep" -eq 0 ] && echo 1 || echo 0) failed=$nrep skipped=0"
    [ "$nrep" -eq 0 ] && { P=$((P + 1)); rm -rf "$SANLOG"; }
fi
echo
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]

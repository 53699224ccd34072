#!/usr/bin/env bash
# tests/e2e_bench.sh - `minfer bench` end to end on a tiny synthetic model (CPU):
# -s N (N sequences decoded together): test names, n_seq, the aggregate and
# per-sequence rates, prefill per sequence; --ctx N: exactly N positions for every
# test, and a test longer than N a usage error before the model loads (issue 32);
# size and parameter count in the JSON and readable in the table; --help says all that.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/minfer
PY=${PYTHON:-python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P=0; F=0; S=0
ok() { P=$((P + 1)); }
fail() { F=$((F + 1)); echo "FAIL: $*" >&2; }
check() { local what=$1; shift; if "$@"; then ok; else fail "$what"; fi; }
expect_exit() { # expected-code description needle command...: exit code, one error line naming needle
    local want=$1 what=$2 needle=$3; shift 3
    "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
    if [ "$rc" -ne "$want" ]; then fail "$what: exit $rc, want $want ($(head -c 300 "$TMP/err"))"; return; fi
    if ! grep -q "^minfer: error: .*$needle" "$TMP/err"; then fail "$what: no 'minfer: error: ...$needle' line: $(cat "$TMP/err")"; return; fi
    ok
}

if ! "$BIN" synth --shape tiny --quant q4_k_m -o "$TMP/tiny.gguf" >/dev/null 2>"$TMP/synth.err"; then
    fail "synth tiny: $(cat "$TMP/synth.err")"
    echo "RESULT e2e_bench passed=$P failed=$F skipped=$S"
    exit 1
fi
M=$TMP/tiny.gguf

# -s without a prompt, and with one: names, fields, rates
"$BIN" bench -m "$M" -p 0,8 -n 4 -s 1,3 -r 2 --device cpu -t 1 -o json >"$TMP/s.json" 2>"$TMP/s.err"; rc=$?
check "bench -s exit 0 (got $rc: $(tail -n 2 "$TMP/s.err"))" [ "$rc" -eq 0 ]
check "bench -s json: names, n_seq, aggregate = n_seq x per sequence, n_ctx = prompt + gen" "$PY" -c "
import json
d = json.load(open('$TMP/s.json'))
assert [x['test'] for x in d] == ['tg4@s1', 'tg4@s3', 'pp8+tg4@s1', 'pp8+tg4@s3'], [x['test'] for x in d]
for x in d:
    for k in ('test', 'n_prompt', 'n_gen', 'n_seq', 'n_ctx', 'avg_ts', 'stddev_ts', 'seq_avg_ts', 'seq_stddev_ts',
              'prefill', 'pp_avg_ts', 'size', 'params'):
        assert k in x, (k, x)
    assert x['n_seq'] == int(x['test'].split('@s')[1]), x
    assert x['avg_ts'] > 0 and x['stddev_ts'] >= 0, x
    assert abs(x['seq_avg_ts'] * x['n_seq'] - x['avg_ts']) <= 1e-3 * x['avg_ts'] + 0.01, x
    assert x['n_ctx'] == x['n_prompt'] + x['n_gen'], x
    assert x['prefill'] == 'per sequence', x
    assert (x['pp_avg_ts'] > 0) == (x['n_prompt'] > 0), x
    assert x['size'] > 0 and x['params'] > 0, x
"
check "bench -s logs the prefill as one sequence after another" grep -q 'prefill 3 x 8 tokens, one sequence after another' "$TMP/s.err"

# the table: an n_seq column, both rates, a readable size
"$BIN" bench -m "$M" -p 0 -n 4 -s 2 -r 1 --device cpu -t 1 >"$TMP/s.md" 2>/dev/null
check "bench -s table has n_seq and per-sequence columns" grep -q '| test | n_seq | t/s (all sequences) | t/s (per sequence) |' "$TMP/s.md"
check "bench -s table row" grep -qE '\| tg4@s2 \| 2 \| [0-9.]+ ± [0-9.]+ \| [0-9.]+ ± [0-9.]+ \| - \|' "$TMP/s.md"
check "bench table shows the size in MiB, not 0.00 GiB" grep -qE '\| [0-9.]+ MiB \| [0-9.]+ M \|' "$TMP/s.md"

# --ctx N: exactly N for every test (plain and -s)
"$BIN" bench -m "$M" -p 8 -n 4 -r 1 --ctx 40 --device cpu -t 1 -o json >"$TMP/c.json" 2>/dev/null
"$BIN" bench -m "$M" -p 8 -n 4 -s 2 -r 1 --ctx 40 --device cpu -t 1 -o json >"$TMP/cs.json" 2>/dev/null
check "bench --ctx 40: every test in 40 positions" "$PY" -c "
import json
d = json.load(open('$TMP/c.json')) + json.load(open('$TMP/cs.json'))
assert [x['test'] for x in d] == ['pp8', 'tg4', 'pp8+tg4@s2'], d
assert all(x['n_ctx'] == 40 for x in d), d
"
# a test longer than --ctx: a usage error before the model loads (the model path does not exist)
expect_exit 1 "bench --ctx below a test" "pp512 needs 512 positions, above --ctx 100" \
    "$BIN" bench -m "$TMP/absent.gguf" -p 512 -n 4 --ctx 100
expect_exit 1 "bench -s --ctx below prompt + gen" "pp8+tg4@s2 needs 12 positions per sequence, above --ctx 10" \
    "$BIN" bench -m "$TMP/absent.gguf" -p 8 -n 4 -s 2 --ctx 10
expect_exit 1 "bench -s 0" "out of range" "$BIN" bench -m "$M" -s 0
expect_exit 1 "bench -s with -n 0" "generation length" "$BIN" bench -m "$M" -n 0 -s 2

# --help tells the truth about both
"$BIN" bench --help >"$TMP/help" 2>&1
check "bench --help: -s" grep -q -- '-s LIST' "$TMP/help"
check "bench --help: prefill per sequence" grep -q 'prefill is per sequence' "$TMP/help"
check "bench --help: --ctx exactly N" grep -q -- '--ctx N     exactly N positions' "$TMP/help"

echo "RESULT e2e_bench passed=$P failed=$F skipped=$S"
[ "$F" -eq 0 ]

#!/usr/bin/env bash
# tools/carry_model.sh - a real model onto the GPU machine, whose calls carry at most
# 64 MiB of working tree: split here into parts, then one call per part appends it to
# the file there (files under /tmp stay while the machine is warm: 30 s between calls).
#   tools/carry_model.sh split MODEL OUTDIR      OUTDIR/part-NNN of PART_MIB (default 50)
#                                                MiB each, and OUTDIR/SHA256 (of MODEL)
#   tools/carry_model.sh append PART DEST        appends one part (a file, or the one
#                                                part-* of a directory) to DEST
#   tools/carry_model.sh check DEST SHA256FILE   exit 0 when DEST has that sha256
# Per part, here: `mkdir -p build-carry && cp OUTDIR/part-NNN build-carry/` (build-*/ is
# git-ignored; a carried path replaces the whole folder on the machine), then a call with
# carry ["build-carry"] running `bash tools/carry_model.sh append build-carry /tmp/M.gguf`;
# the last call also carries SHA256 and runs `check`. Parts are appended in the order
# they arrive: send them in order, once each.
set -eu
cmd=${1:-}
case "$cmd" in
split)
    model=${2:?usage: carry_model.sh split MODEL OUTDIR}
    out=${3:?usage: carry_model.sh split MODEL OUTDIR}
    [ -f "$model" ] || { echo "carry_model: no file $model" >&2; exit 2; }
    mkdir -p "$out"
    rm -f "$out"/part-*
    split -b "$((${PART_MIB:-50} * 1024 * 1024))" -d -a 3 "$model" "$out/part-"
    sha256sum "$model" | cut -d' ' -f1 >"$out/SHA256"
    n=$(ls "$out"/part-* | wc -l)
    echo "carry_model: $model -> $n parts in $out (sha256 $(cat "$out/SHA256"))" >&2
    ;;
append)
    part=${2:?usage: carry_model.sh append PART DEST}
    dest=${3:?usage: carry_model.sh append PART DEST}
    if [ -d "$part" ]; then
        set -- "$part"/part-*
        [ "$#" -eq 1 ] && [ -f "$1" ] || { echo "carry_model: want exactly one part-* in $part, found $#" >&2; exit 2; }
        part=$1
    fi
    [ -f "$part" ] || { echo "carry_model: no part $part" >&2; exit 2; }
    mkdir -p "$(dirname "$dest")"
    cat "$part" >>"$dest"
    echo "carry_model: $(basename "$part") appended: $dest is $(stat -c %s "$dest") bytes" >&2
    ;;
check)
    dest=${2:?usage: carry_model.sh check DEST SHA256FILE}
    want=$(cat "${3:?usage: carry_model.sh check DEST SHA256FILE}")
    got=$(sha256sum "$dest" | cut -d' ' -f1)
    if [ "$got" = "$want" ]; then echo "carry_model: $dest sha256 ok" >&2; exit 0; fi
    echo "carry_model: $dest sha256 $got, want $want (a part missing, repeated or out of order)" >&2
    exit 1
    ;;
*)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac

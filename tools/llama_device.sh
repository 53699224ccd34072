#!/usr/bin/env bash
# tools/llama_device.sh - llama.cpp beside minfer on the GPU machine, for same-call
# reference figures (llama-bench, llama-batched-bench, llama-perplexity). The machine has
# no network and takes at most 64 MiB of working tree a call, and its CUDA build of
# llama.cpp (~5 minutes on 15 cores) is too large to bring back: so the source travels,
# the build runs there into /tmp (kept while the machine stays warm, 30 s between calls),
# and the benchmarks run in the next calls.
#
#   here:   tools/llama_device.sh stage [GITDIR]   the CMake subset of llama.cpp's tree
#           (GITDIR, default the fetched mirror /work/.mirror/unslothai+llama.cpp/repo) as
#           build-llama/llama-src.tar.xz (~2 MB; build-*/ is git-ignored), the tools
#           reduced to llama-bench, batched-bench, perplexity and completion (the last for
#           CPU reference tokens: -ngl 0)
#   there:  bash tools/llama_device.sh build       (carry ["build-llama"]) extract into
#           /tmp/llama and build the three tools, in the background (setsid: it survives
#           the call that started it), log /tmp/llama/build.log; then waits up to
#           LLAMA_WAIT seconds (default 540) and prints how far it got
#           bash tools/llama_device.sh wait         waits again (a later call)
#           bash tools/llama_device.sh bin          prints the directory of the binaries
#                                                   (exit 1 until the build is done)
# Or build here and carry the binaries (no device time for the build, ~40 minutes on 2 cores):
#   here:   tools/llama_device.sh pack BUILDDIR     BUILDDIR/bin's llama-bench, batched-bench,
#           perplexity and their shared libraries (a build with -DBUILD_SHARED_LIBS=ON and
#           rpath $ORIGIN; sm_90 only) as build-llama/llama-bin.tar.xz
#   there:  bash tools/llama_device.sh unpack       (carry ["build-llama"]) into $LLAMA_DIR/b/bin,
#           after which `bin` prints it (libcudart and libcublas are the machine's toolkit's)
# Flags as bench/RESULTS.md's llama.cpp rows: -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90,
# no server, tests, examples, curl or openssl, Release. The many-sequence reference of
# bench/RESULTS.md, beside `minfer bench -p 16 -n 32 -s 1,2,4,8,16,32,64`:
#   $(bash tools/llama_device.sh bin)/llama-batched-bench -m M -c 8192 -b 2048 -ub 512 \
#       -npp 16 -ntg 32 -npl 1,2,4,8,16,32,64 -fa 1
# (the (mirror's) git archive may warn of objects it lacks outside the subset: filtered)
set -eu
cmd=${1:-}
L=${LLAMA_DIR:-/tmp/llama}
case "$cmd" in
stage)
    git_dir=${2:-/work/.mirror/unslothai+llama.cpp/repo}
    [ -d "$git_dir" ] || { echo "llama_device: no git directory $git_dir (fetch unslothai/llama.cpp first)" >&2; exit 2; }
    out=build-llama
    mkdir -p "$out"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # the top-level files of ggml/src (its CMakeLists and sources) and the two backends
    gsrc=$(git --git-dir="$git_dir" ls-tree HEAD ggml/src/ | awk '$2 == "blob" {print $4}')
    # shellcheck disable=SC2086
    git --git-dir="$git_dir" archive --format=tar HEAD CMakeLists.txt cmake common src include vendor licenses LICENSE \
        ggml/CMakeLists.txt ggml/cmake ggml/include $gsrc ggml/src/ggml-cpu ggml/src/ggml-cuda tools/CMakeLists.txt \
        tools/llama-bench tools/batched-bench tools/perplexity tools/completion 2> >(grep -v 'invalid object' >&2) | tar -xf - -C "$tmp"
    # only the three tools' add_subdirectory lines stay
    sed -i -E '/add_subdirectory\((batched-bench|llama-bench|perplexity|completion)\)/!{/add_subdirectory\(/d}' "$tmp/tools/CMakeLists.txt"
    rev=$(git --git-dir="$git_dir" rev-parse --short HEAD)
    echo "$rev" >"$tmp/LLAMA_REV"
    tar -C "$tmp" -cf - . | xz -T2 -6 >"$out/llama-src.tar.xz"
    echo "llama_device: llama.cpp $rev -> $out/llama-src.tar.xz ($(du -h "$out/llama-src.tar.xz" | cut -f1))" >&2
    ;;
build)
    src=build-llama/llama-src.tar.xz
    [ -f "$src" ] || { echo "llama_device: no $src (run 'stage' here, carry build-llama)" >&2; exit 2; }
    mkdir -p "$L/src"
    tar -xJf "$src" -C "$L/src"
    rm -f "$L/done" "$L/failed"
    setsid bash -c "
        cd '$L' && t0=\$(date +%s) &&
        cmake -S src -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_CCACHE=OFF \
            -DCMAKE_BUILD_TYPE=Release >build.log 2>&1 &&
        cmake --build b -j\$(( \$(nproc) - 1 )) --target llama-bench llama-batched-bench llama-perplexity llama-completion >>build.log 2>&1 &&
        echo \$(( \$(date +%s) - t0 )) >done || touch failed" </dev/null >/dev/null 2>&1 &
    echo "llama_device: building llama.cpp $(cat "$L/src/LLAMA_REV") in $L (log $L/build.log)"
    exec "$0" wait
    ;;
wait)
    lim=${LLAMA_WAIT:-540}
    for ((i = 0; i < lim; i += 5)); do
        [ -f "$L/done" ] && { echo "llama_device: built in $(cat "$L/done") s: $L/b/bin"; exit 0; }
        [ -f "$L/failed" ] && { echo "llama_device: build failed:"; tail -n 20 "$L/build.log"; exit 1; }
        sleep 5
    done
    echo "llama_device: still building after ${lim} s: $(grep -oE '^\[ *[0-9]+%\]' "$L/build.log" | tail -n 1)"
    exit 3
    ;;
bin)
    [ -f "$L/done" ] && echo "$L/b/bin" && exit 0
    exit 1
    ;;
pack)
    b=${2:?usage: llama_device.sh pack BUILDDIR}/bin
    for f in llama-bench llama-batched-bench llama-perplexity; do
        [ -x "$b/$f" ] || { echo "llama_device: no $b/$f" >&2; exit 2; }
    done
    mkdir -p build-llama
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    cp -a "$b"/llama-bench "$b"/llama-batched-bench "$b"/llama-perplexity "$b"/lib*.so* "$tmp/"
    strip --strip-unneeded "$tmp"/llama-* "$tmp"/lib*.so.*.* 2>/dev/null || true
    tar -C "$tmp" -cf - . | xz -T2 -6 >build-llama/llama-bin.tar.xz
    echo "llama_device: $b -> build-llama/llama-bin.tar.xz ($(du -h build-llama/llama-bin.tar.xz | cut -f1))" >&2
    ;;
unpack)
    src=build-llama/llama-bin.tar.xz
    [ -f "$src" ] || { echo "llama_device: no $src (run 'pack' here, carry build-llama)" >&2; exit 2; }
    mkdir -p "$L/b/bin"
    tar -xJf "$src" -C "$L/b/bin"
    echo 0 >"$L/done"
    LD_LIBRARY_PATH="$L/b/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$L/b/bin/llama-bench" --help >/dev/null 2>&1 ||
        { echo "llama_device: llama-bench does not start:"; ldd "$L/b/bin/llama-bench" | grep 'not found'; exit 1; }
    echo "llama_device: $L/b/bin"
    ;;
*)
    sed -n '2,/^set -eu/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

#!/usr/bin/env bash
# tools/stage_device.sh [DIR] - prepares a copy of the GPU binaries for a remote GPU
# machine that gets only the working tree (no ../shared, no network, a size limit):
# builds build/h200-stage for sm_90a only and without line info (21.9 MB of minfer
# becomes 8.4 MB, bench/RESULTS.md; the tree that travels is limited to 64 MiB; STAGE_LINEINFO=1 keeps
# it, for ncu source views), then puts stripped binaries in DIR/b (minfer,
# bench/cuda_gemv, bench/sm_rates, bench/icache, tests/cuda/*), libpcre2-8 (and the server's
# libmicrohttpd, libcjson and their dependencies) in DIR/lib and stories260K (+ its greedy
# text) in DIR/models. DIR (default .device) is git-ignored. On the GPU machine:
#   bash tools/device_session.sh DIR
# STAGE_TRACE=1 also builds DIR/b/minfer.trace (-DMINFER_CUDA_TRACE=1: the block
# timeline, MINFER_CUDA_TRACE=FILE, read by bench/trace_step.py).
# The staged binaries each link the whole CUDA library (~14 MB apiece, over 100 MB in all:
# more than a call carries), so DIR also goes into build-devpack/device.tar.xz (~16 MB: the
# copies compress into one); carry ["build-devpack"] and start the call with
# `bash tools/device_session.sh unpack` (python3's tarfile: no xz binary needed there).
set -eu
DIR=${1:-.device}
ARCH=${CUDA_ARCHS:-'-gencode arch=compute_90a,code=sm_90a'}
B=build/h200-stage
LINE=
[ "${STAGE_LINEINFO:-0}" = 1 ] && LINE="-lineinfo" && B=build/h200
CUDA_TESTS=$(ls tests/cuda/test_*.c | sed "s|^tests/cuda/\(.*\)\.c$|$B/tests/cuda/\1|")
make -j"$(nproc)" BUILD=$B CUDA_ARCHS="$ARCH" \
    NVCCFLAGS="-O3 $LINE -std=c++17 $ARCH -Isrc -Xcompiler -Wall,-Wextra,-Wno-unused-parameter --expt-relaxed-constexpr" \
    $B/minfer $B/bench/cuda_gemv $B/bench/cuda_mmq $B/bench/cuda_mmf $B/bench/cuda_attn $B/bench/sm_rates $B/bench/icache $B/tools/cuda_paths $B/tools/greedy_trace $CUDA_TESTS >/dev/null
mkdir -p "$DIR/b/bench" "$DIR/b/tests/cuda" "$DIR/b/tools" "$DIR/lib" "$DIR/models"
cp $B/minfer "$DIR/b/minfer"
cp $B/bench/cuda_gemv $B/bench/cuda_mmq $B/bench/cuda_mmf $B/bench/cuda_attn $B/bench/sm_rates $B/bench/icache "$DIR/b/bench/"
cp $CUDA_TESTS "$DIR/b/tests/cuda/"
cp $B/tools/cuda_paths $B/tools/greedy_trace "$DIR/b/tools/"
strip "$DIR/b/minfer" "$DIR/b/bench/cuda_gemv" "$DIR/b/bench/cuda_mmq" "$DIR/b/bench/cuda_mmf" "$DIR/b/bench/cuda_attn" "$DIR/b/bench/sm_rates" "$DIR/b/bench/icache" "$DIR/b/tests/cuda/"* "$DIR/b/tools/"*
if [ "${STAGE_TRACE:-0}" = 1 ]; then
    # the block-timeline build (src/cuda/trace.cu) beside the normal one: DIR/b/minfer.trace
    make -j"$(nproc)" BUILD=build/h200-trace CUDA_ARCHS="$ARCH" \
        NVCCFLAGS="-O3 -std=c++17 $ARCH -Isrc -Xcompiler -Wall,-Wextra,-Wno-unused-parameter --expt-relaxed-constexpr -DMINFER_CUDA_TRACE=1" \
        build/h200-trace/minfer >/dev/null
    cp build/h200-trace/minfer "$DIR/b/minfer.trace"
    strip "$DIR/b/minfer.trace"
fi
cp -L "$(ldconfig -p | sed -n 's/.*libpcre2-8.so.0 .*=> //p' | head -n 1)" "$DIR/lib/libpcre2-8.so.0"
# minfer serve: libmicrohttpd and cJSON with everything they pull in (Debian's libmicrohttpd
# links gnutls: nettle, gmp, p11-kit, ...), about 5 MB; glibc and the C++ runtime stay the
# device's own
ldd "$DIR/b/minfer" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    case "$name" in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*|libpcre2-8.so.*) ;;
    *) cp -L "$path" "$DIR/lib/$name" ;;
    esac
done
SHARED=${MINFER_SHARED:-../shared}
for f in stories260K.gguf stories260K.greedy200.txt; do
    if [ -f "$SHARED/models/$f" ]; then cp "$SHARED/models/$f" "$DIR/models/"; fi
done
# stories260K with each RoPE scaling (tests/variants_oracle_test.py on the GPU: no gguf there)
if [ -f "$SHARED/models/stories260K.gguf" ]; then
    PY=python3; [ -x build/venv/bin/python3 ] && PY=build/venv/bin/python3
    "$PY" tests/tools/stories_variants.py "$SHARED/models/stories260K.gguf" "$DIR/models/rope" ||
        echo "stage_device: no RoPE variants (python lacks gguf: tools/deps.sh --test)" >&2
fi
du -sh "$DIR"
mkdir -p build-devpack
tar -cf - "$DIR" | xz -T"$(nproc)" -6 >build-devpack/device.tar.xz
echo "stage_device: $DIR -> build-devpack/device.tar.xz ($(du -h build-devpack/device.tar.xz | cut -f1))"

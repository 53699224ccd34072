#!/usr/bin/env bash
# tools/check_sass.sh [OBJ_DIR] - checks that the built CUDA kernels contain the
# instructions their mechanisms claim (DESIGN.md verification ladder, step 5: a kernel
# that compiles is not a kernel that uses the tensor cores):
#   kernel_mmq<...>  (mmq.cu, int8 MMA)      IMMA.16832.S8.S8 or IMMA.16816.S8.S8, and LDGSTS (cp.async)
#   kernel_gemm_f16  (mm.cu, f16 MMA)        HMMA, LDGSTS
# for every SASS architecture in the objects (sm_80, sm_90a, sm_120 in CI builds).
# OBJ_DIR: the build's src/cuda (default build/src/cuda). cuobjdump and nvdisasm come
# from the CUDA toolkit, or else from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm,
# downloaded into build/sass-tools: the toolkit of this machine may lack them).
# Prints one line per (kernel, arch) and ends "N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OBJ=${1:-build/src/cuda}
if ! command -v cuobjdump >/dev/null || ! command -v nvdisasm >/dev/null; then
    T=$ROOT/build/sass-tools
    if [ ! -x "$T/nvidia/cu13/bin/nvdisasm" ]; then
        mkdir -p "$T/whl"
        echo "check_sass: fetching cuobjdump and nvdisasm (PyPI: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)" >&2
        ${PYTHON:-python3} -m pip download --quiet --no-deps -d "$T/whl" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >&2 ||
            { echo "check_sass: error: no cuobjdump/nvdisasm and the download failed" >&2; exit 1; }
        for w in "$T"/whl/*.whl; do ${PYTHON:-python3} -m zipfile -e "$w" "$T" || exit 1; done
        chmod +x "$T"/nvidia/cu13/bin/*
    fi
    export PATH=$T/nvidia/cu13/bin:$PATH
fi
P=0
F=0
check() { # object, kernel-name pattern, required instruction pattern...
    local obj=$1 kern=$2
    shift 2
    [ -f "$obj" ] || { echo "FAIL $obj: not built"; F=$((F + 1)); return; }
    local arches
    arches=$(cuobjdump -lelf "$obj" 2>/dev/null | sed -n 's/.*\.\(sm_[0-9a-z]*\)\.cubin/\1/p' | sort -u)
    [ -n "$arches" ] || { echo "FAIL $obj: no SASS in it"; F=$((F + 1)); return; }
    for a in $arches; do
        # the SASS of every function whose name matches, for this architecture
        local sass
        sass=$(cuobjdump -sass -arch "$a" "$obj" 2>/dev/null |
            awk -v k="$kern" '/Function :/ { on = index($0, k) > 0 } on')
        local nfun
        nfun=$(printf '%s\n' "$sass" | grep -c 'Function :')
        if [ "$nfun" -eq 0 ]; then
            echo "FAIL $kern $a: no such function"; F=$((F + 1)); continue
        fi
        local pat ok=1 what=""
        for pat in "$@"; do
            local c
            c=$(printf '%s\n' "$sass" | grep -cE "$pat")
            what="$what $pat=$c"
            [ "$c" -gt 0 ] || ok=0
        done
        if [ $ok = 1 ]; then
            echo "ok $kern $a ($nfun functions):$what"; P=$((P + 1))
        else
            echo "FAIL $kern $a ($nfun functions):$what"; F=$((F + 1))
        fi
    done
}
check "$OBJ/mmq.o" kernel_mmqI 'IMMA\.168(32|16)\.S8\.S8' 'LDGSTS'
check "$OBJ/mm.o" kernel_gemm_f16 'HMMA' 'LDGSTS'
echo "$P passed, $F failed"
[ "$F" -eq 0 ]

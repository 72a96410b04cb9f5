#!/usr/bin/env bash
# kernels/run_labs.sh [build|run] - the CUDA kernel labs: build every kernels/*.cu
# (nvcc, sm_90 by default: CUDA_ARCH=sm_80 ... to change), and with `run` execute
# each one; every lab validates against the CPU reference in gpt2rt.h, checks two
# runs are bitwise equal, times itself, and exits non-zero on a failure.
# Logs go to build/lab_<name>.log; the last line says how many passed.
set -u
cd "$(dirname "$0")/.."
mode=${1:-run}
arch=${CUDA_ARCH:-sm_90}
mkdir -p build
pass=0 fail=0
for f in kernels/*.cu; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .cu)
    if ! nvcc -std=c++17 -O3 -arch="$arch" -Xcompiler -Wall,-Wextra,-Werror --Werror all-warnings \
            -o "build/lab_$name" "$f" -lcublasLt > "build/lab_$name.log" 2>&1; then
        echo "FAIL build $f"; tail -20 "build/lab_$name.log"; fail=$((fail + 1)); continue
    fi
    [ "$mode" = run ] || { echo "ok   built $f"; pass=$((pass + 1)); continue; }
    if "./build/lab_$name" > "build/lab_$name.log" 2>&1; then
        echo "ok   $name: $(tail -1 "build/lab_$name.log")"; pass=$((pass + 1))
    else
        echo "FAIL $name (exit $?):"; grep -E "FAIL|error" "build/lab_$name.log" | head -20; fail=$((fail + 1))
    fi
done
echo "kernel labs: ${pass} passed, ${fail} failed"
[ "$fail" -eq 0 ]

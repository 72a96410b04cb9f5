#!/usr/bin/env bash
# kernels/emu/run.sh - make test-emu: the header's CUDA backend compiled by a host C++17
# compiler against the emulator (kernels/emu/include), under AddressSanitizer and UBSan,
# run on the CPU. One line per check ("ok   ..." / "FAIL ..."), then
#   emulated: K of N kernels
#   EMU: P passed, F failed, S skipped   (the programs' own checks, forward order, included)
# Steps:
#   1. test_emu (the emulator's own checks) with g++, and with clang++ where installed,
#      under the forward and a random fiber order: bitwise the same device-to-host bytes
#   2. drive.cpp: whole training paths through gpt2rt_create / gpt2rt_step with the CUDA
#      backend against the CPU backend, and the ops no path launches, under two fiber
#      orders (forward, reverse): its checks must pass, and everything the device handed
#      the host must be bitwise identical across the orders (EMU_DIGEST); its data-parallel
#      part once more with the header's NCCL communicator (-DGPT2RT_NCCL); then the labs
#      named in EMU_LABS likewise (none by default: the labs' checks take minutes each)
#   3. coverage: every __global__ of gpt2rt.h must have run in two distinct launches (two
#      launch shapes, or one fixed shape in two problems) inside step 2 (EMU_LAUNCH_LOG);
#      a kernel that did not is counted as missing
# Usage: kernels/emu/run.sh [quick]   quick: step 1 only. Logs in build/emu_*.log.
# Environment: CXX (default g++), EMU_LABS (space-separated lab:mode, e.g. train_step:checks).
set -u
cd "$(dirname "$0")/../.."
mkdir -p build
passed=0 failed=0 skipped=0
ok()   { passed=$((passed + 1)); echo "ok   $1"; }
bad()  { failed=$((failed + 1)); echo "FAIL $1"; }
skip() { skipped=$((skipped + 1)); echo "skip $1"; }

CXX=${CXX:-g++}
# the fibers' context switch is written for x86-64 (kernels/emu/include/gpt2rt_emu_core.h)
if [ "$(uname -m)" != x86_64 ]; then
    skip "make test-emu: the emulator's fiber switch is x86-64 only; this machine is $(uname -m)"
    echo "emulated: 0 of 0 kernels"; echo "EMU: 0 passed, 0 failed, 1 skipped"; exit 0
fi
if ! command -v "$CXX" >/dev/null 2>&1 || ! echo 'int main(){}' | "$CXX" -std=c++17 -fsanitize=address,undefined -x c++ - -o build/emu_probe >/dev/null 2>&1; then
    skip "make test-emu: no C++17 compiler with ASan+UBSan ($CXX; apt-get install g++)"
    echo "emulated: 0 of 0 kernels"; echo "EMU: 0 passed, 0 failed, 1 skipped"; exit 0
fi
FLAGS="-std=c++17 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
       -Wall -Wextra -Werror -Wno-unknown-pragmas -Wno-unused-function
       -Ikernels/emu/include -include gpt2rt_emu.h"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# build NAME COMPILER SOURCE [extra flags]: build/emu_NAME
build() {
    local name=$1 cxx=$2 src=$3; shift 3
    local extra=
    $cxx --version 2>/dev/null | grep -q clang || extra=-fno-extern-tls-init # g++ 12: a block-scope extern thread_local array
    if $cxx $FLAGS $extra "$@" -x c++ "$src" -o build/emu_$name -lm -lpthread > build/emu_build_$name.log 2>&1; then return 0; fi
    bad "build $name with $cxx (build/emu_build_$name.log):"; head -20 build/emu_build_$name.log | sed 's/^/    /'
    return 1
}

# build_bg NAME COMPILER SOURCE [extra flags]: build's compile started in the background;
# build_done NAME: waits for it and reports as build does
build_bg() {
    local name=$1; rm -f build/emu_$name.rc
    ( build "$@" > /dev/null; echo $? > build/emu_$name.rc ) &
}
build_done() {
    local name=$1
    while [ ! -f build/emu_$name.rc ] && [ -n "$(jobs -rp)" ]; do wait -n 2>/dev/null || true; done
    [ "$(cat build/emu_$name.rc 2>/dev/null)" = 0 ] && return 0
    bad "build $name (build/emu_build_$name.log):"; head -20 build/emu_build_$name.log | sed 's/^/    /'
    return 1
}

# run_twice NAME BINARY ARGS...: forward and a second order, at the same time (two
# processes); both must exit 0 with the same digest
run_twice() {
    local name=$1 bin=$2 second=${SECOND_ORDER:-reverse}; shift 2
    local rc1 rc2 p1 p2
    EMU_ORDER=forward EMU_DIGEST=build/emu_$name.fwd.digest EMU_LAUNCH_LOG=${LAUNCH_LOG:-} \
        timeout 900 "$bin" "$@" > build/emu_$name.fwd.log 2>&1 & p1=$!
    EMU_ORDER=$second EMU_DIGEST=build/emu_$name.2nd.digest \
        timeout 900 "$bin" "$@" > build/emu_$name.2nd.log 2>&1 & p2=$!
    wait $p1; rc1=$?
    wait $p2; rc2=$?
    # the program's own checks count too: its last line says "N passed, M failed"
    local inner
    inner=$(tail -1 build/emu_$name.fwd.log | grep -oE '[0-9]+ passed, [0-9]+ failed' | grep -oE '[0-9]+' | tr '\n' ' ')
    if [ -n "$inner" ]; then set -- $inner; passed=$((passed + $1)); failed=$((failed + $2)); fi
    if [ $rc1 -eq 0 ]; then ok "$name (forward order): $(tail -1 build/emu_$name.fwd.log)"
    else bad "$name (forward order) exit $rc1 (build/emu_$name.fwd.log):"
         grep -E "FAIL|ERROR|error|emu:" build/emu_$name.fwd.log | head -15 | sed 's/^/    /'; fi
    if [ $rc2 -eq 0 ]; then ok "$name ($second order): $(tail -1 build/emu_$name.2nd.log)"
    else bad "$name ($second order) exit $rc2 (build/emu_$name.2nd.log):"
         grep -E "FAIL|ERROR|error|emu:" build/emu_$name.2nd.log | head -15 | sed 's/^/    /'; fi
    if [ -s build/emu_$name.fwd.digest ] && cmp -s build/emu_$name.fwd.digest build/emu_$name.2nd.digest; then
        ok "$name: forward and $second orders bitwise identical ($(cut -d' ' -f2 build/emu_$name.fwd.digest) bytes to the host)"
    else bad "$name: forward and $second orders differ: $(cat build/emu_$name.fwd.digest 2>/dev/null) vs $(cat build/emu_$name.2nd.digest 2>/dev/null)"; fi
}

# step 2's two builds start first, in the background: they take minutes, the rest of
# the script runs beside them
if [ "${1:-}" != quick ]; then
    build_bg drive "$CXX" kernels/emu/drive.cpp
    build_bg drive_nccl "$CXX" kernels/emu/drive.cpp -DGPT2RT_NCCL -include nccl.h
fi

# 1. the emulator's own checks
for cxx in "$CXX" clang++; do
    if ! command -v $cxx > /dev/null 2>&1; then skip "test_emu with $cxx: not installed"; continue; fi
    [ "$cxx" = clang++ ] && [ "$CXX" = clang++ ] && continue
    tag=test_emu_$(basename $cxx | tr -c 'a-z0-9\n' '_')
    build $tag $cxx kernels/emu/test_emu.cpp -include nccl.h || continue
    SECOND_ORDER=random:12345 run_twice $tag build/emu_$tag
done

if [ "${1:-}" != quick ]; then
    # 2. whole training paths and the ops against the CPU backend (drive.cpp), then any
    #    labs named in EMU_LABS (e.g. "train_step:checks": minutes each under ASan)
    LAUNCH_LOG=build/emu_launches.log
    rm -f $LAUNCH_LOG
    if build_done drive; then
        LAUNCH_LOG=$LAUNCH_LOG run_twice drive build/emu_drive
        grep -E "^(ok|FAIL|skip) " build/emu_drive.fwd.log | sed 's/^/    /'
        skipped=$((skipped + $(grep -c "^skip " build/emu_drive.fwd.log)))
    fi
    # the header's NCCL communicator (GPT2RT_NCCL: rank threads, one NCCL group) on the
    # emulator's NCCL: data parallel and ZeRO-1 again
    if build_done drive_nccl; then
        LAUNCH_LOG=$LAUNCH_LOG run_twice drive_nccl build/emu_drive_nccl parallel
    fi
    for lab in ${EMU_LABS:-}; do
        name=${lab%%:*} mode=${lab#*:}
        [ "$mode" = "$lab" ] && mode=
        build lab_$name "$CXX" kernels/$name.cu || continue
        LAUNCH_LOG=$LAUNCH_LOG run_twice lab_$name build/emu_lab_$name $mode
    done
fi

if [ "${1:-}" = quick ]; then echo "EMU: $passed passed, $failed failed, $skipped skipped"; [ "$failed" -eq 0 ]; exit $?; fi

# 3. coverage of the header's kernels
perl -0777 -ne 'while (/__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s*)?(?:void\s+)?(\w+)\s*\(/g) { print "$1\n" }' \
    gpt2rt.h | sort -u > build/emu_kernels.txt
total=$(wc -l < build/emu_kernels.txt) covered=0 missing=""
for k in $(cat build/emu_kernels.txt); do
    shapes=$(sort -u build/emu_launches.log 2>/dev/null | grep -c "^$k ")
    if [ "${shapes:-0}" -ge 2 ]; then covered=$((covered + 1)); else missing="$missing $k(${shapes:-0})"; fi
done
if [ -n "$missing" ]; then bad "kernels without an emulated test at two shapes or problems (distinct launches):$missing"
else ok "every __global__ of gpt2rt.h ran in two launch shapes or problems, inside checks against the CPU"; fi
echo "emulated: $covered of $total kernels"
echo "EMU: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

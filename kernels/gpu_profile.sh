#!/usr/bin/env bash
# kernels/gpu_profile.sh - where a training step's time goes on the GPU, kernel by kernel:
# Nsight Compute (ncu) times every kernel of one GPT-2 124M bf16 step (build/lab_train_step
# profile B CHUNK: 3 warm steps, then one step between cudaProfilerStart and Stop), at B = 8
# with the whole-batch classifier and with classifier_chunk = 1024; then the
# matrix-product lab's timing with the algorithm cuBLASLt chose for each shape
# (build/lab_matmul). tools/gpu_profile_table.py sums the kernels by name.
# Usage: bash kernels/gpu_profile.sh [OUT_DIR]   (default $OUT, else build/gpu_profile)
# Writes OUT_DIR/profile_b8.csv, profile_b8_chunk1024.csv (ncu's raw page),
# profile.md (the tables), matmul_time.log. Kernels are timed one at a time with the clocks
# and caches as the card runs them (--clock-control none --cache-control none): a kernel's
# time here is its time alone, so the sum slightly exceeds a step's wall time where the
# driver overlaps launches. Environment: GPU_PROFILE_RUNS ("8:0 8:1024", B:CHUNK),
# GPU_PROFILE_S (each run's limit, 40 s), GPU_PROFILE_MATMUL_S (40 s), NCU (the profiler;
# default: ncu on PATH, else the newest /opt/nvidia/nsight-compute/*/ncu, else
# /usr/local/cuda/bin/ncu).
set -u
cd "$(dirname "$0")/.."
out=${1:-${OUT:-build/gpu_profile}}
mkdir -p "$out"
B=${BENCH_GPU_BIN:-build}
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "gpu-profile: skipped: no NVIDIA GPU on this machine (nvidia-smi finds none)"
    exit 0
fi
ncu=${NCU:-$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | sort -V | tail -1)}
[ -z "$ncu" ] && [ -x /usr/local/cuda/bin/ncu ] && ncu=/usr/local/cuda/bin/ncu
if [ -z "$ncu" ] || [ ! -x "$ncu" ]; then
    echo "gpu-profile: skipped: Nsight Compute (ncu) not found (PATH, /opt/nvidia/nsight-compute, /usr/local/cuda/bin)"
else
    echo "gpu-profile: $ncu ($("$ncu" --version 2>/dev/null | tail -1))"
    for run in ${GPU_PROFILE_RUNS:-8:0 8:1024}; do
        b=${run%%:*} chunk=${run##*:}
        name=profile_b$b$([ "$chunk" != 0 ] && echo "_chunk$chunk")
        echo "gpu-profile: B=$b classifier_chunk=$chunk -> $out/$name.csv"
        timeout --kill-after=10 "${GPU_PROFILE_S:-40}" "$ncu" --profile-from-start off --clock-control none \
            --cache-control none --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread \
            --csv --page raw --print-units base "$B/lab_train_step" profile "$b" "$chunk" \
            > "$out/$name.csv" 2> "$out/$name.err"
        rc=$?
        echo "    exit $rc; $(grep -c '^"' "$out/$name.csv" 2>/dev/null) csv lines; $(grep 'tokens_per_s' "$out/$name.csv" | cut -c1-160)"
        [ $rc = 0 ] || tail -5 "$out/$name.err"
    done
    python3 tools/gpu_profile_table.py "$out"/profile_*.csv > "$out/profile.md" 2>&1
    cat "$out/profile.md"
fi
if [ ! -x "$B/lab_matmul" ]; then
    echo "gpu-profile: $B/lab_matmul is missing (make gpu-build): no algorithm table"
    exit 0
fi
echo "gpu-profile: $B/lab_matmul (validation, then the timing with each shape's algorithm)"
timeout --kill-after=10 "${GPU_PROFILE_MATMUL_S:-40}" "$B/lab_matmul" > "$out/matmul_time.log" 2>&1
echo "    exit $?"
sed -n '/timing, BT=/,$p' "$out/matmul_time.log" | grep -v 'bitwise equal: PASS' | head -80

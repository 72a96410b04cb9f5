#!/usr/bin/env bash
# kernels/test_gpu.sh - make test-gpu: the whole GPU suite in one call, on a machine with
# an NVIDIA GPU. Without one (nvidia-smi lists no GPU) it prints one skip line, exits 0.
# In order, one line per check ("ok   ..." or "FAIL ..."), then a line that splits the
# passes into GPU checks and CPU-backend-under-nvcc checks, then "N passed, N failed":
#   1. the binaries: make gpu-build (a no-op when the prebuilt ones are up to date)
#   2. driver and device (nvidia-smi, then build/lab_device runs a kernel)
#   3. attention lab   4. matrix-product lab (prints which cuBLASLt fallbacks were taken)
#   5. the other op labs   6. end to end: the step lab's checks, the time-series lab (patch
#      model and dropout against the CPU backend); then the CPU suites built by nvcc, run
#      with no device visible: checks of the CPU backend under nvcc, not of the GPU
#   7. compute-sanitizer memcheck and racecheck on a few small training steps, and memcheck on
#      a few data-parallel steps (two ranks on GPU 0: kernels/data_parallel.cu)
# Logs: build/gpu_<check>.log. Designed for under 8 minutes on an H100; each run has a
# time limit so that a hang costs minutes, not the session.
# Environment (for the dry-run test in tests/run.sh): TEST_GPU_BIN (default build) where
# the binaries are, TEST_GPU_NO_BUILD=1 skips step 1, COMPUTE_SANITIZER the tool.
set -u
cd "$(dirname "$0")/.."
B=${TEST_GPU_BIN:-build}
mkdir -p build
passed=0 failed=0 skipped=0 cpu_nvcc=0 compiled=0

ok()  { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
skip() { skipped=$((skipped + 1)); echo "skip $1"; }
finish() {
    echo "of the passes: $((passed - cpu_nvcc)) on the GPU, ${cpu_nvcc} CPU-backend-under-nvcc (no GPU visible); ${compiled} build(s), not counted; ${skipped} skipped"
    echo "${passed} passed, ${failed} failed"; [ "$failed" -eq 0 ]; exit $?
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -eq 0 ]; then
    echo "test-gpu: skipped: no NVIDIA GPU on this machine (nvidia-smi finds none)"
    exit 0
fi

if [ "${TEST_GPU_NO_BUILD:-0}" != 1 ]; then
    # in parallel: the labs are independent nvcc runs of a minute or more each
    if make -j"$(nproc 2>/dev/null || echo 4)" --no-print-directory gpu-build > build/gpu_build.log 2>&1; then compiled=$((compiled + 1)); echo "cc   gpu-build (binaries up to date)"
    else bad "gpu-build (build/gpu_build.log):"; tail -30 build/gpu_build.log; finish; fi
fi

# run NAME LIMIT_S BINARY ARGS...: the binary must exit 0 within LIMIT_S seconds; its last
# line is quoted, and on failure the lines that say FAIL or error
run() {
    local name=$1 limit=$2 bin=$3; shift 3
    local log=build/gpu_$name.log rc
    if [ ! -x "$bin" ]; then bad "$name: $bin is missing (make gpu-build)"; return 1; fi
    timeout --kill-after=10 "$limit" "$bin" "$@" > "$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then ok "$name: $(tail -1 "$log")"; return 0; fi
    case $rc in
        124|137) bad "$name: over its ${limit} s limit ($log)" ;;
        77) bad "$name: exit 77, the binary found no CUDA device ($log)" ;;
        *) bad "$name: exit $rc ($log)" ;;
    esac
    if grep -qE "FAIL|error|Error" "$log"; then grep -E "FAIL|error|Error" "$log" | head -20 | sed 's/^/    /'
    else tail -5 "$log" | sed 's/^/    /'; fi
    return 1
}

# 2. driver and device
echo "GPU: $(nvidia-smi -L 2>/dev/null | head -1)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>/dev/null | sed 's/^/    /'
if ! run device 60 $B/lab_device; then
    echo "test-gpu: the device check failed: the other checks would only repeat it"
    finish
fi

# 3. attention, 4. matrix products
run attention 120 $B/lab_attention
run matmul 180 $B/lab_matmul quick
if [ -f build/gpu_matmul.log ]; then
    grep "fused epilogues unavailable" build/gpu_matmul.log | sed 's/^ */    cuBLASLt fallbacks: /'
fi

# 5. the other op labs
for lab in encoder layernorm gelu classifier bias_grad adamw global_norm; do
    run "$lab" 120 $B/lab_$lab
done
for f in kernels/*.cu; do # a lab added without a line above still runs
    n=$(basename "$f" .cu)
    case " device attention matmul encoder layernorm gelu classifier bias_grad adamw global_norm train_step timeseries " in
        *" $n "*) ;;
        *) run "$n" 120 $B/lab_$n ;;
    esac
done

# 6. end to end
run train_step 300 $B/lab_train_step checks
run timeseries 120 $B/lab_timeseries # the patch model and dropout against the CPU backend
# the CPU suites compiled by nvcc: with no device visible, AUTO picks the CPU backend they
# test, so these check the CPU backend as nvcc's host compiler builds it, not the GPU
for t in test_hf_parity test_props test_memory; do
    CUDA_VISIBLE_DEVICES= run "cpu_backend_under_nvcc_${t}" 180 $B/${t}_nvcc && cpu_nvcc=$((cpu_nvcc + 1))
done

# 7. compute-sanitizer on a few small steps (every kernel of the driver runs)
cs=${COMPUTE_SANITIZER:-}
if [ -z "$cs" ]; then
    for c in compute-sanitizer /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
        if command -v "$c" >/dev/null 2>&1; then cs=$(command -v "$c"); break; fi
    done
fi
# sanitize TOOL LOG LABEL BINARY ARGS...: a finding fails; a sanitizer that could not run
# (not installed, or refused by the driver or the machine: no summary line, and its own
# "=========" error in the log) is a named skip, not a failure of gpt2rt
sanitize() {
    local tool=$1 log=$2 label=$3; shift 3
    local rc summary
    timeout --kill-after=10 150 "$cs" --tool "$tool" --error-exitcode 3 "$@" > "$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    if [ $rc -eq 0 ]; then ok "compute-sanitizer $tool, $label: ${summary:-no summary line}"
    elif [ -z "$summary" ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && grep -qE "^========= (Error|Internal|.*(not supported|permission|refused|Unable))" "$log"; then
        skip "compute-sanitizer $tool, $label: the sanitizer could not run here: $(grep -E '^=========' "$log" | head -1)"
    else
        bad "compute-sanitizer $tool, $label (exit $rc, $log): ${summary:-}"
        grep -E "^========= (Invalid|Error|Race|.*hazard)" "$log" | head -10 | sed 's/^/    /'
    fi
}
if [ -z "$cs" ]; then
    skip "compute-sanitizer not found (it ships with the CUDA toolkit: cuda-sanitizer-<version>); memcheck and racecheck did not run"
else
    for tool in memcheck racecheck; do
        sanitize $tool build/gpu_sanitize_$tool.log "small training steps" $B/lab_train_step sanitize
    done
    # data parallel's shard arithmetic (two ranks on GPU 0, ZeRO-1 in bf16, accumulation)
    sanitize memcheck build/gpu_sanitize_dp.log "data-parallel steps" $B/lab_data_parallel sanitize
fi
finish

#!/usr/bin/env bash
# kernels/bench_gpu.sh - make bench-gpu: GPT-2 124M training steps (T=1024, bf16) of gpt2rt
# and of its anchors in one call on one GPU, then the causal attention alone (B=8 and 16,
# T=1024, NH=12, HS=64, bf16, forward and backward) of gpt2rt and of PyTorch's SDPA backends,
# then two tables (tools/bench_gpu_table.py).
# Without a GPU (nvidia-smi lists none) it prints one skip line and exits 0.
#   1. the binaries: make gpu-build (a no-op when the prebuilt ones are up to date)
#   2. gpt2rt: build/lab_train_step time (B=8, 16, the largest within 40 GiB, recompute,
#      accumulation, classifier_chunk=1024 at B=8 and 16, B=8 and 16 again)
#   3. attention: build/lab_attention time B (gpt2rt's kernels, at each batch), then
#      tools/bench_attn_torch.py (F.scaled_dot_product_attention under each of the flash,
#      cuDNN and efficient backends, both batches in one process); right after gpt2rt's
#      steps, before the anchors, as the attention targets need both and they are short
#   4. llm.c's train_gpt2cu with cuDNN flash attention, then with its own attention
#      kernels, at B=8 and 16, 25 steps each on data/tinyshakespeare_train.bin (llm.c's
#      uint16 token format), binaries from make gpu-anchors (build/anchors/{cudnn,plain});
#      the cuDNN build finds libcudnn.so.9 in python3's nvidia.cudnn package, else through
#      the loader's cache or /usr/local/cuda/lib64, else it is a named skip
#   5. PyTorch (tools/bench_torch_gpu.py), torch.compile at B=8 and 16, one process each
#      (BENCH_GPU_TORCH_MODES="compile eager" adds eager); it runs between llm.c's cuDNN
#      and plain builds, so that a caller's time limit cuts the least needed run
#   6. aLLM4TS stage 1 at its scripts' shape in bf16 (build/bench_ts_nvcc), between the two
#      llm.c builds
#   7. the tables, also written to build/bench_gpu_table.md
# Each run has a time limit, and nvidia-smi samples memory.used beside each anchor run.
# Logs: build/bench_gpu_*.log. Sized for about 5 minutes on an H100 (an estimate: not
# yet run there as a whole), most of it torch.compile.
# Environment (for the dry-run test in tests/run.sh): BENCH_GPU_BIN (default build) where
# the gpt2rt binaries are, BENCH_GPU_ANCHORS (default build/anchors) llm.c's binaries,
# BENCH_GPU_LOGS (default build) where the logs go, BENCH_GPU_NO_BUILD=1 skips step 1,
# BENCH_GPU_TORCH (default "python3 tools/bench_torch_gpu.py") the PyTorch command,
# BENCH_GPU_ATTN_TORCH (default "python3 tools/bench_attn_torch.py") PyTorch's attention,
# BENCH_GPU_CUDNN_DIR the folder of libcudnn.so.9 ("none": not found), BENCH_GPU_BATCHES
# (default "8 16").
set -u
cd "$(dirname "$0")/.."
root=$PWD
B=${BENCH_GPU_BIN:-build}
A=${BENCH_GPU_ANCHORS:-build/anchors}
L=${BENCH_GPU_LOGS:-build}
TORCH=${BENCH_GPU_TORCH:-python3 tools/bench_torch_gpu.py}
ATTN_TORCH=${BENCH_GPU_ATTN_TORCH:-python3 tools/bench_attn_torch.py}
batches=${BENCH_GPU_BATCHES:-8 16}
modes=${BENCH_GPU_TORCH_MODES:-compile}
L=$(mkdir -p "$L" && cd "$L" && pwd)
[ -d "$A" ] && A=$(cd "$A" && pwd)

if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "bench-gpu: skipped: no NVIDIA GPU on this machine (nvidia-smi finds none)"
    exit 0
fi
rm -f "$L"/bench_gpu_*.log "$L"/bench_gpu_*.mem

{
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "CUDA: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'nvcc not found'), driver's $(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1)"
    echo "PyTorch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not importable')"
} > "$L/bench_gpu_env.log"
cat "$L/bench_gpu_env.log"

if [ "${BENCH_GPU_NO_BUILD:-0}" != 1 ]; then
    if ! make -j"$(nproc 2>/dev/null || echo 4)" --no-print-directory gpu-build > "$L/bench_gpu_build.log" 2>&1; then
        echo "bench-gpu: make gpu-build failed ($L/bench_gpu_build.log):"; tail -20 "$L/bench_gpu_build.log"; exit 1
    fi
fi

# timed LIMIT_S LOG COMMAND...: runs it with a time limit and nvidia-smi sampling memory.used
# into LOG's .mem; a run over its limit ends its log with a line that says so
timed() {
    local limit=$1 log=$2 rc smi; shift 2
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "${log%.log}.mem" 2>/dev/null &
    smi=$!
    timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
    rc=$?
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
    case $rc in 124|137) echo "over its ${limit} s limit" >> "$log" ;; esac
    echo "    $(basename "$log"): exit $rc, $(tail -1 "$log" | cut -c1-150)"
    return $rc
}

# 2. gpt2rt
echo "gpt2rt: $B/lab_train_step time"
if [ -x "$B/lab_train_step" ]; then timed 150 "$L/bench_gpu_gpt2rt.log" "$B/lab_train_step" time
else echo "SKIP: $B/lab_train_step is missing (make gpu-build)" > "$L/bench_gpu_gpt2rt.log"; fi

# 3. attention alone: gpt2rt's lab at each batch, then PyTorch's SDPA backends
for b in $batches; do
    echo "gpt2rt attention: $B/lab_attention time $b"
    log=$L/bench_gpu_attn_gpt2rt_b$b.log
    if [ -x "$B/lab_attention" ]; then timed 40 "$log" "$B/lab_attention" time "$b"
    else echo "SKIP: $B/lab_attention is missing (make gpu-build)" > "$log"; fi
done
echo "PyTorch attention: $ATTN_TORCH --batches $batches"
PYTHONUNBUFFERED=1 timed 60 "$L/bench_gpu_attn_torch.log" $ATTN_TORCH --batches $batches

# 4. llm.c: the cuDNN build needs libcudnn.so.9 at run time
if [ -n "${BENCH_GPU_CUDNN_DIR:-}" ]; then
    cudnn_dir=$BENCH_GPU_CUDNN_DIR cudnn_from=BENCH_GPU_CUDNN_DIR
    [ "$cudnn_dir" = none ] && cudnn_dir=
else
    cudnn_dir=$(python3 -c 'import nvidia.cudnn as c, os; d = os.path.join(list(c.__path__)[0], "lib"); print(d if os.path.isdir(d) else "")' 2>/dev/null)
    cudnn_from="python3's nvidia.cudnn"
    if [ -z "$cudnn_dir" ]; then
        cudnn_dir=$(ldconfig -p 2>/dev/null | awk '/libcudnn\.so\.9 /{print $NF; exit}' | xargs -r dirname)
        cudnn_from="the loader's cache"
    fi
    if [ -z "$cudnn_dir" ] && [ -e /usr/local/cuda/lib64/libcudnn.so.9 ]; then
        cudnn_dir=/usr/local/cuda/lib64 cudnn_from=/usr/local/cuda/lib64
    fi
fi
data=$root/data/tinyshakespeare_train.bin
llmc() { # llmc VARIANT: llm.c's train_gpt2cu at each batch
    local v=$1 b log bin lib
    for b in $batches; do
        log=$L/bench_gpu_llmc_${v}_b$b.log
        bin=$A/$v/train_gpt2cu
        if [ ! -x "$bin" ]; then echo "SKIP: $bin is missing (make gpu-anchors)" > "$log"; echo "llm.c $v B=$b: $(cat "$log")"; continue; fi
        if [ "$v" = cudnn ] && [ -z "$cudnn_dir" ]; then
            echo "SKIP: libcudnn.so.9 not found (not in python3's nvidia.cudnn, the loader's cache or /usr/local/cuda/lib64)" > "$log"
            echo "llm.c $v B=$b: $(cat "$log")"; continue
        fi
        lib=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        if [ "$v" = cudnn ]; then lib=$cudnn_dir:$lib; echo "llm.c $v B=$b (libcudnn.so.9 from $cudnn_from: $cudnn_dir)"
        else echo "llm.c $v B=$b"; fi
        rm -rf "$L/llmc_out"
        (cd "$A/$v" && timed 60 "$log" env LD_LIBRARY_PATH="$lib" ./train_gpt2cu -i "$data" -j "$data" \
            -e d12 -b "$b" -t 1024 -x 25 -v 1000 -s 1000 -h 0 -r 0 -z 0 -o "$L/llmc_out")
    done
}

# 5. PyTorch
torch_runs() {
    local m b
    for m in $modes; do
        for b in $batches; do
            echo "PyTorch $m B=$b"
            PYTHONUNBUFFERED=1 timed 150 "$L/bench_gpu_torch_${m}_b$b.log" $TORCH --batch "$b" --mode "$m"
        done
    done
}

# the anchors in the order of what the targets need most: a run cut short by a caller's
# time limit loses the last
# aLLM4TS stage 1 at its scripts' shape (docs/timeseries.md's allm4ts preset): 6 blocks of
# width 768, 12 heads, 2048 univariate series of 1024 steps (64 patches of 16) a step,
# dropout 0.2, everything trained, bf16 (10 steps) then fp32 (3); each step copies its
# windows from the host
allm4ts() {
    local log=$L/bench_gpu_allm4ts.log
    echo "aLLM4TS stage 1: $B/bench_ts_nvcc -backend cuda -precision bf16"
    if [ ! -x "$B/bench_ts_nvcc" ]; then echo "SKIP: $B/bench_ts_nvcc is missing (make gpu-build)" > "$log"; return; fi
    local shape="-head next-patch -lookback 1024 -patch 16 -stride 16 -layers 6 -heads 12 -width 768 -batch 2048
        -channels 1 -freeze 0 -dropout 0.2 -head-dropout 0"
    timed 90 "$log" "$B/bench_ts_nvcc" -backend cuda -precision bf16 $shape -steps 10
    echo "aLLM4TS stage 1: $B/bench_ts_nvcc -backend cuda -precision fp32 (3 steps)"
    timed 60 "$L/bench_gpu_allm4ts_fp32.log" "$B/bench_ts_nvcc" -backend cuda -precision fp32 $shape -steps 3
}

llmc cudnn
torch_runs
allm4ts
llmc plain

# 7. the tables
echo
python3 tools/bench_gpu_table.py "$L" | tee "$L/bench_gpu_table.md"

#!/usr/bin/env bash
# kernels/gpu_session.sh - everything a session with a lent GPU runs, in one call of about
# 10 minutes at most: unpack the binaries built here without a GPU (make gpu-pack:
# build/gpu_carry.tar.xz), record the machine, make test-gpu, make bench-gpu (gpt2rt, llm.c
# with and without cuDNN, torch.compile, one table), then the kernel profile of a step
# (kernels/gpu_profile.sh). Every log goes to $OUT (or the folder given as $1), flat:
# session.log (this script's output, the table last), env.log, test_gpu.log, bench_gpu.log,
# bench_table.md, logs.tar.xz (every build/gpu_*.log and build/bench_gpu_* file), profile.log
# and gpu_profile.sh's files (profile.md, profile_*.csv, matmul_time.log).
# The call, from the repository root of a checkout where make gpu-pack ran (docs/cuda.md):
#   run(command="bash kernels/gpu_session.sh", carry=["build/gpu_carry.tar.xz"], timeout_s=600)
# Environment: GPU_SESSION_PACK (default build/gpu_carry.tar.xz), GPU_SESSION_TEST_S and
# GPU_SESSION_BENCH_S and GPU_SESSION_PROFILE_S (the three steps' limits, 170, 320 and 100 s; a
# profile limit of 0 skips the profile); make test-gpu's and make
# bench-gpu's own variables pass through (the dry run in tests/run.sh uses them).
# Each step has a time limit; a step over it is named and the next one runs. The packed
# binaries are reused when the sources they were built from are unchanged (their sha256
# sums travel in the pack); a changed source is rebuilt by make on the GPU machine's cores,
# which costs minutes of device time.
set -u
cd "$(dirname "$0")/.."
out=${1:-${OUT:-build/gpu_session}}
mkdir -p "$out" build
out=$(cd "$out" && pwd)
t0=$SECONDS

say() { echo "[$((SECONDS - t0)) s] $*"; }

# step NAME LIMIT_S LOG COMMAND...: one step under a time limit, its output to LOG and here.
# The step runs in a session of its own: the suites' runs sit in process groups of their
# own (each under its own limit), so a step stopped at its limit could leave one running
# on the GPU beside the next step; what is left of that session is ended, by process id
step() {
    local name=$1 limit=$2 log=$3 rc pid sid; shift 3
    say "$name (limit ${limit} s)"
    : > "$log"
    setsid timeout --kill-after=15 "$limit" "$@" > "$log" 2>&1 < /dev/null &
    pid=$!
    tail --pid=$pid -n +1 -f "$log" &
    sid=$(ps -o sid= -p $pid 2>/dev/null | tr -d ' ')
    wait $pid; rc=$?
    if [ -n "$sid" ] && [ "$sid" = "$pid" ]; then
        ps -o pid= -s "$sid" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    fi
    wait 2>/dev/null # the tail, once it has printed the last lines
    case $rc in
        0) say "$name: done" ;;
        124|137) say "$name: OVER ITS ${limit} s LIMIT, stopped" ;;
        *) say "$name: exit $rc" ;;
    esac
}

main() {
# 1. the carried binaries
pack=${GPU_SESSION_PACK:-build/gpu_carry.tar.xz}
if [ -f "$pack" ]; then
    tar xJf "$pack"
    # make compares times: the unpacked binaries are newer than every source, then each
    # source whose sha256 differs from the pack's is touched so that make rebuilds what
    # depends on it
    tar tJf "$pack" | grep -v '/$' | xargs touch
    changed=$(sha256sum -c build/gpu_sources.sha256 2>/dev/null | awk -F': ' '$2 != "OK" {print $1}')
    if [ -n "$changed" ]; then
        say "sources changed since make gpu-pack (make rebuilds what uses them):" $changed
        sleep 1; touch $changed
    else say "unpacked $pack: $(tar tJf "$pack" | grep -vc '/$') files, built from these sources"; fi
else
    say "no $pack (make gpu-pack where nvcc is, carry it): make gpu-build builds here"
fi

# 2. the machine
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo 'not a git checkout') $(git status --porcelain 2>/dev/null | grep -q . && echo '(with changes)')"
    echo "uname: $(uname -r), $(nproc) CPUs"
    nvidia-smi -L 2>&1
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1
    nvidia-smi 2>&1 | grep -o 'CUDA Version: [0-9.]*' | head -1
    nvcc --version 2>&1 | tail -2
    python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' 2>&1 | tail -1
    python3 -c 'import nvidia.cudnn as c; print("nvidia.cudnn at", list(c.__path__)[0])' 2>&1 | tail -1
    ldconfig -p 2>/dev/null | grep -E 'libcudnn\.so\.9 |libcublasLt\.so\.|libnvrtc\.so\.|libnccl\.so\.' | head -6
    echo "libraries the loader does not find (bench-gpu puts cuDNN's folder on llm.c's LD_LIBRARY_PATH):"
    for f in build/lab_* build/*_nvcc build/anchors/*/train_gpt2cu; do
        [ -x "$f" ] && ldd "$f" 2>/dev/null | grep 'not found' | sed "s#^#$f: #"
    done
    command -v compute-sanitizer || echo "compute-sanitizer not on PATH"
} > "$out/env.log" 2>&1
say "machine:"; sed 's/^/    /' "$out/env.log"

# 3. the suite, 4. the benchmark (a rebuild, if any, happens in the first)
step "make test-gpu" "${GPU_SESSION_TEST_S:-170}" "$out/test_gpu.log" make --no-print-directory test-gpu
step "make bench-gpu" "${GPU_SESSION_BENCH_S:-320}" "$out/bench_gpu.log" make --no-print-directory bench-gpu

# 5. the logs and the table (assembled again from the logs, so that a bench stopped at its
# limit still gives the rows it finished), before the profile, which is the first to go
# when the call runs out of time
logs=${BENCH_GPU_LOGS:-build}
tar cJf "$out/logs.tar.xz" build/gpu_*.log "$logs"/bench_gpu_* 2>/dev/null
python3 tools/bench_gpu_table.py "$logs" > "$out/bench_table.md" 2>&1

# 6. where a step's time goes, kernel by kernel (ncu), and cuBLASLt's algorithms
if [ "${GPU_SESSION_PROFILE_S:-100}" = 0 ]; then say "kernel profile: skipped (GPU_SESSION_PROFILE_S=0)"
else step "kernel profile" "${GPU_SESSION_PROFILE_S:-100}" "$out/profile.log" bash kernels/gpu_profile.sh "$out"; fi
say "session done; logs in $out"
grep -E "passed, [0-9]+ failed$" "$out/test_gpu.log" | tail -1 | sed 's/^/test-gpu: /'
cat "$out/bench_table.md"
}

main 2>&1 | tee "$out/session.log"

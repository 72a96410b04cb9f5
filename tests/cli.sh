#!/usr/bin/env bash
# tests/cli.sh - the command lines of the examples and tools, as a user meets them:
# --help, strict numbers, data/ from any directory, files that are not files, the
# two-device modes. Run from the repository root (tests/run.sh calls it); builds into
# build/cli_* with ${CC:-cc} and ${CFLAGS:--O2}; one line per check (ok / FAIL / skip),
# then "CLI: N passed, N failed, N skipped"; exit 1 when a check failed. Every run is
# tiny (the whole script: well under 2 minutes on 2 cores).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
B=build
mkdir -p $B
passed=0 failed=0 skipped=0
CC=${CC:-cc}
CFLAGS=${CFLAGS:--O2}

ok()   { passed=$((passed + 1)); echo "ok   $1"; }
bad()  { failed=$((failed + 1)); echo "FAIL $1"; }
skip() { skipped=$((skipped + 1)); echo "skip $1"; }

# ---- build: every program at once (two cores), each into build/cli_NAME; build/ is
# one level below the repository, so build/../data is what a program run elsewhere finds
declare -A SRC=(
    [minimal]=examples/minimal.c [train_text]=examples/train_text.c [timeseries]=examples/timeseries.c
    [gpt2rt-tok]=tools/gpt2rt_tok.c [gpt2rt-mem]=tools/gpt2rt_mem.c [bench_cpu]=tools/bench_cpu.c
    [bench_memory]=tools/bench_memory.c [bench_tok]=tools/bench_tok.c [bench_gen]=tools/bench_gen.c
    [bench_ts]=tools/bench_ts.c [gpt2rt-caps]=tools/gpt2rt_caps.c [ts_baselines]=tools/ts_baselines.c
    [bench_threads]=tools/bench_threads.c
)
PROGS="minimal train_text timeseries gpt2rt-tok gpt2rt-mem bench_cpu bench_memory bench_tok bench_gen bench_ts gpt2rt-caps ts_baselines bench_threads"
jobs_max=$(nproc 2>/dev/null || echo 2)
build_one() { # NAME OUT EXTRA-FLAGS...
    local name=$1 out=$2; shift 2
    # shellcheck disable=SC2086
    $CC -std=c11 -Wall -Wextra -Werror $CFLAGS -fopenmp "$@" -o "$out" "${SRC[$name]}" -lm > "$out.log" 2>&1
    echo $? > "$out.rc"
}
for p in $PROGS; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.2; done
    build_one "$p" "$B/cli_$p" &
done
while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.2; done
build_one gpt2rt-mem "$B/cli_gpt2rt-mem-nopng" -DGPT2RT_MEM_NO_PNG &
wait
built() { [ "$(cat "$B/cli_$1.rc" 2>/dev/null)" = 0 ]; }
for p in $PROGS gpt2rt-mem-nopng; do
    if built "$p"; then ok "build $p ($CC $CFLAGS, warnings as errors)"
    else bad "build $p"; head -20 "$B/cli_$p.log"; fi
done

# ---- --help and -h: usage on stdout, exit 0, nothing on stderr
for p in $PROGS; do
    built "$p" || { skip "$p --help: not built"; continue; }
    good=1
    for h in --help -h; do
        out=$("$B/cli_$p" $h 2>"$B/cli_err.log"); rc=$?
        if [ $rc -ne 0 ] || ! echo "$out" | grep -qi '^usage' || [ -s "$B/cli_err.log" ]; then good=0; fi
    done
    if [ $good = 1 ]; then ok "$p --help and -h: usage on stdout, exit 0"
    else bad "$p --help / -h (exit $rc)"; echo "$out" | head -3; head -3 "$B/cli_err.log"; fi
done

# ---- strict numbers: PROG FLAG VALUE [more args]: exit 2 and one line naming the flag and the value
refuse() {
    local p=$1 flag=$2 value=$3; shift 3
    built "$p" || { skip "$p $flag '$value': not built"; return; }
    local out rc
    out=$(timeout 20 "$B/cli_$p" "$@" "$flag" "$value" 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -qF -- "$flag" &&
       echo "$out" | grep -qF -- "'$value'"; then
        ok "$p $flag '$value' refused: $out"
    else bad "$p $flag '$value' (exit $rc, want 2 and one line naming flag and value)"; echo "$out" | head -3; fi
}
refuse train_text --layers abc
refuse train_text --lr abc
refuse train_text --lr -1
refuse train_text --lr 0
refuse train_text --temperature abc
refuse train_text --minutes nan
refuse train_text --batch 0
refuse train_text --steps 99999999999999999999   # beyond long: strtol's ERANGE
refuse train_text --steps 10x
refuse train_text --seed -1                      # strtoull would wrap it to 2^64 - 1
refuse train_text --top-p 2
refuse train_text --devices 9
refuse train_text -gen 1.5
refuse timeseries --horizon abc
refuse timeseries --lr nan --horizon 2
refuse timeseries --lr inf --horizon 2
refuse timeseries --batch 0 --horizon 2
refuse timeseries --dropout 1 --horizon 2
refuse timeseries --epochs 1e99 --horizon 2      # once cast to int: undefined behaviour
refuse timeseries --seed -3 --horizon 2
refuse timeseries --blend-linear 2 --horizon 2
refuse bench_cpu -steps abc
refuse bench_memory -batch 1.5
refuse bench_gen -new 0
refuse bench_ts -dropout inf
refuse bench_ts --threads 1e3
refuse bench_ts -backend gpu
refuse bench_ts -precision fp8
refuse bench_tok --seconds nan
refuse bench_threads -ms x
refuse bench_threads -gap -1
refuse gpt2rt-mem --batch 0x10

# ---- gpt2rt-mem's time models: the CPU model at given rates, a custom card, vs 1
if built gpt2rt-mem; then
    M="$B/cli_gpt2rt-mem"
    cpu_s() { "$M" --model 124M --seq 256 --batch 8 --backend cpu --cpu-speed 60,300,8 "$@" 2>&1 |
              sed -n 's/^step time (a model of this machine.*): \([0-9.]*\) s,.*/\1/p'; }
    base=$(cpu_s); full=$(cpu_s --recompute full); acc=$(cpu_s --accum 4); ch=$(cpu_s --classifier-chunk 256)
    if [ -n "$base" ] && awk -v b="$base" -v f="$full" -v a="$acc" -v c="$ch" \
         'BEGIN { exit !(b > 0 && f > b && a > b && c > b) }'; then
        ok "gpt2rt-mem --backend cpu: a step time at --cpu-speed 60,300,8 ($base s); full recompute ($full), B/4 x 4 ($acc) and a 256-token classifier chunk ($ch) cost more"
    else bad "gpt2rt-mem --backend cpu step times: base '$base' full '$full' accum '$acc' chunk '$ch'"; fi
    out=$("$M" --model 124M --backend cpu --cpu-speed 60,300,8 --json 2>&1)
    if echo "$out" | grep -q '"cpu": true, "threads": [0-9]*, "is_model": true, "matmul_flops": 6e+10'; then
        ok "gpt2rt-mem --backend cpu --json: the time object names the CPU model and its rates"
    else bad "gpt2rt-mem --backend cpu --json: $(echo "$out" | grep -o '"time": [^}]*' | head -c 200)"; fi
    refuse gpt2rt-mem --cpu-speed 0,300,8 --backend cpu
    refuse gpt2rt-mem --gpu-peak 989,3350 --gpu h100
    refuse gpt2rt-mem --gpu-peak 989 --gpu custom
    out=$("$M" --model 124M --gpu custom --budget 48GiB 2>&1)
    if echo "$out" | grep -q '^step time: not modelled for a custom card without its peak (--gpu-peak'; then
        ok "gpt2rt-mem --gpu custom without --gpu-peak: the time is not modelled, and says what would model it"
    else bad "gpt2rt-mem --gpu custom: $(echo "$out" | grep 'step time')"; fi
    a=$("$M" --model 124M --gpu custom --gpu-peak 989.4,3350 --precision bf16 --budget 80GiB 2>&1 | grep -o '): [0-9.]* s,')
    b=$("$M" --model 124M --gpu h100 --precision bf16 --budget 80GiB 2>&1 | grep -o '): [0-9.]* s,')
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "gpt2rt-mem --gpu custom --gpu-peak 989.4,3350 in bf16: an H100's time ($a)"
    else bad "gpt2rt-mem custom card with an H100's peak: '$a' vs '$b'"; fi
    one=$("$M" --model 124M --batch 16 --gpu h100 --precision bf16 2>&1 | sed -n 's/^step time (a model.*): \([0-9.]*\) s,.*/\1/p')
    two=$("$M" --model 124M --batch 16 --devices 2 --gpu h100 --precision bf16 2>&1 | grep -o '^  [0-9.]* s were it to fit' | grep -o '[0-9.]*' | head -1)
    if [ -n "$one" ] && [ "$one" = "$two" ]; then ok "gpt2rt-mem --devices 2: vs 1 is over the tool's own one-device plan of the flags ($one s)"
    else bad "gpt2rt-mem vs 1: one device '$one', the table's '$two'"; fi
fi

# ---- gpt2rt-mem --timeline: 2L+3 points, none over the plan, the activations rising through
# the forward and falling through the backward; full recompute and a chunked classifier lower the peak
if built gpt2rt-mem; then
    tl() { "$B/cli_gpt2rt-mem" --model 124M --seq 256 --batch 4 --timeline "$@" 2>&1; }
    out=$(tl)
    rows=$(echo "$out" | grep -cE '^  (start|forward [0-9]+|classifier|backward [0-9]+|update) ')
    acts=$(echo "$out" | awk '$1 == "forward" || $1 == "backward" { print $6 }' | tr '\n' ' ')
    if [ "$rows" = 27 ] && echo "$out" | grep -q '^  peak: .* within the plan' &&
       awk -v a="$acts" 'BEGIN { n = split(a, x, " "); if (n != 24) exit 1; for (i = 2; i <= 12; i++) if (x[i] + 0 <= x[i-1] + 0) exit 1;
            for (i = 14; i <= 24; i++) if (x[i] + 0 >= x[i-1] + 0) exit 1 }'; then
        ok "gpt2rt-mem --timeline (124M): 27 points, the peak within the plan, activations up 12 layers and down 12"
    else bad "gpt2rt-mem --timeline: $rows points, activations '$acts'"; echo "$out" | grep peak; fi
    for flags in "--recompute full" "--recompute selective" "--classifier-chunk 256" "--precision bf16 --recompute full --checkpoint-every 3" "--devices 2"; do
        # shellcheck disable=SC2086
        if tl $flags | grep -q '^  peak: .* within the plan'; then ok "gpt2rt-mem --timeline $flags: no point over the plan"
        else bad "gpt2rt-mem --timeline $flags: $(tl $flags | grep -E 'peak|not shown')"; fi
    done
    p0=$(tl | sed -n 's/^  peak: \([0-9.]*\) MiB.*/\1/p'); p1=$(tl --recompute full | sed -n 's/^  peak: \([0-9.]*\) MiB.*/\1/p')
    p2=$(tl --classifier-chunk 256 | sed -n 's/^  peak: \([0-9.]*\) MiB.*/\1/p')
    if awk -v a="$p0" -v b="$p1" -v c="$p2" 'BEGIN { exit !(b < a && c < a) }'; then
        ok "gpt2rt-mem --timeline: full recompute ($p1 MiB) and a 256-token chunk ($p2) lower the peak ($p0)"
    else bad "gpt2rt-mem --timeline peaks: none $p0, full $p1, chunk $p2"; fi
fi

# ---- data/ from any directory (the program's own ../data)
TINY="--layers 2 --heads 2 --width 32 --seq 16 --batch 4 --gen 0"
if built train_text; then
    out=$(cd /tmp && "$ROOT/$B/cli_train_text" $TINY --steps 1 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^training on 120000 tokens, validating on 32768' &&
       echo "$out" | grep -q 'step    1  val loss'; then ok "train_text run from /tmp finds data/ (120000 + 32768 tokens) and trains"
    else bad "train_text from /tmp (exit $rc)"; echo "$out" | tail -3; fi
fi
if built timeseries; then
    out=$(cd /tmp && "$ROOT/$B/cli_timeseries" --horizon 96 --max-steps 1 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^data .*data/ETTh2\.csv: 17420 rows, 7 channels, ETTh borders'; then
        ok "timeseries run from /tmp reads data/ETTh2.csv by default (17420 rows, 7 channels)"
    else bad "timeseries from /tmp (exit $rc)"; echo "$out" | head -3; fi
    # the held-out file through --preset cpu: 3 steps, then every validation and test window scored
    out=$("$ROOT/$B/cli_timeseries" --data "$ROOT/data/tmy3_greensboro.csv" --horizon 96 --epochs 1 --steps-per-epoch 3 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^data .*: 8760 rows, 8 channels, 70/10/20 borders; windows train 5701, validation 781, test 1657' &&
       echo "$out" | tail -1 | grep -q '^test mse [0-9.]* mae [0-9.]* windows 1657$'; then ok "timeseries --preset cpu on data/tmy3_greensboro.csv: 70/10/20, scores all 1657 test windows"
    else bad "timeseries on data/tmy3_greensboro.csv (exit $rc)"; echo "$out" | tail -3; fi
    # the linear map beside the model: its validation MSE from the normal equations
    # equals the model's epoch 0 (out_layer zero, the map's offset added) scored window by
    # window; both printed to 4 decimals (each within 5e-5) from sums of the same float
    # forecasts (relative rounding ~1e-6 of 0.2), so they differ by at most 1.1e-4. The
    # blend's weight minimises an exact quadratic over [0, 1], whose ends are the model
    # and the linear map: its val MSE is at most the smaller of theirs (plus 1.1e-4, the
    # same rounding)
    out=$("$ROOT/$B/cli_timeseries" --horizon 96 --epochs 1 --steps-per-epoch 3 --linear-residual 1 --blend-linear 1 2>&1); rc=$?
    lin=$(echo "$out" | sed -n 's/^linear map: ridge [0-9.e+]* (chosen on validation), val mse \([0-9.]*\),.*/\1/p')
    ep0=$(echo "$out" | sed -n 's/^epoch  0 .*val mse \([0-9.]*\)  best$/\1/p')
    bl=$(echo "$out" | sed -n 's/^blend: weight [0-9.]* on the linear map (chosen on validation), val mse \([0-9.]*\) (model \([0-9.]*\), linear \([0-9.]*\))$/\1 \2 \3/p')
    if [ $rc -eq 0 ] && [ -n "$lin" ] && [ -n "$ep0" ] && [ -n "$bl" ] &&
       awk -v a="$lin" -v b="$ep0" -v bl="$bl" 'BEGIN { split(bl, v, " "); m = v[2] < v[3] ? v[2] : v[3];
           d = a - b; exit !(d < 1.1e-4 && -d < 1.1e-4 && v[1] <= m + 1.1e-4) }' &&
       echo "$out" | tail -1 | grep -q '^test mse [0-9.]* mae [0-9.]* windows 2785$'; then
        ok "timeseries --linear-residual 1 --blend-linear 1: epoch 0 val $ep0 == the linear map's $lin; blend val <= min(model, linear) ($bl)"
    else bad "timeseries --linear-residual / --blend-linear (exit $rc): lin '$lin' epoch 0 '$ep0' blend '$bl'"; echo "$out" | tail -4; fi
    out=$("$ROOT/$B/cli_timeseries" --stage pretrain --save "$B/cli_never" --blend-linear 1 2>&1); rc=$?
    if [ $rc -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q -- '--blend-linear 1 must be 0' &&
       [ ! -e "$B/cli_never" ]; then ok "timeseries --stage pretrain --blend-linear 1 refused: $out"
    else bad "timeseries --stage pretrain --blend-linear 1 (exit $rc, want 2 and one line)"; echo "$out" | head -3; fi
fi
if built gpt2rt-tok; then
    out=$(cd /tmp && echo "hello world" | "$ROOT/$B/cli_gpt2rt-tok" encode 2>&1); rc=$?
    # GPT-2's ids: "hello" 31373, " world" 995, "\n" 198
    if [ $rc -eq 0 ] && [ "$out" = "31373 995 198" ]; then ok "gpt2rt-tok run from /tmp finds data/ (hello world -> 31373 995 198)"
    else bad "gpt2rt-tok from /tmp (exit $rc): $out"; fi
fi
if built bench_tok; then
    out=$(cd /tmp && "$ROOT/$B/cli_bench_tok" --seconds 0 2>&1); rc=$?
    # data/tinyshakespeare_train.bin holds 120000 ids: decoded and encoded again, the same count
    if [ $rc -eq 0 ] && echo "$out" | grep -q 'bytes -> 120000 tokens'; then ok "bench_tok run from /tmp decodes data/'s tokens and encodes them back (120000)"
    else bad "bench_tok from /tmp (exit $rc)"; echo "$out" | head -3; fi
fi

# ---- a directory or a FIFO as the input file: named at once, never opened (a FIFO's open blocks)
fifo=$B/cli_fifo
rm -f $fifo; mkfifo $fifo 2>/dev/null
not_a_file() { # PROG FLAG PATH WORD [args]
    local p=$1 flag=$2 path=$3 word=$4; shift 4
    built "$p" || { skip "$p $flag $path: not built"; return; }
    local out rc
    out=$(timeout 10 "$B/cli_$p" "$@" "$flag" "$path" 2>&1); rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$out" | grep -qF -- "$flag $path: is $word"; then ok "$p $flag $word refused at once: $out"
    else bad "$p $flag $path (exit $rc$([ $rc -eq 124 ] && echo ': blocked 10 s'))"; echo "$out" | tail -2; fi
}
not_a_file train_text --text "$B" "a directory"
not_a_file timeseries --data "$B" "a directory" --horizon 2
if [ -p $fifo ]; then
    not_a_file train_text --text $fifo "a FIFO"
    not_a_file timeseries --data $fifo "a FIFO" --horizon 2
else skip "FIFO checks: mkfifo failed"; skip "FIFO checks: mkfifo failed"; fi
rm -f $fifo

# ---- timeseries: fewer test windows than a batch (series_small.csv: 5 test windows at L 4, H 2)
# the model alone: the fixture's rows are straight lines, which --preset cpu's linear map fits
# exactly, leaving the model (and the two-device checks below) nothing to learn
SMALL="--data tests/fixtures/series_small.csv --horizon 2 --lookback 4 --patch 2 --stride 2 --heads 2 --width 8 --linear-residual 0 --blend-linear 0"
if built timeseries; then
    out=$("$B/cli_timeseries" $SMALL --layers 1 --batch 8 --epochs 1 --steps-per-epoch 1 2>&1); rc=$?
    if [ $rc -eq 0 ] && ! echo "$out" | grep -qi nan &&
       echo "$out" | grep -q '^test (drop last): no score: the 5 test windows are fewer than one batch of 8' &&
       echo "$out" | tail -1 | grep -Eq '^test mse [0-9.]+ mae [0-9.]+ windows 5$'; then
        ok "timeseries with 5 test windows < batch 8: drop-last says why it has no score, no nan; every window scored"
    else bad "timeseries few test windows (exit $rc)"; echo "$out" | tail -3; fi
fi

# ---- gpt2rt-mem --capabilities: gpt2rt-caps's table (docs/support.md), byte for byte
if built gpt2rt-mem && built gpt2rt-caps; then
    "$B/cli_gpt2rt-caps" > $B/cli_caps.md 2>&1
    "$B/cli_gpt2rt-mem" --capabilities > $B/cli_mem_caps.md 2> $B/cli_err.log; rc=$?
    if [ $rc -eq 0 ] && [ -s $B/cli_caps.md ] && cmp -s $B/cli_caps.md $B/cli_mem_caps.md && [ ! -s $B/cli_err.log ]; then
        ok "gpt2rt-mem --capabilities: gpt2rt-caps's table, the same $(wc -c < $B/cli_caps.md) bytes, exit 0"
    else bad "gpt2rt-mem --capabilities (exit $rc)"; head -3 $B/cli_mem_caps.md $B/cli_err.log; fi
fi

# ---- gpt2rt-mem --png built without stb: the table all the same, then one line
if built gpt2rt-mem-nopng; then
    rm -f $B/cli_nopng.png
    out=$("$B/cli_gpt2rt-mem-nopng" --model 124M --seq 1024 --sweep batch=1,2 --png $B/cli_nopng.png 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ "$(echo "$out" | grep -Ec '^[12] +0 ')" -eq 2 ] && [ ! -e $B/cli_nopng.png ] &&
       echo "$out" | tail -1 | grep -q "^--png $B/cli_nopng.png: not written: .*without stb (apt-get install libstb-dev"; then
        ok "gpt2rt-mem without stb, --sweep --png: both sweep rows, then one line naming libstb-dev, exit 0, no file"
    else bad "gpt2rt-mem without stb --png (exit $rc)"; echo "$out" | tail -4; fi
fi

# ---- the README's aLLM4TS stage-1 worked example: fp32 on one 24 GiB card is 40.36 GiB
# (16.36 over); the figures are the plan's arithmetic, exact on any machine
if built gpt2rt-mem-nopng; then
    out=$("$B/cli_gpt2rt-mem-nopng" --preset allm4ts-stage1 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -Eq '^  fp32 +40\.36 .*NO, over by +16\.36 GiB$'; then
        ok "gpt2rt-mem --preset allm4ts-stage1: fp32 needs 40.36 GiB, 16.36 over a 24 GiB card (the README's figure)"
    else bad "gpt2rt-mem --preset allm4ts-stage1 (exit $rc)"; echo "$out" | head -12; fi
fi

# ---- aLLM4TS's two stages from the command line: pretrain saves, finetune starts from it
if built timeseries; then
    rm -rf $B/cli_a4
    out=$("$B/cli_timeseries" --preset allm4ts --stage pretrain --data tests/fixtures/series_small.csv --lookback 8 \
          --patch 2 --stride 2 --layers 1 --heads 2 --width 8 --batch 2 --epochs 1 --steps-per-epoch 3 --save $B/cli_a4 2>&1) &&
        out2=$("$B/cli_timeseries" --preset allm4ts --stage finetune --init $B/cli_a4 --data tests/fixtures/series_small.csv \
               --horizon 2 --lookback 4 --patch 2 --stride 2 --batch 2 --epochs 1 --steps-per-epoch 3 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^aLLM4TS stage 1: ' && [ -s $B/cli_a4/model.safetensors ] &&
       echo "$out2" | tail -1 | grep -Eq '^test mse [0-9]+\.[0-9]+ mae [0-9]+\.[0-9]+ windows 5$'; then
        ok "timeseries --preset allm4ts: --stage pretrain saves, --stage finetune --init of it scores every test window"
    else bad "timeseries --preset allm4ts stages (exit $rc)"; echo "$out" | tail -3; echo "${out2:-}" | tail -3; fi
    # the same two stages on 2 CPU ranks (data parallel, the batch of 2 split 1 + 1)
    rm -rf $B/cli_a4dp
    out=$("$B/cli_timeseries" --preset allm4ts --stage pretrain --data tests/fixtures/series_small.csv --lookback 8 \
          --patch 2 --stride 2 --layers 1 --heads 2 --width 8 --batch 2 --epochs 1 --steps-per-epoch 3 --save $B/cli_a4dp \
          --devices 2 --parallel dp 2>&1) &&
        out2=$("$B/cli_timeseries" --preset allm4ts --init $B/cli_a4dp --data tests/fixtures/series_small.csv --horizon 2 \
               --lookback 4 --patch 2 --stride 2 --batch 2 --epochs 1 --steps-per-epoch 3 --devices 2 --parallel dp 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ -s $B/cli_a4dp/model.safetensors ] &&
       [ "$(printf '%s\n%s\n' "$out" "$out2" | grep -Ec '^dp over 2 CPU devices: 2 (series|windows) a step, 1 on each device$')" -eq 2 ] &&
       [ "$(printf '%s\n%s\n' "$out" "$out2" | grep -Ec '^allocated \(gpt2rt_plan_allocated\), MiB: device 0 [0-9.]+, device 1 [0-9.]+$')" -eq 2 ] &&
       echo "$out2" | tail -1 | grep -Eq '^test mse [0-9]+\.[0-9]+ mae [0-9]+\.[0-9]+ windows 5$'; then
        ok "timeseries --preset allm4ts --devices 2 --parallel dp: both stages on 2 ranks, each device's plan, every test window scored"
    else bad "timeseries --preset allm4ts --parallel dp (exit $rc)"; echo "$out" | tail -3; echo "${out2:-}" | tail -3; fi
fi

# ---- two devices on the CPU: train_text
# losses of the printed "step N  loss X" lines, one per line
losses() { awk '$1 == "step" && $3 == "loss" {print $4}'; }
if built train_text; then
    one=$("$B/cli_train_text" $TINY --steps 2 2>&1); rc1=$?
    [ $rc1 -eq 0 ] || { bad "train_text 1 device (exit $rc1)"; echo "$one" | tail -3; }
    for mode in dp zero1 split; do
        out=$("$B/cli_train_text" $TINY --steps 2 --devices 2 --parallel $mode 2>&1); rc=$?
        eval "out_$mode=\$out"
        if [ $rc -eq 0 ] && echo "$out" | grep -Eq '^MiB +device 0 +device 1$' &&
           echo "$out" | grep -Eq '^total +[0-9.]+ +[0-9.]+$' &&
           echo "$out" | grep -Eq '^allocated \(gpt2rt_plan_allocated\), MiB: device 0 [0-9.]+, device 1 [0-9.]+$' &&
           [ "$(echo "$out" | losses | wc -l)" -eq 2 ]; then
            ok "train_text --devices 2 --parallel $mode: 2 steps, each device's planned and allocated MiB, a loss each step"
        else bad "train_text --parallel $mode (exit $rc)"; echo "$out" | tail -4; fi
    done
    # data parallel == one device of the whole batch up to fp32 reassociation: the loss is
    # a mean over B*T = 64 token losses (~10.8), summed per rank then combined, so it may
    # move by n*u*|L| = 64 * 2^-24 * 11 = 4.2e-5; step 1 follows one AdamW update whose
    # first step is lr * g / (|g| + eps) ~ lr * sign(g), so the ~1e-7 relative gradient
    # difference moves the weights by ~lr * 1e-7 (negligible). Printed to 4 decimals
    # (0.5e-4 each side): tolerance 1e-4 + 4.2e-5 -> 1.5e-4.
    a=$(echo "$one" | losses | tr '\n' ' '); b=$(echo "$out_dp" | losses | tr '\n' ' ')
    if [ -n "$a" ] && awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); if (n != 2 || m != 2) exit 1;
         for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1.5e-4) exit 1 } }'; then
        ok "train_text dp over 2 devices: step 0 and 1 losses ($b) == one device of batch 4 ($a) within 1.5e-4"
    else bad "train_text dp losses ($b) vs one device ($a)"; fi
    # ZeRO-1 updates the same weights bitwise (gpt2rt.h, DATA PARALLEL); layer split is
    # bitwise one device (LAYER SPLIT): the printed losses are the same strings
    if [ -n "$b" ] && [ "$(echo "$out_zero1" | losses | tr '\n' ' ')" = "$b" ]; then ok "train_text zero1 losses == dp losses, bitwise ($b)"
    else bad "train_text zero1 losses ($(echo "$out_zero1" | losses | tr '\n' ' ')) != dp ($b)"; fi
    if [ -n "$a" ] && [ "$(echo "$out_split" | losses | tr '\n' ' ')" = "$a" ]; then ok "train_text split losses == one device, bitwise ($a)"
    else bad "train_text split losses ($(echo "$out_split" | losses | tr '\n' ' ')) != one device ($a)"; fi
    # misconfigurations: refused before any work, naming what to set
    out=$("$B/cli_train_text" $TINY --steps 1 --devices 4 --parallel split 2>&1); rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -q 'needs at least 4 layers.*set --layers 4 or more, or --devices 2'; then
        ok "train_text split over more devices than layers: refused, says --layers 4 or --devices 2"
    else bad "train_text split 4 devices, 2 layers (exit $rc)"; echo "$out" | tail -2; fi
    out=$("$B/cli_train_text" $TINY --steps 1 --devices 2 --batch 3 2>&1); rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -q 'set --batch to a multiple of 2'; then ok "train_text dp with --batch 3 over 2 devices: refused, says a multiple of 2"
    else bad "train_text dp batch 3 (exit $rc)"; echo "$out" | tail -2; fi
    out=$("$B/cli_train_text" $TINY --steps 1 --parallel dp 2>&1); rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -q 'needs --devices 2 or more'; then ok "train_text --parallel dp on one device: refused, says --devices 2"
    else bad "train_text dp on one device (exit $rc)"; echo "$out" | tail -2; fi
fi

# ---- two devices on the CPU: timeseries (--max-steps prints each step's training mse)
if built timeseries; then
    TS="$SMALL --layers 2 --batch 4 --max-steps 2 --head-dropout 0"
    mses() { awk '$1 == "step" && $3 == "train" {print $5}'; }
    one=$("$B/cli_timeseries" $TS 2>&1)
    for mode in dp zero1 split; do
        out=$("$B/cli_timeseries" $TS --devices 2 --parallel $mode 2>&1); rc=$?
        eval "ts_$mode=\$out"
        if [ $rc -eq 0 ] && echo "$out" | grep -Eq '^MiB +device 0 +device 1$' &&
           echo "$out" | grep -Eq '^allocated \(gpt2rt_plan_allocated\), MiB: device 0 [0-9.]+, device 1 [0-9.]+$' &&
           [ "$(echo "$out" | mses | wc -l)" -eq 2 ]; then
            ok "timeseries --devices 2 --parallel $mode: 2 steps, each device's planned and allocated MiB, a loss each step"
        else bad "timeseries --parallel $mode (exit $rc)"; echo "$out" | tail -4; fi
    done
    # the mse is a mean over B*H*M = 4*2*3 = 24 squared errors (~0.17): reassociation moves
    # it by 24 * 2^-24 * 0.2 = 3e-7; printed to 4 decimals: tolerance 1e-4 + 3e-7 -> 1.1e-4
    a=$(echo "$one" | mses | tr '\n' ' '); b=$(echo "$ts_dp" | mses | tr '\n' ' ')
    if [ -n "$a" ] && awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x, " "); m = split(b, y, " "); if (n != 2 || m != 2) exit 1;
         for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1.1e-4) exit 1 } }'; then
        ok "timeseries dp over 2 devices: step 1 and 2 mse ($b) == one device of batch 4 ($a) within 1.1e-4"
    else bad "timeseries dp mse ($b) vs one device ($a)"; fi
    if [ -n "$a" ] && [ "$(echo "$ts_split" | mses | tr '\n' ' ')" = "$a" ]; then ok "timeseries split mse == one device, bitwise ($a)"
    else bad "timeseries split mse ($(echo "$ts_split" | mses | tr '\n' ' ')) != one device ($a)"; fi
    out=$("$B/cli_timeseries" $SMALL --layers 2 --batch 4 --max-steps 1 --devices 2 --parallel split 2>&1); rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -q 'add --dropout 0 --attn-dropout 0 --head-dropout 0'; then
        ok "timeseries split with the preset's head dropout: refused, names the flags to set"
    else bad "timeseries split with dropout (exit $rc)"; echo "$out" | tail -2; fi
fi

# ---- timeseries: flags per stage, the --data list, output paths, presets (its own file)
. tests/cli_timeseries.sh

# ---- ts_baselines: timeseries' reading flags, strict numbers, its numbers against awk's (its own file)
. tests/cli_ts_baselines.sh

echo "CLI: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]

#!/usr/bin/env bash
# tools/heldout.sh [FILE.csv] [SEEDS] [HORIZONS] [FLAGS] - the held-out check: examples/timeseries
# with FLAGS (default --preset cpu, as chosen on ETTh2's validation split; nothing here is tuned
# on this file; the aLLM4TS row of docs/results/timeseries.md: "--preset allm4ts --layers 1 --heads 2 --width 16
# --batch 16 --lr 1e-3"),
# 70/10/20 splits (the file's name starts with neither ETTh nor ETTm), each seed and horizon,
# beside tools/ts_baselines (last value, seasonal naive, least-squares linear) on the same
# windows. Prints one line a run and a markdown table of test MSE / MAE (scaled data).
# One thread a run, niced: the numbers do not depend on the thread count (docs/results/cpu-speed.md).
set -eu
cd "$(dirname "$0")/.."
data=${1:-data/tmy3_greensboro.csv}
seeds=${2:-1 2 3}
horizons=${3:-96 192 336 720}
flags=${4:---preset cpu}
make -s build/timeseries build/ts_baselines >/dev/null
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
table="| horizon | $flags: test MSE, mean ± std (min-max) | MAE | val MSE | last value | seasonal naive (24) | linear (ridge) |
|---|---|---|---|---|---|---|"
for h in $horizons; do
    mses= maes= vals=
    for s in $seeds; do
        out=$(OMP_NUM_THREADS=1 nice -n 10 ./build/timeseries --data "$data" --horizon "$h" --seed "$s" $flags)
        t=$(echo "$out" | tail -1)
        v=$(echo "$out" | grep '^best epoch' | sed 's/.*val mse \([0-9.]*\).*/\1/')
        if echo "$out" | grep -q '^blend: '; then # the forecast scored is the blend: its validation MSE
            v=$(echo "$out" | grep '^blend: ' | sed 's/.*), val mse \([0-9.]*\).*/\1/'); fi
        echo "horizon $h seed $s: $t (val $v) [$(echo "$out" | grep '^best epoch')]"
        mses="$mses $(echo "$t" | awk '{print $3}')"; maes="$maes $(echo "$t" | awk '{print $5}')"; vals="$vals $v"
    done
    b=$(nice -n 10 ./build/ts_baselines --data "$data" --horizon "$h" | grep -E '^(last-value|seasonal-naive|linear) ')
    echo "$b" | sed "s/^/horizon $h: /"
    row=$(echo "$mses|$maes|$vals" | awk -F'|' '{
        n = split($1, m, " "); split($2, a, " "); split($3, v, " ");
        s = 0; lo = 1e9; hi = -1e9; sa = 0; sv = 0;
        for (i = 1; i <= n; i++) { s += m[i]; sa += a[i]; sv += v[i]; if (m[i] < lo) lo = m[i]; if (m[i] > hi) hi = m[i] }
        mu = s / n; ss = 0; for (i = 1; i <= n; i++) ss += (m[i] - mu) ^ 2;
        printf "%.4f ± %.4f (%.4f-%.4f) | %.4f | %.4f", mu, (n > 1 ? sqrt(ss / (n - 1)) : 0), lo, hi, sa / n, sv / n }')
    # ts_baselines' lines: NAME val mse V test mse T mae A windows N [(ridge R, chosen on validation)]
    ref=$(echo "$b" | awk '{ printf "| %s / %s ", $7, $9 } /ridge/ { r = $13; sub(",", "", r) } END { printf "(%s) |", r }' | sed 's/^| //')
    table="$table
| $h | $row | $ref"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "$table"

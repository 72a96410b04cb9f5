# tests/cli_timeseries.sh - examples/timeseries' command line as a user meets it: every
# flag works in its stage or is refused naming the stage, the --data list is read whole
# and each file once, output paths are checked before the first step, a preset is a base
# that explicit flags override whatever their order. Sourced by tests/cli.sh (its ok,
# bad, skip, built, $B, $ROOT); every run is a few steps on tests/fixtures/series_small.csv.
if built timeseries; then
    TSP="$B/cli_timeseries"
    FIX=tests/fixtures/series_small.csv
    S1="--preset allm4ts --stage pretrain --data $FIX --lookback 8 --patch 2 --stride 2 --layers 1 --heads 2 --width 8 --batch 2 --epochs 1 --steps-per-epoch 2"
    S2="--data $FIX --horizon 2 --lookback 4 --patch 2 --stride 2 --layers 1 --heads 2 --width 8 --batch 2 --epochs 1 --steps-per-epoch 2 --linear-residual 0 --blend-linear 0"
    # refused PROG-ARGS... with exit 2 before any step, one line matching WORDS (grep -E)
    ts_refused() { # LABEL REGEX ARGS...
        local label=$1 re=$2; shift 2
        local out rc
        out=$(timeout 60 "$TSP" "$@" 2>&1); rc=$?
        if [ $rc -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -Eq -- "$re"; then ok "timeseries $label refused: $out"
        else bad "timeseries $label (exit $rc, want 2 and one line matching '$re')"; echo "$out" | tail -3; fi
    }

    # ---- stage 1: each flag works there or is refused naming the stage
    rm -rf $B/cli_s1
    out=$("$TSP" $S1 --save $B/cli_s1 --revin-affine 1 2>&1); rc=$?
    if [ $rc -ne 0 ] && echo "$out" | grep -q 'revin_affine = 1' && [ ! -e $B/cli_s1/model.safetensors ]; then
        ok "timeseries --stage pretrain --revin-affine 1: the library's refusal shows ($(echo "$out" | tail -1))"
    else bad "timeseries --stage pretrain --revin-affine 1 (exit $rc): accepted and ignored"; echo "$out" | tail -2; fi
    out=$("$TSP" $S1 --epochs 3 --steps-per-epoch 0 --max-steps 1 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ "$(echo "$out" | grep -c '^step 1  train next-patch mse [0-9.]*  ')" -eq 1 ] &&
       ! echo "$out" | grep -q '^step 2 ' && ! echo "$out" | grep -q '^epoch' &&
       echo "$out" | tail -1 | grep -Eq '^--max-steps 1: .* s a step; the whole run \(at most [0-9]+ steps'; then
        ok "timeseries --stage pretrain --max-steps 1: one step, its time and the run's estimate, no epoch"
    else bad "timeseries --stage pretrain --max-steps 1 (exit $rc)"; echo "$out" | tail -3; fi
    ts_refused "--stage pretrain --png" '^timeseries: --png .*--stage pretrain' $S1 --save $B/cli_s1 --png $B/cli_s1.png
    ts_refused "--stage pretrain --drop-last" '^timeseries: --drop-last 4 .*--stage pretrain' $S1 --save $B/cli_s1 --drop-last 4
    [ ! -e $B/cli_s1 ] || bad "timeseries: a refused stage-1 run left $B/cli_s1 behind"

    # ---- --data: the whole list, no empty one, each file once
    ts_refused "--data ','" 'no file given' $S1 --save $B/cli_s1 --data ,
    ts_refused "--data ''" 'no file given' $S1 --save $B/cli_s1 --data ""
    ts_refused "--data '' (stage 2)" 'no file given' $S2 --data ""
    ts_refused "--data A,,B" 'entry 2 .*empty' $S1 --save $B/cli_s1 --data "$FIX,,$FIX"
    ts_refused "--data A,A" 'same file' $S1 --save $B/cli_s1 --data "$FIX,./$FIX"
    ts_refused "--data A,B in stage 2" 'one file' $S2 --data "$FIX,$FIX"
    # 16 copies under 250-character names: a list of about 4300 characters, read whole
    rm -rf $B/cli_many; mkdir -p $B/cli_many; list=""
    for i in $(seq 1 16); do
        f=$B/cli_many/$(printf 'f%02d_%0240d.csv' $i 0); cp $FIX "$f"; list="$list${list:+,}$f"
    done
    rm -rf $B/cli_s1
    out=$("$TSP" $S1 --save $B/cli_s1 --data "$list" 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ ${#list} -gt 4096 ] && [ "$(echo "$out" | grep -c '^data .*cli_many/f[0-9]*_0*\.csv: 30 rows')" -eq 16 ] &&
       echo "$out" | grep -q '^baseline: the last patch repeated scores val next-patch mse [0-9.]* '; then
        ok "timeseries --stage pretrain --data of 16 files (${#list} characters): every file read, none cut; the last-patch baseline printed"
    else bad "timeseries --data list of ${#list} characters (exit $rc)"; echo "$out" | grep -v '^data' | tail -3; fi
    rm -rf $B/cli_many $B/cli_s1

    # ---- output paths: checked before the first step
    : > $B/cli_afile
    ts_refused "--save onto a file (stage 1)" "^timeseries: --save $B/cli_afile: .*not a directory" $S1 --save $B/cli_afile
    ts_refused "--save onto a file (stage 2)" "^timeseries: --save $B/cli_afile: .*not a directory" $S2 --save $B/cli_afile
    ts_refused "--save under a missing directory" '^timeseries: --save /nonexistent_dir/out: ' $S2 --save /nonexistent_dir/out
    ts_refused "--png under a missing directory" '^timeseries: --png /nonexistent_dir/x.png: ' $S2 --png /nonexistent_dir/x.png
    ts_refused "--png onto a directory" "^timeseries: --png $B: .*directory" $S2 --png $B
    if [ "$(id -u)" != 0 ]; then
        mkdir -p $B/cli_ro && chmod 555 $B/cli_ro
        ts_refused "--save into a read-only directory" "^timeseries: --save $B/cli_ro/m: .*not writable" $S2 --save $B/cli_ro/m
        chmod 755 $B/cli_ro; rm -rf $B/cli_ro
    else skip "timeseries --save into a read-only directory: running as root"; fi
    rm -f $B/cli_afile

    # ---- a sensor file without a date column keeps its 3 channels; --fill fills and counts
    { echo "a,b,c"; for i in $(seq 1 40); do echo "$i,$((i * 2)),$((i % 7))"; done; } > $B/cli_nodate.csv
    out=$("$TSP" $S2 --data $B/cli_nodate.csv 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^data .*: 40 rows, 3 channels' &&
       echo "$out" | grep -q '^columns: no date column .*3 channels: a, b, c$'; then
        ok "timeseries on a CSV without a date column: 3 channels (a, b, c), none dropped"
    else bad "timeseries without a date column (exit $rc)"; echo "$out" | head -3; fi
    # a column of plain numbers named as the date: its step is in the column's units, not
    # seconds, so no seasonal period is guessed from it
    out=$("$TSP" $S2 --data $B/cli_nodate.csv --date-column a 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^columns: date "a" (1 to 40, a row every 1 (the column.s units)); 2 channels: b, c$' &&
       echo "$out" | grep -q 'seasonal naive: none (no --season N, and the dates have no calendar cycle)'; then
        ok "timeseries --date-column a (plain numbers): a step of 1 in the column's units, no seasonal period guessed"
    else bad "timeseries --date-column naming a column of numbers (exit $rc)"; echo "$out" | grep -E '^columns|baselines'; fi
    sed -i '5s/^4,8,/4,,/; 9s/^8,16,/8,NA,/' $B/cli_nodate.csv
    out=$("$TSP" $S2 --data $B/cli_nodate.csv 2>&1); rc=$?
    out2=$("$TSP" $S2 --data $B/cli_nodate.csv --fill linear --columns c,b 2>&1); rc2=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q 'line 5, column 2 ("b"): "" is missing.*--fill previous|linear' &&
       [ $rc2 -eq 0 ] && echo "$out2" | grep -q '^filled 2 missing values' && echo "$out2" | grep -q '2 channels: c, b$'; then
        ok "timeseries: a missing value refused naming line and column; --fill linear fills 2; --columns c,b picks and orders"
    else bad "timeseries --fill / --columns (exit $rc, $rc2)"; echo "$out" | tail -1; echo "$out2" | head -3; fi
    rm -f $B/cli_nodate.csv
    # the season from the calendar (the loader's info.season): daily dates, 7 steps; a
    # pandas index column (unnamed, counting the rows) skipped in one line
    awk 'BEGIN { print ",date,a,b"; for (i = 0; i < 60; i++) printf "%d,2024-01-%02d,%d,%d\n", i, 1 + i % 31, i % 7, i * 3 }' |
        awk -F, 'NR == 1 || NR <= 32 { print; next } { m = 2; printf "%s,2024-%02d-%02d,%s,%s\n", $1, m, $1 - 30, $3, $4 }' \
        > $B/cli_daily.csv
    out=$("$TSP" $S2 --lookback 8 --data $B/cli_daily.csv 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^columns: date "date" (2024-01-01 to 2024-02-29, a row every 24 h); 2 channels: a, b$' &&
       [ "$(echo "$out" | grep -c '^skipped the first column: unnamed, it counts the rows')" -eq 1 ] &&
       echo "$out" | grep -Eq 'seasonal naive \(7 steps\) [0-9.]+ / [0-9.]+'; then
        ok "timeseries on daily dates with a pandas index: the index skipped in one line, the seasonal naive at 7 steps (the calendar's week)"
    else bad "timeseries daily dates / pandas index (exit $rc)"; echo "$out" | grep -E '^columns|^skipped|baselines'; fi
    rm -f $B/cli_daily.csv

    # ---- a short quarterly file (203 rows, 142 training): no --lookback, --patch or --stride, so
    # the lookback is about half the training rows (64) in patches of 8, said in one line first;
    # any of the three given, the file is cut as asked (and refused when too short for it)
    awk 'BEGIN { srand(5); print "quarter,gdp,cpi"; for (i = 0; i < 203; i++)
        printf "%dQ%d,%.2f,%.3f\n", 1959 + int(i / 4), i % 4 + 1, 2700 + 30 * i + 40 * sin(i * 1.5708) + 60 * rand(),
               29 + 0.9 * i + 3 * rand() }' > $B/cli_quarterly.csv
    out=$("$TSP" --data $B/cli_quarterly.csv --horizon 8 --epochs 1 --steps-per-epoch 2 2>/dev/null); rc=$?
    out2=$("$TSP" --data $B/cli_quarterly.csv --horizon 8 --lookback 336 2>&1); rc2=$?
    out3=$("$TSP" --data $B/cli_quarterly.csv --horizon 8 --patch 4 --stride 4 --lookback 32 --epochs 1 --steps-per-epoch 2 2>/dev/null); rc3=$?
    if [ $rc -eq 0 ] && echo "$out" | head -1 | grep -q '^short series: the training split holds 142 rows, too few for the preset.s lookback 336 + horizon 8: lookback 64 (about half of them), patch 8 stride 8 (8 patches)' &&
       echo "$out" | grep -q '^data .*: 203 rows, 2 channels, 70/10/20 borders; windows train 71, validation 14, test 33$' &&
       echo "$out" | grep -q '^model: .*lookback 64, patch 8 stride 8, horizon 8' &&
       echo "$out" | tail -1 | grep -Eq '^test mse [0-9.]+ mae [0-9.]+ windows 33$' &&
       [ $rc2 -eq 1 ] && echo "$out2" | grep -q 'too few.*336 + 8' && ! echo "$out2" | grep -q '^short series' &&
       [ $rc3 -eq 0 ] && ! echo "$out3" | grep -q '^short series' && echo "$out3" | grep -q 'lookback 32, patch 4 stride 4'; then
        ok "timeseries on 203 quarterly rows: lookback 64 and patch 8 chosen and said in one line; --lookback 336 refused as asked; --lookback 32 kept"
    else bad "timeseries short series (exit $rc, $rc2, $rc3)"; echo "$out" | head -2; echo "$out2" | tail -1; echo "$out3" | grep '^model'; fi
    rm -f $B/cli_quarterly.csv

    # ---- the forecaster: --save, then timeseries predict on the file it never saw before
    # 400 hourly rows from 2024-02-27 00:00 (across the leap day), three noisy channels
    awk 'BEGIN { srand(7); print "date,load,temp,flow";
        for (i = 0; i < 400; i++) { d = 27 + int(i / 24); m = 2; if (d > 29) { m = 3; d -= 29 }
            printf "2024-%02d-%02d %02d:00:00,%.3f,%.3f,%.3f\n", m, d, i % 24, 10 + 3 * sin(i * 0.2618) + rand(),
                   20 + 5 * cos(i * 0.2618) + 2 * rand(), 100 + 0.5 * i + 4 * rand() }}' > $B/cli_sensor.csv
    rm -rf $B/cli_fc
    FC="--data $B/cli_sensor.csv --horizon 6 --lookback 24 --patch 4 --stride 4 --epochs 2 --steps-per-epoch 20"
    out=$("$TSP" $FC --save $B/cli_fc 2>&1); rc=$?
    fc_out=$out # the training run's report, read again below
    all_row() { awk '$1 == "all" && NF == 5 {print $2, $3; exit}'; }
    a=$(echo "$out" | all_row)
    if [ $rc -eq 0 ] && [ -s $B/cli_fc/forecaster.json ] && [ -s $B/cli_fc/model.safetensors ] &&
       echo "$out" | grep -q '^saved the forecaster .* to build/cli_fc: ' && [ -n "$a" ] &&
       echo "$out" | grep -Eq '^baselines on the same windows, mse / mae scaled: last value [0-9.]+ / [0-9.]+; seasonal naive \(24 steps\) [0-9.]+ / [0-9.]+; linear map [0-9.]+ / [0-9.]+$' &&
       echo "$out" | tail -1 | grep -q '^test mse [0-9.]* mae [0-9.]* windows 75$'; then
        ok "timeseries --save: the forecaster (forecaster.json beside the weights), per-channel metrics, three baselines (season 24 from the hourly dates), the last line unchanged"
    else bad "timeseries --save forecaster (exit $rc)"; echo "$out" | tail -12; fi
    out=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv --score --out $B/cli_fc.csv 2>&1); rc=$?
    b=$(echo "$out" | all_row)
    if [ $rc -eq 0 ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ");
         for (i = 1; i <= 2; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-6) exit 1 } }'; then
        ok "timeseries predict --score: the test split through the artifact scores mse/mae $b, the training run's $a (within 1e-6)"
    else bad "timeseries predict --score (exit $rc): '$b' against the training run's '$a'"; echo "$out" | tail -5; fi
    if [ "$(head -1 $B/cli_fc.csv)" = "date,load,temp,flow" ] && [ "$(wc -l < $B/cli_fc.csv)" -eq 7 ] &&
       [ "$(sed -n 2p $B/cli_fc.csv | cut -d, -f1)" = "2024-03-14 16:00:00" ] &&
       [ "$(sed -n 7p $B/cli_fc.csv | cut -d, -f1)" = "2024-03-14 21:00:00" ] &&
       awk -F, 'NR > 1 && !($4 > 250 && $4 < 350) { exit 1 }' $B/cli_fc.csv; then
        ok "timeseries predict --out: 6 rows after the file's last (2024-03-14 15:00), dated at its hourly step, in its units (flow near 300)"
    else bad "timeseries predict --out"; head -3 $B/cli_fc.csv; fi
    out=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv --all 2>/dev/null); rc=$?
    if [ $rc -eq 0 ] && [ "$(echo "$out" | head -1)" = "origin,date,load,temp,flow" ] &&
       [ "$(echo "$out" | wc -l)" -eq $(( (400 - 24 + 1) * 6 + 1 )) ] &&
       [ "$(echo "$out" | sed -n 2p | cut -d, -f1,2)" = "2024-02-27 23:00:00,2024-02-28 00:00:00" ]; then
        ok "timeseries predict --all: 377 windows x 6 steps on stdout, each dated from its origin"
    else bad "timeseries predict --all (exit $rc)"; echo "$out" | head -3; fi
    # ---- each channel in the data's units beside the baselines (gpt2rt_forecaster_evaluate):
    # one line a channel, "NAME m-mse / m-mae  lv-mse / lv-mae  sn-mse / sn-mae  lm-mse / lm-mae";
    # flow (a trend: 0.5 a row) loses to the last value, said in a line of its own
    chan_rows() { awk '/per channel in the data.s units, mse \/ mae:$/ { on = 1; next } on && $1 == "channel" { next }
                       on && NF == 13 { print; next } { on = 0 }'; }
    rows=$(echo "$fc_out" | chan_rows)
    # flow's last-value MSE over the 75 test windows, from the CSV: rows [296, 400) hold
    # them (70/10/20 of 400, less the lookback 24), window w's last value is row 319 + w
    # (CSV line 321 + w), its truth rows 320 + w .. 325 + w. Tolerance 1e-4 relative: the
    # library reads the values scaled and unscaled in floats (each off by ~2 float ulps,
    # 6e-5 at 300, so the MSE by <= 2 x 2.1 x 6e-5 = 2.5e-4 of 6.6, 4e-5 relative), then
    # prints 6 digits (5e-6)
    lv=$(awk -F, 'NR > 1 { v[NR - 2] = $4 } END { for (w = 0; w < 75; w++) for (h = 0; h < 6; h++) {
             d = v[320 + w + h] - v[319 + w]; s += d * d }; printf "%.9g", s / 450 }' $B/cli_sensor.csv)
    got=$(echo "$rows" | awk '$1 == "flow" { print $5 }')
    loss=$(echo "$fc_out" | grep '^flow: last value is better: ')
    if [ "$(echo "$rows" | wc -l)" -eq 3 ] && [ "$(echo "$rows" | cut -d' ' -f3)" = "load
temp
flow" ] && [ -n "$got" ] && awk -v a="$lv" -v b="$got" 'BEGIN { d = (a - b) / a; exit !(d < 1e-4 && -d < 1e-4) }' &&
       [ -n "$loss" ] && echo "$loss" | awk -v lv="$got" -v m="$(echo "$rows" | awk '$1 == "flow" { print $2 }')" '
           { d1 = ($6 - lv) / lv; d2 = ($8 - m) / m; exit !(d1 < 5e-3 && -d1 < 5e-3 && d2 < 5e-3 && -d2 < 5e-3) }' &&
       [ "$(echo "$fc_out" | tail -3 | head -1)" = "$loss" ]; then
        ok "timeseries: each channel's mse / mae in the data's units beside the baselines; flow's last value $got == awk's $lv on the CSV (1e-4); '$loss' closes the report"
    else bad "timeseries per-channel baselines: flow last value '$got' against awk's '$lv'; '$loss'"; echo "$fc_out" | tail -9; fi
    # the intervals training saves: fit on the 35 validation windows ([256, 320)), their 90%
    # coverage on the test split
    if echo "$fc_out" | grep -Eq '^90% intervals: split-conformal from 35 validation windows; test-split coverage (0\.[0-9]{3}|1\.000)$' &&
       grep -q '"interval_windows": 35,' $B/cli_fc/forecaster.json; then
        ok "timeseries --save: $(echo "$fc_out" | grep '^90% intervals'), kept in forecaster.json"
    else bad "timeseries --save: no coverage line or no interval keys"; echo "$fc_out" | grep -i interval; fi
    # predict --score through the saved forecaster: the same per-channel lines
    out2=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv --score --out $B/cli_fc_s.csv 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ -n "$rows" ] && [ "$(echo "$out2" | chan_rows)" = "$rows" ] &&
       [ "$(echo "$out2" | tail -1)" = "$(echo "$fc_out" | grep '^flow: last value is better')" ]; then
        ok "timeseries predict --score: the per-channel lines equal the training run's, its last line the same loss"
    else bad "timeseries predict --score per-channel lines (exit $rc)"; echo "$out2" | tail -6; fi
    rm -f $B/cli_fc_s.csv
    # --backtest K: the last K origins of the whole file; flow's last value from the CSV as
    # above (window w of 5: the last value row 389 + w, the truth rows 390 + w .. 395 + w),
    # read with no scaling (floats of 3-decimal values: 6e-8 relative) and printed to 6
    # digits: within 1e-5 relative
    out2=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv --backtest 5 --out $B/cli_fc_b.csv 2>&1); rc=$?
    lv=$(awk -F, 'NR > 1 { v[NR - 2] = $4 } END { for (w = 0; w < 5; w++) for (h = 0; h < 6; h++) {
             d = v[390 + w + h] - v[389 + w]; s += d * d }; printf "%.9g", s / 30 }' $B/cli_sensor.csv)
    got=$(echo "$out2" | chan_rows | awk '$1 == "flow" { print $5 }')
    if [ $rc -eq 0 ] && echo "$out2" | grep -q '^backtest from the last 5 origins, 5 windows, per channel in the data.s units' &&
       [ "$(echo "$out2" | chan_rows | wc -l)" -eq 3 ] && [ -n "$got" ] &&
       awk -v a="$lv" -v b="$got" 'BEGIN { d = (a - b) / a; exit !(d < 1e-5 && -d < 1e-5) }' &&
       [ "$(wc -l < $B/cli_fc_b.csv)" -eq 7 ]; then
        ok "timeseries predict --backtest 5: 3 channel lines; flow's last value $got == awk's $lv (1e-5); the forecast written as ever"
    else bad "timeseries predict --backtest 5 (exit $rc): flow last value '$got' against '$lv'"; echo "$out2" | tail -6; fi
    rm -f $B/cli_fc_b.csv
    out2=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv --backtest 372 --out $B/cli_fc_b.csv 2>&1); rc=$?
    if [ $rc -eq 1 ] && [ ! -e $B/cli_fc_b.csv ] &&
       echo "$out2" | grep -q '^timeseries predict: --backtest 372: .*372 origins need 401 rows; the series has 400 (at most 371 origins)'; then
        ok "timeseries predict --backtest 372 on 400 rows: refused before anything is written, naming 401 rows and 371 origins"
    else bad "timeseries predict --backtest 372 (exit $rc)"; echo "$out2" | tail -2; fi
    ts_refused "predict --backtest 3x" "^timeseries: --backtest '3x': expected an integer" \
        predict --model $B/cli_fc --data $B/cli_sensor.csv --backtest 3x
    ts_refused "predict --backtest 0" "^timeseries: --backtest '0': expected an integer in \[1," \
        predict --model $B/cli_fc --data $B/cli_sensor.csv --backtest 0
    # --interval: NAME_lo,NAME_hi beside each forecast column, lo <= forecast <= hi, the
    # forecasts those of predict without it
    out2=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv --interval 0.9 --out $B/cli_fc_i.csv 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ "$(head -1 $B/cli_fc_i.csv)" = "date,load,load_lo,load_hi,temp,temp_lo,temp_hi,flow,flow_lo,flow_hi" ] &&
       [ "$(wc -l < $B/cli_fc_i.csv)" -eq 7 ] &&
       awk -F, 'NR > 1 { for (c = 2; c <= 8; c += 3) if (!($(c + 1) <= $c && $c <= $(c + 2) && $(c + 1) < $(c + 2))) exit 1; n++ }
                END { exit n != 6 }' $B/cli_fc_i.csv &&
       [ "$(cut -d, -f1,2,5,8 $B/cli_fc_i.csv)" = "$(cat $B/cli_fc.csv)" ] &&
       echo "$out2" | grep -q '^90% intervals: split-conformal from 35 validation windows: .* 33rd smallest of its 35 .*; guaranteed coverage 0.9167 (33 / 36'; then
        ok "timeseries predict --interval 0.9: NAME_lo,NAME_hi beside each column, lo < forecast < hi on 6 rows x 3 channels, the forecasts unchanged, rank 33 of 35 (0.9167)"
    else bad "timeseries predict --interval 0.9 (exit $rc)"; head -3 $B/cli_fc_i.csv; echo "$out2" | head -2; fi
    out2=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv --interval 0.9 --all 2>/dev/null | sed -n '1p;2p')
    if [ "$(echo "$out2" | head -1)" = "origin,date,load,load_lo,load_hi,temp,temp_lo,temp_hi,flow,flow_lo,flow_hi" ] &&
       echo "$out2" | tail -1 | grep -q '^2024-02-27 23:00:00,2024-02-28 00:00:00,'; then
        ok "timeseries predict --interval 0.9 --all: the origin and date, then each channel with its interval"
    else bad "timeseries predict --interval --all"; echo "$out2"; fi
    # a 700-character column name: the header holds it three times, whole (2126 bytes, more
    # than twice the text without intervals: the buffer grows for it; an overflow there shows
    # under -fsanitize=address)
    ln=$(printf 'x%.0s' $(seq 1 700)); rm -rf $B/cli_fc_long
    { echo "date,$ln,b"; tail -n +2 $B/cli_sensor.csv | cut -d, -f1,2,3; } > $B/cli_long.csv
    "$TSP" --data $B/cli_long.csv --horizon 6 --lookback 24 --patch 4 --stride 4 --epochs 1 --steps-per-epoch 2 \
        --save $B/cli_fc_long > /dev/null 2>&1
    out2=$("$TSP" predict --model $B/cli_fc_long --data $B/cli_long.csv --interval 0.5 2>/dev/null); rc=$?
    if [ $rc -eq 0 ] && [ "$(echo "$out2" | head -1)" = "date,$ln,${ln}_lo,${ln}_hi,b,b_lo,b_hi" ] &&
       [ "$(echo "$out2" | wc -l)" -eq 7 ] && [ "$(echo "$out2" | awk -F, 'NF != 7' | wc -l)" -eq 0 ]; then
        ok "timeseries predict --interval with a 700-character column name: a header of $(echo "$out2" | head -1 | wc -c) bytes, 6 rows of 7 fields"
    else bad "timeseries predict --interval with a long column name (exit $rc)"; echo "$out2" | head -2 | cut -c1-100; fi
    rm -rf $B/cli_fc_long $B/cli_long.csv
    for v in 0 1 x 0.9x; do
        ts_refused "predict --interval $v" "^timeseries: --interval '$v': expected a number in \(0, 1\)" \
            predict --model $B/cli_fc --data $B/cli_sensor.csv --interval $v
    done
    out2=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv --interval 0.99 --out $B/cli_fc_j.csv 2>&1); rc=$?
    if [ $rc -eq 1 ] && [ ! -e $B/cli_fc_j.csv ] && echo "$out2" | grep -q 'level 0.99 needs the 36-th smallest .*n = 35 windows.*at least 99'; then
        ok "timeseries predict --interval 0.99 from 35 windows: refused, naming the 99 windows it needs"
    else bad "timeseries predict --interval 0.99 (exit $rc)"; echo "$out2" | tail -1; fi
    # a forecaster saved without intervals: the library's message; --calibrate from --data's validation split
    rm -rf $B/cli_fc_noiv; mkdir -p $B/cli_fc_noiv; cp $B/cli_fc/model.safetensors $B/cli_fc/config.json $B/cli_fc_noiv/
    awk '/^  "interval_/ { skip = 1; next } /^  "/ { skip = 0 } !skip' $B/cli_fc/forecaster.json > $B/cli_fc_noiv/forecaster.json
    out2=$("$TSP" predict --model $B/cli_fc_noiv --data $B/cli_sensor.csv --interval 0.9 --out $B/cli_fc_j.csv 2>&1); rc=$?
    out3=$("$TSP" predict --model $B/cli_fc_noiv --data $B/cli_sensor.csv --interval 0.9 --calibrate --out $B/cli_fc_j.csv 2>&1); rc3=$?
    if [ $rc -eq 1 ] && echo "$out2" | grep -q '^timeseries predict: --interval 0.9: gpt2rt_forecaster_interval: this forecaster has no conformal intervals .*--calibrate' &&
       ! grep -q interval $B/cli_fc_noiv/forecaster.json && [ $rc3 -eq 0 ] &&
       echo "$out3" | grep -q '^--calibrate: the intervals. errors from the 35 validation windows of ' &&
       [ "$(head -1 $B/cli_fc_j.csv)" = "$(head -1 $B/cli_fc_i.csv)" ]; then
        ok "timeseries predict --interval on a forecaster saved without intervals: the library's message; --calibrate computes them from 35 validation windows"
    else bad "timeseries predict --interval without intervals (exit $rc, $rc3)"; echo "$out2" | tail -1; echo "$out3" | head -1; fi
    ts_refused "predict --calibrate without --interval" '^timeseries predict: --calibrate .*give --interval too' \
        predict --model $B/cli_fc --data $B/cli_sensor.csv --calibrate
    rm -rf $B/cli_fc_noiv $B/cli_fc_i.csv $B/cli_fc_j.csv

    # ---- outputs never touch inputs: --out onto the --data file (any spelling) or into the
    # model directory is refused before anything is written, naming both paths
    cp $B/cli_sensor.csv $B/cli_in.csv; cp $B/cli_in.csv $B/cli_in.keep
    ln -sf cli_in.csv $B/cli_in_sym.csv; ln -f $B/cli_in.csv $B/cli_in_hard.csv
    cp $B/cli_fc/forecaster.json $B/cli_fc.json.keep; cp $B/cli_fc/model.safetensors $B/cli_fc.st.keep
    for o in "$B/cli_in.csv" "./$B/cli_in.csv" "$B/../$B/cli_in.csv" "$B/cli_in_sym.csv" "$B/cli_in_hard.csv"; do
        ts_refused "predict --out $o (the --data file)" \
            "^timeseries predict: --out $o and --data $B/cli_in.csv are the same file" \
            predict --model $B/cli_fc --data $B/cli_in.csv --out "$o"
    done
    for o in "$B/cli_fc/forecaster.json" "$B/cli_fc/model.safetensors" "$B/cli_fc/new.csv" "./$B/cli_fc/../cli_fc/x.csv"; do
        ts_refused "predict --out $o (inside --model)" "^timeseries predict: --out $o lies inside --model $B/cli_fc" \
            predict --model $B/cli_fc --data $B/cli_in.csv --out "$o"
    done
    if cmp -s $B/cli_in.csv $B/cli_in.keep && cmp -s $B/cli_fc/forecaster.json $B/cli_fc.json.keep &&
       cmp -s $B/cli_fc/model.safetensors $B/cli_fc.st.keep && [ ! -e $B/cli_fc/new.csv ] &&
       "$TSP" predict --model $B/cli_fc --data $B/cli_in.csv > /dev/null 2>&1; then
        ok "timeseries predict: after 9 refused --out paths the data and the model are byte for byte as they were, and load"
    else bad "timeseries predict: a refused --out changed the data or the model"; fi
    # the training run's outputs (--save, --png) against its inputs (--data, --init) and each other
    rm -rf $B/cli_m; mkdir -p $B/cli_m; cp $FIX $B/cli_m/d.csv; cp $FIX $B/cli_d.csv; cp -r tests/fixtures/hf_tiny $B/cli_init
    ts_refused "--save DIR holding the --data file" "^timeseries: --data $B/cli_m/d.csv lies inside --save $B/cli_m" \
        $S2 --data $B/cli_m/d.csv --save $B/cli_m
    ts_refused "--png onto the --data file" "^timeseries: --png ./$B/cli_d.csv and --data $B/cli_d.csv are the same file" \
        $S2 --data $B/cli_d.csv --png ./$B/cli_d.csv
    ts_refused "--save onto --init" "^timeseries: --save $B/cli_init and --init $B/cli_init/ are the same directory" \
        $S2 --init $B/cli_init/ --save $B/cli_init
    ts_refused "--png inside --init" "^timeseries: --png $B/cli_init/model.safetensors lies inside --init $B/cli_init" \
        $S2 --init $B/cli_init --png $B/cli_init/model.safetensors
    ts_refused "--png inside --save" "^timeseries: --png $B/cli_m/config.json lies inside --save $B/cli_m" \
        $S2 --save $B/cli_m --png $B/cli_m/config.json
    if cmp -s $B/cli_m/d.csv $FIX && cmp -s $B/cli_d.csv $FIX && [ ! -e $B/cli_m/model.safetensors ] &&
       cmp -s $B/cli_init/model.safetensors tests/fixtures/hf_tiny/model.safetensors; then
        ok "timeseries: the refused --save / --png runs left every input as it was"
    else bad "timeseries: a refused --save / --png run changed an input"; fi
    rm -rf $B/cli_m $B/cli_d.csv $B/cli_init $B/cli_in_sym.csv $B/cli_in_hard.csv $B/cli_fc.json.keep $B/cli_fc.st.keep
    # a write of --out that fails (here a 1 KiB file-size limit) keeps the old file whole
    head -c 3000 $B/cli_sensor.csv > $B/cli_old.csv; cp $B/cli_old.csv $B/cli_old.keep
    out=$(ulimit -f 1; "$TSP" predict --model $B/cli_fc --data $B/cli_in.csv --all --out $B/cli_old.csv 2>&1); rc=$?
    if [ $rc -eq 1 ] && cmp -s $B/cli_old.csv $B/cli_old.keep && [ -z "$(ls $B/cli_old.csv.tmp* 2>/dev/null)" ] &&
       echo "$out" | grep -q "^timeseries predict: --out $B/cli_old.csv: writing the forecasts failed: File too large; "; then
        ok "timeseries predict --out past a file-size limit: exit 1 naming the path and EFBIG, the old file unchanged, no temporary left"
    else bad "timeseries predict --out past a file-size limit (exit $rc)"; echo "$out" | tail -2; ls -l $B/cli_old.csv*; fi
    out=$("$TSP" predict --model $B/cli_fc --data $B/cli_in.csv --out $B/cli_old.csv 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ "$(wc -l < $B/cli_old.csv)" -eq 7 ] && [ "$(head -1 $B/cli_old.csv)" = "date,load,temp,flow" ]; then
        ok "timeseries predict --out over an existing file: replaced whole (7 lines)"
    else bad "timeseries predict --out over an existing file (exit $rc)"; echo "$out" | tail -2; fi
    rm -f $B/cli_old.csv $B/cli_old.keep $B/cli_in.keep
    # what training reads, predict reads: a date column headed "none"; a repeated or empty
    # column name is refused at training already, naming the columns
    sed '1s/^date,/none,/' $B/cli_sensor.csv > $B/cli_none.csv; rm -rf $B/cli_fcn
    out=$("$TSP" --data $B/cli_none.csv --horizon 2 --lookback 8 --patch 4 --stride 4 --epochs 1 --steps-per-epoch 2 \
          --save $B/cli_fcn 2>&1); rc=$?
    out2=$("$TSP" predict --model $B/cli_fcn --data $B/cli_none.csv 2>/dev/null); rc2=$?
    if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ "$(echo "$out2" | head -1)" = "none,load,temp,flow" ] &&
       [ "$(echo "$out2" | sed -n 2p | cut -d, -f1)" = "2024-03-14 16:00:00" ]; then
        ok "timeseries: a date column headed none trains, and predict reads it by that name and continues its dates"
    else bad "timeseries date column headed none (exit $rc, predict $rc2)"; echo "$out" | tail -1; echo "$out2" | head -2; fi
    sed '1s/,temp,/,load,/' $B/cli_sensor.csv > $B/cli_dup.csv
    out=$("$TSP" --data $B/cli_dup.csv --horizon 2 --lookback 8 --patch 4 --stride 4 --epochs 1 --steps-per-epoch 2 \
          --columns load 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q 'columns 2 and 3 both "load"'; then
        ok "timeseries: a header naming load twice is refused at training, naming columns 2 and 3"
    else bad "timeseries: a repeated column name (exit $rc)"; echo "$out" | tail -1; fi
    rm -rf $B/cli_none.csv $B/cli_fcn $B/cli_dup.csv $B/cli_in.csv
    cut -d, -f1,2,3 $B/cli_sensor.csv > $B/cli_sensor2.csv
    out=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor2.csv 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q 'no column named "flow" (columns)'; then
        ok "timeseries predict on a file without one of the forecaster's columns: names it"
    else bad "timeseries predict, a column missing (exit $rc)"; echo "$out" | tail -2; fi
    sed -i '390s/,[0-9.]*$/,/' $B/cli_sensor.csv
    out=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv 2>&1); rc=$?
    out2=$("$TSP" predict --model $B/cli_fc --data $B/cli_sensor.csv --fill previous 2>&1); rc2=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q 'line 390, column 4 ("flow")' && [ $rc2 -eq 0 ] &&
       echo "$out2" | tail -1 | grep -q '(missing values filled)$'; then
        ok "timeseries predict: a missing value refused naming line and column, filled with --fill previous"
    else bad "timeseries predict --fill (exit $rc, $rc2)"; echo "$out" | tail -1; echo "$out2" | tail -1; fi
    # what training decided, predict remembers: --fill and --season are saved; a flag given
    # to predict overrides the saved value and says so in one line
    rm -rf $B/cli_fcf
    out=$("$TSP" --data $B/cli_sensor.csv --horizon 2 --lookback 16 --patch 4 --stride 4 --epochs 1 --steps-per-epoch 2 \
          --fill previous --season 12 --save $B/cli_fcf 2>&1); rc=$?
    out2=$("$TSP" predict --model $B/cli_fcf --data $B/cli_sensor.csv --score 2>&1); rc2=$?
    out3=$("$TSP" predict --model $B/cli_fcf --data $B/cli_sensor.csv --score --fill linear --season 6 2>&1); rc3=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q 'seasonal naive (12 steps)' && [ $rc2 -eq 0 ] &&
       echo "$out2" | grep -q '(missing values filled)$' && echo "$out2" | grep -q 'seasonal naive (12 steps)' &&
       ! echo "$out2" | grep -q overrides && [ $rc3 -eq 0 ] && echo "$out3" | grep -q 'seasonal naive (6 steps)' &&
       [ "$(echo "$out3" | grep -c '^timeseries predict: --.* overrides the forecaster.s ')" -eq 2 ] &&
       echo "$out3" | grep -q '^timeseries predict: --fill linear overrides the forecaster.s fill (previous, as trained)$' &&
       echo "$out3" | grep -q '^timeseries predict: --season 6 overrides the forecaster.s season (12, as trained)$'; then
        ok "timeseries predict: a gap filled and season 12 as trained with --fill previous --season 12, no flag needed; --fill linear --season 6 override, one line each"
    else bad "timeseries predict remembering --fill / --season (exit $rc, $rc2, $rc3)"; echo "$out2" | tail -3; echo "$out3" | grep -E 'overrides|seasonal'; fi
    rm -rf $B/cli_fcf
    out=$("$TSP" predict --model tests/fixtures/hf_tiny --data $B/cli_sensor.csv 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q 'no forecaster here .*weights only'; then
        ok "timeseries predict --model of a weights-only directory: refused, says what a forecaster holds"
    else bad "timeseries predict of weights only (exit $rc)"; echo "$out" | tail -2; fi
    rm -rf $B/cli_fc $B/cli_fc.csv $B/cli_sensor.csv $B/cli_sensor2.csv

    # ---- --png: title, legend, axes with stb (Debian libstb-dev); without stb one line naming the package
    out=$("$TSP" $S2 --png $B/cli_ts.png --channel b 2>&1); rc=$?
    if echo "$out" | grep -q '^wrote '; then
        if [ $rc -eq 0 ] && [ "$(head -c 8 $B/cli_ts.png 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] &&
           echo "$out" | grep -q "^wrote $B/cli_ts.png: 4 test windows of b in the data's units"; then
            ok "timeseries --png --channel b (stb): a PNG of channel b, $(stat -c %s $B/cli_ts.png) bytes"
        else bad "timeseries --png with stb (exit $rc)"; echo "$out" | grep png; fi
    else skip "timeseries --png with stb: this machine has no libstb-dev"; fi
    ts_refused "--channel without --png" '^timeseries: --channel b picks the channel --png draws' $S2 --channel b
    out=$("$TSP" $S2 --png $B/cli_ts.png --channel zz 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 2 ] && [ "$out" = "timeseries: --channel zz: no such channel (see the columns line above)" ]; then
        ok "timeseries --channel zz: refused before training: $out"
    else bad "timeseries --channel zz (exit $rc)"; echo "$out"; fi
    rm -f $B/cli_ts.png
    if $CC -std=c11 -Wall -Wextra -Werror -O0 -DTS_NO_PNG -fopenmp -o $B/cli_timeseries-nopng examples/timeseries.c -lm \
        > $B/cli_timeseries-nopng.log 2>&1; then
        out=$("$B/cli_timeseries-nopng" $S2 --png $B/cli_ts.png 2>&1); rc=$?
        if [ $rc -eq 0 ] && [ ! -e $B/cli_ts.png ] && echo "$out" | grep -q "^--png $B/cli_ts.png: skipped: .*apt-get install libstb-dev" &&
           echo "$out" | tail -1 | grep -Eq '^test mse [0-9.]+ mae [0-9.]+ windows 5$'; then
            ok "timeseries built without stb (-DTS_NO_PNG): --png skipped in one line naming libstb-dev, the run scores as ever"
        else bad "timeseries without stb --png (exit $rc)"; echo "$out" | tail -3; fi
    else bad "build timeseries -DTS_NO_PNG"; head -5 $B/cli_timeseries-nopng.log; fi

    # ---- --precision: passed to the library (bf16 and fp16 are the CUDA backend's), in both stages
    for st in 1 2; do
        if [ $st = 1 ]; then args="$S1 --save $B/cli_s1p"; else args="$S2"; fi
        out=$("$TSP" $args --precision bf16 --backend cpu 2>&1); rc=$?
        if [ $rc -eq 1 ] && echo "$out" | tail -1 | grep -q 'precision = BF16 needs backend = GPT2RT_BACKEND_CUDA'; then
            ok "timeseries stage $st --precision bf16 on the CPU: the library's refusal shows"
        else bad "timeseries stage $st --precision bf16 on the CPU (exit $rc)"; echo "$out" | tail -1; fi
    done
    rm -rf $B/cli_s1p
    ts_refused "--precision fp8" "^timeseries: --precision 'fp8': expected fp32, bf16 or fp16" $S2 --precision fp8
    out=$("$TSP" $S2 --precision fp32 --max-steps 1 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^model: .* GiB planned (fp32)$'; then ok "timeseries --precision fp32: the plan line names it"
    else bad "timeseries --precision fp32 (exit $rc)"; echo "$out" | grep '^model'; fi

    # ---- progress inside an epoch: on stderr (stdout keeps the results), at most once a
    # second: the lines' own "s in" times are 1 s apart or more (printed to 0.1 s)
    t0=$(date +%s.%N)
    "$TSP" --horizon 24 --lookback 96 --epochs 1 --threads 1 --linear-residual 0 \
        --blend-linear 0 > $B/cli_prog.out 2> $B/cli_prog.err; rc=$?
    t1=$(date +%s.%N)
    n=$(grep -c '^epoch 1: step [0-9]*/532, [0-9]* windows/s, [0-9.]* s in, about [0-9]* s left$' $B/cli_prog.err)
    if [ $rc -eq 0 ] && ! grep -q 'windows/s' $B/cli_prog.out && [ "$n" -eq "$(wc -l < $B/cli_prog.err)" ] &&
       sed -n 's/.*, \([0-9.]*\) s in,.*/\1/p' $B/cli_prog.err | awk -v n="$n" -v w="$(echo "$t1 - $t0" | bc)" '
           NR > 1 && $1 - prev < 0.95 { exit 1 } { prev = $1 } END { exit !(n <= w + 1 && (w < 3 || n >= 1)) }'; then
        ok "timeseries: $n progress lines on stderr in $(echo "$t1 - $t0" | bc | cut -c1-4) s, each 1 s or more after the last, none on stdout"
    else bad "timeseries progress lines (exit $rc, $n lines)"; head -3 $B/cli_prog.err; fi
    rm -f $B/cli_prog.out $B/cli_prog.err

    # ---- a preset is a base: an explicit flag wins, before --preset or after it
    a=$("$TSP" --lr 0.02 --batch 4 --preset gpt4ts $S2 --batch 4 --max-steps 1 2>&1 | grep '^training:')
    b=$("$TSP" $S2 --preset gpt4ts --lr 0.02 --batch 4 --max-steps 1 2>&1 | grep '^training:')
    if [ -n "$a" ] && [ "$a" = "$b" ] && echo "$a" | grep -q '^training: batch 4, lr 0.02 '; then
        ok "timeseries: --lr and --batch before --preset gpt4ts win as they do after it ($a)"
    else bad "timeseries flags before --preset: '$a' against '$b'"; fi
fi

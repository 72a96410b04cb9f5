# tests/cli_ts_baselines.sh - tools/ts_baselines' command line as a user meets it: timeseries'
# reading flags (--season, --fill, --date-column, --columns), strict numbers, unknown and
# valueless flags refused naming them, the season from the dates' calendar, and its
# numbers against awk's on the CSV. Sourced by tests/cli.sh (its ok, bad, skip, built,
# refuse, $B); every file is generated here: 200 weekly rows, lookback 60, horizon 4.
if built ts_baselines; then
    TB="$B/cli_ts_baselines"
    # weekly rows from 2020-01-06 (a Monday): a yearly sine, a trend, a 13-week cycle, each
    # plus a uniform [-1, 1] draw (a fixed LCG); GAPS=1 empties b at rows 10, 75, 150 and
    # writes NA for a at row 120; COLS: the header's order of date, a, b, c
    tb_csv() { # OUT GAPS DATE-NAME DATE-POSITION (1: first, 2: second)
        seq 0 199 | sed 's/.*/2020-01-06 +& weeks/' | date -u -f - +%F |
        awk -v gaps="$2" -v dn="$3" -v pos="$4" 'BEGIN { r = 12345; pi = atan2(0, -1)
                if (pos == 1) print dn ",a,b,c"; else print "a," dn ",b,c" }
            function u() { r = (r * 16807) % 2147483647; return 2 * r / 2147483647 - 1 }
            { k = NR - 1
              a = sprintf("%.3f", 10 + 3 * sin(2 * pi * k / 52) + u())
              b = sprintf("%.3f", 50 + 0.05 * k + 2 * cos(2 * pi * k / 52) + u())
              c = sprintf("%.3f", 5 * sin(2 * pi * k / 13) + u())
              if (gaps && (k == 10 || k == 75 || k == 150)) b = ""
              if (gaps && k == 120) a = "NA"
              if (pos == 1) print $0 "," a "," b "," c; else print a "," $0 "," b "," c }' > "$1"
    }
    tb_csv $B/cli_tb_gaps.csv 1 date 1
    tb_csv $B/cli_tb_plain.csv 0 date 1
    tb_csv $B/cli_tb_stamp.csv 0 stamp 2
    TBA="--data $B/cli_tb_plain.csv --horizon 4 --lookback 60"

    # ---- strict numbers: exit 2, one line naming the flag and the text
    refuse ts_baselines --horizon 12x --data $B/cli_tb_plain.csv
    refuse ts_baselines --horizon "" --data $B/cli_tb_plain.csv
    refuse ts_baselines --horizon -4 --data $B/cli_tb_plain.csv
    refuse ts_baselines --horizon 0 --data $B/cli_tb_plain.csv
    refuse ts_baselines --horizon 99999999999999999999 --data $B/cli_tb_plain.csv  # beyond long: strtol's ERANGE
    refuse ts_baselines --lookback 1e3 $TBA
    refuse ts_baselines --lookback 0 $TBA
    refuse ts_baselines --season abc $TBA
    refuse ts_baselines --season 0 $TBA
    refuse ts_baselines --season -52 $TBA
    refuse ts_baselines --season 61 $TBA          # longer than the lookback (60)
    refuse ts_baselines --drop-last -1 $TBA
    refuse ts_baselines --drop-last 2.5 $TBA
    refuse ts_baselines --fill forward $TBA
    refuse ts_baselines --columns "" $TBA

    # ---- unknown flags, a flag without its value, --period: exit 2, one line naming it
    tb_refused() { # LABEL FIXED-TEXT ARGS...
        local label=$1 want=$2; shift 2
        local out rc
        out=$(timeout 20 "$TB" "$@" 2>&1); rc=$?
        if [ $rc -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -qF -- "$want"; then ok "ts_baselines $label refused: $out"
        else bad "ts_baselines $label (exit $rc, want 2 and one line with '$want')"; echo "$out" | head -3; fi
    }
    tb_refused "an unknown flag" "unknown option --bogus" $TBA --bogus 1
    tb_refused "a stray word" "unknown option 52" $TBA 52
    tb_refused "--horizon without its value" "--horizon needs a value" --data $B/cli_tb_plain.csv --horizon
    tb_refused "--fill without its value" "--fill needs a value" $TBA --fill
    tb_refused "--period (the old name)" "unknown option --period: the seasonal naive's period is --season N" $TBA --period 24
    tb_refused "no --horizon" "--horizon H is required" --data $B/cli_tb_plain.csv
    tb_refused "no --data" "--data FILE.csv is required" --horizon 4

    # ---- the calendar's season: weekly rows -> 52 (info.season), the seasonal naive at 52
    out=$("$TB" $TBA 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^season 52 rows (the dates. calendar cycle' &&
       echo "$out" | grep -Eq '^seasonal-naive val mse [0-9.]+ test mse [0-9.]+ mae [0-9.]+ windows 37 \(period 52\)$' &&
       echo "$out" | grep -q '^data .*: 200 rows, 3 channels (a, b, c), 70/10/20 borders; windows train 77, validation 17, test 37$'; then
        ok "ts_baselines on weekly rows: season 52 from the calendar, the seasonal naive at period 52, 37 test windows"
    else bad "ts_baselines weekly default season (exit $rc)"; echo "$out" | head -4; fi
    out=$("$TB" $TBA --season 13 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^season 13 rows (--season)$' && echo "$out" | grep -q '(period 13)$'; then
        ok "ts_baselines --season 13 overrides the calendar's 52"
    else bad "ts_baselines --season 13 (exit $rc)"; echo "$out" | head -4; fi
    out=$("$TB" --data $B/cli_tb_plain.csv --horizon 4 --lookback 40 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^season 52 rows (the dates. calendar cycle) is longer than the lookback 40: no seasonal naive' &&
       echo "$out" | grep -q '^seasonal-naive none' && echo "$out" | grep -q '^channel a: last-value [0-9.e+]* / [0-9.e+]*; linear '; then
        ok "ts_baselines --lookback 40 on weekly rows: the calendar's 52 does not fit, said; the other two scored"
    else bad "ts_baselines season longer than the lookback (exit $rc)"; echo "$out" | head -4; fi

    cut -d, -f2- $B/cli_tb_plain.csv > $B/cli_tb_nodate.csv
    out=$("$TB" --data $B/cli_tb_nodate.csv --horizon 4 --lookback 60 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^season: none (the dates have no calendar cycle; --season N sets one): no seasonal naive$' &&
       echo "$out" | grep -q '^seasonal-naive none (the dates have no calendar cycle' &&
       [ "$(echo "$out" | grep -c '^channel [abc]: last-value [0-9.e+]* / [0-9.e+]*; linear [0-9.e+]* / [0-9.e+]*$')" -eq 3 ]; then
        ok "ts_baselines on a file without dates: no season, says --season N sets one; last value and linear scored per channel"
    else bad "ts_baselines without dates (exit $rc)"; echo "$out" | head -4; fi

    # --drop-last N: also the whole batches of N test windows (37 -> 30 at N = 10); --target
    out=$("$TB" $TBA --drop-last 10 --target c 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ "$(echo "$out" | grep -Ec '^(last-value|seasonal-naive|linear) val mse .* windows 37( \(.*\))?; drop-last 10: test mse [0-9.]+ windows 30$')" -eq 3 ] &&
       echo "$out" | grep -q ': 200 rows, 1 channel (c),' && [ "$(echo "$out" | grep -c '^channel ')" -eq 1 ]; then
        ok "ts_baselines --drop-last 10 --target c: one channel; each forecaster's drop-last MSE over 30 of 37 windows"
    else bad "ts_baselines --drop-last 10 --target c (exit $rc)"; echo "$out" | head -6; fi
    out=$("$TB" $TBA --target c --columns a,b 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q 'both choose the channels'; then ok "ts_baselines --target with --columns: the library's refusal ($out)"
    else bad "ts_baselines --target with --columns (exit $rc)"; echo "$out" | head -3; fi

    # ---- --fill: gaps refused by default naming the fix; filled with --fill previous / linear
    out=$("$TB" --data $B/cli_tb_gaps.csv --horizon 4 --lookback 60 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q 'line 12' && echo "$out" | grep -qF -- '--fill previous|linear'; then
        ok "ts_baselines on a file with gaps, no --fill: refused at line 12, naming --fill"
    else bad "ts_baselines gaps without --fill (exit $rc)"; echo "$out" | head -3; fi
    p=$("$TB" --data $B/cli_tb_gaps.csv --horizon 4 --lookback 60 --fill previous 2>&1); rc=$?
    l=$("$TB" --data $B/cli_tb_gaps.csv --horizon 4 --lookback 60 --fill linear 2>&1); rc2=$?
    if [ $rc -eq 0 ] && [ $rc2 -eq 0 ] && echo "$p" | grep -q '^filled 4 missing values (--fill)$' &&
       echo "$l" | grep -q '^filled 4 missing values (--fill)$' &&
       [ "$(echo "$p" | grep '^channel b:')" != "$(echo "$l" | grep '^channel b:')" ]; then
        ok "ts_baselines --fill previous / linear: 4 values filled, channel b's errors differ between the two fills"
    else bad "ts_baselines --fill (exit $rc, $rc2)"; echo "$p" | head -3; echo "$l" | grep '^channel b'; fi

    # ---- --date-column: the dates in a column named stamp, second in the header
    out=$("$TB" --data $B/cli_tb_stamp.csv --horizon 4 --lookback 60 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q 'stamp'; then ok "ts_baselines without --date-column on a second-column date named stamp: refused, naming it"
    else bad "ts_baselines stamp without --date-column (exit $rc)"; echo "$out" | head -3; fi
    out=$("$TB" --data $B/cli_tb_stamp.csv --horizon 4 --lookback 60 --date-column stamp 2>&1); rc=$?
    ref=$("$TB" $TBA 2>&1 | grep '^channel')
    if [ $rc -eq 0 ] && echo "$out" | grep -q '^season 52 rows (the dates. calendar cycle' &&
       echo "$out" | grep -q ': 200 rows, 3 channels (a, b, c),' && [ -n "$ref" ] && [ "$(echo "$out" | grep '^channel')" = "$ref" ]; then
        ok "ts_baselines --date-column stamp: its weekly calendar (season 52) and the same numbers as the date-first file"
    else bad "ts_baselines --date-column stamp (exit $rc)"; echo "$out" | head -4; fi

    # ---- --columns c,a: two of three channels in that order, checked against awk on the CSV.
    # 70/10/20: test rows [200 - int(200 * 0.2) - 60, 200) = [100, 200), windows w = 0..36,
    # x rows [100 + w, 160 + w), y rows [160 + w, 164 + w). Tolerance, relative 1e-4: the tool
    # prints %.6g (5e-6) and sums errors of float-stored scaled values z (relative rounding
    # 2^-24 each; |z| < 2 for a and c), so an error moves by at most 2^-23 * 2 std and a
    # squared-error sum by at most 2 * 2^-22 / rms(e) relative (Cauchy-Schwarz), rms(e) >=
    # 0.2 std for these noisy series (the seasonal naive's on c, the least): 2.4e-6; the MAE
    # less. 7.4e-6 in all, so 1e-4 leaves a margin and still catches a wrong border (a
    # window one row late moves each of them by 0.8% or more)
    out=$("$TB" $TBA --columns c,a 2>&1); rc=$?
    got=$(echo "$out" | awk -F'[:;/ ]+' '$1 == "channel" { print $2, $4, $5, $7, $8 }')
    want=$(awk -F, -v L=60 -v H=4 -v P=52 'NR > 1 { v["a", NR - 2] = $2; v["c", NR - 2] = $4; n = NR - 1 }
        END { b = n - int(n * 0.2) - L; nw = n - b - L - H + 1
              split("c a", chs, " ")
              for (i = 1; i <= 2; i++) { ch = chs[i]; s1 = a1 = s2 = a2 = 0
                  for (w = 0; w < nw; w++) for (h = 0; h < H; h++) {
                      t = v[ch, b + w + L + h]; e = v[ch, b + w + L - 1] - t; f = v[ch, b + w + L - P + h % P] - t
                      s1 += e * e; a1 += (e < 0 ? -e : e); s2 += f * f; a2 += (f < 0 ? -f : f) }
                  print ch, s1 / (nw * H), a1 / (nw * H), s2 / (nw * H), a2 / (nw * H) } }' $B/cli_tb_plain.csv)
    if [ $rc -eq 0 ] && echo "$out" | grep -q ': 200 rows, 2 channels (c, a),' && [ -n "$want" ] &&
       awk -v g="$got" -v w="$want" 'BEGIN { n = split(g, x, /[ \n]/); m = split(w, y, /[ \n]/); if (n != 10 || m != 10) exit 1
           for (i = 1; i <= n; i++) { if (i % 5 == 1) { if (x[i] != y[i]) exit 1; continue }
               d = (x[i] - y[i]) / y[i]; if (d < 0) d = -d; if (d > 1e-4) exit 1 } }'; then
        ok "ts_baselines --columns c,a: channels c then a; last-value and seasonal-naive mse / mae in the data's units == awk's on the CSV within 1e-4 ($(echo "$got" | tr '\n' ' '))"
    else bad "ts_baselines --columns c,a (exit $rc): tool '$got' vs awk '$want'"; echo "$out" | head -3; fi
fi

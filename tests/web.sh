#!/usr/bin/env bash
# tests/web.sh (make test-web) - the planner page: make web builds it with emscripten,
# then headless Chromium (tests/web_driver.py) loads it from disk with the network off,
# drives it through the configs below (every mode, the presets) and checks that every
# number it shows is gpt2rt-mem --json's, that an update takes under 1 s, that a link
# carries the situation, and saves build/gpt2rt-mem.png. One line a check, then
# "WEB: N passed, N failed, N skipped"; without emcc or chromium, one named skip.
set -u
cd "$(dirname "$0")/.."
B=build
W=$B/web
EMCC=${EMCC:-emcc}
passed=0 failed=0 skipped=0
ok()   { passed=$((passed + 1)); echo "ok   $1"; }
bad()  { failed=$((failed + 1)); echo "FAIL $1"; }
skip() { skipped=$((skipped + 1)); echo "skip $1"; }
finish() { echo "WEB: $passed passed, $failed failed, $skipped skipped"; [ $failed -eq 0 ]; exit; }

CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
missing=""
command -v "$EMCC" > /dev/null 2>&1 || missing="emscripten"
[ -n "$CHROMIUM" ] || missing="${missing:+$missing }chromium"
command -v python3 > /dev/null 2>&1 || missing="${missing:+$missing }python3"
if [ -n "$missing" ]; then
    skip "make test-web: the planner page in headless Chromium against gpt2rt-mem --json (apt-get install $missing)"
    finish
fi
mkdir -p $W
if make -s web > $W/make.log 2>&1 && [ -s $B/gpt2rt-mem.html ]; then
    ok "make web: $B/gpt2rt-mem.html, $(stat -c %s $B/gpt2rt-mem.html) bytes, the planner inlined (emcc $("$EMCC" --version | head -1 | grep -Eo '[0-9]+\.[0-9]+\.[0-9]+' | head -1))"
else bad "make web"; tail -20 $W/make.log; finish; fi
# nothing the page could fetch: no address but the SVG namespace, no src or href
ext=$(grep -Eo "https?://[^\"' )]*|(src|href)=[\"'][^\"']+" $B/gpt2rt-mem.html | grep -v '^http://www.w3.org/2000/svg$' | head -3)
if [ -z "$ext" ]; then ok "the page names no address, script or style outside itself"
else bad "the page refers outside itself: $ext"; fi

if ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 -DGPT2RT_MEM_NO_PNG -o $W/gpt2rt-mem tools/gpt2rt_mem.c -lm > $W/cc.log 2>&1; then
    bad "build tools/gpt2rt_mem.c for the reference answers"; head -20 $W/cc.log; finish
fi
# the configs, as the page writes them: the presets, every mode, each knob
M="--seq 1024"
T="--gpu rtx3090 --budget 24GiB"
cat > $W/cases.txt <<CASES
--model 124M $M --batch 8 --accum 1 --precision fp32 --recompute none $T
--model 124M $M --batch 32 --accum 1 --precision fp32 --recompute none $T
--model 124M $M --batch 32 --accum 4 --precision fp32 --recompute none $T
--model 124M $M --batch 8 --accum 1 --precision fp32 --tf32 --recompute none --gpu h100 --budget 80GiB
--model 124M $M --batch 8 --accum 1 --precision bf16 --recompute none --gpu h100 --budget 80GiB
--model 124M $M --batch 16 --accum 1 --precision bf16 --recompute none --gpu h100 --budget 80GiB
--model 124M $M --batch 8 --accum 1 --precision fp16 --recompute selective --gpu a100 --budget 80GiB
--model 124M $M --batch 8 --accum 1 --precision fp32 --recompute full --checkpoint-every 1 $T
--model 124M $M --batch 8 --accum 1 --precision fp32 --recompute full --checkpoint-every 3 $T
--model 124M $M --batch 8 --accum 1 --precision fp32 --recompute none --classifier-chunk 1024 $T
--model 124M $M --batch 8 --accum 1 --precision fp32 --recompute none --frozen attn,mlp $T
--model 124M $M --batch 8 --accum 1 --precision fp32 --recompute none --frozen token,pos,ln $T
--model 124M $M --batch 8 --accum 1 --precision fp32 --recompute none --inference $T
--model 124M $M --batch 16 --accum 1 --precision fp32 --recompute none --devices 2 --mode ddp $T
--model 124M $M --batch 16 --accum 2 --precision fp32 --recompute none --devices 2 --mode ddp --shard $T
--model 124M $M --batch 16 --accum 4 --precision fp32 --recompute none --devices 2 --mode split $T
--model 124M $M --batch 64 --accum 2 --precision bf16 --recompute selective --devices 4 --mode ddp --gpu a100-40 --budget 40GiB
--model 124M $M --batch 8 --accum 8 --precision fp32 --recompute none --devices 4 --mode split --gpu rtx4090 --budget 24GiB
--model 355M --seq 512 --batch 4 --accum 1 --precision fp32 --recompute none $T
--model 355M --seq 512 --batch 4 --accum 1 --precision bf16 --recompute none $T
--model 355M $M --batch 32 --accum 1 --precision fp32 --recompute none $T
--model 355M $M --batch 32 --accum 1 --precision fp32 --recompute none --gpu h100 --budget 12GiB
--model 774M $M --batch 8 --accum 1 --precision bf16 --recompute selective --gpu a100 --budget 80GiB
--model 1558M $M --batch 4 --accum 1 --precision fp32 --recompute none --devices 2 --mode split --gpu a100-40 --budget 40GiB
--model 1558M $M --batch 8 --accum 1 --precision bf16 --recompute full --checkpoint-every 4 --devices 8 --mode ddp --shard --gpu h100 --budget 80GiB
--layers 6 --heads 12 --embd 768 --input patches --head next-patch --patch 16 --stride 16 --channels 1 --seq 1024 --batch 2048 --accum 1 --precision fp32 --recompute none --devices 2 --mode ddp $T
--layers 6 --heads 12 --embd 768 --input patches --head next-patch --patch 16 --stride 16 --channels 1 --seq 1024 --batch 2048 --accum 1 --precision fp32 --recompute none $T
--layers 6 --heads 12 --embd 768 --input patches --head next-patch --patch 16 --stride 16 --channels 1 --seq 1024 --batch 2048 --accum 2 --precision bf16 --recompute selective --devices 2 --mode split $T
--layers 6 --heads 12 --embd 768 --input patches --head next-patch --patch 16 --stride 16 --channels 1 --seq 512 --batch 256 --accum 1 --precision fp32 --recompute none --frozen attn,mlp $T
--layers 4 --heads 4 --embd 128 --seq 256 --batch 2 --accum 1 --precision fp32 --recompute none $T
--layers 48 --heads 32 --embd 4096 --seq 2048 --batch 1 --accum 1 --precision bf16 --recompute full --checkpoint-every 1 --devices 8 --mode split --gpu h100 --budget 80GiB
--layers 12 --heads 5 --embd 768 --seq 1024 --batch 8 --accum 1 --precision fp32 --recompute none $T
--model 124M $M --batch 8 --accum 1 --precision fp32 --recompute none --gpu h100 --budget 12.5GiB
CASES
: > $W/expected.txt
while IFS= read -r line; do
    # shellcheck disable=SC2086
    $W/gpt2rt-mem $line --json | tr -d '\n' >> $W/expected.txt
    echo >> $W/expected.txt
done < $W/cases.txt
# links as people write them (FLAGS|what the form cannot show, listed on the page): each
# is opened as build/gpt2rt-mem.html#FLAGS and must plan what gpt2rt-mem FLAGS --json
# plans (the same bytes), or show the refusal gpt2rt-mem prints, naming the flag
cat > $W/links.txt <<'LINKS'
--model 124M --batch 8|
--model 1.5B --batch 8|
--model 124M --batch 8 --precision fp64|
--model 124M --batch 8 --budget 512MiB|
--model 124M --batch 8 --budget 1e400GiB|
--model 124M --batch 8 --budget 0GiB|
--model 124M --ctx 512 --seq 512 --batch 8 --budget 24GiB|--ctx 512
--model 124M --batch 8 --checkpoint-every sqrt --budget 24GiB|--checkpoint-every sqrt
--model 124M --batch 8 --backend cpu --threads 4 --cpu-speed 60,0,8|--backend cpu --threads 4 --cpu-speed 60,0,8
--model 124M --batch 8 --gpu custom --budget 48GiB|
--model 124M --batch 8 --precision bf16 --gpu custom --gpu-peak 989.4,3350 --budget 80GiB|
--model 124M --batch 16 --devices 2 --gpu h100 --link 100 --budget 80GiB|--link 100
--model 124M --batch 16 --sweep chunk=0,1024,256 --gpu h100 --budget 80GiB|
--model 1558M --batch 4 --stages 30 --budget 40GB|--stages 30
--model 1558M --batch 4 --stages 12,24,36 --gpu a100-40 --budget 40GiB|--stages 12,24,36
--model 355M --batch 32 --budget 24GiB --allow-precision --allow-classifier|--allow-precision --allow-classifier
--model 124M --batch 16 --devices 2 --budget 24GiB --allow-shard --margin 5%|--allow-shard --margin 5%
--model 124M --batch 10 --accum 4|
--model 124M --batch 8 --vocab 50304 --kv-batch 4 --kv-len 256 --link nvlink --gpu a100 --budget 80GiB|--vocab 50304 --kv-batch 4 --kv-len 256 --link nvlink
--model 124M --batch 8 --inference-weights bf16 --cpu-speed 60,0,8|--inference-weights bf16 --cpu-speed 60,0,8
--input patches --head regression --patch 8 --stride 8 --channels 7 --horizon 96 --lookback 336 --batch 32|--head regression --patch 8 --stride 8 --channels 7 --horizon 96 --lookback 336
--model 124M --batch 8 --frozen head,ln|--frozen head,ln
--model 124M --batch 8 --mode none|--mode none
--model 124M --batch=8 --budget=24GiB|
--model 124M --sweep batch=1,2|
--preset allm4ts-stage1|
--model 124M --batch 8 --bogus 3|
--model 124M --batch|
LINKS
# the lab sheet of docs/memory.md: five links a teacher hands out, each opened the same way
sed -n '/^<!-- lab sheet -->/,/^<!-- end of the lab sheet -->/p' docs/memory.md | grep -o '`#--[^`]*`' |
    sed 's/^`#//; s/`$/|/' > $W/lab.txt
if [ "$(wc -l < $W/lab.txt)" -eq 5 ]; then ok "docs/memory.md's lab sheet: 5 links, each opened below"
else bad "docs/memory.md's lab sheet: $(wc -l < $W/lab.txt) links, not 5"; fi
cat $W/lab.txt >> $W/links.txt
: > $W/links_expected.txt
while IFS='|' read -r flags extra; do
    # shellcheck disable=SC2086
    js=$($W/gpt2rt-mem $flags --json 2> $W/link_err.txt | tr -d '\n')
    if [ -n "$js" ]; then echo "J $js" >> $W/links_expected.txt
    else echo "E $(sed -n '1s/^gpt2rt-mem: //; 1s/ (see --help)$//p' $W/link_err.txt)" >> $W/links_expected.txt; fi
done < $W/links.txt
out=$(timeout 300 python3 tests/web_driver.py "$CHROMIUM" $B/gpt2rt-mem.html $W/cases.txt $W/expected.txt $B/gpt2rt-mem.png \
      $W/links.txt $W/links_expected.txt 2>&1); rc=$?
echo "$out" | sed '$d'
last=$(echo "$out" | tail -1)
if [[ "$last" =~ ^WEB:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    passed=$((passed + BASH_REMATCH[1])); failed=$((failed + BASH_REMATCH[2]))
    if [ $rc -ne 0 ] && [ "${BASH_REMATCH[2]}" -eq 0 ]; then bad "tests/web_driver.py exited $rc with no failure counted"; fi
else bad "tests/web_driver.py (exit $rc): $last"; fi
finish

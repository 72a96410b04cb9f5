#!/usr/bin/env bash
# tools/split_header.sh HEADER OUT: cuts gpt2rt.h into the files of OUT (src/), in the header's order, moving every
# line and changing none, then checks that tools/amalgamate.sh writes HEADER back from OUT byte for byte.
# A one-time migration. The cuts are found by anchors (the text a line starts with; the row's offset moves the cut
# that many lines from it), each of which must start exactly one line of HEADER; a missing or repeated anchor, a cut
# out of order or a file over 1,500 lines stops it. Each file gets a two-line comment (what it holds; what it may
# call), an include guard, and an include of the file before it, so the include graph is today's order.
set -euo pipefail
header=${1:?"usage: bash tools/split_header.sh gpt2rt.h src/"}
out=${2:?"usage: bash tools/split_header.sh gpt2rt.h src/"}
out=${out%/}
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then echo "split_header: $out/ is not empty: remove it first (rm -r $out)" >&2; exit 1; fi

# FILE | OFFSET | ANCHOR | WHAT IT HOLDS (empty: the section banners in it)
# FILE "-": lines of the outline (the enclosing file) itself; "{ F": F encloses the rows up to "}", whose lines
# it holds too; the outline OUT/gpt2rt.h encloses everything.
table='
manual.h                    | 0| /* gpt2rt.h - a single-header training runtime | the manual: using it, the contents, the license terms
api.h                       | 0| #ifndef GPT2RT_H                               | the public API: types, constants and calls
-                           |-1|    IMPLEMENTATION                              |
common/platform.h           | 0| /* the one switch for the CUDA backend         | the CUDA switch, system headers, platform macros
common/threads.h            | 0| /* ==== 1. Common ==== */                      |
common/types.h              | 0| /* ==== 1.2 Types                              |
common/errors.h             | 0| /* ==== 1.3 Hooks, errors                      |
common/comm.h               | 0| /* ==== 1.4 Communicators                      |
common/stages.h             | 0| /* ==== 1.5 Layer-split stages                 |
config/config.h             | 0| /* ==== 2. Config ==== */                      |
config/caps.h               | 0| /* ==== 2.1 Capabilities                       |
config/checks.h             | 0| /* ==== 2.2 Checks                             |
plan/params.h               | 0| /* ==== 3. Layout and plan ==== */             |
plan/activations.h          | 0| /* ==== 3.2 Activations                        |
plan/plan.h                 | 0| /* ==== 3.3 Plan ==== */                       |
plan/advisor.h              | 0| /* ==== 3.4 Advisor                            |
formats/safetensors_read.h  | 0| /* ==== 4. Formats ==== */                     |
formats/safetensors_write.h | 0| /* ==== 4.2 safetensors: writing               |
formats/hf.h                | 0| /* ==== 4.3 Hugging Face                       |
formats/state.h             | 0| /* ==== 4.4 Training state                     |
tokenizer/common.h          | 0| /* ==== 5. Tokenizer ==== */                   | 5. Tokenizer: its outline; whole files, messages and shuffles shared with 6.3
{ tokenizer.h               |-1| enum { GPT2RT__TOK_OTHER = 0,                 | 5. Tokenizer, unless GPT2RT_NO_TOKENIZER: the files of tokenizer/
tokenizer/types.h           | 0| enum { GPT2RT__TOK_OTHER = 0,                 | 5. Tokenizer: its limits and types, the Unicode tables
tokenizer/bpe.h             | 0| /* ==== 5.1 Unicode classes                    |
tokenizer/encode.h          | 0| /* ==== 5.4 Loading, encoding                  |
tokenizer/shards.h          | 0| /* ==== 5.5 llm.c token shards                 |
}                           |-2| /* ==== 6. Inputs ==== */                      |
inputs/patches.h            | 0| /* ==== 6. Inputs ==== */                      |
{ series.h                  |-1| /* ==== 6.3 Series files                       | 6.3, 6.4 series files and the forecaster, unless GPT2RT_NO_SERIES: inputs/series.h, inputs/forecaster.h
inputs/series.h             | 0| /* ==== 6.3 Series files                       |
inputs/forecaster.h         | 0| /* ==== 6.4 Forecaster                         |
}                           |-2| /* ==== 7. CPU backend ==== */                 |
cpu/ops.h                   | 0| /* ==== 7. CPU backend ==== */                 |
cpu/matmul.h                | 0| /* ==== 7.2 Matrix product                     |
cpu/model.h                 | 0| /* ==== 7.3 Model ==== */                      |
cpu/backend.h               | 0| /* ==== 7.4 Backend table                      |
{ cuda.h                    | 0| /* ==== 8. CUDA backend ==== */                | 8. CUDA backend: the files of cuda/ under the CUDA switch, or the two calls that say it is absent
cuda/common.cuh             | 0| /* ==== 8.1 Common ==== */                      |
cuda/ops.cuh                | 0| /* ==== 8.2 Ops ==== */                         |
cuda/series.cuh             | 0| /* ---- time series: 6.2'"'"'s RevIN            | 8.2 Ops: time series (RevIN, patches, head output, MSE gradient), aLLM4TS'"'"'s sequence head
cuda/attention.cuh          | 0| /* ==== 8.3 Attention ==== */                  | 8.3 Attention: the fast (sm_80) and Hopper (sm_90a) building blocks and forward kernels
cuda/attention_backward.cuh |-1|    Fast backward, dK and dV.                   | 8.3 Attention: the backward kernels, the host side, attention over the KV cache
cuda/matmul.cuh             | 0| /* ==== 8.4 Matrix products                    |
cuda/driver.cuh             | 0| /* ==== 8.5 Driver ==== */                      | 8.5 Driver: errors, helpers, creation, weights between host and device, the model
cuda/steps.cuh              | 0| /* ---- the steps of gpt2rt__model_forward     | 8.5 Driver: the model steps on the device, training calls, decode, the public calls
cuda/comm.cuh               | 0| /* ==== 8.6 Device communicators               |
cuda/stages.cuh             | 0| /* ==== 8.7 Layer split on CUDA                |
}                           |-1| /* compiled without CUDA: AUTO picks the CPU   |
optimizer.h                 | 0| /* ==== 9. Optimizer ==== */                   |
context/context.h           | 0| /* ==== 10. Context ==== */                    |
context/data_parallel.h     | 0| /* ==== 10.1 Data parallel                     |
context/layer_split.h       | 0| /* ==== 10.2 Layer split                       |
context/rendezvous.h        | 0| /* ==== 10.3 Processes: rendezvous             |
context/mpi.h               | 0| /* ==== 10.4 Processes: MPI                    |
public/plan.h               | 0| /* ==== 11. Public calls ==== */               |
public/context.h            | 0| /* ==== 11.3 Context ==== */                   |
public/training.h           | 0| /* ==== 11.4 Training                          |
public/files.h              | 0| /* ==== 11.5 Weights and training state        |
public/generate.h           | 0| /* ==== 11.7 Generation                        |
-                           | 0| #endif /* GPT2RT_IMPLEMENTATION_DONE */        |
'

mkdir -p "$out"
LC_ALL=C awk -v out="$out" -v table="$table" '
function fail(msg) { printf "split_header: %s\n", msg > "/dev/stderr"; failed = 1; exit 1 }
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function guard(f) { f = toupper(f); gsub(/[^A-Z0-9]/, "_", f); return "GPT2RT__SRC_" f }
# the path of file "to" as an include in file "from" (both relative to out)
function rel(from, to,    up) {
    while (match(from, /^[^\/]*\//) && substr(to, 1, RLENGTH) == substr(from, 1, RLENGTH)) {
        to = substr(to, RLENGTH + 1); from = substr(from, RLENGTH + 1)
    }
    up = ""
    while (match(from, /^[^\/]*\//)) { up = up "../"; from = substr(from, RLENGTH + 1) }
    return up to
}
function write(f, text, what, prev,    path, g) {
    path = out "/" f
    g = guard(f)
    if (f ~ /\// && system("mkdir -p \"" out "/" substr(f, 1, match(f, /\/[^\/]*$/) - 1) "\"") != 0) fail("cannot make the folder of " path)
    if (f != "gpt2rt.h") {
        printf "/* %s - %s\n   may call: %s */\n#ifndef %s\n#define %s\n", f, what,
               prev == "" ? "nothing else in gpt2rt.h" : prev " and what it includes", g, g > path
        if (prev != "") printf "#include \"%s\"\n", rel(f, prev) > path
        printf "\n%s#endif /* %s */\n", text, g > path
    } else {
        printf "/* src/gpt2rt.h - the outline of gpt2rt.h: `make header` (tools/amalgamate.sh) writes the header from it,\n" \
               "   putting each included file in place of its #include, once; the files hold the code, in this order */\n\n%s", text > path
    }
    close(path)
}
BEGIN {
    nrow = split(table, row, "\n"); n = 0
    for (i = 1; i <= nrow; i++) {
        if (row[i] == "") continue
        split(row[i], c, "|")
        n++; file[n] = trim(c[1]); off[n] = trim(c[2]) + 0; desc[n] = trim(c[4])
        anchor[n] = c[3]; sub(/^ /, "", anchor[n]); sub(/[ \t]+$/, "", anchor[n]) # its leading spaces count
    }
}
{ line[NR] = $0 }
END {
    if (failed) exit 1
    for (i = 1; i <= n; i++) {
        hits = 0
        for (l = 1; l <= NR; l++) if (index(line[l], anchor[i]) == 1) { hits++; at = l }
        if (hits != 1) fail("anchor \"" anchor[i] "\" (" file[i] ") starts " hits " lines of the header, not 1")
        start[i] = at + off[i]
        if (i == 1 && start[i] != 1) fail("the first anchor is not on line 1")
        if (i > 1 && start[i] <= start[i - 1]) fail("anchor \"" anchor[i] "\" comes before the one above it")
    }
    start[n + 1] = NR + 1
    depth = 0; encl[0] = "gpt2rt.h"; body[0] = ""; prev[0] = ""
    for (i = 1; i <= n; i++) {
        text = ""; what = desc[i]; opened = 0
        for (l = start[i]; l < start[i + 1]; l++) {
            text = text line[l] "\n"
            if (line[l] ~ /^#[ \t]*if/) opened++
            if (line[l] ~ /^#[ \t]*endif/) opened--
            if (desc[i] == "" && match(line[l], /^\/\* ==== .* ==== \*\/$/))
                what = what (what == "" ? "" : "; ") substr(line[l], 9, length(line[l]) - 16)
        }
        if (what == "" && file[i] != "-" && file[i] != "}") fail(file[i] ": no section banner in it: give it a description")
        if (start[i + 1] - start[i] > 1500) fail(file[i] ": " start[i + 1] - start[i] " lines, over 1,500: cut it at a sub-banner")
        f = file[i]
        if (f != "-" && opened != (f == "}" ? -1 : f ~ /^\{ / ? 1 : 0))
            fail(file[i] " (from the line starting \"" anchor[i] "\"): its #if and #endif lines do not pair up (" opened ")")
        if (f == "-") { body[depth] = body[depth] text; continue }
        if (f == "}") {
            body[depth] = body[depth] text
            write(encl[depth], body[depth], what_encl[depth], prev_encl[depth])
            depth--; prev[depth] = encl[depth + 1]; continue
        }
        if (f ~ /^\{ /) {
            f = substr(f, 3)
            body[depth] = body[depth] "#include \"" rel(encl[depth], f) "\"\n"
            depth++; encl[depth] = f; body[depth] = text; what_encl[depth] = what
            prev_encl[depth] = prev[depth - 1]; prev[depth] = prev[depth - 1]; continue
        }
        body[depth] = body[depth] "#include \"" rel(encl[depth], f) "\"\n"
        write(f, text, what, prev[depth] == "manual.h" ? "" : prev[depth])
        prev[depth] = f
    }
    if (depth != 0) fail("a \"{\" row has no \"}\" row")
    write("gpt2rt.h", body[0])
}
' "$header" || { echo "split_header: nothing usable in $out/" >&2; exit 1; }

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
sh "$(dirname "$0")/amalgamate.sh" "$out" > "$tmp"
if cmp -s "$tmp" "$header"; then
    echo "split_header: $(find "$out" -type f | wc -l) files in $out/; tools/amalgamate.sh $out writes $header back byte for byte"
else
    echo "split_header: tools/amalgamate.sh $out differs from $header:" >&2; cmp "$tmp" "$header" >&2 || true; exit 1
fi

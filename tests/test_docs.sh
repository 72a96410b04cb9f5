#!/usr/bin/env bash
# tests/test_docs.sh - make test-docs: the commands and programs of README.md and
# docs/*.md (not docs/results/), run as a reader would run them.
#
# Every ```sh and ```c block is a check, in document order, in a scratch copy of the
# working tree (the files git tracks or would track, mtimes kept, and the build/
# binaries the blocks name, made here first with make), one scratch directory per
# document, so a block sees what the blocks above it wrote:
#   - a ```c block preceded by <!-- file: NAME.c --> is written to NAME.c and compiled
#     (warnings as errors); the shell blocks after it run it as the text says;
#   - every ```c block is also compiled as C++17 (${CXX:-g++} -std=c++17 -x c++,
#     -fsyntax-only, warnings as errors but "= {0}"): the docs promise C or C++;
#   - any other ```c block holding main() is compiled and run with no arguments, exit 0;
#   - a ```sh block runs under bash -e with a time limit (DOCS_TIMEOUT,
#     120 s; <!-- timeout: N --> before the fence for one block), exit 0;
#   - a block preceded by the visible line *(not run: REASON)* is counted and named as a
#     skip (the reader sees the reason too);
#   - any other ```c block (a fragment) fails: mark it, or make it a program.
# Then the support matrix of README.md (the table after "<!-- support matrix") is
# compared cell by cell with what gpt2rt_create accepts (tests/docs_support.c),
# every relative link is checked to name a file that exists, and
# statements of support in the docs are checked against that matrix (claims below).
# Last line: "DOCS: N passed, N failed, N skipped"; exit 1 when a check failed.
# Usage: tests/test_docs.sh [FILE.md ...]   (default: README.md docs/*.md)
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
B=build
mkdir -p $B
passed=0 failed=0 skipped=0
ok()   { passed=$((passed + 1)); echo "ok   $1"; }
bad()  { failed=$((failed + 1)); echo "FAIL $1"; }
skip() { skipped=$((skipped + 1)); echo "skip $1"; }
CC=${CC:-cc}
CXX=${CXX:-g++}
LIMIT=${DOCS_TIMEOUT:-120}
t_start=$SECONDS

if [ $# -gt 0 ]; then docs=("$@"); else docs=(README.md docs/*.md); fi

# ---- extract: one directory per document, one file per block, and an index line
# "N|KIND|LINE|MARK" per block (KIND sh or c; MARK: skip:REASON, file:NAME, timeout:N
# or empty); a block's marker is the last non-blank line before its fence
X=$ROOT/$B/docs_blocks
rm -rf $X && mkdir -p $X
for doc in "${docs[@]}"; do
    [ -f "$doc" ] || { bad "$doc: no such file"; continue; }
    d=$X/$(echo "$doc" | tr '/.' '__')
    mkdir -p "$d"
    awk -v dir="$d" '
        function mark_of(s) {
            if (match(s, /^\*\(not run: .*\)\*$/)) return "skip:" substr(s, 12, length(s) - 13)
            if (match(s, /^<!-- file: [A-Za-z0-9_.-]+ -->$/)) return "file:" substr(s, 12, length(s) - 15)
            if (match(s, /^<!-- timeout: [0-9]+ -->$/)) return "timeout:" substr(s, 15, length(s) - 18)
            return ""
        }
        !inb && /^```(sh|c)[ \t]*$/ {
            n++; kind = substr($0, 4); sub(/[ \t]+$/, "", kind)
            printf "%d|%s|%d|%s\n", n, kind, NR, mark_of(prev) > (dir "/index")
            out = sprintf("%s/%03d.%s", dir, n, kind); inb = 1; printf "" > out; next
        }
        inb && /^```[ \t]*$/ { inb = 0; close(out); prev = ""; next }
        inb { print > out; next }
        /^```/ { fence = !fence; prev = ""; next }
        fence { next }
        NF { prev = $0 }
    ' "$doc"
    touch "$d/index"
done

# ---- the binaries the runnable shell blocks name (build/NAME), made in the working tree
need=$(for d in $X/*/; do
    while IFS='|' read -r n kind line mark; do
        [ "$kind" = sh ] && [ "${mark%%:*}" != skip ] && grep -o 'build/[A-Za-z0-9_-]*' "$d$(printf %03d "$n").sh"
    done < "$d/index"
done | sort -u)
targets=""
for t in $need; do
    n=${t#build/}
    [ -f examples/$n.c ] || [ -f tools/$n.c ] || [ -f tools/${n//-/_}.c ] || continue
    targets="$targets $t"
done
if [ -n "$targets" ]; then
    t0=$SECONDS
    if make --no-print-directory -j"$(nproc 2>/dev/null || echo 2)" $targets > $B/docs_make.log 2>&1; then
        echo "    make$targets: $((SECONDS - t0)) s"
    else bad "make$targets (the programs the docs run)"; tail -20 $B/docs_make.log; fi
fi

# ---- the scratch copy: what a clone of the working tree holds (uncommitted edits
# included), with mtimes kept so that make finds the copied binaries up to date
S=$(mktemp -d "${TMPDIR:-/tmp}/gpt2rt-docs.XXXXXX")
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/tree/build"
if command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -z | tar --null -T - -cf - 2>/dev/null | tar -xf - -C "$S/tree"
else # an unpacked release without git: everything but the build outputs
    tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$S/tree"
fi
for t in $targets; do [ -f "$t" ] && cp -p "$t" "$S/tree/$t"; done

run_sh() { # DIR FILE LIMIT: the block as a script in DIR; prints the tail on failure
    local dir=$1 f=$2 lim=$3 rc
    ( cd "$dir" && timeout "$lim" nice bash -e "$f" ) > "$f.log" 2>&1; rc=$?
    return $rc
}

# one document's blocks, in order, in a scratch directory of its own; prints ok / FAIL /
# skip lines (counted below), so that documents can run side by side
run_doc() {
    local doc=$1 d W n kind line mark f what local_name src exe t0 lim rc
    ok()   { echo "ok   $1"; }
    bad()  { echo "FAIL $1"; }
    skip() { echo "skip $1"; }
    d=$X/$(echo "$doc" | tr '/.' '__')
    W=$S/$(echo "$doc" | tr '/.' '__')
    cp -a "$S/tree" "$W"
    while IFS='|' read -r n kind line mark; do
        f=$d/$(printf %03d "$n").$kind
        what="$doc:$line ($kind)"
        case $mark in
            skip:*) skip "$what: not run: ${mark#skip:}"; continue ;;
        esac
        if [ "$kind" = c ]; then
            local_name=
            case $mark in file:*) local_name=${mark#file:} ;; esac
            if [ -z "$local_name" ] && ! grep -q '\bmain *(' "$f"; then
                bad "$what: a C fragment: make it a program, or mark it *(not run: REASON)*"; continue
            fi
            src=$W/${local_name:-docs_block_$n.c}
            cp "$f" "$src"
            # documented for C or C++: each program compiles as C++17 as well ("= {0}", the
            # zero config of both languages, is what -Wmissing-field-initializers flags in C++)
            if ! command -v "$CXX" > /dev/null 2>&1; then skip "$what: as C++17: no $CXX"
            elif ( cd "$W" && nice $CXX -std=c++17 -x c++ -Wall -Wextra -Werror -Wno-missing-field-initializers \
                   -fopenmp -fsyntax-only -I. "$src" ) \
                > "$f.cxx.log" 2>&1; then ok "$what: compiles as C++17 ($CXX -std=c++17 -x c++, warnings as errors)"
            else bad "$what: does not compile as C++17"; head -20 "$f.cxx.log" | sed 's/^/    > /'; fi
            if [ -n "$local_name" ] && cat $(ls "$d"/*.sh 2>/dev/null | awk -v f="$f" '$0 > f') /dev/null | grep -qF -- "$local_name"; then
                echo "    $what: written to $local_name, which a shell block below compiles and runs"; continue
            fi
            exe=${src%.c}
            if ! ( cd "$W" && nice $CC -std=c11 -Wall -Wextra -Werror -O1 -fopenmp -I. -o "$exe" "$src" -lm ) > "$f.log" 2>&1; then
                bad "$what: does not compile"; head -20 "$f.log" | sed 's/^/    > /'; continue
            fi
            if [ -n "$local_name" ]; then ok "$what: $local_name compiles (warnings as errors)"; continue; fi
            t0=$SECONDS
            if ( cd "$W" && timeout "$LIMIT" nice "$exe" ) > "$f.log" 2>&1; then
                ok "$what: compiles and runs ($((SECONDS - t0)) s)"
            else bad "$what: the program failed (exit $?)"; tail -15 "$f.log"; fi
        else
            lim=$LIMIT
            case $mark in timeout:*) lim=${mark#timeout:} ;; esac
            t0=$SECONDS
            if run_sh "$W" "$f" "$lim"; then
                ok "$what: $(grep -v '^ *#' "$f" | grep -m1 . | cut -c1-70) ($((SECONDS - t0)) s)"
            else
                rc=$?
                bad "$what: exit $rc$([ $rc -eq 124 ] && echo ", over the ${lim} s limit")"
                sed 's/^/    | /' "$f"; tail -15 "$f.log" | sed 's/^/    > /'
            fi
        fi
    done < "$d/index"
    rm -rf "$W"
}

jobs_max=$(nproc 2>/dev/null || echo 2)
for doc in "${docs[@]}"; do
    [ -f "$doc" ] || continue
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.2; done
    run_doc "$doc" > "$X/$(echo "$doc" | tr '/.' '__').out" 2>&1 &
done
wait
for doc in "${docs[@]}"; do
    o=$X/$(echo "$doc" | tr '/.' '__').out
    [ -f "$o" ] || continue
    cat "$o"
    passed=$((passed + $(grep -c '^ok   ' "$o"))); failed=$((failed + $(grep -c '^FAIL ' "$o")))
    skipped=$((skipped + $(grep -c '^skip ' "$o")))
done

# ---- every relative link of the documents (and of docs/results/) names a file that exists
broken=0 nlinks=0
for doc in README.md docs/*.md docs/results/*.md; do
    [ -f "$doc" ] || continue
    dir=$(dirname "$doc")
    while IFS= read -r target; do
        nlinks=$((nlinks + 1))
        path=${target%%#*}
        [ -z "$path" ] && continue
        if [ ! -e "$dir/$path" ]; then broken=$((broken + 1)); echo "    $doc: link to $target: no such file"; fi
    done < <(grep -oE '\]\([^)]+\)' "$doc" | sed 's/^](//; s/)$//' | grep -vE '^(https?|mailto):')
done
if [ $broken -eq 0 ]; then ok "README.md, docs/*.md, docs/results/*.md: $nlinks relative links, every file exists"
else bad "$broken broken links in the documentation"; fi

# ---- the support matrix against gpt2rt_create
matrix=$(awk '/^<!-- support matrix/{on=1; next} on && /^\|/{print; n++; next} on && n {exit}' README.md)
if [ -z "$matrix" ]; then bad "README.md: no support matrix (a table after '<!-- support matrix')"
elif ! $CC -std=c11 -Wall -Wextra -Werror -O1 -fopenmp -o $B/docs_support tests/docs_support.c -lm > $B/docs_support.log 2>&1; then
    bad "build tests/docs_support.c"; head -20 $B/docs_support.log
else
    probed=$(./$B/docs_support 2> $B/docs_support.err); prc=$?
    [ $prc -eq 0 ] || { bad "tests/docs_support: a probe's config was refused as invalid"; cat $B/docs_support.err; }
    cols=(cpu cpu-data cpu-split cuda cuda-data cuda-split)
    wrong=0 cells=0 rows=0
    while IFS= read -r line; do
        case $line in "| feature"*|"|---"*) continue ;; esac
        IFS='|' read -r _ row c1 c2 c3 c4 c5 c6 _ <<< "$line"
        row=$(echo "$row" | sed 's/^ *//; s/ *$//')
        rows=$((rows + 1))
        i=0
        for cell in "$c1" "$c2" "$c3" "$c4" "$c5" "$c6"; do
            cell=$(echo "$cell" | sed 's/^ *//; s/ *$//')
            want=$(echo "$probed" | awk -F'|' -v r="$row" -v c="${cols[$i]}" '$1 == r && $2 == c {print $3}')
            cells=$((cells + 1))
            if [ -z "$want" ]; then wrong=$((wrong + 1)); echo "    matrix row '$row': tests/docs_support.c has no such row"; break
            elif [ "$cell" != "$want" ]; then wrong=$((wrong + 1)); echo "    '$row' on ${cols[$i]}: README says '$cell', gpt2rt_create says '$want'"; fi
            i=$((i + 1))
        done
    done <<< "$matrix"
    nprobe=$(echo "$probed" | cut -d'|' -f1 | sort -u | wc -l)
    if [ $wrong -eq 0 ] && [ "$rows" -eq "$nprobe" ]; then
        ok "README.md support matrix: $cells cells of $rows rows agree with gpt2rt_create (tests/docs_support.c)"
    else bad "README.md support matrix: $wrong cells disagree, $rows rows against $nprobe probed"; fi
fi

# ---- statements of support in the docs, against the matrix: a phrase may stand only
# while the matrix cell it states has the value it implies (PATTERN|ROW|COLUMN|VALUE)
claims='kv_batch[^.]*refused[^.]*CUDA|generation with a KV cache (kv_batch)|cuda|no
CUDA[^.]*kv_batch[^.]*refused|generation with a KV cache (kv_batch)|cuda|no
dropout[^.]*CPU backend only|dropout|cuda|no
patch inputs[^.]*CPU backend only|patch inputs, regression head (GPT4TS)|cuda|no
classifier_chunk[^.]*CPU[- ]only|chunked classifier (classifier_chunk)|cuda|no
classifier_chunk[^.]*not[^.]*CUDA|chunked classifier (classifier_chunk)|cuda|no
layer split[^.]*dropout[^.]*(runs|works|supported)|dropout|cpu-split|yes
aLLM4TS[^.]*CUDA[^.]*data parallel[^.]*(runs|works|supported)|aLLM4TS heads (next-patch, patch-decode)|cuda-data|yes'
files=$(ls README.md docs/*.md 2>/dev/null)
bad_claims=0
while IFS='|' read -r pat row col val; do
    hits=$(grep -nE -- "$pat" $files 2>/dev/null)
    [ -n "$hits" ] || continue
    have=$(echo "${probed:-}" | awk -F'|' -v r="$row" -v c="$col" '$1 == r && $2 == c {print $3}')
    if [ "$have" != "$val" ]; then
        bad_claims=$((bad_claims + 1)); echo "    contradicts the matrix ('$row' on $col is '$have'):"; echo "$hits" | sed 's/^/      /'
    fi
done <<< "$claims"
# and what the results contradict: the CUDA backend has run on a GPU (docs/results/gpu.md)
if grep -nE 'NOT YET[ ]RUN ON A GPU' $files; then bad_claims=$((bad_claims + 1)); fi
if [ $bad_claims -eq 0 ]; then ok "README.md and docs/*.md: no statement of support the matrix or docs/results/gpu.md contradicts"
else bad "README.md and docs/*.md: $bad_claims statements contradict the support matrix or the GPU results"; fi

echo "    make test-docs took $((SECONDS - t_start)) s"
echo "DOCS: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

#!/bin/sh
# tools/amalgamate.sh SRC > gpt2rt.h: writes the single header from the files in SRC (make header runs it).
# It starts at SRC/gpt2rt.h, the outline, and replaces each line `#include "FILE"` by FILE (a path relative to the
# including file) the first time FILE is named; a later include of FILE is dropped. Of each file it leaves out the
# preamble, everything up to its first empty line: the two-line comment, the include guard's #ifndef and #define
# (the outline has none) and the file's own includes, which are inlined there, first; and its last line, the guard's
# #endif. Every other line is copied as it is: the header is the files' bodies, in include order.
set -eu
src=${1:?"usage: sh tools/amalgamate.sh SRC > gpt2rt.h"}
LC_ALL=C exec awk -v root="$src/gpt2rt.h" '
function fail(msg) { printf "tools/amalgamate.sh: %s\n", msg > "/dev/stderr"; failed = 1; exit 1 }

# a/b/../c/./d -> a/c/d
function norm(p,    n, part, i, out, k) {
    n = split(p, part, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (part[i] == "." || (part[i] == "" && i > 1)) continue
        if (part[i] == ".." && k > 0 && out[k] != "..") { k--; continue }
        out[++k] = part[i]
    }
    p = out[1]
    for (i = 2; i <= k; i++) p = p "/" out[i]
    return p
}

function dir(p) { return p ~ /\// ? substr(p, 1, match(p, /[^\/]*$/) - 1) : "" }

# the include line l of file f: the file it names, inlined unless it already was
function include(l, f) {
    sub(/^#include "/, "", l); sub(/".*$/, "", l)
    emit(norm(dir(f) l))
}

function emit(f,    line, r, n, body, guard, held, have) {
    if (f in seen) return
    seen[f] = 1
    n = 0; body = 0; guard = ""; have = 0
    while ((r = (getline line < f)) > 0) {
        n++
        if (!body) {
            if (n == 1 && line !~ /^\/\*/) fail(f ": line 1 does not start the two-line comment")
            if (n == 2 && line !~ /\*\/$/) fail(f ": line 2 does not end the two-line comment")
            if (n == 3 && line ~ /^#ifndef /) guard = substr(line, 9)
            else if (n == 4 && guard != "" && line == "#define " guard) ;
            else if (line == "") body = 1
            else if (n > 2 && line ~ /^#include "[^"]*"$/) include(line, f)
            else if (n > 2) fail(f ":" n ": before its first empty line a file holds its comment, guard and includes only: " line)
            continue
        }
        if (have) print held
        have = 0
        if (line ~ /^#include "[^"]*"$/) { include(line, f); continue }
        held = line; have = 1
    }
    if (r < 0) fail("cannot read " f)
    close(f)
    if (!body) fail(f ": no empty line ends its preamble")
    if (guard != "") {
        if (!have || held != "#endif /* " guard " */") fail(f ": the last line is not #endif /* " guard " */")
    } else if (have) print held
}

BEGIN { emit(norm(root)); exit }
END { if (failed) exit 1 }
'

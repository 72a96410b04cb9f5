#!/bin/sh
# tools/check_includes.sh SRC: the include graph of SRC's files follows the outline's order (tests/run.sh runs it).
# The order is the outline's, SRC/gpt2rt.h: its #include lines, each file taking the place of its line, and a file
# whose body lists files (tokenizer.h, series.h, cuda.h) its own list in place, in one pass. The #includes of a
# file's preamble (before its first empty line) are what the file uses: each must name a file that comes earlier.
# A file of SRC that the outline does not list, and an include naming a later file or none, fail; the count is
# the last line.
set -eu
src=${1:?"usage: sh tools/check_includes.sh SRC"}
LC_ALL=C exec awk -v root="$src/gpt2rt.h" -v src="$src" '
function norm(p,    n, part, i, out, k) { # a/b/../c/./d -> a/c/d
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
function named(l, f) { sub(/^#include "/, "", l); sub(/".*$/, "", l); return norm(dir(f) l) }

# f takes the next place; then the files its body lists, in place
function place(f,    line, body, r, g) {
    if (f in pos) return
    pos[f] = ++n_files; file[n_files] = f
    body = 0
    while ((r = (getline line < f)) > 0) {
        if (!body) {
            if (line == "") body = 1
            else if (line ~ /^#include "[^"]*"$/) { g = named(line, f); uses[f] = uses[f] " " g }
            continue
        }
        if (line ~ /^#include "[^"]*"$/) place(named(line, f))
    }
    if (r < 0) { printf "tools/check_includes.sh: cannot read %s\n", f; bad++ }
    close(f)
}

BEGIN {
    body = 0
    while ((getline line < root) > 0) if (line ~ /^#include "[^"]*"$/) place(named(line, root))
    close(root)
    for (i = 1; i <= n_files; i++) {
        f = file[i]; k = split(uses[f], u, " ")
        for (j = 1; j <= k; j++) {
            if (!(u[j] in pos)) { printf "%s includes %s, which the outline does not list\n", f, u[j]; bad++ }
            else if (pos[u[j]] >= i) { printf "%s includes %s, which comes later in the outline (%d >= %d)\n", f, u[j], pos[u[j]], i; bad++ }
        }
    }
    cmd = "find " src " -name \"*.h\" -o -name \"*.cuh\""
    while ((cmd | getline f) > 0) {
        f = norm(f)
        if (f != norm(root) && !(f in pos)) { printf "%s: the outline (%s) does not list it\n", f, root; bad++ }
    }
    close(cmd)
    printf "include graph: %d files in the outline'"'"'s order, %d edge(s) against it\n", n_files, bad + 0
    exit bad > 0
}
'

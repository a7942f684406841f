#!/bin/sh
# Prints, one per line and sorted, the names the public headers declare for
# the library to define: every function declared (not `static inline`) and
# every `extern` object in include/pipemem/*.h. This is the shared library's
# whole export list (the Makefile turns it into a linker version script) and
# what `scripts/install_check.sh` compares `nm -D` against.
#
#   scripts/api_symbols.sh [HEADER...]     (default: include/pipemem/*.h)
#
# The headers are plain C declarations, one top-level statement ending in
# `;` each (or in `}` for a static inline body); the awk below strips
# comments and preprocessor lines, skips what is inside braces, and names
# the identifier before a declaration's first `(` (a function) or its `[`,
# `=` or `;` (an extern object).
set -eu
[ $# -gt 0 ] || set -- include/pipemem/*.h
cat "$@" | awk '
BEGIN { incomment = 0; cont = 0; depth = 0; stmt = "" }
{
    line = $0
    # a #define continued with a backslash goes on the next line
    if (cont) { cont = (line ~ /\\$/); next }
    out = ""
    while (length(line) > 0) {
        if (incomment) {
            i = index(line, "*/")
            if (i == 0) { line = ""; break }
            line = substr(line, i + 2); incomment = 0
            continue
        }
        i = index(line, "/*"); j = index(line, "//")
        if (j > 0 && (i == 0 || j < i)) { out = out substr(line, 1, j - 1); line = ""; break }
        if (i == 0) { out = out line; line = ""; break }
        out = out substr(line, 1, i - 1) " "; line = substr(line, i + 2); incomment = 1
    }
    if (out ~ /^[ \t]*#/) { cont = (out ~ /\\$/); next }
    n = length(out)
    for (k = 1; k <= n; k++) {
        c = substr(out, k, 1)
        if (c == "{") { depth++; continue }
        if (c == "}") {
            depth--
            # the end of a static inline body ends its statement
            if (depth == 0 && stmt ~ /\(/) stmt = ""
            continue
        }
        if (depth > 0) continue
        if (c == ";") { emit(stmt); stmt = ""; continue }
        stmt = stmt c
    }
    stmt = stmt " "
}
function emit(s,    name) {
    gsub(/[ \t]+/, " ", s); sub(/^ /, "", s)
    if (s ~ /^(typedef|static|_Static_assert|struct [A-Za-z_0-9]+ ?$)/ || s == "") return
    if (s ~ /^extern /) {
        sub(/ ?(\[|=).*$/, "", s); sub(/ $/, "", s)
    } else if (s ~ /\(/) {
        s = substr(s, 1, index(s, "(") - 1); sub(/ $/, "", s)
    } else {
        return
    }
    name = s; sub(/.*[^A-Za-z_0-9]/, "", name)
    print name
}' | sort -u

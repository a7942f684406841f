#!/bin/sh
# The public headers hold what a user calls, nothing else: every name the
# shared library exports (scripts/api_symbols.sh) must be named by the
# pipemem binary (its objects, BUILD/obj/src/cli/*.o), by a program of
# examples/ (compiled here against include/), or be an entry point a page
# of docs/ documents, listed below with the page (which must name it) and
# the reason. What only the library's own modules, the tests or the
# benchmarks use goes in a private header under src/. Read from the
# objects (nm), so a name reached through a public macro (PM_ASSERT,
# PM_JSON_NUM) counts. Prints one line of counts, including the exported
# names nothing outside their own module uses (the library's other
# modules' objects, the binary, examples/); with --list every exported
# name and who uses it. Fails, naming each, on an exported name no user
# names, and on a stale entry below.
#
#   scripts/api_users.sh BUILD [--list]
set -eu
build=$1
list=${2:-}
tmp=$(mktemp -d /tmp/pm_api_XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Entry points no program here calls, each documented: NAME PAGE REASON.
cat > "$tmp/entries" <<'EOF'
pm_status_str docs/layout.md a status's name, for a caller's own messages
EOF

fail() { echo "api users: $1" >&2; exit 1; }
[ -d "$build/obj/src/cli" ] || fail "no objects in $build/obj (build first)"
scripts/api_symbols.sh > "$tmp/api"
# module of every defined name; every (module, name) a library object asks for
nm -A -P --defined-only "$build"/obj/src/*/*.o 2>/dev/null \
    | awk '$3 ~ /^[TDRB]$/ { split($1, p, "/"); print $2, p[length(p) - 1] }' \
    | sort -u > "$tmp/defs"
nm -A -P -u "$build"/obj/src/*/*.o 2>/dev/null \
    | awk '{ split($1, p, "/"); print $2, p[length(p) - 1] }' | sort -u > "$tmp/uses"
for f in examples/*.c; do
    ${CC:-cc} -std=c11 -Iinclude -c "$f" -o "$tmp/$(basename "$f" .c).o" \
        || fail "$f does not compile against include/"
done
nm -P -u "$tmp"/*.o | awk '{ print $1, "examples" }' | sort -u >> "$tmp/uses"
sort -u -o "$tmp/uses" "$tmp/uses"

bad=0
stale() { echo "api users: $name is listed but $1" >&2; bad=1; }
while read -r name page why; do
    grep -qx "$name" "$tmp/api" || stale "not exported"
    grep -qw "$name" "$page" || stale "$page does not name it"
done < "$tmp/entries"

# name, its module, who else uses it (modules, cli, examples), documented
awk -v entries="$tmp/entries" -v defs="$tmp/defs" -v uses="$tmp/uses" '
BEGIN {
    while ((getline l < defs) > 0) { split(l, a, " "); mod[a[1]] = a[2] }
    while ((getline l < uses) > 0) { split(l, a, " "); u[a[1]] = u[a[1]] " " a[2] }
    while ((getline l < entries) > 0) { split(l, a, " "); doc[a[1]] = a[2] }
}
{
    n = $1; m = (n in mod) ? mod[n] : "?"; others = ""
    k = split(u[n], a, " ")
    for (i = 1; i <= k; i++) if (a[i] != m && index(" " others " ", " " a[i] " ") == 0)
        others = others (others == "" ? "" : ",") a[i]
    print n, m, (others == "" ? "-" : others), ((n in doc) ? doc[n] : "-")
}' "$tmp/api" > "$tmp/table"
[ "$list" = --list ] && column -t "$tmp/table"

awk '$3 !~ /(^|,)(cli|examples)(,|$)/ && $4 == "-"' "$tmp/table" > "$tmp/bad"
if [ -s "$tmp/bad" ]; then
    echo "api users: exported, but neither the binary nor examples/ names them and no page of" \
         "docs/ is listed for them (move them to a private header under src/):" >&2
    awk '{ printf "  %s (%s; also used by: %s)\n", $1, $2, $3 }' "$tmp/bad" >&2
    bad=1
fi
own=$(awk '$3 == "-"' "$tmp/table" | wc -l)
count() { awk "\$3 ~ /(^|,)$1(,|\$)/" "$tmp/table" | wc -l; }
echo "api users: $(wc -l < "$tmp/api") exported: $(count cli) named by the binary," \
     "$(count examples) by examples/," \
     "$(wc -l < "$tmp/entries") documented entry points; $own used only inside their own module"
exit $bad

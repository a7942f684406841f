#!/bin/sh
# Checks `make install` and `make uninstall` as a user would meet them:
# installs into a temporary DESTDIR (PREFIX /usr/local), checks that the
# shared library exports exactly what include/pipemem/*.h declare, builds
# examples/sched_and_train.c (shared, then static),
# examples/plan_and_train.c and examples/sweep.c against the installed copy
# with pkg-config, runs them, checks the binary's --version and that
# the man page renders without warnings and covers every subcommand, then
# uninstalls and checks nothing is left. Prints one line per check and
# "install check: N passed"; exits non-zero at the first failure.
#
#   scripts/install_check.sh MAKE BUILD
set -eu
make_cmd=$1
build=$2
dest=$(mktemp -d /tmp/pm_install_XXXXXX)
trap 'rm -rf "$dest"' EXIT
n=0
ok() { n=$((n + 1)); echo "install check: $1"; }
die() { echo "install check FAILED: $1" >&2; exit 1; }

$make_cmd --no-print-directory -s install DESTDIR="$dest" PREFIX=/usr/local BUILD="$build" \
    >/dev/null || die "make install"
root=$dest/usr/local
for f in bin/pipemem lib/libpipemem.a lib/libpipemem.so lib/pkgconfig/pipemem.pc \
         include/pipemem/pm_runtime.h share/man/man1/pipemem.1 share/pipemem/blocks/v-half-p4.block; do
    [ -e "$root/$f" ] || die "$f is not installed"
done
ok "files installed under DESTDIR"
soname=$(objdump -p "$root/lib/libpipemem.so" | awk '/SONAME/ {print $2}')
[ -n "$soname" ] && [ -e "$root/lib/$soname" ] || die "libpipemem.so has no soname link ($soname)"
ok "shared library with soname $soname"
# The shared library exports the public headers' declarations and nothing
# else (no CaDiCaL, no internal pm_/sel_ functions), and defines every one.
scripts/api_symbols.sh > "$dest/api"
nm -D --defined-only "$root/lib/libpipemem.so" | awk '{print $3}' | sort -u > "$dest/exported"
cmp -s "$dest/api" "$dest/exported" || die "libpipemem.so exports other names than \
include/pipemem/*.h declare (< declared only, > exported only): \
$(diff "$dest/api" "$dest/exported" | grep '^[<>]' | head -20 | tr '\n' ' ')"
# A second reading of the headers where the compiler can give one: GCC's
# list of the functions they declare, against the script's list less the
# objects (the name tables).
printf '#include <pipemem/%s>\n' $(cd include/pipemem && ls *.h) > "$dest/all.c"
if cc -std=c11 -D_POSIX_C_SOURCE=200809L -Iinclude -aux-info "$dest/aux" -c "$dest/all.c" \
       -o "$dest/all.o" 2>/dev/null; then
    grep 'include/pipemem/' "$dest/aux" | grep -v ' static ' \
        | sed -n 's/^[^(]*[ *]\([A-Za-z_][A-Za-z_0-9]*\) (.*/\1/p' | sort -u > "$dest/gcc_fns"
    nm -D --defined-only "$root/lib/libpipemem.so" | awk '$2 != "T" {print $3}' | sort -u \
        | comm -23 "$dest/api" - > "$dest/api_fns"
    cmp -s "$dest/gcc_fns" "$dest/api_fns" || die "scripts/api_symbols.sh and GCC read other \
functions in include/pipemem/*.h: $(diff "$dest/gcc_fns" "$dest/api_fns" | grep '^[<>]' | tr '\n' ' ')"
fi
ok "libpipemem.so exports exactly the $(wc -l < "$dest/api") names include/pipemem/*.h declare"
[ "$("$root/bin/pipemem" --version)" = "pipemem $(sed -n 's/^#define PM_VERSION "\(.*\)"/\1/p' include/pipemem/pm_util.h)" ] \
    || die "pipemem --version"
ok "pipemem --version"

# only the installed copy is visible to pkg-config (and through DESTDIR)
pc() { PKG_CONFIG_SYSROOT_DIR="$dest" PKG_CONFIG_LIBDIR="$root/lib/pkgconfig" pkg-config "$@"; }
cflags=$(pc --cflags pipemem) || die "pkg-config --cflags pipemem"
libs=$(pc --libs pipemem)
cc -std=c11 -Wall -Werror examples/sched_and_train.c $cflags $libs -o "$dest/ex" \
    || die "building the example against the installed library"
LD_LIBRARY_PATH="$root/lib" "$dest/ex" > "$dest/ex.out" || die "the example (shared) failed"
LD_LIBRARY_PATH="$root/lib" ldd "$dest/ex" | grep -q "$root/lib/$soname" \
    || die "the example does not load the installed $soname"
ok "example built with pkg-config, runs on the shared library, loss falls"
static=$(pc --static --libs pipemem | sed 's/-lpipemem//')
cc -std=c11 -Wall -Werror examples/sched_and_train.c $cflags "$root/lib/libpipemem.a" $static \
    -o "$dest/ex_static" || die "building the example against libpipemem.a (Libs.private)"
"$dest/ex_static" > "$dest/ex_static.out" || die "the example (static) failed"
# the losses are bitwise the same computation; the measured bubble is timing
[ "$(grep -o 'loss [0-9.]*' "$dest/ex.out")" = "$(grep -o 'loss [0-9.]*' "$dest/ex_static.out")" ] \
    || die "static and shared examples give other losses"
ok "example built static with pkg-config --static, same losses"
# examples/NAME.c built against the installed library, run on it, its output
# holding the line PATTERN (else WHY); then OK.
example() {
    cc -std=c11 -Wall -Werror "examples/$1.c" $cflags $libs -o "$dest/$1" \
        || die "building examples/$1.c against the installed library"
    LD_LIBRARY_PATH="$root/lib" "$dest/$1" > "$dest/$1.out" \
        || die "examples/$1.c failed: $(tail -1 "$dest/$1.out")"
    grep -q "$2" "$dest/$1.out" || die "$3"
    ok "$4"
}
example plan_and_train "the same bits" "the reloaded pipeline evaluated differently" \
    "plan_and_train: planned under a budget, trained, saved by stage, reloaded on 3 devices"
example sweep "^best: " "the sweep named no best task" \
    "sweep: four tasks in shards on 2 devices, ranked, the best one's checkpoint saved"

page=$root/share/man/man1/pipemem.1
warn=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || die "groff failed on the man page"
[ -z "$warn" ] || die "the man page has warnings: $warn"
text=$(MANWIDTH=100 man -l "$page" 2>/dev/null) || die "man -l failed"
for cmd in $("$root/bin/pipemem" --help | awk '/^  [a-z]/ {print $1}'); do
    echo "$text" | grep -q "usage: pipemem $cmd" || die "the man page lacks '$cmd'"
done
ok "man page renders (man -l), no warnings, every subcommand"

$make_cmd --no-print-directory -s uninstall DESTDIR="$dest" PREFIX=/usr/local BUILD="$build" \
    || die "make uninstall"
left=$(find "$root" -type f -o -type l)
[ -z "$left" ] || die "left after uninstall: $left"
ok "make uninstall removes everything"
echo "install check: $n passed"

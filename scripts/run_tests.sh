#!/bin/bash
# Runs test programs and closes with one line "tests: N passed, N failed".
#
#   scripts/run_tests.sh PROGRAM... (or directories: their test_* and replay_*)
#
# test_NAME is a cmocka suite: its PASSED and FAILED counts are added up.
# Only the command-line suites, test_cli_NAME, are given PM_BIN (the built
# pipemem): the others test the library alone, and one that tried to run
# the binary would fail (tests/cli.h).
# replay_NAME is a fuzz replay driver (fuzz/replay.c): it is given
# fuzz/seeds/NAME and fuzz/crashes/NAME, prints its own line
# "fuzz replay NAME: N inputs, N passed, N failed", and every input counts
# as one test. Exits non-zero if any test failed or any program crashed
# (exited non-zero without reporting a failure).
#
# PM_TEST_JOBS programs run at once (default: the cores). Every test keeps
# its files in a directory of its own and asserts nothing about time, so
# they may share the machine; test_cli_mpi spends most of its minute
# waiting on mpirun, which the other programs fill. A program's output is
# printed whole when it ends, so the log reads program by program.
jobs=${PM_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
progs=()
for a in "$@"; do
    if [ -d "$a" ]; then
        for t in "$a"/test_* "$a"/replay_*; do [ -x "$t" ] && progs+=("$t"); done
    else
        progs+=("$a")
    fi
done
# The longest first, so that the short ones fill the other cores around them.
first=(); rest=()
for t in "${progs[@]}"; do
    case $(basename "$t") in
    test_cli_mpi | test_cli_hosts | test_optimal | test_tiles | test_mpi | test_generators) first+=("$t") ;;
    *) rest+=("$t") ;;
    esac
done
progs=("${first[@]}" "${rest[@]}")

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0

start() { # program index: runs it, its output and status into $tmp
    local t=${progs[$1]} name
    name=$(basename "$t")
    case $name in
    replay_*) env -u PM_BIN "$t" "fuzz/seeds/${name#replay_}" "fuzz/crashes/${name#replay_}" ;;
    test_cli_*) "$t" ;;
    *) env -u PM_BIN "$t" ;;
    esac >"$tmp/$1.out" 2>&1
    echo $? >"$tmp/$1.rc"
}

report() { # program index: prints its output, adds its counts
    local t=${progs[$1]} out rc p f
    out=$(cat "$tmp/$1.out"); rc=$(cat "$tmp/$1.rc")
    printf '%s\n' "$out"
    case $(basename "$t") in
    replay_*)
        p=$(printf "%s\n" "$out" | sed -n "s/^fuzz replay .*: [0-9]* inputs, \([0-9]*\) passed, .*/\1/p" | tail -n 1)
        f=$(printf "%s\n" "$out" | sed -n "s/^fuzz replay .*, \([0-9]*\) failed$/\1/p" | tail -n 1)
        ;;
    *)
        p=$(printf "%s\n" "$out" | sed -n "s/.*\[  PASSED  \] \([0-9]*\) test.*/\1/p" | awk "{s+=\$1} END {print s+0}")
        f=$(printf "%s\n" "$out" | sed -n "s/.*\[  FAILED  \] \([0-9]*\) test.*/\1/p" | awk "{s+=\$1} END {print s+0}")
        ;;
    esac
    p=${p:-0}; f=${f:-0}
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$t: exited with status $rc"; failed=$((failed + 1))
    fi
    rm -f "$tmp/$1.rc"
}

report_done() { # reports every program that has ended
    for r in "$tmp"/*.rc; do [ -e "$r" ] && report "$(basename "$r" .rc)"; done
}

running=0
for i in "${!progs[@]}"; do
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); report_done; fi
    start "$i" &
    running=$((running + 1))
done
wait
report_done
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

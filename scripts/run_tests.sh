#!/bin/sh
# Runs test programs and closes with one line "tests: N passed, N failed".
#
#   scripts/run_tests.sh PROGRAM... (or directories: their test_* and replay_*)
#
# test_NAME is a cmocka suite: its PASSED and FAILED counts are added up.
# replay_NAME is a fuzz replay driver (fuzz/replay.c): it is given
# fuzz/seeds/NAME and fuzz/crashes/NAME, prints its own line
# "fuzz replay NAME: N inputs, N passed, N failed", and every input counts
# as one test. Exits non-zero if any test failed or any program crashed
# (exited non-zero without reporting a failure).
passed=0; failed=0
progs=""
for a in "$@"; do
    if [ -d "$a" ]; then
        for t in "$a"/test_* "$a"/replay_*; do [ -x "$t" ] && progs="$progs $t"; done
    else
        progs="$progs $a"
    fi
done
for t in $progs; do
    name=$(basename "$t")
    case $name in
    replay_*)
        target=${name#replay_}
        out=$("$t" "fuzz/seeds/$target" "fuzz/crashes/$target" 2>&1); rc=$?
        printf '%s\n' "$out"
        p=$(printf "%s\n" "$out" | sed -n "s/^fuzz replay .*: [0-9]* inputs, \([0-9]*\) passed, .*/\1/p" | tail -n 1)
        f=$(printf "%s\n" "$out" | sed -n "s/^fuzz replay .*, \([0-9]*\) failed$/\1/p" | tail -n 1)
        p=${p:-0}; f=${f:-0}
        ;;
    *)
        out=$("$t" 2>&1); rc=$?
        printf '%s\n' "$out"
        p=$(printf "%s\n" "$out" | sed -n "s/.*\[  PASSED  \] \([0-9]*\) test.*/\1/p" | awk "{s+=\$1} END {print s+0}")
        f=$(printf "%s\n" "$out" | sed -n "s/.*\[  FAILED  \] \([0-9]*\) test.*/\1/p" | awk "{s+=\$1} END {print s+0}")
        ;;
    esac
    passed=$((passed + p)); failed=$((failed + f))
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$t: exited with status $rc"; failed=$((failed + 1))
    fi
done
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

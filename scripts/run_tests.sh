#!/bin/sh
# Runs every test binary in DIR, each a cmocka suite, and closes with one
# line "tests: N passed, N failed". Exits non-zero if any test failed or any
# binary crashed.
dir=$1
passed=0; failed=0; crashed=0
for t in "$dir"/test_*; do
    [ -x "$t" ] || continue
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf "%s\n" "$out" | sed -n "s/.*\[  PASSED  \] \([0-9]*\) test.*/\1/p" | awk "{s+=\$1} END {print s+0}")
    f=$(printf "%s\n" "$out" | sed -n "s/.*\[  FAILED  \] \([0-9]*\) test.*/\1/p" | awk "{s+=\$1} END {print s+0}")
    passed=$((passed + p)); failed=$((failed + f))
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "$t: exited with status $rc"; crashed=$((crashed + 1)); failed=$((failed + 1))
    fi
done
echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

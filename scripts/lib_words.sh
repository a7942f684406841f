#!/bin/sh
# The library's messages name its own parameters (the caller's fields and
# arguments, pm_util.h), never a flag of the CLI, which turns those names
# into its flags (pm_cli_flags in src/cli/options.c). Fails listing every
# string in src/ outside src/cli that holds one ("--mem-limit ...").
#
#   scripts/lib_words.sh
hits=$(grep -rnE '"([^"]*[ (])?--[a-z]' --include='*.c' --include='*.cc' --include='*.h' src \
       | grep -v '^src/cli/' | grep -vE '^[^:]*:[0-9]+:[[:space:]]*(/\*|\*)')
if [ -n "$hits" ]; then
    echo "library messages name CLI flags (name the parameter instead: pm_util.h):" >&2
    echo "$hits" >&2
    exit 1
fi
echo "library messages: no CLI flags"

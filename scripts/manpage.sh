#!/bin/sh
# Writes the pipemem(1) man page to stdout, generated from the binary's own
# --help texts (the top level and every subcommand), so the page cannot
# drift from what the program says.
#
#   scripts/manpage.sh BINARY > pipemem.1
set -eu
bin=$1
ver=$("$bin" --version | sed 's/^pipemem //')
# roff: a leading dot or quote would be a request; backslashes are escapes
esc() { sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\&'/"; }
cat <<HEAD
.TH PIPEMEM 1 "" "pipemem $ver" "User Commands"
.SH NAME
pipemem \\- memory-controllable pipeline-parallel training and model selection
.SH SYNOPSIS
.B pipemem
.I command
[\\fIoptions\\fR]
.br
.B pipemem \\-\\-version
.SH DESCRIPTION
pipemem generates, validates, simulates and draws pipeline schedules, searches
for the fastest one under a memory limit, trains a GPT with any of them on
device threads or MPI ranks (with data parallelism), and trains many model
configurations at once with shard parallelism.
.PP
.nf
HEAD
"$bin" --help | esc
echo ".fi"
echo ".SH COMMANDS"
for cmd in $("$bin" --help | awk '/^  [a-z]/ {print $1}'); do
    echo ".SS $cmd"
    echo ".nf"
    "$bin" "$cmd" --help | esc
    echo ".fi"
done
cat <<'TAIL'
.SH ENVIRONMENT
.TP
.B OPENBLAS_CORETYPE
pipemem sets it (to SkylakeX where the CPU has AVX-512) and re-executes itself
when OpenBLAS would not recognise the CPU; a value already set is kept.
.TP
.B OMPI_COMM_WORLD_SIZE
set by mpirun: \fBtrain\fR then uses the MPI transport unless \fB\-\-transport\fR says otherwise.
.SH SEE ALSO
.BR mpirun (1)
.SH AUTHORS
The pipemem engineers.
TAIL

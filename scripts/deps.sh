#!/bin/sh
# Installs the Debian packages pipemem needs, if any are missing; extra
# package names given as arguments are added (make bench adds python3-torch,
# the benchmark's peer).
# Build: gcc g++ make pkg-config libopenblas-dev libcmocka-dev
# Subword tokenizers (--tokenizer): libsentencepiece-dev
# Test output checks: libjansson-dev (Chrome traces), libxml2-dev (SVG timelines)
# MPI transport: libopenmpi-dev openmpi-bin
# Exact schedules (--kind optimal): coinor-libcbc-dev (COIN-OR CBC, a MILP solver),
#   libcadical-dev (CaDiCaL, a SAT solver, for costs on one time unit)
# make install's check (man page, soname): man-db groff-base binutils
# Demo corpus: fortunes.   Reference vectors: python3-torch (optional, see docs/training.md).
set -eu
PKGS="gcc g++ make pkg-config libopenblas-dev libcmocka-dev libjansson-dev libxml2-dev libopenmpi-dev openmpi-bin coinor-libcbc-dev libcadical-dev libsentencepiece-dev man-db groff-base binutils fortunes $*"
missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "pipemem: missing packages:$missing, and this system has no apt-get;" \
         "install their equivalents by hand (OpenBLAS, cmocka, OpenMPI, pkg-config)" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "pipemem: missing packages:$missing; run as root or install sudo" >&2
        exit 1
    fi
fi
echo "pipemem: installing Debian packages:$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing

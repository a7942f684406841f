#!/bin/bash
# hosts.sh: several hosts on this machine, for running and testing pipemem
# across machines with OpenMPI over TCP (docs/mpi.md, tests/test_cli_hosts.c).
#
#   scripts/hosts.sh up DIR [N]          make hosts node1 .. nodeN (default 2)
#   scripts/hosts.sh run DIR HOST CMD..  run CMD on HOST
#   scripts/hosts.sh mpirun DIR ARGS..   mpirun on node1 over TCP between the
#                                        hosts (DIR/hostfile); ARGS are
#                                        mpirun's own (-np, --npernode, ...);
#                                        HOSTS_KEEPALIVE=0 leaves OpenMPI's
#                                        TCP keepalive at its default
#   scripts/hosts.sh kill DIR HOST [NAME]  SIGKILL every process on HOST
#                                        (OpenMPI's daemon included), or
#                                        only those whose command is NAME
#   scripts/hosts.sh pids DIR HOST [NAME]  the processes on HOST (or named NAME)
#   scripts/hosts.sh link DIR HOST up|down  take HOST's interface up or down
#   scripts/hosts.sh down DIR            remove them (idempotent)
#   scripts/hosts.sh with N CMD..        up, CMD with PM_HOSTS=DIR, down
#                                        whatever happened (if killed outright,
#                                        its directory at the next `with`)
#
# A host is a network namespace and a UTS namespace with its own host name,
# so OpenMPI sees separate nodes and talks between them by TCP only. Each
# namespace is held by one process (a `sleep`), never named or mounted, so
# it ends with the last process inside it: nothing is left in `ip netns`,
# and a host whose processes are all gone leaves no interface behind. The
# hosts are joined by veth pairs to a bridge in a namespace of its own (the
# switch); they take 198.18.0.K/24 (198.18.0.0/15 is set aside for benchmark
# networks) and have no route anywhere else: nothing they send can leave
# the namespaces made here. Nothing is added to this machine's own network.
#
# mpirun's rsh agent (DIR/agent) runs a command inside the host it names,
# as ssh would on a real cluster; every host sees this machine's files
# (a shared file system), and OpenMPI's session files go under DIR/tmp.
#
# `with` runs in a PID namespace of its own, started so that the kernel
# ends every process in it (the hosts' holders, mpirun, the ranks) when its
# first process ends, however that happens: a failing or killed test leaves
# no process, namespace or interface behind. Needs root (CAP_SYS_ADMIN and
# CAP_NET_ADMIN); `hosts.sh can` says whether this machine allows it.
set -u

SUBNET=198.18.0.0/24
prefix=198.18.0

die() { echo "hosts.sh: $*" >&2; exit 1; }

# The net namespace of process $1 ("net:[inode]"), or nothing.
netns_of() { readlink "/proc/$1/ns/net" 2>/dev/null; }

# The pid holding host $2 in DIR $1 (or the switch, host "switch"), after
# checking it still holds the namespace recorded at `up` (a pid reused by
# another process is never touched).
holder() {
    local line
    line=$(awk -v h="$2" '$1 == h { print $2, $3 }' "$1/hosts" 2>/dev/null)
    [ -n "$line" ] ||
        die "no host '$2' in $1 (hosts: $(awk '{printf "%s ", $1}' "$1/hosts" 2>/dev/null))"
    set -- $line
    [ "$(netns_of "$1")" = "$2" ] || die "host $2 is gone (its namespace has ended)"
    echo "$1"
}

# Starts a holder of a new net and UTS namespace; prints its pid.
hold() {
    unshare --net --uts sleep infinity </dev/null >/dev/null 2>&1 &
    local pid=$! mine k
    mine=$(netns_of $$)
    for k in $(seq 1 100); do # until unshare has made the namespaces
        local ns
        ns=$(netns_of $pid)
        [ -z "$ns" ] && break
        [ "$ns" != "$mine" ] && { echo "$pid"; return 0; }
        sleep 0.01
    done
    kill -9 $pid 2>/dev/null
    return 1
}

in_ns() { local pid=$1; shift; nsenter --target "$pid" --net --uts -- "$@"; }

can() {
    local why
    if ! why=$(unshare --net --uts true 2>&1); then
        echo "cannot create network namespaces here (needs root: ${why:-unshare failed})"
        return 1
    fi
    if ! why=$(unshare --net ip link add name pmv0 type veth peer name pmv1 2>&1); then
        echo "cannot create veth interfaces here (${why:-ip link failed})"
        return 1
    fi
    command -v mpirun >/dev/null || { echo "no mpirun (apt-get install openmpi-bin)"; return 1; }
    return 0
}

up() {
    local dir=$1 n=${2:-2} sw pid k
    [ "$n" -ge 1 ] 2>/dev/null && [ "$n" -le 200 ] || die "up: 1 to 200 hosts, not '$n'"
    [ -e "$dir/hosts" ] && die "up: $dir already holds hosts (hosts.sh down $dir first)"
    mkdir -p "$dir/tmp" || die "up: cannot make $dir"
    dir=$(cd "$dir" && pwd)
    : >"$dir/hosts"
    sw=$(hold) || die "up: cannot create a network namespace (root needed)"
    echo "switch $sw $(netns_of "$sw")" >>"$dir/hosts"
    in_ns "$sw" ip link set lo up &&
        in_ns "$sw" ip link add br0 type bridge &&
        in_ns "$sw" ip link set br0 up || { down "$dir"; die "up: cannot make the bridge"; }
    : >"$dir/hostfile"
    for k in $(seq 1 "$n"); do
        pid=$(hold) || { down "$dir"; die "up: cannot create a namespace for node$k"; }
        echo "node$k $pid $(netns_of "$pid") $prefix.$k" >>"$dir/hosts"
        in_ns "$pid" hostname "node$k" &&
            in_ns "$pid" ip link set lo up &&
            in_ns "$pid" ip link add eth0 type veth peer name p$k netns "$sw" &&
            in_ns "$pid" ip addr add "$prefix.$k/24" dev eth0 &&
            in_ns "$pid" ip link set eth0 up &&
            in_ns "$sw" ip link set "p$k" master br0 &&
            in_ns "$sw" ip link set "p$k" up || { down "$dir"; die "up: cannot connect node$k"; }
        echo "node$k slots=64" >>"$dir/hostfile"
    done
    cat >"$dir/agent" <<EOF
#!/bin/sh
# mpirun's rsh agent: runs the command line on the host named first.
host=\$1; shift
exec "$(cd "$(dirname "$0")" && pwd)/$(basename "$0")" agent "$dir" "\$host" "\$@"
EOF
    chmod +x "$dir/agent"
}

# Every process in the namespace recorded for host $2 of DIR $1 but the
# holder: pids, one a line. The holder's own namespace must differ from
# ours (never this machine's processes).
procs() {
    local dir=$1 host=$2 line pid ns p
    line=$(awk -v h="$host" '$1 == h { print $2, $3 }' "$dir/hosts" 2>/dev/null)
    [ -n "$line" ] || return 0
    set -- $line
    pid=$1 ns=$2
    [ "$ns" = "$(netns_of $$)" ] && return 0
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        [ "$p" = "$pid" ] && continue
        [ "$(netns_of "$p")" = "$ns" ] && echo "$p"
    done
}

# The pids on host $2 (every process but the holder, or those named $3).
pids() {
    local p
    holder "$1" "$2" >/dev/null || return 1
    for p in $(procs "$1" "$2"); do
        if [ -z "${3:-}" ] || [ "$(cat /proc/$p/comm 2>/dev/null)" = "$3" ]; then echo "$p"; fi
    done
}

kill_host() {
    local p
    for p in $(pids "$@"); do kill -9 "$p" 2>/dev/null; done
}

down() {
    local dir=$1 host pid ns rest p k
    [ -f "$dir/hosts" ] || { rm -rf "$dir" 2>/dev/null; return 0; }
    while read -r host pid ns rest; do
        for p in $(procs "$dir" "$host"); do kill -9 "$p" 2>/dev/null; done
        [ "$(netns_of "$pid")" = "$ns" ] && kill -9 "$pid" 2>/dev/null
    done <"$dir/hosts"
    # the namespaces end with their last process
    for k in $(seq 1 100); do
        local left=0
        while read -r host pid ns rest; do
            [ "$(netns_of "$pid")" = "$ns" ] && left=1
        done <"$dir/hosts"
        [ $left = 0 ] && break
        sleep 0.05
    done
    rm -rf "$dir"
}

# Waits for process $1 through trapped signals; exits with its status.
wait_for() {
    local rc
    while :; do
        wait "$1"; rc=$?
        kill -0 "$1" 2>/dev/null || exit $rc
    done
}

# A harness killed outright (SIGKILL: no trap runs) leaves its directory
# (its processes, namespaces and interfaces end with it): removes each
# under TMPDIR none of whose namespaces any process holds. Runs outside
# the PID namespace, where /proc shows every harness's processes; a file is
# read before /proc, so a host recorded in it is seen if it lives.
sweep() {
    local f nss live ns
    for f in "${TMPDIR:-/tmp}"/pm-hosts.*/hosts; do
        nss=$(awk '{ print $3 }' "$f" 2>/dev/null)
        [ -n "$nss" ] || continue # none yet: being made
        live=" $(for p in /proc/[0-9]*; do netns_of "${p#/proc/}"; done | sort -u | tr '\n' ' ')"
        for ns in $nss; do
            case $live in *" $ns "*) continue 2 ;; esac
        done
        rm -rf "${f%/hosts}"
    done
}

# `with` outside its PID namespace: starts the rest inside one. Its first
# process (unshare, which holds off SIGINT and SIGTERM while it waits)
# gets SIGKILL when this shell ends however it ends (pdeathsig), and takes
# everything inside with it (--kill-child; a namespace ends with its first
# process); SIGINT, SIGTERM and SIGHUP here reach the shell inside first,
# which removes the hosts and their directory.
with_outer() {
    sweep
    PM_HOSTS_PIDNS=1 setpriv --pdeathsig KILL unshare --pid --fork --kill-child --mount-proc \
        "$0" with "$@" &
    outer_child=$!
    trap 'kill -TERM $(children "$outer_child") 2>/dev/null' INT TERM HUP
    wait_for "$outer_child"
}

# The pids whose parent is $1.
children() {
    local want=$1 p s
    for p in /proc/[0-9]*; do
        s=$(cat "$p/stat" 2>/dev/null) || continue
        s=${s##*) } # the fields after the command's name: state, parent, ...
        set -- $s
        [ "${2:-}" = "$want" ] && echo "${p#/proc/}"
    done
}

cmd=${1:-}
[ $# -ge 1 ] && shift
case $cmd in
can) can ;;
up) [ $# -ge 1 ] || die "usage: hosts.sh up DIR [N]"; up "$@" ;;
down) [ $# -ge 1 ] || die "usage: hosts.sh down DIR"; down "$1" ;;
run)
    [ $# -ge 3 ] || die "usage: hosts.sh run DIR HOST CMD..."
    pid=$(holder "$1" "$2") || exit 1
    d=$1; shift 2
    TMPDIR=$d/tmp exec nsenter --target "$pid" --net --uts -- "$@" ;;
agent) # as rsh: the rest is one command line for the host's shell
    pid=$(holder "$1" "$2") || exit 1
    d=$1; shift 2
    TMPDIR=$d/tmp exec nsenter --target "$pid" --net --uts -- sh -c "$*" ;;
mpirun)
    # TCP only, on the hosts' subnet; mpirun's link to each host's daemon
    # probed after 2 s idle, every second, given up after 3 missed probes:
    # a host gone silent (its interface down) ends the run in seconds
    # (HOSTS_KEEPALIVE=0: OpenMPI's own, TCP's minutes). No binding: the
    # hosts share this machine's cores, and each host's daemon would bind
    # its first rank to the same core 0 (two hosts ran on one core)
    [ $# -ge 1 ] || die "usage: hosts.sh mpirun DIR ARGS..."
    d=$(cd "$1" && pwd) || exit 1; shift
    keep=(--mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1
        --mca oob_tcp_keepalive_probes 3)
    [ "${HOSTS_KEEPALIVE:-1}" = 0 ] && keep=()
    exec "$0" run "$d" node1 mpirun --hostfile "$d/hostfile" --mca plm_rsh_agent "$d/agent" \
        --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET" \
        --mca oob_tcp_if_include "$SUBNET" --bind-to none "${keep[@]}" "$@" ;;
kill) [ $# -ge 2 ] || die "usage: hosts.sh kill DIR HOST [NAME]"; kill_host "$@" ;;
pids) [ $# -ge 2 ] || die "usage: hosts.sh pids DIR HOST [NAME]"; pids "$@" ;;
link)
    [ $# -eq 3 ] || die "usage: hosts.sh link DIR HOST up|down"
    pid=$(holder "$1" "$2") || exit 1
    in_ns "$pid" ip link set eth0 "$3" ;;
with)
    [ $# -ge 2 ] || die "usage: hosts.sh with N CMD..."
    if [ -z "${PM_HOSTS_PIDNS:-}" ]; then with_outer "$@"; fi
    n=$1; shift
    d=$(mktemp -d "${TMPDIR:-/tmp}/pm-hosts.XXXXXX") || exit 1
    trap 'down "$d"' EXIT
    trap 'exit 130' INT TERM HUP
    up "$d" "$n" || exit 1
    # in the background, so a signal's trap runs at once, not after CMD
    PM_HOSTS=$d TMPDIR=$d/tmp "$@" &
    wait_for $! ;;
*) die "usage: hosts.sh up|run|mpirun|kill|link|down|with|can ... (see the script's head)" ;;
esac

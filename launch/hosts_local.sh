#!/usr/bin/env bash
# N emulated hosts on this machine: network namespaces joined by a shaped link, for launching MPI
# jobs across "hosts" for real (tests/hosts_test.py, docs/launching.md).
#
#   launch/hosts_local.sh up 2 [--rate 1gbit] [--delay 1ms]   # hosts h1, h2 and a launch node
#   launch/hosts_local.sh exec -- launch/mpirun.sh --hostfile "$(launch/hosts_local.sh hostfile)" \
#       --per-node -np 2 .venv/bin/python -m cocod_jax.main --config=configs/test.py \
#       --workdir=runs/h2 --config.backend=mpi --config.num_workers=4
#   launch/hosts_local.sh status          # one line a host: address, link state, shaping
#   launch/hosts_local.sh down            # kills what runs in them, removes all of it
#
# Each host hN is a network namespace `${prefix}hN` (prefix: $HOSTS_LOCAL_PREFIX, default cocodh-)
# with loopback up and one veth to a bridge, address 10.213.7.N/24. The bridge lives in a launch
# node's namespace `${prefix}head` (10.213.7.254, hostname `head`), where `exec` runs a command
# (mpirun: the login node); nothing is added to this machine's own network. Each host's uplink is
# shaped with `tc tbf` at --rate (default: unshaped), so traffic between two hosts crosses two
# shaped links, one each way; --delay needs netem, which this kernel may lack (refused then).
# `up` writes into $HOSTS_LOCAL_DIR (default /tmp/cocod-hosts):
#   hostfile   `hN slots=S` a line (S: --slots, default 1)
#   agent      Open MPI's remote-start agent: runs the daemon's command in the host's namespace
#              under a UTS namespace of its own whose hostname is hN (`unshare --uts`)
#   mpirun_args  the MPIRUN_ARGS that launch/mpirun.sh adds: the agent, TCP between hosts (shared
#              memory within one), the link's subnet for the data and the control traffic, and
#              TCP keepalives on the control connections, so that a lost host is noticed in
#              about 11 s instead of 8 minutes
# `exec` runs a command on the launch node with MPIRUN_ARGS set (added to the caller's).
# Faults for the tests: `link hN down|up` (the host's cable), `shape --rate R|none` (every uplink,
# now), `kill hN` (SIGKILL to every process in the host: a host lost whole); `reset` undoes them
# (links up, shaped as `up` made them, every process in a host killed).
# An interrupted or failed `up` removes what it made. Needs root; one line and exit 2 otherwise.
set -euo pipefail
PATH="$PATH:/usr/sbin:/sbin"  # iproute2, outside a minimal PATH.
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${HOSTS_LOCAL_PREFIX:-cocodh-}
dir=${HOSTS_LOCAL_DIR:-/tmp/cocod-hosts}
subnet=10.213.7
head="${prefix}head"
usage="usage: $0 up N [--rate R] [--delay D] [--slots S] | status | down | hostfile |
  exec -- cmd... | link hN down|up | shape --rate R|none [--burst B] | kill hN | reset"

die() { echo "$0: $1" >&2; exit "${2:-1}"; }

if [ "$(id -u)" != 0 ]; then
  echo "$0: emulated hosts need root (network namespaces, veth, tc); run it as root" >&2
  exit 2
fi
for tool in ip tc unshare; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed (iproute2, util-linux)"
done

hosts() {  # The hosts that exist now, h1 h2 ...
  ip netns list | awk '{print $1}' | grep -E "^${prefix}h[0-9]+\$" | sed "s/^$prefix//" | sort -V
}

qdisc() {  # NS RATE DELAY [BURST]: shapes the host's uplink (replace: also used mid-run).
  local ns=$1 rate=$2 delay=$3 burst=${4:-256kb}
  if [ -n "$delay" ]; then
    ip netns exec "$ns" tc qdisc replace dev eth0 root handle 1: netem delay "$delay" \
      ${rate:+rate "$rate"} 2>/dev/null ||
      die "--delay needs the netem qdisc, which this kernel lacks; shape with --rate alone" 2
  elif [ -n "$rate" ]; then
    ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" \
      latency 100ms || die "tc refused rate=$rate burst=$burst" 2
  fi
}

tcp() {  # NS RETRIES: a connection whose data goes unacknowledged fails after RETRIES
  # retransmissions instead of Linux's 15 (~15 minutes). The launch node gives up on a cut-off
  # host after ~13 s (5: mpirun then ends the job), the hosts after ~100 s (8), so that a rank's
  # own comm.timeout_s comes first and names the collective (docs/launching.md).
  ip netns exec "$1" sysctl -qw net.ipv4.tcp_retries2="$2"
}

down() {
  local ns pids
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}(h[0-9]+|head)\$" || true); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086  # a list of pids
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    ip netns delete "$ns" 2>/dev/null || true
  done
  rm -rf "$dir"
}

up() {
  local n=${1:-} rate='' delay='' slots=1 i ns
  case $n in '' | *[!0-9]* | 0 | 1) die "up needs a number of hosts >= 2, got '$n'" 2 ;; esac
  shift
  while [ "$#" -gt 0 ]; do
    case $1 in
      --rate | --delay | --slots) [ -n "${2:-}" ] || die "$1 needs a value" 2 ;;&
      --rate) rate=$2; shift 2 ;;
      --delay) delay=$2; shift 2 ;;
      --slots) slots=$2; shift 2 ;;
      *) die "unknown option '$1' (allowed: --rate, --delay, --slots)" 2 ;;
    esac
  done
  [ "$n" -le 250 ] || die "at most 250 hosts" 2
  [ -z "$(hosts)" ] && ! ip netns list | grep -q "^$head " ||
    die "hosts are already up ($(hosts | tr '\n' ' ')); run '$0 down' first" 2
  trap 'down; exit 130' INT TERM HUP
  trap 'status=$?; [ "$status" = 0 ] || down' EXIT
  mkdir -p "$dir"
  ip netns add "$head"
  ip netns exec "$head" ip link set lo up
  tcp "$head" 5
  ip netns exec "$head" ip link add br0 type bridge
  ip netns exec "$head" ip addr add "$subnet.254/24" dev br0
  ip netns exec "$head" ip link set br0 up
  : >"$dir/hostfile"
  for i in $(seq 1 "$n"); do
    ns="${prefix}h$i"
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    tcp "$ns" 8
    ip link add "${prefix}v$i" netns "$ns" type veth peer name "p$i" netns "$head"
    ip netns exec "$ns" ip link set "${prefix}v$i" name eth0
    ip netns exec "$ns" ip addr add "$subnet.$i/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$head" ip link set "p$i" master br0 up
    qdisc "$ns" "$rate" "$delay"
    echo "h$i slots=$slots" >>"$dir/hostfile"
  done
  cat >"$dir/agent" <<EOF
#!/bin/sh
# Open MPI's remote-start agent for the emulated hosts (launch/hosts_local.sh): AGENT [opts] HOST
# COMMAND...: runs COMMAND in HOST's network namespace, under a hostname of its own.
while [ "\$#" -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
exec ip netns exec "${prefix}\$host" unshare --uts sh -c 'hostname "\$0" && eval "\$1"' "\$host" "\$*"
EOF
  chmod +x "$dir/agent"
  echo "--prtemca plm_ssh_agent $dir/agent --mca pml ob1 --mca btl tcp,sm,self" \
    "--mca btl_tcp_if_include $subnet.0/24 --mca oob_tcp_if_include $subnet.0/24" \
    "--prtemca oob_tcp_if_include $subnet.0/24 --prtemca oob_tcp_keepalive_time 10" \
    "--prtemca oob_tcp_keepalive_intvl 5 --prtemca oob_tcp_keepalive_probes 6" >"$dir/mpirun_args"
  echo "${rate:-unshaped} ${delay:-0}" >"$dir/link"
  trap - INT TERM HUP EXIT
  echo "hosts_local: $n hosts h1..h$n ($subnet.1-$n, link ${rate:-unshaped}), launch node" \
    "$head; hostfile $dir/hostfile; $0 exec -- cmd runs a launch"
}

status() {
  local h any=0
  for h in $(hosts); do
    any=1
    echo "$h: $(ip netns exec "$prefix$h" ip -br addr show eth0 | awk '{print $2, $3}')," \
      "$(ip netns exec "$prefix$h" tc qdisc show dev eth0 | head -1 | cut -d' ' -f2,8-10)," \
      "$(ip netns pids "$prefix$h" | wc -l) processes"
  done
  [ "$any" = 1 ] || { echo "no emulated hosts (run: $0 up N)"; exit 1; }
}

cmd=${1:-}
[ "$#" -gt 0 ] && shift
case $cmd in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  hostfile) [ -f "$dir/hostfile" ] || die "no emulated hosts (run: $0 up N)"; echo "$dir/hostfile" ;;
  exec)
    [ "${1:-}" = -- ] && shift
    [ "$#" -gt 0 ] || die "$usage" 2
    [ -f "$dir/mpirun_args" ] || die "no emulated hosts (run: $0 up N)"
    MPIRUN_ARGS="${MPIRUN_ARGS:-} $(cat "$dir/mpirun_args")"
    export MPIRUN_ARGS
    exec ip netns exec "$head" unshare --uts sh -c 'hostname head && exec "$@"' sh "$@" ;;
  link)
    case ${2:-} in up | down) ;; *) die "$usage" 2 ;; esac
    ip netns exec "$prefix${1:-}" ip link set eth0 "$2" || die "no host '${1:-}'" ;;
  shape)  # --rate R|none [--burst B]: a small burst (>= the MTU, 1500) shapes small messages too.
    [ "${1:-}" = --rate ] && [ -n "${2:-}" ] || die "$usage" 2
    burst=256kb
    if [ "${3:-}" = --burst ]; then
      [ -n "${4:-}" ] || die "--burst needs a value" 2
      burst=$4
    fi
    for h in $(hosts); do
      if [ "$2" = none ]; then
        ip netns exec "$prefix$h" tc qdisc del dev eth0 root 2>/dev/null || true
      else
        qdisc "$prefix$h" "$2" '' "$burst"
      fi
    done ;;
  reset)  # After a fault: every link up and as `up` shaped it, nothing left running in a host.
    [ -f "$dir/link" ] || die "no emulated hosts (run: $0 up N)"
    read -r rate delay <"$dir/link"
    for h in $(hosts); do
      ip netns exec "$prefix$h" ip link set eth0 up
      ip netns exec "$prefix$h" tc qdisc del dev eth0 root 2>/dev/null || true
      [ "$rate" = unshaped ] || qdisc "$prefix$h" "$rate" "${delay#0}"
      pids=$(ip netns pids "$prefix$h")
      # shellcheck disable=SC2086  # a list of pids
      [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
    done ;;
  kill)
    pids=$(ip netns pids "$prefix${1:-}" 2>/dev/null) || die "no host '${1:-}'"
    # shellcheck disable=SC2086  # a list of pids
    [ -z "$pids" ] || kill -KILL $pids ;;
  *) die "$usage" 2 ;;
esac

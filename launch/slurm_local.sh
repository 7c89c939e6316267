#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying the Slurm paths (launch/slurm_example.sbatch,
# the sweep's --launcher=slurm) against a real scheduler, and for the tests marked `slurm`.
#
#   launch/slurm_local.sh up       # installs what is missing, starts the daemons, waits for idle
#   launch/slurm_local.sh status   # one line: the node's state, or why there is no cluster
#   launch/slurm_local.sh down     # cancels every job, stops the daemons, removes what up wrote
#
# Root only for up and down (they install Debian's packages and run the daemons as root). `up`:
# - installs with apt-get whatever of these is missing: munge, slurmctld, slurmd, slurmdbd,
#   slurm-client (Debian's Slurm 22.05), libpmix-dev (Slurm's pmix plugin opens its libpmix.so) and
#   mariadb-server (the accounting database: sacct, which the sweep reads job states from
#   through submitit, answers only with slurmdbd);
# - writes /etc/slurm/slurm.conf for this machine (`slurmd -C`: its cores and memory; one
#   partition, `local`; no cgroups: proctrack/linuxproc and task/none) and slurmdbd.conf;
# - starts munged, a MariaDB of its own (data under the state folder, 127.0.0.1:$SLURM_LOCAL_DB_PORT,
#   default 3399), slurmdbd, slurmctld and slurmd, and waits until the node is idle.
# It never overwrites a slurm.conf it did not write, and stops only the daemons it started.
# Everything it keeps (spool, state, database, logs, pid files) is in $SLURM_LOCAL_DIR (default
# /var/tmp/cocod-slurm), whose *.log files say more when a part does not start.
# A failure is one line on stderr naming the part, and exit 1 (2 for bad usage).
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin  # The daemons and slurmd -C, where a bare PATH lacks them.
usage="usage: $0 up|down|status"
dir=${SLURM_LOCAL_DIR:-/var/tmp/cocod-slurm}
conf=/etc/slurm/slurm.conf
dbd_conf=/etc/slurm/slurmdbd.conf
marker='# Written by cocod_jax launch/slurm_local.sh'
packages=(munge slurmctld slurmd slurmdbd slurm-client libpmix-dev mariadb-server)
db_port=${SLURM_LOCAL_DB_PORT:-3399}
wait_s=${SLURM_LOCAL_WAIT_S:-60}

die() { echo "$0: $*" >&2; exit 1; }

running() {  # DIR/NAME.pid: 0 when the process it names lives and is NAME (not a reused pid)
  local name pid
  name=$(basename "$1" .pid)
  [ -f "$1" ] && pid=$(cat "$1") && [ -n "$pid" ] &&
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]
}

ours() {  # FILE: 0 when it is missing or this script wrote it
  [ ! -f "$1" ] || grep -qF "$marker" "$1"
}

install_missing() {
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
      missing+=("$p")
  done
  [ "${#missing[@]}" = 0 ] && return
  command -v apt-get >/dev/null || die "no apt-get to install ${missing[*]}: install them by hand"
  echo "installing ${missing[*]} (apt-get, about a minute)"
  apt-get update -qq >"$dir/apt.log" 2>&1 || die "apt-get update failed (see $dir/apt.log)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >>"$dir/apt.log" 2>&1 || die "apt-get install ${missing[*]} failed (see $dir/apt.log)"
}

write_conf() {
  local f
  for f in "$conf" "$dbd_conf"; do
    ours "$f" || die "$f exists and was not written by this script: a Slurm is configured here"
  done
  local node host
  node=$(slurmd -C 2>/dev/null | head -1) || true
  case $node in NodeName=*) ;; *) die "slurmd -C did not describe this node: '$node'" ;; esac
  host=${node%% *}
  host=${host#NodeName=}
  mkdir -p /etc/slurm "$dir/ctld" "$dir/d"
  cat >"$conf" <<EOF
$marker (up); its 'down' removes it.
ClusterName=cocod-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
# A requeued job waits cred_expire seconds before it may start again (Slurm's default: 120).
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Look at pending jobs every few seconds (defaults: 60 s, backfill 30 s): a requeued job starts
# soon after its cred_expire.
SchedulerParameters=sched_interval=2,bf_interval=2
MpiDefault=none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
JobRequeue=1
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/d
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=30
MinJobAge=300
$node
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$dbd_conf" <<EOF
$marker (up); its 'down' removes it.
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=cocod-local
StorageLoc=slurm_acct_db
PidFile=$dir/slurmdbd.pid
LogFile=$dir/slurmdbd.log
EOF
  chmod 600 "$dbd_conf"
}

start_munge() {
  if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi  # One serves.
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  [ -f /etc/munge/munge.key ] || mungekey --create >/dev/null 2>&1 ||
    die "munge: no /etc/munge/munge.key and mungekey could not create one"
  local as=()
  if id munge >/dev/null 2>&1; then
    chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge/munge.key
    as=(runuser -u munge --)
  fi
  "${as[@]}" munged --pid-file=/run/munge/munged.pid >"$dir/munged.out" 2>&1 ||
    die "munged did not start: $(tail -1 "$dir/munged.out")"
  cp /run/munge/munged.pid "$dir/munged.pid"  # Ours to stop (munge's own folder is not root's).
  munge -n </dev/null | unmunge >/dev/null 2>&1 || die "munge started but does not answer"
}

sql() {
  mariadb --socket="$dir/mariadb.sock" -uroot -e "$1" >/dev/null 2>&1
}

start_db() {
  local i
  if ! running "$dir/mariadbd.pid"; then
    if [ ! -d "$dir/db/mysql" ]; then
      mariadb-install-db --user=root --datadir="$dir/db" --auth-root-authentication-method=normal \
        --skip-test-db >"$dir/mariadb-install.log" 2>&1 ||
        die "mariadb-install-db failed (see $dir/mariadb-install.log)"
    fi
    setsid mariadbd --user=root --datadir="$dir/db" --socket="$dir/mariadb.sock" \
      --port="$db_port" --bind-address=127.0.0.1 --pid-file="$dir/mariadbd.pid" \
      --log-error="$dir/mariadb.log" </dev/null >/dev/null 2>&1 &
  fi
  for i in $(seq 150); do sql 'select 1' && break; sleep 0.2; done
  sql "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'cocod-local';
       GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" ||
    die "MariaDB did not start on 127.0.0.1:$db_port (see $dir/mariadb.log)"
  if ! running "$dir/slurmdbd.pid"; then
    slurmdbd >"$dir/slurmdbd.out" 2>&1 ||
      die "slurmdbd did not start: $(tail -1 "$dir/slurmdbd.log" 2>/dev/null)"
  fi
  for i in $(seq 150); do
    sacctmgr -n list cluster >/dev/null 2>&1 && return
    sleep 0.2
  done
  die "slurmdbd does not answer sacctmgr (see $dir/slurmdbd.log)"
}

node_state() {
  sinfo -h -o '%T' 2>/dev/null | head -1
}

up() {
  mkdir -p "$dir"
  local t0=$SECONDS state=''
  install_missing
  write_conf
  start_munge
  start_db
  if ! sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qw cocod-local; then
    sacctmgr -i add cluster cocod-local >/dev/null 2>&1 ||
      die "sacctmgr could not register the cluster (see $dir/slurmdbd.log)"
  fi
  if ! running "$dir/slurmctld.pid"; then
    slurmctld -i >"$dir/slurmctld.out" 2>&1 ||
      die "slurmctld did not start: $(tail -1 "$dir/slurmctld.log" 2>/dev/null)"
  fi
  if ! running "$dir/slurmd.pid"; then
    slurmd >"$dir/slurmd.out" 2>&1 ||
      die "slurmd did not start: $(tail -1 "$dir/slurmd.log" 2>/dev/null)"
  fi
  while [ $((SECONDS - t0)) -lt "$wait_s" ]; do
    state=$(node_state)
    case $state in idle | mixed | allocated) break ;; esac
    sleep 0.5
  done
  case $state in
    idle | mixed | allocated) ;;
    *) die "the node is '${state:-not known to slurmctld}' after ${wait_s} s, not idle" \
         "(see $dir/slurmd.log)" ;;
  esac
  echo "slurm up in $((SECONDS - t0)) s: node $(sinfo -h -o '%N, %c CPUs,') $state, partition" \
    "local, accounting on ($conf; logs in $dir)"
}

down() {
  local f name pidf pid i
  for f in "$conf" "$dbd_conf"; do
    ours "$f" || die "$f was not written by this script: not stopping that Slurm"
  done
  if running "$dir/slurmctld.pid"; then scancel --full --quiet 2>/dev/null || true; fi
  for name in slurmd slurmctld slurmdbd mariadbd munged; do
    pidf=$dir/$name.pid
    running "$pidf" || continue
    pid=$(cat "$pidf")
    kill "$pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$dir"
  rm -f "$conf" "$dbd_conf"
  echo "slurm down"
}

status() {
  [ -f "$conf" ] || { echo "no Slurm: no $conf (launch/slurm_local.sh up starts one)"; exit 1; }
  local state
  state=$(node_state)
  [ -n "$state" ] || { echo "no Slurm: sinfo gets no answer from slurmctld"; exit 1; }
  echo "slurm: node $(sinfo -h -o '%N') $state"
}

[ "$#" = 1 ] || { echo "$usage" >&2; exit 2; }
case $1 in
  up | down)
    [ "$(id -u)" = 0 ] || die "$1 needs root (it installs packages and runs the daemons)"
    "$1" ;;
  status) status ;;
  *) echo "$usage" >&2; exit 2 ;;
esac

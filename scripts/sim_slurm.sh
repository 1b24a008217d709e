#!/usr/bin/env bash
# A Slurm cluster on this machine, as scripts/sim_cluster.sh makes machines: each node is a
# network namespace on a bridge (scripts/sim_net.sh: --rate, --delay, --loss, as sim_cluster)
# with its own host name (n0, n1, ...; a UTS namespace) that resolves to its address through
# a hosts file the script writes (/etc/netns/<namespace>/hosts, which `ip netns exec` shows
# the node as /etc/hosts), running slurmd; munged and slurmctld run on this machine, on the
# bridge's address. Once every node is idle, COMMAND runs here (the submit host) with
# SLURM_CONF set, so sbatch, srun, squeue, scontrol and scancel talk to this cluster; the
# script's status is COMMAND's. Everything created (daemons, jobs, namespaces, bridge, hosts
# files, the cluster's state) is removed when the script ends, however it ends (exit, error,
# Ctrl-C, SIGTERM); the daemons' logs stay in LOGDIR.
#
#   sudo bash scripts/sim_slurm.sh --nodes 3 [--cpus 2] [--rate 1gbit] [--delay 0.5ms] [--loss 5%]
#        [--logs DIR] -- COMMAND [ARGS...]
#   e.g. ... -- sbatch --wait --nodes 3 --ntasks-per-node 2 examples/slurm/train.sbatch --steps 200
#
# --cpus: the CPUs each node offers (Slurm's CPUs=; the nodes share this machine's cores).
# The cluster: partition "sim" (the default) with every node, select/cons_tres by CPU,
# proctrack/linuxproc and task/none (no cgroups needed), SlurmdTimeout 10 s (a node that stops
# answering is down within about that), KillWait 10 s (the time between a job's SIGTERM and its
# SIGKILL), jobs requeued when their node fails (JobRequeue=1). COMMAND also gets SIM_SLURM_TAG
# (the namespaces are $SIM_SLURM_TAG n<i>) and SIM_SLURM_LOGS.
#
# Needs root, iproute2, util-linux (unshare) and Debian's slurm-wlm and munge (the setup script
# installs them).
set -euo pipefail

nodes=2 cpus=2 logs="" cred_expire=10
prog=sim_slurm
# shellcheck source=scripts/sim_net.sh
source "$(dirname "$0")/sim_net.sh"
while (($#)); do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --cpus) cpus="$2"; shift 2 ;;
    --cred_expire) cred_expire="$2"; shift 2 ;;
    --logs) logs="$2"; shift 2 ;;
    --) shift; break ;;
    *) net_option "$1" "${2:-}" && shift 2 || { echo "sim_slurm: unknown option '$1' (see the top of $0)" >&2; exit 2; } ;;
  esac
done
(($# > 0)) || { echo "sim_slurm: no command given (… -- COMMAND [ARGS...])" >&2; exit 2; }
[[ "$cpus" =~ ^[0-9]+$ ]] && ((cpus >= 1)) || { echo "sim_slurm: --cpus must be a positive number, got '$cpus'" >&2; exit 2; }
for tool in slurmctld slurmd sbatch sinfo munged mungekey unshare runuser; do
  command -v "$tool" >/dev/null || { echo "sim_slurm: '$tool' is missing (scripts/setup.sh installs slurm-wlm and munge)" >&2; exit 2; }
done
net_check
logs="${logs:-$(mktemp -d "/tmp/sim_slurm.XXXXXX")}"
mkdir -p "$logs"
logs=$(realpath "$logs")
# The cluster's state: root's, readable (slurmd reads the configuration), munge's own directory.
state=$(mktemp -d "/tmp/sim_slurm_state.XXXXXX")
chmod 755 "$state"
daemons=()

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  # Jobs first (their tasks run in the namespaces), then the daemons, then the network.
  [ ! -e "$state/slurm.conf" ] || SLURM_CONF="$state/slurm.conf" timeout 5 scancel --quiet --full --user root 2>/dev/null || true
  for pid in "${daemons[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  for ((tries = 0; tries < 30; tries++)); do  # bounded: 3 s for them to go
    alive=0
    for pid in "${daemons[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for pid in "${daemons[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; done
  net_down
  for ((i = 0; i < nodes; i++)); do rm -rf "/etc/netns/${tag}n$i"; done
  rm -rf "$state"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

net_up
ctl="$base.254"
ip addr add "$ctl/24" dev "$bridge"
hosts="127.0.0.1 localhost
$ctl ctl"
for ((i = 0; i < nodes; i++)); do hosts+=$'\n'"$base.$((i + 1)) n$i"; done
for ((i = 0; i < nodes; i++)); do
  mkdir -p "/etc/netns/${tag}n$i"
  echo "$hosts" >"/etc/netns/${tag}n$i/hosts"
done

# munge: its own key, socket and daemon (as the munge user, which munged expects).
mkdir -p "$state/munge"
chown munge:munge "$state/munge"
chmod 700 "$state/munge"
runuser -u munge -- mungekey --create --keyfile="$state/munge/munge.key" >"$logs/mungekey.log" 2>&1
setsid runuser -u munge -- munged --foreground --force --socket="$state/munge/munge.socket" \
  --key-file="$state/munge/munge.key" --pid-file="$state/munge/munged.pid" --seed-file="$state/munge/munged.seed" \
  --log-file="$logs/munged.log" >>"$logs/munged.log" 2>&1 &
daemons+=($!)
for ((tries = 0; tries < 100; tries++)); do [ -S "$state/munge/munge.socket" ] && break; sleep 0.05; done
[ -S "$state/munge/munge.socket" ] || { echo "sim_slurm: munged did not start: $(tail -3 "$logs/munged.log")" >&2; exit 3; }
chmod 755 "$state/munge"  # the socket, for every user; the key stays munge's (0600)

ctl_port=$((20000 + $$ % 20000))
mkdir -p "$state/ctld" "$state/spool"
{
  echo "ClusterName=sim"
  echo "SlurmctldHost=$(hostname -s)($ctl)"
  echo "SlurmctldPort=$ctl_port"
  echo "SlurmdPort=$((ctl_port + 1))"
  echo "AuthType=auth/munge"
  echo "AuthInfo=socket=$state/munge/munge.socket,cred_expire=$cred_expire"
  echo "CredType=cred/munge"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "StateSaveLocation=$state/ctld"
  echo "SlurmdSpoolDir=$state/spool/%n"
  echo "SlurmctldPidFile=$state/slurmctld.pid"
  echo "SlurmdPidFile=$state/slurmd.%n.pid"
  echo "SlurmctldLogFile=$logs/slurmctld.log"
  echo "SlurmdLogFile=$logs/slurmd.%n.log"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_CPU"
  echo "MpiDefault=none"
  echo "SwitchType=switch/none"
  echo "JobCompType=jobcomp/none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "ReturnToService=2"
  echo "SlurmdTimeout=10"
  echo "KillWait=10"
  echo "JobRequeue=1"
  echo "SchedulerParameters=sched_interval=2,bf_interval=2"  # a requeued job starts soon after cred_expire
  echo "InactiveLimit=0"
  for ((i = 0; i < nodes; i++)); do echo "NodeName=n$i NodeAddr=$base.$((i + 1)) CPUs=$cpus State=UNKNOWN"; done
  echo "PartitionName=sim Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} >"$state/slurm.conf"
echo "CgroupPlugin=cgroup/v1" >"$state/cgroup.conf"  # read even without cgroups in use
export SLURM_CONF="$state/slurm.conf"

setsid slurmctld -D -i -f "$SLURM_CONF" >>"$logs/slurmctld.log" 2>&1 &
daemons+=($!)
for ((i = 0; i < nodes; i++)); do
  mkdir -p "$state/spool/n$i"
  setsid ip netns exec "${tag}n$i" unshare --uts sh -c "hostname n$i && exec slurmd -D -N n$i -f '$SLURM_CONF'" \
    >>"$logs/slurmd.n$i.log" 2>&1 &
  daemons+=($!)
done
echo "sim_slurm: $nodes node(s) n0..n$((nodes - 1)) on $subnet/24 (node i at $base.<i+1>, namespace ${tag}n<i>," \
  "bridge $bridge), slurmctld at $ctl:$ctl_port, $cpus CPUs each, $(net_description); logs in $logs"
for ((tries = 0; tries < 300; tries++)); do  # bounded: 30 s for every node to register
  idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
  ((idle == nodes)) && break
  sleep 0.1
done
((idle == nodes)) || { echo "sim_slurm: only $idle of $nodes node(s) came up idle in 30 s: $(sinfo -N 2>&1 | tr '\n' ' '); see $logs" >&2; exit 3; }

status=0
SIM_SLURM_TAG="$tag" SIM_SLURM_LOGS="$logs" "$@" || status=$?
net_report
exit "$status"

#!/usr/bin/env bash
# A cluster of N "machines" on this one: each node is a network namespace with its own
# interface (eth0, 10.<a>.<b>.<node + 1>/24) on a bridge, optionally shaped (--rate: tbf;
# --loss: nftables drops that share of the packets arriving at each node, handshakes spared; --delay: netem, or
# where the kernel lacks it scripts/link_delay, which holds each leaving packet in user space),
# running tinyddp's launcher as that node of an
# N-node job. Node 0 hosts the store. Each node's output goes to LOGDIR/node<i>.log (and to
# stdout prefixed "[node i]"). Everything created (namespaces, bridge, veth pairs, processes)
# is removed when the script ends, however it ends (exit, error, Ctrl-C, SIGTERM).
#
#   sudo bash scripts/sim_cluster.sh --nodes 2 --nproc_per_node 2 [--rate 1gbit] [--delay 0.5ms]
#        [--loss 30%] [--rto_min 5ms] [--rto_max 1000ms] [--job_nodes N] [--port 29500] [--logs DIR] [--launch PATH]
#        [--launch_args "..."] [--link_delay PATH] [--elastic MIN:MAX [--late S]] -- PROGRAM [ARGS...]
#
# --delay (e.g. 0.5ms or 500us) is each node's one-way latency on its way out, so a round trip
# between two nodes takes twice that; without sch_netem, link_delay holds the packets, and the
# script prints what each node's link_delay measured. --rto_min and --rto_max set TCP's
# retransmission timeouts on the nodes (scripts/sim_net.sh, which builds the network, says why).
#
# --elastic MIN:MAX makes it an elastic job (docs/launcher.md, "Elastic jobs"): every launcher
# gets --nnodes MIN:MAX --rdzv_endpoint <node 0>:PORT --rdzv_id sim_<tag> instead of a node
# rank, node 0 hosting the store; --late S starts the last node S seconds after the others
# (a node joining mid-run).
# --job_nodes tells the launchers the job has N >= --nodes nodes, so that the missing ones
# never arrive (to try rendezvous failures).
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2, for --loss nftables and for
# --delay without netem iptables (the setup script installs both); PROGRAM and the launcher
# (default bazel-bin/launcher/launch) must be built. The exit status is the first failing
# node's launcher's, else 0.
set -euo pipefail

nodes=2 job_nodes="" elastic="" late="" nproc=1 port=29500 logs="" launch="bazel-bin/launcher/launch" launch_args=""
prog=sim_cluster
# shellcheck source=scripts/sim_net.sh
source "$(dirname "$0")/sim_net.sh"
while (($#)); do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --job_nodes) job_nodes="$2"; shift 2 ;;
    --elastic) elastic="$2"; shift 2 ;;
    --late) late="$2"; shift 2 ;;
    --nproc_per_node) nproc="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --logs) logs="$2"; shift 2 ;;
    --launch) launch="$2"; shift 2 ;;
    --launch_args) launch_args="$2"; shift 2 ;;
    --) shift; break ;;
    *) net_option "$1" "${2:-}" && shift 2 || { echo "sim_cluster: unknown option '$1' (see the top of $0)" >&2; exit 2; } ;;
  esac
done
(($# > 0)) || { echo "sim_cluster: no program given (… -- PROGRAM [ARGS...])" >&2; exit 2; }
net_check
job_nodes="${job_nodes:-$nodes}"
[ -z "$elastic" ] || [[ "$elastic" =~ ^[0-9]+:[0-9]+$ ]] || { echo "sim_cluster: --elastic takes MIN:MAX, got '$elastic'" >&2; exit 2; }
[ -z "$late" ] || { [ -n "$elastic" ] && [[ "$late" =~ ^[0-9]+(\.[0-9]+)?$ ]]; } || { echo "sim_cluster: --late takes seconds and needs --elastic, got '$late'" >&2; exit 2; }
[[ "$job_nodes" =~ ^[0-9]+$ ]] && ((job_nodes >= nodes)) || { echo "sim_cluster: --job_nodes must be a number >= --nodes ($nodes), got '$job_nodes'" >&2; exit 2; }
[ -x "$launch" ] || { echo "sim_cluster: no launcher at $launch (bazel build //launcher:launch, or --launch PATH)" >&2; exit 2; }
launch=$(realpath "$launch")

logs="${logs:-$(mktemp -d "/tmp/sim_cluster.XXXXXX")}"
mkdir -p "$logs"
pids=()

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  sleep 0.2
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; done
  net_down  # anything still running inside a namespace goes with it
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

net_up
master="$base.1"
echo "sim_cluster: $nodes node(s) on $subnet/24 (node i at $base.<i+1>, namespace ${tag}n<i>, bridge $bridge)," \
  "$(net_description); logs in $logs"

for ((i = 0; i < nodes; i++)); do
  if [ -n "$elastic" ]; then
    job=(--nnodes "$elastic" --rdzv_endpoint "$master:$port" --rdzv_id "sim_$tag")
    if [ -n "$late" ] && ((i == nodes - 1)); then sleep "$late"; fi
  else
    job=(--nnodes "$job_nodes" --node_rank "$i" --master_addr "$master" --master_port "$port")
  fi
  # setsid: each node's launcher leads a process group of its own, so cleanup can stop all of it.
  # shellcheck disable=SC2086
  # (no address to set: each rank binds to its source address on the route to the master)
  setsid ip netns exec "${tag}n$i" \
    "$launch" "${job[@]}" --nproc_per_node "$nproc" $launch_args -- "$@" >"$logs/node$i.log" 2>&1 &
  pids+=($!)
  # Node 0 hosts an elastic job's store: the others start once it is there.
  if [ -n "$elastic" ] && ((i == 0)); then
    for ((tries = 0; tries < 100; tries++)); do grep -q "the store at" "$logs/node0.log" 2>/dev/null && break; sleep 0.05; done
  fi
done

status=0
for ((i = 0; i < nodes; i++)); do
  code=0
  wait "${pids[$i]}" || code=$?
  ((status != 0)) || status=$code
  sed "s/^/[node $i] /" "$logs/node$i.log"
  echo "sim_cluster: node $i's launcher exited with status $code"
done
net_report
exit "$status"

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
# between two nodes takes twice that. Without sch_netem the script queues what leaves each
# node's eth0 to link_delay (iptables NFQUEUE; default bazel-bin/scripts/link_delay, built with
# bazel build -c opt //scripts:link_delay), and prints what each node's link_delay measured.
#
# --elastic MIN:MAX makes it an elastic job (docs/launcher.md, "Elastic jobs"): every launcher
# gets --nnodes MIN:MAX --rdzv_endpoint <node 0>:PORT --rdzv_id sim_<tag> instead of a node
# rank, node 0 hosting the store; --late S starts the last node S seconds after the others
# (a node joining mid-run).
# --job_nodes tells the launchers the job has N >= --nodes nodes, so that the missing ones
# never arrive (to try rendezvous failures).
# --rto_min sets TCP's minimum retransmission timeout on the nodes' route (Linux's default is
# 200 ms) and turns delayed ACKs off there (quickack), as datacenter hosts often do: a delayed
# ACK (up to 40 ms) enters TCP's RTT estimate, which then sets the timeout far above rto_min.
# --rto_max caps the timeout as it backs off (net.ipv4.tcp_rto_max_ms in each node, Linux 6.15
# and later; Linux's cap is 120 s), raising tcp_retries2 (up to 255) so that Linux does not give
# up on a connection much sooner than its default 15 minutes. Both matter under heavy loss: a segment lost 8 times in a
# row waits 255 timeouts, and with a timeout of 300 ms (srtt + 4 rttvar after one lost
# handshake ACK or a few delayed ACKs) that is 77 s, past a job's collective timeout.
#
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2, for --loss nftables and for
# --delay without netem iptables (the setup script installs both); PROGRAM and the launcher
# (default bazel-bin/launcher/launch) must be built. The exit status is the first failing
# node's launcher's, else 0.
set -euo pipefail

nodes=2 job_nodes="" elastic="" late="" nproc=1 rate="" delay="" loss="" rto_min="" rto_max="" port=29500 logs="" launch="bazel-bin/launcher/launch" launch_args=""
link_delay="bazel-bin/scripts/link_delay"
while (($#)); do
  case "$1" in
    --nodes) nodes="$2"; shift 2 ;;
    --job_nodes) job_nodes="$2"; shift 2 ;;
    --elastic) elastic="$2"; shift 2 ;;
    --late) late="$2"; shift 2 ;;
    --nproc_per_node) nproc="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --delay) delay="$2"; shift 2 ;;
    --loss) loss="$2"; shift 2 ;;
    --rto_min) rto_min="$2"; shift 2 ;;
    --rto_max) rto_max="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --logs) logs="$2"; shift 2 ;;
    --launch) launch="$2"; shift 2 ;;
    --launch_args) launch_args="$2"; shift 2 ;;
    --link_delay) link_delay="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "sim_cluster: unknown option '$1' (see the top of $0)" >&2; exit 2 ;;
  esac
done
(($# > 0)) || { echo "sim_cluster: no program given (… -- PROGRAM [ARGS...])" >&2; exit 2; }
[[ "$nodes" =~ ^[0-9]+$ ]] && ((nodes >= 1 && nodes <= 200)) || { echo "sim_cluster: --nodes must be 1..200, got '$nodes'" >&2; exit 2; }
job_nodes="${job_nodes:-$nodes}"
[ -z "$elastic" ] || [[ "$elastic" =~ ^[0-9]+:[0-9]+$ ]] || { echo "sim_cluster: --elastic takes MIN:MAX, got '$elastic'" >&2; exit 2; }
[ -z "$late" ] || { [ -n "$elastic" ] && [[ "$late" =~ ^[0-9]+(\.[0-9]+)?$ ]]; } || { echo "sim_cluster: --late takes seconds and needs --elastic, got '$late'" >&2; exit 2; }
[[ "$job_nodes" =~ ^[0-9]+$ ]] && ((job_nodes >= nodes)) || { echo "sim_cluster: --job_nodes must be a number >= --nodes ($nodes), got '$job_nodes'" >&2; exit 2; }
if [ -n "$loss" ]; then
  [[ "$loss" =~ ^([0-9]{1,2})%?$ ]] || { echo "sim_cluster: --loss must be a whole percentage 0..99 (e.g. 30%), got '$loss'" >&2; exit 2; }
  loss_percent="${BASH_REMATCH[1]}"
  command -v nft >/dev/null || { echo "sim_cluster: --loss needs 'nft' (nftables; scripts/setup.sh installs it)" >&2; exit 2; }
fi
if [ -n "$rto_max" ]; then
  [[ "$rto_max" =~ ^([0-9]+)ms$ ]] && ((BASH_REMATCH[1] >= 1)) || { echo "sim_cluster: --rto_max must be a whole number of ms (e.g. 1000ms), got '$rto_max'" >&2; exit 2; }
  rto_max_ms="${BASH_REMATCH[1]}"
  # Linux gives up on a connection (ETIMEDOUT) once a loss episode has lasted as long as
  # tcp_retries2 (15) timeouts backing off from 200 ms up to the cap: about 15 minutes with the
  # 120 s cap, 14 s with a 1 s one, which heavy loss on a busy connection reaches while TCP still
  # makes progress. Each capped timeout gets one more retry, up to Linux's limit of 255: 15
  # minutes again, or with a cap below 3.6 s about 255 capped timeouts (4 minutes for 1 s).
  retries2=$((15 + 924600 / rto_max_ms))
  ((retries2 <= 255)) || retries2=255
  if [ ! -e /proc/sys/net/ipv4/tcp_rto_max_ms ]; then
    echo "sim_cluster: note: this kernel ($(uname -r)) has no net.ipv4.tcp_rto_max_ms (Linux 6.15 and later); --rto_max ignored, TCP's timeout backs off up to 120 s" >&2
    rto_max=""
  fi
fi
if [ -n "$delay" ]; then
  [[ "$delay" =~ ^([0-9]+(\.[0-9]+)?)(ms|us)$ ]] || { echo "sim_cluster: --delay must be a time in ms or us (e.g. 0.5ms, 500us), got '$delay'" >&2; exit 2; }
  delay_us=$(awk -v n="${BASH_REMATCH[1]}" -v unit="${BASH_REMATCH[3]}" 'BEGIN { print (unit == "ms" ? n * 1000 : n) }')
fi
[ -x "$launch" ] || { echo "sim_cluster: no launcher at $launch (bazel build //launcher:launch, or --launch PATH)" >&2; exit 2; }
command -v ip >/dev/null || { echo "sim_cluster: 'ip' (iproute2) is missing" >&2; exit 2; }
launch=$(realpath "$launch")
[ ! -x "$link_delay" ] || link_delay=$(realpath "$link_delay")

# Names unique to this run (interface names have at most 15 characters), and a subnet from the PID.
tag="td$(($$ % 100000))"
subnet="10.$((200 + $$ % 50)).$(($$ / 50 % 250)).0"
base="${subnet%.0}"
bridge="${tag}br"
logs="${logs:-$(mktemp -d "/tmp/sim_cluster.XXXXXX")}"
mkdir -p "$logs"
pids=()
delay_pids=()
delay_how=""

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  for pid in "${pids[@]}" "${delay_pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  sleep 0.2
  for pid in "${pids[@]}" "${delay_pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true; done
  for ((i = 0; i < nodes; i++)); do
    # Anything still running inside the namespace goes with it.
    ip netns pids "${tag}n$i" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "${tag}n$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if ! ip netns add "${tag}n0" 2>"$logs/netns.err"; then
  echo "sim_cluster: cannot create network namespaces ($(cat "$logs/netns.err")); run as root" >&2
  exit 3
fi
ip link add "$bridge" type bridge
ip link set "$bridge" up
for ((i = 0; i < nodes; i++)); do
  ns="${tag}n$i"
  ((i == 0)) || ip netns add "$ns"
  ip link add "${tag}h$i" type veth peer name "${tag}c$i"
  ip link set "${tag}h$i" master "$bridge" up
  ip link set "${tag}c$i" netns "$ns"
  ip -n "$ns" link set "${tag}c$i" name eth0
  ip -n "$ns" addr add "$base.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  [ -z "$rto_min" ] || ip -n "$ns" route replace "$subnet/24" dev eth0 rto_min "$rto_min" quickack 1
  [ -z "$rto_max" ] || ip netns exec "$ns" sysctl -qw net.ipv4.tcp_rto_max_ms="$rto_max_ms" net.ipv4.tcp_retries2="$retries2"
  # Shaping, on each node's way out: netem (or link_delay) for the delay, tbf for the rate.
  delay_by_netem=""
  if [ -n "$delay" ] && ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "${delay_us}us" 2>/dev/null; then
    delay_by_netem=1 delay_how="netem"
    [ -z "$rate" ] || ip netns exec "$ns" tc qdisc add dev eth0 parent 1: handle 2: tbf rate "$rate" burst 256kb latency 100ms
  elif [ -n "$rate" ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
  fi
  if [ -n "$delay" ] && [ -z "$delay_by_netem" ]; then
    [ -x "$link_delay" ] || { echo "sim_cluster: no netem here, and no link_delay at $link_delay for --delay (bazel build -c opt //scripts:link_delay, or --link_delay PATH)" >&2; exit 3; }
    command -v iptables >/dev/null || { echo "sim_cluster: no netem here, and --delay without it needs 'iptables' (scripts/setup.sh installs it)" >&2; exit 3; }
    # Every packet leaving eth0 waits in queue 0 of this namespace until link_delay lets it go
    # (the queue and the rule go with the namespace). The packets then meet tbf as usual.
    delay_how="link_delay"
    ip netns exec "$ns" iptables -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass
    setsid ip netns exec "$ns" "$link_delay" --queue 0 --delay_us "$delay_us" >"$logs/link_delay$i.log" 2>&1 &
    delay_pids+=($!)
    for ((tries = 0; tries < 100; tries++)); do  # bounded: 10 s for it to bind the queue
      grep -q "holding" "$logs/link_delay$i.log" 2>/dev/null && break
      kill -0 "${delay_pids[-1]}" 2>/dev/null || break
      sleep 0.1
    done
    grep -q "holding" "$logs/link_delay$i.log" || { echo "sim_cluster: node $i's link_delay did not start: $(cat "$logs/link_delay$i.log")" >&2; exit 3; }
  fi
  # Loss, on each node's way in (so every packet between two nodes meets it once): a random
  # share of what arrives on eth0 is dropped, as a lossy link would (the sender sees no error
  # and TCP retransmits). Handshakes (SYN, SYN-ACK) are spared: a lost SYN is retried after
  # 1, 2, 4, ... 64 s whatever rto_min says, so under 30% loss a few connections in a hundred
  # would stall for minutes, which tests the kernel's SYN backoff rather than the job. The
  # table lives in the namespace and goes with it.
  if [ -n "$loss" ]; then
    ip netns exec "$ns" nft -f - <<NFT
table inet sim_cluster {
  chain lossy_link {
    type filter hook input priority 0; policy accept;
    iifname "eth0" tcp flags & syn == syn accept
    iifname "eth0" numgen random mod 100 < $loss_percent counter drop
  }
}
NFT
  fi
done
master="$base.1"
echo "sim_cluster: $nodes node(s) on $subnet/24 (node i at $base.<i+1>, namespace ${tag}n<i>, bridge $bridge)," \
  "${rate:-unshaped}${delay:+, delay $delay ($delay_how)}${loss:+, loss $loss}${rto_min:+, rto_min $rto_min}${rto_max:+, rto_max $rto_max}; logs in $logs"

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
for ((i = 0; i < ${#delay_pids[@]}; i++)); do
  kill -TERM "${delay_pids[$i]}" 2>/dev/null || true
  wait "${delay_pids[$i]}" 2>/dev/null || true
  echo "sim_cluster: node $i's $(grep "held" "$logs/link_delay$i.log" || echo "link_delay printed no summary")"
done
if [ -n "$loss" ]; then
  for ((i = 0; i < nodes; i++)); do
    dropped=$(ip netns exec "${tag}n$i" nft list chain inet sim_cluster lossy_link | grep -o 'packets [0-9]*' | cut -d' ' -f2)
    echo "sim_cluster: node $i's link dropped ${dropped:-0} arriving packets"
  done
fi
exit "$status"

# The network of the simulated machines, sourced by scripts/sim_cluster.sh and
# scripts/sim_slurm.sh: N network namespaces ("nodes"), each with its own interface (eth0,
# <base>.<node + 1>/24) on a bridge, optionally shaped on each node's link (--rate: tbf; --loss:
# nftables drops that share of the packets arriving at each node, handshakes spared; --delay:
# netem, or where the kernel lacks it scripts/link_delay, which holds each leaving packet in
# user space; --rto_min, --rto_max: TCP's retransmission timeout). The caller sets `prog` (its
# name, for messages), `nodes` and `logs`, passes each option to net_option, then calls
# net_check, net_up, and net_down when it ends (however it ends); net_report prints what the
# shaping did. See the top of sim_cluster.sh for the options' meaning.
#
# --delay (e.g. 0.5ms or 500us) is each node's one-way latency on its way out, so a round trip
# between two nodes takes twice that. Without sch_netem the nodes queue what leaves eth0 to
# link_delay (iptables NFQUEUE; default bazel-bin/scripts/link_delay, built with
# bazel build -c opt //scripts:link_delay).
# --rto_min sets TCP's minimum retransmission timeout on the nodes' route (Linux's default is
# 200 ms) and turns delayed ACKs off there (quickack), as datacenter hosts often do: a delayed
# ACK (up to 40 ms) enters TCP's RTT estimate, which then sets the timeout far above rto_min.
# --rto_max caps the timeout as it backs off (net.ipv4.tcp_rto_max_ms in each node, Linux 6.15
# and later; Linux's cap is 120 s), raising tcp_retries2 (up to 255) so that Linux does not give
# up on a connection much sooner than its default 15 minutes. Both matter under heavy loss: a
# segment lost 8 times in a row waits 255 timeouts, and with a timeout of 300 ms (srtt + 4
# rttvar after one lost handshake ACK or a few delayed ACKs) that is 77 s, past a job's
# collective timeout.

rate="" delay="" loss="" rto_min="" rto_max="" link_delay="bazel-bin/scripts/link_delay"
delay_pids=()
delay_how=""

# Takes option $1 with value $2 when it is one of the network's; fails otherwise.
net_option() {
  case "$1" in
    --rate) rate="$2" ;;
    --delay) delay="$2" ;;
    --loss) loss="$2" ;;
    --rto_min) rto_min="$2" ;;
    --rto_max) rto_max="$2" ;;
    --link_delay) link_delay="$2" ;;
    *) return 1 ;;
  esac
}

# Checks the network's options and tools; names this run's namespaces, bridge and subnet.
net_check() {
  [[ "$nodes" =~ ^[0-9]+$ ]] && ((nodes >= 1 && nodes <= 200)) || { echo "$prog: --nodes must be 1..200, got '$nodes'" >&2; exit 2; }
  if [ -n "$loss" ]; then
    [[ "$loss" =~ ^([0-9]{1,2})%?$ ]] || { echo "$prog: --loss must be a whole percentage 0..99 (e.g. 30%), got '$loss'" >&2; exit 2; }
    loss_percent="${BASH_REMATCH[1]}"
    command -v nft >/dev/null || { echo "$prog: --loss needs 'nft' (nftables; scripts/setup.sh installs it)" >&2; exit 2; }
  fi
  if [ -n "$rto_max" ]; then
    [[ "$rto_max" =~ ^([0-9]+)ms$ ]] && ((BASH_REMATCH[1] >= 1)) || { echo "$prog: --rto_max must be a whole number of ms (e.g. 1000ms), got '$rto_max'" >&2; exit 2; }
    rto_max_ms="${BASH_REMATCH[1]}"
    # Linux gives up on a connection (ETIMEDOUT) once a loss episode has lasted as long as
    # tcp_retries2 (15) timeouts backing off from 200 ms up to the cap: about 15 minutes with the
    # 120 s cap, 14 s with a 1 s one, which heavy loss on a busy connection reaches while TCP still
    # makes progress. Each capped timeout gets one more retry, up to Linux's limit of 255: 15
    # minutes again, or with a cap below 3.6 s about 255 capped timeouts (4 minutes for 1 s).
    retries2=$((15 + 924600 / rto_max_ms))
    ((retries2 <= 255)) || retries2=255
    if [ ! -e /proc/sys/net/ipv4/tcp_rto_max_ms ]; then
      echo "$prog: note: this kernel ($(uname -r)) has no net.ipv4.tcp_rto_max_ms (Linux 6.15 and later); --rto_max ignored, TCP's timeout backs off up to 120 s" >&2
      rto_max=""
    fi
  fi
  if [ -n "$delay" ]; then
    [[ "$delay" =~ ^([0-9]+(\.[0-9]+)?)(ms|us)$ ]] || { echo "$prog: --delay must be a time in ms or us (e.g. 0.5ms, 500us), got '$delay'" >&2; exit 2; }
    delay_us=$(awk -v n="${BASH_REMATCH[1]}" -v unit="${BASH_REMATCH[3]}" 'BEGIN { print (unit == "ms" ? n * 1000 : n) }')
  fi
  command -v ip >/dev/null || { echo "$prog: 'ip' (iproute2) is missing" >&2; exit 2; }
  [ ! -x "$link_delay" ] || link_delay=$(realpath "$link_delay")
  # Names unique to this run (interface names have at most 15 characters), and a subnet from the PID.
  tag="td$(($$ % 100000))"
  subnet="10.$((200 + $$ % 50)).$(($$ / 50 % 250)).0"
  base="${subnet%.0}"
  bridge="${tag}br"
}

# Removes every namespace (and what still runs in it), the bridge and the link_delay processes.
net_down() {
  for pid in "${delay_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for ((i = 0; i < nodes; i++)); do
    ip netns pids "${tag}n$i" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "${tag}n$i" 2>/dev/null || true
  done
  for pid in "${delay_pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  ip link del "$bridge" 2>/dev/null || true
}

# Node $1's shaping, on its way out (netem or link_delay for the delay, tbf for the rate) and in (loss).
net_shape() {
  local i="$1" ns="${tag}n$1" delay_by_netem=""
  [ -z "$rto_min" ] || ip -n "$ns" route replace "$subnet/24" dev eth0 rto_min "$rto_min" quickack 1
  [ -z "$rto_max" ] || ip netns exec "$ns" sysctl -qw net.ipv4.tcp_rto_max_ms="$rto_max_ms" net.ipv4.tcp_retries2="$retries2"
  if [ -n "$delay" ] && ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "${delay_us}us" 2>/dev/null; then
    delay_by_netem=1 delay_how="netem"
    [ -z "$rate" ] || ip netns exec "$ns" tc qdisc add dev eth0 parent 1: handle 2: tbf rate "$rate" burst 256kb latency 100ms
  elif [ -n "$rate" ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
  fi
  if [ -n "$delay" ] && [ -z "$delay_by_netem" ]; then
    [ -x "$link_delay" ] || { echo "$prog: no netem here, and no link_delay at $link_delay for --delay (bazel build -c opt //scripts:link_delay, or --link_delay PATH)" >&2; exit 3; }
    command -v iptables >/dev/null || { echo "$prog: no netem here, and --delay without it needs 'iptables' (scripts/setup.sh installs it)" >&2; exit 3; }
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
    grep -q "holding" "$logs/link_delay$i.log" || { echo "$prog: node $i's link_delay did not start: $(cat "$logs/link_delay$i.log")" >&2; exit 3; }
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
}

# The bridge and the nodes: namespace ${tag}n<i>, address $base.<i + 1>, shaped.
net_up() {
  if ! ip netns add "${tag}n0" 2>"$logs/netns.err"; then
    echo "$prog: cannot create network namespaces ($(cat "$logs/netns.err")); run as root" >&2
    exit 3
  fi
  ip link add "$bridge" type bridge
  ip link set "$bridge" up
  for ((i = 0; i < nodes; i++)); do
    local ns="${tag}n$i"
    ((i == 0)) || ip netns add "$ns"
    ip link add "${tag}h$i" type veth peer name "${tag}c$i"
    ip link set "${tag}h$i" master "$bridge" up
    ip link set "${tag}c$i" netns "$ns"
    ip -n "$ns" link set "${tag}c$i" name eth0
    ip -n "$ns" addr add "$base.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    net_shape "$i"
  done
}

# The shaping as it was announced ("unshaped", or rate, delay, loss, timeouts).
net_description() {
  echo "${rate:-unshaped}${delay:+, delay $delay ($delay_how)}${loss:+, loss $loss}${rto_min:+, rto_min $rto_min}${rto_max:+, rto_max $rto_max}"
}

# What each node's link_delay measured and how many packets each node's lossy link dropped.
net_report() {
  for ((i = 0; i < ${#delay_pids[@]}; i++)); do
    kill -TERM "${delay_pids[$i]}" 2>/dev/null || true
    wait "${delay_pids[$i]}" 2>/dev/null || true
    echo "$prog: node $i's $(grep "held" "$logs/link_delay$i.log" || echo "link_delay printed no summary")"
  done
  if [ -n "$loss" ]; then
    for ((i = 0; i < nodes; i++)); do
      dropped=$(ip netns exec "${tag}n$i" nft list chain inet sim_cluster lossy_link | grep -o 'packets [0-9]*' | cut -d' ' -f2)
      echo "$prog: node $i's link dropped ${dropped:-0} arriving packets"
    done
  fi
}

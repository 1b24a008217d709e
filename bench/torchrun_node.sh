#!/usr/bin/env bash
# torchrun in place of launcher/launch on a node of the simulated cluster (scripts/sim_cluster.sh
# --launch bench/torchrun_node.sh --elastic MIN:MAX), for bench/elastic_recovery.sh: the same
# flags reach torchrun (--nnodes, --rdzv_endpoint, --rdzv_id, --nproc_per_node, then
# --launch_args), with its c10d rendezvous; the node whose address is the endpoint hosts the
# store (rdzv_conf is_host). torchrun tells the workers its host name as MASTER_ADDR, so the
# node gets a host name of its own, its address (a UTS namespace), and gloo uses eth0.
set -euo pipefail
# The node's address: its eth0's (a node of scripts/sim_cluster.sh has that one interface).
address="$(ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1)"
[ -n "$address" ] || { echo "torchrun_node.sh: no IPv4 address on eth0 (run it through scripts/sim_cluster.sh)" >&2; exit 2; }
endpoint=""
for ((i = 1; i < $#; i++)); do
  if [ "${!i}" = "--rdzv_endpoint" ]; then j=$((i + 1)); endpoint="${!j}"; fi
done
is_host=0
[ "${endpoint%:*}" != "$address" ] || is_host=1
export GLOO_SOCKET_IFNAME=eth0
# --redirects 1 --tee 1 (the workers' stdout to a file in a temporary folder and, as without
# them, to the console): Debian's torch 1.13 under Python 3.11 reads the default "0", and "3",
# as None (IntFlag no longer iterates its zero and composite members) and cannot start workers.
exec unshare --uts bash -c 'hostname "$1"; shift; exec "$@"' node "$address" \
  /usr/bin/python3 -m torch.distributed.run --rdzv_backend c10d \
  --rdzv_conf "is_host=$is_host,last_call_timeout=2,join_timeout=30" --redirects 1 --tee 1 "$@"

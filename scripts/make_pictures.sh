#!/usr/bin/env bash
# Makes the pictures of docs/ from real runs on this machine (-c opt build, 2 ranks under the
# launcher, /usr/bin/python3 with matplotlib; scripts/setup.sh installs everything):
#   docs/timeline.png  one DDP iteration on 2 ranks: backward, each bucket's allreduce, finalize
#                      (an MLP 64-1024-1024-1024-1024-10 on the digits, global batch 512, 4 buckets)
#   docs/timeline.json the merged trace it is drawn from, its last 8 iterations (open it in
#                      ui.perfetto.dev)
#   docs/loss.png      the digits MLP's training loss: one process, 2 ranks and 4 ranks with DDP,
#                      2 ranks reducing wrongly on purpose, and each run's difference from one process
#   docs/rebuild.png   why buckets are rebuilt: examples/ddp_rebuild's first iteration and a later one
#   docs/timeline_cnn.png, docs/conv_im2col.png, docs/timeline_fsdp.png: see below
#   docs/fsdp_memory.png: per-rank memory over one step under DDP, ZeRO-1 and FSDP, drawn from
#                      bench/fsdp_memory.sh's measurement (docs/fsdp_memory.txt)
#   docs/data_parallel.png, docs/ring_bandwidth.png, docs/bucket_sweep.png: drawn from the
#                      measurements committed beside them (bench/data_parallel_compare.sh,
#                      bench/ring_bandwidth.sh, bench/bucket_sweep.sh wrote them)
# Each picture is recorded in docs/pictures.json with this script's and its inputs' hashes
# (scripts/picture_manifest.py); tests/docs:pictures_test fails when one is stale.
# The pages quote a few figures read off these traces (docs/ddp.md: which allreduces are still
# running when backward ends, SyncBatchNorm's collective times; README.md likewise): check them
# against the new traces when the pictures are made again.
# Usage: bash scripts/make_pictures.sh   (takes about a minute)
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build -c opt //launcher:launch //examples:train //examples:ddp_rebuild
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
launch=bazel-bin/launcher/launch
train=bazel-bin/examples/train

# The timeline: layers wide enough that backward takes longer than one allreduce.
"$launch" --nproc_per_node 2 -- "$train" --dataset digits --widths 64,1024,1024,1024,1024,10 --batch 512 \
  --bucket_cap_mb 2 --steps 60 --log_every 60 --stats --timeline "$work/tl"
/usr/bin/python3 scripts/merge_timelines.py "$work/tl" -o docs/timeline.json --last 8
/usr/bin/python3 scripts/plot_timeline.py docs/timeline.json -o docs/timeline.png \
  --title "One DDP iteration on 2 ranks (MLP 64-1024x4-10, 4 buckets): allreduces overlap backward"

# Why the buckets are rebuilt: the first iteration of a model that registers its first layer
# last (buckets wait for the last gradient), above an iteration after the rebuild.
TINYDDP_DDP_TIMELINE="$work/rebuild" bazel-bin/examples/ddp_rebuild
/usr/bin/python3 scripts/merge_timelines.py "$work/rebuild" -o docs/rebuild.json
/usr/bin/python3 scripts/plot_timeline.py docs/rebuild.json -o docs/rebuild.png --iteration 0 5 \
  --title "Why DDP rebuilds its buckets (examples/ddp_rebuild on 2 ranks: a model that registers its first layer last)" \
  --panel_titles "iteration 0: buckets in reverse registration order; bucket 0 waits for fc1, the last gradient" \
  "iteration 5: buckets rebuilt in the order the gradients came; each launches while backward runs"

# The loss curves: the digits MLP (train's default model) with the main job's data and
# settings, on 1, 2 and 4 processes.
args=(--dataset digits --steps 1000 --lr 0.05 --momentum 0.9 --log_every 1000)
"$train" "${args[@]}" --metrics "$work/one.csv"
"$launch" --nproc_per_node 2 -- "$train" "${args[@]}" --metrics "$work/two.csv"
"$launch" --nproc_per_node 4 -- "$train" "${args[@]}" --metrics "$work/four.csv"
# Beside them, two reductions wrong on purpose: the ranks' gradients summed, and not sent at all.
"$launch" --nproc_per_node 2 -- "$train" "${args[@]}" --comm_hook sum --metrics "$work/sum.csv"
"$launch" --nproc_per_node 2 -- "$train" "${args[@]}" --comm_hook none --metrics "$work/none.csv"
/usr/bin/python3 scripts/plot_loss.py "one process=$work/one.csv" "2 ranks (DDP)=$work/two.csv" \
  "4 ranks (DDP)=$work/four.csv" --wrong "2 ranks, gradients summed, not averaged=$work/sum.csv" \
  "2 ranks, gradients not sent=$work/none.csv" -o docs/loss.png \
  --title "Digits MLP 64-128-10, global batch 64: one curve on 1, 2 and 4 processes, as long as DDP averages"

# docs/ddp.md's CNN iteration with SyncBatchNorm: its collectives on a row of their own.
"$launch" --nproc_per_node 2 -- "$train" --model cnn --dataset digits --sync_bn --batch 256 --steps 40 \
  --log_every 40 --timeline "$work/cnn"
/usr/bin/python3 scripts/merge_timelines.py "$work/cnn" -o docs/timeline_cnn.json --last 8
/usr/bin/python3 scripts/plot_timeline.py docs/timeline_cnn.json -o docs/timeline_cnn.png \
  --title "Digits CNN with SyncBatchNorm on 2 ranks: its allgathers in forward, allreduces in backward"

# docs/ddp.md's fully_shard iteration: the timeline's MLP with each Linear a unit, its gathers
# and reduce-scatters on rows of their own.
"$launch" --nproc_per_node 2 -- "$train" --dataset digits --widths 64,1024,1024,1024,1024,10 --batch 512 --fsdp \
  --steps 40 --log_every 40 --timeline "$work/fsdp"
/usr/bin/python3 scripts/merge_timelines.py "$work/fsdp" -o docs/timeline_fsdp.json --last 8
/usr/bin/python3 scripts/plot_fsdp_timeline.py docs/timeline_fsdp.json -o docs/timeline_fsdp.png \
  --title "One fully_shard iteration on 2 ranks (MLP 64-1024x4-10, each Linear a unit): gathers prefetched"

# docs/tensor.md's picture of conv2d as im2col + GEMM (numbers computed by the script itself).
/usr/bin/python3 scripts/plot_im2col.py -o docs/conv_im2col.png

# Pictures of measurements that need a quiet machine, or root for the simulated cluster: drawn
# from the lines their bench scripts wrote into docs/*.txt (each file's first line names its
# command; run it again to measure again).
/usr/bin/python3 scripts/plot_data_parallel.py docs/data_parallel_results.txt -o docs/data_parallel.png
/usr/bin/python3 scripts/plot_ring.py docs/ring_bandwidth.txt -o docs/ring_bandwidth.png
/usr/bin/python3 scripts/plot_bucket_sweep.py docs/bucket_sweep.txt -o docs/bucket_sweep.png
/usr/bin/python3 scripts/plot_memory.py docs/fsdp_memory.txt -o docs/fsdp_memory.png

# The record of what made each picture, which tests/docs:pictures_test checks. The second
# argument says what a picture shows (its model), which the text around it on every page that
# shows it must name ("" for none).
record() {
  local shows=()
  [[ -n "$2" ]] && shows=(--shows "$2")
  /usr/bin/python3 scripts/picture_manifest.py record "$1" --made_by "bash scripts/make_pictures.sh" "${shows[@]}" \
    --inputs scripts/make_pictures.sh "${@:3}"
}
record docs/timeline.png "64-1024x4-10" docs/timeline.json scripts/merge_timelines.py scripts/plot_timeline.py
record docs/rebuild.png "ddp_rebuild" docs/rebuild.json examples/ddp_rebuild.cc scripts/merge_timelines.py \
  scripts/plot_timeline.py
record docs/loss.png "64-128-10" scripts/plot_loss.py
record docs/timeline_cnn.png "CNN" docs/timeline_cnn.json scripts/merge_timelines.py scripts/plot_timeline.py
record docs/conv_im2col.png "" scripts/plot_im2col.py
record docs/data_parallel.png "784-1024-1024-10" docs/data_parallel_results.txt scripts/plot_data_parallel.py
record docs/ring_bandwidth.png "" docs/ring_bandwidth.txt scripts/plot_ring.py scripts/bench_lines.py
record docs/bucket_sweep.png "784-1024-1024-10" docs/bucket_sweep.txt scripts/plot_bucket_sweep.py \
  scripts/bench_lines.py
record docs/timeline_fsdp.png "64-1024x4-10" docs/timeline_fsdp.json scripts/merge_timelines.py \
  scripts/plot_fsdp_timeline.py scripts/plot_timeline.py
record docs/fsdp_memory.png "1024-4096-4096-1024" docs/fsdp_memory.txt scripts/plot_memory.py

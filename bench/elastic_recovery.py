#!/usr/bin/python3
"""How long an elastic job takes to train again after it loses a node, tinyddp's launcher
beside torchrun, on the simulated cluster (scripts/sim_cluster.sh --elastic 2:3; needs root).

Each run: 3 nodes x 1 rank train the elastic tests' job (an MLP 32-64-4, global batch 24, SGD,
a checkpoint every 100 steps, progress every 20 steps, collectives timing out after 10 s):
examples/train under launcher/launch, or bench/torch_elastic_train.py under torchrun's c10d
rendezvous (bench/torchrun_node.sh), both with --monitor_interval 0.5 and --max_restarts 2,
and a last call of 2 s. Once rank 0 has logged step 1000, node 2 is lost: its link is cut
(its veth on the bridge goes down) or it is killed (every process in its namespace). Every line
the nodes print is stamped with the time since the job started, as it arrives.

Prints, per run, "RESULT impl=<tinyddp|torchrun> fault=<cut|kill> recovery_s=<fault to the
first progress line after the resume> resumed_from=<step> lost_steps=<steps redone>" and writes
every run's stamped lines to one CSV (impl,fault,seconds,node,line) for plot_elastic_timeline.py.

    sudo /usr/bin/python3 bench/elastic_recovery.py [--faults cut,kill] [--out FILE.csv]
"""
import argparse
import csv
import os
import re
import subprocess
import tempfile
import threading
import time

TRAIN_FLAGS = ["--steps", "3000", "--log_every", "20", "--timeout", "10"]
JOBS = {
    "tinyddp": ("bazel-bin/launcher/launch",
                "--rdzv_last_call 2 --monitor_interval 0.5 --rdzv_timeout 10 --grace_period 2 --max_restarts 2",
                ["bazel-bin/examples/train", "--widths", "32,64,4", "--batch", "24", "--checkpoint_every", "100",
                 "--resume", "--checkpoint", "{checkpoint}"] + TRAIN_FLAGS),
    "torchrun": ("bench/torchrun_node.sh", "--monitor_interval 0.5 --max_restarts 2",
                 ["bench/torch_elastic_train.py", "--checkpoint", "{checkpoint}"] + TRAIN_FLAGS),
}
FAULTS = {"cut": "ip link set {tag}h2 down", "kill": "ip netns pids {tag}n2 | xargs -r kill -KILL"}
STEP = re.compile(r"step +(\d+)/\d+")
RESUMED = re.compile(r"resuming from \S+ after (\d+) steps")


def run(impl, fault, port, work):
    """One job with one fault: the stamped lines [(seconds, node, line)] and the fault's time."""
    launch, launch_args, program = JOBS[impl]
    logs = os.path.join(work, f"{impl}_{fault}_logs")
    checkpoint = os.path.join(work, f"{impl}_{fault}.ckpt")
    program = [p.format(checkpoint=checkpoint) for p in program]
    command = ["bash", "scripts/sim_cluster.sh", "--nodes", "3", "--elastic", "2:3", "--logs", logs, "--port",
               str(port), "--launch", launch, "--launch_args", launch_args, "--"] + program
    start = time.monotonic()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    announced = []
    reader = threading.Thread(target=lambda: announced.extend(job.stdout), daemon=True)
    reader.start()
    lines, offsets, fault_at = [], {}, None
    while True:
        ended = job.poll() is not None
        for node in range(3):
            path = os.path.join(logs, f"node{node}.log")
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                f.seek(offsets.get(node, 0))
                text = f.read()
            complete = text[:text.rfind("\n") + 1]
            offsets[node] = offsets.get(node, 0) + len(complete.encode("utf-8", errors="replace"))
            now = time.monotonic() - start
            for line in complete.splitlines():
                lines.append((now, node, line))
                m = STEP.search(line)
                if fault_at is None and m and int(m.group(1)) >= 1000:
                    tag = re.search(r"bridge (td\d+)br", "".join(announced)).group(1)
                    subprocess.run(FAULTS[fault].format(tag=tag), shell=True, check=True)
                    fault_at = time.monotonic() - start
                    lines.append((fault_at, 2, f"FAULT {fault}"))
        if ended or time.monotonic() - start > 240:
            break
        time.sleep(0.02)
    if job.poll() is None:
        job.terminate()
        job.wait(30)
    return lines, fault_at


def summary(lines, fault_at):
    """(recovery seconds, resumed step, steps lost): the fault to the survivors' first progress
    line after they resumed; the checkpoint's step; the steps done before the fault and lost."""
    before = max((int(m.group(1)) for t, _, line in lines if t <= fault_at and (m := STEP.search(line))), default=0)
    resumed = next(((t, int(m.group(1))) for t, _, line in lines if t > fault_at and (m := RESUMED.search(line))), None)
    if resumed is None:
        return None, None, None
    again = next((t for t, _, line in lines if t > resumed[0] and STEP.search(line)), None)
    return (again - fault_at if again else None), resumed[1], before - resumed[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults", default="cut,kill")
    parser.add_argument("--impls", default="tinyddp,torchrun")
    parser.add_argument("--out", default=None, help="the CSV of stamped lines (default: one in a temporary folder)")
    args = parser.parse_args()
    out = args.out or os.path.join(tempfile.mkdtemp(prefix="elastic_recovery."), "elastic_recovery.csv")
    rows = [("impl", "fault", "seconds", "node", "line")]
    with tempfile.TemporaryDirectory() as work:
        port = 29591
        for fault in args.faults.split(","):
            for impl in args.impls.split(","):
                port += 1
                lines, fault_at = run(impl, fault, port, work)
                rows += [(impl, fault, f"{t:.3f}", n, line) for t, n, line in lines]
                if fault_at is None:
                    print(f"RESULT impl={impl} fault={fault} error=the job never reached step 1000")
                    continue
                recovery, resumed, lost = summary(lines, fault_at)
                shown = f"{recovery:.2f}" if recovery is not None else "none"
                print(f"RESULT impl={impl} fault={fault} recovery_s={shown} resumed_from={resumed} lost_steps={lost}",
                      flush=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    print(f"stamped lines in {out}")


if __name__ == "__main__":
    main()

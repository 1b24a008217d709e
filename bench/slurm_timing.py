#!/usr/bin/python3
"""How long a Slurm job takes from sbatch to its first training step, and from a preemption
signal to training again after the requeue: tinyddp's train.sbatch (srun starts every rank),
its train_elastic.sbatch (srun starts launch on each node) and PyTorch 1.13's torchrun under
srun (bench/torchrun_slurm.sbatch), on the simulated Slurm cluster (needs root):

    sudo bash scripts/sim_slurm.sh --nodes 2 -- /usr/bin/python3 bench/slurm_timing.py [--repeat 3]

Each run: 2 nodes x 2 ranks train the elastic tests' job (an MLP 32-64-4, global batch 24,
SGD, progress every 10 steps, a checkpoint every 100). Once rank 0 has logged step 300, the
job's tasks get the signal (scancel --signal); the ranks stop after a step, checkpoint, the
job is requeued (by the batch script for tinyddp, by rank 0 for PyTorch, as PyTorch
Lightning does), and resumes. Times are read by polling the job's output every 10 ms. SIGUSR1
is tinyddp's only: torchrun dies of it (it has no handler). The runs alternate; prints one
"RESULT impl=... signal=... submit_to_first_step_s=... signal_to_training_again_s=..." per
run and the medians.
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = ["--batch", "24", "--steps", "2000", "--log_every", "10", "--checkpoint_every", "100", "--timeout", "10"]
IMPLS = {
    "tinyddp": ("examples/slurm/train.sbatch", ["--nodes", "2", "--ntasks-per-node", "2", "--cpus-per-task", "1"],
                {"TINYDDP_PROGRAM": f"{ROOT}/bazel-bin/examples/train"}, ["--widths", "32,64,4"]),
    "tinyddp_launch": ("examples/slurm/train_elastic.sbatch",
                       ["--nodes", "2", "--ntasks-per-node", "1", "--cpus-per-task", "2"],
                       {"TINYDDP_PROGRAM": f"{ROOT}/bazel-bin/examples/train",
                        "TINYDDP_LAUNCH": f"{ROOT}/bazel-bin/launcher/launch", "TINYDDP_NPROC_PER_NODE": "2"},
                       ["--widths", "32,64,4"]),
    "torchrun": ("bench/torchrun_slurm.sbatch", ["--nodes", "2", "--ntasks-per-node", "1", "--cpus-per-task", "2"],
                 {"TORCH_TRAIN": f"{ROOT}/bench/torch_elastic_train.py", "NPROC": "2"}, []),
}
STEP = re.compile(r"step +(\d+)/\d+")
RESUMED = re.compile(r"resuming from \S+ after (\d+) steps")


def wait_for(path, found, limit_s=180):
    """Polls `path` every 10 ms until found(text) is true; returns the time it was."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        try:
            with open(path) as f:
                if found(f.read()):
                    return time.time()
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    raise SystemExit(f"slurm_timing: gave up waiting on {path}:\n" + open(path).read()[-3000:])


def one_run(impl, signal, work):
    script, options, env, extra = IMPLS[impl]
    out, checkpoint = f"{work}/{impl}_{signal}.out", f"{work}/{impl}_{signal}.ckpt"
    env = dict(os.environ, TINYDDP_CHECKPOINT=checkpoint, **env)
    args = extra + JOB + (["--checkpoint", checkpoint] if impl == "torchrun" else [])
    start = time.time()
    job = subprocess.run(["sbatch", "--parsable", "--chdir", work, "--output", out] + options +
                         [f"{ROOT}/{script}"] + args, env=env, check=True, capture_output=True,
                         text=True).stdout.strip()
    first = wait_for(out, lambda text: STEP.search(text) is not None)
    wait_for(out, lambda text: any(int(m) >= 300 for m in STEP.findall(text)))
    signalled = time.time()
    subprocess.run(["scancel", f"--signal={signal}", job], check=True)

    def trains_again(text):
        resumed = RESUMED.search(text)
        return resumed is not None and STEP.search(text, resumed.end()) is not None

    again = wait_for(out, trains_again)
    subprocess.run(["scancel", job], check=True)
    for _ in range(600):  # bounded: 60 s for the job to go
        if not subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
            break
        time.sleep(0.1)
    time.sleep(1)
    return first - start, again - signalled


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cases = [("tinyddp", "TERM"), ("tinyddp_launch", "TERM"), ("torchrun", "TERM"), ("tinyddp", "USR1"),
             ("tinyddp_launch", "USR1")]
    results = {case: [] for case in cases}
    with tempfile.TemporaryDirectory(prefix="slurm_timing.") as work:
        os.chmod(work, 0o755)
        for repeat in range(args.repeat):
            for impl, signal in cases:
                first, again = one_run(impl, signal, f"{work}")
                os.rename(f"{work}/{impl}_{signal}.out", f"{work}/{impl}_{signal}.{repeat}.out")
                os.remove(f"{work}/{impl}_{signal}.ckpt")
                results[(impl, signal)].append((first, again))
                print(f"RESULT impl={impl} signal={signal} submit_to_first_step_s={first:.2f} "
                      f"signal_to_training_again_s={again:.2f}", flush=True)
    for (impl, signal), values in results.items():
        print(f"MEDIAN impl={impl} signal={signal} submit_to_first_step_s="
              f"{statistics.median(v[0] for v in values):.2f} signal_to_training_again_s="
              f"{statistics.median(v[1] for v in values):.2f} runs={len(values)}")


if __name__ == "__main__":
    main()

"""Benchmark: an ensemble's members trained one after another (each with every core) or side
by side (each with one thread, one core), on this host.

Small recurrent models use two cores poorly, so K one-thread runs at once may train more
tokens per second in all than one run with K threads. Runs the real command (`tablegen train
--config e2e,experiments/e2e_order_planning`, the E2E quality run's 128-unit member) for
--steps steps, first alone with TensorFlow's default threads, then --parallel copies at once
with `TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1` (each pinned to its own core with
`taskset` where there is one), and prints each run's steady-state target tokens/s (the median
of its summaries, the tracing window left out), the sum and the ratio to the lone run. Also
the wall time of the two schedules for the same number of runs, start-up included.

One thread changes the order of float sums, so those members are another draw of the recipe,
not its shipped weights bit for bit.

    .venv/bin/python benchmarks/parallel_members.py [--steps 600] [--parallel 2] [--hidden-size 128]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # this process only reads the summaries
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from multi_worker_throughput import steady_tokens_per_second  # noqa: E402
from train_throughput import ensure_data  # noqa: E402  (prepares E2E train when missing)

ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def command(train_dir: str, out: str, steps: int, hidden_size: int) -> list:
    sets = [f"model.hidden_size={hidden_size}", "train.eval_every_steps=100000",
            "train.checkpoint_every_steps=100000", "train.log_every_steps=50"]
    return [sys.executable, "-m", "tablegen_cli.main", "train", "--config", "e2e,experiments/e2e_order_planning",
            "--train", train_dir, "--out", out, "--max-steps", str(steps), "--no-progress",
            *[a for kv in sets for a in ("--set", kv)]]


def start(args: list, core=None, env=None) -> subprocess.Popen:
    if core is not None and shutil.which("taskset"):
        args = ["taskset", "-c", str(core), *args]
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=sys.stderr,
                            env={**os.environ, **(env or {})})


def wait_all(processes) -> None:
    codes = [p.wait() for p in processes]
    if any(codes):
        raise SystemExit(f"a training run failed (exit codes {codes})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(ROOT, "runs", "data", "e2e"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--parallel", type=int, default=2, help="runs side by side, one thread each")
    parser.add_argument("--hidden-size", type=int, default=128)
    args = parser.parse_args()
    train_dir = ensure_data(args.data)
    cores = os.cpu_count() or 1
    print(f"E2E train, order planning {args.hidden_size} units (the quality run's member), batch 64, "
          f"{args.steps} steps; {cores} cores; load average before: "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as root:
        began = time.time()
        wait_all([start(command(train_dir, os.path.join(root, "alone"), args.steps, args.hidden_size))])
        alone_wall = time.time() - began
        alone = steady_tokens_per_second(os.path.join(root, "alone"))
        outs = [os.path.join(root, f"side{i}") for i in range(args.parallel)]
        began = time.time()
        wait_all([start(command(train_dir, out, args.steps, args.hidden_size),
                        core=i % cores if args.parallel <= cores else None, env=ONE_THREAD)
                  for i, out in enumerate(outs)])
        side_wall = time.time() - began
        side = [steady_tokens_per_second(out) for out in outs]
    print(f"alone, default threads: {alone:,.0f} target tokens/s, wall {alone_wall:.0f}s")
    for i, rate in enumerate(side):
        print(f"side by side, run {i + 1} of {args.parallel}, one thread: {rate:,.0f} target tokens/s")
    print(f"side by side in all: {sum(side):,.0f} target tokens/s (x{sum(side) / alone:.2f} the lone run); "
          f"{args.parallel} runs in {side_wall:.0f}s against {args.parallel} x {alone_wall:.0f}s "
          f"= {args.parallel * alone_wall:.0f}s one after another (x{args.parallel * alone_wall / side_wall:.2f})")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)

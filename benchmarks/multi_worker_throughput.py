"""Benchmark: training tokens/s with 1 vs N `tablegen train` workers on this host.

Runs the real command (`tablegen train --workers N`, MultiWorkerMirroredStrategy over
loopback) on the E2E training records at a small size and the same global batch, and
reports the steady-state global target tokens/s: the median of the chief's
`tokens_per_second` summaries (one per train.log_every_steps window), the first window
(tracing) left out. Also prints the load average: the machine may be shared.

    .venv/bin/python benchmarks/multi_worker_throughput.py [--steps 300] [--workers 1 2]
"""

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # this process only reads the summaries
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from train_throughput import ensure_data  # noqa: E402  (prepares E2E train when missing)

SIZE = ["model.name=encdec-copy", "model.hidden_size=128", "model.word_dim=128", "model.value_dim=128",
        "model.num_layers=1", "data.batch_size=64", "train.log_every_steps=25", "train.checkpoint_every_steps=100000"]


def steady_tokens_per_second(out: str) -> float:
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")

    rates = []
    for path in sorted(glob.glob(os.path.join(out, "logs", "train", "events.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            rates += [(event.step, float(tf.make_ndarray(v.tensor))) for v in event.summary.value
                      if v.tag == "tokens_per_second"]
    rates = [rate for _, rate in sorted(rates)[1:]]  # the first window includes tracing
    return statistics.median(rates)


def run(train_dir: str, workers: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "tablegen_cli.main", "train", "--config", "e2e", "--train", train_dir,
                   "--out", out, "--max-steps", str(steps), "--no-progress", "--workers", str(workers)]
        start = time.time()
        subprocess.run(command + [a for kv in SIZE for a in ("--set", kv)], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=sys.stderr)
        return {"workers": workers, "tokens_per_second": round(steady_tokens_per_second(out)),
                "wall_seconds": round(time.time() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(ROOT, "runs", "data", "e2e"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="worker counts in the order run, e.g. 1 2 1 2 to see the noise of a shared machine")
    args = parser.parse_args()
    train_dir = ensure_data(args.data)
    print(f"E2E train, encdec-copy 1x128, global batch 64, {args.steps} steps; {os.cpu_count()} cores; "
          f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results = [run(train_dir, workers, args.steps) for workers in args.workers]
    base = results[0]["tokens_per_second"]
    for result in results:
        print(f"{result['workers']} worker(s): {result['tokens_per_second']:,} target tokens/s "
              f"(x{result['tokens_per_second'] / base:.2f}), wall {result['wall_seconds']}s")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)

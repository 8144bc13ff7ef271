"""Benchmark: `tablegen prepare --format wikibio` throughput on >= 200,000 tables.

Builds a WikiBio-format corpus by repeating the shared subset, runs the real
Beam job (DirectRunner, 2 workers) in a subprocess, prints tables/s end to end
(process start to exit) and the peak resident memory of the largest process.

    .venv/bin/python benchmarks/prepare_throughput.py [--tables 200000]
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "data", "wikibio", "train")


def build_input(directory: str, tables: int) -> int:
    with open(os.path.join(SHARED, "train.box")) as f:
        boxes = f.read().splitlines()
    with open(os.path.join(SHARED, "train.nb")) as f:
        counts = [int(x) for x in f.read().split()]
    with open(os.path.join(SHARED, "train.sent")) as f:
        sentences = f.read().splitlines()
    repeats = -(-tables // len(boxes))
    with open(os.path.join(directory, "bench.box"), "w") as box, open(
        os.path.join(directory, "bench.nb"), "w"
    ) as nb, open(os.path.join(directory, "bench.sent"), "w") as sent:
        for _ in range(repeats):
            box.write("\n".join(boxes) + "\n")
            nb.write("\n".join(map(str, counts)) + "\n")
            sent.write("\n".join(sentences) + "\n")
    return repeats * len(boxes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=200_000)
    parser.add_argument("beam_args", nargs="*", help="extra Beam options, e.g. --direct_running_mode=in_memory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        input_dir = os.path.join(work, "input")
        os.makedirs(input_dir)
        total = build_input(input_dir, args.tables)
        command = [
            sys.executable, "-m", "tablegen_cli.main", "prepare", "--format", "wikibio",
            "--input", input_dir, "--output", os.path.join(work, "out"), "--split", "train",
        ] + args.beam_args
        start = time.time()
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        seconds = time.time() - start
        if result.returncode != 0:
            sys.exit(f"prepare failed:\n{result.stderr[-3000:]}")
        summary = [line for line in result.stdout.splitlines() if line.startswith("read ")]
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"tables: {total}")
        print(f"job: {summary[0] if summary else result.stdout[-500:]}")
        print(f"wall time: {seconds:.1f} s (end to end, including interpreter and TF start-up)")
        print(f"throughput: {total / seconds:.0f} tables/s (target >= 3000)")
        print(f"peak memory (largest process RSS): {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()

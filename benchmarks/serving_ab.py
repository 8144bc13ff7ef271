"""A/B of two `tablegen serve` variants under gRPC load: alternated runs, every pair printed.

Each variant is a code tree (`--before-root`, e.g. a `git worktree` of the commit before a
change; default: this checkout) plus server flags (`--before-args`, `--after-args`). Every
run starts a fresh server on the same exported model, waits for its background warm-up,
warms up for 2 s, then measures each concurrency level (closed-loop clients, one table per
request, as benchmarks/serving_load.py) and the server's CPU by thread group (from /proc).
The variants alternate, so the host's drift reaches both alike; the medians and every
pair are printed at the end (this 2-core host has drifted 2x between consecutive runs).

    git worktree add /tmp/before HEAD~1
    .venv/bin/python benchmarks/serving_ab.py --model-base-path B --model-name N \\
        --before-root /tmp/before [--pairs 4] [--concurrency 3,16] [--seconds 10]
    .venv/bin/python benchmarks/serving_ab.py --model-base-path B --model-name N \\
        --before-args="--batch-timeout-micros 2000" --after-args="--batch-timeout-micros 10000"
"""

import argparse
import collections
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
WARM_SECONDS = 2.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-base-path", required=True, help="directory holding NAME/<version>/")
    parser.add_argument("--model-name", default="tablegen")
    parser.add_argument("--before-root", default=ROOT, help="code tree of variant A (default: this one)")
    parser.add_argument("--after-root", default=ROOT, help="code tree of variant B (default: this one)")
    parser.add_argument("--before-args", default="", help="extra `tablegen serve` flags of variant A")
    parser.add_argument("--after-args", default="", help="extra `tablegen serve` flags of variant B")
    parser.add_argument("--pairs", type=int, default=4, help="alternated runs of each variant")
    parser.add_argument("--concurrency", default="16", help="levels, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement time per level")
    parser.add_argument("--background-limit", type=float, default=300.0,
                        help="longest wait for the server's background warm-up")
    return parser.parse_args()


def thread_cpu(pid: int) -> collections.Counter:
    """CPU seconds of each thread group of `pid` (thread names without their numbers)."""
    ticks, seconds = os.sysconf("SC_CLK_TCK"), collections.Counter()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as handle:
                name = handle.read().strip().rstrip("0123456789_-")
            with open(f"/proc/{pid}/task/{task}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        seconds[name] += (int(fields[11]) + int(fields[12])) / ticks
    return seconds


def one_run(root: str, server_args: str, args, levels, tables) -> dict:
    """A fresh server of the code in `root` -> {level: (requests/s, p50 ms, p99 ms, cores)}."""
    import serving_load

    with tempfile.TemporaryDirectory() as scratch:
        log = os.path.join(scratch, "server.log")
        process, address, _ = serving_load.start_server(args.model_base_path, args.model_name, server_args, log,
                                                        root=root)
        try:
            serving_load.wait_for_background_warmup(
                log, serving_load.served_version(args.model_base_path, args.model_name), args.background_limit)
            call = serving_load.grpc_call(address, args.model_name)
            results = {}
            for level in levels:
                serving_load.measure(call, tables, level, WARM_SECONDS)
                before, started = thread_cpu(process.pid), time.perf_counter()
                figures = serving_load.measure(call, tables, level, args.seconds)
                after, elapsed = thread_cpu(process.pid), time.perf_counter() - started
                cores = {name: (after[name] - before.get(name, 0.0)) / elapsed for name in after}
                results[level] = (figures["rps"], figures["p50"], figures["p99"], cores)
            return results
        finally:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def report(runs: dict, levels) -> None:
    print("\nrequests/s per run (alternated), median:")
    for level in levels:
        for key in ("A", "B"):
            rates = [run[level][0] for run in runs[key]]
            print(f"  c{level:<3} {key} {', '.join(f'{r:.0f}' for r in rates)}  median {statistics.median(rates):.1f}")
        pairs = [b[level][0] / a[level][0] for a, b in zip(runs["A"], runs["B"])]
        print(f"  c{level:<3} B/A per pair {', '.join(f'{r:.2f}' for r in pairs)}; "
              f"B ahead in {sum(r > 1 for r in pairs)} of {len(pairs)}")


def main() -> None:
    args = parse_args()
    args.model_base_path = os.path.abspath(args.model_base_path)  # servers run in their code tree
    from serving import testing

    levels = [int(level) for level in args.concurrency.split(",")]
    tables = testing.sample_tables(64)
    variants = {"A": (args.before_root, args.before_args), "B": (args.after_root, args.after_args)}
    for key, (root, flags) in variants.items():
        print(f"{key}: code {root}, flags '{flags}'")
    gc.collect()
    gc.freeze()  # the clients' collections would stall them and count as server latency
    runs = {"A": [], "B": []}
    for pair in range(1, args.pairs + 1):
        for key, (root, flags) in variants.items():
            result = one_run(root, flags, args, levels, tables)
            runs[key].append(result)
            for level, (rate, p50, p99, cores) in result.items():
                busiest = ", ".join(f"{name} {value:.2f}" for name, value in
                                    sorted(cores.items(), key=lambda item: -item[1])[:3])
                print(f"pair {pair} {key} c{level:<3} {rate:7.1f} req/s  p50 {p50:6.1f}  p99 {p99:6.1f} ms  "
                      f"server cores: {busiest}  load {os.getloadavg()[0]:.1f}", flush=True)
    report(runs, levels)


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)

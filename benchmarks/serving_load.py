"""Benchmark: `tablegen serve` latency and throughput vs. calling the SavedModel in-process.

Starts the server in a subprocess (as in production), then at each concurrency
level sends single-table Predict requests over gRPC from that many client
threads, and makes the same calls in-process on the loaded SavedModel. Prints
p50/p99 latency and throughput per level, and checks the targets: server
overhead at concurrency 1 <= 1.2x in-process, and gRPC throughput at
concurrency 16 >= 3x concurrency 1.

    .venv/bin/python benchmarks/serving_load.py                     # runs/e2e/serving/tablegen
    .venv/bin/python benchmarks/serving_load.py --demo              # stand-in decoder model
    .venv/bin/python benchmarks/serving_load.py --model-base-path B --model-name N \
        --tables-file tables.jsonl --server-args="--no-enable-batching"
"""

import argparse
import json
import os
import queue
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-base-path", default=os.path.join(ROOT, "runs", "e2e", "serving"))
    parser.add_argument("--model-name", default="tablegen")
    parser.add_argument("--tables-file", help="JSONL with a 'table' per line (default: samples)")
    parser.add_argument("--demo", nargs="?", const="decoder", choices=["decoder", "tiny"],
                        help="serve a stand-in SavedModel (serving/testing.py) instead: 'decoder' "
                        "(default; ~25 ms per table) or 'tiny' (string ops only: shows the "
                        "fixed per-request cost)")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement time per level")
    parser.add_argument("--server-args", default="", help="extra `tablegen serve` flags")
    return parser.parse_args()


def load_tables(path: str) -> List[str]:
    from serving import testing

    if not path:
        return testing.sample_tables(64)
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [json.dumps({"table": row["table"]}) for row in rows]


def build_demo(directory: str, name: str, kind: str) -> str:
    """'decoder': 60 steps of a 256-wide recurrence plus an 8192-way output
    projection per row (~25 ms for one table on 2 cores), shaped like the real
    decoder: memory-bound at batch 1, so batching pays."""
    from serving import testing

    size = dict(decoder_steps=60, width=256, vocab=8192) if kind == "decoder" else {}
    testing.save_fake_model(os.path.join(directory, name, "1"), **size)
    return directory


def start_server(base: str, name: str, extra: str):
    command = [sys.executable, "-m", "serving.server", "--model-base-path", base,
               "--model-name", name, "--host", "127.0.0.1", "--port", "0", *shlex.split(extra)]
    process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in process.stdout], daemon=True).start()
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line.startswith("tablegen serve: ready"):
            return process, "127.0.0.1:" + line.split("grpc=127.0.0.1:")[1].split()[0]
    process.kill()
    sys.exit("server did not start; run `python -m serving.server ...` by hand to see why")


def measure(call: Callable[[str], None], tables: List[str], concurrency: int,
            seconds: float) -> Dict[str, float]:
    """Closed loop: each thread sends its next request when the previous returns."""
    latencies: List[float] = []
    stop_at = time.perf_counter() + seconds

    def worker(offset: int) -> None:
        index = offset
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            call(tables[index % len(tables)])
            latencies.append(time.perf_counter() - started)
            index += concurrency

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    ms = np.array(latencies) * 1000
    return {"requests": len(ms), "p50": np.percentile(ms, 50), "p99": np.percentile(ms, 99),
            "rps": len(ms) / elapsed}


def in_process_call(base: str, name: str) -> Callable[[str], None]:
    import tensorflow as tf

    from serving.model_manager import ModelManager

    manager = ModelManager(name, os.path.join(base, name))
    manager.poll_once(initial=True)  # the server's own loader (custom ops, latest version)
    with manager.lease() as loaded:
        signature = loaded.signature("serving_default")
    return lambda table: signature.run({"tables": tf.constant([table])})


def grpc_call(address: str, name: str) -> Callable[[str], None]:
    from serving.client import RemoteModel

    local = threading.local()  # one channel per client thread, like separate clients

    def call(table: str) -> None:
        if not hasattr(local, "model"):
            local.model = RemoteModel(address, name, retries=0)
        local.model.generate([table])

    return call


def run_levels(label: str, call, tables, levels, seconds) -> Dict[int, Dict[str, float]]:
    for table in tables[:4]:
        call(table)  # warm up (first calls optimise the graph)
    results = {}
    for level in levels:
        results[level] = measure(call, tables, level, seconds)
        r = results[level]
        print(f"{label:<11} {level:>5} {r['requests']:>9} {r['p50']:>8.2f} {r['p99']:>8.2f} "
              f"{r['rps']:>8.1f}", flush=True)
    return results


def main() -> None:
    args = parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        base = build_demo(scratch, args.model_name, args.demo) if args.demo else args.model_base_path
        if not os.path.isdir(os.path.join(base, args.model_name)):
            sys.exit(f"no model at {base}/{args.model_name}/<version>/; export one or use --demo")
        tables = load_tables(args.tables_file)
        print(f"model {base}/{args.model_name}, {len(tables)} tables, {args.seconds:.0f}s per level")
        print(f"{'mode':<11} {'conc':>5} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8}")
        local = run_levels("in-process", in_process_call(base, args.model_name), tables, levels,
                           args.seconds)
        process, address = start_server(base, args.model_name, args.server_args)
        try:
            remote = run_levels("grpc", grpc_call(address, args.model_name), tables, levels,
                                args.seconds)
        finally:
            process.terminate()
            process.wait(60)
    report(local, remote, levels)


def report(local, remote, levels) -> None:
    first, last = levels[0], levels[-1]
    overhead = remote[first]["p50"] / local[first]["p50"]
    scaling = remote[last]["rps"] / remote[first]["rps"]
    print(f"server overhead at concurrency {first}: {overhead:.2f}x in-process p50 "
          f"(target <= 1.2x): {'met' if overhead <= 1.2 else 'MISSED'}")
    print(f"gRPC throughput at concurrency {last}: {scaling:.2f}x concurrency {first} "
          f"(target >= 3x): {'met' if scaling >= 3 else 'MISSED'}")


if __name__ == "__main__":
    main()

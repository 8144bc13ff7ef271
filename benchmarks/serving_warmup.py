"""Benchmark: where a new version's time goes before it answers (load, each warm-up request).

Loads one SavedModel version the way `tablegen serve` does (serving.model_manager): only
serving_default first, times that load and serving_default's warm-up requests (TF Serving's
assets.extra/tf_serving_warmup_requests): their sum is what a push waits for before its
first answer; then the load of the whole SavedModel and the other warm-up requests (in the
background in the server); then every request a second time (the steady cost: what is
left above it on the first pass is graph optimisation and XLA compilation). `--whole`
loads the whole SavedModel first (`tablegen serve --no-background-warmup`, TF Serving);
Grappler is off unless `--graph-optimization`, as in the server.
Prints one line per step with the 1-minute load average.

    .venv/bin/python benchmarks/serving_warmup.py /tmp/serving/tablegen/1 [--whole]
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version_dir", help="BASE/NAME/VERSION of a SavedModel with a warm-up file")
    parser.add_argument("--whole", action="store_true", help="load the whole SavedModel first")
    parser.add_argument("--graph-optimization", action=argparse.BooleanOptionalAction, default=False,
                        help="Grappler on, as `tablegen serve --graph-optimization` (default: off, as the server)")
    args = parser.parse_args()

    from serving.model_manager import FIRST_WARMUP_SIGNATURES, LoadedVersion, split_warmup, warmup_file_requests
    from serving.server import configure_graph_optimization

    configure_graph_optimization(args.graph_optimization)

    started = time.perf_counter()
    loaded = LoadedVersion("model", 1, args.version_dir, None if args.whole else FIRST_WARMUP_SIGNATURES)
    print(f"load {'(whole)' if loaded.complete else '(serving_default)':18} {time.perf_counter() - started:8.2f} s"
          f"   load average {os.getloadavg()[0]:.1f}", flush=True)
    first, later = split_warmup(warmup_file_requests(args.version_dir), background=True)
    total = time.perf_counter() - started + run_requests(loaded, first, "first")
    print(f"until serving_default is warm {total:8.2f} s", flush=True)
    if not loaded.complete:
        started = time.perf_counter()
        loaded.load_rest()
        print(f"load (whole)            {time.perf_counter() - started:8.2f} s   "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
    run_requests(loaded, later, "first")
    run_requests(loaded, first + later, "second")


def run_requests(loaded, requests, label: str) -> float:
    """Runs each request, printing its time; -> their total seconds."""
    import tensorflow as tf

    total = 0.0
    for name, arrays in requests:
        shape = {k: list(v.shape) for k, v in arrays.items() if v.ndim}
        started = time.perf_counter()
        loaded.signature(name).run({k: tf.constant(v) for k, v in arrays.items()})
        seconds = time.perf_counter() - started
        total += seconds
        print(f"{label:6} {name:16} {str(shape):28} {seconds:8.2f} s   "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
    return total


if __name__ == "__main__":
    main()

"""Benchmark: where a new version's time goes before it answers (load, each warm-up request).

Loads one SavedModel version the way `tablegen serve` does (serving.model_manager), times
the load, then each request of its warm-up file (TF Serving's
assets.extra/tf_serving_warmup_requests), then the same requests a second time (the
steady cost: what is left above it on the first pass is graph optimisation and XLA
compilation). Prints one line per request with the 1-minute load average.

    .venv/bin/python benchmarks/serving_warmup.py /tmp/serving/tablegen/1
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
    args = parser.parse_args()

    import tensorflow as tf

    from serving.model_manager import LoadedVersion, warmup_file_requests

    started = time.perf_counter()
    loaded = LoadedVersion("model", 1, args.version_dir)
    print(f"load {time.perf_counter() - started:8.2f} s   load average {os.getloadavg()[0]:.1f}")
    requests = warmup_file_requests(args.version_dir)
    for run in ("first", "second"):
        for name, arrays in requests:
            shape = {k: list(v.shape) for k, v in arrays.items() if v.ndim}
            started = time.perf_counter()
            loaded.signature(name).run({k: tf.constant(v) for k, v in arrays.items()})
            print(f"{run:6} {name:16} {str(shape):28} {time.perf_counter() - started:8.2f} s   "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()

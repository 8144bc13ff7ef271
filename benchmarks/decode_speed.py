"""Benchmark: decoding speed of the exported SavedModel (what TF Serving runs).

Prints tables/s at beam 5 with batches of 64 E2E dev tables, and p50 latency of
one table at beam 1 and beam 5.

    .venv/bin/python benchmarks/decode_speed.py --model runs/e2e   # a `tablegen train` run dir
    .venv/bin/python benchmarks/decode_speed.py --saved-model DIR  # or an exported SavedModel
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVSET = os.path.join(ROOT, "..", "shared", "data", "e2e", "devset.csv")


def e2e_tables(limit: int):
    sys.path.insert(0, ROOT)
    from tablegen_tf.inference import read_inputs

    tables, _ = read_inputs("e2e", DEVSET, "valid")
    return [json.dumps({"table": [{"field": i.field, "value": i.value} for i in t.items]}) for t in tables[:limit]]


def timed(fn, repeats: int):
    fn()  # warm-up (tracing)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def measure(saved_model: str, tables, batch_size: int = 64, beams=(1, 5), repeats: int = 30) -> dict:
    """Tables/s at beam 5 over ``tables`` in batches, then p50 ms of one table at each beam."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel uses)

    generate = tf.saved_model.load(saved_model).signatures["generate"]

    def run(batch, beam):
        return generate(tables=tf.constant(batch), beam_size=tf.constant(beam), max_length=tf.constant(80),
                        must_include=tf.zeros([len(batch), 0], tf.string))

    batches = [tables[i:i + batch_size] for i in range(0, len(tables), batch_size)]
    run(batches[0], 5)  # warm-up (tracing)
    start, words = time.perf_counter(), 0
    for batch in batches:
        words += sum(len(text.split()) for text in run(batch, 5)["text"].numpy())
    result = {"tables_per_second": len(tables) / (time.perf_counter() - start), "tables": len(tables),
              "mean_output_words": words / len(tables)}
    for beam in beams:
        result[f"beam{beam}_p50_ms"] = statistics.median(timed(lambda: run(tables[:1], beam), repeats)) * 1000
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="training run directory (exported to a temp dir first)")
    parser.add_argument("--saved-model", help="exported SavedModel directory")
    parser.add_argument("--batches", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.saved_model
        if not path:
            if not args.model:
                parser.error("pass --model RUN_DIR or --saved-model DIR")
            from tablegen_tf.export import export_saved_model

            path = export_saved_model(args.model, os.path.join(tmp, "export"))
        result = measure(path, e2e_tables(64 * args.batches))
        print(f"beam 5, batch 64: {result['tables_per_second']:.1f} tables/s")
        for beam in (1, 5):
            print(f"one table, beam {beam}: p50 {result[f'beam{beam}_p50_ms']:.1f} ms")


if __name__ == "__main__":
    main()

"""A/B of two exported SavedModels in ONE process: same texts, then alternating speed rounds.

Checks that ``generate`` (beam 5, batches of 64 and one table at a time) and
``serving_default`` (batches of 64) give byte-identical texts on the E2E dev tables for
both models, then times them alternately (after warm-up, so XLA compilations are not
timed): beam-5 sentences/s in batches of 64 (``generate``, and ``serving_default`` with the
export's own decoding) and the p50 of one-table beam-5 calls. Meant
for two exports of one checkpoint with the code before and after a change; on a shared
host only the ratio within one run means something.

    .venv/bin/python benchmarks/decode_ab.py --before DIR --after DIR [--rounds 3] [--batch 64]
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

BATCH = 64
BEAM = 5
MAX_LENGTH = 80


def signatures(saved_model: str):
    import tensorflow as tf

    loaded = tf.saved_model.load(saved_model)
    generate, serve = loaded.signatures["generate"], loaded.signatures["serving_default"]

    def beam(batch):
        return generate(tables=tf.constant(batch), beam_size=tf.constant(BEAM), max_length=tf.constant(MAX_LENGTH),
                        must_include=tf.zeros([len(batch), 0], tf.string))["text"].numpy().tolist()

    return loaded, beam, lambda batch: serve(tables=tf.constant(batch))["text"].numpy().tolist()


def batches_of(tables, size):
    return [tables[i:i + size] for i in range(0, len(tables), size)]


def texts(beam, serve, tables, one_table_limit, size=BATCH):
    return {
        "generate batched": [t for batch in batches_of(tables, size) for t in beam(batch)],
        "generate one table": [beam([table])[0] for table in tables[:one_table_limit]],
        "serving_default batched": [t for batch in batches_of(tables, size) for t in serve(batch)],
    }


def batched_rate(beam, tables, size=BATCH):
    start = time.perf_counter()
    for batch in batches_of(tables, size):
        beam(batch)
    return len(tables) / (time.perf_counter() - start)


def one_table_p50_ms(beam, tables, calls):
    times = []
    for i in range(calls):
        start = time.perf_counter()
        beam([tables[i % len(tables)]])
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tables", type=int, default=547, help="E2E dev tables (547: all)")
    parser.add_argument("--one-table-texts", type=int, default=547, help="tables also compared one at a time")
    parser.add_argument("--latency-calls", type=int, default=40)
    parser.add_argument("--batch", type=int, default=BATCH, help=f"tables per batched call (default {BATCH})")
    args = parser.parse_args()
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModels use)

    from decode_speed import e2e_tables

    tables = e2e_tables(args.tables)
    models = {name: signatures(path) for name, path in (("before", args.before), ("after", args.after))}
    outputs = {}
    for name, (_, beam, serve) in models.items():  # also the warm-up: every compilation happens here
        start = time.perf_counter()
        outputs[name] = texts(beam, serve, tables, args.one_table_texts, args.batch)
        print(f"{name}: texts (and warm-up) in {time.perf_counter() - start:.1f} s", flush=True)
    for kind in outputs["before"]:
        same = sum(a == b for a, b in zip(outputs["before"][kind], outputs["after"][kind]))
        print(f"identical texts, {kind}: {same}/{len(outputs['before'][kind])}")
    words = [len(t.split()) for t in outputs["after"]["generate batched"]]
    print(f"mean output words (beam {BEAM}): {statistics.mean(words):.2f}")
    print(f"load: {os.getloadavg()[0]:.1f}")
    for round_ in range(args.rounds):
        for name, (_, beam, serve) in models.items():
            rate, served = batched_rate(beam, tables, args.batch), batched_rate(serve, tables, args.batch)
            p50 = one_table_p50_ms(beam, tables, args.latency_calls)
            print(f"round {round_ + 1} {name:6}: beam {BEAM}, batch {args.batch}: {rate:6.1f} sentences/s "
                  f"(serving_default {served:6.1f}); one table: p50 {p50:5.1f} ms "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()

"""Benchmark: Table NLM (Lebret et al. 2016, paper sizes) beside encdec-copy on E2E.

Training: target tokens/s of the trainer's own train step (batch 64, real E2E records).
Decoding (beam 5, in-process tf.function, the code the SavedModel runs): p50 latency of one
table, and tables/s in batches of 64; the mean output length is printed beside it, since an
untrained model's outputs can be longer than a trained one's (pass --run NAME=RUN_DIR to time
a trained run instead).

    nice -n 5 .venv/bin/python benchmarks/table_nlm_speed.py --data runs/data/e2e \
        [--run table-nlm=runs/e2e-full] [--steps 60]
The paper (Figure 3) reports ~200 ms per sentence at beam 5 on 2016 hardware.
"""

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {  # name -> config files (comma-merged); the paper's Table 3 sizes for table-nlm
    "table-nlm": "e2e,table_nlm/table-nlm",
    "encdec-copy": "e2e",
}


def measure(name, config_files, data, steps, tables, run_dir=None):
    import tensorflow as tf

    from tablegen_tf.config import load_config
    from tablegen_tf.generation import generate_text
    from tablegen_tf.training.trainer import Trainer, load_trained

    config = load_config(config_files, {"model": {"name": name}, "data": {
        "train": os.path.join(data, "train"), "valid": None, "batch_size": 64}})
    result = {"model": name}
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out)
        dataset = trainer.dataset(config.data.train, training=True).repeat()
        iterator = iter(trainer.strategy.experimental_distribute_dataset(dataset))
        step = trainer._train_step_fn()
        for _ in range(5):
            step(iterator)
        tokens, start = 0, time.perf_counter()
        for _ in range(steps):
            _, count, _ = step(iterator)  # loss, global tokens, this worker's example ids
            tokens += int(count)
        result["train_tokens_per_s"] = round(tokens / (time.perf_counter() - start))
        model, featurizer = trainer.model, trainer.featurizer
        if run_dir:
            trained = load_trained(run_dir)
            model, featurizer = trained.model, trained.featurizer
        decode = dataclasses.replace(config.decode, beam_size=5, max_length=60)
        run = tf.function(lambda f: generate_text(model, featurizer, f, decode)[0], reduce_retracing=True)
        valid = os.path.join(data, "valid")
        batch = next(iter(featurizer.dataset(valid, training=False)))
        one = {k: v[:1] for k, v in batch.items()}
        run(one)
        times = []
        for _ in range(tables):
            t0 = time.perf_counter()
            text = run(one)
            times.append(time.perf_counter() - t0)
        result["one_table_beam5_ms_p50"] = round(statistics.median(times) * 1000, 1)
        run(batch)
        t0 = time.perf_counter()
        texts = run(batch).numpy()
        result["batch64_beam5_tables_per_s"] = round(len(texts) / (time.perf_counter() - t0), 1)
        result["mean_output_words"] = round(sum(len(t.split()) for t in texts) / len(texts), 1)
        result["trained"] = bool(run_dir)
        del text
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(ROOT, "runs", "data", "e2e"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--tables", type=int, default=10, help="single-table decodes timed")
    parser.add_argument("--run", action="append", default=[], help="NAME=RUN_DIR: time a trained run's decoding")
    parser.add_argument("--models", default="table-nlm,encdec-copy")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    runs = dict(item.split("=", 1) for item in args.run)
    print("load:", open("/proc/loadavg").read().strip())
    for name in args.models.split(","):
        print(measure(name, MODELS[name], args.data, args.steps, args.tables, runs.get(name)), flush=True)
    print("load:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()

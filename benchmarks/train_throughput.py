"""Benchmark: training throughput (target tokens/s) of encdec-copy on E2E.

Two sizes: the reference peer (1-layer 256 LSTM decoder with input feeding,
256-dim embeddings, batch 64 sentences) and the family default (2 layers).
Uses the trainer's own train step on the real E2E training records.

    .venv/bin/python benchmarks/train_throughput.py [--steps 150] [--data runs/data/e2e]
Target on this 2-core machine: >= 8,000 target tokens/s at the peer size.
"""

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = {
    "peer (1x256, emb 256, batch 64)": {"model.num_layers": 1},
    "family default (2x256)": {"model.num_layers": 2},
    # bf16 matmuls, float32 weights and loss: oneDNN runs them on AMX / AVX512-BF16 where the
    # CPU has them (slower without); the dtype a user picks with --set model.dtype=...
    "peer, mixed_bfloat16": {"model.num_layers": 1, "model.dtype": "mixed_bfloat16"},
}


def ensure_data(data: str) -> str:
    train = os.path.join(data, "train")
    if not os.path.exists(os.path.join(train, "vocab", "words.txt")):
        subprocess.run(
            [sys.executable, "-m", "tablegen_cli.main", "prepare", "--format", "e2e-aligned", "--input",
             os.path.join(ROOT, "..", "shared", "data", "e2e", "aligned"), "--split", "train", "--output", train],
            check=True, cwd=ROOT,
        )
    return train


def peer_values(train_dir: str, overrides: dict) -> dict:
    """Config values (over `--config e2e`) of the peer size plus ``overrides`` {"section.key": value}."""
    values = {"data": {"train": train_dir, "valid": None, "batch_size": 64},
              "model": {"name": "encdec-copy", "hidden_size": 256, "word_dim": 256, "value_dim": 256}}
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        values.setdefault(section, {})[key] = value
    return values


@contextlib.contextmanager
def train_step(config, train_dir: str):
    """-> (the trainer's own train step, an iterator over the training records), in a temp run dir."""
    from tablegen_tf.training.trainer import Trainer

    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out)
        dataset = trainer.dataset(train_dir, training=True).repeat()
        yield trainer._train_step_fn(), iter(trainer.strategy.experimental_distribute_dataset(dataset))


def measure(train_dir: str, overrides: dict, steps: int, warmup: int) -> dict:
    import tensorflow as tf

    from tablegen_tf.config import load_config

    with train_step(load_config("e2e", peer_values(train_dir, overrides)), train_dir) as (step, iterator):
        for _ in range(warmup):
            step(iterator)
        tokens, start = 0, time.perf_counter()
        for _ in range(steps):
            _, count, _ = step(iterator)  # loss, global tokens, this worker's example ids
            tokens += int(count)
        seconds = time.perf_counter() - start
    return {"tokens_per_second": round(tokens / seconds), "steps": steps, "seconds": round(seconds, 1),
            "threads": tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(ROOT, "runs", "data", "e2e"))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--size", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    train_dir = ensure_data(args.data)
    if args.size:  # child process: one size, so peak memory is per size
        result = measure(train_dir, SIZES[args.size], args.steps, args.warmup)
        result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        print("RESULT " + json.dumps(result))
        return
    for name in SIZES:
        proc = subprocess.run(
            [sys.executable, __file__, "--data", args.data, "--steps", str(args.steps), "--warmup", str(args.warmup),
             "--size", name], capture_output=True, text=True, cwd=ROOT,
        )
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        if not lines:
            sys.exit(f"{name}: failed\n{proc.stderr[-3000:]}")
        r = json.loads(lines[0][7:])
        print(f"encdec-copy {name}: {r['tokens_per_second']} target tokens/s "
              f"({r['steps']} steps in {r['seconds']} s), peak memory {r['peak_rss_mb']} MB")
    print("target: >= 8000 target tokens/s at the peer size (1.5x OpenNMT-py LSTM+copy at ~5,500)")


if __name__ == "__main__":
    main()

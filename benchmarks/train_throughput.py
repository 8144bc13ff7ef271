"""Benchmark: training throughput (target tokens/s) of encdec-copy on E2E.

Two sizes: the reference peer (1-layer 256 LSTM decoder with input feeding,
256-dim embeddings, batch 64 sentences) and the family default (2 layers).
Uses the trainer's own train step on the real E2E training records.

    .venv/bin/python benchmarks/train_throughput.py [--steps 150] [--data runs/data/e2e]
    .venv/bin/python benchmarks/train_throughput.py --interleave [--blocks 8 --block-steps 25]

Target on this 2-core machine: >= 8,000 target tokens/s at the peer size. ``--interleave``
answers "how much slower is the 2-layer default than the 1-layer peer size" (issue 15: at
most 1.3x) on a host whose speed drifts by 15-20 % within minutes: both train steps are
built in ONE process and run in alternating blocks of steps over the same batches, so drift
hits both alike; it prints each size's rate over all blocks and its block median, the
slowdown overall, of the block medians and block by block, and the analytic FLOP ratio
(benchmarks/flops_fraction.py's count) for scale. About 2 minutes with the defaults (8
blocks a size; the figures in benchmarks/peers/README.md used 16, about 3.5 minutes).
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
PEER_SIZE, DEFAULT_SIZE = "peer (1x256, emb 256, batch 64)", "family default (2x256)"
SIZES = {
    PEER_SIZE: {"model.num_layers": 1},
    DEFAULT_SIZE: {"model.num_layers": 2},
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


def timed_block(step, iterator, steps: int):
    """-> (target tokens, seconds) of ``steps`` train steps."""
    tokens, start = 0, time.perf_counter()
    for _ in range(steps):
        tokens += int(step(iterator)[1])  # (loss, global tokens, example ids)
    return tokens, time.perf_counter() - start


def interleaved(train_dir: str, names, blocks: int, block_steps: int, warmup: int) -> dict:
    """-> {size name: [(tokens, seconds) per block]}: the sizes' train steps side by side in this process,
    run in alternating blocks (the order flips every round, so neither always goes first)."""
    from tablegen_tf.config import load_config

    with contextlib.ExitStack() as stack:
        steps = {name: stack.enter_context(train_step(load_config("e2e", peer_values(train_dir, SIZES[name])),
                                                      train_dir))
                 for name in names}
        for step, iterator in steps.values():
            timed_block(step, iterator, warmup)
        blocks_run = {name: [] for name in names}
        for block in range(blocks):
            for name in (names if block % 2 == 0 else names[::-1]):
                blocks_run[name].append(timed_block(*steps[name], block_steps))
        return blocks_run


def flop_ratio(train_dir: str) -> float:
    """Analytic training FLOPs per target token, 2 layers / 1 layer, at the benchmark's sizes
    (flops_fraction's count: a layer l > 1 adds its recurrent matmul [h^{l-1}; h^l] U_l)."""
    from flops_fraction import RECURRENT, corpus_sizes, forward_flops_per_token

    parts = forward_flops_per_token(256, 256, *corpus_sizes(train_dir))
    one = sum(parts.values())
    return (one + parts[RECURRENT]) / one


def print_interleaved(train_dir: str, blocks: int, block_steps: int, warmup: int) -> None:
    import statistics

    one, two = PEER_SIZE, DEFAULT_SIZE
    runs = interleaved(train_dir, [one, two], blocks, block_steps, warmup)
    rates = {name: [tokens / seconds for tokens, seconds in values] for name, values in runs.items()}
    overall = {name: sum(t for t, _ in values) / sum(s for _, s in values) for name, values in runs.items()}
    for name, values in rates.items():
        print(f"encdec-copy {name}: {overall[name]:,.0f} target tokens/s over {blocks} blocks of {block_steps} "
              f"steps (block median {statistics.median(values):,.0f}, range {min(values):,.0f}-{max(values):,.0f})")
    pairs = [a / b for a, b in zip(rates[one], rates[two])]
    medians = statistics.median(rates[one]) / statistics.median(rates[two])
    print(f"2-layer slowdown (1-layer / 2-layer tokens/s): {overall[one] / overall[two]:.2f}x overall, "
          f"{medians:.2f}x of the block medians, {min(pairs):.2f}-{max(pairs):.2f}x block by block; "
          f"analytic FLOP ratio {flop_ratio(train_dir):.2f}x; target <= 1.3x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(ROOT, "runs", "data", "e2e"))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--size", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--interleave", action="store_true",
                        help="the 1-layer and 2-layer sizes in one process, alternating blocks of steps")
    parser.add_argument("--blocks", type=int, default=8, help="--interleave: blocks per size")
    parser.add_argument("--block-steps", type=int, default=25, help="--interleave: train steps per block")
    args = parser.parse_args()
    train_dir = ensure_data(args.data)
    if args.interleave:
        print_interleaved(train_dir, args.blocks, args.block_steps, args.warmup)
        return
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

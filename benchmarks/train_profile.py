"""Profile: where a training step's time goes, per op type and per node.

Runs the trainer's own train step (as ``train_throughput.py`` does) for warm-up steps,
then traces a few with the TensorFlow profiler (the trace TensorBoard's profile plugin
shows, kept under --logdir) and prints the top op types and nodes by run time per step
(loop iterations included; a node of the backward loop reads ``.../while_grad/...`` or,
for the encoder-decoder's hand-written backward pass, ``while/body/...``).

    .venv/bin/python benchmarks/train_profile.py --sequential                        # encdec-copy, peer size
    .venv/bin/python benchmarks/train_profile.py --sequential --set model.num_layers=2
    .venv/bin/python benchmarks/train_profile.py --sequential --config e2e,experiments/e2e_order_planning --plain

With ``--sequential`` (one inter-op thread) ops run one at a time and their times add up;
with the default threads, time hidden by running ops side by side is not what they cost.
Found with it (2026-11-27): the fused loop's backward pass transposing its kernels at
every step (benchmarks/peers/README.md).
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from train_throughput import PEER_SIZE, SIZES, ensure_data, peer_values, train_step  # noqa: E402

PEER = SIZES[PEER_SIZE]


def profile(config, train_dir: str, warmup: int, steps: int, logdir: str):
    """-> tally (decode_profile) of ``steps`` traced train steps."""
    import tensorflow as tf

    from decode_profile import tally

    with train_step(config, train_dir) as (step, iterator):
        for _ in range(warmup):
            step(iterator)
        tf.profiler.experimental.start(logdir)
        for _ in range(steps):
            step(iterator)[0].numpy()
        tf.profiler.experimental.stop()
    return tally(logdir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="e2e", help="as `tablegen train --config`")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--plain", action="store_true", help="the config as is, not the peer size")
    parser.add_argument("--data", default=os.path.join(ROOT, "runs", "data", "e2e"))
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--steps", type=int, default=10, help="traced steps")
    parser.add_argument("--sequential", action="store_true", help="one inter-op thread: op times add up")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--logdir", default=None,
                        help="where the trace goes (default: a new directory under runs/profiles)")
    args = parser.parse_args()
    import tensorflow as tf

    from decode_profile import new_logdir, print_top
    from tablegen_tf.config import deep_merge, load_config, parse_overrides

    if args.sequential:
        tf.config.threading.set_inter_op_parallelism_threads(1)
    train_dir = ensure_data(args.data)
    base = {"data": {"train": train_dir, "valid": None}} if args.plain else peer_values(train_dir, PEER)
    config = load_config(args.config, deep_merge(base, parse_overrides(args.set)))
    logdir = args.logdir or new_logdir("train-profile")
    by_op, by_node, runs = profile(config, train_dir, args.warmup, args.steps, logdir)
    print(f"{args.steps} traced steps: op time {sum(by_op.values()) / 1000 / args.steps:.1f} ms/step over "
          f"{sum(runs.values()) // args.steps:,} op runs/step (trace: {logdir})")
    print_top(by_op, by_node, runs, args.steps, "step", args.top, node_width=100)


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)

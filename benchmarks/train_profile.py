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
import collections
import glob
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from train_throughput import SIZES, ensure_data  # noqa: E402

PEER = {"data.batch_size": 64, "model.name": "encdec-copy", "model.hidden_size": 256, "model.word_dim": 256,
        "model.value_dim": 256, **SIZES["peer (1x256, emb 256, batch 64)"]}


def profile(config, train_dir: str, warmup: int, steps: int, logdir: str):
    """-> (per-step {op type: ms}, {node: ms}, {op type: runs}) of ``steps`` traced steps."""
    import tensorflow as tf

    from decode_profile import op_events
    from tablegen_tf.training.trainer import Trainer

    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, out)
        dataset = trainer.dataset(train_dir, training=True).repeat()
        iterator = iter(trainer.strategy.experimental_distribute_dataset(dataset))
        step = trainer._train_step_fn()
        for _ in range(warmup):
            step(iterator)
        tf.profiler.experimental.start(logdir)
        for _ in range(steps):
            step(iterator)[0].numpy()
        tf.profiler.experimental.stop()
    by_type, by_node, runs = collections.Counter(), collections.Counter(), collections.Counter()
    trace = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    for op, node, micros in op_events(trace):
        by_type[op] += micros / 1000 / steps
        by_node[node] += micros / 1000 / steps
        runs[op] += 1 / steps
    return by_type, by_node, runs


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
    parser.add_argument("--logdir", default=None, help="where the trace goes (default: a new temp dir)")
    args = parser.parse_args()
    import tensorflow as tf

    from tablegen_tf.config import load_config, parse_overrides

    if args.sequential:
        tf.config.threading.set_inter_op_parallelism_threads(1)
    train_dir = ensure_data(args.data)
    overrides = [] if args.plain else [f"{key}={value}" for key, value in PEER.items()]
    values = parse_overrides(overrides + args.set)
    values.setdefault("data", {}).update({"train": train_dir, "valid": None})
    config = load_config(args.config, values)
    logdir = args.logdir or tempfile.mkdtemp(prefix="train-profile-")
    by_type, by_node, runs = profile(config, train_dir, args.warmup, args.steps, logdir)
    total = sum(by_type.values())
    print(f"{args.steps} traced steps: op time {total:.1f} ms/step over {sum(runs.values()):,.0f} op runs/step "
          f"(trace: {logdir})")
    print(f"\n{'op type':34}{'ms/step':>9}{'share':>8}{'runs/step':>11}")
    for op, ms in by_type.most_common(args.top):
        print(f"{op:34}{ms:9.1f}{100 * ms / total:7.1f}%{runs[op]:11,.0f}")
    print(f"\n{'node':100}{'ms/step':>9}{'share':>8}")
    for node, ms in by_node.most_common(args.top):
        print(f"{node[-100:]:100}{ms:9.1f}{100 * ms / total:7.1f}%")


if __name__ == "__main__":
    main()

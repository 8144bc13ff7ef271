"""What n-gram repeat blocking (tablegen_tf.decoding.repeats) adds to one search step.

Times a tf.while_loop of steps over a fixed [N, V + S] log-prob table, with and without the
blocker wrapped around it, at the shapes of a WebNLG beam search (64 tables x beam 15 = 960
rows, 5,000 words, 93 copy slots, max_length 120). The tokens fed back are drawn either from
the whole vocabulary (bans are rare, as in most real steps) or from 12 ids (every row bans
something at almost every step: a looping model). Prints milliseconds per step; rounds
alternate, so compare within one run.

    .venv/bin/python benchmarks/repeat_blocking_step.py [--rows 960] [--size 4] [--steps 40] [--rounds 2]
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from quiet import run_quietly  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=960)
    parser.add_argument("--vocab", type=int, default=5000)
    parser.add_argument("--slots", type=int, default=93)
    parser.add_argument("--max-length", type=int, default=120)
    parser.add_argument("--size", type=int, default=4, help="the n of the n-grams blocked")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from tablegen_tf.decoding.repeats import RepeatBlocker

    rng = np.random.default_rng(0)
    rows, width = args.rows, args.vocab + args.slots
    texts = tf.constant(rng.integers(0, args.slots // 2, (rows, args.slots)).astype(str))  # repeated texts
    log_probs = tf.constant(rng.normal(size=(rows, width)).astype(np.float32))
    blocker = RepeatBlocker(args.size, args.vocab, texts)

    def plain(prev_ids, t, state):
        return log_probs, state

    blocked = blocker.wrap(plain)

    def loop(step_fn, state, low, high):
        @tf.function
        def run(steps):
            def body(t, state, total):
                prev = tf.random.stateless_uniform([rows], [1, t], low, high, tf.int32)
                out, state = step_fn(prev, t, state)
                return t + 1, state, total + tf.reduce_sum(tf.where(tf.math.is_finite(out[:, :8]), out[:, :8], 0.0))
            return tf.while_loop(lambda t, *_: t < steps, body, (tf.constant(0), state, tf.constant(0.0)))[2]
        run(tf.constant(2))  # trace outside the timing
        return run

    start_state = blocker.initial_state((), rows, args.max_length)
    cases = {
        "plain step": loop(plain, (), 4, width),
        "blocked, ids from the whole vocabulary": loop(blocked, start_state, 4, width),
        "blocked, ids from 12 (a loop: bans at almost every step)": loop(blocked, start_state, 4, 16),
    }
    for round_number in range(1, args.rounds + 1):
        for name, run in cases.items():
            began = time.perf_counter()
            run(tf.constant(args.steps))
            print(f"round {round_number}: {name}: {(time.perf_counter() - began) / args.steps * 1000:.2f} ms/step")


if __name__ == "__main__":
    run_quietly(main)

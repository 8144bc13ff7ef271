"""Experiment: which matmul kernel a `tf.while_loop` gets, around and inside TF's cases.

TensorFlow's oneDNN rewrite (MklLayoutRewritePass: ``MatMul`` -> ``_MklMatMul``, the
kernel that uses AMX / AVX512-BF16 for bfloat16) runs on the graphs TF lowers; the
branches of a case built with ``lower_using_switch_merge=False`` (what
``tablegen_tf.decoding.common.switch_case`` builds, so untaken branches cost nothing) are
run as functions it never sees, and so is a loop inside one. This prints, for the same
50-step loop of ``h = tanh(h @ W)`` ([R, 1024] x [1024, 1024]), the kernel and its time:
plain, inside an un-lowered case, inside a lowered case, and inside an un-lowered case
whose branch calls a no-inline ``tf.function`` (``experimental_attributes={"_noinline":
True}``: TF runs the call as a function of its own, with every graph pass), each
in-process and from a loaded SavedModel, in float32 and bfloat16.

    .venv/bin/python benchmarks/onednn_in_loops.py [--rows 320]

Measured (320 rows, quiet; the same in-process and loaded):
- Intel Xeon with AMX (2026-11-27): float32 plain / lowered case ``_MklMatMul`` 111-114 ms,
  un-lowered case ``MatMul`` (Eigen) 133 ms; bfloat16 ``_MklMatMul`` 37-38 ms, ``MatMul``
  164-165 ms.
- AMD EPYC with AVX512-BF16, no AMX (2026-11-27, second session): float32 ``_MklMatMul``
  172-179 ms in the plain loop, the lowered case and the no-inline call, ``MatMul`` 194-243
  ms; bfloat16 ``_MklMatMul`` 85-89 ms plain, 170-174 ms lowered / called, ``MatMul``
  212-239 ms.
The beam search's batched loop sits in un-lowered cases (``decoding/beam.py``), so its
matmuls are Eigen's. Routing every ``decoding.common.switch_case`` branch through a
no-inline call gives them oneDNN (profiled) with the same texts, but on the AMD host the
batched search got slower, not faster (README, mixed precision).
"""

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def matmul_kernels(function, argument, logdir):
    """-> {op type: (runs, ms)} of the matmul ops one traced call ran."""
    import tensorflow as tf

    from decode_profile import tally

    function(argument)  # trace and warm up outside the profile
    tf.profiler.experimental.start(logdir)
    function(argument).numpy()
    tf.profiler.experimental.stop()
    micros, _, runs = tally(logdir)
    return {op: (runs[op], micros[op] / 1000) for op in runs if "MatMul" in op}


def make_module(dtype):
    import tensorflow as tf
    from tensorflow.python.ops import cond_v2

    spec = [tf.TensorSpec([None, 1024], dtype)]

    class Loops(tf.Module):
        def __init__(self):
            self.kernel = tf.Variable(tf.random.normal([1024, 1024], seed=1) * 0.01)

        def loop(self, h):
            kernel = tf.cast(self.kernel, dtype)  # once, outside the loop
            body = lambda i, h: (i + 1, tf.tanh(tf.matmul(h, kernel)))  # noqa: E731
            return tf.reduce_sum(tf.cast(tf.while_loop(lambda i, h: i < 50, body, (0, h))[1], tf.float32))

        def branches(self, h):
            return [lambda: tf.reduce_sum(tf.cast(h, tf.float32)), lambda: self.loop(h)]

        @tf.function(experimental_attributes={"_noinline": True})
        def called_loop(self, h):
            return self.loop(h)

        @tf.function(input_signature=spec)
        def unlowered_case_noinline_call(self, h):
            index = tf.cast(tf.shape(h)[0] > 1, tf.int32)
            return cond_v2.indexed_case(index, [lambda: tf.reduce_sum(tf.cast(h, tf.float32)),
                                                lambda: self.called_loop(h)], lower_using_switch_merge=False)

        @tf.function(input_signature=spec)
        def plain(self, h):
            return self.loop(h)

        @tf.function(input_signature=spec)
        def unlowered_case(self, h):
            index = tf.cast(tf.shape(h)[0] > 1, tf.int32)
            return cond_v2.indexed_case(index, self.branches(h), lower_using_switch_merge=False)

        @tf.function(input_signature=spec)
        def lowered_case(self, h):
            return tf.switch_case(tf.cast(tf.shape(h)[0] > 1, tf.int32), self.branches(h))

    return Loops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=320, help="rows of h (batch x beam)")
    args = parser.parse_args()
    import tensorflow as tf

    print("| dtype | where the loop is | in-process | loaded SavedModel |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for dtype in (tf.float32, tf.bfloat16):
            module = make_module(dtype)
            path = os.path.join(work, dtype.name)
            tf.saved_model.save(module, path)
            loaded = tf.saved_model.load(path)
            h = tf.cast(tf.random.normal([args.rows, 1024], seed=2), dtype)
            for name in ("plain", "unlowered_case", "lowered_case", "unlowered_case_noinline_call"):
                cells = []
                for i, owner in enumerate((module, loaded)):
                    kernels = matmul_kernels(getattr(owner, name), h, os.path.join(work, f"{dtype.name}-{name}-{i}"))
                    cells.append(", ".join(f"`{op}` x{n} {ms:.1f} ms" for op, (n, ms) in kernels.items()))
                print(f"| {dtype.name} | {name.replace('_', ' ')} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    from quiet import run_quietly

    run_quietly(main)

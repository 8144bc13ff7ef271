"""Profile: where the exported SavedModel's beam-5 decoding spends its time, per op.

Traces a few calls of a SavedModel signature on E2E dev tables with the TensorFlow
profiler (``tf.profiler.experimental``: the trace TensorBoard's profile plugin shows,
written under --logdir) and prints, from its host plane, the top op types and nodes by
total run time (loop iterations included), the number of op runs per call and the wall
time of traced and untraced calls. Node names lose the suffixes function inlining adds
(``_tfg_inlined...``, ``indexed_case/``), so a loop op is one row, e.g. ``while/TopKV2``.

    .venv/bin/python benchmarks/decode_profile.py --saved-model DIR              # generate, beam 5, batch 64
    .venv/bin/python benchmarks/decode_profile.py --saved-model DIR --batch 1    # one table
    .venv/bin/python benchmarks/decode_profile.py --saved-model DIR --sequential # op times that add up

With ``--sequential`` (one inter-op thread) ops run one at a time and the op times add up
to the wall time; otherwise independent ops run side by side, wait for the same intra-op
threads and each one's time includes that wait (the copy attention's matvec, run beside
the vocabulary projection, then showed 5x its own time).
"""

import argparse
import collections
import glob
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
PROFILES = os.path.join(ROOT, "runs", "profiles")


def new_logdir(prefix: str) -> str:
    """A new directory for a trace under runs/profiles (gitignored, kept for TensorBoard),
    not in /tmp, where every run used to leave one."""
    os.makedirs(PROFILES, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-", dir=PROFILES)


def op_events(xplane_path):
    """-> [(op type, node name, microseconds)] of every TF op the trace's host plane holds."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(xplane_path, "rb") as handle:
        space.ParseFromString(handle.read())
    out = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                node, _, op = name.rpartition(":")  # TF op events are "node/name:OpType"
                if node and op and "::" not in name and node != "EagerLocalExecute":  # not the call itself
                    out.append((op, short_node(node), event.duration_ps / 1e6))
    return out


def tally(logdir):
    """The newest trace under ``logdir`` -> ({op type: us}, {node: us}, {op type: runs})."""
    by_op, by_node, runs = collections.Counter(), collections.Counter(), collections.Counter()
    for op, node, micros in op_events(sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]):
        by_op[op] += micros
        by_node[node] += micros
        runs[op] += 1
    return by_op, by_node, runs


def print_top(by_op, by_node, runs, calls: int, unit: str, top: int, node_width: int = 90) -> None:
    """The ``top`` op types and nodes of ``calls`` traced calls (tally's totals), per ``unit``."""
    total = sum(by_op.values())
    print(f"\n{'op type':34}{'ms/' + unit:>9}{'share':>8}{'runs/' + unit:>11}")
    for op, micros in by_op.most_common(top):
        print(f"{op:34}{micros / 1000 / calls:9.1f}{100 * micros / total:7.1f}%{runs[op] // calls:11,}")
    print(f"\n{'node':{node_width}}{'ms/' + unit:>9}{'share':>8}")
    for node, micros in by_node.most_common(top):
        print(f"{node[-node_width:]:{node_width}}{micros / 1000 / calls:9.1f}{100 * micros / total:7.1f}%")


def short_node(node: str) -> str:
    """The node's name in the function that defines it (inlining appends suffixes)."""
    return node.split("_tfg_inlined")[0].replace("indexed_case/", "")


def signature_call(saved_model: str, signature: str, beam: int):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel uses)

    fn = tf.saved_model.load(saved_model).signatures[signature]
    if signature == "generate":
        return lambda batch: fn(tables=tf.constant(batch), beam_size=tf.constant(beam), max_length=tf.constant(80),
                                must_include=tf.zeros([len(batch), 0], tf.string))
    return lambda batch: fn(tables=tf.constant(batch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved-model", required=True)
    parser.add_argument("--signature", default="generate", choices=("generate", "serving_default", "explain"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3, help="traced calls (one batch each)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--logdir", default=None,
                        help="keep the trace here (TensorBoard --logdir; default: a new directory under runs/profiles)")
    parser.add_argument("--sequential", action="store_true", help="one inter-op thread: op times add up")
    args = parser.parse_args()
    import tensorflow as tf

    if args.sequential:
        tf.config.threading.set_inter_op_parallelism_threads(1)

    from decode_speed import e2e_tables

    tables = e2e_tables(args.batch * args.calls)
    batches = [tables[i:i + args.batch] for i in range(0, len(tables), args.batch)]
    run = signature_call(args.saved_model, args.signature, args.beam)
    run(batches[0])  # warm-up (tracing)
    start = time.perf_counter()
    for batch in batches:
        run(batch)
    untraced = (time.perf_counter() - start) / len(batches)
    logdir = args.logdir or new_logdir("decode-profile")
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for batch in batches:
        run(batch)
    traced = (time.perf_counter() - start) / len(batches)
    tf.profiler.experimental.stop()
    by_op, by_node, runs = tally(logdir)
    total, n = sum(by_op.values()), len(batches)
    in_loop = sum(micros for node, micros in by_node.items() if "while/" in node)
    print(f"{args.signature}, beam {args.beam}, {n} calls of {args.batch} tables: {1000 * untraced:.0f} ms/call "
          f"untraced, {1000 * traced:.0f} traced; op time {total / 1000 / n:.0f} ms/call over "
          f"{sum(runs.values()) // n:,} op runs/call, {100 * in_loop / total:.0f} % in while loops "
          f"(trace: {logdir})")
    print_top(by_op, by_node, runs, n, "call", args.top)


if __name__ == "__main__":
    main()

"""What a `tablegen prepare` run wrote, in a form that ignores shard count and order: to
check that two runs (two runners, a run that lost a worker) wrote the same thing."""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Dict

from beam_jobs.prepare import DEAD_LETTER, EXAMPLES_PREFIX


def outputs(directory: str) -> Dict[str, Any]:
    """{examples: sorted serialized tf.train.Examples (deterministic), dead_letters: sorted
    lines, texts: {vocab/*, stats.json: content}, counts: metadata counts without timings/paths}."""
    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(directory, f"{EXAMPLES_PREFIX}-*.tfrecord.gz")))
    examples = sorted(tf.train.Example.FromString(record.numpy()).SerializeToString(deterministic=True)
                      for record in tf.data.TFRecordDataset(files, compression_type="GZIP"))
    dead_letters = []  # a selection split's rejections are in its train split's file
    if os.path.exists(os.path.join(directory, DEAD_LETTER)):
        with open(os.path.join(directory, DEAD_LETTER)) as handle:
            dead_letters = sorted(line for line in handle.read().splitlines() if line)
    texts = {}
    for path in sorted(glob.glob(os.path.join(directory, "vocab", "*")) + [os.path.join(directory, "stats.json")]):
        with open(path) as handle:
            texts[os.path.relpath(path, directory)] = handle.read()
    with open(os.path.join(directory, "metadata.json")) as handle:
        counts = json.load(handle)["counts"]
    counts.pop("seconds", None), counts.pop("carved_from", None)  # timings and paths differ
    return {"examples": examples, "dead_letters": dead_letters, "texts": texts, "counts": counts}


def differences(first: str, second: str) -> list:
    """The parts of outputs() that differ between two prepare outputs ([] = the same)."""
    a, b = outputs(first), outputs(second)
    return [key for key in ("examples", "dead_letters", "texts", "counts") if a[key] != b[key]]

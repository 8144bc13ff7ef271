"""Checkpoint averaging: a new run directory whose weights are the mean of a run's last N
training checkpoints (Vaswani et al. 2017; OpenNMT's ``average_checkpoints``).

The result is an ordinary run directory (config, vocabularies, ``best/``), so `tablegen
evaluate`, `export` and `serve` take it unchanged. Which N helps is a selection-split
decision; the run's ``train.keep_checkpoints`` bounds it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List

import numpy as np
import tensorflow as tf

from tablegen_tf.config import ConfigError, load_run_config, save_run_config
from tablegen_tf.training.trainer import BEST, CHECKPOINTS, copy_vocabularies, load_trained, variables_checkpoint

_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def checkpoint_key(name: str) -> str:
    """The key tf.train.Checkpoint stores a tracked variable under ("." escaped as "..")."""
    return name.replace(".", "..") + _SUFFIX


def last_checkpoints(run_dir: str, count: int) -> List[str]:
    state = tf.train.get_checkpoint_state(os.path.join(run_dir, CHECKPOINTS))
    paths = list(state.all_model_checkpoint_paths) if state else []
    if count < 1 or len(paths) < count:
        raise ConfigError(f"{run_dir}/{CHECKPOINTS} holds {len(paths)} checkpoints; cannot average the last "
                          f"{count} (train.keep_checkpoints sets how many a run keeps)")
    return paths[-count:]


def average_checkpoints(run_dir: str, count: int, out_dir: str) -> str:
    """Writes OUT_DIR (a run directory) with the mean of RUN_DIR's last ``count`` checkpoints;
    returns the checkpoint path written."""
    paths = last_checkpoints(run_dir, count)
    trained = load_trained(run_dir)
    readers = [tf.train.load_checkpoint(path) for path in paths]
    for variable in trained.model.weights:
        key = checkpoint_key(f"model.{variable.path.replace('/', '.')}")
        values = [reader.get_tensor(key) for reader in readers]
        if np.issubdtype(values[0].dtype, np.floating):
            variable.assign(np.mean(np.stack(values), axis=0).astype(values[0].dtype))
        else:  # counters and seeds: the newest
            variable.assign(values[-1])
    step = int(readers[-1].get_tensor(checkpoint_key("step")))
    os.makedirs(out_dir, exist_ok=True)
    config = load_run_config(run_dir)
    vocab = copy_vocabularies(config.data.vocab, os.path.join(out_dir, "vocab"))
    save_run_config(config.replace(data=dataclasses.replace(config.data, vocab=vocab)), out_dir)
    checkpoint = variables_checkpoint(trained.model, step=tf.Variable(step, dtype=tf.int64))
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(out_dir, BEST), max_to_keep=1)
    return manager.save(checkpoint_number=step)

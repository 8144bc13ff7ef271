"""Checkpoint averaging on a tiny trained run (fixture of tests/trainer_test.py)."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from trainer_test import data_dir, tiny_config  # noqa: E402,F401  (fixture)

pytestmark = pytest.mark.slow


def test_average_of_the_last_checkpoints_is_a_run_directory(data_dir, tmp_path):  # noqa: F811
    from tablegen_tf.config import ConfigError
    from tablegen_tf.training.averaging import average_checkpoints, last_checkpoints
    from tablegen_tf.training.trainer import Trainer, load_trained

    run = str(tmp_path / "run")
    Trainer(tiny_config(data_dir, max_steps=6), run).train(progress=False)  # checkpoints at 2, 4, 6
    paths = last_checkpoints(run, 2)
    out = str(tmp_path / "avg")
    average_checkpoints(run, 2, out)
    averaged = load_trained(out)
    assert averaged.checkpoint.endswith("ckpt-6") and os.path.dirname(averaged.config.data.vocab) == out
    readers = [tf.train.load_checkpoint(p) for p in paths]
    for variable in averaged.model.weights:
        key = "model.." + variable.path.replace("/", "..") + "/.ATTRIBUTES/VARIABLE_VALUE"
        expected = (readers[0].get_tensor(key) + readers[1].get_tensor(key)) / 2
        np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-6)
    with pytest.raises(ConfigError, match="holds 3 checkpoints"):
        last_checkpoints(run, 4)

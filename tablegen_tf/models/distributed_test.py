"""2-replica MirroredStrategy on 2 logical CPUs.  The logical devices must be configured
before TF initialises, so the training runs in a fresh subprocess."""

import json
import os
import subprocess
import sys

import numpy as np

SCRIPT = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from tablegen_tf.layers.testing import SIZES, random_batch
from tablegen_tf.models import build_model

TINY = dict(hidden_size=8, num_layers=2, word_dim=6, field_dim=3, value_dim=4, position_dim=2,
            entity_dim=2, group_dim=2, dropout=0.1)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
dataset = tf.data.Dataset.from_tensors(random_batch(batch_size=4)).repeat()
result = {"replicas": strategy.num_replicas_in_sync}
for name in ("encdec-copy", "ncp"):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = build_model(name, {**TINY, **({"max_plan_length": 4} if name == "ncp" else {})}, SIZES,
                            {"max_position": 5})
        model.compile(optimizer=keras.optimizers.Adam(0.01))
    history = model.fit(dataset, steps_per_epoch=4, epochs=1, verbose=0, shuffle=False)
    result[name + "/fit"] = history.history["loss"]

    @tf.function
    def train_step(batch):
        def replica_step(batch):
            with tf.GradientTape() as tape:
                loss = model.compute_loss_from_batch(batch, training=True)
                scaled = loss / strategy.num_replicas_in_sync
            grads = tape.gradient(scaled, model.trainable_variables)
            model.optimizer.apply(grads, model.trainable_variables)
            return scaled
        return strategy.reduce("SUM", strategy.run(replica_step, (batch,)), axis=None)

    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    result[name + "/custom"] = [float(train_step(next(iterator))) for _ in range(4)]
print("RESULT " + json.dumps(result))
"""


def test_two_replica_mirrored_strategy_trains():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["replicas"] == 2
    for name in ("encdec-copy", "ncp"):
        fit, custom = result[name + "/fit"], result[name + "/custom"]
        assert np.all(np.isfinite(fit + custom)), result
        assert custom[-1] < custom[0], result  # still learning after fit

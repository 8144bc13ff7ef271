"""Tiny random batches laid out as in tablegen_tf/data/CONTRACT.md (tests only)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

SIZES = {"words": 30, "fields": 7, "entities": 6, "groups": 4}


def random_batch(batch_size=3, num_records=6, target_length=7, plan_length=4, max_position=5,
                 sizes=SIZES, seed=0):
    """Padded records (example b has num_records - b real ones), targets that partly copy
    record values (some of them <unk> = OOV), copy_mask by value equality, a gold plan."""
    rng = np.random.default_rng(seed)
    b, r, t = batch_size, num_records, target_length
    real = np.arange(r)[None, :] < (r - np.arange(b))[:, None]
    ints = lambda high, low=2: np.where(real, rng.integers(low, high, (b, r)), 0)  # noqa: E731
    value = ints(sizes["words"], low=4)
    value[:, 0] = 1  # first record of every table has an OOV value
    lengths = t - np.arange(b) % 3
    out = rng.integers(4, sizes["words"], (b, t))
    copied = rng.random((b, t)) < 0.5
    pick = rng.integers(0, r - b + 1, (b, t))  # indices real in every example
    out = np.where(copied, np.take_along_axis(value, pick, 1), out)
    pos = np.arange(t)[None, :]
    out = np.where(pos < lengths[:, None] - 1, out, np.where(pos == lengths[:, None] - 1, 3, 0))
    target_in = np.concatenate([np.full((b, 1), 2), out[:, :-1]], 1) * (pos < lengths[:, None])
    copy_mask = (out[:, :, None] == value[:, None, :]) & real[:, None, :] & (out[:, :, None] > 3)
    plan = np.full((b, plan_length), -1)
    for i in range(b):
        n = rng.integers(1, plan_length + 1)
        plan[i, :n] = rng.choice(int(real[i].sum()), n)
    batch = {
        "record_field": ints(sizes["fields"]),
        "record_value": value,
        "record_pos_start": ints(max_position + 1, low=1),
        "record_pos_end": ints(max_position + 1, low=1),
        "record_entity": ints(sizes["entities"]),
        "record_group": ints(sizes["groups"]),
        "record_mask": real,
        "target_in": target_in,
        "target_out": out,
        "target_mask": pos < lengths[:, None],
        "copy_mask": copy_mask.astype(np.float32),
        "content_plan": plan,
        "content_plan_mask": plan >= 0,
    }
    batch = {k: tf.constant(v, tf.bool if v.dtype == bool else (tf.float32 if v.dtype.kind == "f" else tf.int32))
             for k, v in batch.items()}
    batch["record_value_text"] = tf.strings.as_string(batch["record_value"])
    return batch


def make_train_step(model, optimizer):
    """A compiled train step on contract batches (loss from the model, plain gradients)."""
    import tensorflow as tf

    @tf.function
    def train_step(batch):
        with tf.GradientTape() as tape:
            loss = model.compute_loss_from_batch(batch, training=True)
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return loss

    return train_step

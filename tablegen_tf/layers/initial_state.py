"""Decoder initial state from entity-pooled record encodings (Wiseman et al. 2017).

Wiseman mean-pools the records of each entity, then pools over entities and
projects with a one-layer MLP.  The thesis approximates the entity pooling by
mean pooling with stride 22 (exact for players, approximate for teams); we pool
per real entity id, exactly: with n_j the number of (real) records sharing
record j's entity id and E the number of distinct entities,

    mean over entities of the entity means = (1/E) sum_e (1/n_e) sum_{j in e} r_j
                                           = sum_j r_j / n_j  /  sum_j 1 / n_j,

so only the per-record entity counts are needed (one [B, R, R] id comparison,
no matmul).  Corpora without entities (all ids <none>) get the plain mean.
Unknown entity ids (1 = OOV) are pooled together as one entity.

The projection (Dense, tanh) yields the initial attentional vector h~_0
(thesis: "one of the initial states of the LSTM mimics the last attentional
vector") and (h, c) for every LSTM layer, as a flat tuple
``(h~_0, h_1, c_1, ..., h_L, c_L)``, the decoder state layout.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tablegen_tf.layers.attention import weighted_sum


def entity_pooled_mean(r_hat, entity, mask):
    """r_hat [B,R,H], entity [B,R] int, mask [B,R] bool -> [B,H] float32 mean of entity means."""
    r_hat = tf.cast(r_hat, tf.float32)
    same = tf.equal(entity[:, :, None], entity[:, None, :]) & mask[:, None, :]
    count = tf.reduce_sum(tf.cast(same, r_hat.dtype), axis=-1)  # n_j (>= 1 for real j)
    weight = tf.math.divide_no_nan(tf.cast(mask, r_hat.dtype), count)  # 1/n_j, 0 for pads
    total = tf.reduce_sum(weight, axis=-1, keepdims=True)  # E
    # [B,1,R] x [B,R,H] batched matmul: oneDNN's Einsum of the same product costs ~5 ms per
    # call (primitive setup) on a one-table request, more than the whole encoder.
    return tf.math.divide_no_nan(weighted_sum(weight, r_hat), total)


@keras.saving.register_keras_serializable(package="tablegen")
class EntityMeanInitialState(keras.layers.Layer):
    """(r_hat, entity, mask) -> (h~_0, h_1, c_1, ..., h_L, c_L), each [B, units]."""

    def __init__(self, units, num_layers=2, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.num_layers = num_layers
        self.projection = keras.layers.Dense(
            (2 * num_layers + 1) * units, activation="tanh", name="projection"
        )

    def build(self, memory_shape, entity_shape=None, memory_mask_shape=None):
        self.projection.build((None, memory_shape[-1]))

    def call(self, memory, entity, memory_mask):
        pooled = entity_pooled_mean(memory, entity, memory_mask)
        return tuple(tf.split(self.projection(pooled), 2 * self.num_layers + 1, axis=-1))

    def get_config(self):
        return {**super().get_config(), "units": self.units, "num_layers": self.num_layers}

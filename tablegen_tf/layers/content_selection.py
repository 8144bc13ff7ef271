"""Content selection gate (Puduppully et al. 2019; thesis sec. "Content Selection").

    alpha_{t,k} = r_t^T W_a r_k   for k != t    (score: Luong "general", as in Puduppully)
    beta_t      = softmax(alpha_t)                (diagonal and padding masked)
    gamma_t     = sum_i beta_{t,i} r_i
    r^att_t     = sigmoid(W_cs [r_t; gamma_t])
    r^cs_t      = r^att_t * r_t

A table with a single real record has nothing to attend to: its gamma is 0.
Padding records stay zero.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tablegen_tf.layers.attention import dense, masked_log_softmax


@keras.saving.register_keras_serializable(package="tablegen")
class ContentSelectionGate(keras.layers.Layer):
    """call(records [B,R,H], record_mask [B,R]) -> r_cs [B,R,H]."""

    def build(self, records_shape, record_mask_shape=None):
        dim = records_shape[-1]
        self.score_kernel = self.add_weight(name="score_kernel", shape=(dim, dim))
        self.gate = keras.layers.Dense(dim, activation="sigmoid", name="gate")
        self.gate.build((None, None, 2 * dim))

    def call(self, records, record_mask):
        scores = tf.matmul(dense(records, self.score_kernel), records, transpose_b=True)
        size = tf.shape(records)[1]
        others = ~tf.eye(size, dtype=tf.bool)[None] & record_mask[:, None, :]  # k != t, k real
        beta = tf.exp(masked_log_softmax(scores, others))
        beta = tf.cast(beta * tf.cast(tf.reduce_any(others, -1, keepdims=True), beta.dtype), records.dtype)
        gamma = tf.matmul(beta, records)
        gated = self.gate(tf.concat([records, gamma], axis=-1)) * records
        return gated * tf.cast(record_mask, records.dtype)[..., None]

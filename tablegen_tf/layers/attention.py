"""Attention over a memory of encoded records (Luong 2015, Bahdanau 2015).

Every attention splits into ``keys(memory)`` (precomputed once per example, so
the decoder loop does no memory-sized matmul per step) and
``attend(query, keys, memory, mask)``.  ``query`` is ``[B, U]`` (one decoder
step) or ``[B, T, U]`` (all steps at once, e.g. the copy attention, which does
not feed back into the recurrence and is therefore computed after the loop).
For a single step, scores are a matvec and the context a [1,R]x[R,D] batched
matmul: the fastest of the CPU formulations we measured (oneDNN's BatchMatMul
with a single query row [1,U]x[U,R] is 2-3x slower, reduce_sum of a broadcast
product too).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tablegen_tf.constants import MASKED_LOGIT



def masked_log_softmax(logits, mask):
    """float32 log_softmax over the last axis; ``mask`` (bool, broadcastable) False -> ~0 prob."""
    return tf.nn.log_softmax(_mask(tf.cast(logits, tf.float32), mask))


def _mask(scores, mask):
    return tf.where(mask, scores, tf.cast(MASKED_LOGIT, scores.dtype))


def _step_mask(query, memory_mask):
    return memory_mask if query.shape.rank == 2 else memory_mask[:, None, :]


def dense(x, kernel):
    """x [..., D] @ kernel [D, U] as ONE 2-D matmul (tf.matmul of a 3-D by a 2-D tensor is a
    broadcast BatchMatMul, several times slower on CPU)."""
    return tf.tensordot(x, tf.cast(kernel, x.dtype), axes=[[-1], [0]])


def dot_scores(query, keys):
    """query [B,U] or [B,T,U], keys [B,R,U] -> [B,R] or [B,T,R]."""
    if query.shape.rank == 2:
        return tf.linalg.matvec(keys, query)
    return tf.matmul(query, keys, transpose_b=True)


def weighted_sum(probs, memory):
    """probs [B,R], memory [B,R,D] -> [B,D]."""
    return tf.matmul(probs[:, None, :], memory)[:, 0]


class _Attention(keras.layers.Layer):
    """Shared masking / context code; subclasses implement ``keys`` and ``scores``."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def call(self, query, memory, memory_mask):
        return self.attend(query, self.keys(memory), memory, memory_mask)

    def attend(self, query, keys, memory, memory_mask):
        """-> (context [B,(T,)D], probs [B,(T,)R])."""
        scores = tf.cast(self.scores(query, keys), tf.float32)  # softmax in float32
        probs = tf.cast(tf.nn.softmax(_mask(scores, _step_mask(query, memory_mask))), memory.dtype)
        if query.shape.rank == 2:
            return weighted_sum(probs, memory), probs
        return tf.matmul(probs, memory), probs

    def log_probs(self, query, keys, memory_mask):
        """Masked log attention weights [B,(T,)R] (the copy attention needs logs)."""
        return masked_log_softmax(self.scores(query, keys), _step_mask(query, memory_mask))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package="tablegen")
class LuongAttention(_Attention):
    """Luong et al. 2015, eq. 8: score(h_t, r_s) = h_t^T W_a r_s ("general") or h_t^T r_s ("dot").

    ``units`` is the query size.  For "general" the keys W_a r_s are precomputed
    once; "dot" needs memory size == query size.
    """

    def __init__(self, units, score="general", **kwargs):
        super().__init__(units, **kwargs)
        if score not in ("general", "dot"):
            raise ValueError(f"unknown Luong score {score!r}")
        self.score = score

    def build(self, query_shape, memory_shape):
        if self.score == "general":
            self.kernel = self.add_weight(
                name="kernel", shape=(memory_shape[-1], self.units), initializer="glorot_uniform"
            )

    def keys(self, memory):
        return dense(memory, self.kernel) if self.score == "general" else memory

    def scores(self, query, keys):
        return dot_scores(query, keys)

    def get_config(self):
        return {**super().get_config(), "score": self.score}


@keras.saving.register_keras_serializable(package="tablegen")
class BahdanauAttention(_Attention):
    """Bahdanau et al. 2015 additive score: v^T tanh(W_k r_s + W_q q).

    The query is whatever the caller passes (our decoders pass the current top
    LSTM state h_t, Luong's "concat" placement, not Bahdanau's h_{t-1}).
    """

    def build(self, query_shape, memory_shape):
        self.memory_kernel = self.add_weight(
            name="memory_kernel", shape=(memory_shape[-1], self.units), initializer="glorot_uniform"
        )
        self.query_kernel = self.add_weight(
            name="query_kernel", shape=(query_shape[-1], self.units), initializer="glorot_uniform"
        )
        self.v = self.add_weight(name="v", shape=(self.units,), initializer="glorot_uniform")

    def keys(self, memory):
        return dense(memory, self.memory_kernel)

    def scores(self, query, keys):
        q = dense(query, self.query_kernel)  # [B, (T,) U]
        if query.shape.rank == 2:
            return tf.reduce_sum(tf.tanh(keys + q[:, None, :]) * tf.cast(self.v, q.dtype), axis=-1)
        return tf.reduce_sum(tf.tanh(keys[:, None] + q[:, :, None]) * tf.cast(self.v, q.dtype), axis=-1)


def make_attention(kind, units, **kwargs):
    """'general' | 'dot' (Luong) | 'bahdanau'."""
    if kind == "bahdanau":
        return BahdanauAttention(units, **kwargs)
    return LuongAttention(units, score=kind, **kwargs)

"""Content planning (Puduppully et al. 2019): a pointer network over records.

Memory of the pointer: [r^cs_1 .. r^cs_R; EOS; BOS] with learned EOS / BOS
vectors.  Index R is EOS (pointable: it ends the plan), index R + 1 is BOS
(the first input, never pointable).  The LSTM starts from the mean of the
(real) r^cs as both h_0 and c_0 (Puduppully's MeanEncoder), its input at step
t is the memory vector of the record pointed at t - 1, and

    p(z_t = k | z_<t) = softmax_k( h_t^T W_p m_k )    (attention used as pointer)

A gold plan ``content_plan`` [B, P] (-1 padded) becomes plan_in = [BOS, z_1..z_n]
and plan_out = [z_1..z_n, EOS] ([B, P + 1]).

The text decoder of NCP reads the plan through ``PlanEncoder``: a bidirectional
LSTM over the r^cs of the planned records (units // 2 per direction, OpenNMT's
brnn convention used by Puduppully's code, so its output size is ~units).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tablegen_tf.constants import MASKED_LOGIT
from tablegen_tf.layers.attention import LuongAttention


def plan_targets(content_plan, num_records):
    """content_plan [B,P] (-1 pad) -> (plan_in, plan_out, plan_out_mask), each [B, P+1]."""
    valid = content_plan >= 0
    length = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1, keepdims=True)
    plan = tf.pad(tf.where(valid, content_plan, 0), [[0, 0], [0, 1]])
    position = tf.range(tf.shape(plan)[1])[None, :]
    plan_out = tf.where(position < length, plan, tf.where(position == length, num_records, 0))
    plan_in = tf.concat([tf.fill([tf.shape(plan)[0], 1], num_records + 1), plan[:, :-1]], axis=1)
    return plan_in, plan_out, position <= length


@keras.saving.register_keras_serializable(package="tablegen")
class ContentPlanner(keras.layers.Layer):
    """Pointer network. call(records [B,R,H], record_mask [B,R], plan_in [B,P1])
    -> log-probs [B, P1, R + 1] over records and EOS (index R)."""

    def build(self, records_shape, record_mask_shape=None, plan_in_shape=None):
        dim = records_shape[-1]
        self.bos = self.add_weight(name="bos", shape=(dim,), initializer="random_normal")
        self.eos = self.add_weight(name="eos", shape=(dim,), initializer="random_normal")
        self.lstm = keras.layers.LSTM(dim, return_sequences=True, name="lstm")
        self.lstm.build((None, None, dim))
        self.pointer = LuongAttention(dim, name="pointer")
        self.pointer.build((None, dim), (None, None, dim))

    def memory(self, records, record_mask):
        """-> (memory [B,R+2,H], pointable mask [B,R+2], keys)."""
        batch = tf.shape(records)[0]
        specials = tf.tile(tf.stack([self.eos.value, self.bos.value])[None], [batch, 1, 1])
        memory = tf.concat([records, tf.cast(specials, records.dtype)], axis=1)
        pointable = tf.concat([record_mask, tf.ones([batch, 1], tf.bool), tf.zeros([batch, 1], tf.bool)], 1)
        return memory, pointable, self.pointer.keys(memory)

    def initial_state(self, records, record_mask):
        mask = tf.cast(record_mask, tf.float32)[..., None]
        total = tf.reduce_sum(tf.cast(records, tf.float32) * mask, 1)
        mean = tf.cast(tf.math.divide_no_nan(total, tf.reduce_sum(mask, 1)), records.dtype)
        return [mean, mean]

    def call(self, records, record_mask, plan_in):
        memory, pointable, keys = self.memory(records, record_mask)
        inputs = tf.gather(memory, plan_in, batch_dims=1)
        states = self.lstm(inputs, initial_state=self.initial_state(records, record_mask))
        return self._point(states, keys, pointable)

    def _point(self, query, keys, pointable):
        """query [B,(T,)H] -> log-probs [B,(T,)R+1] (BOS, the last memory item, dropped)."""
        return self.pointer.log_probs(query, keys, pointable)[..., :-1]

    def step(self, prev_index, state, memory, pointable, keys):
        """One pointer step: prev_index [N] -> (log_probs [N, R+1], new_state)."""
        inputs = tf.gather(memory, prev_index, batch_dims=1)
        output, state = self.lstm.cell(inputs, state)
        return self._point(output, keys, pointable), state


@keras.saving.register_keras_serializable(package="tablegen")
class PlanEncoder(keras.layers.Layer):
    """call(records [B,R,H], plan [B,P] (-1 pad)) -> (encodings [B,P,2*(units//2)], plan_mask)."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.rnn = keras.layers.Bidirectional(
            keras.layers.LSTM(units // 2, return_sequences=True), name="bilstm"
        )

    def build(self, records_shape, plan_shape=None):
        self.rnn.build((None, None, records_shape[-1]))

    def call(self, records, plan):
        plan_mask = plan >= 0
        planned = tf.gather(records, tf.maximum(plan, 0), batch_dims=1)
        encoded = self.rnn(planned, mask=plan_mask)
        return encoded * tf.cast(plan_mask, encoded.dtype)[..., None], plan_mask

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def gather_plan(values, plan, axis=1):
    """values [B, R, ...] (or [B, T, R] with axis=2) gathered at plan [B,P] (-1 -> 0, caller masks)."""
    return tf.gather(values, tf.maximum(plan, 0), axis=axis, batch_dims=1)


__all__ = ["ContentPlanner", "PlanEncoder", "plan_targets", "gather_plan"]

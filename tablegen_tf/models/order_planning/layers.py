"""The dispatcher and copy layers of the order-planning model (Sha et al. 2018).

C table tokens (content words, each with its field), encoder states h_i [B,C,H],
field embeddings f_i [B,C,Df].  Every layer works on one step ([B, ...]) and, where the
inputs allow it, on all steps at once ([B, T, ...]).

Under a mixed policy (``model.dtype: mixed_bfloat16``) matmuls run in the compute dtype
(bfloat16) with float32 weights; attention distributions (alpha), scores before a softmax
and the hybrid gate are float32.  Methods other than ``call`` (keys, word parts, the gate)
run outside Keras' autocasting, so they cast their weights to their inputs' dtype.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tablegen_tf.constants import MASKED_LOGIT
from tablegen_tf.layers.lstm_decoder import _unit_forget_bias, lstm_gates


def masked_softmax(scores, mask):
    """softmax over the last axis (table tokens) with padding masked; mask [B,C] broadcasts."""
    scores = tf.cast(scores, tf.float32)
    if scores.shape.rank == 3:
        mask = mask[:, None, :]
    return tf.nn.softmax(tf.where(mask, scores, MASKED_LOGIT), axis=-1)


@keras.saving.register_keras_serializable(package="tablegen")
class ContentAttention(keras.layers.Layer):
    """Content-based attention with field information (eq. 5-7).

        a^(f)_{t,i} = f_i^T W^(f) q_t + b^(f)       (eq. 5)
        a^(c)_{t,i} = h_i^T W^(c) q_t + b^(c)       (eq. 6)
        alpha^content_{t,i} = softmax_i(a^(f)_{t,i} * a^(c)_{t,i})   (eq. 7)

    The paper's query q_t is y_{t-1} (the embedding of the previous word); the Table 4
    ablation appends the last step's attention-weighted field embedding to it.
    """

    def __init__(self, query_dim, **kwargs):
        super().__init__(**kwargs)
        self.query_dim = query_dim

    def build(self, field_shape, memory_shape):
        q = self.query_dim
        self.field_kernel = self.add_weight(name="field_kernel", shape=(field_shape[-1], q))  # W^(f)
        self.field_bias = self.add_weight(name="field_bias", shape=(), initializer="zeros")  # b^(f)
        self.content_kernel = self.add_weight(name="content_kernel", shape=(memory_shape[-1], q))  # W^(c)
        self.content_bias = self.add_weight(name="content_bias", shape=(), initializer="zeros")  # b^(c)

    def keys(self, fields, memory):
        """(f_i^T W^(f), h_i^T W^(c)) [B,C,Q] each: once per table."""
        return (tf.matmul(fields, tf.cast(self.field_kernel, fields.dtype)),
                tf.matmul(memory, tf.cast(self.content_kernel, memory.dtype)))

    def call(self, query, keys, mask):
        """query [B,Q] or [B,T,Q] -> alpha^content [B,C] or [B,T,C]."""
        field_keys, content_keys = keys
        if query.shape.rank == 2:
            field_score = tf.einsum("bcq,bq->bc", field_keys, query) + self.field_bias  # eq. 5
            content_score = tf.einsum("bcq,bq->bc", content_keys, query) + self.content_bias  # eq. 6
        else:
            field_score = tf.einsum("bcq,btq->btc", field_keys, query) + self.field_bias  # eq. 5
            content_score = tf.einsum("bcq,btq->btc", content_keys, query) + self.content_bias  # eq. 6
        # eq. 7: the product of the two scores and the softmax in float32
        return masked_softmax(tf.cast(field_score, tf.float32) * tf.cast(content_score, tf.float32), mask)

    def get_config(self):
        return {**super().get_config(), "query_dim": self.query_dim}


@keras.saving.register_keras_serializable(package="tablegen")
class LinkAttention(keras.layers.Layer):
    """Link-based attention (eq. 8-9) with the trainable link matrix L in R^{nf x nf}.

        alpha^link_{t,i} = softmax_i( sum_j alpha_{t-1,j} L[f_j, f_i] )   (eq. 8-9)

    L starts at zero (uniform link attention): the paper does not say how it is
    initialised, and zero lets the learnt entries be read directly as field transitions.

    float32 under any model policy: the scores of eq. 8 are a cheap [C]x[C,C] product per
    table whose input alpha_{t-1} feeds back through time; L is never autocast (also not
    when ``table_links`` runs inside the model's bfloat16 autocasting).
    """

    def __init__(self, num_fields, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.num_fields = num_fields

    def build(self, input_shape=None):
        self.link = self.add_weight(name="link_matrix", shape=(self.num_fields, self.num_fields),
                                    initializer="zeros", autocast=False)  # L

    def table_links(self, field_ids):
        """L[f_j, f_i] of one table: [B,C,C] (rows j = from, columns i = to)."""
        rows = tf.gather(self.link, field_ids)  # [B,C(j),nf]
        return tf.gather(rows, field_ids, axis=2, batch_dims=1)  # [B,C(j),C(i)]

    def call(self, previous_alpha, links, mask):
        """previous_alpha [B,C] (the last step's hybrid attention) -> alpha^link [B,C]."""
        scores = tf.einsum("bj,bji->bi", previous_alpha, links)  # eq. 8: sum_j alpha_{t-1,j} L[f_j, f_i]
        return masked_softmax(scores, mask)  # eq. 9

    def get_config(self):
        return {**super().get_config(), "num_fields": self.num_fields}


@keras.saving.register_keras_serializable(package="tablegen")
class HybridGate(keras.layers.Layer):
    """The self-adaptive gate (eq. 10) and the hybrid attention (eq. 11).

        z_t = sigmoid(w^T [h'_{t-1}; e^(f)_t; y_{t-1}] + b)        (eq. 10; b: the bias the paper omits)
        z~_t = 0.2 z_t + 0.5                                          (the paper's adjustment)
        alpha^hybrid_t = z~_t alpha^content_t + (1 - z~_t) alpha^link_t     (eq. 11)

    With ``fixed`` (Figure 3) the gate is the constant z and there are no weights:
    alpha = z alpha^content + (1 - z) alpha^link (z = 0 is link-only, z = 1 content-only).

    The gate's dot products run in the inputs' dtype, its sigmoid in float32; ``call`` mixes
    float32 distributions (``autocast=False``: Keras would cast them to the compute dtype).
    """

    def __init__(self, fixed=None, **kwargs):
        super().__init__(autocast=False, **kwargs)
        self.fixed = fixed

    def build(self, state_shape, field_shape, word_shape):
        if self.fixed is not None:
            return
        self.h_kernel = self.add_weight(name="state_kernel", shape=(state_shape[-1], 1))
        self.f_kernel = self.add_weight(name="field_kernel", shape=(field_shape[-1], 1))
        self.y_kernel = self.add_weight(name="word_kernel", shape=(word_shape[-1], 1))
        self.bias = self.add_weight(name="bias", shape=(1,), initializer="zeros")

    def word_part(self, words):
        """w_y^T y_{t-1} + b for all steps at once: [..., E] -> [...]."""
        return (tf.matmul(words, tf.cast(self.y_kernel, words.dtype)) + tf.cast(self.bias, words.dtype))[..., 0]

    def gate(self, state, field_summary, word_part):
        """-> z~_t [B] (float32): state h'_{t-1} [B,H], e^(f)_t [B,Df], word_part [B]."""
        if self.fixed is not None:
            return tf.fill(tf.shape(state)[:1], tf.constant(self.fixed, tf.float32))
        f32 = lambda x: tf.cast(x, tf.float32)  # noqa: E731
        z = tf.sigmoid(f32(tf.matmul(state, tf.cast(self.h_kernel, state.dtype))[:, 0])
                       + f32(tf.matmul(field_summary, tf.cast(self.f_kernel, field_summary.dtype))[:, 0])
                       + f32(word_part))  # eq. 10
        return 0.2 * z + 0.5

    def call(self, gate, alpha_content, alpha_link):
        return gate[:, None] * alpha_content + (1.0 - gate[:, None]) * alpha_link  # eq. 11

    def get_config(self):
        return {**super().get_config(), "fixed": self.fixed}


@keras.saving.register_keras_serializable(package="tablegen")
class CopyScores(keras.layers.Layer):
    """The copy score of each table token (eq. 15): s_{t,i} = sigmoid(h_i^T W_c) h'_t."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, memory_shape):
        self.kernel = self.add_weight(name="kernel", shape=(memory_shape[-1], self.units))  # W_c

    def keys(self, memory):
        return tf.sigmoid(tf.matmul(memory, tf.cast(self.kernel, memory.dtype)))  # sigmoid(h_i^T W_c) [B,C,H']

    def call(self, states, keys, mask):
        """states h'_t [B,H'] or [B,T,H'] -> s [B,C] or [B,T,C] (0 at padding)."""
        if states.shape.rank == 2:
            return tf.einsum("bch,bh->bc", keys, states) * tf.cast(mask, states.dtype)  # eq. 15
        return tf.einsum("bch,bth->btc", keys, states) * tf.cast(mask, states.dtype)[:, None, :]  # eq. 15

    def get_config(self):
        return {**super().get_config(), "units": self.units}


@keras.saving.register_keras_serializable(package="tablegen")
class DecoderCell(keras.layers.Layer):
    """The decoder RNN step: input layer (eq. 13) and an LSTM (as eq. 1-4).

        x_t = tanh(W_d [a_t; y_{t-1}] + b_d)                      (eq. 13)
        h'_t, c'_t = LSTM(x_t, h'_{t-1}, c'_{t-1})

    W_d is kept as separate blocks so the y_{t-1} block runs once for all steps
    (teacher forcing) outside the time loop.  ``field_input`` adds a block for the
    Table 4 ablation that feeds the last step's weighted field embedding to eq. 13.
    """

    def __init__(self, units, field_input=False, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.field_input = field_input

    def build(self, attention_shape, word_shape, field_shape=None):
        h = self.units
        self.attention_kernel = self.add_weight(name="attention_kernel", shape=(attention_shape[-1], h))  # W_d (a)
        self.word_kernel = self.add_weight(name="word_kernel", shape=(word_shape[-1], h))  # W_d (y)
        if self.field_input:
            self.field_kernel = self.add_weight(name="field_kernel", shape=(field_shape[-1], h))
        self.input_bias = self.add_weight(name="input_bias", shape=(h,), initializer="zeros")  # b_d
        self.kernel = self.add_weight(name="lstm_kernel", shape=(2 * h, 4 * h))
        self.bias = self.add_weight(name="lstm_bias", shape=(4 * h,), initializer=_unit_forget_bias)

    def word_part(self, words):
        """W_d^(y) y_{t-1} + b_d: [..., E] -> [..., H] (all steps at once)."""
        return tf.matmul(words, tf.cast(self.word_kernel, words.dtype)) + tf.cast(self.input_bias, words.dtype)

    def call(self, attention_vector, word_part, state, field_summary=None):
        """-> (h'_t, c'_t); state (h'_{t-1}, c'_{t-1})."""
        pre = tf.matmul(attention_vector, self.attention_kernel) + word_part
        if self.field_input:
            pre = pre + tf.matmul(field_summary, self.field_kernel)
        x = tf.tanh(pre)  # eq. 13
        h, c = state
        return lstm_gates(tf.matmul(tf.concat([x, h], -1), self.kernel) + self.bias, c)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "field_input": self.field_input}

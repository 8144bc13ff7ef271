"""Transformer blocks (Vaswani et al. 2017), pre-layer-norm.

Pre-LN (Xiong et al. 2020) instead of the paper's post-LN: each sublayer reads
LayerNorm(x) and adds its output to the un-normalised residual stream,
x + Dropout(Sublayer(LN(x))), with one final LayerNorm per stack. The gradients at the
bottom layers stay bounded without the paper's long learning-rate warm-up, which is
what a few thousand steps on E2E-sized data can afford.

Every layer's weights are created in ``build`` with explicit names (checkpoints key
variables by path); matmuls of [B, T, D] by a kernel go through ``dense`` (one 2-D
matmul: tf.matmul of a 3-D by a 2-D tensor is a slower broadcast BatchMatMul on CPU).
Softmaxes run in float32 under any dtype policy.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from tablegen_tf.constants import MASKED_LOGIT
from tablegen_tf.layers.attention import dense

LAYER_NORM_EPSILON = 1e-6


def sinusoid(positions, width):
    """Sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
    positions int [...] -> float32 [..., width] (sines and cosines interleaved)."""
    half = width // 2
    rates = tf.exp(tf.range(half, dtype=tf.float32) * (-math.log(10000.0) * 2.0 / width))  # 1 / 10000^(2i/d)
    angles = tf.cast(positions, tf.float32)[..., None] * rates
    pairs = tf.stack([tf.sin(angles), tf.cos(angles)], axis=-1)  # [..., half, 2]
    encoding = tf.reshape(pairs, tf.concat([tf.shape(angles)[:-1], [2 * half]], 0))
    return tf.pad(encoding, [[0, 0]] * (encoding.shape.rank - 1) + [[0, width - 2 * half]])  # odd width


def layer_norm(name):
    return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name=name)


@keras.saving.register_keras_serializable(package="tablegen")
class MultiHeadAttention(keras.layers.Layer):
    """Sec. 3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) and (sec. 3.2.1, eq. 1)
    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.  The heads' projections are one
    [D, D] kernel each (the paper's projections have no bias).

    Split in two so a decoder can cache: ``keys_values(x)`` projects the attended
    sequence once ([B, S, D] each), ``attend(query_input, keys, values, mask)`` the rest."""

    def __init__(self, d_model, num_heads, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads

    def build(self, input_shape=None):
        d = self.d_model
        self.query_kernel = self.add_weight(name="query_kernel", shape=(d, d))
        self.key_value_kernel = self.add_weight(name="key_value_kernel", shape=(d, 2 * d))
        self.output_kernel = self.add_weight(name="output_kernel", shape=(d, d))

    def keys_values(self, x):
        """x [B, S, D] -> (K, V) [B, S, D] each, heads not yet split."""
        keys, values = tf.split(dense(x, self.key_value_kernel), 2, axis=-1)
        return keys, values

    def attend(self, query_input, keys, values, mask):
        """query_input [B, T, D], keys/values [B, S, D], mask bool broadcastable to
        [B, heads, T, S] (False: never attended) -> [B, T, D]."""
        head_dim = self.d_model // self.num_heads
        queries = self._split_heads(dense(query_input, self.query_kernel) * (head_dim ** -0.5))
        scores = tf.matmul(queries, self._split_heads(keys), transpose_b=True)  # [B, H, T, S]
        scores = tf.where(mask, tf.cast(scores, tf.float32), MASKED_LOGIT)
        probs = tf.cast(tf.nn.softmax(scores), values.dtype)
        context = tf.matmul(probs, self._split_heads(values))  # [B, H, T, d_k]
        return dense(self._merge_heads(context), self.output_kernel)

    def _split_heads(self, x):
        """[B, T, D] -> [B, H, T, D / H]."""
        shape = tf.shape(x)
        x = tf.reshape(x, [shape[0], shape[1], self.num_heads, self.d_model // self.num_heads])
        return tf.transpose(x, [0, 2, 1, 3])

    def _merge_heads(self, x):
        """[B, H, T, D / H] -> [B, T, D]."""
        x = tf.transpose(x, [0, 2, 1, 3])
        shape = tf.shape(x)
        return tf.reshape(x, [shape[0], shape[1], self.d_model])

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads}


@keras.saving.register_keras_serializable(package="tablegen")
class FeedForward(keras.layers.Layer):
    """Sec. 3.3, eq. 2: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2."""

    def __init__(self, d_model, ffn_dim, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.ffn_dim = ffn_dim

    def build(self, input_shape=None):
        self.inner_kernel = self.add_weight(name="inner_kernel", shape=(self.d_model, self.ffn_dim))
        self.inner_bias = self.add_weight(name="inner_bias", shape=(self.ffn_dim,), initializer="zeros")
        self.outer_kernel = self.add_weight(name="outer_kernel", shape=(self.ffn_dim, self.d_model))
        self.outer_bias = self.add_weight(name="outer_bias", shape=(self.d_model,), initializer="zeros")

    def call(self, x):
        inner = tf.nn.relu(dense(x, self.inner_kernel) + tf.cast(self.inner_bias, x.dtype))
        return dense(inner, self.outer_kernel) + tf.cast(self.outer_bias, x.dtype)

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "ffn_dim": self.ffn_dim}


@keras.saving.register_keras_serializable(package="tablegen")
class EncoderLayer(keras.layers.Layer):
    """Sec. 3.1 encoder layer, pre-LN: x + SelfAttention(LN(x)), then x + FFN(LN(x)).
    call(x [B, R, D], attention_mask [B, 1, 1, R] over the records) -> [B, R, D]."""

    def __init__(self, d_model, num_heads, ffn_dim, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.ffn_dim, self.dropout = d_model, num_heads, ffn_dim, dropout
        self.self_attention_norm = layer_norm("self_attention_norm")
        self.self_attention = MultiHeadAttention(d_model, num_heads, name="self_attention")
        self.ffn_norm = layer_norm("ffn_norm")
        self.ffn = FeedForward(d_model, ffn_dim, name="ffn")
        self.residual_dropout = keras.layers.Dropout(dropout)  # sec. 5.4, on each sublayer's output

    def build(self, input_shape=None):
        for layer in (self.self_attention_norm, self.ffn_norm):
            layer.build((None, None, self.d_model))
        self.self_attention.build()
        self.ffn.build()

    def call(self, x, attention_mask, training=False):
        normed = self.self_attention_norm(x)
        keys, values = self.self_attention.keys_values(normed)
        x = x + self.residual_dropout(self.self_attention.attend(normed, keys, values, attention_mask),
                                      training=training)
        return x + self.residual_dropout(self.ffn(self.ffn_norm(x)), training=training)

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "ffn_dim": self.ffn_dim, "dropout": self.dropout}


@keras.saving.register_keras_serializable(package="tablegen")
class DecoderLayer(keras.layers.Layer):
    """Sec. 3.1 decoder layer, pre-LN: masked self-attention, attention over the encoder
    output, FFN, each as x + Sublayer(LN(x)).

    The self-attention's keys and values come from the caller (``self_attention_input``
    -> ``self_attention.keys_values``): the whole target in training, a cache of the
    earlier steps in decoding; both then run ``call`` on the same numbers."""

    def __init__(self, d_model, num_heads, ffn_dim, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.ffn_dim, self.dropout = d_model, num_heads, ffn_dim, dropout
        self.self_attention_norm = layer_norm("self_attention_norm")
        self.self_attention = MultiHeadAttention(d_model, num_heads, name="self_attention")
        self.cross_attention_norm = layer_norm("cross_attention_norm")
        self.cross_attention = MultiHeadAttention(d_model, num_heads, name="cross_attention")
        self.ffn_norm = layer_norm("ffn_norm")
        self.ffn = FeedForward(d_model, ffn_dim, name="ffn")
        self.residual_dropout = keras.layers.Dropout(dropout)

    def build(self, input_shape=None):
        for layer in (self.self_attention_norm, self.cross_attention_norm, self.ffn_norm):
            layer.build((None, None, self.d_model))
        for layer in (self.self_attention, self.cross_attention, self.ffn):
            layer.build()

    def self_attention_input(self, x):
        return self.self_attention_norm(x)

    def call(self, x, normed, self_keys, self_values, self_mask, cross_keys, cross_values, cross_mask,
             training=False):
        """x [B, T, D] and normed = self_attention_input(x); self_keys/values [B, S, D] with
        self_mask (causal: position t sees keys <= t); cross_keys/values [B, R, D] of the
        encoder output with cross_mask -> (x [B, T, D], the cross-attention output [B, T, D])."""
        drop = lambda y: self.residual_dropout(y, training=training)  # noqa: E731
        x = x + drop(self.self_attention.attend(normed, self_keys, self_values, self_mask))
        context = self.cross_attention.attend(self.cross_attention_norm(x), cross_keys, cross_values, cross_mask)
        x = x + drop(context)
        return x + drop(self.ffn(self.ffn_norm(x))), context

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "ffn_dim": self.ffn_dim, "dropout": self.dropout}


@keras.saving.register_keras_serializable(package="tablegen")
class RecordEmbedding(keras.layers.Layer):
    """A table record as the encoder's input (mirrors tablegen_tf.layers.RecordEncoder):
    [e_value; e_field; e_p+; e_p-] W + b -> [B, R, d_model]. The value embedding is the
    decoder's word table (passed in by the caller, one table for record and target
    words, so a copied word is fed back as the embedding it had in the table). A table
    is a set of records: no sequence positions besides the records' own p+/p-.
    A characteristic whose dim is 0 is left out."""

    def __init__(self, field_vocab_size, max_position, d_model, field_dim=64, position_dim=16, **kwargs):
        super().__init__(**kwargs)
        self.field_vocab_size = field_vocab_size
        self.max_position = max_position
        self.d_model = d_model
        self.field_dim = field_dim
        self.position_dim = position_dim
        self.embeddings = {}
        if field_dim > 0:
            self.embeddings["record_field"] = keras.layers.Embedding(field_vocab_size, field_dim,
                                                                     name="record_field_embedding")
        if position_dim > 0:
            for key in ("record_pos_start", "record_pos_end"):
                self.embeddings[key] = keras.layers.Embedding(max_position + 1, position_dim, name=f"{key}_embedding")
        self.projection = keras.layers.Dense(d_model, name="projection")

    def build(self, input_shape=None):
        for layer in self.embeddings.values():
            layer.build(None)
        width = self.d_model + sum(layer.output_dim for layer in self.embeddings.values())
        self.projection.build((None, None, width))

    def call(self, batch, value_embeddings):
        embedded = [value_embeddings] + [layer(batch[key]) for key, layer in self.embeddings.items()]
        return self.projection(tf.concat(embedded, axis=-1))

    def get_config(self):
        return {**super().get_config(), **{k: getattr(self, k) for k in (
            "field_vocab_size", "max_position", "d_model", "field_dim", "position_dim")}}

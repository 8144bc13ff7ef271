"""Joint copy (Gu et al. 2016, as used in the thesis; switch as in See et al. 2017).

A second attention over the memory (the copy attention a^copy) points at the
record to copy; a switch p_gen = sigmoid(w^T [h~_t; c_t; emb(y_{t-1})] + b)
(the "FFN" of the thesis, here a single logistic unit) mixes the paths:

    P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{r: value_r = w} a^copy_{t,r}

The copy attention is queried with h~_t.  It does not feed back into the
recurrence, so it is computed for all steps at once after the decoder loop.

Training loss (log space, logsumexp over the records whose value equals the
label, i.e. copy_mask[t, r] = 1):

    -log( p_gen P_vocab(y_t) [vocab credit] + (1 - p_gen) sum_r copy_mask[t,r] a^copy_{t,r} )

Vocab credit rule (the papers leave OOV labels open; this is OpenNMT's
CopyGeneratorLoss with force_copy=False): the vocabulary path gets credit
unless the label is <unk> AND the token can be copied.  So an OOV token that
is in the table is learnt only by copying, and an OOV token that is nowhere in
the table keeps the usual <unk> target (loss stays finite).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tablegen_tf.constants import MASKED_LOGIT, NEG_INF, UNK_ID
from tablegen_tf.layers.attention import make_attention



@keras.saving.register_keras_serializable(package="tablegen")
class JointCopy(keras.layers.Layer):
    """call(h_tilde [B,T,H], context [B,T,D], inputs [B,T,E], memory [B,M,D], memory_mask [B,M])
    -> (copy_log_probs [B,T,M], switch_logit [B,T])."""

    def __init__(self, units, attention="general", **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.attention_kind = attention
        self.attention = make_attention(attention, units, name="copy_attention")
        self.switch = keras.layers.Dense(1, name="switch")

    def build(self, h_tilde_shape, context_shape, inputs_shape, memory_shape, memory_mask_shape=None):
        self.attention.build((None, self.units), memory_shape)
        self.switch.build((None, None, h_tilde_shape[-1] + context_shape[-1] + inputs_shape[-1]))

    def precompute(self, memory):
        return self.attention.keys(memory)

    def call(self, h_tilde, context, inputs, memory, memory_mask, keys=None):
        keys = self.precompute(memory) if keys is None else keys
        copy_log_probs = self.attention.log_probs(h_tilde, keys, memory_mask)
        switch_logit = self.switch(tf.concat([h_tilde, context, inputs], axis=-1))[..., 0]
        return copy_log_probs, switch_logit

    def get_config(self):
        return {**super().get_config(), "units": self.units, "attention": self.attention_kind}


def joint_copy_nll(vocab_logits, labels, switch_logit, copy_log_probs, copy_mask, unk_id=UNK_ID):
    """Per-token NLL [B,T] of the joint copy distribution (see module doc).

    vocab_logits [B,T,V], labels [B,T] int, switch_logit [B,T], copy_log_probs [B,T,M],
    copy_mask [B,T,M] (1.0 where memory item m's value equals label t).
    """
    vocab_logits, switch_logit, copy_log_probs = (
        tf.cast(x, tf.float32) for x in (vocab_logits, switch_logit, copy_log_probs))
    neg = tf.constant(MASKED_LOGIT, tf.float32)
    vocab_log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels, vocab_logits)
    can_copy = copy_mask > 0
    has_copy = tf.reduce_any(can_copy, axis=-1)
    vocab_credit = tf.not_equal(labels, unk_id) | ~has_copy
    gen = tf.where(vocab_credit, tf.math.log_sigmoid(switch_logit) + vocab_log_prob, neg)
    copied = tf.reduce_logsumexp(tf.where(can_copy, copy_log_probs, neg), axis=-1)
    copy = tf.where(has_copy, tf.math.log_sigmoid(-switch_logit) + copied, neg)
    return -_logaddexp(gen, copy)


def smoothed_nll(nll, vocab_logits, epsilon):
    """Label smoothing (Szegedy et al. 2016) as its loss decomposes: (1 - eps) NLL(y) +
    eps CE(u, P_vocab), u uniform over the V words. With copy, the smoothing mass goes to
    the vocabulary softmax only: a uniform target over the extended vocabulary would
    depend on each table's size, and the copy path is what must stay sharp."""
    logits = tf.cast(vocab_logits, tf.float32)
    uniform_ce = tf.reduce_logsumexp(logits, axis=-1) - tf.reduce_mean(logits, axis=-1)
    return (1.0 - epsilon) * nll + epsilon * uniform_ce


def _logaddexp(a, b):
    top = tf.maximum(a, b)
    return top + tf.math.log1p(tf.exp(-tf.abs(a - b)))


def masked_mean(values, mask):
    values = tf.cast(values, tf.float32)
    mask = tf.cast(mask, tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(values * mask), tf.reduce_sum(mask))


def extended_log_probs(vocab_log_probs, switch_logit, copy_probs, memory_value, memory_record, num_records):
    """Decoding distribution over the extended vocabulary V + R (CONTRACT.md).

    vocab_log_probs [N,V], switch_logit [N], copy_probs [N,M] over memory items,
    memory_value [N,M] word ids of the items' values, memory_record [N,M] record
    index of each item (identity for record memories, plan -> record for NCP).
    Copy mass of in-vocabulary values is folded into their vocab ids; items with
    <unk>/<pad> values go to slot V + record; a slot without probability mass is -inf.

    Decoding runs this every step on N = batch x beam rows, so only the generation path
    touches all V + R columns (one add and a pad); the copy path works on the M item
    slots and is scattered in (the same sums and logaddexp as a dense [N, V + R] copy
    distribution would give: items sharing a slot are summed in item order).
    """
    vocab_log_probs, switch_logit, copy_probs = (
        tf.cast(x, tf.float32) for x in (vocab_log_probs, switch_logit, copy_probs))
    rows, items = tf.shape(copy_probs)[0], tf.shape(copy_probs)[1]
    slot = tf.where(memory_value > UNK_ID, memory_value, tf.shape(vocab_log_probs)[1] + memory_record)  # [N, M]
    # Copy mass per slot: the segment of an item is the first item of its row with its slot.
    first = tf.argmax(tf.cast(tf.equal(slot[:, :, None], slot[:, None, :]), tf.int32), axis=-1,
                      output_type=slot.dtype)  # [N, M]
    segments = first + tf.range(rows, dtype=slot.dtype)[:, None] * tf.cast(items, slot.dtype)
    folded = tf.gather(tf.math.unsorted_segment_sum(tf.reshape(copy_probs, [-1]), tf.reshape(segments, [-1]),
                                                    rows * items), segments)  # [N, M]
    generated = tf.pad(tf.math.log_sigmoid(switch_logit)[:, None] + vocab_log_probs, [[0, 0], [0, num_records]],
                       constant_values=NEG_INF)  # [N, V + R]
    generated_at_slot = tf.gather(generated, slot, batch_dims=1)
    copied = tf.math.log_sigmoid(-switch_logit)[:, None] + tf.math.log(tf.maximum(folded, 1e-30))
    joint = tf.where(folded > 0, _logaddexp(generated_at_slot, copied), generated_at_slot)
    row = tf.broadcast_to(tf.range(rows, dtype=slot.dtype)[:, None], tf.shape(slot))
    return tf.tensor_scatter_nd_update(generated, tf.stack([row, slot], axis=-1), joint)


def scatter_rows(values, columns, width):
    """out[n, columns[n, m]] += values[n, m]  -> [N, width]."""
    rows = tf.shape(values)[0]
    width = tf.cast(width, columns.dtype)
    segments = columns + tf.range(rows, dtype=columns.dtype)[:, None] * width
    flat = tf.math.unsorted_segment_sum(
        tf.reshape(values, [-1]), tf.reshape(segments, [-1]), rows * width
    )
    return tf.reshape(flat, [rows, width])

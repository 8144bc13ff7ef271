"""Pragmatic rescoring of the kept beams with distractor tables (Shen et al. 2019, S1^D).

A literal speaker S0 (the model, or an ensemble) proposes candidates w for table i; a
listener built from S0 alone asks how well w singles out i among distractor tables D(i):

    L0(i | w) = S0(w | i) / sum_{i' in {i} u D(i)} S0(w | i')     (the listener, uniform prior)
    log S1(w | i) = (1 - alpha) log S0(w | i) + alpha log L0(i | w) + const   (the pragmatic speaker)

Choices where the paper leaves room or differs from our setting:
* Sentence level: the beams one search kept are rescored once (the paper's S1^D is
  incremental, word by word). It costs one teacher-forced pass per (beam, table) and leaves
  the search and the end gate as they are; it runs in the graph, so the SavedModel
  returns what `tablegen evaluate` scores.
* Distractors are *omissions*: one table per attribute with that attribute removed, never
  the entity's ``name``. A text that says the attribute is far likelier under the true
  table than under the one without it, so L0 rewards realising every slot, the failure the
  E2E test set punishes (under-generation). An attribute is removed by masking its records:
  the encoder skips masked records and attention and copy never see them, as if removed.
* The S0 inside L0 is the search's own step distribution (an ensemble's averaged one),
  teacher-forced over each beam's ids, </s> included. (The members' mean text
  log-probability instead, a product of experts, chose the same on the selection split
  within 0.05 BLEU.)
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.constants import BOS_ID
from tablegen_tf.decoding.common import tile_batch

# Never removed: without its name a table describes nothing a text could single out.
KEPT_FIELD = "name"
# At most this many distractors per table (its first attributes in table order): the
# listener's cost grows with them (E2E tables have at most 7 besides the name).
MAX_DISTRACTORS = 12


def attribute_index(fields, mask, kept_id):
    """Field ids [B, R], record mask [B, R] -> (index [B, R]: which distinct attribute of
    its table (first occurrence order) each record belongs to, -1 for masked records and
    ``kept_id``'s; count [B] of such attributes)."""
    eligible = mask & tf.not_equal(fields, kept_id)
    same = tf.equal(fields[:, :, None], fields[:, None, :]) & eligible[:, :, None] & eligible[:, None, :]
    records = tf.shape(fields)[1]
    earlier = tf.linalg.band_part(tf.ones([records, records], tf.bool), -1, 0) & ~tf.eye(records, dtype=tf.bool)
    first = eligible & ~tf.reduce_any(same & earlier[None], axis=2)
    rank = tf.cumsum(tf.cast(first, tf.int32), axis=1) - 1
    first_position = tf.argmax(tf.cast(same, tf.int32), axis=2, output_type=tf.int32)
    index = tf.where(eligible, tf.gather(rank, first_position, batch_dims=1), -1)
    return index, tf.reduce_sum(tf.cast(first, tf.int32), axis=1)


def omission_masks(fields, mask, kept_id):
    """-> (masks [1 + D, B, R]: the table, then the table without its d-th attribute;
    valid [1 + D, B]: that table exists), D = the batch's most attributes, capped."""
    index, count = attribute_index(fields, mask, kept_id)
    distractors = tf.minimum(tf.reduce_max(tf.concat([count, [0]], 0)), MAX_DISTRACTORS)
    removed = tf.concat([[-2], tf.range(distractors)], 0)  # -2 matches no record: the true table
    masks = mask[None] & tf.not_equal(index[None], removed[:, None, None])
    valid = removed[:, None] < tf.minimum(count, MAX_DISTRACTORS)[None]
    return masks, valid


def listener_log_probs(model, variants, valid, ids, lengths):
    """log L0(true table | beam) [B, K].

    ``variants``: the features of the 1 + D tables, table-major ([(1 + D) * B, ...], the true
    tables first), ``valid`` [1 + D, B]; ``ids`` [B, K, T] extended ids over the true
    tables' records (masking keeps record positions, so they read the same in every
    variant), ``lengths`` [B, K] with </s>."""
    tables, batch = tf.shape(valid)[0], tf.shape(valid)[1]
    beams, steps = tf.shape(ids)[1], tf.shape(ids)[2]
    targets = tf.reshape(tf.tile(ids[None], [tables, 1, 1, 1]), [-1, steps])  # [(1+D)*B*K, T]
    limits = tf.reshape(tf.tile(lengths[None], [tables, 1, 1]), [-1])
    scores = tf.reshape(teacher_forced_log_probs(model, variants, targets, limits, beams), [tables, batch, beams])
    scores = tf.where(valid[:, :, None], scores, float("-inf"))
    return scores[0] - tf.reduce_logsumexp(scores, axis=0)


def teacher_forced_log_probs(model, features, targets, lengths, repeats):
    """Sum of log p(target_t | target_<t) [N] by the model's decoding step function, over
    each row's first ``lengths`` ids; ``features`` hold N / ``repeats`` tables, each
    scoring ``repeats`` consecutive rows of ``targets`` [N, T]."""
    memory = model.encode(features, training=False)
    state = tile_batch(model.initial_decoding_state(memory), repeats)
    step_memory = model.decoding_memory(memory)
    step_fn = model.decoding_step_fn(model.tile(memory if step_memory is None else step_memory, repeats))
    rows, steps = tf.shape(targets)[0], tf.shape(targets)[1]
    previous = tf.concat([tf.fill([rows, 1], BOS_ID), targets[:, :-1]], axis=1)

    def body(t, state, total):
        log_probs, state = step_fn(previous[:, t], t, state)
        gold = tf.gather(log_probs, targets[:, t], batch_dims=1)
        return t + 1, state, total + tf.where(t < lengths, gold, 0.0)

    _, _, total = tf.while_loop(lambda t, *_: t < tf.reduce_max(tf.concat([lengths, [0]], 0)), body,
                                (tf.constant(0), state, tf.zeros([rows])), maximum_iterations=steps)
    return total

"""Greedy decoding as one tf.while_loop (graph-mode, SavedModel/TF Serving safe)."""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.decoding import common


def argmax_token(log_probs, step):
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


def greedy_search(step_fn, start_ids, initial_state, max_length, end_id: int, pad_id: int = 0,
                  pick_token=argmax_token):
    """Argmax decoding (or, with another ``pick_token``, one token per row by any rule:
    tablegen_tf.decoding.sampling).

    Args:
      step_fn: ``(prev_ids [B] int32, step int32 scalar, state) -> (log_probs [B, W], state)``
        (the decoding contract in tablegen_tf/data/CONTRACT.md; W may vary per batch).
      start_ids: [B] int32 first inputs (usually <s>).
      initial_state: nested tensors with leading dimension B.
      max_length: int or int32 scalar tensor, maximum number of generated tokens.
      end_id: token that finishes a sequence (it is written and counted in ``lengths``).
      pad_id: emitted after a sequence finished.
      pick_token: ``(log_probs [B, W] float32, step) -> token [B] int32``.

    Returns:
      ids [B, T] int32 with T = steps actually run (<= max_length; the loop stops as
      soon as every row emitted end_id), lengths [B] int32 (including end_id),
      scores [B] float32 sum of the chosen tokens' log-probs (as ``step_fn`` gave them).
    """
    start_ids = tf.convert_to_tensor(start_ids, tf.int32)
    max_length = tf.convert_to_tensor(max_length, tf.int32)
    batch_size = tf.shape(start_ids)[0]

    def cond(t, prev_ids, state, finished, lengths, scores, ids_ta):
        return (t < max_length) & ~tf.reduce_all(finished)

    def body(t, prev_ids, state, finished, lengths, scores, ids_ta):
        log_probs, state = step_fn(prev_ids, t, state)  # [B, W]
        log_probs = tf.cast(log_probs, tf.float32)
        token = pick_token(log_probs, t)  # [B]
        best = tf.gather(log_probs, token, batch_dims=1)  # [B]
        # Finished rows keep their score and emit padding.
        token = tf.where(finished, pad_id, token)
        scores = scores + tf.where(finished, 0.0, best)
        lengths = lengths + tf.cast(~finished, tf.int32)
        finished = finished | tf.equal(token, end_id)
        return t + 1, token, state, finished, lengths, scores, ids_ta.write(t, token)

    loop_vars = (
        tf.constant(0),
        start_ids,
        initial_state,
        tf.zeros([batch_size], tf.bool),
        tf.zeros([batch_size], tf.int32),
        tf.zeros([batch_size], tf.float32),
        tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None]),
    )
    invariants = common.loop_invariants(loop_vars)
    _, _, _, _, lengths, scores, ids_ta = tf.while_loop(
        cond, body, loop_vars, shape_invariants=invariants, maximum_iterations=max_length
    )
    ids = tf.transpose(common.stack_time_major(ids_ta, [batch_size]))  # [B, T]
    return ids, lengths, scores


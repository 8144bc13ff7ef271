"""Greedy decoding as one tf.while_loop (graph-mode, SavedModel/TF Serving safe)."""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.decoding import common


def argmax_token(log_probs, step, rows):
    return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


def greedy_search(step_fn, start_ids, initial_state, max_length, end_id: int, pad_id: int = 0,
                  pick_token=argmax_token, step_memory=None):
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
      pick_token: ``(log_probs [R, W] float32, step, rows [R] int32: which of the B rows they
        are) -> token [R] int32``.
      step_memory: ``(memory, make_step_fn)`` as beam_search takes it (memory: nested [B, ...];
        ``make_step_fn(memory rows)`` -> the step function of those rows): then finished rows
        leave the batch, each step runs on the unfinished rows only. The output is the same.

    Returns:
      ids [B, T] int32 with T = steps actually run (<= max_length; the loop stops as
      soon as every row emitted end_id), lengths [B] int32 (including end_id),
      scores [B] float32 sum of the chosen tokens' log-probs (as ``step_fn`` gave them).
    """
    start_ids = tf.convert_to_tensor(start_ids, tf.int32)
    max_length = tf.convert_to_tensor(max_length, tf.int32)
    batch_size = tf.shape(start_ids)[0]

    def picked(step, prev_ids, t, state, rows):
        log_probs, state = step(prev_ids, t, state)
        log_probs = tf.cast(log_probs, tf.float32)  # [R, W]
        token = pick_token(log_probs, t, rows)  # [R]
        return token, tf.gather(log_probs, token, batch_dims=1), state

    def every_row(prev_ids, t, state):
        return picked(step_fn, prev_ids, t, state, tf.range(batch_size))

    def running_rows(prev_ids, t, state, finished):
        """The unfinished rows' tokens, log-probs and states scattered into [B] (finished
        rows: any token, log-prob 0, their old state; the body ignores all three)."""
        memory, make_step_fn = step_memory
        running = tf.cast(tf.where(~finished)[:, 0], tf.int32)  # [R]

        def rows_of(x):
            return tf.gather(x, running)

        step = make_step_fn(tf.nest.map_structure(rows_of, memory))
        token, best, new_state = picked(step, rows_of(prev_ids), t, tf.nest.map_structure(rows_of, state), running)
        at = running[:, None]
        token = tf.tensor_scatter_nd_update(tf.fill([batch_size], pad_id), at, token)
        best = tf.tensor_scatter_nd_update(tf.zeros([batch_size]), at, best)
        state = tf.nest.map_structure(lambda old, new: tf.tensor_scatter_nd_update(old, at, new), state, new_state)
        return token, best, state

    def cond(t, prev_ids, state, finished, lengths, scores, ids_ta):
        return (t < max_length) & ~tf.reduce_all(finished)

    def body(t, prev_ids, state, finished, lengths, scores, ids_ta):
        if step_memory is None:
            token, best, state = every_row(prev_ids, t, state)
        else:  # the gathers only pay once a row has finished
            token, best, state = common.switch_case(
                tf.cast(tf.reduce_any(finished), tf.int32),
                [lambda: every_row(prev_ids, t, state), lambda: running_rows(prev_ids, t, state, finished)])
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

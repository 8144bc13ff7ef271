"""Ancestral sampling with epsilon truncation (Hewitt et al. 2022), as one tf.while_loop.

Samples of a model's own distribution are what minimum Bayes risk decoding weighs
candidates against (tablegen_tf.reranking; Freitag et al. 2023 found epsilon sampling's the
best evidence): each step draws from ``softmax(log_probs / temperature)`` after dropping the
tokens whose probability is below ``epsilon`` (the most probable token always stays).

A table's samples must not depend on the other tables of its batch, or served text would
differ from evaluated text. So the draw is Gumbel-max with noise that depends only on
(seed, step, sample index, token): one stateless Philox draw of [width, samples] per step,
whose first rows are the same whatever the width (Philox fills its output in order), shared
by every table of the batch.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.constants import NEG_INF
from tablegen_tf.decoding.greedy import greedy_search


def gumbel_token_picker(samples: int, seed: int, temperature: float = 1.0, epsilon: float = 0.0):
    """A ``pick_token`` for greedy_search over rows laid out table-major (row b x samples + s
    is sample s of table b, as ``tile_batch``): row r's noise is column r mod samples."""

    def pick(log_probs, step, rows):
        width = tf.shape(log_probs)[1]
        floor = tf.math.log(epsilon) if epsilon > 0 else NEG_INF
        probable = log_probs >= tf.minimum(floor, tf.reduce_max(log_probs, axis=-1, keepdims=True))
        uniform = tf.random.stateless_uniform([width, samples], seed=tf.stack([tf.constant(seed), step]),
                                              minval=1e-7, maxval=1.0, alg="philox")
        gumbel = tf.gather(tf.transpose(-tf.math.log(-tf.math.log(uniform))), rows % samples)  # [R, W]
        return tf.argmax(tf.where(probable, log_probs / temperature + gumbel, NEG_INF), axis=-1,
                         output_type=tf.int32)

    return pick


def sample_search(step_fn, start_ids, initial_state, max_length, end_id: int, samples: int, seed: int,
                  temperature: float = 1.0, epsilon: float = 0.0, pad_id: int = 0, step_memory=None):
    """``samples`` draws per table, rows table-major ([B x samples], ``tile_batch`` of the
    tables' start ids and state) -> ids [B x samples, T], lengths (with end_id) and scores
    (the drawn tokens' log-probs under ``step_fn``, before temperature and truncation):
    greedy_search's contract. ``step_memory``: greedy_search's (finished draws leave the
    batch; a draw's tokens do not depend on which rows run beside it)."""
    return greedy_search(step_fn, start_ids, initial_state, max_length, end_id, pad_id,
                         pick_token=gumbel_token_picker(samples, seed, temperature, epsilon),
                         step_memory=step_memory)

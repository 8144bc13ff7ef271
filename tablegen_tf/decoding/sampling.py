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

A batch's draws may run in chunks of samples (``draw_in_chunks``) to bound memory: the noise
is keyed by the sample's index among all ``samples``, so a chunk draws what the whole would.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.constants import NEG_INF
from tablegen_tf.decoding.greedy import greedy_search


def gumbel_token_picker(samples: int, seed: int, temperature: float = 1.0, epsilon: float = 0.0,
                        first_sample=0, chunk=None):
    """A ``pick_token`` for greedy_search over rows laid out table-major (row b x chunk + j
    is sample ``first_sample`` + j of table b, as ``tile_batch``; ``chunk`` defaults to
    ``samples``, all of them): its noise is column first_sample + j of [width, samples]."""
    chunk = samples if chunk is None else chunk

    def pick(log_probs, step, rows):
        width = tf.shape(log_probs)[1]
        floor = tf.math.log(epsilon) if epsilon > 0 else NEG_INF
        probable = log_probs >= tf.minimum(floor, tf.reduce_max(log_probs, axis=-1, keepdims=True))
        uniform = tf.random.stateless_uniform([width, samples], seed=tf.stack([tf.constant(seed), step]),
                                              minval=1e-7, maxval=1.0, alg="philox")
        column = first_sample + rows % chunk
        gumbel = tf.gather(tf.transpose(-tf.math.log(-tf.math.log(uniform))), column)  # [R, W]
        return tf.argmax(tf.where(probable, log_probs / temperature + gumbel, NEG_INF), axis=-1,
                         output_type=tf.int32)

    return pick


def sample_search(step_fn, start_ids, initial_state, max_length, end_id: int, samples: int, seed: int,
                  temperature: float = 1.0, epsilon: float = 0.0, pad_id: int = 0, step_memory=None,
                  first_sample=0, chunk=None):
    """``samples`` draws per table, rows table-major ([B x samples], ``tile_batch`` of the
    tables' start ids and state) -> ids [B x samples, T], lengths (with end_id) and scores
    (the drawn tokens' log-probs under ``step_fn``, before temperature and truncation):
    greedy_search's contract. ``step_memory``: greedy_search's (finished draws leave the
    batch; a draw's tokens do not depend on which rows run beside it). ``chunk``: the rows
    are [B x chunk], samples ``first_sample`` .. + chunk - 1 of the ``samples``."""
    return greedy_search(step_fn, start_ids, initial_state, max_length, end_id, pad_id,
                         pick_token=gumbel_token_picker(samples, seed, temperature, epsilon, first_sample, chunk),
                         step_memory=step_memory)


def samples_per_chunk(batch_size, samples: int, max_rows: int):
    """-> int32 scalar: the largest divisor of ``samples`` whose ``batch_size`` x it rows fit
    in ``max_rows`` (at least 1: a batch above max_rows draws one sample at a time)."""
    divisors = tf.constant([d for d in range(1, samples + 1) if samples % d == 0], tf.int32)
    return tf.reduce_max(tf.where(divisors * batch_size <= max_rows, divisors, 1))


def draw_in_chunks(draw_chunk, batch_size, samples: int, max_rows: int, max_length):
    """``samples`` draws for each of ``batch_size`` tables, at most ``max_rows`` rows at a
    time: ``draw_chunk(first_sample, chunk)`` -> sample_search's (ids [B x chunk, T],
    lengths, scores) for those samples. -> ids [B, samples, T], lengths [B, samples],
    scores [B, samples]: what one search of every sample gives (T = the longest draw)."""
    chunk = samples_per_chunk(batch_size, samples, max_rows)
    chunks = samples // chunk

    def body(k, ids_ta, lengths_ta, scores_ta):
        ids, lengths, scores = draw_chunk(k * chunk, chunk)
        ids = tf.pad(ids, [[0, 0], [0, max_length - tf.shape(ids)[1]]])  # chunks end at different steps
        return (k + 1, ids_ta.write(k, tf.reshape(ids, [batch_size, chunk, max_length])),
                lengths_ta.write(k, tf.reshape(lengths, [batch_size, chunk])),
                scores_ta.write(k, tf.reshape(scores, [batch_size, chunk])))

    arrays = [tf.TensorArray(dtype, size=chunks, element_shape=tf.TensorShape(None))
              for dtype in (tf.int32, tf.int32, tf.float32)]
    _, *arrays = tf.while_loop(lambda k, *_: k < chunks, body, [tf.constant(0), *arrays])

    def joined(array, rank):  # [chunks, B, chunk, ...] -> [B, samples, ...]: sample k x chunk + j
        moved = tf.transpose(array.stack(), [1, 0, *range(2, rank)])
        return tf.reshape(moved, tf.concat([[batch_size, samples], tf.shape(moved)[3:]], 0))

    ids, lengths, scores = (joined(array, rank) for array, rank in zip(arrays, (4, 3, 3)))
    return ids[:, :, :tf.maximum(tf.reduce_max(lengths), 0)], lengths, scores

"""Ancestral sampling with epsilon truncation (Hewitt et al. 2022), as one tf.while_loop.

Samples of a model's own distribution are what minimum Bayes risk decoding weighs
candidates against (Freitag et al. 2023 found epsilon sampling's the best evidence):
each step draws from ``softmax(log_probs / temperature)`` after dropping the tokens whose
probability is below ``epsilon``. Stateless: one seed gives the same samples on any run.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.constants import NEG_INF
from tablegen_tf.decoding.greedy import greedy_search


def epsilon_token_picker(seed: int, temperature: float = 1.0, epsilon: float = 0.0):
    """A ``pick_token`` for greedy_search: one token per row, drawn as above. The most
    probable token always stays, so a row never has nothing to draw from."""

    def pick(log_probs, step):
        probable = log_probs >= tf.minimum(tf.math.log(epsilon) if epsilon > 0 else NEG_INF,
                                           tf.reduce_max(log_probs, axis=-1, keepdims=True))
        logits = tf.where(probable, log_probs / temperature, NEG_INF)
        draw = tf.random.stateless_categorical(logits, 1, seed=tf.stack([tf.constant(seed), step]),
                                               dtype=tf.int32)
        return draw[:, 0]

    return pick


def sample_search(step_fn, start_ids, initial_state, max_length, end_id: int, seed: int,
                  temperature: float = 1.0, epsilon: float = 0.0, pad_id: int = 0):
    """-> ids [B, T], lengths [B] (with end_id), scores [B] (the sampled tokens' log-probs
    under ``step_fn``, before temperature and truncation); greedy_search's contract."""
    return greedy_search(step_fn, start_ids, initial_state, max_length, end_id, pad_id,
                         pick_token=epsilon_token_picker(seed, temperature, epsilon))

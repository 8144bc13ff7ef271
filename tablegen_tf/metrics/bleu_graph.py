"""Sentence BLEU between token-id sequences, in core TensorFlow (runs inside a SavedModel).

Minimum Bayes risk decoding (tablegen_tf.reranking) scores each kept beam against samples
of the model, all of one table's, so the utility must be computable in the graph. It is
sacrebleu's ``sentence_score`` (Papineni et al. 2002 with ``smooth_method="exp"`` and
``effective_order=True``) on tokens that are ids: clipped n-gram matches for n = 1..4,
an order whose candidate has no n-gram left out of the geometric mean, an order with no
match counted as 1 / (2^k x its n-grams) for its k-th such order, and the brevity penalty
against the one reference; no unigram in common scores 0. Ids compare exactly (no hashing): the n-grams at positions
(i, j) match when the tokens at (i + m, j + m) match for every m < n.
"""

from __future__ import annotations

import tensorflow as tf

MAX_ORDER = 4


def _valid(tokens, lengths):
    return tf.range(tf.shape(tokens)[-1])[None, :] < tf.cast(lengths, tf.int32)[:, None]


def _match_counts(left, left_valid, right, right_valid):
    """[..., I] x [..., J] -> per order n (1..MAX_ORDER), [..., I] counts of left's n-gram at i
    among right's n-grams, and [..., I] whether left has an n-gram at i."""
    equal = tf.equal(left[..., :, None], right[..., None, :]) & left_valid[..., :, None] & right_valid[..., None, :]
    counts, starts = [], []
    grams, left_ok = equal, left_valid
    for n in range(1, MAX_ORDER + 1):
        if n > 1:  # the (n-1)-gram at (i, j) and the tokens at (i + n - 1, j + n - 1)
            grams = grams[..., :-1, :-1] & equal[..., n - 1:, n - 1:]
            left_ok = left_ok[..., :-1] & left_valid[..., n - 1:]
        pad = [[0, 0]] * (len(grams.shape) - 2) + [[0, n - 1]]
        counts.append(tf.pad(tf.reduce_sum(tf.cast(grams, tf.float32), axis=-1), pad))
        starts.append(tf.pad(left_ok, pad))
    return counts, starts


def sentence_bleu(candidates, candidate_lengths, references, reference_lengths):
    """BLEU (0..1) of each candidate against each reference on its own.

    Args:
      candidates: int [B, K, Tc] token ids; candidate_lengths [B, K] (tokens counted).
      references: int [B, S, Tr]; reference_lengths [B, S].

    Returns:
      [B, K, S] float32.
    """
    cand_valid = _valid(tf.reshape(candidates, [-1, tf.shape(candidates)[-1]]),
                        tf.reshape(candidate_lengths, [-1]))
    cand_valid = tf.reshape(cand_valid, tf.shape(candidates))
    ref_valid = tf.reshape(_valid(tf.reshape(references, [-1, tf.shape(references)[-1]]),
                                  tf.reshape(reference_lengths, [-1])), tf.shape(references))
    own, starts = _match_counts(candidates, cand_valid, candidates, cand_valid)  # [B, K, Tc]
    cross, _ = _match_counts(candidates[:, :, None], cand_valid[:, :, None],
                             references[:, None], ref_valid[:, None])  # [B, K, S, Tc]
    log_precision = 0.0
    orders = 0.0
    unigram_matches = None
    zero_orders = 0.0  # sacrebleu's "exp" smoothing: the k-th order without a match counts 1 / 2^k
    for n in range(MAX_ORDER):
        start = tf.cast(starts[n], tf.float32)[:, :, None]  # [B, K, 1, Tc]
        # Clipping: a candidate n-gram seen c times in it and r times in the reference
        # matches min(c, r) times; spread over its c positions, each adds min(c, r) / c.
        own_n = tf.maximum(own[n][:, :, None], 1.0)
        matches = tf.reduce_sum(start * tf.minimum(own_n, cross[n]) / own_n, axis=-1)  # [B, K, S]
        unigram_matches = matches if n == 0 else unigram_matches
        total = tf.reduce_sum(start, axis=-1)  # [B, K, 1]
        counted = total > 0  # effective order: an order with no candidate n-gram is left out
        zero_orders += tf.cast(counted & (matches <= 0), tf.float32)
        precision = tf.where(matches > 0, matches / tf.maximum(total, 1.0),
                             1.0 / (tf.pow(2.0, zero_orders) * tf.maximum(total, 1.0)))
        log_precision += tf.where(counted, tf.math.log(precision), 0.0)
        orders += tf.cast(counted, tf.float32)
    hyp = tf.cast(candidate_lengths, tf.float32)[:, :, None]
    ref = tf.cast(reference_lengths, tf.float32)[:, None, :]
    brevity = tf.where(hyp >= ref, 1.0, tf.exp(1.0 - ref / tf.maximum(hyp, 1.0)))
    score = brevity * tf.exp(log_precision / tf.maximum(orders, 1.0))
    return tf.where(unigram_matches > 0, score, 0.0)  # no word in common: 0, as sacrebleu

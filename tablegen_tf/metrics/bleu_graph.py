"""Sentence BLEU between token-id sequences, in core TensorFlow (runs inside a SavedModel).

Minimum Bayes risk decoding (tablegen_tf.reranking) scores each kept beam against samples
of the model, all of one table's, so the utility must be computable in the graph. It is
sacrebleu's ``sentence_score`` (Papineni et al. 2002 with ``smooth_method="exp"`` and
``effective_order=True``) on tokens that are ids: clipped n-gram matches for n = 1..4,
an order whose candidate has no n-gram left out of the geometric mean, an order with no
match counted as 1 / (2^k x its n-grams) for its k-th such order, and the brevity penalty
against the one reference; no unigram in common scores 0. Ids compare exactly (no hashing): the n-grams at positions
(i, j) match when the tokens at (i + m, j + m) match for every m < n.

With ``group`` G > 1 each candidate is scored against G references at once, as corpus BLEU
scores an E2E output against its ~8 references: an n-gram's matches are clipped by its
largest count in any one of them, and the brevity penalty takes the reference length
closest to the candidate's (the shorter on a tie), as sacrebleu does.
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


def sentence_bleu(candidates, candidate_lengths, references, reference_lengths, group: int = 1):
    """BLEU (0..1) of each candidate against each group of ``group`` consecutive references
    (1: each reference on its own).

    Args:
      candidates: int [B, K, Tc] token ids; candidate_lengths [B, K] (tokens counted).
      references: int [B, S, Tr]; reference_lengths [B, S]; S a multiple of ``group``.

    Returns:
      [B, K, S / group] float32.
    """
    cand_valid = _valid(tf.reshape(candidates, [-1, tf.shape(candidates)[-1]]),
                        tf.reshape(candidate_lengths, [-1]))
    cand_valid = tf.reshape(cand_valid, tf.shape(candidates))
    ref_valid = tf.reshape(_valid(tf.reshape(references, [-1, tf.shape(references)[-1]]),
                                  tf.reshape(reference_lengths, [-1])), tf.shape(references))
    own, starts = _match_counts(candidates, cand_valid, candidates, cand_valid)  # [B, K, Tc]
    cross, _ = _match_counts(candidates[:, :, None], cand_valid[:, :, None],
                             references[:, None], ref_valid[:, None])  # [B, K, S, Tc]
    # [B, K, S / G, Tc]: a candidate n-gram's count in the group's reference that has most of it
    cross = [tf.reduce_max(_grouped(c, group, axis=2), axis=3) for c in cross]
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
    ref = _closest(tf.cast(reference_lengths, tf.float32)[:, None, :], hyp, group)  # [B, K, S / G]
    brevity = tf.where(hyp >= ref, 1.0, tf.exp(1.0 - ref / tf.maximum(hyp, 1.0)))
    score = brevity * tf.exp(log_precision / tf.maximum(orders, 1.0))
    return tf.where(unigram_matches > 0, score, 0.0)  # no word in common: 0, as sacrebleu


def _grouped(x, group: int, axis: int):
    """Split ``axis`` (size S) into [S / group, group]."""
    shape = tf.shape(x)
    return tf.reshape(x, tf.concat([shape[:axis], [shape[axis] // group, group], shape[axis + 1:]], 0))


def _closest(ref_lengths, hyp_lengths, group: int):
    """ref_lengths [B, 1, S], hyp_lengths [B, K, 1] -> [B, K, S / group]: per group, the
    reference length closest to the candidate's, the shorter on a tie (sacrebleu)."""
    lengths = _grouped(ref_lengths, group, axis=2)  # [B, 1, S / G, G]
    distance = tf.abs(lengths - hyp_lengths[..., None])  # [B, K, S / G, G]
    key = distance * 1e4 + lengths  # lengths are token counts, far below 1e4
    closest = tf.argmin(key, axis=-1, output_type=tf.int32)
    lengths = tf.broadcast_to(lengths, tf.shape(key))
    return tf.gather(lengths, closest, batch_dims=3)

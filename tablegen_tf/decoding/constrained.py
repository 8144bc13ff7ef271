"""Lexically constrained beam search: outputs must contain given tokens.

Motivation: Mou et al. (2015) "backbone LM" generates a sentence around a given
word so that the word is guaranteed to appear. Here we obtain the same hard
guarantee with any left-to-right ``step_fn`` (no backward model needed) through
"forced inclusion", a grid-free simplification of grid / dynamic beam allocation
(Hokamp & Liu 2017; Post & Vilar 2018):

* each beam tracks which of its must-include tokens (constraints [B, C], -1 = pad)
  it has produced; a token counts for one unmet slot only, so a token listed twice
  must be produced twice;
* end_id gets -inf while a beam still has unmet constraints, so no hypothesis can
  finish early (a hypothesis can still hit max_length unmet: best effort, flagged
  by ``satisfied``);
* top_k ranks candidates lexicographically by (number of constraints met, score):
  key = normalised_score + num_met * BONUS in float64 (float32 would lose the score
  resolution next to a large bonus). Reported scores exclude the bonus. Candidates
  whose score is below -BONUS / 2 (models using finite "-1e9" masks) fall behind
  every real candidate, which is what such masks mean anyway.

Trade-off, documented on purpose: ranking by num_met first makes beams chase
constraints greedily (all K beams soon sit in the highest bank), unlike DBA's
per-bank allocation; it is simple, exact with a large enough beam (see tests)
and always lets a constraint-meeting hypothesis win over one that meets fewer.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.decoding import beam

BONUS = 1e7


class _ForcedInclusion(beam.BeamHooks):
    """Extra beam state: met [B, K, C] bool (padding slots count as met)."""

    def __init__(self, constraints, end_id: int):
        self.constraints = constraints  # [B, C] int32, -1 = pad
        self.end_id = end_id

    def initial_extra(self, batch_size, beam_size):
        return tf.repeat((self.constraints < 0)[:, None, :], beam_size, axis=1)  # [B, K, C]

    def mask_log_probs(self, log_probs, met):
        unmet = ~tf.reduce_all(met, axis=-1)  # [B, K]
        is_end = tf.equal(tf.range(tf.shape(log_probs)[-1]), self.end_id)  # [W]
        return tf.where(unmet[..., None] & is_end, float("-inf"), log_probs)

    def selection_key(self, key, met, finished):
        gain = self._gain(met, tf.shape(key)[-1]) & ~finished[..., None]  # [B, K, W]
        num_met = tf.reduce_sum(tf.cast(met, tf.int32), axis=-1)[..., None]  # [B, K, 1]
        bank = tf.cast(num_met + tf.cast(gain, tf.int32), tf.float64)
        return tf.cast(key, tf.float64) + bank * BONUS

    def update_extra(self, met, token, finished):
        # The token fills the first unmet slot holding it (slots are multiplicities).
        hits = tf.equal(self.constraints[:, None, :], token[..., None]) & ~met  # [B, K, C]
        first = hits & tf.equal(tf.cumsum(tf.cast(hits, tf.int32), axis=-1), 1)
        return met | (first & ~finished[..., None])

    def _gain(self, met, width):
        """[B, K, W]: token w would fill an unmet slot of beam k."""
        unmet_ids = tf.where(met, -1, self.constraints[:, None, :])  # [B, K, C]
        # [B, K, C, W] bools; C is a handful of tokens so this stays small.
        return tf.reduce_any(tf.equal(unmet_ids[..., None], tf.range(width)), axis=-2)


def constrained_beam_search(
    step_fn,
    start_ids,
    initial_state,
    constraints,
    beam_size: int,
    max_length,
    end_id: int,
    length_penalty=0.0,
    return_all_beams: bool = False,
    pad_id: int = 0,
):
    """Beam search whose hypotheses must contain every token in ``constraints``.

    Args: as ``beam.beam_search`` plus constraints [B, C] int32 token ids (extended
      ids allowed), -1 padded; C may be 0 (then this is plain beam search).

    Returns:
      ids, lengths, scores as ``beam.beam_search`` (scores without the ranking bonus),
      satisfied [B] (or [B, K]) bool: all constraints met by the returned hypothesis.
    """
    constraints = tf.convert_to_tensor(constraints, tf.int32)
    hooks = _ForcedInclusion(constraints, end_id)
    ids, lengths, scores, met = beam.run_beam_search(
        step_fn, start_ids, initial_state, beam_size, max_length, end_id,
        length_penalty, return_all_beams, pad_id, hooks,
    )
    return ids, lengths, scores, tf.reduce_all(met, axis=-1)

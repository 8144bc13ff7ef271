"""Lexically constrained beam search: outputs must contain given tokens and phrases.

Algorithm: dynamic beam allocation (DBA, Post & Vilar 2018, "Fast Lexically Constrained
Decoding with Dynamic Beam Allocation"), with phrase tracking as in their paper (and
Hokamp & Liu's 2017 grid beam search, whose C+1 grids DBA folds into one beam of K):

* constraints [B, C] token ids (extended ids allowed; -1 = pad) and ``continues``
  [B, C] (token c continues the phrase of token c - 1), so a phrase of n tokens is n
  slots that must be produced contiguously; a token listed twice must appear twice;
* per beam: ``met`` [B, K, C] and ``progress`` [B, K] (the next slot of a phrase being
  generated, -1 if none). A token that breaks a phrase in progress unmarks its slots
  (the phrase must start again); it may itself start a phrase;
* end_id gets -inf while a beam has unmet slots, so no hypothesis ends unmet;
* candidates each step (DBA): the K best continuations overall, the best continuation
  of every beam, and every beam's allowed constraint tokens (start of an unmet phrase,
  or the next token of the phrase in progress). Each candidate's *bank* is its number of
  met slots; the K beam slots are shared out round-robin over the banks (rank 0 of each
  bank, highest bank first, then rank 1, ...), i.e. DBA's equal bank sizes with unused
  slots passed on. Candidates are scored by the model only (no bonus), so a constraint
  is placed where the model finds it likely, not as early as possible;
* the returned hypothesis is the best one meeting every constraint (``satisfied``); when
  none does within max_length, the best one is returned with ``satisfied`` False, and
  callers that must guarantee inclusion raise an error (tablegen_tf.export).

Cost per step over plain beam search: one extra top_k of width K*W is avoided; the
allocation works on P = K (2 + C) candidates ([B, P, P] comparisons), independent of the
vocabulary size.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.decoding import beam, common

_LAST = 1e30  # selection key of candidates that must not be chosen


class _DynamicBeamAllocation(beam.BeamHooks):
    """Extra beam state: (met [B, K, C] bool (pad slots count as met), progress [B, K])."""

    full_width = True  # the constraint candidates are any token of any beam

    def __init__(self, constraints, continues, end_id: int):
        self.constraints = constraints  # [B, C]
        pad = constraints < 0
        self.pad = pad
        self.continues = continues & ~pad
        self.is_start = ~self.continues & ~pad
        c = constraints.shape[1] if constraints.shape[1] is not None else tf.shape(constraints)[1]  # static if known
        index = tf.range(c)
        # start[b, c]: first slot of c's phrase; next[b, c]: c + 1 if it continues c's phrase, else -1.
        earlier_starts = (index[None, None, :] <= index[None, :, None]) & self.is_start[:, None, :]  # [B, C, C']
        self.start = tf.reduce_max(tf.where(earlier_starts, index[None, None, :], -1), axis=-1)
        following = tf.concat([self.continues[:, 1:], tf.zeros_like(self.continues[:, :1])], 1)
        self.next = tf.where(following, index[None, :] + 1, -1)
        self.end_id = end_id
        self.num_slots = c

    def initial_extra(self, batch_size, beam_size):
        met = tf.repeat(self.pad[:, None, :], beam_size, axis=1)
        return met, tf.fill([batch_size, beam_size], -1)

    def mask_log_probs(self, log_probs, extra):
        met, _ = extra
        unmet = ~tf.reduce_all(met, axis=-1)  # [B, K]
        is_end = tf.equal(tf.range(tf.shape(log_probs)[-1]), self.end_id)
        return tf.where(unmet[..., None] & is_end, float("-inf"), log_probs)

    def _allowed(self, met, progress):
        """[B, K, C]: slot c may be filled by the next token."""
        index = tf.range(self.num_slots)[None, None, :]
        in_phrase = progress >= 0
        return tf.where(in_phrase[..., None], tf.equal(index, progress[..., None]),
                        self.is_start[:, None, :] & ~met)

    def _broken(self, progress):
        """[B, K]: slots a beam loses if it leaves its phrase in progress."""
        start = tf.gather(self.start, tf.maximum(progress, 0), batch_dims=1)
        return tf.where(progress >= 0, progress - start, 0)

    def select(self, key, extra, finished, beam_size):
        met, progress = extra
        batch_size, width = tf.shape(key)[0], tf.shape(key)[2]
        flat_key = tf.reshape(key, [batch_size, -1])
        beams = tf.range(beam_size)[None, :]
        _, top = tf.math.top_k(flat_key, k=beam_size)  # the K best overall
        best = beams * width + tf.argmax(key, axis=-1, output_type=tf.int32)  # each beam's best
        allowed = self._allowed(met, progress) & ~finished[..., None] & (self.constraints[:, None, :] < width)
        token_of_slot = tf.maximum(self.constraints, 0)[:, None, :]
        constrained = tf.reshape(beams[..., None] * width + token_of_slot, [batch_size, -1])  # [B, K*C]
        pool = tf.concat([top, best, constrained], axis=1)  # [B, P]
        valid = tf.concat([tf.ones_like(top, tf.bool), tf.ones_like(best, tf.bool),
                           tf.reshape(allowed, [batch_size, -1])], axis=1)
        score = tf.gather(flat_key, pool, batch_dims=1)
        valid &= score > float("-inf")
        size = tf.shape(pool)[1]
        position = tf.range(size)
        earlier = position[None, :, None] < position[None, None, :]  # [1, i, j]: i < j
        same = tf.equal(pool[:, :, None], pool[:, None, :]) & valid[:, :, None]
        valid &= ~tf.reduce_any(same & earlier, axis=1)  # drop duplicates (keep the first)
        # Bank of each candidate: met slots after the token.
        parent, token = pool // width, pool % width
        num_met = tf.reduce_sum(tf.cast(met, tf.int32), -1)
        hits = tf.gather(self._allowed(met, progress), parent, batch_dims=1) & tf.equal(
            self.constraints[:, None, :], token[..., None])  # [B, P, C]
        gain = tf.reduce_any(hits, -1) & ~tf.gather(finished, parent, batch_dims=1)
        in_phrase = tf.gather(progress, parent, batch_dims=1) >= 0
        lost = tf.where(in_phrase & ~gain, tf.gather(self._broken(progress), parent, batch_dims=1), 0)
        bank = tf.gather(num_met, parent, batch_dims=1) + tf.cast(gain, tf.int32) - lost
        # Rank within the bank by score (ties: pool order, i.e. top_k's order).
        better = (tf.equal(bank[:, :, None], bank[:, None, :]) & valid[:, :, None]
                  & ((score[:, :, None] > score[:, None, :]) | (tf.equal(score[:, :, None], score[:, None, :]) & earlier)))
        rank = tf.reduce_sum(tf.cast(better, tf.int32), axis=1)
        order = tf.cast(rank * (self.num_slots + 2) + (self.num_slots - bank), tf.float32)  # round-robin, high bank first
        order = tf.where(valid, order, _LAST)
        _, chosen = tf.math.top_k(-order, k=beam_size)
        return tf.gather(pool, chosen, batch_dims=1), tf.gather(valid, chosen, batch_dims=1)

    def update_extra(self, extra, token, finished):
        met, progress = extra
        index = tf.range(self.num_slots)[None, None, :]
        live = ~finished
        in_phrase = progress >= 0
        expected = tf.gather(self.constraints, tf.maximum(progress, 0), batch_dims=1)
        advance = in_phrase & tf.equal(token, expected) & live
        broken = in_phrase & ~tf.equal(token, expected) & live
        start = tf.gather(self.start, tf.maximum(progress, 0), batch_dims=1)
        met &= ~(broken[..., None] & (index >= start[..., None]) & (index < progress[..., None]))
        met |= advance[..., None] & tf.equal(index, progress[..., None])
        # Not (or no longer) in a phrase: the token may start the first unmet phrase holding it.
        hits = (self.is_start[:, None, :] & ~met & tf.equal(self.constraints[:, None, :], token[..., None])
                & ((~in_phrase | broken) & live)[..., None])
        first = hits & tf.equal(tf.cumsum(tf.cast(hits, tf.int32), axis=-1), 1)
        started = tf.reduce_any(first, -1)
        met |= first
        filled = tf.where(advance, progress, tf.where(started, tf.argmax(tf.cast(first, tf.int32), -1,
                                                                          output_type=tf.int32), -1))
        following = tf.where(filled >= 0, tf.gather(self.next, tf.maximum(filled, 0), batch_dims=1), -1)
        progress = tf.where(live, following, progress)
        return met, progress


def constrained_beam_search(
    step_fn,
    start_ids,
    initial_state,
    constraints,
    beam_size,
    max_length,
    end_id: int,
    length_penalty=0.0,
    return_all_beams: bool = False,
    pad_id: int = 0,
    continues=None,
):
    """Beam search whose hypotheses must contain every token / phrase in ``constraints``.

    Args: as ``beam.beam_search`` plus constraints [B, C] int32 token ids (extended
      ids allowed), -1 padded; C may be 0 (then this is plain beam search);
      continues [B, C] bool (default all False): token c continues the phrase of c - 1.

    Returns:
      ids, lengths, scores as ``beam.beam_search`` (the best hypothesis meeting every
      constraint first), satisfied [B] (or [B, K]) bool.
    """
    constraints = tf.convert_to_tensor(constraints, tf.int32)
    continues = tf.zeros_like(constraints, tf.bool) if continues is None else tf.convert_to_tensor(continues, tf.bool)
    # One always-met pad slot: the per-slot gathers stay valid when C is 0.
    pad_slot = tf.fill([tf.shape(constraints)[0], 1], -1)
    constraints = tf.concat([constraints, pad_slot], 1)
    continues = tf.concat([continues, tf.zeros_like(pad_slot, tf.bool)], 1)
    hooks = _DynamicBeamAllocation(constraints, continues, end_id)
    # Early stop is exact here too: a beam can only finish once it meets every constraint,
    # and the best finished beam is rank 0 of the top bank, so it is never dropped.
    ids, lengths, scores, (met, _) = beam.run_beam_search(
        step_fn, start_ids, initial_state, beam_size, max_length, end_id,
        length_penalty, True, pad_id, hooks, stop_when_best_is_final=not return_all_beams,
    )
    satisfied = tf.reduce_all(met, axis=-1)  # [B, K]
    # Best first: satisfied before unsatisfied, then by score (stable sorts keep beam order on ties).
    by_score = tf.argsort(scores, axis=1, direction="DESCENDING", stable=True)
    order = tf.gather(by_score, tf.argsort(tf.cast(~tf.gather(satisfied, by_score, batch_dims=1), tf.int32),
                                           axis=1, stable=True), batch_dims=1)
    ids, lengths, scores, satisfied = (tf.gather(x, order, batch_dims=1) for x in (ids, lengths, scores, satisfied))
    if return_all_beams:
        return ids, lengths, scores, satisfied
    return ids[:, 0], lengths[:, 0], scores[:, 0], satisfied[:, 0]


__all__ = ["constrained_beam_search", "common"]

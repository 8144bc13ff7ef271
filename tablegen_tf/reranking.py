"""Faithful beam reranking: every beam's text is checked against its table in the graph.

The beam search keeps all K hypotheses; each is detokenized and the hypothesis with the
best ``score - slot_weight * slot errors - coverage_weight * missed fact words`` wins:
* slot errors: missed + wrong + added values of E2E-style tables
  (tablegen_tf.metrics.slot_graph; TGen's and Slug2Slug's reranking, with our aligner
  instead of their classifiers); 0 for other tables;
* missed fact words: the table's distinct subject/object/name words and numbers the text
  does not mention (tablegen_tf.metrics.fact_graph, ``table_coverage``'s words), for any
  table: WebNLG outputs that drop triples lose to ones that realise them.
With ``pragmatic_alpha`` the model score is first mixed with a listener's: how well the
beam singles out its table among the table's omission distractors (tablegen_tf.pragmatics,
Shen et al. 2019). With ``mbr_weight`` each beam also gains the weight x its mean sentence
BLEU against samples of the model (minimum Bayes risk, Kumar & Byrne 2004; samples as the
evidence, Freitag et al. 2023): the beam most like what the model would say, not merely
its single most probable text, which for E2E is a template most references do not use
("X is a coffee shop providing ..."); it needs no table, so it serves any family. It runs
inside ``generate_text`` and so inside the SavedModel: served text is the evaluated text.
Constrained search keeps its order first: a hypothesis that meets every ``must_include``
phrase beats one that does not.

Reranking can only choose among the K hypotheses the search kept. When every one of them
ended before saying a slot (the model's habit for a combination it rarely saw, e.g. a
coffee shop at £20-25), no weight helps: the *end gate* (``slot_end_penalty``) acts during
the search instead. Ending a hypothesis costs the penalty per slot its text has not
realised yet (missed only: a wrong or added value cannot be undone by going on), so
hypotheses that go on to say the slot stay in the beam.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.config import DecodeConfig
from tablegen_tf.constants import EOS_ID, NEG_INF
from tablegen_tf.data.featurizer import output_positions
from tablegen_tf.metrics.bleu_graph import sentence_bleu
from tablegen_tf.metrics.fact_graph import missed_table_facts
from tablegen_tf.metrics.slot_graph import missed_slots, slot_errors
from tablegen_tf.pragmatics import listener_log_probs


def beam_reranker(featurizer, features, config: DecodeConfig, model=None, samples=None):
    """-> ``choose(ids [B, K, T], lengths [B, K], scores [B, K], satisfied [B, K] or None)
    -> index [B]``, or None when ``config`` turns every term off: ``slot_rerank_weight``,
    ``coverage_rerank_weight`` and ``pragmatic_alpha`` (tables only; the listener needs
    ``model``: tablegen_tf.pragmatics), ``mbr_weight`` (needs ``samples``: a callable ->
    the model's draws, ids [B, S, T], lengths and scores [B, S]:
    tablegen_tf.generation.mbr_sampler)."""
    table = featurizer.slot_table(features)
    slot_weight, coverage_weight = config.slot_rerank_weight, config.coverage_rerank_weight
    alpha = config.pragmatic_alpha if model is not None else 0.0
    if table is None:
        slot_weight = coverage_weight = alpha = 0.0
    mbr_weight = config.mbr_weight if samples is not None else 0.0
    if slot_weight <= 0 and coverage_weight <= 0 and alpha <= 0 and mbr_weight <= 0:
        return None
    variants = featurizer.omission_variants(features) if alpha > 0 else None

    def choose(ids, lengths, scores, satisfied=None):
        key = scores  # dead beams stay -inf
        if variants is not None:
            listener = listener_log_probs(model, *variants, ids, lengths)
            alive = scores > NEG_INF
            key = tf.where(alive, (1.0 - alpha) * scores + alpha * tf.where(alive, listener, 0.0), scores)
        if slot_weight > 0 or coverage_weight > 0:
            fields, values, mask = table
            texts = featurizer.candidate_texts(features, ids, lengths)  # [B, K]
        if slot_weight > 0:
            key -= slot_weight * tf.cast(slot_errors(fields, values, mask, texts), scores.dtype)
        if coverage_weight > 0:
            missed = missed_table_facts(fields, values, mask, texts, featurizer.tokenizer)
            key -= coverage_weight * tf.cast(missed, scores.dtype)
        if mbr_weight > 0:
            sample_ids, sample_lengths, _ = samples()
            gain = expected_bleu(ids, lengths, sample_ids, sample_lengths, config.mbr_references)
            key += mbr_weight * tf.cast(gain, scores.dtype)
        if satisfied is not None:
            key = tf.where(satisfied, key, key - 1e9)
        return tf.argmax(key, axis=1, output_type=tf.int32)

    return choose


def token_counts(ids, lengths):
    """[..., T] extended ids, [...] lengths -> [...] output tokens (without </s>, padding)."""
    flat = output_positions(tf.reshape(ids, [-1, tf.shape(ids)[-1]]), tf.reshape(lengths, [-1]))
    return tf.reshape(tf.reduce_sum(tf.cast(flat, tf.int32), axis=1), tf.shape(lengths))


def expected_bleu(ids, lengths, sample_ids, sample_lengths, group: int = 1):
    """[B, K]: each beam's mean sentence BLEU (0-1, on ids) against its input's samples
    (ids [B, S, T], lengths [B, S]), taken ``group`` at a time as its references. One input
    at a time: the n-gram match tensors are [K, S, T, T] per input (64 inputs x 10 beams x
    64 samples at once held 1.6 GB)."""

    def one_input(rows):
        beams, beam_counts, samples, sample_counts = (x[None] for x in rows)
        return tf.reduce_mean(sentence_bleu(beams, beam_counts, samples, sample_counts, group), axis=2)[0]

    rows = (ids, token_counts(ids, lengths), sample_ids, token_counts(sample_ids, sample_lengths))
    return tf.map_fn(one_input, rows, fn_output_signature=tf.TensorSpec([None], tf.float32))


class SlotEndGate:
    """The search's step function with ``log p(</s>) -= penalty x missed slots of the
    prefix``. The prefix ids ride in the decoding state ([N, max_length + 1], <s> first), so
    the search reorders them with the model's state; the table rows ride in the step
    memory, so compacted searches gather them with the model's rows.

    Only rows whose </s> ranks within their ``beam_width`` best tokens are aligned: the
    search takes each row's candidates from those (beam.py), and lowering a token outside
    them changes nothing, so the output is the same as aligning every row (the aligner
    is string ops over the whole prefix; mid-sentence </s> is rarely that likely)."""

    def __init__(self, featurizer, features, penalty: float, beam_width):
        self.featurizer = featurizer
        self.penalty = penalty
        self.beam_width = beam_width
        fields, values, mask = featurizer.slot_table(features)
        self.rows = (featurizer.copy_texts(features), fields, values, mask)  # [B, ...]

    def initial_state(self, state, batch_size, max_length):
        return state, tf.zeros([batch_size, max_length + 1], tf.int32)

    def wrap(self, step_fn, rows):
        """``step_fn`` over model state -> a step function over (model state, prefix ids);
        ``rows``: ``self.rows`` for the step function's rows ([N, ...])."""

        def step(prev_ids, t, state):
            model_state, prefix = state
            column = tf.equal(tf.range(tf.shape(prefix)[1]), t)[None, :]
            prefix = tf.where(column, prev_ids[:, None], prefix)  # prev_ids: the token of step t - 1
            log_probs, model_state = step_fn(prev_ids, t, model_state)
            end = log_probs[:, EOS_ID]
            better = tf.reduce_sum(tf.cast(log_probs > end[:, None], tf.int32), axis=1)
            gated = tf.cast(tf.where(better < self.beam_width)[:, 0], tf.int32)  # [G] rows that may end
            missed = self._missed(tf.gather(prefix, gated), t + 1, tf.nest.map_structure(
                lambda x: tf.gather(x, gated), rows))
            at = tf.stack([gated, tf.fill(tf.shape(gated), EOS_ID)], axis=1)
            cost = self.penalty * tf.cast(missed, log_probs.dtype)
            return tf.tensor_scatter_nd_sub(log_probs, at, cost), (model_state, prefix)

        return step

    def _missed(self, prefix, length, rows):
        """Missed slots [G] of the prefixes [G, T] (their first ``length`` ids)."""
        copy_texts, fields, values, mask = rows
        texts = self.featurizer.rows_text(prefix, tf.fill(tf.shape(prefix)[:1], length), copy_texts)
        return missed_slots(fields, values, mask, texts)


def slot_end_gate(featurizer, features, config: DecodeConfig):
    """A SlotEndGate, or None when ``config.slot_end_penalty`` is 0 or the inputs are not tables."""
    if config.slot_end_penalty <= 0 or featurizer.slot_table(features) is None:
        return None
    width = config.beam_size if tf.is_tensor(config.beam_size) else int(config.beam_size)
    return SlotEndGate(featurizer, features, config.slot_end_penalty, tf.maximum(width, 1))

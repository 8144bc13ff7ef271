"""Faithful beam reranking: every beam's text is checked against its table in the graph.

The beam search keeps all K hypotheses; each is detokenized and the hypothesis with the
best ``score - slot_weight * slot errors - coverage_weight * missed fact words`` wins:
* slot errors: missed + wrong + added values of E2E-style tables
  (tablegen_tf.metrics.slot_graph; TGen's and Slug2Slug's reranking, with our aligner
  instead of their classifiers); 0 for other tables;
* missed fact words: the table's distinct subject/object/name words and numbers the text
  does not mention (tablegen_tf.metrics.fact_graph, ``table_coverage``'s words), for any
  table: WebNLG outputs that drop triples lose to ones that realise them.
It runs inside ``generate_text`` and so inside the SavedModel: served text is the evaluated
text.  Constrained search keeps its order first: a hypothesis that meets every
``must_include`` phrase beats one that does not.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.config import DecodeConfig
from tablegen_tf.metrics.fact_graph import missed_table_facts
from tablegen_tf.metrics.slot_graph import slot_errors


def beam_reranker(featurizer, features, config: DecodeConfig):
    """-> ``choose(ids [B, K, T], lengths [B, K], scores [B, K], satisfied [B, K] or None)
    -> index [B]``, or None when the featurizer's inputs are not tables or both of
    ``config``'s reranking weights (``slot_rerank_weight``, ``coverage_rerank_weight``) are 0."""
    table = featurizer.slot_table(features)
    slot_weight, coverage_weight = config.slot_rerank_weight, config.coverage_rerank_weight
    if table is None or (slot_weight <= 0 and coverage_weight <= 0):
        return None
    fields, values, mask = table

    def choose(ids, lengths, scores, satisfied=None):
        texts = featurizer.candidate_texts(features, ids, lengths)  # [B, K]
        key = scores  # dead beams stay -inf
        if slot_weight > 0:
            key -= slot_weight * tf.cast(slot_errors(fields, values, mask, texts), scores.dtype)
        if coverage_weight > 0:
            missed = missed_table_facts(fields, values, mask, texts, featurizer.tokenizer)
            key -= coverage_weight * tf.cast(missed, scores.dtype)
        if satisfied is not None:
            key = tf.where(satisfied, key, key - 1e9)
        return tf.argmax(key, axis=1, output_type=tf.int32)

    return choose

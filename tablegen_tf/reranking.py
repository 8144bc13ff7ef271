"""Slot-faithful beam reranking: every beam's text is aligned to its table in the graph.

The beam search keeps all K hypotheses; each is detokenized, its slot errors (missed +
wrong + added values, tablegen_tf.metrics.slot_graph) counted, and the hypothesis with the
best ``score - weight * errors`` wins (TGen's and Slug2Slug's reranking, with our aligner
instead of their classifiers).  It runs inside ``generate_text`` and so inside the
SavedModel: served text is the evaluated text.  Constrained search keeps its order first:
a hypothesis that meets every ``must_include`` phrase beats one that does not.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.metrics.slot_graph import slot_errors


def slot_reranker(featurizer, features, weight: float):
    """-> ``choose(ids [B, K, T], lengths [B, K], scores [B, K], satisfied [B, K] or None)
    -> index [B]``, or None when the featurizer's inputs are not tables."""
    table = featurizer.slot_table(features)
    if table is None or weight <= 0:
        return None
    fields, values, mask = table

    def choose(ids, lengths, scores, satisfied=None):
        texts = featurizer.candidate_texts(features, ids, lengths)  # [B, K]
        errors = tf.cast(slot_errors(fields, values, mask, texts), scores.dtype)  # [B, K]
        key = scores - weight * errors  # dead beams stay -inf
        if satisfied is not None:
            key = tf.where(satisfied, key, key - 1e9)
        return tf.argmax(key, axis=1, output_type=tf.int32)

    return choose

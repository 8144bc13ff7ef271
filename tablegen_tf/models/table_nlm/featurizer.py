"""Table NLM's featurizer: the shared table form, with rare fields mapped to the unknown field.

The paper keeps the fields seen at least 100 times in training (``model.min_field_count``);
the others share one unknown-field id. Field vocabularies are written by frequency
(``fields.counts.tsv`` beside ``fields.txt``, in the prepared training vocabulary and in a run
directory's copy of it), so the kept fields are a prefix of ``fields.txt``; the lookup table
(also the SavedModel's) maps the rest to <unk>. Without the counts file (a vocabulary without
counts) every field is kept.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.data import input_pipeline as ip
from tablegen_tf.data.table_featurizer import TableFeaturizer
from tablegen_tf.constants import SPECIAL_SYMBOLS


def frequent_fields(fields, counts_path: str, min_count: int):
    """The fields of ``fields`` (specials first) seen at least ``min_count`` times."""
    if min_count <= 1 or not tf.io.gfile.exists(counts_path):
        return list(fields)
    counts = ip.read_counts(counts_path)
    return [f for f in fields if f in SPECIAL_SYMBOLS or counts.get(f, 0) >= min_count]


class TableNLMFeaturizer(TableFeaturizer):
    def __init__(self, vocabs: ip.Vocabularies, config):
        min_count = getattr(config.model, "min_field_count", 0)
        counts = ip.counts_path("fields", config.data.vocab, config.data.train)
        kept = frequent_fields(vocabs.tokens["fields"], counts, min_count)
        if len(kept) != len(vocabs.tokens["fields"]):
            vocabs = ip.Vocabularies({**vocabs.tokens, "fields": kept})
        super().__init__(vocabs, config)

"""Table NLM's field vocabulary: fields seen fewer than model.min_field_count times share <unk>."""

import pytest

from tablegen_tf.constants import SPECIAL_SYMBOLS
from tablegen_tf.models.table_nlm.featurizer import frequent_fields


def test_rare_fields_are_dropped_by_their_training_counts(tmp_path):
    counts = tmp_path / "fields.counts.tsv"
    counts.write_text("name\t250\nbirth_date\t100\nnickname\t99\n", encoding="utf-8")
    fields = [*SPECIAL_SYMBOLS, "name", "birth_date", "nickname", "uncounted"]
    assert frequent_fields(fields, str(counts), 100) == [*SPECIAL_SYMBOLS, "name", "birth_date"]
    assert frequent_fields(fields, str(counts), 1) == fields  # min_count <= 1: every field
    assert frequent_fields(fields, str(tmp_path / "missing.tsv"), 100) == fields  # no counts: every field


def test_a_malformed_count_names_its_file_and_line(tmp_path):
    counts = tmp_path / "fields.counts.tsv"
    counts.write_text("name\t250\nbirth_date\tmany\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"fields\.counts\.tsv:2: count 'many' is not an integer"):
        frequent_fields(["name", "birth_date"], str(counts), 100)


def test_the_featurizer_reads_field_counts_beside_the_vocabularies_in_use(tmp_path):
    """A run directory (export) or a TFX Trainer (its split is a file pattern) has no
    <split>/vocab: the counts copied beside data.vocab decide the kept fields."""
    from tablegen_tf.config import build_config
    from tablegen_tf.data import input_pipeline as ip
    from tablegen_tf.models.table_nlm.featurizer import TableNLMFeaturizer

    (tmp_path / "fields.counts.tsv").write_text("name\t250\nnickname\t3\n", encoding="utf-8")
    tokens = {name: list(SPECIAL_SYMBOLS) for name in ip.VOCAB_NAMES}
    tokens["fields"] += ["name", "nickname"]
    config = build_config({"model": {"name": "table-nlm", "min_field_count": 100},
                           "data": {"vocab": str(tmp_path), "train": str(tmp_path / "Split-train" / "*")}})
    featurizer = TableNLMFeaturizer(ip.Vocabularies(tokens), config)
    assert featurizer.vocabs.tokens["fields"] == [*SPECIAL_SYMBOLS, "name"]

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

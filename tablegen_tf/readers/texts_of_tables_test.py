"""``F-texts``: every reference of a table corpus becomes one sentence example."""

import pathlib

import pytest

from tablegen_tf.readers import format_names, get_reader
from tablegen_tf.readers.base import RawTable, RawText, Rejection

ROOT = pathlib.Path(__file__).resolve().parents[2]
WEBNLG = ROOT / "tests" / "fixtures" / "webnlg" / "train"


def read_all(name, path, split="train"):
    reader = get_reader(name)
    return [parsed for unit in reader.input_units(str(path), split) for parsed in reader.read(unit, split)]


def test_each_reference_of_each_table_is_one_sentence():
    tables = [p for p in read_all("webnlg", WEBNLG) if isinstance(p, RawTable)]
    texts = [p for p in read_all("webnlg-texts", WEBNLG) if isinstance(p, RawText)]
    assert any(len(t.texts) > 1 for t in tables)  # the fixture has multi-reference entries
    assert [t.source_text for t in texts] == [text for table in tables for text in table.texts]
    assert all(t.texts == [t.source_text] and t.group_key is None for t in texts)
    assert len({t.example_id for t in texts}) == len(texts)
    # The input rows are counted once per table.
    assert sum(t.rows for t in texts) == sum(t.rows for t in tables)


def test_rejections_pass_through(tmp_path):
    bad = tmp_path / "devset.csv"
    bad.write_text("mr,ref\n\"name[The Eagle]\",\"The Eagle is here.\"\n\"not an mr\",\"text\"\n")
    parsed = read_all("e2e-texts", bad, "valid")
    assert [type(p) for p in parsed].count(RawText) == 1
    assert any(isinstance(p, Rejection) for p in parsed)


def test_names_and_form():
    assert "e2e-texts" in format_names() and "sentences-texts" not in format_names()
    assert get_reader("wikibio-texts").example_form == "text"
    with pytest.raises(KeyError):
        get_reader("compression-texts")

from __future__ import annotations

import gzip
import json
import os
import pathlib
import shutil

import pytest

from tablegen_tf.readers.base import InputError, RawTable, Rejection
from tablegen_tf.readers.jsonl import JsonlReader

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "jsonl" / "train.jsonl"
GOOD = {"table": [{"field": "name", "value": "Aromi"}], "text": "Aromi is a pub."}


def _read(path, split="train") -> list:
    reader = JsonlReader()
    return [out for unit in reader.input_units(str(path), split) for out in reader.read(unit, split)]


def test_fixture():
    out = _read(FIXTURE)
    assert len(out) == 4 and all(isinstance(t, RawTable) for t in out)  # the blank line is no row
    assert out[0].example_id == "alimentum-1" and out[1].example_id == "jsonl:train:train:2"
    assert out[3].example_id == "7" and out[3].source == f"{FIXTURE}:5"
    assert out[1].texts == ["Cocum is a coffee shop with prices of £20-25.", "The coffee shop Cocum charges £20-25."]
    assert out[1].group_key is None
    # numbers are str()-ed, entity/group kept, the empty value dropped
    assert [(i.field, i.value, i.entity, i.group) for i in out[2].items] == [
        ("PTS", "27", "LeBron_James", "home"), ("FG_PCT", "52.5", "LeBron_James", "home")
    ]


BAD_LINES = [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "line is a JSON list, not an object"),
    ('{"text": "t"}', "missing 'table'"),
    ('{"table": [], "text": "t"}', "'table' must be a non-empty list"),
    ('{"table": [{"field": "a", "value": ""}], "text": "t"}', "empty table"),
    ('{"table": ["x"], "text": "t"}', "table[0] must be an object"),
    ('{"table": [{"field": "a", "value": "1"}, {"value": "b"}], "text": "t"}', "table[1].field must be a non-empty string"),
    ('{"table": [{"field": "a"}], "text": "t"}', "table[0].value must be a string or a number, got missing"),
    ('{"table": [{"field": "a", "value": true}], "text": "t"}', "table[0].value must be a string or a number, got a JSON bool"),
    ('{"table": [{"field": "a", "value": ["x"]}], "text": "t"}', "table[0].value must be a string or a number, got a JSON list"),
    ('{"table": [{"field": "a", "value": "x", "entity": {}}], "text": "t"}', "table[0].entity must be a string"),
    ('{"table": [{"field": "a", "value": NaN}], "text": "t"}', "NaN is not JSON"),
    ('{"table": [{"field": "a", "value": "x"}], "text": " "}', "'text' must be a non-empty string"),
    ('{"table": [{"field": "a", "value": "x"}], "text": ["ok", 3]}', "text[1] must be a non-empty string"),
    ('{"table": [{"field": "a", "value": "x"}], "text": []}', "'text' must be a non-empty string or a non-empty list"),
    ('{"table": [{"field": "a", "value": "x"}], "text": "t", "id": [1]}', "'id' must be a non-empty string or an integer"),
    ('{"table": [{"field": "a", "value": "x\\ud800"}], "text": "t"}', "lone surrogate"),
    ('{"table": [{"field": "a", "value": "x"}], "text": "t", "pretokenized": "yes"}',
     "'pretokenized' must be true or false, got a JSON str"),
    ('{"table": [{"field": "a", "value": "x"}], "text": "t", "pretokenized": 0}',
     "'pretokenized' must be true or false, got a JSON int"),
]


def test_each_bad_line_is_one_rejection_naming_the_problem(tmp_path):
    path = tmp_path / "train.jsonl"
    lines = [json.dumps(GOOD)]
    for bad, _ in BAD_LINES:
        lines += [bad, json.dumps(GOOD)]
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8") + b'{"table": "\xff"}\n')
    out = _read(path)
    assert len(out) == 2 * len(BAD_LINES) + 2
    rejections = [r for r in out if isinstance(r, Rejection)]
    assert [(os.path.basename(r.file), r.line) for r in rejections] == [
        ("train.jsonl", 2 * k + 2) for k in range(len(BAD_LINES))
    ] + [("train.jsonl", len(lines) + 1)]
    for rejection, (bad, reason) in zip(rejections, BAD_LINES):
        assert reason in rejection.reason and rejection.content == bad
    assert "invalid JSON" in rejections[-1].reason


def test_directory_gzip_and_input_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        _read(tmp_path / "missing.jsonl")
    with pytest.raises(InputError, match=r"no \*\.jsonl"):
        _read(tmp_path)
    shutil.copy(FIXTURE, tmp_path / "train.jsonl")
    with gzip.open(tmp_path / "valid.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps(GOOD) + "\n")
    assert len(_read(tmp_path, "train")) == 4
    (valid,) = _read(tmp_path, "valid")
    assert valid.texts == ["Aromi is a pub."] and valid.example_id == "jsonl:valid:valid:1"


def test_tables_without_text_are_read_for_generation_and_rejected_for_training(tmp_path):
    from tablegen_tf.readers.build import build_examples
    from tablegen_tf.tokenizer import TokenizerConfig

    path = tmp_path / "mine.jsonl"
    path.write_text('{"table": [{"field": "name", "value": "The Vaults"}]}\n')
    (table,) = _read(path)
    assert table.texts == []
    built, rejected = build_examples([table], TokenizerConfig(), needs_text=False)
    assert len(built) == 1 and not rejected
    built, rejected = build_examples([table], TokenizerConfig(), needs_text=True)
    assert not built and "missing text" in rejected[0].reason


def test_pretokenized_texts_are_trained_as_written_and_scored_detokenized(tmp_path):
    from tablegen_tf.readers.build import build_examples
    from tablegen_tf.tokenizer import TokenizerConfig

    entry = {"table": [{"field": "name", "value": "Aromi"}], "text": "Aromi is family - friendly ."}
    path = tmp_path / "valid.jsonl"
    path.write_text(json.dumps({**entry, "pretokenized": True}) + "\n" + json.dumps(entry) + "\n")
    tokenized, plain = _read(path, "valid")
    assert tokenized.pretokenized and not plain.pretokenized
    (scored, _), (as_given, _) = build_examples([tokenized, plain], TokenizerConfig())[0]
    assert scored.references == ["Aromi is family-friendly."]
    assert as_given.references == ["Aromi is family - friendly ."]
    assert scored.target_tokens == as_given.target_tokens

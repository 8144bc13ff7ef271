from __future__ import annotations

import os
import pathlib
from typing import List

import pytest

from tablegen_tf.readers.base import InputError, RawTable, Rejection
from tablegen_tf.readers.e2e import (
    E2EAlignedReader,
    E2ECsvReader,
    mr_key,
    normalise_field,
    parse_aligned_mr,
    parse_mr,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "e2e"
SHARED = ROOT.parent / "shared" / "data" / "e2e"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="shared data not present")


def _read(reader, path, split="valid") -> list:
    return [out for unit in reader.input_units(str(path), split) for out in reader.read(unit, split)]


def _rejections(out: list) -> List[tuple]:
    return [(os.path.basename(r.file), r.line) for r in out if isinstance(r, Rejection)]


def _partition(tables: list) -> List[List[int]]:
    """Row indices grouped by group_key, in first-appearance order."""
    groups: dict = {}
    for index, table in enumerate(tables):
        groups.setdefault(table.group_key, []).append(index)
    return list(groups.values())


@pytest.mark.parametrize(
    "raw, expected",
    [("customer rating", "customerrating"), ("customerrating", "customerrating"), ("eatType", "eattype"),
     ("family-Friendly", "familyfriendly"), ("price_range", "price_range")],
)
def test_normalise_field(raw, expected):
    assert normalise_field(raw) == expected


def test_aligned_fixture():
    out = _read(E2EAlignedReader(), FIXTURE / "aligned")
    assert len(out) == 11 and all(isinstance(t, RawTable) for t in out)
    first = out[0]
    assert [(i.field, i.value) for i in first.items] == [
        ("name", "Alimentum"), ("area", "city centre"), ("familyfriendly", "no")
    ]
    assert first.texts == ["There is a place in the city centre , Alimentum , that is not family - friendly ."]
    assert first.example_id == "e2e-aligned:valid:0"
    assert first.source == f"{FIXTURE / 'aligned' / 'src_valid.txt'}:1"
    assert _partition(out) == [[0, 1, 2, 3, 4, 5], [6], [7, 8, 9, 10]]


def test_csv_fixture():
    out = _read(E2ECsvReader(), FIXTURE / "devset.csv")
    assert len(out) == 11 and all(isinstance(t, RawTable) for t in out)
    assert out[0].texts == ["There is a place in the city centre, Alimentum, that is not family-friendly."]
    assert out[0].source == f"{FIXTURE / 'devset.csv'}:2" and out[10].example_id == "e2e:valid:10"
    assert ("customerrating", "high") in [(i.field, i.value) for i in out[7].items]
    assert ("pricerange", "£20-25") in [(i.field, i.value) for i in out[7].items]
    assert _partition(out) == [[0, 1, 2, 3, 4, 5], [6], [7, 8, 9, 10]]


def test_aligned_references_are_scored_as_the_raw_csv_writes_them():
    """The aligned files are pre-tokenized ("family - friendly", "£ 20 - 25"); generated text is
    detokenized, so the references are too: the same MRs' references equal the official CSV's
    (up to its whitespace), while training keeps the aligned tokens."""
    from tablegen_tf.readers.build import build_examples
    from tablegen_tf.tokenizer import TokenizerConfig

    aligned = _read(E2EAlignedReader(), FIXTURE / "aligned")
    csv_rows = _read(E2ECsvReader(), FIXTURE / "devset.csv")
    built_aligned = [example for example, _ in build_examples(aligned, TokenizerConfig())[0]]
    built_csv = [example for example, _ in build_examples(csv_rows, TokenizerConfig())[0]]
    assert all(a.pretokenized for a in aligned) and not any(c.pretokenized for c in csv_rows)
    assert [" ".join(a.references[0].split()) for a in built_aligned] == [
        " ".join(c.references[0].split()) for c in built_csv]
    assert built_aligned[0].target_tokens[-4:] == ["family", "-", "friendly", "."]  # trained on as written
    assert built_csv[0].references == csv_rows[0].texts  # raw references stay as they are


def test_aligned_and_csv_field_names_agree_on_the_same_mrs():
    aligned = _read(E2EAlignedReader(), FIXTURE / "aligned")
    csv_rows = _read(E2ECsvReader(), FIXTURE)  # directory -> devset.csv
    assert [[i.field for i in t.items] for t in aligned] == [[i.field for i in t.items] for t in csv_rows]
    assert "customerrating" in [i.field for i in aligned[7].items]


def test_mr_key_ignores_item_order_and_spacing():
    a, _ = parse_mr("name[Cocum], customer rating[high]")
    b, _ = parse_mr("customerRating[ high ],name[Cocum] ")
    assert mr_key(a) == mr_key(b) == "customerrating[high], name[Cocum]"


def test_parse_mr():
    items, error = parse_mr("name[The Eagle], near[Burger King, Café], customer rating[5 out of 5]")
    assert error == ""
    assert [(i.field, i.value) for i in items] == [
        ("name", "The Eagle"), ("near", "Burger King, Café"), ("customerrating", "5 out of 5")
    ]
    for bad, reason in [("name[x], ", "unparsable MR at character 9"), ("name[x] near[y]", "unparsable"),
                        ("name[]", "empty value for field 'name'"), ("[x]", "field name ''"),
                        ("name[x", "unparsable")]:
        assert parse_mr(bad)[0] == [] and reason in parse_mr(bad)[1], bad


@pytest.mark.parametrize(
    "line, reason",
    [
        ("__start_name__ A __end_name__ stray", "token 'stray' outside"),
        ("__start_name__ A __start_area__ b __end_area__", "inside field 'name'"),
        ("__start_name__ A __end_area__", "unexpected __end_area__"),
        ("__start_name__ A", "not closed"),
        ("__start_name__ __end_name__", "empty value for field 'name'"),
    ],
)
def test_parse_aligned_mr_errors(line, reason):
    items, error = parse_aligned_mr(line)
    assert items == [] and reason in error


def _write(path: pathlib.Path, lines: List[str], newline: str = "\n") -> None:
    path.write_bytes("".join(line + newline for line in lines).encode("utf-8"))


def test_corrupted_aligned_lines(tmp_path):
    src = (FIXTURE / "aligned" / "src_valid.txt").read_text(encoding="utf-8").splitlines()
    tgt = (FIXTURE / "aligned" / "valid.txt").read_text(encoding="utf-8").splitlines()
    src[2] = src[2].replace("__end_area__ ", "", 1)
    src[4] = "__start_name__ Alimentum __end_name__ oops"
    tgt[7] = tgt[7].replace("<eos>|||", "")
    tgt[8] = " <eos>|||0,1,0"
    _write(tmp_path / "src_valid.txt", src)
    _write(tmp_path / "valid.txt", tgt + ["one text too many <eos>|||"])
    out = _read(E2EAlignedReader(), tmp_path / "src_valid.txt")
    assert _rejections(out) == [
        ("src_valid.txt", 3), ("src_valid.txt", 5), ("valid.txt", 8), ("valid.txt", 9), ("valid.txt", 12)
    ]
    assert "<eos>|||" in out[7].reason and out[8].reason == "missing text"
    assert "no line 12 in" in out[11].reason
    assert sum(isinstance(t, RawTable) for t in out) == 7


def test_corrupted_csv_rows(tmp_path):
    text = (FIXTURE / "devset.csv").read_text(encoding="utf-8").splitlines()
    rows = text[1:]
    rows[1] = rows[1] + ",extra"  # 3 columns
    rows[3] = '"name[Alimentum] area[city centre]",Some ref.'
    rows[5] = '"name[Alimentum]",  '
    rows[6] = '"name[Alimentum], near[Yippee Noodle Bar]","A reference\nover two lines."'
    _write(tmp_path / "devset.csv", [text[0]] + rows, newline="\r\n")
    with open(tmp_path / "devset.csv", "ab") as f:
        f.write(b'"name[Cocum]","Invalid \xff byte."\r\n"name[Cocum]","Last."\r\n')
    out = _read(E2ECsvReader(), tmp_path / "devset.csv")
    # rows after the two-line row (file line 8-9) are one line further down
    assert _rejections(out) == [("devset.csv", 3), ("devset.csv", 5), ("devset.csv", 7), ("devset.csv", 14)]
    assert "expected 2 columns, got 3" in out[1].reason
    assert "unparsable MR" in out[3].reason and out[5].reason == "empty ref"
    assert out[6].texts == ["A reference\nover two lines."] and out[6].source.endswith(":8")
    assert out[7].source.endswith(":10") and out[-1].source.endswith(":15")
    assert out[-2].reason == "invalid UTF-8" and len(out) == 13
    assert "Invalid \ufffd byte." in out[-2].content
    out[-2].to_json().encode("utf-8")  # no lone surrogates left


def test_a_csv_without_a_ref_column_gives_tables_without_references(tmp_path):
    # The challenge's test set as released (`testset.csv`): one column, MR.
    _write(tmp_path / "testset.csv", ["MR", '"name[Cocum], eatType[pub], near[Café Sicilia]"',
                                      '"name[Cocum], near[Café Sicilia], eatType[pub]"', '"name[Bibimbap House]"'])
    out = _read(E2ECsvReader(), tmp_path, split="test")
    assert [t.texts for t in out] == [[], [], []] and out[0].group_key == out[1].group_key
    assert out[2].source.endswith("testset.csv:4")
    from tablegen_tf.inference import build, read_inputs
    from tablegen_tf.tokenizer import TokenizerConfig

    tables, rejected = read_inputs("e2e", str(tmp_path / "testset.csv"), "test")
    assert len(tables) == 2 and not rejected  # merged by MR, as `tablegen generate` reads them
    with pytest.raises(InputError, match="read as a test split"):  # train / valid need references
        _read(E2ECsvReader(), tmp_path / "testset.csv", split="valid")
    assert len(build(tables, TokenizerConfig())[0]) == 2
    examples, rejected = build(tables, TokenizerConfig(), needs_text=True)  # what prepare needs
    assert not examples and rejected[0].reason == "missing text: no target tokens"


def test_input_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        E2ECsvReader().input_units(str(tmp_path / "missing.csv"), "valid")
    with pytest.raises(InputError, match="devset.csv"):
        E2ECsvReader().input_units(str(tmp_path), "valid")
    _write(tmp_path / "devset.csv", ["name[x],a ref"])
    with pytest.raises(InputError, match="header must name columns 'mr' and 'ref'"):
        E2ECsvReader().input_units(str(tmp_path / "devset.csv"), "valid")
    with pytest.raises(InputError, match="src_valid.txt"):
        E2EAlignedReader().input_units(str(tmp_path), "valid")
    _write(tmp_path / "src_valid.txt", ["__start_name__ x __end_name__"])
    with pytest.raises(InputError, match="missing .*valid.txt"):
        E2EAlignedReader().input_units(str(tmp_path), "valid")


@needs_shared
def test_real_devset_has_547_distinct_mrs():
    out = _read(E2ECsvReader(), SHARED / "devset.csv")
    assert len(out) == 4672 and all(isinstance(t, RawTable) for t in out)
    assert len({t.group_key for t in out}) == 547


@needs_shared
def test_real_aligned_valid_matches_csv_field_names_and_groups():
    aligned = _read(E2EAlignedReader(), SHARED / "aligned")
    csv_rows = _read(E2ECsvReader(), SHARED / "devset.csv")
    assert [[i.field for i in t.items] for t in aligned] == [[i.field for i in t.items] for t in csv_rows]
    assert _partition(aligned) == _partition(csv_rows)


@needs_shared
def test_real_dev_values_tokenize_as_the_aligned_training_values():
    # The model sees dev, test and served tables in the CSV's spelling ("£20-25") and learns
    # from the aligned files' ("£ 20 - 25"): every dev value must give tokens training has.
    from tablegen_tf.inference import read_inputs
    from tablegen_tf.tokenizer import tokenize_batch

    def forms(format_name, path, split):
        items = sorted({(i.field, i.value) for t in read_inputs(format_name, path, split)[0] for i in t.items})
        return {(field, " ".join(tokens)) for (field, _), tokens in zip(items, tokenize_batch([v for _, v in items]))}

    train = forms("e2e-aligned", str(SHARED / "aligned"), "train")
    assert forms("e2e", str(SHARED / "devset.csv"), "valid") <= train


@needs_shared
def test_real_aligned_train_count():
    out = _read(E2EAlignedReader(), SHARED / "aligned", split="train")
    assert len(out) == 42061 and all(isinstance(t, RawTable) for t in out)
    assert out[0].example_id == "e2e-aligned:train:0"

from __future__ import annotations

import os
import pathlib
from typing import Callable, Dict, List, Optional

import pytest

from tablegen_tf.readers.base import InputError, RawTable, Rejection
from tablegen_tf.readers.wikibio import WikiBioReader, parse_box

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "wikibio" / "train"
SHARED = ROOT.parent / "shared" / "data" / "wikibio"
EXTS = ("box", "sent", "nb")


def _lines(ext: str) -> List[str]:
    return (FIXTURE / f"train.{ext}").read_text(encoding="utf-8").splitlines()


def _read(prefix: str, split: str = "train") -> list:
    return list(WikiBioReader().read(prefix, split))


def _copy(tmp_path: pathlib.Path, edits: Optional[Dict[str, Callable[[List[str]], List[str]]]] = None) -> str:
    """Fixture copy in tmp_path with edits[ext](lines) applied; returns the prefix."""
    for ext in EXTS:
        lines = _lines(ext)
        if edits and ext in edits:
            lines = edits[ext](lines)
        (tmp_path / f"train.{ext}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(tmp_path / "train")


def _set(index: int, value: str) -> Callable[[List[str]], List[str]]:
    return lambda lines: lines[:index] + [value] + lines[index + 1 :]


def _rejections(out: list) -> List[tuple]:
    return [(os.path.basename(r.file), r.line) for r in out if isinstance(r, Rejection)]


def _first_sentences() -> List[str]:
    nb, sent = [int(n) for n in _lines("nb")], _lines("sent")
    return [sent[sum(nb[:i])] for i in range(len(nb))]


def test_input_units_accepts_directory_prefix_and_file(tmp_path):
    reader, prefix = WikiBioReader(), str(FIXTURE / "train")
    assert reader.input_units(str(FIXTURE), "train") == [prefix]
    assert reader.input_units(prefix, "train") == [prefix]
    assert reader.input_units(prefix + ".box", "train") == [prefix]
    with pytest.raises(InputError, match="not found"):
        reader.input_units(str(tmp_path / "nothing"), "train")
    _copy(tmp_path)
    os.remove(tmp_path / "train.nb")
    with pytest.raises(InputError, match=r"\*\.nb"):
        reader.input_units(str(tmp_path), "train")
    with pytest.raises(InputError, match="missing .*train.nb"):
        reader.input_units(str(tmp_path / "train"), "train")


def test_fixture_tables_first_sentence_and_ids():
    out = _read(str(FIXTURE / "train"))
    assert [type(t) for t in out] == [RawTable] * 6
    assert [t.texts[0] for t in out] == _first_sentences()
    assert out[2].example_id == "wikibio:train:2"
    assert out[2].source == f"{FIXTURE / 'train.box'}:3"
    assert out[0].texts[0].startswith("walter extra is a german")


def test_fields_regrouped_and_none_dropped():
    items = _read(str(FIXTURE / "train"))[0].items
    fields = {i.field: i.value for i in items}
    assert fields["name"] == "walter extra"
    assert fields["occupation"] == "aircraft designer and manufacturer"
    assert "image" not in fields and "<none>" not in fields.values()
    assert [i.field for i in items] == ["name", "birth_date", "nationality", "occupation", "article_title"]


def test_parse_box_orders_by_position_and_keeps_single_token_fields():
    items, error = parse_box("name_2:extra\tname_1:walter\timage:<none>\tclub:foo\tx_1:<none>\tx_2:a\tweb_1:a:b")
    assert error == ""
    assert [(i.field, i.value) for i in items] == [("name", "walter extra"), ("club", "foo"), ("x", "a"), ("web", "a:b")]
    assert parse_box("image:<none>\tcaption:<none>") == ([], "")


@pytest.mark.parametrize(
    "item, reason",
    [
        ("name_1walter", "no ':'"),
        (":walter", "empty field name"),
        ("_1:walter", "empty field name"),
        ("name_1a:walter", "not a non-negative integer"),
        ("name_-1:walter", "not a non-negative integer"),
        ("name_:walter", "not a non-negative integer"),
    ],
)
def test_parse_box_rejects_malformed_items(item, reason):
    items, error = parse_box("name_1:ok\t" + item)
    assert items == [] and reason in error and repr(item) in error


def test_corrupted_box_lines_are_rejected_alone(tmp_path):
    box = _lines("box")
    edits = {"box": lambda lines: [lines[0], lines[1] + "\tbroken", "image:<none>", *lines[3:]]}
    out = _read(_copy(tmp_path, edits))
    assert _rejections(out) == [("train.box", 2), ("train.box", 3)]
    assert "no ':'" in out[1].reason and out[2].reason == "empty table"
    assert out[1].content == box[1] + "\tbroken"
    good = [t.texts[0] for t in out if isinstance(t, RawTable)]
    assert good == [s for i, s in enumerate(_first_sentences()) if i not in (1, 2)]


def test_one_bad_nb_line_is_recovered_from_sent_total(tmp_path):
    out = _read(_copy(tmp_path, {"nb": _set(1, "x")}))
    assert _rejections(out) == [("train.nb", 2)]
    assert "invalid sentence count 'x'" in out[1].reason
    assert [t.texts[0] for t in out if isinstance(t, RawTable)] == [
        s for i, s in enumerate(_first_sentences()) if i != 1
    ]


def test_two_bad_nb_lines_make_later_offsets_unknown(tmp_path):
    edits = {"nb": lambda lines: [lines[0], "-1", lines[2], "2.5", *lines[4:]]}
    out = _read(_copy(tmp_path, edits))
    assert len(out) == 6 and isinstance(out[0], RawTable)
    assert _rejections(out) == [("train.nb", line) for line in range(2, 7)]
    assert "invalid sentence count '-1'" in out[1].reason
    assert "offset unknown" in out[2].reason and "2, 4" in out[2].reason
    assert "invalid sentence count '2.5'" in out[3].reason


def test_nb_beyond_sent_and_extra_sent_lines(tmp_path):
    # .sent cut inside article 5: articles 5 and 6 run past its end
    cut = sum(int(n) for n in _lines("nb")[:4]) + 1
    out = _read(_copy(tmp_path, {"sent": lambda lines: lines[:cut]}))
    assert _rejections(out) == [("train.nb", 5), ("train.nb", 6)]
    assert "run past the end" in out[4].reason
    out = _read(_copy(tmp_path, {"sent": lambda lines: lines + ["extra one .", "extra two ."]}))
    total = len(_lines("sent"))
    assert _rejections(out) == [("train.sent", total + 1), ("train.sent", total + 2)]
    assert out[-1].content == "extra two ."


def test_box_and_nb_line_counts_disagree(tmp_path):
    out = _read(_copy(tmp_path, {"box": lambda lines: lines[:4]}))
    assert _rejections(out) == [("train.nb", 5), ("train.nb", 6)]
    assert len(out) == 6
    out = _read(_copy(tmp_path, {"nb": lambda lines: lines[:5], "sent": lambda lines: lines[:-9]}))
    assert _rejections(out) == [("train.box", 6)]


def test_missing_text_and_invalid_utf8(tmp_path):
    start = sum(int(n) for n in _lines("nb")[:2])
    prefix = _copy(tmp_path, {"sent": _set(start, "  "), "nb": _set(3, "0")})
    with open(prefix + ".box", "r+b") as f:  # invalid UTF-8 in article 5
        lines = f.read().split(b"\n")
        lines[4] = lines[4].replace(b"name_1:", b"name_1:\xff", 1)
        f.seek(0)
        f.write(b"\n".join(lines))
    out = _read(prefix)
    total = len(_lines("sent"))
    # nb 2 -> 0 for article 4 leaves the last two .sent lines uncovered
    assert _rejections(out) == [
        ("train.box", 3), ("train.box", 4), ("train.box", 5), ("train.sent", total - 1), ("train.sent", total)
    ]
    assert "missing text" in out[2].reason and "is empty" in out[2].reason
    assert "missing text" in out[3].reason and "0 sentences" in out[3].reason
    assert out[4].reason == "invalid UTF-8" and isinstance(out[5], RawTable)


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared data not present")
@pytest.mark.parametrize("split, count", [("train", 581), ("valid", 100)])
def test_real_subset_parses_completely(split, count):
    reader = WikiBioReader()
    (unit,) = reader.input_units(str(SHARED / split), split)
    out = list(reader.read(unit, split))
    assert len(out) == count and all(isinstance(t, RawTable) for t in out)
    assert all(i.value and "<none>" not in i.value for t in out for i in t.items)


def test_article_ranges_read_the_same_as_the_whole(monkeypatch):
    import tablegen_tf.readers.wikibio as wikibio

    reader = wikibio.WikiBioReader()
    directory = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "wikibio", "train")
    whole = list(reader.read(reader.input_units(directory, "train")[0], "train"))
    monkeypatch.setattr(wikibio, "ARTICLES_PER_UNIT", 2)
    units = reader.input_units(directory, "train")
    assert len(units) > 1
    parts = [parsed for unit in units for parsed in reader.read(unit, "train")]
    assert parts == whole


def test_references_are_scored_detokenized_as_generated_text_is():
    """The .sent files are tokenized ("-lrb- extra aircraft construction -rrb- ,"); generated
    text is detokenized, so a perfect output scored only ~76 BLEU against them. Scored splits
    store the references detokenized; training keeps the corpus's tokens."""
    from tablegen_tf.metrics.text_metrics import bleu_metric
    from tablegen_tf.readers.build import build_examples
    from tablegen_tf.tokenizer import TokenizerConfig, detokenize_batch

    tables = _read(str(FIXTURE / "train"))
    assert all(t.pretokenized for t in tables)
    scored = [e for e, _ in build_examples(tables, TokenizerConfig())[0]]
    trained = [e for e, _ in build_examples(tables, TokenizerConfig(), readable_references=False)[0]]
    assert "(extra aircraft construction)," in scored[0].references[0]
    assert "-lrb- extra aircraft construction -rrb- ," in trained[0].references[0]
    assert scored[0].target_tokens == trained[0].target_tokens  # trained on as written
    generated = detokenize_batch([e.target_tokens for e in scored])  # what a perfect model says
    assert bleu_metric(True).corpus_score(generated, [[e.references[0] for e in scored]]).score == pytest.approx(100.0)
    assert bleu_metric(True).corpus_score(generated, [[e.references[0] for e in trained]]).score < 90.0

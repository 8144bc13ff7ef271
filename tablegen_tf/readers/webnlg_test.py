import os
import pathlib
import shutil

import pytest

from tablegen_tf.readers.base import InputError, RawItem, RawTable, Rejection
from tablegen_tf.readers.webnlg import WebNLGReader, clean_entity, clean_property

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "webnlg" / "train"
SHARED = ROOT.parent / "shared" / "data" / "webnlg"


def read_all(path, split="train"):
    reader = WebNLGReader()
    return [item for unit in reader.input_units(str(path), split) for item in reader.read(unit, split)]


def test_units_are_sorted_xml_files_recursively():
    units = WebNLGReader().input_units(str(FIXTURES), "train")
    assert [os.path.relpath(u, FIXTURES) for u in units] == [
        "1triples/1triple_Food_train_challenge.xml",
        "2triples/2triples_Airport_train_challenge.xml",
    ]
    single = str(FIXTURES / "1triples" / "1triple_Food_train_challenge.xml")
    assert WebNLGReader().input_units(single, "train") == [single]


def test_missing_input_raises_input_error(tmp_path):
    with pytest.raises(InputError):
        WebNLGReader().input_units(str(tmp_path / "nope"), "train")
    with pytest.raises(InputError):
        WebNLGReader().input_units(str(tmp_path), "train")  # no *.xml


def test_records_ids_and_references():
    tables = read_all(FIXTURES)
    assert [t.example_id for t in tables] == [
        "webnlg:train:Food:Id1:1",
        "webnlg:train:Food:Id2:1",
        "webnlg:train:Airport:Id1:2",
    ]
    assert all(isinstance(t, RawTable) and not t.with_content_plan for t in tables)
    first = tables[0]
    assert first.source.endswith("1triple_Food_train_challenge.xml:1")
    assert first.items == [
        RawItem("subject", "Ajoblanco", "Ajoblanco"),
        RawItem("property", "country", "Ajoblanco"),
        RawItem("object", "Spain", "Ajoblanco"),
    ]
    assert first.texts == ["Ajoblanco is from the country of Spain.", "Ajoblanco is a dish from Spain."]
    assert tables[1].items[2].value == "Squeezed or smashed fried chicken served with sambal"
    airport = tables[2]
    assert [i.value for i in airport.items] == [
        "Aarhus Airport", "elevation above the sea level (in metres)", "25.0",
        "Aarhus Airport", "city served", "Aarhus, Denmark",
    ]  # fmt: skip
    assert {i.entity for i in airport.items} == {"Aarhus Airport"}
    assert len(airport.texts) == 3


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("birthPlace", "birth place"),
        ("1st_runway_SurfaceType", "1st runway surface type"),
        ("UTCOffset", "UTC offset"),
        ("ISBN_number", "ISBN number"),
        ("ReferenceNumber in the National Register", "reference number in the National Register"),
    ],
)
def test_clean_property(raw, clean):
    assert clean_property(raw) == clean


def test_clean_entity():
    assert clean_entity('"1983-10-03"') == "October 3, 1983"  # the texts' commonest form
    assert clean_entity('"1983-13-03"') == "1983-13-03"  # not a date: kept
    assert clean_entity('"2014-15"') == "2014-15"
    assert clean_entity("Airman_(comicsCharacter)") == "Airman (comicsCharacter)"


def _corrupt(tmp_path, old, new):
    src = FIXTURES / "1triples" / "1triple_Food_train_challenge.xml"
    dst = tmp_path / "bad.xml"
    text = src.read_text()
    assert old in text
    dst.write_text(text.replace(old, new, 1))
    return dst


def test_entry_without_lex_or_triples_is_rejected_with_its_line(tmp_path):
    lex = '<lex comment="good" lid="Id1">The main ingredients of Ayam penyet are squeezed'
    path = _corrupt(tmp_path, lex, "<!-- lex removed ")
    path.write_text(path.read_text().replace("sambal.</lex>", "-->"))
    out = read_all(path)
    assert [type(x) for x in out] == [RawTable, Rejection]
    assert out[1].line == 13 and "entry 2" in out[1].reason and "lex" in out[1].reason
    path = _corrupt(tmp_path, "<mtriple>Ajoblanco | country | Spain</mtriple>", "")
    out = read_all(path)
    assert [type(x) for x in out] == [Rejection, RawTable]
    assert out[0].line == 3 and "mtriple" in out[0].reason and out[0].file == str(path)


def test_malformed_triple_is_rejected(tmp_path):
    path = _corrupt(tmp_path, "Ajoblanco | country | Spain</mtriple>", "Ajoblanco country Spain</mtriple>")
    out = read_all(path)
    assert isinstance(out[0], Rejection) and "subject | property | object" in out[0].reason


def test_invalid_xml_rejects_the_file(tmp_path):
    path = _corrupt(tmp_path, "</entry>", "</entri>")
    out = read_all(path)
    assert len(out) == 1 and isinstance(out[0], Rejection)
    assert out[0].file == str(path) and out[0].line == 12 and "invalid XML" in out[0].reason
    assert out[0].rows == 2  # the file's two <entry> tags


def test_corrupted_copy_of_real_file_rejects_exactly_that_entry(tmp_path):
    src = next((SHARED / "train" / "3triples").glob("*Airport*.xml"), None) if SHARED.exists() else None
    if src is None:
        pytest.skip("shared WebNLG data not available")
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    lines = dst.read_text().splitlines(keepends=True)
    entry_lines = [i for i, line in enumerate(lines) if "<entry " in line]
    target = entry_lines[4]  # the 5th entry: drop its modified triples
    end = next(i for i in range(target, len(lines)) if "</modifiedtripleset>" in lines[i])
    start = next(i for i in range(target, end) if "<modifiedtripleset>" in lines[i])
    del lines[start + 1 : end]
    dst.write_text("".join(lines))
    out = read_all(dst)
    rejected = [(i, x) for i, x in enumerate(out) if isinstance(x, Rejection)]
    assert len(out) == len(entry_lines)
    assert [(i, x.line) for i, x in rejected] == [(4, target + 1)]


@pytest.mark.skipif(not SHARED.exists(), reason="shared WebNLG data not available")
def test_real_train_and_dev_counts():
    train = read_all(SHARED / "train", "train")
    assert len(train) == 6940 and all(isinstance(t, RawTable) for t in train)
    assert sum(len(t.texts) for t in train) == 18102
    assert len({t.example_id for t in train}) == 6940
    dev = read_all(SHARED / "dev", "valid")
    assert (len(dev), sum(len(t.texts) for t in dev)) == (872, 2268)

import gzip
import pathlib

from tablegen_tf.readers import get_reader
from tablegen_tf.readers.base import RawText, Rejection

SHARED_DATA = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"


def _read(path):
    reader = get_reader("sentences")
    return [out for unit in reader.input_units(str(path), "train") for out in reader.read(unit, "train")]


def test_gzip_directory_lines_and_dead_letters(tmp_path):
    with gzip.open(tmp_path / "news.gz", "wb") as handle:
        handle.write("Stocks rise\n\n  Café opens downtown \nbad\tline\n".encode() + b"\xff\xfe\n")
    (tmp_path / "README.md").write_text("not a corpus\n")
    out = _read(tmp_path)
    assert [type(o) for o in out] == [RawText, RawText, Rejection, Rejection]
    assert out[1].source_text == "Café opens downtown" and out[1].texts == ["Café opens downtown"]
    assert out[1].example_id == "sentences:train:news:3" and out[1].source.endswith("news.gz:3")
    assert "tab" in out[2].reason and out[2].line == 4
    assert "UTF-8" in out[3].reason and out[3].line == 5


def test_real_headlines_file_reads_whole():
    out = _read(SHARED_DATA / "headlines" / "clickbait_data.gz")
    assert len(out) > 15_000 and all(isinstance(o, RawText) for o in out)

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


def test_hashed_split_is_fixed_disjoint_and_covers_every_sentence(tmp_path):
    from tablegen_tf.readers.sentences import hashed_split

    lines = [f"headline number {i}" for i in range(400)] + ["Headline  NUMBER 3"]  # a near-duplicate of line 4
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "README.txt").write_text("about this corpus\n")
    reader = get_reader("sentences-hashed")
    seen = {}
    for split in ("train", "valid", "test"):
        for unit in reader.input_units(str(tmp_path), split):
            for out in reader.read(unit, split):
                assert out.source_text not in seen
                seen[out.source_text] = split
    assert len(seen) == len(lines)  # every sentence in exactly one split; README skipped
    assert seen["Headline  NUMBER 3"] == seen["headline number 3"]  # duplicates share a split
    counts = {s: sum(v == s for v in seen.values()) for s in ("train", "valid", "test")}
    assert counts["train"] > 300 and 5 <= counts["valid"] <= 40 and 5 <= counts["test"] <= 40
    assert hashed_split("convolutional neural networks") == hashed_split("Convolutional  neural networks")

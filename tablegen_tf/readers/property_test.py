"""Property: any byte string given to a reader yields tables/sources or dead letters (or
one InputError naming a whole-input problem), never another exception."""

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from tablegen_tf.readers import get_reader
from tablegen_tf.readers.base import InputError, RawTable, RawText, Rejection

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
set_hypothesis_home_dir(os.path.join(ROOT, ".cache", "hypothesis"))  # the project's ignored cache, not the tree

FILE_FORMATS = {"jsonl": "train.jsonl", "text-pairs": "train.tsv", "sentences": "train.txt", "e2e": "devset.csv", "webnlg": "train.xml",
                "rotowire": "train.json"}
# Bytes that look like the formats more often than uniform noise does.
FRAGMENTS = [b'{"table": [{"field": "a", "value": "b"}], "text": "t"}', b"\n", b"\t", b",", b'"', b"{", b"}",
             b"[", b"]", b"mr,ref\n", b"name[x], eatType[pub]", b"<entry>", b"</entry>", b"<benchmark>",
             b"\xff", b"\x00", b"\\ud800", b"NaN", b"1e999", b"null"]
inputs = st.one_of(st.binary(max_size=400), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(b"".join))


def _read_all(format_name, filename, data):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, filename)
        with open(path, "wb") as handle:
            handle.write(data)
        reader = get_reader(format_name)
        try:
            units = reader.input_units(path, "train")
            return [out for unit in units for out in reader.read(unit, "train")]
        except InputError as error:
            assert str(error)
            return []


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=inputs, format_name=st.sampled_from(sorted(FILE_FORMATS)))
def test_any_bytes_give_examples_or_dead_letters(data, format_name):
    for out in _read_all(format_name, FILE_FORMATS[format_name], data):
        assert isinstance(out, (RawTable, RawText, Rejection)), out
        if isinstance(out, Rejection):
            assert out.reason and out.line >= 0

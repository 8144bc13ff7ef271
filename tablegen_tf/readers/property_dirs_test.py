"""Property, for the formats that read a directory of parallel files (WikiBio, E2E aligned,
RotoWire sentences, WebNLG trees): corrupt any one file of a real fixture — replace it with
arbitrary bytes, splice bytes into it, truncate it, or delete it — and reading still yields
tables or dead letters (or one InputError naming a whole-input problem), never another
exception."""

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from tablegen_tf.readers import get_reader
from tablegen_tf.readers.base import InputError, RawTable, RawText, Rejection

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
set_hypothesis_home_dir(os.path.join(ROOT, ".cache", "hypothesis"))

# format -> (fixture directory, the path given to the reader relative to it, split)
DIRECTORY_FORMATS = {
    "wikibio": ("wikibio/train", ".", "train"),
    "e2e-aligned": ("e2e/aligned", ".", "valid"),
    "rotowire-sentences": ("rotowire/sentences", ".", "train"),
    "webnlg": ("webnlg/train", ".", "train"),
}
FRAGMENTS = [b"\n", b"\t", b" ", b"|||", b":", b"_", b"name_1:", b"<entry>", b"</entry>", b"\xff", b"\x00",
             b"\r", b"-1", b"99999999999999999999", b"\xe2\x80", b"NaN"]
noise = st.one_of(st.binary(max_size=300), st.lists(st.sampled_from(FRAGMENTS), max_size=30).map(b"".join))
mutation = st.sampled_from(["replace", "splice", "truncate", "delete"])


def _files(directory):
    return sorted(os.path.relpath(os.path.join(d, f), directory) for d, _, fs in os.walk(directory) for f in fs)


def _corrupt(path, how, data, position):
    if how == "delete":
        os.remove(path)
        return
    with open(path, "rb") as handle:
        original = handle.read()
    cut = position % (len(original) + 1)
    corrupted = {"replace": data, "splice": original[:cut] + data + original[cut:], "truncate": original[:cut]}[how]
    with open(path, "wb") as handle:
        handle.write(corrupted)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(format_name=st.sampled_from(sorted(DIRECTORY_FORMATS)), which=st.integers(0, 99), how=mutation,
       data=noise, position=st.integers(0, 10_000))
def test_a_corrupted_file_of_a_directory_gives_examples_or_dead_letters(format_name, which, how, data, position):
    fixture, given_path, split = DIRECTORY_FORMATS[format_name]
    with tempfile.TemporaryDirectory() as directory:
        copy = os.path.join(directory, "input")
        shutil.copytree(os.path.join(FIXTURES, fixture), copy)
        files = _files(copy)
        _corrupt(os.path.join(copy, files[which % len(files)]), how, data, position)
        reader = get_reader(format_name)
        try:
            outputs = [out for unit in reader.input_units(os.path.join(copy, given_path), split)
                       for out in reader.read(unit, split)]
        except InputError as error:
            assert str(error)
            return
        for out in outputs:
            assert isinstance(out, (RawTable, RawText, Rejection)), out
            if isinstance(out, Rejection):
                assert out.reason and out.line >= 0

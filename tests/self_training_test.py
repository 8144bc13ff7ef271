"""benchmarks/self_training.py: new rows are spelled as train's aligned rows, and none of
them would land on the selection carve."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import self_training  # noqa: E402

from tablegen_tf.inference import read_inputs  # noqa: E402
from tablegen_tf.readers.e2e import mr_key, parse_aligned_mr  # noqa: E402
from tablegen_tf.tokenizer import detokenize_batch  # noqa: E402

ALIGNED = os.path.join(ROOT, "..", "shared", "data", "e2e", "aligned")


def test_teacher_text_is_tokenized_as_the_aligned_files_are():
    assert self_training.aligned_tokens("A family-friendly pub, £20-25. It isn't cheap and can't close.") == [
        "A", "family", "-", "friendly", "pub", ",", "£", "20", "-", "25", ".", "It", "isn", "'t", "cheap",
        "and", "can", "'t", "close", "."]


def test_most_train_texts_round_trip_through_detokenized_text():
    with open(os.path.join(ALIGNED, "train.txt"), encoding="utf-8") as handle:
        texts = [next(handle).partition(" <eos>|||")[0].split() for _ in range(300)]
    same = sum(self_training.aligned_tokens(t) == tokens for t, tokens in zip(detokenize_batch(texts), texts))
    assert same >= 0.97 * len(texts)


def test_a_source_line_spells_values_as_train_and_keeps_the_mr():
    spellings = {"£20-25": "£ 20 - 25"}
    table = [("name", "The Eagle"), ("customer rating", "low"), ("priceRange", "£20-25")]
    line = self_training.source_line(table, spellings)
    assert line == ("__start_name__ The Eagle __end_name__ __start_customerrating__ low __end_customerrating__ "
                    "__start_pricerange__ £ 20 - 25 __end_pricerange__")
    items, error = parse_aligned_mr(line)
    assert not error and [i.field for i in items] == ["name", "customerrating", "pricerange"]


def test_in_selection_agrees_with_the_carve_prepare_makes(tmp_path):
    with open(os.path.join(ALIGNED, "src_train.txt"), encoding="utf-8") as handle:
        lines = [next(handle).rstrip("\n") for _ in range(400)]
    (tmp_path / "src_train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "train.txt").write_text("x <eos>|||\n" * len(lines), encoding="utf-8")
    carved = {mr_key(t.items) for t in read_inputs("e2e-aligned", str(tmp_path), "train", 0.05)[0]}
    predicted = {mr_key(parse_aligned_mr(line)[0]) for line in lines if self_training.in_selection(line, 0.05)}
    assert carved and predicted == carved

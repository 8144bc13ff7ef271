"""benchmarks/novel_tables.py: the new MRs it samples are new, E2E-shaped, and read back as
`tablegen generate` reads them."""

import collections
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import novel_tables  # noqa: E402

from tablegen_tf.readers.e2e import RawItem, mr_key  # noqa: E402

VALUES = {
    "name": collections.Counter({"Cocum": 3, "The Eagle": 1}),
    "eattype": collections.Counter({"pub": 2, "coffee shop": 1}),
    "food": collections.Counter({"Chinese": 1, "English": 1}),
    "pricerange": collections.Counter({"£20-25": 1, "cheap": 1}),
    "customerrating": collections.Counter({"5 out of 5": 1, "low": 1}),
    "area": collections.Counter({"riverside": 1, "city centre": 1}),
    "familyfriendly": collections.Counter({"yes": 1, "no": 1}),
    "near": collections.Counter({"Café Sicilia": 1, "Burger King": 1}),
}


def test_the_aligned_spelling_of_a_price_becomes_the_csv_one():
    assert novel_tables.csv_value("£ 20 - 25") == "£20-25"
    assert novel_tables.csv_value("less than £ 20") == "less than £20"
    assert novel_tables.csv_value("5 out of 5") == "5 out of 5"


def test_sampled_mrs_are_new_distinct_and_as_large_as_asked():
    seen = {mr_key([RawItem("name", "Cocum"), RawItem("eattype", "pub"), RawItem("food", "Chinese")])}
    tables = novel_tables.sample(VALUES, seen, count=300, mean=6.9, seed=3)
    keys = [mr_key(RawItem(a.replace(" ", "").lower(), v) for a, v in t) for t in tables]
    assert len(set(keys)) == 300 and not set(keys) & seen
    assert all(t[0][0] == "name" and len(t) >= 3 for t in tables)
    assert abs(sum(map(len, tables)) / 300 - 6.9) < 0.3
    assert novel_tables.sample(VALUES, seen, 300, 6.9, seed=3) == tables  # the seed fixes them


def test_the_written_csv_reads_back_as_tables_without_references(tmp_path):
    tables = novel_tables.sample(VALUES, set(), count=5, mean=4.0, seed=1)
    path = str(tmp_path / "testset.csv")
    novel_tables.write_csv(path, tables)
    examples = novel_tables.examples_of(path)
    assert len(examples) == 5 and not any(e.target_tokens for e in examples)
    scores = novel_tables.scores(["Cocum is a pub."] * 5, examples)
    assert 0 < scores["slot_error_rate"] <= 1 and scores["words"] == 4

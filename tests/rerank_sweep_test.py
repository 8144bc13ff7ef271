"""The retrieval trial of benchmarks/rerank_sweep.py: delexicalized training references by table shape."""

import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import rerank_sweep  # noqa: E402
from tablegen_tf.readers.base import RawItem, in_selection  # noqa: E402

ALIGNED = os.path.join(ROOT, "tests", "fixtures", "e2e", "aligned")


def test_raw_and_pretokenized_texts_delexicalize_alike():
    items = [RawItem("name", "The Eagle"), RawItem("priceRange", "£ 20 - 25"),
             RawItem("familyFriendly", "yes")]
    raw = rerank_sweep._delexicalized("The Eagle's prices are £20-25; family-friendly.", items)
    pretokenized = rerank_sweep._delexicalized("The Eagle ' s prices are £ 20 - 25 ; family - friendly .", items)
    assert raw == pretokenized == "xnamex ' s prices are xpricerangex ; family - friendly ."
    # familyFriendly's value shapes the sentence, so it is part of the key, not a placeholder
    assert rerank_sweep._retrieval_key(items) == (("familyfriendly", "yes"), ("name", ""), ("pricerange", ""))


def test_training_references_leave_the_selection_split_out(tmp_path):
    # the valid fixture, named as a train split
    shutil.copy(os.path.join(ALIGNED, "src_valid.txt"), tmp_path / "src_train.txt")
    shutil.copy(os.path.join(ALIGNED, "valid.txt"), tmp_path / "train.txt")
    from tablegen_tf.readers import get_reader

    reader = get_reader("e2e-aligned")
    rows = [raw for unit in reader.input_units(str(tmp_path), "train") for raw in reader.read(unit, "train")
            if hasattr(raw, "items")]
    # the fixture holds two MRs: a fraction that carves one of them out
    fraction = next(f / 20 for f in range(1, 20) if 0 < sum(in_selection(raw, f / 20) for raw in rows) < len(rows))
    chosen = [raw for raw in rows if in_selection(raw, fraction)]
    pools = rerank_sweep.training_pseudo_references("e2e-aligned", str(tmp_path), fraction, per_key=1000)
    pooled = {text for pool in pools.values() for text in pool}
    kept = {rerank_sweep._delexicalized(text, raw.items) for raw in rows if raw not in chosen for text in raw.texts}
    assert pooled == kept
    assert all(len(pool) <= 2 for pool in rerank_sweep.training_pseudo_references(
        "e2e-aligned", str(tmp_path), fraction, per_key=2).values())

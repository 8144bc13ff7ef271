"""benchmarks/by_table_size.py: the size mix has the asked mean, and the re-weighted BLEU
scores only the sizes the mix weights."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import by_table_size  # noqa: E402


def test_the_size_mix_sums_to_one_and_has_the_asked_mean_above_the_truncation():
    for mean in (6.9, 6.3, 3.5):
        mix = by_table_size.size_mix(mean, fields=8, min_size=3)
        assert min(mix) == 3 and max(mix) == 8
        assert abs(sum(mix.values()) - 1) < 1e-9
        assert abs(sum(k * v for k, v in mix.items()) - mean) < 1e-6
    assert by_table_size.size_mix(6.9, 8, 3)[8] > by_table_size.size_mix(6.3, 8, 3)[8]


def test_reweighting_to_one_size_scores_only_that_size():
    refs = [["the cat sat on the mat today"], ["a dog ran in the park at noon"]] * 4
    sizes = [3, 8] * 4
    hyps = ["the cat sat on the mat today", "nothing like it at all here"] * 4  # size 3 exact, 8 wrong
    mean, low, high = by_table_size.reweighted_bleu(hyps, refs, sizes, {3: 1.0, 8: 0.0}, samples=20, seed=1)
    assert min(mean, low, high) > 99.999
    mean, _, _ = by_table_size.reweighted_bleu(hyps, refs, sizes, {3: 0.0, 8: 1.0}, samples=20, seed=1)
    assert mean < 10.0

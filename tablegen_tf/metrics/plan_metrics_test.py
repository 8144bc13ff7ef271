import functools
import math
import random

import pytest

from tablegen_tf.metrics import plan_scores
from tablegen_tf.metrics.plan_metrics import ordering_similarity, osa_distance


@pytest.mark.parametrize(
    "a,b,d",
    [
        ("abc", "acb", 1),  # one adjacent transposition
        ("abc", "abc", 0),
        ("", "abc", 3),
        ("abc", "", 3),
        ("kitten", "sitting", 3),
        ("ca", "abc", 3),  # OSA, not unrestricted DL (which gives 2)
        ("abcd", "badc", 2),
        ("abcdef", "abcfde", 2),
    ],
)
def test_osa_distance_by_hand(a, b, d):
    assert osa_distance(a, b) == d
    assert osa_distance(list(a), list(b)) == d
    assert osa_distance(b, a) == d


def _osa_by_definition(a, b):
    """OSA straight from its recursive definition (memoised), for cross-checking the DP."""

    @functools.lru_cache(maxsize=None)
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        best = min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))
        if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
            best = min(best, d(i - 2, j - 2) + 1)
        return best

    return d(len(a), len(b))


def test_osa_matches_recursive_definition_on_random_plans():
    rng = random.Random(0)
    for _ in range(300):
        a = [rng.randrange(5) for _ in range(rng.randrange(8))]
        b = [rng.randrange(5) for _ in range(rng.randrange(8))]
        assert osa_distance(a, b) == _osa_by_definition(tuple(a), tuple(b))


def test_ordering_similarity():
    assert ordering_similarity([1, 2, 3], [1, 3, 2]) == pytest.approx(1 - 1 / 3)
    assert ordering_similarity([], []) == 1.0
    assert ordering_similarity([1, 2], []) == 0.0
    assert ordering_similarity([1, 2, 3, 4], [1, 2]) == pytest.approx(0.5)


def test_plan_scores_by_hand():
    pred = [[0, 1, 2, 3], [5, 6], [9, 9, 8]]
    gold = [[0, 2, 1], [5, 7, 8, 6], [8, 9]]
    s = plan_scores(pred, gold)
    # Sets: {0,1,2,3} vs {0,1,2}: tp 3; {5,6} vs {5,6,7,8}: tp 2; {8,9} vs {8,9}: tp 2.
    assert s["cs_precision"] == pytest.approx(7 / (4 + 2 + 2))
    assert s["cs_recall"] == pytest.approx(7 / (3 + 4 + 2))
    p, r = 7 / 8, 7 / 9
    assert s["cs_f1"] == pytest.approx(2 * p * r / (p + r))
    # DLD: [0,1,2,3]->[0,2,1]: transpose 1,2 + delete 3 = 2, /4.
    #      [5,6]->[5,7,8,6]: insert 7, 8 = 2, /4.
    #      [9,9,8]->[8,9]: delete 9, transpose = 2, /3.
    co = ((1 - 2 / 4) + (1 - 2 / 4) + (1 - 2 / 3)) / 3
    assert s["content_ordering"] == pytest.approx(co)


def test_perfect_and_empty_plans():
    s = plan_scores([[3, 1, 2]], [[3, 1, 2]])
    assert s == {"cs_precision": 1.0, "cs_recall": 1.0, "cs_f1": 1.0, "content_ordering": 1.0}
    empty = plan_scores([[]], [[1, 2]])
    assert math.isnan(empty["cs_precision"]) and empty["cs_recall"] == 0.0
    assert math.isnan(empty["cs_f1"]) and empty["content_ordering"] == 0.0
    disjoint = plan_scores([[1]], [[2]])
    assert disjoint["cs_f1"] == 0.0
    with pytest.raises(ValueError):
        plan_scores([[1]], [])

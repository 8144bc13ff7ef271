import numpy as np
import pytest
import tensorflow as tf
from sacrebleu.metrics import BLEU

from tablegen_tf.metrics.bleu_graph import sentence_bleu

SACREBLEU = BLEU(tokenize="none", effective_order=True)  # smooth_method "exp", as sentence_score


def _padded(rows, width):
    return np.array([row + [0] * (width - len(row)) for row in rows], np.int32)


def _ours(candidates, references):
    width = max(map(len, candidates + references)) + 2
    scores = sentence_bleu(_padded(candidates, width)[None], np.array([[len(c) for c in candidates]]),
                           _padded(references, width)[None], np.array([[len(r) for r in references]]))
    return scores.numpy()[0]


def _words(ids):
    return " ".join(f"w{i}" for i in ids)


def _theirs(candidate, *references):
    return SACREBLEU.sentence_score(_words(candidate), [_words(r) for r in references]).score / 100


@pytest.mark.parametrize("seed", range(4))
def test_matches_sacrebleu_sentence_score(seed):
    rng = np.random.default_rng(seed)
    # Few distinct ids, so n-grams repeat (clipping) and partial matches are common.
    make = lambda: list(rng.integers(4, 9, size=rng.integers(1, 14)))  # noqa: E731
    candidates, references = [make() for _ in range(6)], [make() for _ in range(5)]
    candidates += [references[0], references[1][:2]]  # an exact match, a short prefix
    ours = _ours(candidates, references)
    theirs = np.array([[_theirs(c, r) for r in references] for c in candidates])
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_hand_computed_example():
    # candidate a b a b c vs reference a b c: unigrams 4/5 clipped (a, b each once more
    # than the reference has), bigrams ab, ba, ab, bc -> ab once + bc = 2/4, trigrams
    # aba, bab, abc -> 1/3, 4-grams abab, babc -> none (first zero order: 1 / (2 x 2)).
    ours = _ours([[1, 2, 1, 2, 3]], [[1, 2, 3]])[0, 0]
    expected = (0.6 * 0.5 * (1 / 3) * 0.25) ** 0.25  # longer than the reference: no brevity penalty
    assert ours == pytest.approx(expected, rel=1e-5)
    assert _ours([[1, 2, 1, 2, 3]], [[7, 8]])[0, 0] == 0.0  # no word in common


def test_batched_rows_are_independent():
    candidates = tf.constant([[[5, 6, 7, 0]], [[5, 6, 0, 0]]])
    references = tf.constant([[[5, 6, 7]], [[5, 6, 7]]])
    scores = sentence_bleu(candidates, tf.constant([[3], [2]]), references, tf.constant([[3], [3]]))
    assert scores.shape == (2, 1, 1)
    assert float(scores[0, 0, 0]) == pytest.approx(1.0)
    assert float(scores[1, 0, 0]) == pytest.approx(_theirs([5, 6], [5, 6, 7]), rel=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_groups_of_references_match_sacrebleu_with_several_references(seed):
    rng = np.random.default_rng(seed + 10)
    make = lambda: list(rng.integers(4, 9, size=rng.integers(1, 14)))  # noqa: E731
    candidates, references = [make() for _ in range(5)], [make() for _ in range(6)]
    candidates += [references[4][:3]]
    width = max(map(len, candidates + references)) + 2
    ours = sentence_bleu(_padded(candidates, width)[None], np.array([[len(c) for c in candidates]]),
                         _padded(references, width)[None], np.array([[len(r) for r in references]]),
                         group=3).numpy()[0]
    theirs = np.array([[_theirs(c, *references[g:g + 3]) for g in (0, 3)] for c in candidates])
    assert ours.shape == (6, 2)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_a_group_clips_by_the_best_reference_and_takes_the_closest_length():
    # a a b vs {a b, a a}: "a" twice (the second reference has two), "b" once -> 3/3; bigrams
    # aa, ab -> 2/2; trigram aab -> none. Closest reference length to 3: 2 (both) -> penalty.
    ours = sentence_bleu(tf.constant([[[1, 1, 2]]]), tf.constant([[3]]), tf.constant([[[1, 2], [1, 1]]]),
                         tf.constant([[2, 2]]), group=2)
    assert ours.shape == (1, 1, 1)
    expected = (1.0 * 1.0 * 0.5) ** (1 / 3)  # no 4-gram: effective order 3; first zero order 1 / (2 x 1)
    assert float(ours[0, 0, 0]) == pytest.approx(expected, rel=1e-5)
    assert float(ours[0, 0, 0]) == pytest.approx(_theirs([1, 1, 2], [1, 2], [1, 1]), rel=1e-5)

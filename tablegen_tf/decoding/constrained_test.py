import collections

import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.decoding import beam_search, constrained_beam_search
from tablegen_tf.decoding.fakes_test import (
    END, START, MarkovModel, brute_force_best, random_table, sequence_score,
)

SIGNATURE = [
    tf.TensorSpec([None], tf.int32),  # start_ids [B]
    tf.TensorSpec([None, None, None], tf.float32),  # table [V, V, W]
    tf.TensorSpec([None, None], tf.int32),  # constraints [B, C], -1 padded
    tf.TensorSpec([], tf.int32),  # max_length
]


def make_decoder(beam_size, alpha=0.0, all_beams=False):
    @tf.function(input_signature=SIGNATURE)
    def decode(start_ids, table, constraints, max_length):
        model = MarkovModel(table)
        return constrained_beam_search(
            model.step_fn, start_ids, model.initial_state(start_ids), constraints, beam_size,
            max_length, END, length_penalty=alpha, return_all_beams=all_beams,
        )

    return decode


def run(beam_size, table, starts, constraints, max_length, alpha=0.0, all_beams=False):
    decode = make_decoder(beam_size, alpha, all_beams)
    constraints = tf.constant(constraints, tf.int32, shape=[len(starts), len(constraints[0])])
    out = decode(tf.constant(starts), table, constraints, tf.constant(max_length))
    return [x.numpy() for x in out]


def contains(tokens, constraints):
    need = collections.Counter(c for c in constraints if c >= 0)
    have = collections.Counter(tokens)
    return all(have[c] >= n for c, n in need.items())


def unlikely(table, tokens, prob=1e-3):
    """Makes `tokens` improbable everywhere so that unconstrained search avoids them."""
    table = table.copy()
    table[..., tokens] = np.log(prob)
    others = [w for w in range(table.shape[-1]) if w not in tokens]
    mass = np.log(1.0 - prob * len(tokens))
    table[..., others] += mass - np.logaddexp.reduce(table[..., others], axis=-1, keepdims=True)
    return table


@pytest.mark.parametrize("seed", range(5))
def test_output_contains_constraints_and_never_ends_before(seed):
    vocab, width = 7, 9  # ids 7 and 8 are copies (extended vocabulary)
    table = unlikely(random_table(seed, vocab=vocab, width=width), [5, 8])
    starts = [START, 4, 6]
    constraints = [[5, 8], [8, -1], [5, 5]]  # padding, copy ids and repeats
    ids, lengths, scores, satisfied = run(4, table, starts, constraints, 12)
    assert satisfied.all()
    for row, (start, cons) in enumerate(zip(starts, constraints)):
        tokens = list(ids[row, : lengths[row]])
        assert contains(tokens, cons)
        assert END not in tokens[:-1]  # it ends at most once, as the last token
        np.testing.assert_allclose(scores[row], sequence_score(table, start, tokens), rtol=1e-5)

    # No beam at all finishes with an unmet constraint.
    ids, lengths, scores, satisfied = run(4, table, starts, constraints, 12, all_beams=True)
    for row, cons in enumerate(constraints):
        for b in range(4):
            tokens = list(ids[row, b, : lengths[row, b]])
            if END in tokens:
                assert contains(tokens, cons) and satisfied[row, b]

    # The constraints matter: plain beam search does not produce them.
    model = MarkovModel(table)
    start = tf.constant(starts)
    plain_ids, plain_len, _ = beam_search(
        tf.function(model.step_fn), start, model.initial_state(start), 4, 12, END)
    assert not any(contains(list(plain_ids[r, : plain_len[r]].numpy()), c)
                   for r, c in enumerate(constraints))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_exhaustive_matches_brute_force_over_satisfying_hypotheses(seed, alpha):
    vocab, max_length = 5, 4
    table = unlikely(random_table(seed, vocab=vocab), [4])
    cons = [4, 1]
    ids, lengths, scores, satisfied = run(vocab ** (max_length - 1), table, [START], [cons],
                                          max_length, alpha)
    best = brute_force_best(table, START, max_length, alpha, keep=lambda t: contains(t, cons))
    tokens, score = best[0]
    assert tuple(ids[0, : lengths[0]]) == tokens
    np.testing.assert_allclose(scores[0], score / ((5.0 + len(tokens)) / 6.0) ** alpha, rtol=1e-5)
    assert satisfied[0]


def test_without_constraints_it_is_plain_beam_search():
    table = random_table(8, vocab=7)
    starts = tf.constant([START, 5])
    model = MarkovModel(table)

    @tf.function
    def both(constraints):
        state = model.initial_state(starts)
        plain = beam_search(model.step_fn, starts, state, 3, 6, END, 0.5, True)
        cons = constrained_beam_search(
            model.step_fn, starts, state, constraints, 3, 6, END, 0.5, True)
        return plain, cons

    for constraints in (tf.zeros([2, 0], tf.int32), tf.fill([2, 3], -1)):
        plain, cons = both(constraints)
        for a, b in zip(plain, cons[:3]):
            np.testing.assert_array_equal(a, b)
        assert cons[3].numpy().all()


def test_repeated_constraint_needs_repeated_tokens():
    table = unlikely(random_table(9, vocab=7), [6])
    ids, lengths, _, satisfied = run(4, table, [START], [[6, 6, 6]], 10)
    assert satisfied[0]
    assert list(ids[0, : lengths[0]]).count(6) >= 3


def test_unsatisfiable_within_max_length_is_flagged_and_not_ended():
    table = random_table(10, vocab=7)
    ids, lengths, scores, satisfied = run(3, table, [START], [[4, 5, 6]], 2, all_beams=True)
    assert not satisfied.any()
    assert (lengths == 2).all() and END not in ids[0].ravel()
    assert np.isfinite(scores).all()


@pytest.mark.parametrize("seed", range(6))
def test_best_only_equals_the_best_of_all_beams(seed):
    # Best-only decoding stops early (beam.py); it must return what running on returns.
    table = unlikely(random_table(seed, vocab=8, width=9), [5, 8])
    table[:, :, END] = np.log(0.3)
    starts, constraints = [START, 4, 6], [[5, 8], [8, -1], [5, 5]]
    ids, lengths, scores, satisfied = run(4, table, starts, constraints, 25)
    all_ids, all_lengths, all_scores, all_satisfied = run(4, table, starts, constraints, 25, all_beams=True)
    for row in range(len(starts)):
        assert list(ids[row, :lengths[row]]) == list(all_ids[row, 0, :all_lengths[row, 0]])
    np.testing.assert_array_equal(scores, all_scores[:, 0])
    np.testing.assert_array_equal(satisfied, all_satisfied[:, 0])

import numpy as np
import tensorflow as tf

from tablegen_tf.decoding import greedy_search
from tablegen_tf.decoding.fakes_test import END, START, MarkovModel, random_table
from tablegen_tf.decoding.sampling import sample_search


def _sample(table, starts, max_length, **kwargs):
    model = MarkovModel(table)
    start = tf.constant(starts, tf.int32)
    return sample_search(model.step_fn, start, model.initial_state(start), max_length, END, **kwargs)


def test_epsilon_above_every_runner_up_is_greedy():
    table = random_table(4, vocab=7)
    model = MarkovModel(table)
    start = tf.constant([START] * 3, tf.int32)
    greedy = greedy_search(model.step_fn, start, model.initial_state(start), 6, END)
    sampled = _sample(table, [START] * 3, 6, seed=1, epsilon=0.999)  # only the argmax survives
    for a, b in zip(greedy, sampled):
        np.testing.assert_allclose(a, b)


def test_first_tokens_follow_the_distribution_and_scores_are_untempered():
    vocab = 6
    table = np.full((vocab, vocab, vocab), np.log(1e-6), np.float32)
    table[:, START, 4], table[:, START, 5] = np.log(0.7), np.log(0.3)
    table[:, 4, END] = table[:, 5, END] = 0.0
    ids, lengths, scores = _sample(table, [START] * 4000, 3, seed=7)
    share = float(np.mean(ids[:, 0].numpy() == 4))
    assert abs(share - 0.7) < 0.03, share
    np.testing.assert_array_equal(lengths, 2)
    expected = np.where(ids[:, 0].numpy() == 4, np.log(0.7), np.log(0.3))
    np.testing.assert_allclose(scores, expected, rtol=1e-4)


def test_epsilon_drops_improbable_tokens_and_the_seed_repeats():
    vocab = 6
    table = np.full((vocab, vocab, vocab), np.log(1e-6), np.float32)
    table[:, START, 4], table[:, START, 5] = np.log(0.95), np.log(0.05 - 4e-6)
    table[:, 4, END] = table[:, 5, END] = 0.0
    ids, _, _ = _sample(table, [START] * 500, 3, seed=3, epsilon=0.1)
    assert set(ids[:, 0].numpy()) == {4}
    first, _, _ = _sample(table, [START] * 50, 3, seed=5, temperature=3.0)
    again, _, _ = _sample(table, [START] * 50, 3, seed=5, temperature=3.0)
    np.testing.assert_array_equal(first, again)
    assert {4, 5} <= set(first[:, 0].numpy())  # temperature 3 flattens 0.95 / 0.05 to ~0.7 / 0.27

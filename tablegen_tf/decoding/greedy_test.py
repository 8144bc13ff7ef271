import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.decoding import greedy_search
from tablegen_tf.decoding.fakes_test import (
    END, PAD, START, MarkovModel, random_table, reference_greedy,
)

UNKNOWN_BATCH = [tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, None, None], tf.float32)]


@tf.function(input_signature=UNKNOWN_BATCH + [tf.TensorSpec([], tf.int32)])
def decode(start_ids, table, max_length):
    model = MarkovModel(table)
    return greedy_search(model.step_fn, start_ids, model.initial_state(start_ids), max_length, END)


def chain_table(path, vocab=6):
    """Deterministic table: after `prev` comes path[prev] with prob ~1."""
    table = np.full((vocab, vocab, vocab), -20.0, np.float32)
    for prev, nxt in path.items():
        table[:, prev, nxt] = -1e-3
    return table


@pytest.mark.parametrize("seed", range(5))
def test_matches_python_argmax_batched(seed):
    table = random_table(seed, vocab=7)
    starts = [START, 4, 5, 6]
    ids, lengths, scores = decode(tf.constant(starts), table, tf.constant(6))
    for row, start in enumerate(starts):
        tokens, score = reference_greedy(table, start, 6)
        assert lengths[row] == len(tokens)
        assert list(ids[row, : len(tokens)].numpy()) == tokens
        assert np.all(ids[row, len(tokens):].numpy() == PAD)
        np.testing.assert_allclose(scores[row], score, rtol=1e-6)


def test_stops_early_when_all_finished():
    # 2 -> 4 -> 5 -> </s>: three steps although max_length is 50.
    table = chain_table({START: 4, 4: 5, 5: END, END: END})
    ids, lengths, _ = decode(tf.constant([START, 4]), table, tf.constant(50))
    assert ids.shape == (2, 3)  # T = steps run = longest sequence
    np.testing.assert_array_equal(ids, [[4, 5, END], [5, END, PAD]])
    np.testing.assert_array_equal(lengths, [3, 2])


def test_cut_at_max_length_and_zero_length():
    table = chain_table({START: 4, 4: 5, 5: 4})  # never ends
    ids, lengths, scores = decode(tf.constant([START]), table, tf.constant(4))
    np.testing.assert_array_equal(ids, [[4, 5, 4, 5]])
    assert lengths[0] == 4
    ids, lengths, scores = decode(tf.constant([START]), table, tf.constant(0))
    assert ids.shape == (1, 0) and lengths[0] == 0 and scores[0] == 0.0


def test_unknown_batch_size_one_graph():
    table = random_table(3)
    concrete = decode.get_concrete_function()
    for batch in (1, 3):
        ids, lengths, _ = concrete(tf.fill([batch], START), tf.constant(table), tf.constant(5))
        assert ids.shape[0] == batch and lengths.shape == (batch,)
    assert concrete.structured_outputs[0].shape.as_list() == [None, None]


def test_eager_call_gives_the_same_result():
    # Eagerly the while_loop runs step by step; results must not differ.
    table = random_table(4)
    model = MarkovModel(table)
    start = tf.constant([START, 5])
    eager = greedy_search(model.step_fn, start, model.initial_state(start), 5, END)
    graph = decode(start, table, tf.constant(5))
    for a, b in zip(eager, graph):
        np.testing.assert_array_equal(a, b)

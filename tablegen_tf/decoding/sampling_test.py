import numpy as np
import tensorflow as tf

from tablegen_tf.decoding import greedy_search
from tablegen_tf.decoding.fakes_test import END, START, MarkovModel, PerEntryMarkov, random_table
from tablegen_tf.decoding.sampling import draw_in_chunks, sample_search, samples_per_chunk


def _sample(table, tables, samples, max_length, extra_width=0, **kwargs):
    """``tables`` start ids, each drawn ``samples`` times (rows table-major); ``extra_width``
    impossible tokens widen the log-probs, as a batch with longer tables widens the copy ids."""
    model = MarkovModel(table)
    start = tf.constant(np.repeat(tables, samples), tf.int32)

    def step_fn(prev_ids, step, state):
        log_probs, state = model.step_fn(prev_ids, step, state)
        return tf.pad(log_probs, [[0, 0], [0, extra_width]], constant_values=-1e9), state

    return sample_search(step_fn, start, model.initial_state(start), max_length, END, samples, **kwargs)


def _two_way_table(first, second):
    vocab = 6
    table = np.full((vocab, vocab, vocab), np.log(1e-6), np.float32)
    table[:, START, 4], table[:, START, 5] = np.log(first), np.log(second)
    table[:, 4, END] = table[:, 5, END] = 0.0
    return table


def test_epsilon_above_every_runner_up_is_greedy():
    table = random_table(4, vocab=7)
    model = MarkovModel(table)
    start = tf.constant([START] * 3, tf.int32)
    greedy = greedy_search(model.step_fn, start, model.initial_state(start), 6, END)
    sampled = _sample(table, [START], 3, 6, seed=1, epsilon=0.999)  # only the argmax survives
    for a, b in zip(greedy, sampled):
        np.testing.assert_allclose(a, b)


def test_first_tokens_follow_the_distribution_and_scores_are_untempered():
    ids, lengths, scores = _sample(_two_way_table(0.7, 0.3), [START], 4000, 3, seed=7)
    share = float(np.mean(ids[:, 0].numpy() == 4))
    assert abs(share - 0.7) < 0.03, share
    np.testing.assert_array_equal(lengths, 2)
    expected = np.where(ids[:, 0].numpy() == 4, np.log(0.7), np.log(0.3))
    np.testing.assert_allclose(scores, expected, rtol=1e-4)


def test_epsilon_drops_improbable_tokens_and_temperature_flattens():
    ids, _, _ = _sample(_two_way_table(0.95, 0.05 - 4e-6), [START], 500, 3, seed=3, epsilon=0.1)
    assert set(ids[:, 0].numpy()) == {4}
    flat, _, _ = _sample(_two_way_table(0.95, 0.05 - 4e-6), [START], 500, 3, seed=3, temperature=3.0)
    assert 0.15 < float(np.mean(flat[:, 0].numpy() == 5)) < 0.4  # 0.95 / 0.05 at T 3: ~0.73 / 0.27


def test_a_tables_samples_do_not_depend_on_its_batch():
    table = random_table(5, vocab=9)
    alone, alone_lengths, _ = _sample(table, [4], 8, 7, seed=11)
    batched, batched_lengths, _ = _sample(table, [START, 4, 6], 8, 7, extra_width=5, seed=11)
    width = alone.shape[1]
    np.testing.assert_array_equal(alone_lengths, batched_lengths[8:16])
    np.testing.assert_array_equal(alone, batched[8:16, :width])
    again, _, _ = _sample(table, [4], 8, 7, seed=11)
    np.testing.assert_array_equal(alone, again)
    other, _, _ = _sample(table, [4], 8, 7, seed=12)
    assert not np.array_equal(alone, other)


def _ending_tables(first_seed):
    """Three tables' Markov models whose draws end after different numbers of steps."""
    tables = []
    for seed, end in zip(range(first_seed, first_seed + 3), (0.05, 0.3, 0.6)):
        table = random_table(seed, vocab=8, peak=1.0)
        table[:, :, END] = np.log(end)
        tables.append(table)
    return PerEntryMarkov(np.stack(tables))


def test_finished_draws_leave_the_batch_and_change_nothing():
    # step_memory: once a draw has ended, the step function runs on the other rows only (it
    # never sees a finished row; each row reads its own memory), and every draw, length and
    # score equals the search that computes every row.
    model = _ending_tables(30)
    samples = 6
    starts = tf.constant(np.repeat([START, 4, 5], samples), tf.int32)
    memory = {"table": tf.repeat(tf.range(3), samples)}
    state = {"older": starts}

    @tf.function
    def both():
        every = sample_search(model.step_fn_for(memory), starts, state, 20, END, samples, seed=5, epsilon=0.01)
        checked = model.finished_rows_refused()
        compact = sample_search(checked(memory), starts, state, 20, END, samples, seed=5, epsilon=0.01,
                                step_memory=(memory, checked))
        return every, compact

    every, compact = both()
    assert len(set(every[1].numpy())) > 3  # the draws did end at different steps
    for a, b in zip(every, compact):
        np.testing.assert_array_equal(a, b)


def test_chunks_are_the_largest_divisor_of_the_samples_that_fits():
    for batch, max_rows, chunk in ((3, 18, 6), (3, 17, 3), (3, 6, 2), (3, 5, 1), (3, 1, 1), (64, 1024, 16)):
        samples = 64 if batch == 64 else 6
        assert int(samples_per_chunk(batch, samples, max_rows)) == chunk, (batch, max_rows)


def test_draws_in_chunks_are_the_draws_of_one_search():
    # Bounding the rows that draw at once must not change a draw: each chunk's noise is its
    # samples' columns, and its draws end at their own steps (padding is trimmed at the end).
    model, samples, starts = _ending_tables(40), 6, [START, 4, 5]
    whole_rows = tf.constant(np.repeat(starts, samples), tf.int32)
    memory = {"table": tf.repeat(tf.range(3), samples)}
    ids, lengths, scores = sample_search(model.step_fn_for(memory), whole_rows, {"older": whole_rows}, 20, END,
                                         samples, seed=5, epsilon=0.01)

    def draw_chunk(first_sample, chunk):
        rows = tf.repeat(tf.constant(starts, tf.int32), chunk)
        step_memory = {"table": tf.repeat(tf.range(3), chunk)}
        make_step_fn = model.finished_rows_refused()
        return sample_search(make_step_fn(step_memory), rows, {"older": rows}, 20, END, samples, seed=5,
                             epsilon=0.01, step_memory=(step_memory, make_step_fn), first_sample=first_sample,
                             chunk=chunk)

    assert len(set(lengths.numpy())) > 3  # the draws did end at different steps
    for max_rows in (18, 9, 6, 1):
        chunked = tf.function(lambda: draw_in_chunks(draw_chunk, 3, samples, max_rows, 20))()
        np.testing.assert_array_equal(chunked[0], tf.reshape(ids, [3, samples, -1]))
        np.testing.assert_array_equal(chunked[1], tf.reshape(lengths, [3, samples]))
        np.testing.assert_allclose(chunked[2], tf.reshape(scores, [3, samples]), rtol=1e-6)

import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.decoding import beam_search, gather_tree, greedy_search, tile_batch
from tablegen_tf.decoding.fakes_test import (
    END, PAD, START, MarkovModel, PerEntryMarkov, brute_force_best, random_table, reference_beam,
)

SIGNATURE = [
    tf.TensorSpec([None], tf.int32),  # start_ids [B]
    tf.TensorSpec([None, None, None], tf.float32),  # table [V, V, W], W varies
    tf.TensorSpec([], tf.int32),  # max_length
]


def make_decoder(beam_size, alpha=0.0, all_beams=True):
    @tf.function(input_signature=SIGNATURE)
    def decode(start_ids, table, max_length):
        model = MarkovModel(table)
        return beam_search(
            model.step_fn, start_ids, model.initial_state(start_ids), beam_size, max_length,
            END, length_penalty=alpha, return_all_beams=all_beams,
        )

    return decode


def run(beam_size, table, starts, max_length, alpha=0.0, all_beams=True):
    decode = make_decoder(beam_size, alpha, all_beams)
    out = decode(tf.constant(starts), table, tf.constant(max_length))
    return [x.numpy() for x in out]


def hypothesis(ids, length):
    return tuple(int(x) for x in ids[:length])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("alpha", [0.0, 0.7])
def test_beam_one_is_exactly_greedy(seed, alpha):
    table = random_table(seed, vocab=7)
    starts = tf.constant([START, 4, 5])

    @tf.function
    def both():
        model = MarkovModel(table)
        state = model.initial_state(starts)
        greedy = greedy_search(model.step_fn, starts, state, 6, END)
        beam = beam_search(model.step_fn, starts, state, 1, 6, END, length_penalty=alpha)
        return greedy, beam

    (g_ids, g_len, g_scores), (b_ids, b_len, b_scores) = both()
    np.testing.assert_array_equal(g_ids, b_ids)
    np.testing.assert_array_equal(g_len, b_len)
    if alpha == 0.0:
        np.testing.assert_array_equal(g_scores, b_scores)  # bit-exact
    else:
        penalty = ((5.0 + g_len.numpy()) / 6.0) ** alpha
        np.testing.assert_allclose(g_scores.numpy() / penalty, b_scores, rtol=1e-6)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_exhaustive_beam_matches_brute_force(seed, alpha):
    # With K >= W^(L-1) nothing is ever pruned: the K best beams are the K best hypotheses.
    vocab, max_length = 5, 4
    k = vocab ** (max_length - 1)
    table = random_table(seed, vocab=vocab)
    ids, lengths, scores = run(k, table, [START, 4], max_length, alpha)
    for row, start in enumerate([START, 4]):
        best = brute_force_best(table, start, max_length, alpha)
        n = min(k, len(best))
        expected = [s / ((5.0 + len(t)) / 6.0) ** alpha for t, s in best[:n]]
        np.testing.assert_allclose(scores[row, :n], expected, rtol=1e-5)
        assert hypothesis(ids[row, 0], lengths[row, 0]) == best[0][0]
        assert np.all(np.isneginf(scores[row, n:]))  # fewer hypotheses than beams


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_small_beam_matches_python_reference(seed, alpha):
    table = random_table(seed, vocab=8, peak=1.0)
    starts = [START, 5, 7]
    ids, lengths, scores = run(3, table, starts, 7, alpha)
    for row, start in enumerate(starts):
        expected = reference_beam(table, start, 3, 7, alpha)
        got = [hypothesis(ids[row, b], lengths[row, b]) for b in range(3)]
        assert got == [tokens for tokens, _ in expected]
        np.testing.assert_allclose(scores[row], [s for _, s in expected], rtol=1e-5)


def test_reported_scores_are_sequence_log_probs():
    table = random_table(11, vocab=6)
    ids, lengths, scores = run(4, table, [START], 6)
    for b in range(4):
        tokens = hypothesis(ids[0, b], lengths[0, b])
        total = sum(float(table[o, p, w]) for o, p, w in _triples(START, tokens))
        np.testing.assert_allclose(scores[0, b], total, rtol=1e-5)
        assert np.all(ids[0, b, lengths[0, b]:] == PAD)


def _triples(start, tokens):
    older = prev = start
    for w in tokens:
        yield older, prev, w
        older, prev = prev, w


def test_length_penalty_changes_ranking():
    # <s> -> </s> costs log 0.4; <s> -> 4 -> 5 -> </s> costs log(0.6 * 0.7 * 0.9) ~ log 0.38.
    vocab = 6
    table = np.full((vocab, vocab, vocab), np.log(1e-6), np.float32)
    table[:, START, END], table[:, START, 4] = np.log(0.4), np.log(0.6)
    table[:, 4, 5], table[:, 4, END] = np.log(0.7), np.log(0.3)
    table[:, 5, END], table[:, 5, 4] = np.log(0.9), np.log(0.1)
    table[:, END, END] = 0.0
    short = run(4, table, [START], 6, alpha=0.0, all_beams=False)
    long = run(4, table, [START], 6, alpha=1.0, all_beams=False)
    assert hypothesis(short[0][0], short[1][0]) == (END,)
    assert hypothesis(long[0][0], long[1][0]) == (4, 5, END)
    for alpha in (0.0, 1.0):
        assert brute_force_best(table, START, 6, alpha)[0][0] == (
            (END,) if alpha == 0.0 else (4, 5, END))


def test_stops_early_when_all_beams_finished():
    table = random_table(5, vocab=5)
    table[:, :, END] = np.log(0.999)  # nearly everything ends at once
    ids, lengths, _ = run(3, table, [START, 4], 40)
    assert ids.shape[-1] == lengths.max() < 40


def test_batch_rows_are_independent():
    table = random_table(7, vocab=7, peak=1.0)
    starts = [START, 4, 6, START]
    batched = run(3, table, starts, 6)
    for row, start in enumerate(starts):
        single = run(3, table, [start], 6)
        t = single[0].shape[-1]
        np.testing.assert_array_equal(batched[0][row, :, :t], single[0][0])
        np.testing.assert_array_equal(batched[1][row], single[1][0])
        np.testing.assert_allclose(batched[2][row], single[2][0], rtol=1e-6)


def test_extended_vocab_width_varies_between_calls():
    # One traced graph, log_probs of width V + 2 then V + 5: copy ids V.. are emitted.
    decode = make_decoder(3)
    vocab = 6
    for width in (vocab + 2, vocab + 5):
        table = random_table(width, vocab=vocab, width=width)
        table[:, START, width - 1] = np.log(0.9)  # make copying the last record likely
        out = decode(tf.constant([START]), table, tf.constant(5))
        ids, lengths, scores = [x.numpy() for x in out]
        assert ids[0, 0, 0] == width - 1
        expected = reference_beam(table, START, 3, 5)
        assert [hypothesis(ids[0, b], lengths[0, b]) for b in range(3)] == [t for t, _ in expected]
    assert len(decode._list_all_concrete_functions()) == 1


def test_more_beams_than_hypotheses():
    table = random_table(2, vocab=4)
    ids, lengths, scores = run(50, table, [START], 2)
    best = brute_force_best(table, START, 2)
    assert hypothesis(ids[0, 0], lengths[0, 0]) == best[0][0]
    assert np.isfinite(scores[0, : len(best)]).all() and np.isneginf(scores[0, len(best):]).all()


def test_tile_batch_repeats_each_entry_in_a_row():
    state = {"h": tf.constant([[1.0], [2.0]]), "ids": tf.constant([7, 8])}
    tiled = tile_batch(state, 3)
    np.testing.assert_array_equal(tiled["ids"], [7, 7, 7, 8, 8, 8])
    assert tiled["h"].shape == (6, 1)


def test_gather_tree_follows_parent_pointers():
    rng = np.random.default_rng(0)
    t, b, k = 5, 2, 3
    step_ids = rng.integers(0, 9, size=(t, b, k)).astype(np.int32)
    parents = rng.integers(0, k, size=(t, b, k)).astype(np.int32)
    got = gather_tree(tf.constant(step_ids), tf.constant(parents)).numpy()
    for batch in range(b):
        for beam in range(k):
            cur = beam
            for time in reversed(range(t)):
                assert got[time, batch, beam] == step_ids[time, batch, cur]
                cur = parents[time, batch, cur]


def test_length_penalty_may_be_a_tensor():
    # Serving can take alpha as an input; alpha == 0 as a tensor must change nothing.
    table = random_table(12, vocab=6)
    start = tf.constant([START, 4])

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def decode(alpha):
        model = MarkovModel(table)
        return beam_search(model.step_fn, start, model.initial_state(start), 3, 6, END,
                           length_penalty=alpha, return_all_beams=True)

    for alpha in (0.0, 0.8):
        expected = run(3, table, [START, 4], 6, alpha)
        for got, want in zip(decode(tf.constant(alpha)), expected):
            np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_best_only_stops_early_and_returns_the_same_best(seed):
    # return_all_beams=False may stop once no unfinished beam can overtake the best
    # finished one; the best hypothesis and its score must equal running on.
    table = random_table(seed, vocab=8, peak=1.0)
    table[:, :, END] = np.log(0.3)  # ends are likely but not certain: the beams part ways
    starts = [START, 4, 5, 6]
    all_ids, all_lengths, all_scores = run(4, table, starts, 30, all_beams=True)
    ids, lengths, scores = run(4, table, starts, 30, all_beams=False)
    for row in range(len(starts)):
        assert hypothesis(ids[row], lengths[row]) == hypothesis(all_ids[row, 0], all_lengths[row, 0])
    np.testing.assert_array_equal(scores, all_scores[:, 0])
    assert ids.shape[-1] <= all_ids.shape[-1]


def test_best_only_stops_when_the_best_is_final():
    # <s> -> </s> (p 0.5) is final after one step; the other beams loop on with p 0.5 ->
    # below it at once, so the search stops at step 1 instead of max_length.
    vocab = 6
    table = np.full((vocab, vocab, vocab), np.log(1e-6), np.float32)
    table[:, START, END], table[:, START, 4] = np.log(0.5), np.log(0.5 - 1e-5)
    table[:, 4, 4] = np.log(1.0 - 1e-5)
    table[:, END, END] = 0.0
    ids, lengths, _ = run(3, table, [START], 40, all_beams=False)
    assert hypothesis(ids[0], lengths[0]) == (END,) and ids.shape[-1] == 1
    all_ids, _, _ = run(3, table, [START], 40, all_beams=True)
    assert all_ids.shape[-1] == 40  # running on: the looping beams never finish


@pytest.mark.parametrize("all_beams", [True, False])
@pytest.mark.parametrize("alpha", [0.0, 0.8])
def test_finished_entries_leaving_the_batch_change_nothing(all_beams, alpha):
    # step_memory: entries whose search is over leave the batch (the step function runs on
    # the others' rows only); every output must equal the search that keeps them.
    tables = []
    for seed, end in zip(range(5), (0.05, 0.2, 0.4, 0.6, 0.02)):
        table = random_table(seed, vocab=8, peak=1.0)
        table[:, :, END] = np.log(end)  # entries finish after different numbers of steps
        tables.append(table)
    model = PerEntryMarkov(np.stack(tables))
    starts = tf.constant([START, 4, 5, 6, START])

    @tf.function
    def both():
        k = 3
        memory = {"table": tf.repeat(tf.range(5), k)}  # tiled to B*K rows
        state = {"older": starts}
        step_fn = model.step_fn_for(memory)
        kept = beam_search(step_fn, starts, state, k, 25, END, alpha, all_beams)
        left = beam_search(step_fn, starts, state, k, 25, END, alpha, all_beams,
                           step_memory=(memory, model.step_fn_for))
        return kept, left

    kept, left = both()
    for a, b in zip(kept, left):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("all_beams", [True, False])
@pytest.mark.parametrize("alpha", [0.0, 0.8])
def test_finished_beams_are_not_computed(all_beams, alpha):
    # step_memory: once a beam has finished, the step function runs on the unfinished rows
    # only (a finished beam's only continuation is pad): it never sees a row whose previous
    # token is END or pad, its memory rows are those rows' own, and the beams equal the
    # search without step_memory.
    tables = []
    for seed, end in zip(range(4), (0.3, 0.1, 0.5, 0.02)):
        table = random_table(seed + 10, vocab=8, peak=1.0)
        table[:, :, END] = np.log(end)  # beams finish at different steps
        tables.append(table)
    model = PerEntryMarkov(np.stack(tables))
    starts = tf.constant([START, 4, 5, 6])

    checked_step_fn = model.finished_rows_refused()

    @tf.function
    def both():
        k = 3
        memory = {"table": tf.repeat(tf.range(4), k)}  # tiled to B*K rows
        state = {"older": starts}
        kept = beam_search(model.step_fn_for(memory), starts, state, k, 25, END, alpha, all_beams)
        compact = beam_search(checked_step_fn(memory), starts, state, k, 25, END, alpha, all_beams,
                              step_memory=(memory, checked_step_fn))
        return kept, compact

    kept, compact = both()
    for a, b in zip(kept, compact):
        np.testing.assert_array_equal(a, b)


def test_dead_beams_are_not_computed():
    # Dead beams (score -inf: beams 1.. at step 0, or fewer continuations than beams) are
    # skipped too: the step function sees one row per entry at step 0, and the live beams,
    # their scores and lengths equal the search without step_memory.
    tables = []
    rng = np.random.default_rng(7)
    for seed in range(3):
        table = random_table(seed + 20, vocab=8, peak=1.0)
        for older in range(8):
            for prev in range(8):
                allowed = {END, int(rng.integers(4, 8))}
                table[older, prev, [w for w in range(8) if w not in allowed]] = -np.inf
        tables.append(table)
    model = PerEntryMarkov(np.stack(tables))
    starts = tf.constant([START, 4, 5])

    def checked_step_fn(memory):
        step_fn = model.step_fn_for(memory)

        def checked(prev_ids, step, state):
            first = tf.debugging.assert_equal(
                tf.logical_or(step > 0, tf.equal(tf.size(prev_ids), 3)), True,
                message="dead beams were computed at step 0")
            with tf.control_dependencies([first]):
                return step_fn(tf.identity(prev_ids), step, state)

        return checked

    @tf.function
    def both():
        k = 5  # one beam has 2 continuations, so 2, 3 and 4 beams are alive after steps 0, 1, 2
        memory = {"table": tf.repeat(tf.range(3), k)}
        state = {"older": starts}
        kept = beam_search(model.step_fn_for(memory), starts, state, k, 3, END, 0.0, True)
        compact = beam_search(checked_step_fn(memory), starts, state, k, 3, END, 0.0, True,
                              step_memory=(memory, checked_step_fn))
        return kept, compact

    (ids, lengths, scores), (ids2, lengths2, scores2) = [[x.numpy() for x in out] for out in both()]
    np.testing.assert_array_equal(scores, scores2)
    alive = scores > -np.inf
    assert alive.sum() > 3 and (~alive).sum() > 0  # both kinds of beams are checked
    np.testing.assert_array_equal(lengths[alive], lengths2[alive])
    np.testing.assert_array_equal(ids[alive], ids2[alive])


@pytest.mark.parametrize("all_beams,alpha", [(False, 0.0), (True, 0.8)])  # best-only pruning; all beams
def test_xla_steps_give_the_same_beams(all_beams, alpha):
    # jit_max_batch: a batch of at most that many entries runs each step as one XLA
    # computation; beams, lengths and scores must be those of the graph loop.
    table = random_table(3, vocab=9, width=12)
    starts = tf.constant([START, 4, 5])

    @tf.function
    def both(starts):
        model = MarkovModel(table)
        search = lambda jit: beam_search(  # noqa: E731
            model.step_fn, starts, model.initial_state(starts), 4, 10, END, alpha, all_beams, jit_max_batch=jit)
        return search(0), search(3)

    for batch in (starts[:1], starts):  # one entry (the latency path) and a small batch
        plain, jitted = both(batch)
        for a, b in zip(plain, jitted):
            np.testing.assert_array_equal(a, b)


def test_max_length_beyond_the_xla_step_buckets_takes_the_graph_loop(monkeypatch):
    # The whole-search XLA computation has step buffers of JIT_STEP_BUCKETS; a longer
    # max_length must still decode (through the graph loop), with the same beams.
    from tablegen_tf.decoding import beam

    monkeypatch.setattr(beam, "JIT_STEP_BUCKETS", (4,))
    table = random_table(1, vocab=9, width=12)
    starts = tf.constant([START])

    @tf.function
    def both(max_length):
        model = MarkovModel(table)
        search = lambda jit: beam_search(  # noqa: E731
            model.step_fn, starts, model.initial_state(starts), 3, max_length, END, return_all_beams=True,
            jit_max_batch=jit)
        return search(0), search(1)

    for max_length in (3, 10):  # within the bucket (XLA), beyond it (graph loop)
        plain, jitted = both(tf.constant(max_length))
        for a, b in zip(plain, jitted):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("all_beams", [True, False])
@pytest.mark.parametrize("parts", [2, 3])
def test_a_batch_searched_in_parallel_parts_gives_the_same_output(all_beams, parts):
    # Entries finish after different numbers of steps, so the parts run different step
    # counts and their ids are padded to the longest; every output must equal one search.
    tables = []
    for seed, end in zip(range(7), (0.05, 0.2, 0.4, 0.6, 0.02, 0.3, 0.1)):
        table = random_table(seed, vocab=8, peak=1.0)
        table[:, :, END] = np.log(end)
        tables.append(table)
    model = PerEntryMarkov(np.stack(tables))
    starts = tf.constant([START, 4, 5, 6, START, 3, 2])

    @tf.function
    def both():
        k = 3
        memory = {"table": tf.repeat(tf.range(7), k)}
        state = {"older": starts}
        step_fn = model.step_fn_for(memory)
        common = dict(step_memory=(memory, model.step_fn_for))
        whole = beam_search(step_fn, starts, state, k, 25, END, 0.0, all_beams, **common)
        split = beam_search(step_fn, starts, state, k, 25, END, 0.0, all_beams, parallel_searches=parts,
                            parallel_min_batch=4, **common)
        below = beam_search(step_fn, starts, state, k, 25, END, 0.0, all_beams, parallel_searches=parts,
                            parallel_min_batch=8, **common)  # too small a batch to split
        return whole, split, below

    whole, split, below = both()
    for a, b, c in zip(whole, split, below):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)

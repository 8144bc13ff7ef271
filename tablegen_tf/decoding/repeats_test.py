"""N-gram repeat blocking: against a NumPy greedy reference, inside beam search (plain and
XLA-compiled), and copies compared by their text."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.decoding import beam_search, greedy_search
from tablegen_tf.decoding.fakes_test import END, START, UNK, MarkovModel, random_table
from tablegen_tf.decoding.repeats import RepeatBlocker, canonical_copy_slots

VOCAB = 6


def _table(seed):
    """A fake that prefers long outputs (so repeats are tempting) and never emits <s> or
    <unk> (special ids are never blocked; a real search forbids <unk>)."""
    table = random_table(seed, vocab=VOCAB, width=VOCAB + 3, peak=4.0)
    table[..., END] -= 6.0
    table[..., [START, UNK]] = -np.inf
    return table


def _blocked_search(table, size, copy_texts, search, **kwargs):
    model = MarkovModel(table)
    start = tf.fill([copy_texts.shape[0]], START)
    blocker = RepeatBlocker(size, VOCAB, tf.constant(copy_texts))
    state = blocker.initial_state(model.initial_state(start), copy_texts.shape[0], kwargs["max_length"])
    return search(blocker.wrap(model.step_fn), start, state, **kwargs)


def _canonical(token, copy_texts):
    return token if token < VOCAB else VOCAB + list(copy_texts).index(copy_texts[token - VOCAB])


def _np_blocked_greedy(table, size, copy_texts, max_length):
    """The reference: at each step the best token that completes no n-gram already said."""
    history, out, older, prev = [START], [], START, START
    for _ in range(max_length):
        log_probs = table[older if older < VOCAB else 1, prev if prev < VOCAB else 1].copy()
        context = history[len(history) - size + 1:] if size > 1 else []
        for j in range(len(history) - size + 1):
            if history[j:j + size - 1] == context:
                banned = history[j + size - 1]
                for token in range(len(log_probs)):
                    if banned > END and _canonical(token, copy_texts) == banned:
                        log_probs[token] = -np.inf
        token = int(np.argmax(log_probs))
        out.append(token)
        if token == END:
            break
        history.append(_canonical(token, copy_texts))
        older, prev = prev, token
    return out


def _ngrams(tokens, size):
    return [tuple(tokens[i:i + size]) for i in range(len(tokens) - size + 1)]


def test_copy_slots_map_to_the_first_slot_with_their_text():
    texts = tf.constant([["di", "Mendrisio", "di", "di", ""], ["a", "b", "c", "b", ""]])
    assert canonical_copy_slots(texts).numpy().tolist() == [[0, 1, 0, 0, 4], [0, 1, 2, 1, 4]]


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_with_blocking_matches_the_reference(size, seed):
    copy_texts = np.array(["x", "y", "x"])  # copy ids 6, 7, 8: 6 and 8 are one word
    table = _table(seed)
    ids, lengths, _ = tf.function(lambda: _blocked_search(table, size, copy_texts[None], greedy_search,
                                                          max_length=12, end_id=END))()
    got = ids.numpy()[0, :lengths.numpy()[0]].tolist()
    assert got == _np_blocked_greedy(table, size, copy_texts, 12)


def test_inputs_without_copy_slots_block_vocabulary_repeats():
    """A family whose inputs have no copy items (copy_texts [B, 0]): ids are vocabulary only."""
    table = _table(1)[..., :VOCAB]
    ids, lengths, _ = tf.function(lambda: _blocked_search(table, 2, np.zeros([1, 0], str), greedy_search,
                                                          max_length=12, end_id=END))()
    assert ids.numpy()[0, :lengths.numpy()[0]].tolist() == _np_blocked_greedy(table, 2, [], 12)


def test_without_blocking_the_fake_repeats_so_the_tests_can_fail():
    table = _table(0)
    ids, _, _ = greedy_search(MarkovModel(table).step_fn, tf.constant([START]),
                              MarkovModel(table).initial_state(tf.constant([START])), 12, END)
    tokens = [_canonical(t, ["x", "y", "x"]) for t in ids.numpy()[0].tolist()]
    assert len(set(_ngrams(tokens, 2))) < len(_ngrams(tokens, 2))


@pytest.mark.parametrize("jit", [0, 1])
def test_no_beam_repeats_an_ngram_and_xla_gives_the_same_beams(jit):
    copy_texts = np.array([["x", "y", "x"], ["x", "y", "z"]])
    table = _table(3)

    @tf.function
    def run(jit_max_batch):
        return _blocked_search(table, 2, copy_texts[:1], beam_search, beam_size=4, max_length=12, end_id=END,
                               return_all_beams=True, jit_max_batch=jit_max_batch)

    ids, lengths, scores = run(jit)
    assert np.isfinite(scores.numpy()[0]).sum() >= 2
    for beam, length, score in zip(ids.numpy()[0], lengths.numpy()[0], scores.numpy()[0]):
        if not np.isfinite(score):
            continue  # a dead beam: fewer hypotheses than beams
        tokens = [_canonical(t, copy_texts[0]) for t in beam[:length] if t != END]
        assert len(set(_ngrams(tokens, 2))) == len(_ngrams(tokens, 2)), tokens
    reference = run(0)
    np.testing.assert_array_equal(ids.numpy(), reference[0].numpy())
    np.testing.assert_allclose(scores.numpy(), reference[2].numpy())

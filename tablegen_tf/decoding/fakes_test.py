"""Model-free fakes for the decoding tests, plus NumPy references to check against.

The fake model is a second-order Markov chain: log_probs depend on the previous
two inputs, and the older one lives in the decoder *state*, so a decoder that
reorders beam states wrongly produces wrong scores.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tablegen_tf.constants import BOS_ID as START, EOS_ID as END, NEG_INF, PAD_ID as PAD, UNK_ID as UNK  # noqa: F401


def random_table(seed, vocab=6, width=None, peak=2.0):
    """log-probs [V, V, W] with W >= V (extended ids V.. are copies); pad never emitted."""
    width = width or vocab
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(vocab, vocab, width)) * peak
    logits[..., PAD] = NEG_INF  # the model masks <pad>, like a real one
    logits -= logits.max(axis=-1, keepdims=True)
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)


class MarkovModel:
    """step_fn(prev_ids [N], step, state) -> (log_probs [N, W], state) over a table."""

    def __init__(self, table):
        self.table = tf.convert_to_tensor(table, tf.float32)  # [V, V, W]

    def _row(self, ids):
        vocab = tf.shape(self.table)[0]
        return tf.where(ids < vocab, ids, UNK)  # copied (extended) ids are read as <unk>

    def initial_state(self, start_ids):
        batch = tf.shape(start_ids)[0]
        return {"older": start_ids, "steps": tf.zeros([batch, 1], tf.float32)}

    def step_fn(self, prev_ids, step, state):
        index = tf.stack([self._row(state["older"]), self._row(prev_ids)], axis=-1)
        log_probs = tf.gather_nd(self.table, index)  # [N, W]
        return log_probs, {"older": prev_ids, "steps": state["steps"] + 1.0}


def np_row(table, ids):
    return ids if ids < table.shape[0] else UNK


def np_log_prob(table, older, prev, token):
    return float(table[np_row(table, older), np_row(table, prev), token])


def sequence_score(table, start, tokens):
    """Sum of log-probs of tokens (e.g. a decoder output up to its length)."""
    older = prev = start
    total = 0.0
    for token in tokens:
        total += np_log_prob(table, older, prev, token)
        older, prev = prev, token
    return total


def lp(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def enumerate_hypotheses(table, start, max_length):
    """All (tokens, sum log-prob) ending with END, or of max_length without END."""
    width = table.shape[-1]
    out = []

    def grow(tokens, older, prev, score):
        for w in range(width):
            step = np_log_prob(table, older, prev, w)
            if step == NEG_INF:
                continue
            seq = tokens + (w,)
            if w == END or len(seq) == max_length:
                out.append((seq, score + step))
            else:
                grow(seq, prev, w, score + step)

    grow((), start, start, 0.0)
    return out


def brute_force_best(table, start, max_length, alpha=0.0, keep=None):
    """Hypotheses sorted best first by length-normalised score; keep filters them."""
    hyps = [h for h in enumerate_hypotheses(table, start, max_length) if keep is None or keep(h[0])]
    return sorted(hyps, key=lambda h: -h[1] / lp(len(h[0]), alpha))


def reference_greedy(table, start, max_length):
    older = prev = start
    tokens, score = [], 0.0
    for _ in range(max_length):
        row = table[np_row(table, older), np_row(table, prev)]
        token = int(np.argmax(row))
        tokens.append(token)
        score += float(row[token])
        older, prev = prev, token
        if token == END:
            break
    return tokens, score


def reference_beam(table, start, beam_size, max_length, alpha=0.0):
    """Same algorithm as beam.py, written with Python lists. Returns finite beams."""
    # (score, tokens, finished, older, prev)
    beams = [(0.0, (), False, start, start)]
    for _ in range(max_length):
        candidates = []
        for score, tokens, finished, older, prev in beams:
            if finished:
                candidates.append((score, tokens, True, older, prev))
                continue
            for w in range(table.shape[-1]):
                step = np_log_prob(table, older, prev, w)
                if step != NEG_INF:
                    candidates.append((score + step, tokens + (w,), w == END, prev, w))
        # Stable sort: ties keep (beam, token) order, like tf.math.top_k.
        candidates.sort(key=lambda c: -c[0] / lp(len(c[1]), alpha))
        beams = candidates[:beam_size]
        if all(b[2] for b in beams):
            break
    return [(b[1], b[0] / lp(len(b[1]), alpha)) for b in beams]


def test_enumeration_is_a_distribution():
    # Probabilities of all complete hypotheses sum to 1 (every path ends or is cut).
    table = random_table(0, vocab=5)
    total = sum(np.exp(s) for _, s in enumerate_hypotheses(table, START, 4))
    np.testing.assert_allclose(total, 1.0, rtol=1e-5)


def test_markov_model_matches_numpy():
    table = random_table(1, vocab=5, width=7)
    model = MarkovModel(table)
    state = model.initial_state(tf.constant([START, 4]))
    log_probs, state = model.step_fn(tf.constant([4, 6]), tf.constant(0), state)
    np.testing.assert_allclose(log_probs[0], table[START, 4])
    np.testing.assert_allclose(log_probs[1], table[4, UNK])  # copy id 6 -> <unk>


class PerEntryMarkov:
    """A Markov model per batch entry: memory {"table": [N] index into tables [E, V, V, W]}."""

    def __init__(self, tables):
        self.tables = tf.convert_to_tensor(tables, tf.float32)

    def step_fn_for(self, memory):
        def step_fn(prev_ids, step, state):
            index = tf.stack([memory["table"], state["older"], prev_ids], axis=-1)
            return tf.gather_nd(self.tables, index), {"older": prev_ids}

        return step_fn

    def finished_rows_refused(self):
        """step_fn_for, asserting that no row whose previous token ended it is computed
        (searches with ``step_memory`` leave finished rows out)."""

        def make_step_fn(memory):
            step_fn = self.step_fn_for(memory)

            def checked(prev_ids, step, state):
                ended = (tf.equal(prev_ids, END) | tf.equal(prev_ids, PAD)) & (step > 0)
                with tf.control_dependencies([
                    tf.debugging.assert_equal(tf.reduce_any(ended), False, message="a finished row was computed"),
                ]):
                    return step_fn(tf.identity(prev_ids), step, state)

            return checked

        return make_step_fn

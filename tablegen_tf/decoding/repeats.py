"""N-gram repeat blocking: a step-function wrapper that never lets a hypothesis say the same
n words twice (Paulus et al. 2018's trigram blocking; fairseq's and Hugging Face's
``no_repeat_ngram_size``).

Why: on tables whose words the model has not seen (WebNLG categories held out of training),
a copy model loses track of what it has copied and loops ("di di di", "Pennsylvania,
Pennsylvania, ..."): two thirds of its texts repeat a trigram, against 7 % of the references.

Copies are compared by their text: an out-of-vocabulary word copied from source item i has
the extended id V + i, so the same word at two places of the table has two ids. Each row's
copy slots are mapped to the first slot with the same text (``canonical_copy_slots``) and the
history holds those canonical ids; banning a canonical id bans every slot with its text.

Static shapes only, so a one-table search still compiles whole with XLA. The history rides
in the decoding state ([N, max_length + 1], <s> first), so beam search reorders it with the
model's state and compacted searches gather it with the rows.
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.constants import EOS_ID, NEG_INF
from tablegen_tf.decoding.common import copied_items


def canonical_copy_slots(copy_texts: tf.Tensor) -> tf.Tensor:
    """[B, S] strings (what extended id V + i resolves to) -> [B, S] int32: for each slot,
    the first slot of its row with the same text."""
    same = tf.cast(tf.equal(copy_texts[:, :, None], copy_texts[:, None, :]), tf.int32)  # [B, S, S]
    # A column past the end so the reduction is never over an empty axis (S = 0); a slot always
    # equals itself, so it is never picked.
    same = tf.pad(same, [[0, 0], [0, 0], [0, 1]], constant_values=1)
    return tf.argmax(same, axis=-1, output_type=tf.int32)


class RepeatBlocker:
    """The search's step function with ``log p = -inf`` for each token that would complete
    an n-gram (``size`` tokens) the hypothesis already holds."""

    def __init__(self, size: int, vocab_size, copy_texts: tf.Tensor):
        """``vocab_size``: V, the first extended (copy) id; ``copy_texts`` [B, S]: what ids
        V .. V + S - 1 resolve to."""
        if size < 1:
            raise ValueError(f"decode.no_repeat_ngram_size: at least 1 (0 = off), got {size}")
        self.size = size
        self.vocab_size = vocab_size
        self.canonical = canonical_copy_slots(copy_texts)  # [B, S]

    def initial_state(self, state, batch_size, max_length):
        """(model state, (history [B, max_length + 1] -1 = not yet, canonical slots [B, S]))."""
        history = tf.fill([batch_size, max_length + 1], tf.constant(-1, tf.int32))
        return state, (history, self.canonical)

    def wrap(self, step_fn):
        """``step_fn`` over model state -> a step function over (model state, blocker state)."""

        def step(prev_ids, t, state):
            model_state, (history, canonical) = state
            log_probs, model_state = step_fn(prev_ids, t, model_state)
            vocab_size = tf.cast(self.vocab_size, tf.int32)
            token = self._canonical_ids(prev_ids, canonical, vocab_size)
            column = tf.equal(tf.range(tf.shape(history)[1]), t)[None, :]
            history = tf.where(column, token[:, None], history)  # prev_ids: the token of step t - 1
            banned = self._banned(history, t)  # [N, J] canonical ids, -1 = none
            return self._mask(log_probs, banned, canonical, vocab_size), (model_state, (history, canonical))

        return step

    @staticmethod
    def _canonical_ids(ids, canonical, vocab_size):
        return tf.where(ids >= vocab_size, vocab_size + copied_items(ids, canonical, vocab_size), ids)

    def _banned(self, history, t):
        """[N, J]: the token after each earlier occurrence of the last size - 1 tokens (the
        history's first t + 1 columns hold <s> and the prefix), else -1."""
        n, length = self.size, tf.shape(history)[1]
        starts = length - n + 1  # J: n-gram start positions
        context = tf.gather(history, tf.maximum(t - n + 2, 0) + tf.range(n - 1), axis=1)  # [N, n-1]
        match = tf.fill([tf.shape(history)[0], starts], t - n + 2 >= 0)
        for k in range(n - 1):
            match &= tf.equal(history[:, k:k + starts], context[:, k:k + 1])
        following = history[:, n - 1:]  # [N, J]: -1 past the prefix, so never banned
        return tf.where(match & (following > EOS_ID), following, -1)

    @staticmethod
    def _mask(log_probs, banned, canonical, vocab_size):
        """-inf at the banned ids of each row. Most steps ban nothing, and a row seldom bans
        more than a few ids: the scatters run only when something is banned, over each row's
        first SHORT_LIST bans when no row has more (the same result), else over all of them."""
        found = banned >= 0

        def short_list():
            width = tf.shape(banned)[1]
            padded = tf.pad(banned, [[0, 0], [0, SHORT_LIST]], constant_values=-1)
            order = tf.where(padded >= 0, -tf.range(width + SHORT_LIST)[None, :], -width - SHORT_LIST)
            return tf.gather(padded, tf.math.top_k(order, SHORT_LIST).indices, batch_dims=1)

        def apply():
            few = tf.reduce_max(tf.reduce_sum(tf.cast(found, tf.int32), 1)) <= SHORT_LIST
            return tf.cond(few, lambda: _masked(log_probs, short_list(), canonical, vocab_size),
                           lambda: _masked(log_probs, banned, canonical, vocab_size))

        return tf.cond(tf.reduce_any(found), apply, lambda: log_probs)


# A row's bans applied as a list of this many when no row of the step has more (top_k picks them).
SHORT_LIST = 8


def _masked(log_probs, banned, canonical, vocab_size):
    """log_probs with -inf at ``banned`` [N, J] (canonical ids, -1 = none), in place (scatters;
    no pass over [N, W]). A scatter's "no ban" entries go to column 0 (<pad>) as min(log-prob,
    0): unchanged."""
    rows = tf.range(tf.shape(banned)[0])[:, None]
    in_vocab = (banned >= 0) & (banned < vocab_size)
    log_probs = tf.tensor_scatter_nd_min(log_probs, _pairs(rows, tf.where(in_vocab, banned, 0)), tf.reshape(
        tf.where(in_vocab, tf.constant(NEG_INF, log_probs.dtype), tf.constant(0.0, log_probs.dtype)), [-1]))
    copied = banned >= vocab_size
    return tf.cond(tf.reduce_any(copied), lambda: _masked_copies(log_probs, banned, copied, canonical, vocab_size),
                   lambda: log_probs)


def _masked_copies(log_probs, banned, copied, canonical, vocab_size):
    """Copy slots: mark the banned canonical slots, then -inf at every slot that maps to one."""
    rows = tf.range(tf.shape(banned)[0])[:, None]
    slots, width = tf.shape(canonical)[1], tf.shape(log_probs)[1]
    marks = tf.tensor_scatter_nd_max(
        tf.zeros(tf.shape(canonical), tf.int32),
        _pairs(rows, tf.clip_by_value(banned - vocab_size, 0, slots - 1)),
        tf.reshape(tf.cast(copied, tf.int32), [-1]))
    blocked = (tf.gather(marks, canonical, batch_dims=1) > 0) & (vocab_size + tf.range(slots) < width)
    columns = tf.where(blocked, vocab_size + tf.range(slots), 0)
    values = tf.where(blocked, tf.constant(NEG_INF, log_probs.dtype), tf.constant(0.0, log_probs.dtype))
    return tf.tensor_scatter_nd_min(log_probs, _pairs(rows, columns), tf.reshape(values, [-1]))


def _pairs(rows, columns):
    """rows [N, 1], columns [N, C] -> [N * C, 2] (row, column) scatter indices."""
    return tf.reshape(tf.stack([tf.broadcast_to(rows, tf.shape(columns)), columns], -1), [-1, 2])

"""Shared helpers for the decoders: beam tiling/gathering, length penalty, backtracking.

Everything here is plain core TensorFlow so the decoders trace inside a
``tf.function`` with an unknown batch size and run in a SavedModel under
TF Serving (no TF-Addons, no tensorflow-text ops).

Shape names: B batch, K beam size, N = B*K flattened beams, W log-prob width
(extended vocabulary V + R, known only at run time), T decoded steps, C constraints.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import cond_v2

from tablegen_tf.constants import NEG_INF


def switch_case(index, branches):
    """``tf.switch_case`` whose branches stay function calls: inside a tf.function TF
    lowers a Case/If op to Switch/Merge, and then every op of the branches NOT taken
    still runs as a dead node at each call (the SavedModel's ``generate``: 10 beam widths
    x (constrained + plain search) ~5-25 ms per one-table call). Not lowered, only the
    taken branch runs. (``lower_using_switch_merge`` has no public spelling.)"""
    if tf.executing_eagerly():  # cond_v2 builds graph ops only; eagerly, just run the branch
        return branches[int(index)]()
    return cond_v2.indexed_case(index, branches, lower_using_switch_merge=False)


# Width of the chunks of top_k's first pass (a micro-benchmark of [320, 2990] float32,
# k 5, 2 threads on a busy host: 32, 64 and 128 all about halved tf.math.top_k's time).
TOP_K_CHUNK = 64


def top_k(values, k):
    """``tf.math.top_k(values [N, W], k)`` exactly (the same values and indices, ties to the
    lower index), faster when W >> k: TF's CPU kernel pushes every element through a
    heap (~10 ns each: a beam step's biggest op after the matmuls). Here one vectorised
    pass takes each chunk's max; the k best elements lie in the k best chunks (ranked
    by max, ties to the lower chunk), and only those are ranked element by element.
    ``k`` <= W."""
    rows, width = tf.shape(values)[0], tf.shape(values)[1]
    chunks = tf.maximum(-(-width // TOP_K_CHUNK), k)  # -inf padding at the end is never picked first
    padded = tf.pad(values, [[0, 0], [0, chunks * TOP_K_CHUNK - width]], constant_values=NEG_INF)
    padded = tf.reshape(padded, [rows, chunks, TOP_K_CHUNK])
    _, best = tf.math.top_k(tf.reduce_max(padded, axis=2), k=k)  # [N, k]
    best = tf.sort(best, axis=1)  # in index order, so equal values keep the lower index first
    candidates = tf.reshape(tf.gather(padded, best, batch_dims=1), [rows, k * TOP_K_CHUNK])
    top, at = tf.math.top_k(candidates, k=k)
    return top, tf.gather(best, at // TOP_K_CHUNK, batch_dims=1) * TOP_K_CHUNK + at % TOP_K_CHUNK


def tile_batch(nested, multiplier):
    """[B, ...] -> [B * K, ...]: each batch entry repeated K times in a row (b0k0, b0k1, ..)."""
    return tf.nest.map_structure(lambda x: tf.repeat(x, multiplier, axis=0), nested)


def gather_beams(nested, parent, beam_size):
    """Reorders flattened beam state [N, ...] by parent beam indices [B, K] (within batch)."""
    batch_size = tf.shape(parent)[0]
    offsets = tf.range(batch_size)[:, None] * beam_size  # [B, 1]
    flat = tf.reshape(parent + offsets, [-1])  # [N]
    return tf.nest.map_structure(lambda x: tf.gather(x, flat), nested)


def length_penalty(lengths, alpha):
    """GNMT (Wu et al. 2016) ((5 + len) / 6) ** alpha; alpha == 0 gives 1."""
    lengths = tf.cast(lengths, tf.float32)
    return tf.pow((5.0 + lengths) / 6.0, tf.cast(alpha, tf.float32))


def normalise(log_probs, lengths, alpha, penalties=None):
    """log_probs / length_penalty(lengths); skipped for a Python alpha of 0 (exactness).
    ``penalties``: length_penalty of 0, 1, ... precomputed (penalty_table)."""
    if isinstance(alpha, (int, float)) and alpha == 0:
        return log_probs
    return log_probs / (length_penalty(lengths, alpha) if penalties is None else tf.gather(penalties, lengths))


def penalty_table(max_length, alpha):
    """length_penalty of lengths 0 .. max_length + 1, once per search: a hypothesis' key
    then does not depend on where its row sits in the batch (tf.pow of a row may differ in
    the last bit between vectorised and scalar code paths); None for a Python alpha of 0."""
    if isinstance(alpha, (int, float)) and alpha == 0:
        return None
    return length_penalty(tf.range(max_length + 2), alpha)


def relaxed_shape(x) -> tf.TensorShape:
    """Shape invariant with an unknown leading (batch) dimension."""
    shape = tf.TensorShape(x.shape)
    if shape.rank is None or shape.rank == 0:
        return shape
    return tf.TensorShape([None]).concatenate(shape[1:])


def loop_invariants(loop_vars):
    """while_loop shape invariants: batch dims may change from static to unknown."""
    return tf.nest.map_structure(
        lambda x: tf.TensorShape(None) if isinstance(x, tf.TensorArray) else relaxed_shape(x),
        loop_vars,
    )


def stack_time_major(ta: tf.TensorArray, empty_shape):
    """TensorArray of [...] per step -> [T, ...]; copes with T == 0 (max_length 0)."""
    # An empty TensorList with a partly unknown element shape cannot be stacked.
    return tf.cond(
        ta.size() > 0,
        ta.stack,
        lambda: tf.zeros(tf.concat([[0], empty_shape], 0), ta.dtype),
    )


def gather_tree(step_ids, parent_ids):
    """Backtracks beams: step_ids, parent_ids [T, B, K] -> full sequences [T, B, K].

    Output beam k at time T-1 follows its parent pointers back in time; a reverse
    tf.scan carries the current beam index per (batch, beam).
    """
    beam_size = tf.shape(step_ids)[2]
    batch_size = tf.shape(step_ids)[1]
    last_beams = tf.tile(tf.range(beam_size)[None, :], [batch_size, 1])  # [B, K]

    def back_step(carry, elems):
        beams, _ = carry
        ids_t, parents_t = elems  # [B, K] each
        token = tf.gather(ids_t, beams, batch_dims=1)
        return tf.gather(parents_t, beams, batch_dims=1), token

    def backtrack():
        _, tokens = tf.scan(
            back_step,
            (step_ids, parent_ids),
            initializer=(last_beams, tf.zeros_like(last_beams)),
            reverse=True,  # outputs stay in forward time order
        )
        return tokens

    # tf.scan cannot stack an empty result (T == 0); nothing to backtrack then.
    return tf.cond(tf.shape(step_ids)[0] > 0, backtrack, lambda: step_ids)


def mask_after_length(ids, lengths, pad_id: int):
    """ids [..., T], lengths [...] -> ids with positions >= length set to pad_id."""
    positions = tf.range(tf.shape(ids)[-1])
    return tf.where(positions < lengths[..., None], ids, tf.cast(pad_id, ids.dtype))


def copied_items(ids, items, vocab_size):
    """Extended ids -> for each copy id (>= V) the source item ``id - V`` of its row
    (CONTRACT.md); other positions get an arbitrary item and are for the caller to replace.

    ids: [N] or [N, T]; items: [N, S, ...] of any dtype (S may be 0: the padding item gathers),
    so an item may be a row of its own (-> [N, ...] or [N, T, ...]).
    """
    padded = tf.pad(items, [[0, 0], [0, 1]] + [[0, 0]] * (items.shape.rank - 2))
    item = tf.clip_by_value(ids - vocab_size, 0, tf.maximum(tf.shape(items, out_type=ids.dtype)[1] - 1, 0))
    if ids.shape.rank == 1:
        return tf.gather(padded, item[:, None], batch_dims=1)[:, 0]
    return tf.gather(padded, item, batch_dims=1)


def copied_word_ids(ids, source_word_ids, vocab_size: int):
    """Extended ids -> the word ids a decoder feeds back: a copy id becomes the copied
    item's word id (<unk> for an OOV item)."""
    return tf.where(ids >= vocab_size, copied_items(ids, source_word_ids, vocab_size), ids)

"""Batched beam search as one tf.while_loop (graph-mode, SavedModel/TF Serving safe).

Algorithm (the classic "finished beams stay in the beam" variant, as in GNMT /
tf-addons' BeamSearchDecoder, re-implemented on core ops):

* state is tiled to [B*K, ...]; at step 0 only beam 0 is alive (the others start at
  -inf) so the K first candidates are distinct and beam_size=1 is exactly greedy;
* each step scores all K*W continuations (W read from log_probs at run time, so the
  extended vocabulary V + R may differ per batch); a finished beam has exactly one
  continuation, pad_id with log-prob 0, so it keeps its score and competes as is;
* the top K by (length-normalised) score survive; states are reordered with tf.gather,
  tokens and parent pointers go to TensorArrays and are backtracked at the end;
* the loop stops when every beam is finished (or dead, i.e. -inf) or at max_length;
  when only the best hypothesis is wanted and there is no length penalty, also when
  every unfinished beam scores below the best finished one: log-probs are <= 0, so its
  descendants can only fall further and the best hypothesis is already final (exact:
  the same output as running on, tested).
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.decoding import common


class BeamHooks:
    """Per-beam extension points (constrained search overrides them); defaults = plain.

    ``full_width`` False (plain search): the hooks' log-prob masking and selection are not
    called; the loop takes each beam's K best continuations first (one top_k per beam row)
    and ranks only those K*K, which picks exactly what a top_k over all K*W would (the K
    best of a batch entry hold at most K of any beam, in that beam's order, ties to the
    lower token id as top_k's). Hooks overriding them set it True."""

    full_width = False

    def initial_extra(self, batch_size, beam_size):
        """Extra loop state, nested [B, K, ...]."""
        return ()

    def mask_log_probs(self, log_probs, extra):
        """log_probs [B, K, W] -> masked log_probs [B, K, W]."""
        return log_probs

    def selection_key(self, key, extra, finished):
        """key [B, K, W] (normalised scores) -> ranking key used by top_k only."""
        return key

    def select(self, key, extra, finished, beam_size):
        """key [B, K, W] -> (flat indices [B, K] into K*W, valid [B, K]); default: top_k.
        A slot that is not valid becomes a dead beam (-inf)."""
        batch_size = tf.shape(key)[0]
        _, flat = tf.math.top_k(tf.reshape(key, [batch_size, -1]), k=beam_size)
        return flat, tf.ones_like(flat, tf.bool)

    def update_extra(self, extra, token, finished):
        """extra already reordered by parent; token [B, K]; finished [B, K] (before token)."""
        return extra


def beam_search(
    step_fn,
    start_ids,
    initial_state,
    beam_size,
    max_length,
    end_id: int,
    length_penalty=0.0,
    return_all_beams: bool = False,
    pad_id: int = 0,
    step_memory=None,
    jit_max_batch: int = 0,
):
    """Beam search over ``step_fn(prev_ids [N], step, state) -> (log_probs [N, W], state)``.

    Args:
      start_ids: [B] int32; initial_state: nested, leading dim B (tiled to B*K here).
      beam_size: K, a Python int or an int32 scalar tensor (one search graph for every
        width, e.g. the SavedModel's ``generate``; the same output as a Python int).
      max_length: int or int32 scalar tensor.
      length_penalty: GNMT alpha, ranking uses sum_logp / ((5 + len) / 6) ** alpha.
      return_all_beams: return every beam, best first, instead of the best one.
      step_memory: optional (memory, make_step_fn): ``memory`` nested [N, ...] and
        ``make_step_fn(rows of memory)`` the step function over those rows (``step_fn`` is
        ``make_step_fn(memory)``). Then a batch entry whose search is over (what stops the
        loop, for that entry) leaves the batch: the step function runs on the other
        entries' rows only. The same output, except the tokens of dead beams.
      jit_max_batch: a batch of at most this many entries runs each step (the step
        function and the beam bookkeeping) as ONE XLA computation instead of ~100 graph
        ops: what a one-table request's latency is made of (compiled once per shape, i.e.
        per memory length for a one-table batch); larger batches take the loop above.

    Returns:
      ids [B, T] (or [B, K, T]) int32, positions after the end padded with pad_id;
      lengths [B] (or [B, K]) int32 including end_id (max_length if it never ended);
      scores [B] (or [B, K]) float32: the ranking score, i.e. the sum of log-probs,
      divided by the length penalty when alpha != 0. Dead beams (fewer than K
      hypotheses exist) have score -inf.
    """
    return run_beam_search(
        step_fn, start_ids, initial_state, beam_size, max_length, end_id,
        length_penalty, return_all_beams, pad_id, BeamHooks(),
        stop_when_best_is_final=not return_all_beams, step_memory=step_memory, jit_max_batch=jit_max_batch,
    )[:3]


def run_beam_search(
    step_fn, start_ids, initial_state, beam_size, max_length, end_id,
    length_penalty, return_all_beams, pad_id, hooks, stop_when_best_is_final=False, step_memory=None,
    jit_max_batch=0,
):
    """Shared loop; returns (ids, lengths, scores, extra) with extra nested [B, K, ...].

    ``stop_when_best_is_final``: the caller only uses the best finished hypothesis, so the
    loop may stop once no unfinished beam can overtake it (only exact without a length
    penalty, so ignored otherwise)."""
    prune = stop_when_best_is_final and isinstance(length_penalty, (int, float)) and length_penalty == 0
    start_ids = tf.convert_to_tensor(start_ids, tf.int32)
    max_length = tf.convert_to_tensor(max_length, tf.int32)
    batch_size = tf.shape(start_ids)[0]
    k = beam_size
    penalties = common.penalty_table(max_length, length_penalty)

    def entry_done(cum, finished):
        """[B]: the search of this batch entry is over."""
        done = finished | tf.equal(cum, common.NEG_INF)  # dead beams never finish
        if prune:
            best_final = tf.reduce_max(tf.where(finished, cum, common.NEG_INF), axis=1, keepdims=True)
            done |= cum < best_final
        return tf.reduce_all(done, axis=1)

    def cond(t, prev_ids, state, cum, finished, lengths, extra, ids_ta, parents_ta, live, memory):
        return (t < max_length) & ~tf.reduce_all(entry_done(cum, finished))

    def search(jit_step):
        """-> (cum, lengths, extra, ids [B, K, T]) of the loop, each step as ONE XLA
        computation (``jit_step``) or as graph ops."""
        compact = step_memory is not None and not hooks.full_width and not jit_step
        memory, make_step_fn = step_memory if compact else ((), None)

        @tf.function(jit_compile=True, autograph=False)
        def fused_step(prev_ids, t, state, cum, finished, lengths):
            cand_lengths = lengths + tf.cast(~finished, tf.int32)
            log_probs, state = step_fn(prev_ids, t, state)
            cum, parent, token, _ = _select_per_beam_first(
                log_probs, cum, finished, cand_lengths, tf.shape(cum)[0], k, length_penalty, penalties, pad_id)
            finished = tf.gather(finished, parent, batch_dims=1) | tf.equal(token, end_id)
            lengths = tf.gather(cand_lengths, parent, batch_dims=1)
            return token, parent, cum, finished, lengths, common.gather_beams(state, parent, k)

        def body(t, prev_ids, state, cum, finished, lengths, extra, ids_ta, parents_ta, live, memory):
            if jit_step:
                token, parent, cum, finished, lengths, state = fused_step(prev_ids, t, state, cum, finished, lengths)
                return (t + 1, tf.reshape(token, [-1]), state, cum, finished, lengths,
                        extra, ids_ta.write(t, token), parents_ta.write(t, parent), live, memory)
            cand_lengths = lengths + tf.cast(~finished, tf.int32)  # [B, K]
            if compact:
                # prev_ids, state and memory hold the rows of the live entries only; the
                # others keep their beams (parent = itself, token pad_id).
                log_probs, state = make_step_fn(memory)(prev_ids, t, state)  # [A*K, W]
                rows = live[:, None]
                live_cum, live_parent, live_token, _ = _select_per_beam_first(
                    log_probs, tf.gather(cum, live), tf.gather(finished, live), tf.gather(cand_lengths, live),
                    tf.shape(live)[0], k, length_penalty, penalties, pad_id)
                parent = tf.tensor_scatter_nd_update(tf.tile(tf.range(k)[None, :], [batch_size, 1]), rows, live_parent)
                token = tf.tensor_scatter_nd_update(tf.fill([batch_size, k], pad_id), rows, live_token)
                cum, valid = tf.tensor_scatter_nd_update(cum, rows, live_cum), tf.ones_like(token, tf.bool)
            elif hooks.full_width:
                log_probs, state = step_fn(prev_ids, t, state)  # [N, W]
                cum, parent, token, valid = _select_full_width(
                    log_probs, cum, finished, cand_lengths, extra, hooks, batch_size, k, length_penalty, penalties,
                    pad_id)
            else:
                log_probs, state = step_fn(prev_ids, t, state)  # [N, W]
                cum, parent, token, valid = _select_per_beam_first(
                    log_probs, cum, finished, cand_lengths, batch_size, k, length_penalty, penalties, pad_id)

            def by_parent(x):
                return tf.gather(x, parent, batch_dims=1)

            cum = tf.where(valid, cum, common.NEG_INF)
            prev_finished = by_parent(finished)
            extra = hooks.update_extra(tf.nest.map_structure(by_parent, extra), token, prev_finished)
            finished = prev_finished | tf.equal(token, end_id)
            if compact:
                prev_ids, state, live, memory = _leave_batch(
                    live, memory, state, live_parent, live_token, entry_done(cum, finished), k)
            else:
                prev_ids, state = tf.reshape(token, [-1]), common.gather_beams(state, parent, k)
            return (
                t + 1, prev_ids, state, cum, finished, by_parent(cand_lengths),
                extra, ids_ta.write(t, token), parents_ta.write(t, parent), live, memory,
            )

        # Only beam 0 alive at the start: the first top_k then picks K distinct tokens.
        first_alive = tf.one_hot(0, k, on_value=0.0, off_value=common.NEG_INF)  # [K]
        loop_vars = (
            tf.constant(0),
            tf.repeat(start_ids, k),  # [N]
            common.tile_batch(initial_state, k),
            tf.tile(first_alive[None, :], [batch_size, 1]),  # cum log-probs [B, K]
            tf.zeros([batch_size, k], tf.bool),
            tf.zeros([batch_size, k], tf.int32),
            hooks.initial_extra(batch_size, k),
            _time_array(),
            _time_array(),
            tf.range(batch_size),  # live batch entries (compact search)
            memory,
        )
        _, _, _, cum, _, lengths, extra, ids_ta, parents_ta, _, _ = tf.while_loop(
            cond, body, loop_vars,
            shape_invariants=common.loop_invariants(loop_vars),
            maximum_iterations=max_length,
        )
        return cum, lengths, extra, _backtrack(ids_ta, parents_ta, lengths, batch_size, k, pad_id)

    if jit_max_batch > 0 and not hooks.full_width:
        cum, lengths, extra, ids = tf.cond(batch_size <= jit_max_batch, lambda: search(True), lambda: search(False))
    else:
        cum, lengths, extra, ids = search(False)
    # The last top_k already sorted beams by the ranking key: beam 0 is the best. The
    # penalty table, not tf.pow over [B, K]: with K a tensor its last bit could differ.
    scores = common.normalise(cum, lengths, length_penalty, penalties)
    if return_all_beams:
        return ids, lengths, scores, extra
    return ids[:, 0], lengths[:, 0], scores[:, 0], tf.nest.map_structure(lambda x: x[:, 0], extra)


def _select_full_width(log_probs, cum, finished, cand_lengths, extra, hooks, batch_size, k, alpha, penalties, pad_id):
    """The hooks rank all K*W continuations -> (cum, parent, token, valid), [B, K] each."""
    width = tf.shape(log_probs)[-1]
    log_probs = tf.reshape(tf.cast(log_probs, tf.float32), [batch_size, k, width])
    log_probs = _only_pad_after_end(hooks.mask_log_probs(log_probs, extra), finished, pad_id)
    total = cum[..., None] + log_probs  # [B, K, W]
    key = common.normalise(total, cand_lengths[..., None], alpha, penalties)
    key = hooks.selection_key(key, extra, finished)
    flat, valid = hooks.select(key, extra, finished, k)  # [B, K] in K*W
    cum = tf.gather(tf.reshape(total, [batch_size, -1]), flat, batch_dims=1)
    return cum, flat // width, flat % width, valid


def _select_per_beam_first(log_probs, cum, finished, cand_lengths, batch_size, k, alpha, penalties, pad_id):
    """Plain search: each beam's K best (top_k per row, the only pass over the width W),
    then the K best of those K*K per batch entry -> (cum, parent, token, valid), [B, K] each.

    A finished beam's candidates are what top_k gives for its only continuation (pad_id,
    log-prob 0): pad_id, then the lowest other ids at -inf."""
    width = tf.shape(log_probs)[-1]
    per_beam = tf.minimum(k, width)  # top_k needs k <= W (tests use K > W)
    total = tf.reshape(cum, [-1, 1]) + tf.cast(log_probs, tf.float32)  # [N, W]
    values, tokens = tf.math.top_k(total, k=per_beam)  # [N, k'], sorted, ties to the lower id
    others = tf.range(per_beam - 1)
    pad_tokens = tf.concat([[pad_id], others + tf.cast(others >= pad_id, tf.int32)], 0)  # [k']
    pad_values = tf.concat([[0.0], tf.fill([per_beam - 1], common.NEG_INF)], 0)
    done = tf.reshape(finished, [-1, 1])
    values = tf.where(done, tf.reshape(cum, [-1, 1]) + pad_values[None, :], values)
    tokens = tf.where(done, pad_tokens[None, :], tokens)
    values = tf.reshape(values, [batch_size, -1])  # [B, K*k'], beam-major like K*W
    tokens = tf.reshape(tokens, [batch_size, -1])
    key = common.normalise(tf.reshape(values, [batch_size, k, per_beam]), cand_lengths[..., None], alpha, penalties)
    _, chosen = tf.math.top_k(tf.reshape(key, [batch_size, -1]), k=k)  # [B, K] in K*k'
    cum = tf.gather(values, chosen, batch_dims=1)
    return cum, chosen // per_beam, tf.gather(tokens, chosen, batch_dims=1), tf.ones_like(chosen, tf.bool)


def _leave_batch(live, memory, state, parent, token, done, k):
    """Rows of the entries still searching: (prev_ids, state reordered by parent, live,
    memory), from the live entries' parent and token [A, K] and ``done`` [B]."""
    keep = tf.cast(tf.where(~tf.gather(done, live))[:, 0], tf.int32)  # [A'] into live
    rows = tf.reshape(keep[:, None] * k + tf.gather(parent, keep), [-1])  # [A' * K] into A * K
    state = tf.nest.map_structure(lambda x: tf.gather(x, rows), state)
    everyone = tf.equal(tf.size(keep), tf.size(live))
    beams = tf.reshape(keep[:, None] * k + tf.range(k)[None, :], [-1])
    memory = tf.cond(everyone, lambda: memory,
                     lambda: tf.nest.map_structure(lambda x: tf.gather(x, beams), memory))
    return tf.reshape(tf.gather(token, keep), [-1]), state, tf.gather(live, keep), memory


def _only_pad_after_end(log_probs, finished, pad_id):
    """Finished beams get a single continuation (pad_id, log-prob 0): score unchanged."""
    width = tf.shape(log_probs)[-1]
    pad_row = tf.where(tf.equal(tf.range(width), pad_id), 0.0, common.NEG_INF)  # [W]
    return tf.where(finished[..., None], pad_row, log_probs)


def _time_array():
    return tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None, None])


def _backtrack(ids_ta, parents_ta, lengths, batch_size, k, pad_id):
    """TensorArrays of [B, K] per step -> sequences [B, K, T] following parent pointers."""
    step_ids = common.stack_time_major(ids_ta, [batch_size, k])  # [T, B, K]
    parents = common.stack_time_major(parents_ta, [batch_size, k])
    ids = tf.transpose(common.gather_tree(step_ids, parents), [1, 2, 0])
    # Dead beams' tokens are arbitrary; positions past each length become padding.
    return common.mask_after_length(ids, lengths, pad_id)

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

# Step-buffer lengths of a search compiled whole with XLA (``jit_max_batch``): one
# compilation per bucket, the smallest >= max_length (E2E 80: 128; RotoWire 850: 1024).
JIT_STEP_BUCKETS = (128, 1024)


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
    parallel_searches: int = 1,
    parallel_min_batch: int = 16,
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
        loop, for that entry) leaves the batch, and the step function runs only on the
        rows of beams still running (not finished, not dead) of the other entries. The
        same output, except the tokens of dead beams.
      jit_max_batch: a batch of at most this many entries runs the WHOLE search (every
        step: the step function and the beam bookkeeping, then the backtracking) as ONE
        XLA computation instead of ~100 graph ops per step: what a one-table request's
        latency is made of (compiled once per shape, i.e. per memory length for a
        one-table batch, and per step bucket, JIT_STEP_BUCKETS); larger batches and
        max_length beyond the last bucket take the loop above.
      parallel_searches: with ``step_memory``, a batch of at least ``parallel_min_batch``
        entries is split into this many parts searched side by side (independent loops:
        on a CPU of a few cores, one search's small ops leave cores idle). The same output
        (see _in_parallel_parts).

    Returns:
      ids [B, T] (or [B, K, T]) int32, positions after the end padded with pad_id;
      lengths [B] (or [B, K]) int32 including end_id (max_length if it never ended);
      scores [B] (or [B, K]) float32: the ranking score, i.e. the sum of log-probs,
      divided by the length penalty when alpha != 0. Dead beams (fewer than K
      hypotheses exist) have score -inf.
    """
    def search(start_ids, initial_state, step_fn, step_memory, jit_max_batch):
        return run_beam_search(
            step_fn, start_ids, initial_state, beam_size, max_length, end_id,
            length_penalty, return_all_beams, pad_id, BeamHooks(),
            stop_when_best_is_final=not return_all_beams, step_memory=step_memory, jit_max_batch=jit_max_batch,
        )[:3]

    if step_memory is None or parallel_searches <= 1:
        return search(start_ids, initial_state, step_fn, step_memory, jit_max_batch)
    return _in_parallel_parts(search, start_ids, initial_state, step_fn, step_memory, jit_max_batch, beam_size,
                              parallel_searches, parallel_min_batch, pad_id)


def _in_parallel_parts(search, start_ids, initial_state, step_fn, step_memory, jit_max_batch, k, parts, min_batch,
                       pad_id):
    """``search`` on the whole batch, or, from ``min_batch`` entries on, on ``parts``
    contiguous parts of it as independent while loops, which TensorFlow's executor runs
    side by side. Each entry's search reads only its own rows (and stops on its own: the
    compact search), so the parts give the same output, as far as the step function's
    rows do not depend on the row count (a real model's matmuls may round the last bit
    differently for fewer rows, as when entries leave the batch); ids are padded to the
    longest part's steps with pad_id (what mask_after_length puts there anyway)."""
    start_ids = tf.convert_to_tensor(start_ids, tf.int32)
    batch_size = tf.shape(start_ids)[0]
    memory, make_step_fn = step_memory

    def whole():
        return search(start_ids, initial_state, step_fn, step_memory, jit_max_batch)

    def in_parts():
        outputs = []
        for part in range(parts):
            low, high = batch_size * part // parts, batch_size * (part + 1) // parts
            rows = tf.nest.map_structure(lambda x: x[low * k:high * k], memory)
            outputs.append(search(start_ids[low:high], tf.nest.map_structure(lambda x: x[low:high], initial_state),
                                  make_step_fn(rows), (rows, make_step_fn), 0))
        steps = tf.reduce_max(tf.stack([tf.shape(ids)[-1] for ids, _, _ in outputs]))
        ids = [tf.pad(ids, [[0, 0]] * (ids.shape.rank - 1) + [[0, steps - tf.shape(ids)[-1]]], constant_values=pad_id)
               for ids, _, _ in outputs]
        return (tf.concat(ids, 0),) + tuple(tf.concat([out[i] for out in outputs], 0) for i in (1, 2))

    return common.switch_case(tf.cast(batch_size >= min_batch, tf.int32), [whole, in_parts])


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

    def running(t, prev_ids, state, cum, finished, *_):
        """The graph loop's condition (whole_search has its own: it reads its max_length argument)."""
        return (t < max_length) & ~tf.reduce_all(entry_done(cum, finished))

    def search():
        """-> (cum, lengths, extra, ids [B, K, T]) of the graph loop."""
        compact = step_memory is not None and not hooks.full_width
        memory, make_step_fn = step_memory if compact else ((), None)

        def body(t, prev_ids, state, cum, finished, lengths, extra, ids_ta, parents_ta, live):
            cand_lengths = lengths + tf.cast(~finished, tf.int32)  # [B, K]
            if compact:
                # prev_ids and state hold the rows of the live entries only (memory keeps all
                # B*K rows: the step function's rows are gathered from it); the
                # others keep their beams (parent = itself, token pad_id).
                live_finished = tf.gather(finished, live)  # [A, K]
                live_cum = tf.gather(cum, live)
                candidates, state = _running_rows_step(make_step_fn, memory, live, prev_ids, t, state, live_cum,
                                                       live_finished, k, batch_size)
                rows = live[:, None]
                live_cum, live_parent, live_token, _ = _select_per_beam_first(
                    None, live_cum, live_finished, tf.gather(cand_lengths, live),
                    tf.shape(live)[0], k, length_penalty, penalties, pad_id, candidates=candidates)
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
                prev_ids, state, live = _leave_batch(
                    live, state, live_parent, live_token, entry_done(cum, finished), k)
            else:
                prev_ids, state = tf.reshape(token, [-1]), common.gather_beams(state, parent, k)
            return (
                t + 1, prev_ids, state, cum, finished, by_parent(cand_lengths),
                extra, ids_ta.write(t, token), parents_ta.write(t, parent), live,
            )

        loop_vars = (
            tf.constant(0),
            tf.repeat(start_ids, k),  # [N]
            common.tile_batch(initial_state, k),
            _first_cum(batch_size, k),
            tf.zeros([batch_size, k], tf.bool),
            tf.zeros([batch_size, k], tf.int32),
            hooks.initial_extra(batch_size, k),
            _time_array(),
            _time_array(),
            tf.range(batch_size),  # live batch entries (compact search)
        )
        _, _, _, cum, _, lengths, extra, ids_ta, parents_ta, _ = tf.while_loop(
            running, body, loop_vars,
            shape_invariants=common.loop_invariants(loop_vars),
            maximum_iterations=max_length,
        )
        return cum, lengths, extra, _backtrack(ids_ta, parents_ta, lengths, batch_size, k, pad_id)

    @tf.function(jit_compile=True, autograph=False)
    def whole_search(start_ids, initial_state, max_length, penalties, buffer):
        """The graph loop's search (plain hooks, no compaction) as ONE XLA computation: step
        tokens and parents go to buffers [S, B, K] (``buffer``: zeros of that shape, S a
        bucket >= max_length), backtracked inside too. -> (cum, lengths, ids [B, K, S], steps run)."""
        batch_size = tf.shape(start_ids)[0]

        def body(t, prev_ids, state, cum, finished, lengths, step_ids, parents):
            cand_lengths = lengths + tf.cast(~finished, tf.int32)
            log_probs, state = step_fn(prev_ids, t, state)
            cum, parent, token, _ = _select_per_beam_first(
                log_probs, cum, finished, cand_lengths, batch_size, k, length_penalty, penalties, pad_id)
            finished = tf.gather(finished, parent, batch_dims=1) | tf.equal(token, end_id)
            return (t + 1, tf.reshape(token, [-1]), common.gather_beams(state, parent, k), cum, finished,
                    tf.gather(cand_lengths, parent, batch_dims=1),
                    _write_step(step_ids, t, token), _write_step(parents, t, parent))

        loop_vars = (tf.constant(0), tf.repeat(start_ids, k), common.tile_batch(initial_state, k),
                     _first_cum(batch_size, k), tf.zeros([batch_size, k], tf.bool), tf.zeros([batch_size, k], tf.int32),
                     buffer, buffer)
        t, _, _, cum, _, lengths, step_ids, parents = tf.while_loop(
            lambda t, prev_ids, state, cum, finished, *_: (t < max_length) & ~tf.reduce_all(entry_done(cum, finished)),
            body, loop_vars, shape_invariants=common.loop_invariants(loop_vars),
        )
        ids = common.mask_after_length(_backtrack_steps(step_ids, parents, t, batch_size, k), lengths, pad_id)
        return cum, lengths, ids, t

    def jit_search(steps):
        def run():
            # penalties of lengths 0 .. max_length + 1 as the graph loop computes them (the
            # same bits), padded to a static length: one compilation for every max_length.
            table = () if penalties is None else tf.reshape(
                tf.pad(penalties, [[0, steps + 2 - tf.shape(penalties)[0]]]), [steps + 2])
            buffer = tf.zeros([steps, batch_size, k], tf.int32)
            cum, lengths, ids, ran = whole_search(start_ids, initial_state, max_length, table, buffer)
            return cum, lengths, hooks.initial_extra(batch_size, k), ids[:, :, :ran]

        return run

    if jit_max_batch > 0 and not hooks.full_width:
        # The smallest step bucket >= max_length; longer searches and larger batches take
        # the graph loop (its finished entries leave the batch; XLA compiles per shape).
        bucket = tf.reduce_sum(tf.cast(max_length > tf.constant(JIT_STEP_BUCKETS), tf.int32))
        bucket = tf.where(batch_size <= jit_max_batch, bucket, len(JIT_STEP_BUCKETS))
        cum, lengths, extra, ids = common.switch_case(bucket, [jit_search(s) for s in JIT_STEP_BUCKETS] + [search])
    else:
        cum, lengths, extra, ids = search()
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


def _per_beam_candidates(log_probs, cum, k):
    """Each row's k' = min(K, W) best continuations: log_probs [N, W] and cum [N] ->
    (values [N, k'] = cum + log-prob, sorted, ties to the lower id; tokens [N, k'])."""
    per_beam = tf.minimum(k, tf.shape(log_probs)[-1])  # top_k needs k <= W (tests use K > W)
    total = cum[:, None] + tf.cast(log_probs, tf.float32)  # [N, W]
    return common.top_k(total, per_beam)


def _running_rows_step(make_step_fn, memory, live, prev_ids, t, state, cum, finished, k, batch_size):
    """The compact search's step over the rows [A*K] of the live entries ``live`` [A] ->
    ((values, tokens) [A*K, k'] of _per_beam_candidates, new state [A*K, ...]); ``memory``
    holds all B*K rows (gathered for the rows computed: one gather per step, none when
    an entry leaves). A finished beam's only continuation is
    pad_id (_select_per_beam_first ignores its log-probs), and a dead beam's (score -inf,
    e.g. beams 1.. at step 0) candidates are -inf whatever its log-probs, i.e. what top_k
    gives for a row of -inf: tokens 0 .. k'-1. So when some beams have finished or are
    dead the step function runs on the other rows only (their memory, state and previous
    ids gathered; their candidates and states scattered back): the skipped rows get those
    -inf candidates and keep their old state (only a dead beam's own -inf candidates read
    it). Each row's log-probs do not depend on the other rows, so the output is the same."""
    cum = tf.reshape(cum, [-1])
    running = tf.cast(tf.where(~tf.reshape(finished, [-1]) & (cum > common.NEG_INF))[:, 0], tf.int32)  # [R]

    def every_row():  # every row of every entry (A = B)
        log_probs, new_state = make_step_fn(memory)(prev_ids, t, state)  # [B*K, W]
        return _per_beam_candidates(log_probs, cum, k), new_state

    def running_rows():
        def rows_of(x):
            return tf.gather(x, running)

        memory_rows = tf.gather(live, running // k) * k + running % k  # [R] into B*K
        log_probs, new_state = make_step_fn(tf.nest.map_structure(lambda x: tf.gather(x, memory_rows), memory))(
            rows_of(prev_ids), t, tf.nest.map_structure(rows_of, state))  # [R, W]
        values, tokens = _per_beam_candidates(log_probs, rows_of(cum), k)
        at = running[:, None]
        full = tf.stack([tf.size(cum), tf.shape(values)[1]])
        values = tf.tensor_scatter_nd_update(tf.fill(full, common.NEG_INF), at, values)
        skipped = tf.tile(tf.range(full[1], dtype=tokens.dtype)[None, :], [full[0], 1])  # top_k of -inf
        tokens = tf.tensor_scatter_nd_update(skipped, at, tokens)
        new_state = tf.nest.map_structure(lambda old, new: tf.tensor_scatter_nd_update(old, at, new),
                                          state, new_state)
        return (values, tokens), new_state

    some_skipped = tf.size(running) < batch_size * k  # a row skipped, or an entry has left
    return common.switch_case(tf.cast(some_skipped, tf.int32), [every_row, running_rows])


def _select_per_beam_first(log_probs, cum, finished, cand_lengths, batch_size, k, alpha, penalties, pad_id,
                           candidates=None):
    """Plain search: each beam's K best (top_k per row, the only pass over the width W),
    then the K best of those K*K per batch entry -> (cum, parent, token, valid), [B, K] each.
    ``candidates``: the rows' (values, tokens) of _per_beam_candidates already (log_probs
    is then unused).

    A finished beam's candidates are what top_k gives for its only continuation (pad_id,
    log-prob 0): pad_id, then the lowest other ids at -inf."""
    values, tokens = candidates if candidates is not None else _per_beam_candidates(
        log_probs, tf.reshape(cum, [-1]), k)  # [N, k'], sorted, ties to the lower id
    per_beam = tf.shape(values)[1]
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


def _leave_batch(live, state, parent, token, done, k):
    """Rows of the entries still searching: (prev_ids, state reordered by parent, live),
    from the live entries' parent and token [A, K] and ``done`` [B]."""
    keep = tf.cast(tf.where(~tf.gather(done, live))[:, 0], tf.int32)  # [A'] into live
    rows = tf.reshape(keep[:, None] * k + tf.gather(parent, keep), [-1])  # [A' * K] into A * K
    state = tf.nest.map_structure(lambda x: tf.gather(x, rows), state)
    return tf.reshape(tf.gather(token, keep), [-1]), state, tf.gather(live, keep)


def _only_pad_after_end(log_probs, finished, pad_id):
    """Finished beams get a single continuation (pad_id, log-prob 0): score unchanged."""
    width = tf.shape(log_probs)[-1]
    pad_row = tf.where(tf.equal(tf.range(width), pad_id), 0.0, common.NEG_INF)  # [W]
    return tf.where(finished[..., None], pad_row, log_probs)


def _first_cum(batch_size, k):
    """Cumulative log-probs [B, K] at the start: only beam 0 alive, so the first top_k
    picks K distinct tokens."""
    first_alive = tf.one_hot(0, k, on_value=0.0, off_value=common.NEG_INF)  # [K]
    return tf.tile(first_alive[None, :], [batch_size, 1])


def _write_step(buffer, t, values):
    """buffer [T, B, K] with row t set to values [B, K]."""
    return tf.tensor_scatter_nd_update(buffer, [[t]], values[None])


def _backtrack_steps(step_ids, parents, steps, batch_size, k):
    """Buffers [T, B, K] of which the first ``steps`` rows were written -> sequences
    [B, K, T] following parent pointers from beam k at the last step (common.gather_tree
    over a fixed-size buffer; rows from ``steps`` on stay 0)."""
    def body(t, beams, out):
        token = tf.gather(step_ids[t], beams, batch_dims=1)
        return t - 1, tf.gather(parents[t], beams, batch_dims=1), _write_step(out, t, token)

    loop_vars = (steps - 1, tf.tile(tf.range(k)[None, :], [batch_size, 1]), tf.zeros_like(step_ids))
    _, _, out = tf.while_loop(lambda t, *_: t >= 0, body, loop_vars,
                              shape_invariants=common.loop_invariants(loop_vars))
    return tf.transpose(out, [1, 2, 0])


def _time_array():
    return tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None, None])


def _backtrack(ids_ta, parents_ta, lengths, batch_size, k, pad_id):
    """TensorArrays of [B, K] per step -> sequences [B, K, T] following parent pointers."""
    step_ids = common.stack_time_major(ids_ta, [batch_size, k])  # [T, B, K]
    parents = common.stack_time_major(parents_ta, [batch_size, k])
    ids = tf.transpose(common.gather_tree(step_ids, parents), [1, 2, 0])
    # Dead beams' tokens are arbitrary; positions past each length become padding.
    return common.mask_after_length(ids, lengths, pad_id)

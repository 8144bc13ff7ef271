"""Model-agnostic generation: features -> extended ids -> text, through any family's contract.

Plain TF (tf.function-friendly): the same code runs in training-time validation,
`tablegen generate` / `evaluate` and the exported SavedModel.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional

import tensorflow as tf

from tablegen_tf.config import DecodeConfig
from tablegen_tf.constants import BOS_ID, EOS_ID, NEG_INF, UNK_ID
from tablegen_tf.data.featurizer import output_positions, token_strings
from tablegen_tf.decoding import beam_search, constrained_beam_search, greedy_search
from tablegen_tf.decoding.common import switch_case, tile_batch
from tablegen_tf.decoding.repeats import RepeatBlocker
from tablegen_tf.decoding.sampling import draw_in_chunks, sample_search
from tablegen_tf.metrics.slot_graph import KNOWN_ATTRIBUTES, slot_error_kinds, slot_errors
from tablegen_tf.reranking import beam_reranker, slot_end_gate


# Batches of at most this many entries run each beam-search step as one XLA computation
# (tablegen_tf.decoding.beam_search's ``jit_max_batch``): a one-table request's latency
# is mostly per-op overhead of ~100 small ops per step. Larger batches take the graph
# loop, whose finished entries leave the batch (XLA would compile per batch shape).
JIT_MAX_BATCH = 1


# A batch of at least this many entries is searched as ``decode.parallel_searches`` parts
# side by side (tablegen_tf.decoding.beam_search's ``parallel_searches``); smaller ones
# stay whole (a one-table request is one XLA computation).
PARALLEL_MIN_BATCH = 16


def _jit_max_batch(model, end_gate=None) -> int:
    # The end gate's aligner is string ops, which XLA cannot compile.
    return JIT_MAX_BATCH if model.xla_decoding_steps and end_gate is None else 0


def _forbid(step_fn, token_id: int):
    def wrapped(prev_ids, step, state):
        log_probs, state = step_fn(prev_ids, step, state)
        # One column set to -inf in place (a scatter of N values, not a pass over [N, W]).
        rows = tf.range(tf.shape(log_probs)[0])
        column = tf.stack([rows, tf.fill(tf.shape(rows), token_id)], axis=1)
        return tf.tensor_scatter_nd_update(log_probs, column, tf.fill(tf.shape(rows), NEG_INF)), state

    return wrapped


def repeat_blocker(featurizer, features, config: DecodeConfig):
    """A tablegen_tf.decoding.repeats.RepeatBlocker, or None when ``decode.no_repeat_ngram_size`` is 0."""
    if not config.no_repeat_ngram_size:
        return None
    return RepeatBlocker(int(config.no_repeat_ngram_size), tf.shape(featurizer.vocabs.words)[0],
                         featurizer.copy_texts(features))


def _beam_width(config: DecodeConfig):
    """``config.beam_size`` as a Python int, or as given when it is an int32 scalar tensor
    (the SavedModel's ``generate``: one search graph for every width it accepts)."""
    return config.beam_size if tf.is_tensor(config.beam_size) else int(config.beam_size)


def search_inputs(model, features: Dict[str, tf.Tensor], config: DecodeConfig, tiled: bool, end_gate=None,
                  memory=None, blocker=None):
    """-> (memory, initial state [B, ...], start ids [B], step_fn, step_memory) for a search
    over the family's contract; ``tiled``: the step function reads memory tiled to beam_size
    rows; ``step_memory``: beam_search's (None when the family has no ``decoding_memory``);
    ``end_gate``: a tablegen_tf.reranking.SlotEndGate wrapped around the step function (its
    prefix joins the state, its table rows the step memory); ``memory``: ``model.encode``'s
    output for ``features`` when the caller has it already; ``blocker``: a RepeatBlocker
    (``repeat_blocker``) wrapped around the model's step function (its history joins the state)."""
    memory = model.encode(features, training=False) if memory is None else memory
    state = model.initial_decoding_state(memory)
    batch_size = tf.shape(tf.nest.flatten(state)[0])[0]
    start = tf.fill([batch_size], tf.constant(BOS_ID, tf.int32))
    if blocker is not None:
        state = blocker.initial_state(state, batch_size, config.max_length)
    if end_gate is not None:
        state = end_gate.initial_state(state, batch_size, config.max_length)

    def make_step_fn(rows):
        model_rows, gate_rows = rows if end_gate is not None else (rows, None)
        step_fn = model.decoding_step_fn(model_rows)
        step_fn = _forbid(step_fn, UNK_ID) if config.forbid_unk else step_fn
        step_fn = blocker.wrap(step_fn) if blocker is not None else step_fn
        return end_gate.wrap(step_fn, gate_rows) if end_gate is not None else step_fn

    def with_gate_rows(model_rows, tile):
        if end_gate is None:
            return model_rows
        return model_rows, (tile_batch(end_gate.rows, _beam_width(config)) if tile else end_gate.rows)

    step_memory = model.decoding_memory(memory) if tiled else None
    if step_memory is None:
        step_fn = make_step_fn(with_gate_rows(model.tile(memory, _beam_width(config)) if tiled else memory, tiled))
        return memory, state, start, step_fn, None
    step_memory = with_gate_rows(model.tile(step_memory, _beam_width(config)), True)
    return memory, state, start, make_step_fn(step_memory), (step_memory, make_step_fn)


def decode_ids(model, features: Dict[str, tf.Tensor], config: DecodeConfig, must_include=None,
               strict: bool = True, choose=None, end_gate=None, memory=None, blocker=None):
    """-> (ids [B, L] over the extended vocabulary, lengths [B], scores [B], memory).

    ``must_include``: constraint ids [B, C] (-1 pad) or (ids, continues [B, C]) for
    phrases (tablegen_tf.decoding.constrained); ``strict``: an output that misses a
    constraint is an InvalidArgumentError, never a silent miss; ``choose``: picks one of
    the K beams (tablegen_tf.reranking) instead of the best-scored one; ``end_gate``: a
    tablegen_tf.reranking.SlotEndGate and ``blocker`` a RepeatBlocker (see ``search_inputs``);
    ``memory``: the encoded ``features``, when the caller has them."""
    beam = _beam_width(config)
    dynamic = tf.is_tensor(beam)  # a width known at run time only: greedy when it is 1
    choose = choose if dynamic or beam > 1 else None
    memory, state, start, step_fn, step_memory = search_inputs(
        model, features, config, tiled=dynamic or beam > 1 or must_include is not None, end_gate=end_gate,
        memory=memory, blocker=blocker)

    def greedy():
        return greedy_search(step_fn, start, state, config.max_length, EOS_ID)

    def beams():
        ids, lengths, scores = beam_search(step_fn, start, state, beam, config.max_length, EOS_ID,
                                           length_penalty=config.length_penalty,
                                           return_all_beams=choose is not None, step_memory=step_memory,
                                           jit_max_batch=_jit_max_batch(model, end_gate),
                                           parallel_searches=config.parallel_searches,
                                           parallel_min_batch=PARALLEL_MIN_BATCH)
        if choose is not None:
            ids, lengths, scores = _chosen(choose(ids, lengths, scores), ids, lengths, scores)
        return ids, lengths, scores

    def unconstrained():
        if dynamic:
            return switch_case(tf.cast(beam > 1, tf.int32), [greedy, beams])  # only the taken branch runs
        return beams() if beam > 1 else greedy()

    if must_include is None:
        return (*unconstrained(), memory)
    constraints, continues = must_include if isinstance(must_include, tuple) else (must_include, None)

    def constrained():
        ids, lengths, scores, satisfied = constrained_beam_search(
            step_fn, start, state, constraints, beam, config.max_length, EOS_ID,
            length_penalty=config.length_penalty, continues=continues, return_all_beams=choose is not None,
        )
        if choose is not None:
            ids, lengths, scores, satisfied = _chosen(choose(ids, lengths, scores, satisfied),
                                                      ids, lengths, scores, satisfied)
        if strict:
            tf.debugging.assert_equal(tf.reduce_all(satisfied), True, message=(
                "must_include: no output within max_length contains every constraint "
                "(raise max_length or beam_size, or drop a constraint)"))
        return ids, lengths, scores

    # A batch without any constraint takes the plain search: the same output (constrained
    # search without constraints is plain beam search, tested), without the constraint
    # bookkeeping's ops and passes over [B, K, W] at every step.
    any_constraint = tf.reduce_any(tf.convert_to_tensor(constraints) >= 0)
    ids, lengths, scores = switch_case(tf.cast(any_constraint, tf.int32), [unconstrained, constrained])
    return ids, lengths, scores, memory


def mbr_sampler(model, featurizer, features, config: DecodeConfig, memory=None):
    """-> a callable drawing ``config.mbr_samples`` texts of the model per input for minimum
    Bayes risk reranking (ids [B, S, T], lengths [B, S] with </s>, scores [B, S]: the
    draws' log-probs; epsilon sampling without the end gate: the model's own distribution), or None
    when ``config.mbr_weight`` is 0. A callable, so the draws run only where the reranker
    runs (not in a greedy branch). Finished draws leave the batch when the family has
    ``decoding_memory`` (a sample's length varies ~2x within a table's draws). At most
    ``config.mbr_rows`` rows (inputs x samples) draw at once: a larger batch draws its samples
    in chunks, with the same texts (tablegen_tf.decoding.sampling.draw_in_chunks). ``memory``:
    the search's encoding of ``features`` (not computed twice)."""
    if config.mbr_weight <= 0:
        return None
    samples = int(config.mbr_samples)

    def draw():
        encoded = model.encode(features, training=False) if memory is None else memory

        def draw_chunk(first_sample, chunk):
            sampling = dataclasses.replace(config, beam_size=chunk)  # memory tiled to chunk rows per input
            _, state, start, step_fn, step_memory = search_inputs(model, features, sampling, tiled=True,
                                                                  memory=encoded)
            return sample_search(step_fn, tile_batch(start, chunk), tile_batch(state, chunk), config.max_length,
                                 EOS_ID, samples, config.mbr_seed, epsilon=config.mbr_epsilon,
                                 step_memory=step_memory, first_sample=first_sample, chunk=chunk)

        return draw_in_chunks(draw_chunk, featurizer.batch_size(features), samples, config.mbr_rows,
                              config.max_length)

    return draw


def _reranker(model, featurizer, features, config: DecodeConfig, memory):
    """The beam choice of ``decode_text`` and ``decode_beams`` (one, so both pick the same
    beam): ``beam_reranker`` with the MBR draws over the search's ``memory``, or None."""
    return beam_reranker(featurizer, features, config, model, mbr_sampler(model, featurizer, features, config, memory))


def _chosen(index, *beams):
    return tuple(tf.gather(x, index, batch_dims=1) for x in beams)


def decode_text(model, featurizer, features, config: DecodeConfig, must_include=None, strict: bool = True):
    """-> (detokenized text [B], scores [B], memory); with ``decode.slot_rerank_weight``,
    ``coverage_rerank_weight`` or ``mbr_weight`` the beams are reranked by slot errors /
    table coverage / likeness to the model's samples (the SavedModel runs this too)."""
    memory = model.encode(features, training=False)  # the search's and the draws'
    choose = _reranker(model, featurizer, features, config, memory)
    ids, lengths, scores, memory = decode_ids(model, features, config, must_include, strict, choose,
                                              slot_end_gate(featurizer, features, config), memory,
                                              repeat_blocker(featurizer, features, config))
    return featurizer.output_text(features, ids, lengths), scores, memory


def generate_text(model, featurizer, features, config: DecodeConfig, must_include=None):
    """-> (detokenized text [B], scores [B], plan [B, P] or None for single-stage models)."""
    text, scores, memory = decode_text(model, featurizer, features, config, must_include)
    plan = model.planned(memory) if model.has_planning_stage else None
    return text, scores, plan


def explain_text(model, featurizer, features, config: DecodeConfig) -> Dict[str, tf.Tensor]:
    """Why the model said what it said, for the SavedModel's ``explain`` signature.

    The search of ``decode_text`` (same config, same reranking) keeping every beam:
    ``text`` / ``score`` [B] (the chosen beam: ``serving_default``'s text), ``candidates``,
    ``candidate_scores``, ``candidate_slot_errors`` [B, K] and ``chosen`` [B] (dead beams:
    text "" and score 0, so the outputs stay JSON numbers).  For the chosen text, per output
    token ``tokens`` [B, T] ("" past its end) and what the family's ``explain_tokens`` gives
    (teacher-forced over the chosen ids): ``copy_probability`` [B, T], ``copied_from`` [B, T]
    (source item or -1) and ``attention`` [B, T, S] over the source items ``source`` [B, S]
    (``source_field`` [B, S]: their fields for tables); families without it give zeros, -1
    and S = 0.  ``plan`` [B, P] (-1 pad; P = 0 for single-stage models) and ``slot_errors``
    [B, A] ("missed" / "wrong" / "added" / "") of ``slot_attributes`` [B, A] for tables."""
    ids, lengths, scores, chosen, memory = decode_beams(model, featurizer, features, config)
    best_ids, best_lengths, best_scores = _chosen(chosen, ids, lengths, scores)
    alive = scores > NEG_INF / 2
    candidates = tf.where(alive, featurizer.candidate_texts(features, ids, lengths), "")
    text = featurizer.output_text(features, best_ids, best_lengths)
    batch_size, steps = tf.shape(best_ids)[0], tf.shape(best_ids)[1]
    sources = featurizer.copy_texts(features)
    per_token = model.explain_tokens(memory, best_ids) or {
        "copy_probability": tf.zeros([batch_size, steps]),
        "copied_from": tf.fill([batch_size, steps], -1),
        "attention": tf.zeros([batch_size, steps, 0]),
    }
    shown = output_positions(best_ids, best_lengths)
    out = {
        "text": text,
        "score": tf.cast(best_scores, tf.float32),
        "chosen": chosen,
        "candidates": candidates,
        "candidate_scores": tf.where(alive, tf.cast(scores, tf.float32), 0.0),
        "tokens": tf.where(shown, token_strings(best_ids, featurizer.vocabs.words, sources), ""),
        "copy_probability": tf.where(shown, per_token["copy_probability"], 0.0),
        "copied_from": tf.where(shown, per_token["copied_from"], -1),
        "attention": per_token["attention"] * tf.cast(shown, tf.float32)[:, :, None],
        "source": sources,
        "plan": tf.cast(model.planned(memory), tf.int32) if model.has_planning_stage
        else tf.zeros([batch_size, 0], tf.int32),
    }
    return {**out, **_slot_outputs(featurizer, features, text, candidates, alive, sources)}


def decode_beams(model, featurizer, features, config: DecodeConfig):
    """``decode_ids`` without constraints, keeping all K beams: -> (ids [B, K, T], lengths and
    scores [B, K], chosen [B] int32 (the beam ``decode_text`` returns), memory)."""
    beam = int(config.beam_size)
    end_gate = slot_end_gate(featurizer, features, config)
    memory, state, start, step_fn, step_memory = search_inputs(model, features, config, tiled=beam > 1,
                                                               end_gate=end_gate,
                                                               blocker=repeat_blocker(featurizer, features, config))
    if beam <= 1:
        ids, lengths, scores = greedy_search(step_fn, start, state, config.max_length, EOS_ID)
        return ids[:, None], lengths[:, None], scores[:, None], tf.zeros_like(lengths), memory
    ids, lengths, scores = beam_search(step_fn, start, state, beam, config.max_length, EOS_ID,
                                       length_penalty=config.length_penalty, return_all_beams=True,
                                       step_memory=step_memory, jit_max_batch=_jit_max_batch(model, end_gate),
                                       parallel_searches=config.parallel_searches,
                                       parallel_min_batch=PARALLEL_MIN_BATCH)
    choose = _reranker(model, featurizer, features, config, memory)
    # beam_search sorts the beams best first: without reranking decode_text returns beam 0
    chosen = choose(ids, lengths, scores) if choose is not None else tf.zeros_like(lengths[:, 0])
    return ids, lengths, scores, chosen, memory


def _slot_outputs(featurizer, features, text, candidates, alive, sources) -> Dict[str, tf.Tensor]:
    batch_size = tf.shape(text)[0]
    table = featurizer.slot_table(features)
    if table is None:
        return {"source_field": tf.fill(tf.shape(sources), ""),
                "candidate_slot_errors": tf.zeros(tf.shape(candidates), tf.int32),
                "slot_attributes": tf.fill([batch_size, 0], ""),
                "slot_errors": tf.fill([batch_size, 0], "")}
    fields, values, mask = table
    attributes = tf.constant(KNOWN_ATTRIBUTES)
    return {
        "source_field": tf.where(mask, fields, ""),
        "candidate_slot_errors": tf.where(alive, slot_errors(fields, values, mask, candidates), 0),
        "slot_attributes": tf.tile(attributes[None, :], [batch_size, 1]),
        "slot_errors": slot_error_kinds(fields, values, mask, text),
    }

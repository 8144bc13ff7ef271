"""Model-agnostic generation: features -> extended ids -> text, through any family's contract.

Plain TF (tf.function-friendly): the same code runs in training-time validation,
`tablegen generate` / `evaluate` and the exported SavedModel.
"""

from __future__ import annotations

from typing import Dict, Optional

import tensorflow as tf

from tablegen_tf.config import DecodeConfig
from tablegen_tf.constants import BOS_ID, EOS_ID, NEG_INF, UNK_ID
from tablegen_tf.decoding import beam_search, constrained_beam_search, greedy_search
from tablegen_tf.reranking import slot_reranker


def _forbid(step_fn, token_id: int):
    def wrapped(prev_ids, step, state):
        log_probs, state = step_fn(prev_ids, step, state)
        width = tf.shape(log_probs)[1]
        banned = tf.one_hot(token_id, width, on_value=NEG_INF, off_value=0.0)
        return log_probs + banned[None, :], state

    return wrapped


def search_inputs(model, features: Dict[str, tf.Tensor], config: DecodeConfig, tiled: bool):
    """-> (memory, initial state [B, ...], start ids [B], step_fn) for a search over the
    family's contract; ``tiled``: the step function reads memory tiled to beam_size rows."""
    memory = model.encode(features, training=False)
    state = model.initial_decoding_state(memory)
    batch_size = tf.shape(tf.nest.flatten(state)[0])[0]
    start = tf.fill([batch_size], tf.constant(BOS_ID, tf.int32))
    step_fn = model.decoding_step_fn(model.tile(memory, int(config.beam_size)) if tiled else memory)
    step_fn = _forbid(step_fn, UNK_ID) if config.forbid_unk else step_fn
    return memory, state, start, step_fn


def decode_ids(model, features: Dict[str, tf.Tensor], config: DecodeConfig, must_include=None,
               strict: bool = True, choose=None):
    """-> (ids [B, L] over the extended vocabulary, lengths [B], scores [B], memory).

    ``must_include``: constraint ids [B, C] (-1 pad) or (ids, continues [B, C]) for
    phrases (tablegen_tf.decoding.constrained); ``strict``: an output that misses a
    constraint is an InvalidArgumentError, never a silent miss; ``choose``: picks one of
    the K beams (tablegen_tf.reranking) instead of the best-scored one."""
    beam = int(config.beam_size)
    choose = choose if beam > 1 else None
    memory, state, start, step_fn = search_inputs(model, features, config, tiled=beam > 1 or must_include is not None)
    if must_include is not None:
        constraints, continues = must_include if isinstance(must_include, tuple) else (must_include, None)
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
    elif beam <= 1:
        ids, lengths, scores = greedy_search(step_fn, start, state, config.max_length, EOS_ID)
    else:
        ids, lengths, scores = beam_search(step_fn, start, state, beam, config.max_length, EOS_ID,
                                           length_penalty=config.length_penalty,
                                           return_all_beams=choose is not None)
        if choose is not None:
            ids, lengths, scores = _chosen(choose(ids, lengths, scores), ids, lengths, scores)
    return ids, lengths, scores, memory


def _chosen(index, *beams):
    return tuple(tf.gather(x, index, batch_dims=1) for x in beams)


def decode_text(model, featurizer, features, config: DecodeConfig, must_include=None, strict: bool = True):
    """-> (detokenized text [B], scores [B], memory); with ``decode.slot_rerank_weight``
    the beams are reranked by slot errors (the SavedModel runs this too)."""
    choose = slot_reranker(featurizer, features, config.slot_rerank_weight)
    ids, lengths, scores, memory = decode_ids(model, features, config, must_include, strict, choose)
    return featurizer.output_text(features, ids, lengths), scores, memory


def generate_text(model, featurizer, features, config: DecodeConfig, must_include=None):
    """-> (detokenized text [B], scores [B], plan [B, P] or None for single-stage models)."""
    text, scores, memory = decode_text(model, featurizer, features, config, must_include)
    plan = model.planned(memory) if model.has_planning_stage else None
    return text, scores, plan

"""Model-agnostic text generation: batch features -> ids -> table-resolved tokens -> text.

Everything here is plain TF (tf.function-friendly) so the same code runs in
training-time validation, `tablegen generate` and the exported SavedModel.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional

import tensorflow as tf

from tablegen_tf.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tablegen_tf.decoding import beam_search, greedy_search


@dataclasses.dataclass
class DecodeConfig:
    beam_size: int = 5
    max_length: int = 80
    length_penalty: float = 0.6
    # Never emit <unk>: with joint copy an unknown table word is produced by
    # copying it, and an <unk> in the output is never what a user wants.
    forbid_unk: bool = True

    @classmethod
    def from_dict(cls, values: Optional[Dict]) -> "DecodeConfig":
        values = values or {}
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def _forbid(step_fn, token_id: int):
    def wrapped(prev_ids, step, state):
        log_probs, state = step_fn(prev_ids, step, state)
        width = tf.shape(log_probs)[1]
        banned = tf.one_hot(token_id, width, on_value=float("-inf"), off_value=0.0)
        return log_probs + banned[None, :], state

    return wrapped


def decode_ids(model, features: Dict[str, tf.Tensor], config: DecodeConfig, must_include=None):
    """ids [B, L] over the extended vocabulary, lengths [B], scores [B]."""
    memory = model.encode(features, training=False)
    state = model.initial_decoding_state(memory)
    batch_size = tf.shape(features["record_value"])[0]
    start = tf.fill([batch_size], tf.constant(BOS_ID, tf.int32))
    beam = int(config.beam_size)
    if must_include is not None:
        from tablegen_tf.decoding import constrained_beam_search

        step_fn = model.decoding_step_fn(model.tile(memory, beam))
        step_fn = _forbid(step_fn, UNK_ID) if config.forbid_unk else step_fn
        ids, lengths, scores, _ = constrained_beam_search(
            step_fn, start, state, must_include, beam, config.max_length, EOS_ID,
            length_penalty=config.length_penalty,
        )
        return ids, lengths, scores
    if beam <= 1:
        step_fn = model.decoding_step_fn(memory)
        step_fn = _forbid(step_fn, UNK_ID) if config.forbid_unk else step_fn
        return greedy_search(step_fn, start, state, config.max_length, EOS_ID)
    step_fn = model.decoding_step_fn(model.tile(memory, beam))
    step_fn = _forbid(step_fn, UNK_ID) if config.forbid_unk else step_fn
    return beam_search(step_fn, start, state, beam, config.max_length, EOS_ID, length_penalty=config.length_penalty)


def ids_to_tokens(ids, lengths, words: tf.Tensor, record_value_text: tf.Tensor) -> tf.RaggedTensor:
    """Extended ids -> token strings; id V + r is record r's value (copy resolution)."""
    vocab_size = tf.shape(words, out_type=ids.dtype)[0]
    from_vocab = tf.gather(words, tf.minimum(ids, vocab_size - 1))
    record = tf.clip_by_value(ids - vocab_size, 0, tf.maximum(tf.shape(record_value_text, out_type=ids.dtype)[1] - 1, 0))
    padded_values = tf.pad(record_value_text, [[0, 0], [0, 1]])  # tables with no records stay valid
    copied = tf.gather(padded_values, record, batch_dims=1)
    tokens = tf.where(ids >= vocab_size, copied, from_vocab)
    positions = tf.range(tf.shape(ids)[1])[None, :]
    keep = (positions < lengths[:, None]) & (ids != EOS_ID) & (ids != PAD_ID) & (ids != BOS_ID)
    return tf.ragged.boolean_mask(tokens, keep)


def generate_tokens(model, words, features, config: DecodeConfig, must_include=None):
    ids, lengths, scores = decode_ids(model, features, config, must_include)
    return ids_to_tokens(ids, lengths, words, features["record_value_text"]), scores

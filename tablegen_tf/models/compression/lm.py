"""``compression-lm``: the pre-trained language model prior p(c) of ASC (Miao & Blunsom 2016, sec. 2).

A one-layer LSTM language model over the target side of text examples (the labelled
compressions, `--format compression`, and headlines, `--format sentences`). As a family
it "generates" by sampling the LM (the source is ignored); ASC loads a trained run of it
(``model.prior_run``) as a frozen sub-model.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict

import keras
import tensorflow as tf

from tablegen_tf.config import Bound, at_least
from tablegen_tf.constants import EOS_ID, NEG_INF
from tablegen_tf.data.text_featurizer import TextFeaturizer
from tablegen_tf.models.base import GenerationModel
from tablegen_tf.models.registry import register_model


@dataclasses.dataclass
class CompressionLMConfig:
    KIND: ClassVar[str] = "compression-lm"
    BOUNDS: ClassVar[Dict[str, Bound]] = {"word_dim": at_least(1), "hidden_size": at_least(1)}
    name: str = "compression-lm"
    word_dim: int = 64
    hidden_size: int = 128


@register_model("compression-lm", config=CompressionLMConfig, featurizer=TextFeaturizer,
                description="LSTM language model: the compression prior p(c) of ASC")
class CompressionLM(GenerationModel):
    reports_perplexity = True

    def __init__(self, word_vocab_size, word_dim=64, hidden_size=128, **kwargs):
        super().__init__(**kwargs)
        self.word_vocab_size = word_vocab_size
        self.embedding = keras.layers.Embedding(word_vocab_size, word_dim, name="lm_embedding")
        self.lstm = keras.layers.LSTM(hidden_size, return_sequences=True, name="lm_lstm")
        self.cell = self.lstm.cell
        self.output_layer = keras.layers.Dense(word_vocab_size, name="lm_output")
        self.build()

    def build(self, input_shape=None):
        self.embedding.build(None)
        self.lstm.build((None, None, self.embedding.output_dim))
        self.output_layer.build((None, self.cell.units))
        self.built = True

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes):
        m = config.model
        return cls(vocab_sizes["words"], m.word_dim, m.hidden_size, name="compression_lm")

    def sequence_log_probs(self, target_in, target_out, target_mask):
        """Per-token log p(w_k | w_<k) [B, T] (0 where masked)."""
        hidden = self.lstm(self.embedding(target_in))
        log_probs = tf.nn.log_softmax(self.output_layer(hidden))
        token = tf.gather(log_probs, target_out, batch_dims=2)
        return token * tf.cast(target_mask, tf.float32)

    def compute_loss_from_batch(self, batch, training=False):
        nll, count = self.token_nll(batch)
        return nll / tf.maximum(count, 1.0)

    def token_nll(self, batch):
        """Every target token and </s> is scored."""
        logp = self.sequence_log_probs(batch["target_in"], batch["target_out"], batch["target_mask"])
        return -tf.reduce_sum(logp), tf.reduce_sum(tf.cast(batch["target_mask"], tf.float32))

    # decoding: an unconditional LM (the source only fixes the batch size and copy width)
    def encode(self, features, training=False):
        return {"source_ids": tf.convert_to_tensor(features["source_ids"])}

    def initial_decoding_state(self, memory):
        zeros = tf.zeros([tf.shape(memory["source_ids"])[0], self.cell.units])
        return (zeros, zeros)

    def decoding_step_fn(self, memory):
        def step_fn(prev_ids, step, state):
            ids = tf.minimum(prev_ids, self.word_vocab_size - 1)
            hidden, (h, c) = self.cell(self.embedding(ids), list(state))
            log_probs = tf.nn.log_softmax(self.output_layer(hidden))
            width = tf.shape(memory["source_ids"])[1]
            no_copy = tf.fill([tf.shape(log_probs)[0], width], NEG_INF)
            return tf.concat([log_probs, no_copy], 1), (h, c)

        return step_fn


__all__ = ["CompressionLM", "CompressionLMConfig", "EOS_ID"]

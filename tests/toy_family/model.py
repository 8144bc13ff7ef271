"""A tiny text-to-text model family that lives outside tablegen_tf: the plug-in proof.

``toy-copy``: a GRU encoder over the source tokens, a GRU decoder with dot attention,
and a copy switch (pointer-generator style, See et al. 2017):

    p(y_t) = s_t * softmax(W h_t)[y_t] + (1 - s_t) * sum_{i: x_i = y_t} a_t[i],   s_t = sigmoid(w . h_t)

Extended ids V + i copy source token i (the decoding contract), so out-of-vocabulary
source words are produced by copying them. Everything it needs from tablegen is public:
the registry, the GenerationModel contract and the shared text featurizer.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import keras
import tensorflow as tf

from tablegen_tf.constants import MASKED_LOGIT, NEG_INF
from tablegen_tf.data.text_featurizer import TextFeaturizer
from tablegen_tf.decoding.common import copied_word_ids
from tablegen_tf.models import GenerationModel, register_model


@dataclasses.dataclass
class ToyCopyConfig:
    KIND: ClassVar[str] = "toy-copy"
    name: str = "toy-copy"
    hidden_size: int = 16
    word_dim: int = 16


@register_model("toy-copy", config=ToyCopyConfig, featurizer=TextFeaturizer,
                description="test-only text-to-text GRU with attention and copy")
class ToyCopy(GenerationModel):
    def __init__(self, word_vocab_size, hidden_size=16, word_dim=16, **kwargs):
        super().__init__(**kwargs)
        self.word_vocab_size = word_vocab_size
        # Named layers: checkpoints key variables by their Keras path (tablegen's trainer).
        self.embedding = keras.layers.Embedding(word_vocab_size, word_dim, name="embedding")
        self.encoder = keras.layers.GRU(hidden_size, return_sequences=True, name="encoder")
        self.cell = keras.layers.GRUCell(hidden_size, name="decoder_cell")
        self.output_projection = keras.layers.Dense(word_vocab_size, name="output_projection")
        self.switch = keras.layers.Dense(1, name="copy_switch")
        self.build()

    def build(self, input_shape=None):
        """Every variable exists after construction (checkpoints restore without a call)."""
        hidden, word_dim = self.cell.units, self.embedding.output_dim
        self.embedding.build(None)
        self.encoder.build((None, None, word_dim))
        self.cell.build((None, word_dim + hidden))
        self.output_projection.build((None, 2 * hidden))
        self.switch.build((None, 2 * hidden))
        self.built = True

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes):
        return cls(vocab_sizes["words"], config.model.hidden_size, config.model.word_dim, name="toy_copy")

    # === the contract ===

    def encode(self, features, training=False):
        mask = tf.convert_to_tensor(features["source_mask"])
        memory = self.encoder(self.embedding(features["source_ids"]), mask=mask)
        return {"memory": memory, "mask": mask, "source_ids": features["source_ids"]}

    def initial_decoding_state(self, memory):
        weights = tf.cast(memory["mask"], tf.float32)[..., None]
        mean = tf.reduce_sum(memory["memory"] * weights, 1) / tf.maximum(tf.reduce_sum(weights, 1), 1.0)
        return (mean, tf.zeros_like(mean))  # (GRU state, previous context)

    def _step(self, inputs, state, memory):
        hidden, context = state
        hidden, _ = self.cell(tf.concat([inputs, context], -1), [hidden])
        scores = tf.einsum("bh,bsh->bs", hidden, memory["memory"])
        attention = tf.nn.softmax(tf.where(memory["mask"], scores, MASKED_LOGIT))
        context = tf.einsum("bs,bsh->bh", attention, memory["memory"])
        features = tf.concat([hidden, context], -1)
        vocab = tf.nn.softmax(self.output_projection(features))
        switch = tf.sigmoid(self.switch(features))  # s_t
        return vocab * switch, attention * (1.0 - switch), (hidden, context)

    def decoding_step_fn(self, memory):
        def step_fn(prev_ids, step, state):
            ids = copied_word_ids(prev_ids, memory["source_ids"], self.word_vocab_size)
            vocab, copy, state = self._step(self.embedding(ids), state, memory)
            probs = tf.concat([vocab, copy], axis=1)  # [N, V + S]
            return tf.where(probs > 0, tf.math.log(tf.maximum(probs, 1e-30)), NEG_INF), state

        return step_fn

    def compute_loss_from_batch(self, batch, training=False):
        memory = self.encode(batch, training)
        inputs = self.embedding(batch["target_in"])
        losses = self._loss_loop(inputs, self.initial_decoding_state(memory), memory, batch)
        mask = tf.cast(batch["target_mask"], tf.float32)
        return tf.reduce_sum(losses * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)

    def _loss_loop(self, inputs, state, memory, batch):
        steps = tf.shape(inputs)[1]
        out = tf.TensorArray(tf.float32, size=steps)

        def body(t, state, out):
            vocab, copy, state = self._step(inputs[:, t], state, memory)
            return t + 1, state, out.write(t, self._token_nll(vocab, copy, batch["target_out"][:, t],
                                                               batch["copy_mask"][:, t]))

        _, _, out = tf.while_loop(lambda t, *_: t < steps, body, (0, state, out))
        return tf.transpose(out.stack())

    @staticmethod
    def _token_nll(vocab, copy, label, copy_mask):
        """-log p(y_t): the vocabulary share plus every source position holding y_t."""
        probability = tf.gather(vocab, label, batch_dims=1) + tf.reduce_sum(copy * copy_mask, -1)
        return -tf.math.log(tf.maximum(probability, 1e-12))

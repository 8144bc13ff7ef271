"""Record encoder (thesis sec. "Encoding of the Input Records"; Wiseman et al. 2017).

Each record characteristic (field, value, p+, p-, entity, group) has its own
embedding; the embeddings are concatenated and passed through one Dense+ReLU
layer:  r_hat = ReLU(W_r [e_field; e_value; e_p+; e_p-; e_entity; e_group] + b).
A characteristic whose dim is 0 is left out (E2E has no entity / group).
Padding records (record_mask False) are encoded as zero vectors.
"""

from __future__ import annotations

import keras
import tensorflow as tf

# batch key -> (vocab-size kwarg, dim kwarg)
FEATURES = (
    ("record_field", "field_vocab_size", "field_dim"),
    ("record_value", "value_vocab_size", "value_dim"),
    ("record_pos_start", "num_positions", "position_dim"),
    ("record_pos_end", "num_positions", "position_dim"),
    ("record_entity", "entity_vocab_size", "entity_dim"),
    ("record_group", "group_vocab_size", "group_dim"),
)


@keras.saving.register_keras_serializable(package="tablegen")
class RecordEncoder(keras.layers.Layer):
    """batch dict (record_* [B, R]) -> r_hat [B, R, hidden_size]."""

    def __init__(
        self,
        field_vocab_size,
        value_vocab_size,
        entity_vocab_size,
        group_vocab_size,
        max_position,
        hidden_size,
        field_dim=64,
        value_dim=256,
        position_dim=16,
        entity_dim=0,
        group_dim=0,
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.field_vocab_size = field_vocab_size
        self.value_vocab_size = value_vocab_size
        self.entity_vocab_size = entity_vocab_size
        self.group_vocab_size = group_vocab_size
        self.max_position = max_position
        self.hidden_size = hidden_size
        self.field_dim = field_dim
        self.value_dim = value_dim
        self.position_dim = position_dim
        self.entity_dim = entity_dim
        self.group_dim = group_dim
        self.dropout = dropout
        sizes = {**self._sizes(), "num_positions": max_position + 1}
        self.embeddings = {
            key: keras.layers.Embedding(sizes[vocab], getattr(self, dim), name=f"{key}_embedding")
            for key, vocab, dim in FEATURES
            if getattr(self, dim) > 0
        }
        self.dropout_layer = keras.layers.Dropout(dropout)
        self.projection = keras.layers.Dense(hidden_size, activation="relu", name="projection")

    def _sizes(self):
        return {k: getattr(self, k) for k in
                ("field_vocab_size", "value_vocab_size", "entity_vocab_size", "group_vocab_size")}

    def build(self, inputs_shape=None):
        for layer in self.embeddings.values():
            layer.build(None)
        width = sum(layer.output_dim for layer in self.embeddings.values())
        self.projection.build((None, None, width))

    def call(self, inputs, training=False):
        embedded = [layer(inputs[key]) for key, layer in self.embeddings.items()]
        x = self.dropout_layer(tf.concat(embedded, axis=-1), training=training)
        r_hat = self.projection(x)
        return r_hat * tf.cast(inputs["record_mask"], r_hat.dtype)[..., None]

    def get_config(self):
        config = super().get_config()
        config.update(self._sizes())
        config.update({k: getattr(self, k) for k in (
            "max_position", "hidden_size", "field_dim", "value_dim", "position_dim",
            "entity_dim", "group_dim", "dropout")})
        return config

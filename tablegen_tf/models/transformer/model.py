"""The Transformer family (Vaswani et al. 2017) over table records.

* ``transformer-copy``  encoder over the records + decoder + joint copy (as encdec-copy)
* ``transformer``       the same without copy

Encoder: each record's [word; field; p+; p-] embeddings projected to d_model
(``RecordEmbedding``), then ``encoder_layers`` of self-attention over the records
(padding masked) + FFN; no sequence positions (a table is a set of records). Decoder:
target word embeddings x sqrt(d_model) + sinusoidal positions (sec. 3.4-3.5),
``decoder_layers`` of causal self-attention, attention over the encoder output and FFN,
a final LayerNorm and the vocabulary softmax. Pre-LN blocks (layers.py says why).

Copy (``transformer-copy``): ``JointCopy`` of tablegen_tf.layers with the decoder's
final state as the query, the last layer's attention output over the records as the
switch's context, and the encoder output as the memory; extended ids V + r copy record r,
whose word is the next step's input (CONTRACT.md). Loss: masked mean token NLL with
optional label smoothing, as encdec.

Decoding: the state is one (keys, values) cache per decoder layer, [N, L, d_model] each,
L = ``max_decode_length`` (decode.max_length + 1 of the run's config): preallocated,
since tf.while_loop needs state shapes that do not change over the steps (only the
batch dimension may); step t writes position t and attends to positions <= t. A search
longer than the cache is capped, not refused (see ``_capped``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Dict

import keras
import tensorflow as tf

from tablegen_tf.config import Bound, ConfigError, at_least, at_least_below
from tablegen_tf.constants import EOS_ID, NEG_INF
from tablegen_tf.data.table_featurizer import TableFeaturizer
from tablegen_tf.decoding.common import copied_word_ids
from tablegen_tf.layers.joint_copy import JointCopy, extended_log_probs, joint_copy_nll, smoothed_nll
from tablegen_tf.models.base import GenerationModel, KeyedConfig, dtype_policy_scope
from tablegen_tf.models.registry import register_model
from tablegen_tf.models.transformer.layers import DecoderLayer, EncoderLayer, RecordEmbedding, layer_norm, sinusoid


@dataclasses.dataclass
class TransformerConfig:
    """The ``model:`` section of the Transformer family (its only defaults: sized for E2E
    on a 2-core CPU)."""

    KIND: ClassVar[str] = "transformer"  # corpus files tune it under `models: {transformer: ...}`
    BOUNDS: ClassVar[Dict[str, Bound]] = {
        "d_model": at_least(1), "num_heads": at_least(1), "encoder_layers": at_least(0),
        "decoder_layers": at_least(1), "ffn_dim": at_least(1), "dropout": at_least_below(0, 1),
        "field_dim": at_least(0), "position_dim": at_least(0), "label_smoothing": at_least_below(0, 1),
    }
    name: str = "transformer-copy"
    d_model: int = 256  # embeddings, attention and the residual stream
    num_heads: int = 4  # must divide d_model
    encoder_layers: int = 2  # 0: the records' embeddings only
    decoder_layers: int = 2
    ffn_dim: int = 1024  # the FFN's inner layer (sec. 3.3: 4 x d_model)
    dropout: float = 0.1  # residual and embedding dropout (sec. 5.4)
    field_dim: int = 64  # record field embedding; 0 leaves it out
    position_dim: int = 16  # p+ and p- (Lebret et al. 2016) each; 0 leaves them out
    # Label smoothing eps of the vocabulary softmax (training loss only), as encdec.
    label_smoothing: float = 0.0
    # Keras dtype policy of every layer: float32 | mixed_bfloat16.
    dtype: str = "float32"

    def __post_init__(self):
        if self.num_heads >= 1:  # num_heads < 1: check_bounds names it
            check_heads(self.d_model, self.num_heads)


def check_heads(d_model, num_heads):
    if d_model % num_heads:
        raise ConfigError(f"model.d_model ({d_model}) must be divisible by model.num_heads ({num_heads}): "
                          "each head attends in d_model / num_heads dimensions")


@register_model("transformer-copy", config=TransformerConfig, featurizer=TableFeaturizer, fixed={"copy": True},
                description="Transformer over table records + joint copy (Vaswani et al. 2017, Gu et al. 2016)")
@register_model("transformer", config=TransformerConfig, featurizer=TableFeaturizer, fixed={"copy": False},
                description="Transformer over table records (Vaswani et al. 2017)")
@keras.saving.register_keras_serializable(package="tablegen")
class Transformer(KeyedConfig, GenerationModel):
    """Record self-attention encoder -> causal Transformer decoder (+ joint copy)."""

    CONFIG_KEYS = ("word_vocab_size", "field_vocab_size", "max_position", "max_decode_length", "d_model", "num_heads",
                   "encoder_layers", "decoder_layers", "ffn_dim", "dropout", "field_dim", "position_dim",
                   "label_smoothing", "copy")

    def __init__(self, word_vocab_size, field_vocab_size, max_position=30, max_decode_length=101, d_model=256,
                 num_heads=4, encoder_layers=2, decoder_layers=2, ffn_dim=1024, dropout=0.0, field_dim=64,
                 position_dim=16, label_smoothing=0.0, copy=True, **kwargs):
        super().__init__(**kwargs)  # incl. dtype: "float32" | "mixed_bfloat16" (all layers)
        check_heads(d_model, num_heads)
        self.word_vocab_size = word_vocab_size
        self.field_vocab_size = field_vocab_size
        self.max_position = max_position
        self.max_decode_length = max_decode_length
        self.d_model = d_model
        self.num_heads = num_heads
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.ffn_dim = ffn_dim
        self.dropout = dropout
        self.field_dim = field_dim
        self.position_dim = position_dim
        self.label_smoothing = label_smoothing
        self.copy = copy
        with dtype_policy_scope(self.dtype_policy):
            self._init_layers()

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes):
        values = {k: v for k, v in dataclasses.asdict(config.model).items() if k != "name"}
        # p+/p- embeddings match the data's clip (data.max_position); the caches hold the
        # longest search the run decodes with (decode.max_length) plus one.
        return cls(word_vocab_size=vocab_sizes["words"], field_vocab_size=vocab_sizes["fields"], **values,
                   **dict(family.fixed), max_position=config.data.max_position,
                   max_decode_length=config.decode.max_length + 1, name=family.name.replace("-", "_"))

    def _init_layers(self):
        d, heads, ffn, dropout = self.d_model, self.num_heads, self.ffn_dim, self.dropout
        # N(0, d^-1/2) so that the embeddings x sqrt(d) (sec. 3.4) have unit variance
        self.word_embedding = keras.layers.Embedding(
            self.word_vocab_size, d, embeddings_initializer=keras.initializers.RandomNormal(stddev=d ** -0.5),
            name="word_embedding")
        self.record_embedding = RecordEmbedding(self.field_vocab_size, self.max_position, d, self.field_dim,
                                                self.position_dim, name="record_embedding")
        self.embedding_dropout = keras.layers.Dropout(dropout)  # sec. 5.4: on the embedding sums
        self.encoder_blocks = [EncoderLayer(d, heads, ffn, dropout, name=f"encoder_layer_{i}")
                               for i in range(self.encoder_layers)]
        self.encoder_norm = layer_norm("encoder_norm")  # pre-LN: the stack's output is normalised once
        self.decoder_blocks = [DecoderLayer(d, heads, ffn, dropout, name=f"decoder_layer_{i}")
                               for i in range(self.decoder_layers)]
        self.decoder_norm = layer_norm("decoder_norm")
        self.output_projection = keras.layers.Dense(self.word_vocab_size, name="output_projection")
        self.copier = JointCopy(d, "general", name="joint_copy") if self.copy else None
        self.build()

    def build(self, input_shape=None):
        d, sequence = self.d_model, (None, None, self.d_model)
        self.word_embedding.build(None)
        self.record_embedding.build()
        for block in self.encoder_blocks + self.decoder_blocks:
            block.build()
        self.encoder_norm.build(sequence)
        self.decoder_norm.build(sequence)
        self.output_projection.build((None, d))
        if self.copier is not None:
            self.copier.build(sequence, sequence, sequence, sequence)
        self.built = True

    def word_embedding_layer(self):
        return self.word_embedding

    # === Encoding ===

    def encode(self, batch, training=False, **unused):
        """The encoder output and what every decoding step reads of it (each layer's
        cross-attention keys and values, the copy keys), all leading dim B."""
        mask = tf.convert_to_tensor(batch["record_mask"])
        values = tf.convert_to_tensor(batch["record_value"])
        x = self.embedding_dropout(self.record_embedding(batch, self.word_embedding(values)), training=training)
        attention_mask = mask[:, None, None, :]
        for block in self.encoder_blocks:
            x = block(x, attention_mask, training=training)
        records = self.encoder_norm(x) * tf.cast(mask, x.dtype)[..., None]
        memory = {"memory": records, "memory_mask": mask, "record_value": values, "memory_value": values,
                  "memory_record": tf.range(tf.shape(mask)[1])[None, :] + tf.zeros_like(values)}
        for i, block in enumerate(self.decoder_blocks):
            memory[f"cross_keys_{i}"], memory[f"cross_values_{i}"] = block.cross_attention.keys_values(records)
        if self.copier is not None:
            memory["copy_keys"] = self.copier.precompute(records)
        return memory

    def decoding_memory(self, memory):
        """``encode`` computes every key a step reads: the step function of any rows of it
        costs nothing (finished entries leave the search)."""
        return memory

    # === Decoder (teacher forcing) ===

    def embed_targets(self, ids, positions):
        """Sec. 3.4-3.5: emb(y) x sqrt(d_model) + PE(position) -> (decoder input, the scaled
        word embedding that the copy switch reads)."""
        words = self.word_embedding(ids) * tf.cast(math.sqrt(self.d_model), self.compute_dtype)
        return words + tf.cast(sinusoid(positions, self.d_model), words.dtype), words

    def decode_sequence(self, memory, target_in, training=False):
        """-> outputs {"states", "vocab_logits" (+ copy_log_probs, switch_logit)} [B, T, ...]."""
        steps = tf.shape(target_in)[1]
        x, words = self.embed_targets(target_in, tf.range(steps)[None, :])
        x = self.embedding_dropout(x, training=training)
        causal = (tf.range(steps)[:, None] >= tf.range(steps)[None, :])[None, None]  # [1, 1, T, T] (sec. 3.2.3)
        context = None
        for i, block in enumerate(self.decoder_blocks):
            normed = block.self_attention_input(x)
            keys, values = block.self_attention.keys_values(normed)
            x, context = block(x, normed, keys, values, causal, memory[f"cross_keys_{i}"],
                               memory[f"cross_values_{i}"], self._cross_mask(memory), training=training)
        return self._heads(self.decoder_norm(x), context, words, memory)

    def _cross_mask(self, memory):
        return memory["memory_mask"][:, None, None, :]

    def _heads(self, states, context, words, memory):
        """The final states [B, T, D] -> vocabulary logits (+ joint copy's attention and switch)."""
        outputs = {"states": states, "vocab_logits": self.output_projection(states)}
        if self.copier is not None:
            outputs["copy_log_probs"], outputs["switch_logit"] = self.copier(
                states, context, words, memory["memory"], memory["memory_mask"], keys=memory["copy_keys"])
        return outputs

    def token_nll(self, outputs, target_out, copy_mask):
        """Per-token NLL [B, T] (unmasked): joint copy's (tablegen_tf.layers.joint_copy) or
        the vocabulary softmax's."""
        if self.copier is None:
            logits = tf.cast(outputs["vocab_logits"], tf.float32)
            return tf.nn.sparse_softmax_cross_entropy_with_logits(target_out, logits)
        return joint_copy_nll(outputs["vocab_logits"], target_out, outputs["switch_logit"],
                              outputs["copy_log_probs"], copy_mask)

    def call(self, batch, training=False):
        memory = self.encode(batch, training=training)
        return {"outputs": self.decode_sequence(memory, batch["target_in"], training=training), "memory": memory}

    def compute_loss_from_batch(self, batch, training=False):
        """Masked mean token NLL (label smoothing as encdec's, in training only)."""
        outputs = self(batch, training=training)["outputs"]
        tokens = tf.convert_to_tensor(batch["target_mask"])
        nll = tf.boolean_mask(self.token_nll(outputs, batch["target_out"], batch["copy_mask"]), tokens)
        if training and self.label_smoothing > 0:
            nll = smoothed_nll(nll, tf.boolean_mask(outputs["vocab_logits"], tokens), self.label_smoothing)
        return tf.math.divide_no_nan(tf.reduce_sum(nll), tf.cast(tf.size(nll), tf.float32))

    # === Step-wise decoding (CONTRACT.md) ===

    def initial_decoding_state(self, memory):
        """One (keys, values) cache per decoder layer, zeros [B, max_decode_length, d_model]."""
        batch_size = tf.shape(memory["memory"])[0]
        empty = tf.zeros([batch_size, self.max_decode_length, self.d_model], self.compute_dtype)
        return tuple((empty, empty) for _ in self.decoder_blocks)

    def decoding_step_fn(self, memory):
        """step_fn(prev_ids [N], step, state) -> (log_probs [N, V + R], state); memory leading dim N."""
        num_records = tf.shape(memory["record_value"])[1]
        cross_mask = self._cross_mask(memory)
        cache_positions = tf.range(self.max_decode_length)

        def step_fn(prev_ids, step, state):
            # Never past the cache: a longer search is capped by _capped (its last position
            # is written again by any later step of a finished row, whose output is unused).
            at = tf.minimum(step, self.longest_search)
            written = tf.equal(cache_positions, at)[None, :, None]  # [1, L, 1]: this step's slot
            visible = (cache_positions <= at)[None, None, None, :]  # [1, 1, 1, L] (sec. 3.2.3)
            ids = copied_word_ids(prev_ids, memory["record_value"], self.word_vocab_size)[:, None]
            x, words = self.embed_targets(ids, tf.fill(tf.shape(ids), step))
            context, new_state = None, []
            for i, (block, (key_cache, value_cache)) in enumerate(zip(self.decoder_blocks, state)):
                normed = block.self_attention_input(x)
                keys, values = block.self_attention.keys_values(normed)  # [N, 1, D]
                key_cache = tf.where(written, keys, key_cache)
                value_cache = tf.where(written, values, value_cache)
                new_state.append((key_cache, value_cache))
                x, context = block(x, normed, key_cache, value_cache, visible, memory[f"cross_keys_{i}"],
                                   memory[f"cross_values_{i}"], cross_mask)
            outputs = self._heads(self.decoder_norm(x), context, words, memory)
            log_probs = self._extended_log_probs({k: v[:, 0] for k, v in outputs.items()}, memory, num_records)
            return self._capped(log_probs, step), tuple(new_state)

        return step_fn

    def _extended_log_probs(self, outputs, memory, num_records):
        vocab_log_probs = tf.nn.log_softmax(tf.cast(outputs["vocab_logits"], tf.float32))
        if self.copier is None:
            return tf.pad(vocab_log_probs, [[0, 0], [0, num_records]], constant_values=NEG_INF)
        return extended_log_probs(vocab_log_probs, outputs["switch_logit"], tf.exp(outputs["copy_log_probs"]),
                                  memory["memory_value"], memory["memory_record"], num_records)

    @property
    def longest_search(self):
        return self.max_decode_length - 1

    def _capped(self, log_probs, step):
        """At the cache's last position every hypothesis ends: all mass on </s>, so a
        search longer than the caches can never write past them (a write past the cache
        would be silently lost, and an assert in the step would be dropped where the search
        runs as one XLA computation). The SavedModel's `generate` refuses a longer
        max_length before the search (``longest_search``, export.checked_decoding_inputs);
        `--max-length` of evaluate, generate and export raises it before the model is built
        (training.trainer.load_trained)."""
        last = step >= self.longest_search
        only_end = tf.where(tf.range(tf.shape(log_probs)[1]) == EOS_ID, 0.0, NEG_INF)
        return tf.where(last, tf.broadcast_to(only_end, tf.shape(log_probs)), log_probs)

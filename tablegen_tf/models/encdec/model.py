"""The RotoWire encoder-decoder family as Keras models (thesis ch. "Models").

* ``encdec``       record encoder + 2-layer LSTM Luong input-feeding decoder
* ``encdec-copy``  + joint copy (Gu et al. 2016)
* ``encdec-cs``    + content selection gate (Puduppully et al. 2019) + copy
* ``ncp``          (folder ``models/ncp``) content selection + planning + copy over the plan

Every model is built from the layers in ``tablegen_tf.layers`` and provides the family
contract of ``tablegen_tf.models.base``:

* ``call(batch, training)`` -> {"outputs": ..., "memory": ...} (what the loss needs)
* ``compute_loss_from_batch(batch, training)`` -> masked-mean token NLL (+ plan NLL)
* ``encode(batch)`` -> memory dict (all tensors with leading batch dim)
* ``initial_decoding_state(memory)`` -> flat state tuple
* ``decoding_step_fn(memory)`` -> ``step_fn(prev_ids [N], step, state)`` (CONTRACT.md)
* ``tile(memory, K)`` -> memory repeated per beam (b0k0, b0k1, .., the layout of
  ``tablegen_tf.decoding.tile_batch``).  Beam search usage::

      memory = model.encode(batch)
      state = model.initial_decoding_state(memory)          # [B, ...]; the search tiles it
      step_fn = model.decoding_step_fn(model.tile(memory, K))
      beam_search(step_fn, start_ids, state, K, max_length, END_ID)

Keras ``fit`` works too: ``compile(optimizer=...)`` without a loss; ``compute_loss``
is overridden (scaled per replica for tf.distribute).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict

import keras
import tensorflow as tf

from tablegen_tf.config import Bound, at_least, at_least_below
from tablegen_tf.constants import BOS_ID, NEG_INF, UNK_ID
from tablegen_tf.data.table_featurizer import TableFeaturizer
from tablegen_tf.decoding.common import copied_word_ids
from tablegen_tf.layers.content_selection import ContentSelectionGate
from tablegen_tf.layers.initial_state import EntityMeanInitialState
from tablegen_tf.layers.joint_copy import JointCopy, extended_log_probs, joint_copy_nll, masked_mean, smoothed_nll
from tablegen_tf.layers.lstm_decoder import AttentionLSTMDecoder
from tablegen_tf.layers.record_encoder import RecordEncoder
from tablegen_tf.models.base import GenerationModel, KeyedConfig, dtype_policy_scope
from tablegen_tf.models.registry import register_model

VOCAB_NAMES = (("word", "words"), ("field", "fields"), ("entity", "entities"), ("group", "groups"))


@dataclasses.dataclass
class EncDecConfig:
    """The ``model:`` section of the encoder-decoder family (its only defaults)."""

    KIND: ClassVar[str] = "encdec"  # corpus files tune it under `models: {encdec: ...}`
    BOUNDS: ClassVar[Dict[str, Bound]] = {
        "hidden_size": at_least(1), "num_layers": at_least(1), "word_dim": at_least(1), "field_dim": at_least(0),
        "value_dim": at_least(1), "position_dim": at_least(0), "entity_dim": at_least(0), "group_dim": at_least(0),
        "dropout": at_least_below(0, 1), "label_smoothing": at_least_below(0, 1),
    }
    name: str = "encdec-copy"
    hidden_size: int = 256  # record encoding r_hat, LSTM and attentional vector size
    num_layers: int = 2  # thesis: 2-layer LSTM decoder
    word_dim: int = 256  # target word embedding
    field_dim: int = 64  # record embeddings; 0 leaves a characteristic out
    value_dim: int = 256
    position_dim: int = 16  # p+ and p- (Lebret et al. 2016) each
    entity_dim: int = 0
    group_dim: int = 0
    attention: str = "general"  # Luong general | dot | bahdanau
    dropout: float = 0.3
    # Label smoothing eps of the vocabulary softmax (training loss only; perplexity and
    # decoding are unchanged): (1 - eps) NLL + eps CE(uniform over V, P_vocab).
    label_smoothing: float = 0.0
    # Keras dtype policy of every layer: float32 | mixed_bfloat16 (bf16 matmuls with float32
    # weights and losses; faster on CPUs with AMX/AVX512-BF16, slower without).
    dtype: str = "float32"


@register_model("encdec", config=EncDecConfig, featurizer=TableFeaturizer,
                fixed={"copy": False, "content_selection": False},
                description="record encoder + LSTM decoder with Luong attention (thesis baseline)")
@register_model("encdec-copy", config=EncDecConfig, featurizer=TableFeaturizer,
                fixed={"copy": True, "content_selection": False},
                description="encdec + joint copy attention (Gu et al. 2016)")
@register_model("encdec-cs", config=EncDecConfig, featurizer=TableFeaturizer,
                fixed={"copy": True, "content_selection": True},
                description="encdec-copy + content selection gate (Puduppully et al. 2019)")
@keras.saving.register_keras_serializable(package="tablegen")
class EncDec(KeyedConfig, GenerationModel):
    """Record encoder (+ content selection) -> Luong input-feeding LSTM (+ joint copy)."""

    supports_tbptt = True

    CONFIG_KEYS = (
        "word_vocab_size", "field_vocab_size", "entity_vocab_size", "group_vocab_size", "max_position",
        "hidden_size", "num_layers", "word_dim", "field_dim", "value_dim", "position_dim", "entity_dim",
        "group_dim", "attention", "dropout", "label_smoothing", "copy", "content_selection",
    )

    def __init__(
        self,
        word_vocab_size,
        field_vocab_size,
        entity_vocab_size=3,
        group_vocab_size=3,
        max_position=30,
        hidden_size=256,
        num_layers=2,
        word_dim=256,
        field_dim=64,
        value_dim=256,
        position_dim=16,
        entity_dim=0,
        group_dim=0,
        attention="general",
        dropout=0.0,
        label_smoothing=0.0,
        copy=False,
        content_selection=False,
        **kwargs,
    ):
        super().__init__(**kwargs)  # incl. dtype: "float32" | "mixed_bfloat16" (all layers)
        # === Config ===
        self.word_vocab_size = word_vocab_size
        self.field_vocab_size = field_vocab_size
        self.entity_vocab_size = entity_vocab_size
        self.group_vocab_size = group_vocab_size
        self.max_position = max_position
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.word_dim = word_dim
        self.field_dim = field_dim
        self.value_dim = value_dim
        self.position_dim = position_dim
        self.entity_dim = entity_dim
        self.group_dim = group_dim
        self.attention = attention
        self.dropout = dropout
        self.label_smoothing = label_smoothing
        self.copy = copy
        self.content_selection = content_selection
        with dtype_policy_scope(self.dtype_policy):
            self._init_layers()

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes):
        values = {k: v for k, v in dataclasses.asdict(config.model).items() if k != "name"}
        for key, plural in VOCAB_NAMES:
            size = vocab_sizes.get(plural, vocab_sizes.get(key))
            if size is not None:
                values[f"{key}_vocab_size"] = size
        # The position embeddings must match the data's p+/p- clip: one source, data.max_position.
        return cls(**values, **dict(family.fixed), max_position=config.data.max_position,
                   name=family.name.replace("-", "_"))

    def _init_layers(self):
        """Sublayers (created under the model's dtype policy) and their weights."""
        hidden_size, num_layers, dropout, attention = self.hidden_size, self.num_layers, self.dropout, self.attention
        # === Layers ===
        self.record_encoder = RecordEncoder(
            self.field_vocab_size, self.word_vocab_size, self.entity_vocab_size, self.group_vocab_size,
            self.max_position, hidden_size, field_dim=self.field_dim, value_dim=self.value_dim,
            position_dim=self.position_dim, entity_dim=self.entity_dim, group_dim=self.group_dim,
            dropout=dropout, name="record_encoder",
        )
        self.selector = ContentSelectionGate(name="content_selection") if self.content_selection else None
        self.initial_state = EntityMeanInitialState(hidden_size, num_layers, name="initial_state")
        self.word_embedding = keras.layers.Embedding(self.word_vocab_size, self.word_dim, name="word_embedding")
        self.decoder = AttentionLSTMDecoder(hidden_size, num_layers, attention, dropout, name="decoder")
        self.output_projection = keras.layers.Dense(self.word_vocab_size, name="output_projection")
        self.copier = JointCopy(hidden_size, attention, name="joint_copy") if self.copy else None
        self._init_extra()
        self.build()

    def _init_extra(self):
        pass

    # === Build (all sizes are known: build eagerly so checkpoints restore without a call) ===

    def memory_dim(self):
        return self.hidden_size

    def build(self, input_shape=None):
        h, m = self.hidden_size, (None, None, self.memory_dim())
        self.record_encoder.build(None)
        if self.selector is not None:
            self.selector.build((None, None, h))
        self._build_extra()
        self.initial_state.build(m)
        self.word_embedding.build(None)
        self.decoder.build((None, None, self.word_dim), m)
        self.output_projection.build((None, h))
        if self.copier is not None:
            self.copier.build((None, None, h), m, (None, None, self.word_dim), m)

    def _build_extra(self):
        pass

    # === Encoding ===

    def encode_records(self, batch, training=False):
        """-> (r_hat or r_cs [B,R,H], record_mask [B,R])."""
        mask = tf.convert_to_tensor(batch["record_mask"])
        records = self.record_encoder(batch, training=training)
        if self.selector is not None:
            records = self.selector(records, mask)
        return records, mask

    def encode(self, batch, training=False, use_gold_plan=False):
        """Decoder memory (``use_gold_plan`` only matters for NCP)."""
        records, mask = self.encode_records(batch, training)
        positions = tf.range(tf.shape(mask)[1])[None, :] + tf.zeros_like(batch["record_value"])
        return {
            "memory": records,
            "memory_mask": mask,
            "memory_value": batch["record_value"],
            "memory_record": positions,
            "memory_entity": batch["record_entity"],
            "record_value": batch["record_value"],
        }

    def memory_copy_mask(self, memory, copy_mask):
        """copy_mask [B,T,R] over records -> over memory items."""
        return copy_mask

    def auxiliary_loss(self, memory, batch):
        return tf.constant(0.0)

    # === Decoding a whole target (teacher forcing) ===

    def initial_decoding_state(self, memory):
        return self.initial_state(memory["memory"], memory["memory_entity"], memory["memory_mask"])

    def decode_sequence(self, memory, target_in, state, training=False, carry_step=None, tokens=None):
        """-> (outputs dict, final state or the state after ``carry_step`` steps).  Outputs are
        [B,T,...]; with ``tokens`` (bool [B,T]) only those positions, packed to [N,...]."""
        inputs = self.word_embedding(target_in)
        h_tilde, context, state = self.decoder(
            inputs, memory["memory"], memory["memory_mask"], state, training=training, carry_step=carry_step
        )
        outputs = {}
        if self.copier is not None:
            copy_log_probs, switch_logit = self.copier(
                h_tilde, context, inputs, memory["memory"], memory["memory_mask"]
            )
            outputs.update(copy_log_probs=copy_log_probs, switch_logit=switch_logit)
        if tokens is not None:
            # The vocabulary projection is about a third of a small model's training step;
            # padding (~15 % of a bucketed batch) need not pay for it.
            outputs = {key: tf.boolean_mask(value, tokens) for key, value in outputs.items()}
            h_tilde = tf.boolean_mask(h_tilde, tokens)
        outputs["vocab_logits"] = self.output_projection(h_tilde)
        return outputs, state

    def token_nll(self, outputs, memory, target_out, copy_mask, tokens=None):
        """Per-token NLL [B,T] (unmasked); with ``tokens``, [N] for the outputs that
        ``decode_sequence(..., tokens=tokens)`` packed."""
        if tokens is not None:
            copy_mask = tf.boolean_mask(self.memory_copy_mask(memory, copy_mask), tokens)
            return self._packed_nll(outputs, tf.boolean_mask(target_out, tokens), copy_mask)
        return self._packed_nll(outputs, target_out, self.memory_copy_mask(memory, copy_mask))

    def _packed_nll(self, outputs, target_out, copy_mask):
        """NLL per position of any leading shape; ``copy_mask`` already over memory items."""
        if self.copier is None:
            logits = tf.cast(outputs["vocab_logits"], tf.float32)
            return tf.nn.sparse_softmax_cross_entropy_with_logits(target_out, logits)
        return joint_copy_nll(
            outputs["vocab_logits"], target_out, outputs["switch_logit"], outputs["copy_log_probs"], copy_mask
        )

    def call(self, batch, training=False):
        memory = self.encode(batch, training=training, use_gold_plan=True)
        state = self.initial_decoding_state(memory)
        outputs, _ = self.decode_sequence(memory, batch["target_in"], state, training=training)
        return {"outputs": outputs, "memory": memory}

    # === Losses ===

    def loss_from_predictions(self, batch, predictions):
        memory = predictions["memory"]
        nll = self.token_nll(predictions["outputs"], memory, batch["target_out"], batch["copy_mask"])
        return masked_mean(nll, batch["target_mask"]) + self.auxiliary_loss(memory, batch)

    def compute_loss_from_batch(self, batch, training=False):
        """``loss_from_predictions(batch, self(batch))``, with the per-token heads run on the
        target tokens only (not on padding)."""
        tokens = batch["target_mask"]
        memory = self.encode(batch, training=training, use_gold_plan=True)
        state = self.initial_decoding_state(memory)
        outputs, _ = self.decode_sequence(memory, batch["target_in"], state, training=training, tokens=tokens)
        nll = self.token_nll(outputs, memory, batch["target_out"], batch["copy_mask"], tokens=tokens)
        if training and self.label_smoothing > 0:
            nll = smoothed_nll(nll, outputs["vocab_logits"], self.label_smoothing)
        mean = tf.math.divide_no_nan(tf.reduce_sum(nll), tf.cast(tf.size(nll), tf.float32))
        return mean + self.auxiliary_loss(memory, batch)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras fit/evaluate hook: the batch dict is ``x``.  The per-replica mean is scaled
        by 1/replicas because tf.distribute sums gradients across replicas (what Keras'
        own compiled losses do); the logged loss is unscaled again by Keras."""
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return self.loss_from_predictions(x, y_pred) / replicas

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Keras (3.15) builds a model created under tf.distribute by MEAN-reducing a sample
        batch across replicas, which fails on our bool/string features.  Our layers are
        built in __init__ and we compile no loss/metrics: only the optimizer needs building."""
        if self._distribute_strategy is None:
            return
        with self.distribute_strategy.scope():
            if self.optimizer is not None and not self.optimizer.built:
                self.optimizer.build(self.trainable_variables)

    def tbptt_loss_and_gradients(self, batch, t1, t2, training=True):
        from tablegen_tf.layers.tbptt import tbptt_loss_and_gradients

        return tbptt_loss_and_gradients(self, batch, t1, t2, training=training)

    def attention_images(self, batch, count):
        """Copy attention (target steps x records) of the first ``count`` tables."""
        if self.copier is None:
            return None  # encdec has no copy attention to show
        attention = tf.exp(self(batch, training=False)["outputs"]["copy_log_probs"][:count])  # [n, T, R]
        attention = attention / tf.maximum(tf.reduce_max(attention, axis=[1, 2], keepdims=True), 1e-9)
        return attention[..., None]

    def explain_tokens(self, memory, ids):
        """One teacher-forced pass over the chosen ids (exact, unlike replaying the beam's
        reordered states): the copy attention moved from memory items to their records (NCP:
        plan position -> record), the copy share of each token's joint probability, and the
        record with the most copy mass for a token whose copy share is above one half."""
        if self.copier is None:
            return None  # no copy attention; the decoder's attention is internal to its loop
        start = tf.fill([tf.shape(ids)[0], 1], BOS_ID)
        target_in = self.feedback_ids(tf.concat([start, ids[:, :-1]], axis=1), memory["record_value"])
        outputs, _ = self.decode_sequence(memory, target_in, self.initial_decoding_state(memory))
        copy = tf.exp(tf.cast(outputs["copy_log_probs"], tf.float32))  # [B, T, M]
        switch = tf.cast(outputs["switch_logit"], tf.float32)
        num_records = tf.shape(memory["record_value"])[1]
        item_record = tf.one_hot(memory["memory_record"], num_records) * tf.cast(
            memory["memory_mask"], tf.float32)[:, :, None]  # [B, M, R]
        slot = tf.where(memory["memory_value"] > UNK_ID, memory["memory_value"],
                        self.word_vocab_size + memory["memory_record"])  # extended_log_probs' rule
        mass = tf.sigmoid(-switch)[:, :, None] * copy * tf.cast(
            tf.equal(slot[:, None, :], ids[:, :, None]), tf.float32)  # copy mass of the token, per item
        vocab_probs = tf.nn.softmax(tf.cast(outputs["vocab_logits"], tf.float32))
        in_vocab = ids < self.word_vocab_size
        generated = tf.where(in_vocab, tf.sigmoid(switch) * tf.gather(
            vocab_probs, tf.minimum(ids, self.word_vocab_size - 1), batch_dims=2), 0.0)
        copied = tf.reduce_sum(mass, axis=2)
        share = tf.math.divide_no_nan(copied, copied + generated)
        item = tf.argmax(mass, axis=2, output_type=tf.int32)
        record = tf.gather(memory["memory_record"], item, batch_dims=1)
        return {
            "attention": tf.einsum("btm,bmr->btr", copy, item_record),
            "copy_probability": share,
            "copied_from": tf.where(share > 0.5, tf.cast(record, tf.int32), -1),
        }

    # === Step-wise decoding (CONTRACT.md) ===

    def decoding_memory(self, memory):
        keys = {"decoder_keys": self.decoder.precompute(memory["memory"])}
        if self.copier is not None:
            keys["copy_keys"] = self.copier.precompute(memory["memory"])
        return {**memory, **keys}

    def decoding_step_fn(self, memory):
        """step_fn(prev_ids [N], step, state) -> (log_probs [N, V+R], state); memory leading dim N
        (with ``decoding_memory``'s keys, or they are computed here)."""
        memory = memory if "decoder_keys" in memory else self.decoding_memory(memory)
        keys = memory["decoder_keys"]
        copy_keys = memory.get("copy_keys")
        num_records = tf.shape(memory["record_value"])[1]

        def step_fn(prev_ids, step, state):
            inputs = self.word_embedding(self.feedback_ids(prev_ids, memory["record_value"]))
            h_tilde, context, state = self.decoder.step(
                inputs, state, memory["memory"], memory["memory_mask"], keys
            )
            return self._extended_log_probs(h_tilde, context, inputs, memory, copy_keys, num_records), state

        return step_fn

    def feedback_ids(self, prev_ids, record_value):
        """Extended id V + r -> record r's value id (<unk> when OOV)."""
        return copied_word_ids(prev_ids, record_value, self.word_vocab_size)

    def _extended_log_probs(self, h_tilde, context, inputs, memory, copy_keys, num_records):
        vocab_log_probs = tf.nn.log_softmax(tf.cast(self.output_projection(h_tilde), tf.float32))
        if self.copier is None:
            return tf.pad(vocab_log_probs, [[0, 0], [0, num_records]], constant_values=NEG_INF)
        copy_log_probs, switch_logit = self.copier(
            h_tilde, context, inputs, memory["memory"], memory["memory_mask"], keys=copy_keys
        )
        return extended_log_probs(
            vocab_log_probs, switch_logit, tf.exp(copy_log_probs),
            memory["memory_value"], memory["memory_record"], num_records,
        )

"""The RotoWire encoder-decoder family as Keras models (thesis ch. "Models").

* ``encdec``       record encoder + 2-layer LSTM Luong input-feeding decoder
* ``encdec-copy``  + joint copy (Gu et al. 2016)
* ``encdec-cs``    + content selection gate (Puduppully et al. 2019) + copy
* ``ncp``          content selection + content planning + copy over the plan

Every model is built from the layers in ``tablegen_tf.layers`` and exposes:

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

import contextlib

import keras
import tensorflow as tf

from tablegen_tf.constants import MASKED_LOGIT, NEG_INF, PAD_ID
from tablegen_tf.layers.content_planning import ContentPlanner, PlanEncoder, gather_plan, plan_targets
from tablegen_tf.layers.content_selection import ContentSelectionGate
from tablegen_tf.layers.initial_state import EntityMeanInitialState
from tablegen_tf.layers.joint_copy import JointCopy, extended_log_probs, joint_copy_nll, masked_mean
from tablegen_tf.layers.lstm_decoder import AttentionLSTMDecoder
from tablegen_tf.layers.record_encoder import RecordEncoder



@contextlib.contextmanager
def _dtype_policy(policy):
    """Keras gives sublayers the GLOBAL policy at construction: set it to the model's."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


@keras.saving.register_keras_serializable(package="tablegen")
class EncDec(keras.Model):
    """Record encoder (+ content selection) -> Luong input-feeding LSTM (+ joint copy)."""

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
        self.copy = copy
        self.content_selection = content_selection
        with _dtype_policy(self.dtype_policy):
            self._init_layers()

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

    def decode_sequence(self, memory, target_in, state, training=False, carry_step=None):
        """-> (outputs dict, final state or the state after ``carry_step`` steps)."""
        inputs = self.word_embedding(target_in)
        h_tilde, context, state = self.decoder(
            inputs, memory["memory"], memory["memory_mask"], state, training=training, carry_step=carry_step
        )
        outputs = {"vocab_logits": self.output_projection(h_tilde)}
        if self.copier is not None:
            copy_log_probs, switch_logit = self.copier(
                h_tilde, context, inputs, memory["memory"], memory["memory_mask"]
            )
            outputs.update(copy_log_probs=copy_log_probs, switch_logit=switch_logit)
        return outputs, state

    def token_nll(self, outputs, memory, target_out, copy_mask):
        """Per-token NLL [B,T] (unmasked)."""
        if self.copier is None:
            logits = tf.cast(outputs["vocab_logits"], tf.float32)
            return tf.nn.sparse_softmax_cross_entropy_with_logits(target_out, logits)
        return joint_copy_nll(
            outputs["vocab_logits"], target_out, outputs["switch_logit"], outputs["copy_log_probs"],
            self.memory_copy_mask(memory, copy_mask),
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
        return self.loss_from_predictions(batch, self(batch, training=training))

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

    # === Step-wise decoding (CONTRACT.md) ===

    def tile(self, memory, multiplier):
        return tf.nest.map_structure(lambda x: tf.repeat(x, multiplier, axis=0), memory)

    def decoding_step_fn(self, memory):
        """step_fn(prev_ids [N], step, state) -> (log_probs [N, V+R], state); memory leading dim N."""
        keys = self.decoder.precompute(memory["memory"])
        copy_keys = self.copier.precompute(memory["memory"]) if self.copier is not None else None
        num_records = tf.shape(memory["record_value"])[1]

        def step_fn(prev_ids, step, state):
            inputs = self.word_embedding(self.feedback_ids(prev_ids, memory["record_value"]))
            h_tilde, context, state = self.decoder.step(
                inputs, state, memory["memory"], memory["memory_mask"], keys
            )
            log_probs = self._extended_log_probs(h_tilde, context, inputs, memory, copy_keys, num_records)
            return tf.where(log_probs <= MASKED_LOGIT / 2, NEG_INF, log_probs), state

        return step_fn

    def feedback_ids(self, prev_ids, record_value):
        """Extended id V + r -> record r's value id (<unk> when OOV)."""
        record = tf.clip_by_value(prev_ids - self.word_vocab_size, 0, tf.shape(record_value)[1] - 1)
        copied = tf.gather(record_value, record[:, None], batch_dims=1)[:, 0]
        return tf.where(prev_ids >= self.word_vocab_size, copied, prev_ids)

    def _extended_log_probs(self, h_tilde, context, inputs, memory, copy_keys, num_records):
        vocab_log_probs = tf.nn.log_softmax(tf.cast(self.output_projection(h_tilde), tf.float32))
        if self.copier is None:
            return tf.pad(vocab_log_probs, [[0, 0], [0, num_records]], constant_values=MASKED_LOGIT)
        copy_log_probs, switch_logit = self.copier(
            h_tilde, context, inputs, memory["memory"], memory["memory_mask"], keys=copy_keys
        )
        return extended_log_probs(
            vocab_log_probs, switch_logit, tf.exp(copy_log_probs),
            memory["memory_value"], memory["memory_record"], num_records,
        )

    # === Config ===

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name) for name in CONFIG_KEYS})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


CONFIG_KEYS = (
    "word_vocab_size", "field_vocab_size", "entity_vocab_size", "group_vocab_size", "max_position",
    "hidden_size", "num_layers", "word_dim", "field_dim", "value_dim", "position_dim", "entity_dim",
    "group_dim", "attention", "dropout", "copy", "content_selection",
)


@keras.saving.register_keras_serializable(package="tablegen")
class NCP(EncDec):
    """Neural content planning (Puduppully et al. 2019): content selection, a pointer
    network producing the plan, and a text decoder attending / copying over the plan
    (a bidirectional LSTM over the r_cs of the planned records).

    The text decoder starts from the entity-pooled mean of the plan encodings (the
    EncDec initial-state layer over plan positions; Puduppully start from the plan
    encoder's final states -- we keep one initial-state rule for the whole family).
    Training uses the gold plan (teacher forcing) for both stages, loss = plan NLL +
    text NLL (both masked means).  Inference is two-stage: ``encode(batch)`` decodes
    a plan greedily (``max_plan_length`` steps), then text is decoded over that plan.
    For a beam search over plans use ``planning_step_fn`` (start id R + 1 = BOS, end
    id R = EOS) and pass the result as ``encode(batch, plan=...)``.
    """

    def __init__(self, word_vocab_size, field_vocab_size, max_plan_length=100, **kwargs):
        kwargs.update(copy=True, content_selection=True)
        super().__init__(word_vocab_size, field_vocab_size, **kwargs)
        self.max_plan_length = max_plan_length

    def _init_extra(self):
        self.planner = ContentPlanner(name="content_planner")
        self.plan_encoder = PlanEncoder(self.hidden_size, name="plan_encoder")

    def memory_dim(self):
        return 2 * (self.hidden_size // 2)

    def _build_extra(self):
        self.planner.build((None, None, self.hidden_size))
        self.plan_encoder.build((None, None, self.hidden_size))

    def encode(self, batch, training=False, use_gold_plan=False, plan=None):
        """``plan`` [B,P] (-1 pad) overrides both the gold and the predicted plan."""
        records, mask = self.encode_records(batch, training)
        memory = {"records": records, "record_mask": mask, "record_value": batch["record_value"]}
        if plan is None and use_gold_plan:
            plan = tf.where(batch["content_plan_mask"], batch["content_plan"], -1)
            plan_in, plan_out, plan_out_mask = plan_targets(plan, tf.shape(records)[1])
            memory.update(plan_log_probs=self.planner(records, mask, plan_in),
                          plan_out=plan_out, plan_out_mask=plan_out_mask)
        elif plan is None:
            plan = self.planner.greedy_decode(records, mask, self.max_plan_length)
        encoded, plan_mask = self.plan_encoder(records, plan)
        memory.update(
            plan=plan, memory=encoded, memory_mask=plan_mask,
            memory_value=tf.where(plan_mask, gather_plan(batch["record_value"], plan), PAD_ID),
            memory_record=tf.maximum(plan, 0),
            memory_entity=gather_plan(batch["record_entity"], plan),
        )
        return memory

    def memory_copy_mask(self, memory, copy_mask):
        gathered = gather_plan(copy_mask, memory["plan"], axis=2)  # [B,T,P]
        return gathered * tf.cast(memory["memory_mask"], gathered.dtype)[:, None, :]

    def auxiliary_loss(self, memory, batch):
        """Plan NLL: masked mean over plan steps (incl. EOS)."""
        log_probs = tf.gather(memory["plan_log_probs"], memory["plan_out"], batch_dims=2)
        return -masked_mean(log_probs, memory["plan_out_mask"])

    def planning_step_fn(self, memory):
        """Pointer step_fn over [N, R+1] (records + EOS) for tablegen_tf.decoding; state =
        ``self.planner.initial_state(memory["records"], memory["record_mask"])``.  E.g.
        ``ids, _, _ = beam_search(step_fn, start (R + 1), state, K, max_len, end_id=R,
        pad_id=-1)`` then ``encode(batch, plan=tf.where(ids == R, -1, ids))``."""
        plan_memory, pointable, keys = self.planner.memory(memory["records"], memory["record_mask"])

        def step_fn(prev_ids, step, state):
            log_probs, state = self.planner.step(prev_ids, state, plan_memory, pointable, keys)
            return tf.where(log_probs <= MASKED_LOGIT / 2, NEG_INF, log_probs), list(state)

        return step_fn

    def get_config(self):
        config = super().get_config()
        for key in ("copy", "content_selection"):
            config.pop(key)
        return {**config, "max_plan_length": self.max_plan_length}


MODELS = {
    "encdec": (EncDec, {"copy": False, "content_selection": False}),
    "encdec-copy": (EncDec, {"copy": True, "content_selection": False}),
    "encdec-cs": (EncDec, {"copy": True, "content_selection": True}),
    "ncp": (NCP, {}),
}


VOCAB_NAMES = (("word", "words"), ("field", "fields"), ("entity", "entities"), ("group", "groups"))


def build_model(name, config, vocab_sizes):
    """Model ``name`` (None: ``config["name"]``) from a config (the ``model`` section, or a
    full config holding one) and vocab sizes {"words", "fields", "entities", "groups"}
    (singular keys work too).  Sizes override the config; unknown keys are errors."""
    config = dict(config.get("model", config))
    name = name or config.get("name")
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    cls, fixed = MODELS[name]
    for key in ("name", "copy", "content_selection") + (() if cls is NCP else ("max_plan_length",)):
        config.pop(key, None)
    for key, plural in VOCAB_NAMES:
        size = vocab_sizes.get(plural, vocab_sizes.get(key))
        if size is not None:
            config[f"{key}_vocab_size"] = size
    unknown = set(config) - set(CONFIG_KEYS) - {"max_plan_length", "dtype"}
    if unknown:
        raise ValueError(f"unknown model config keys {sorted(unknown)}")
    return cls(**config, **fixed, name=name.replace("-", "_"))

"""Order-planning table-to-text generation (Sha et al., AAAI 2018).

* encoder: an LSTM over the table's content words, input x_i = [f_i; c_i] (eq. 1-4); the
  field and content-word embeddings are separate tables (a field "name" and a word
  "name" are different tokens);
* dispatcher: content-based attention with field information (eq. 5-7), link-based
  attention over the trainable field link matrix L (eq. 8-9), mixed by a self-adaptive
  gate (eq. 10-11);
* decoder: a_t = sum_i alpha^hybrid_{t,i} h_i (eq. 12), x_t = tanh(W_d [a_t; y_{t-1}] + b_d)
  (eq. 13), an LSTM, s^LSTM = W_s h'_t + b_s (eq. 14);
* copy: s_{t,i} = sigmoid(h_i^T W_c) h'_t (eq. 15), summed over equal content words
  (eq. 16), added to s^LSTM and normalised over V u C (eq. 17-18); NLL + l2 (eq. 19).

Not in the paper, off by default (``model.copy_continuation``): the table position of the
previous token is tracked, and the word after it in the same value gets a learnt bonus on its
copy score, so a multi-word name is copied word after word ("all": from any table word;
"unknown": only spans begun by copying an out-of-vocabulary word).

Ablations by config (``model.attention``, ``model.copy``, ``model.field_feedback``,
``model.fixed_gate``): Table 3, Table 4 and Figure 3 of the paper; a model builds only
the layers its configuration names.

Decoding contract (tablegen_tf/data/CONTRACT.md): log-probabilities over V + C where
V + i means "copy table token i".  Copy scores of in-vocabulary content words are folded
into the word's vocabulary logit (eq. 16-17); an out-of-vocabulary content word gets one
slot V + i at its first occurrence i, whose logit sums the scores of every token with
the same text (eq. 16).  Training and step-wise decoding share one cell.

Reused from ``tablegen_tf.layers``: ``lstm_gates`` and the unit forget bias of the LSTM
decoder, ``scatter_rows`` (segment-sum folding of copy scores) and ``masked_mean`` of
joint copy.  Not reused: the fused input-feeding loop (``fused_loop``: its cell is Luong
attention, not this dispatcher) and TBPTT (its carried state is (h~, h, c) of hidden
size; this decoder also carries alpha_{t-1} over the table; E2E/WebNLG/WikiBio targets
are short enough for full BPTT).  Instead, everything that does not depend on the
recurrence is taken out of the time loop: the content attention of all steps (it only
reads y_{t-1}), the link sub-matrix of each table, the y_{t-1} blocks of eq. 10 and 13,
the output projection and the copy scores.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict, Optional

import keras
import tensorflow as tf

from tablegen_tf.config import Bound, ConfigError, at_least, at_least_below, between
from tablegen_tf.constants import EOS_ID, MASKED_LOGIT, NEG_INF, UNK_ID
from tablegen_tf.data.table_featurizer import TableFeaturizer
from tablegen_tf.decoding.common import copied_items, copied_word_ids
from tablegen_tf.layers.joint_copy import masked_mean, scatter_rows
from tablegen_tf.models.base import GenerationModel, KeyedConfig, dtype_policy_scope
from tablegen_tf.models.order_planning.fused_loop import dispatcher_lstm_loop
from tablegen_tf.models.order_planning.layers import (
    ContentAttention, CopyScores, DecoderCell, HybridGate, LinkAttention)
from tablegen_tf.models.registry import register_model

ATTENTIONS = ("hybrid", "content", "link")
CONTINUATIONS = ("none", "all", "unknown")
FIELD_FEEDBACK = ("none", "content_attention", "decoder_input")


@dataclasses.dataclass
class OrderPlanningConfig:
    """The ``model:`` section of order-planning (its only defaults: the paper's)."""

    KIND: ClassVar[str] = "order-planning"  # corpus files tune it under `models: {order-planning: ...}`
    BOUNDS: ClassVar[Dict[str, Bound]] = {
        "word_dim": at_least(1), "field_dim": at_least(1), "hidden_size": at_least(1), "fixed_gate": between(0, 1),
        "l2": at_least(0), "dropout": at_least_below(0, 1), "unknown_word_slots": at_least(0),
    }
    name: str = "order-planning"
    word_dim: int = 400  # content/target word embeddings (paper: 400)
    field_dim: int = 400  # field embeddings (paper: 400)
    hidden_size: int = 500  # encoder and decoder LSTMs (paper: 500)
    attention: str = "hybrid"  # Table 3: hybrid | content | link
    copy: bool = True  # Table 3: eq. 15-18 on/off
    # Table 4: feed the last step's attention-weighted field embedding to eq. 5-6
    # ("content_attention") or to eq. 13 ("decoder_input"); "none" = the paper's model.
    field_feedback: str = "none"
    fixed_gate: Optional[float] = None  # Figure 3: z fixed in [0, 1] (hybrid only); None = self-adaptive
    l2: float = 1e-6  # eq. 19's l2 penalty (the paper gives no value): l2 * sum of squared weights
    dropout: float = 0.0  # the paper uses none; on embeddings and h'_t when set
    # Keras dtype policy of every layer: float32 | mixed_bfloat16 (bf16 matmuls with float32
    # weights; attention distributions, softmaxes and the loss in float32).
    dtype: str = "float32"
    # Training's time loop with the hand-written backward pass (fused_loop.py) where it
    # applies (the full model: hybrid attention, self-adaptive gate, no field feedback,
    # float32); otherwise, and when false, autodiff of the plain loop. Same maths.
    fused_loop: bool = False
    # > 0: each distinct out-of-vocabulary word of a table (in order of first occurrence, up to
    # this many) adds its own learnt embedding to <unk>'s, in the encoder and in the decoder's
    # input after it is copied, so the model can tell unknown words apart and knows which one
    # it just copied; 0 = the paper's model, where every unknown word looks alike. Not in the
    # paper (its tables are in-vocabulary WikiBio infoboxes); for categories unseen in training.
    unknown_word_slots: int = 0
    # "all" | "unknown": a learnt bonus beta(h'_t) on the copy score of the table word that follows
    # the previous token's table position in the same value (``follow_positions``); "unknown"
    # tracks only spans begun by copying an out-of-vocabulary word (in-vocabulary names are left
    # to the language model, as in the paper). "none" = the paper's model, whose copy scores do
    # not know where the last copy came from, so an unseen multi-word name comes out as
    # "Accademia di di di". CopyNet's selective read (Gu et al. 2016, section 3.3) tracks
    # locations the same way; the bonus form is ours.
    copy_continuation: str = "none"
    # With copy_continuation: beta also depends on the next token's field, beta(h'_t) + u . f_j
    # (u starts at 0), so a property's words (paraphrased: "birth place" -> "born in") can be
    # continued less eagerly than a subject's or an object's name (copied word for word).
    continuation_by_field: bool = False


@register_model("order-planning", config=OrderPlanningConfig, featurizer=TableFeaturizer,
                description="link + content hybrid attention with copy (Sha et al. 2018)")
@keras.saving.register_keras_serializable(package="tablegen")
class OrderPlanning(KeyedConfig, GenerationModel):
    """Table LSTM encoder -> hybrid content/link attention dispatcher -> LSTM decoder + copy."""

    CONFIG_KEYS = ("word_vocab_size", "field_vocab_size", "word_dim", "field_dim", "hidden_size", "attention", "copy",
                   "field_feedback", "fixed_gate", "l2", "dropout", "fused_loop", "unknown_word_slots",
                   "copy_continuation", "continuation_by_field")

    def __init__(self, word_vocab_size, field_vocab_size, word_dim=400, field_dim=400, hidden_size=500,
                 attention="hybrid", copy=True, field_feedback="none", fixed_gate=None, l2=1e-6,
                 dropout=0.0, fused_loop=False, unknown_word_slots=0, copy_continuation="none",
                 continuation_by_field=False, **kwargs):
        super().__init__(**kwargs)  # incl. dtype: "float32" | "mixed_bfloat16" (all layers)
        _check(attention, copy, field_feedback, fixed_gate, copy_continuation, continuation_by_field)
        self.word_vocab_size = word_vocab_size
        self.field_vocab_size = field_vocab_size
        self.word_dim = word_dim
        self.field_dim = field_dim
        self.hidden_size = hidden_size
        self.attention = attention
        self.copy = copy
        self.field_feedback = field_feedback
        self.fixed_gate = fixed_gate
        self.l2 = l2
        self.dropout = dropout
        self.fused_loop = fused_loop
        self.unknown_word_slots = unknown_word_slots
        self.copy_continuation = copy_continuation
        self.continuation_by_field = continuation_by_field
        self.tracks_positions = copy_continuation != "none"
        self.uses_content = attention in ("hybrid", "content")
        self.uses_link = attention in ("hybrid", "link")
        with dtype_policy_scope(self.dtype_policy):
            self._init_layers()

    def _init_layers(self):
        """Sublayers (created under the model's dtype policy; only those the configuration
        names) and their weights."""
        word_dim, field_dim, hidden_size = self.word_dim, self.field_dim, self.hidden_size
        self.word_embedding = keras.layers.Embedding(self.word_vocab_size, word_dim, name="word_embedding")
        self.field_embedding = keras.layers.Embedding(self.field_vocab_size, field_dim, name="field_embedding")
        self.unknown_slot_embedding = (keras.layers.Embedding(self.unknown_word_slots + 1, word_dim,
                                                              name="unknown_slot_embedding")
                                       if self.unknown_word_slots else None)
        self.slot_seeds = keras.random.SeedGenerator(0) if self.unknown_word_slots else None
        self.encoder = keras.layers.LSTM(hidden_size, return_sequences=True, return_state=True,
                                         name="table_encoder")  # eq. 1-4
        query_dim = word_dim + (field_dim if self.field_feedback == "content_attention" else 0)
        self.content_attention = (ContentAttention(query_dim, name="content_attention")
                                  if self.uses_content else None)  # eq. 5-7
        self.link_attention = (LinkAttention(self.field_vocab_size, name="link_attention")
                               if self.uses_link else None)  # eq. 8-9 (float32 under any policy)
        self.hybrid_gate = (HybridGate(self.fixed_gate, name="hybrid_gate")
                            if self.attention == "hybrid" else None)  # eq. 10-11
        self.decoder_cell = DecoderCell(hidden_size, field_input=self.field_feedback == "decoder_input",
                                        name="decoder")  # eq. 13 + LSTM
        self.output_projection = keras.layers.Dense(self.word_vocab_size, name="output_projection")  # eq. 14
        self.copy_scores = CopyScores(hidden_size, name="copy_scores") if self.copy else None  # eq. 15
        self.continuation_bonus = (keras.layers.Dense(1, name="continuation_bonus")
                                   if self.tracks_positions else None)  # beta(h'_t)
        self.continuation_field_bonus = (keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros",
                                                            name="continuation_field_bonus")
                                         if self.continuation_by_field else None)  # u . f_j
        self.embedding_dropout = keras.layers.Dropout(self.dropout)
        self.build()

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes):
        values = {k: v for k, v in dataclasses.asdict(config.model).items() if k != "name"}
        return cls(word_vocab_size=vocab_sizes["words"], field_vocab_size=vocab_sizes["fields"], **values,
                   name=family.name.replace("-", "_"))

    def build(self, input_shape=None):
        h, e, f = self.hidden_size, self.word_dim, self.field_dim
        self.word_embedding.build(None)
        self.field_embedding.build(None)
        if self.unknown_slot_embedding is not None:
            self.unknown_slot_embedding.build(None)
        self.encoder.build((None, None, f + e))
        if self.content_attention is not None:
            self.content_attention.build((None, None, f), (None, None, h))
        if self.link_attention is not None:
            self.link_attention.build()
        if self.hybrid_gate is not None:
            self.hybrid_gate.build((None, h), (None, f), (None, e))
        self.decoder_cell.build((None, h), (None, e), (None, f))
        self.output_projection.build((None, h))
        if self.copy_scores is not None:
            self.copy_scores.build((None, None, h))
        if self.continuation_bonus is not None:
            self.continuation_bonus.build((None, h))
        if self.continuation_field_bonus is not None:
            self.continuation_field_bonus.build((None, f))
        self.built = True

    # === Encoding ===

    def encode(self, batch, training=False, **unused):
        """The table memory and everything the decoder needs per table (leading dim B)."""
        mask = tf.convert_to_tensor(batch["record_mask"])
        field_ids = tf.convert_to_tensor(batch["record_field"])
        values = tf.convert_to_tensor(batch["record_value"])
        fields = self.field_embedding(field_ids)  # f_i
        slots = (_unknown_slots(values, batch["record_value_text"], mask, self.unknown_word_slots)
                 if self.unknown_slot_embedding is not None else None)
        if slots is not None and training:
            slots = self._shuffled_slots(slots)
        words = self.embedding_dropout(self._embed_words(values, slots), training=training)  # c_i
        states, h_last, c_last = self.encoder(tf.concat([fields, words], -1), mask=mask,
                                              training=training)  # eq. 1-4, x_i = [f_i; c_i]
        states = states * tf.cast(mask, states.dtype)[..., None]
        memory = {"memory": states, "memory_mask": mask, "fields": fields, "record_value": values,
                  "initial_h": h_last, "initial_c": c_last}
        if slots is not None:
            memory["unknown_slots"] = slots
        if self.content_attention is not None:
            memory["field_keys"], memory["content_keys"] = self.content_attention.keys(fields, states)
        if self.link_attention is not None:
            memory["links"] = self.link_attention.table_links(field_ids)
        if self.copy_scores is not None:
            memory["copy_keys"] = self.copy_scores.keys(states)
            memory["oov_same"], memory["oov_first"] = _oov_types(values, batch["record_value_text"], mask)
        if self.continuation_bonus is not None:  # token i continues the value of token i - 1
            memory["continues"] = tf.cast((tf.convert_to_tensor(batch["record_pos_start"]) > 1) & mask, tf.float32)
        if self.continuation_field_bonus is not None:  # [B,C]: u . f_j of each table token
            memory["continuation_field"] = tf.cast(self.continuation_field_bonus(fields)[..., 0], tf.float32)
        return memory

    def initial_decoding_state(self, memory):
        """(h'_0, c'_0, alpha_0).  The paper leaves both open: the decoder starts from the
        encoder's last state, and alpha_0 (read by eq. 8 at t = 1) is uniform over the table."""
        mask = tf.cast(memory["memory_mask"], tf.float32)
        alpha0 = mask / tf.maximum(tf.reduce_sum(mask, -1, keepdims=True), 1.0)
        if self.continuation_bonus is not None:  # + the follow mass of the last step (none before <s>)
            return (memory["initial_h"], memory["initial_c"], alpha0, tf.zeros_like(mask))
        return (memory["initial_h"], memory["initial_c"], alpha0)

    # === The decoder step shared by training and decoding ===

    def _cell(self, memory, word_part, gate_part, query, alpha_content, state):
        """One step.  word_part [B,H] (eq. 13's y block), gate_part [B] (eq. 10's y block),
        query [B,Q] of eq. 5-6 (None when alpha_content [B,C] was computed for all steps).
        -> (h'_t, new state, trace dict).  Under a mixed policy h', c' are in the compute
        dtype, the attention distributions (alpha, state and trace) and the gate float32."""
        h, c, previous = state
        mask = memory["memory_mask"]
        fields = memory["fields"]
        field_summary = None
        if self.field_feedback != "none":  # Table 4: the last step's weighted field embedding
            field_summary = tf.einsum("bc,bcf->bf", tf.cast(previous, fields.dtype), fields)
        alpha_link = gate = None
        if self.link_attention is not None:
            alpha_link = self.link_attention(previous, memory["links"], mask)  # eq. 8-9
        if self.content_attention is not None and alpha_content is None:
            if self.field_feedback == "content_attention":
                query = tf.concat([query, field_summary], -1)
            alpha_content = self.content_attention(query, (memory["field_keys"], memory["content_keys"]), mask)
        if self.attention == "hybrid":
            link_fields = tf.einsum("bc,bcf->bf", tf.cast(alpha_link, fields.dtype), fields)  # e^(f)_t
            gate = self.hybrid_gate.gate(h, link_fields, gate_part)  # eq. 10 (z~_t)
            alpha = self.hybrid_gate(gate, alpha_content, alpha_link)  # eq. 11
        elif self.attention == "content":
            alpha = alpha_content
        else:
            alpha = alpha_link
        attention_vector = tf.einsum("bc,bch->bh", tf.cast(alpha, memory["memory"].dtype), memory["memory"])  # eq. 12
        h, c = self.decoder_cell(attention_vector, word_part, (h, c),
                                 field_summary if self.field_feedback == "decoder_input" else None)  # eq. 13
        trace = {"alpha": alpha}
        if gate is not None:
            trace["gate"] = gate
        if alpha_content is not None:
            trace["content"] = alpha_content
        if alpha_link is not None:
            trace["link"] = alpha_link
        return h, (h, c, alpha), trace

    def _step_inputs(self, words):
        """Parts of eq. 5-6, 10 and 13 that read y_{t-1} only (any leading dims)."""
        word_part = self.decoder_cell.word_part(words)
        gate_part = (self.hybrid_gate.word_part(words) if self.hybrid_gate is not None and self.fixed_gate is None
                     else tf.zeros(tf.shape(words)[:-1], words.dtype))
        return word_part, gate_part

    def _shuffled_slots(self, slots):
        """Training: slot numbers 1..K renamed by a random permutation per table. A table holds
        few unknown words (rare ones hidden in training among them), so by first occurrence the
        high slots would never train; renamed, every slot does, and a slot's number means only
        "another unknown word than the others"."""
        count = self.unknown_word_slots
        noise = keras.random.uniform([tf.shape(slots)[0], count], seed=self.slot_seeds)
        permutation = tf.cast(tf.argsort(noise, axis=-1), tf.int32) + 1  # [B, K]: a new name for each slot
        renamed = tf.gather(permutation, tf.maximum(slots - 1, 0), batch_dims=1)
        return tf.where(slots > 0, renamed, 0)

    def _embed_words(self, ids, slots=None):
        """Word embeddings [.., E] of ``ids``, plus the unknown-word slot embedding where ``slots``
        (same shape; 0 = none) names one (model.unknown_word_slots)."""
        words = self.word_embedding(ids)
        if slots is None:
            return words
        return words + self.unknown_slot_embedding(slots) * tf.cast(slots > 0, words.dtype)[..., None]

    def decode_sequence(self, memory, target_in, state, training=False, trace=False, input_slots=None):
        """Teacher forcing -> ({"states": h' [B,T,H], "alpha"/"gate"/...: [B,T,(C)]}, final state).
        ``input_slots`` [B,T]: the unknown-word slot of each input token (``_target_in_slots``)."""
        words = self.embedding_dropout(self._embed_words(target_in, input_slots), training=training)  # y_{t-1}
        word_part, gate_part = self._step_inputs(words)
        alpha_content = None
        if self.content_attention is not None and self.field_feedback != "content_attention":
            # eq. 5-7 read only y_{t-1}: all steps at once, outside the loop
            alpha_content = self.content_attention(words, (memory["field_keys"], memory["content_keys"]),
                                                   memory["memory_mask"])
        inputs = {"word_part": _swap_batch_time(word_part), "gate_part": _swap_batch_time(gate_part),
                  "words": _swap_batch_time(words)}
        if alpha_content is not None:
            inputs["content"] = _swap_batch_time(alpha_content)
        if self._fused(trace, inputs):
            return self._fused_sequence(inputs, state, memory, training)
        steps = tf.shape(target_in)[1]
        names = ["states", "alpha"] + (["gate", "content", "link"] if trace else [])
        # h' in the compute dtype (the state's), attention distributions and the gate float32
        arrays = {n: tf.TensorArray(state[0].dtype if n == "states" else tf.float32, size=steps) for n in names}

        # Read per step from TensorArrays, not as x[t]: the gradient of x[t] is a zero-filled
        # [T, ...] tensor at every step, summed by AddN over the steps (O(T^2) memory traffic;
        # StridedSliceGrad was 3.5 % of a 128-unit E2E step, more for longer targets). The
        # same gradients, bit for bit.
        inputs = {n: tf.TensorArray(x.dtype, size=steps, element_shape=x.shape[1:]).unstack(x)
                  for n, x in inputs.items()}

        def body(t, state, arrays):
            h, state, traced = self._cell(memory, inputs["word_part"].read(t), inputs["gate_part"].read(t),
                                          inputs["words"].read(t),
                                          inputs["content"].read(t) if "content" in inputs else None, state)
            traced["states"] = h
            arrays = {n: a.write(t, traced.get(n, tf.zeros_like(traced["alpha"]) if n != "gate"
                                               else tf.zeros_like(traced["alpha"][:, 0])))
                      for n, a in arrays.items()}
            return t + 1, state, arrays

        _, state, arrays = tf.while_loop(lambda t, *_: t < steps, body, (tf.constant(0), tuple(state), arrays),
                                         maximum_iterations=steps)
        outputs = {n: _swap_batch_time(a.stack()) for n, a in arrays.items()}
        outputs["states"] = self.embedding_dropout(outputs["states"], training=training)
        return outputs, state

    def _fused(self, trace, inputs):
        """The hand-written backward pass applies (see OrderPlanningConfig.fused_loop)."""
        return (self.fused_loop and not trace and self.attention == "hybrid" and self.fixed_gate is None
                and self.field_feedback == "none" and "content" in inputs
                and self.dtype_policy.compute_dtype == "float32")

    def _fused_sequence(self, inputs, state, memory, training):
        gate, cell = self.hybrid_gate, self.decoder_cell
        weights = [tf.convert_to_tensor(w) for w in (gate.h_kernel, gate.f_kernel, cell.attention_kernel,
                                                     cell.kernel, cell.bias)]
        table = (memory["links"], memory["memory_mask"], memory["fields"], memory["memory"])
        states, alpha, state = dispatcher_lstm_loop(inputs["word_part"], inputs["gate_part"], inputs["content"],
                                                    tuple(state), weights, table)
        outputs = {"states": self.embedding_dropout(_swap_batch_time(states), training=training),
                   "alpha": _swap_batch_time(alpha)}
        return outputs, state

    # === Output distribution (eq. 14-18) ===

    def extended_logits(self, states, memory, follow=None):
        """h'_t [B,T,H] -> s_t over V + C [B,T,V+C] (eq. 14, 15-17); MASKED_LOGIT where nothing.
        ``follow`` [B,T,C] (model.copy_continuation): each token's share of being the word after
        the previous token's table position; it adds beta(h'_t) x follow to the copy scores."""
        vocab_logits = tf.cast(self.output_projection(states), tf.float32)  # eq. 14
        batch, steps = tf.shape(states)[0], tf.shape(states)[1]
        num_tokens = tf.shape(memory["memory_mask"])[1]
        if self.copy_scores is None:
            return tf.pad(vocab_logits, [[0, 0], [0, 0], [0, num_tokens]], constant_values=MASKED_LOGIT)
        # eq. 15 [B,T,C]; copy scores are combined with the vocabulary logits in float32
        scores = tf.cast(self.copy_scores(states, memory["copy_keys"], memory["memory_mask"]), tf.float32)
        if follow is not None:
            bonus = tf.cast(self.continuation_bonus(states), tf.float32)  # [B,T,1]
            if "continuation_field" in memory:
                bonus += memory["continuation_field"][:, None, :]
            scores += bonus * follow
        values = memory["record_value"]
        in_vocab = (values > UNK_ID) & memory["memory_mask"]
        flat = lambda x: tf.reshape(x, [batch * steps, num_tokens])  # noqa: E731
        folded = scatter_rows(flat(tf.where(in_vocab[:, None, :], scores, 0.0)),
                              flat(tf.broadcast_to(tf.where(in_vocab, values, 0)[:, None, :], tf.shape(scores))),
                              self.word_vocab_size)  # eq. 16: sum over equal in-vocabulary words
        folded = tf.reshape(folded, [batch, steps, self.word_vocab_size])
        type_scores = tf.einsum("btj,bij->bti", scores, memory["oov_same"])  # eq. 16 for OOV words
        copy_only = tf.where(memory["oov_first"][:, None, :], type_scores, MASKED_LOGIT)
        return tf.concat([vocab_logits + folded, copy_only], -1)  # eq. 17

    def token_nll(self, outputs, memory, target_out, copy_mask):
        """Per-token NLL [B,T] of eq. 18 (unmasked).  A label that is <unk> and an OOV word
        of the table is scored as its copy slot (the paper's V u C); other labels by id."""
        follow = None
        if self.continuation_bonus is not None:  # the input token at t is the label at t - 1
            copy_in = tf.cast(_copy_mask_of_inputs(copy_mask), tf.float32)
            unknown_in = tf.pad(tf.equal(target_out[:, :-1], UNK_ID), [[0, 0], [1, 0]])  # copied as V + i
            follow = follow_sequence(copy_in, self._span_starts(unknown_in), memory["continues"])
        logits = self.extended_logits(outputs["states"], memory, follow)
        log_probs = tf.nn.log_softmax(logits)  # eq. 18 over V u C
        gold = tf.gather(log_probs, target_out, batch_dims=2)
        if self.copy_scores is None:
            return -gold
        oov = tf.cast(memory["oov_same"], tf.float32)
        targets = tf.cast(copy_mask > 0, tf.float32) * tf.cast(tf.linalg.diag_part(oov) > 0, tf.float32)[:, None, :]
        types = (tf.einsum("bti,bik->btk", targets, oov) > 0) & memory["oov_first"][:, None, :]
        copied = tf.reduce_logsumexp(tf.where(types, log_probs[..., self.word_vocab_size:], MASKED_LOGIT), -1)
        use_copy = tf.equal(target_out, UNK_ID) & tf.reduce_any(types, -1)
        return -tf.where(use_copy, copied, gold)

    def call(self, batch, training=False, trace=False):
        memory = self.encode(batch, training=training)
        state = self.initial_decoding_state(memory)[:3]  # (h', c', alpha): the follow mass is the loss's
        slots = self._target_in_slots(batch, memory) if "unknown_slots" in memory else None
        outputs, _ = self.decode_sequence(memory, batch["target_in"], state, training=training, trace=trace,
                                          input_slots=slots)
        return {"outputs": outputs, "memory": memory}

    @staticmethod
    def _target_in_slots(batch, memory):
        """[B,T]: the unknown-word slot of each <unk> input token, the table word the previous
        label copies (copy_mask one step back), as decoding feeds the copied id back."""
        copy_in = _copy_mask_of_inputs(batch["copy_mask"])
        slots = tf.reduce_max(tf.where(copy_in, memory["unknown_slots"][:, None, :], 0), -1)
        return tf.where(tf.equal(batch["target_in"], UNK_ID), slots, 0)

    def compute_loss_from_batch(self, batch, training=False):
        predictions = self(batch, training=training)
        nll = self.token_nll(predictions["outputs"], predictions["memory"], batch["target_out"], batch["copy_mask"])
        loss = masked_mean(nll, batch["target_mask"])  # eq. 19 (per token)
        if self.l2 and training:
            loss += self.l2_penalty()
        return loss

    def l2_penalty(self):
        """l2 x the squared weights (the paper's regulariser; 0.0 when ``l2`` is 0)."""
        return self.l2 * tf.add_n([tf.reduce_sum(tf.square(v)) for v in self.trainable_variables]) if self.l2 else 0.0

    # === Step-wise decoding (CONTRACT.md) ===

    def decoding_memory(self, memory):
        """``encode`` already computes every key the step reads (attention keys, links, copy
        keys), each with leading dim B: the step function of any rows of it costs no compute."""
        return memory

    def decoding_step_fn(self, memory):
        """step_fn(prev_ids [N], step, state) -> (log_probs [N, V + C], state); memory leading dim N."""

        def step_fn(prev_ids, step, state):
            words = self._embed_words(self.feedback_ids(prev_ids, memory["record_value"]),
                                      self._copied_slots(prev_ids, memory))
            word_part, gate_part = self._step_inputs(words)
            state = tuple(state)
            follow = None
            if self.continuation_bonus is not None:
                follow = follow_positions(self._table_matches(prev_ids, memory),
                                          self._span_starts(prev_ids >= self.word_vocab_size), state[3],
                                          memory["continues"])
            h, cell_state, _ = self._cell(memory, word_part, gate_part, words, None, state[:3])
            logits = self.extended_logits(h[:, None, :], memory, None if follow is None else follow[:, None, :])
            log_probs = tf.nn.log_softmax(logits[:, 0])
            state = cell_state if follow is None else cell_state + (follow,)
            return tf.where(log_probs <= MASKED_LOGIT / 2, NEG_INF, log_probs), state

        return step_fn

    def _copied_slots(self, prev_ids, memory):
        """[N]: the unknown-word slot of a copied id V + i (table token i's), else 0; None
        without model.unknown_word_slots."""
        if "unknown_slots" not in memory:
            return None
        copied = copied_items(prev_ids, memory["unknown_slots"], self.word_vocab_size)
        return tf.where(prev_ids >= self.word_vocab_size, copied, 0)

    def _span_starts(self, unknown):
        """[..] float: 1 where the previous token may begin a tracked span (any token for "all";
        for "unknown", an out-of-vocabulary copy: ``unknown``), else 0."""
        return tf.cast(unknown | (self.copy_continuation == "all"), tf.float32)

    def _table_matches(self, prev_ids, memory):
        """[N,C] float: the table tokens ``prev_ids`` says (training's copy_mask of that label): a
        copy id V + i, the OOV tokens with token i's text; a word, the tokens with its id."""
        values = memory["record_value"]
        word = tf.equal(values, prev_ids[:, None]) & (prev_ids[:, None] > EOS_ID) & memory["memory_mask"]
        oov = copied_items(prev_ids, memory["oov_same"], self.word_vocab_size)  # symmetric: row i = i's text
        return tf.where((prev_ids >= self.word_vocab_size)[:, None], oov, tf.cast(word, tf.float32))

    def feedback_ids(self, prev_ids, record_value):
        """Extended id V + i -> table token i's word id (<unk> when OOV)."""
        return copied_word_ids(prev_ids, record_value, self.word_vocab_size)

    # === Visualisation ===

    def attention_traces(self, batch, count):
        """Teacher-forced hybrid/content/link attention [n,T,C] and gate z~ [n,T] of ``count`` tables."""
        batch = {k: v[:count] for k, v in batch.items()}
        outputs = self(batch, training=False, trace=True)["outputs"]
        return {k: outputs[k] for k in ("alpha", "gate", "content", "link")}

    def attention_images(self, batch, count):
        """Hybrid attention alpha_t over table tokens per target step (Figure 4)."""
        alpha = self.attention_traces(batch, count)["alpha"]
        alpha = alpha / tf.maximum(tf.reduce_max(alpha, axis=[1, 2], keepdims=True), 1e-9)
        return alpha[..., None]

    def summary_images(self, batch, count, vocabs=None):
        from tablegen_tf.models.order_planning import figures

        return figures.summary_images(self, batch, count, vocabs)


def _check(attention, copy, field_feedback, fixed_gate, copy_continuation="none", continuation_by_field=False):
    if attention not in ATTENTIONS:
        raise ConfigError(f"model.attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
    if field_feedback not in FIELD_FEEDBACK:
        raise ConfigError(f"model.field_feedback must be one of {', '.join(FIELD_FEEDBACK)}, got {field_feedback!r}")
    if field_feedback == "content_attention" and attention == "link":
        raise ConfigError("model.field_feedback=content_attention needs content attention (model.attention)")
    if fixed_gate is not None and attention != "hybrid":  # its range: OrderPlanningConfig.BOUNDS
        raise ConfigError(f"model.fixed_gate={fixed_gate!r} needs model.attention=hybrid")
    if copy_continuation not in CONTINUATIONS:
        raise ConfigError(f"model.copy_continuation must be one of {', '.join(CONTINUATIONS)}, "
                          f"got {copy_continuation!r}")
    if copy_continuation != "none" and not copy:
        raise ConfigError("model.copy_continuation needs model.copy")
    if continuation_by_field and copy_continuation == "none":
        raise ConfigError("model.continuation_by_field needs model.copy_continuation (all or unknown)")


# How much more a table token that continues the previous token's value counts, against another
# token with the same word, in telling where the previous token came from ("di" in "Accademia di
# Architettura di Mendrisio" after "Accademia" is the first "di").
CONTINUATION_PREFERENCE = 10.0


def follow_positions(matches, starts, follow, continues):
    """One step of position tracking. matches [N,C]: the table tokens the previous token says;
    starts [N]: 1 where it may begin a span, 0 where it may only continue one; follow [N,C]: the
    last step's follow mass (where the previous token was expected to continue a value).
    -> [N,C]: for each token, the share of the previous token's position that sits right before
    it in the same value. The previous token's position is spread over its matches, a match that
    continues a value as expected weighing starts + CONTINUATION_PREFERENCE, another ``starts``."""
    position = matches * (starts[:, None] + CONTINUATION_PREFERENCE * follow)
    position = position / tf.maximum(tf.reduce_sum(position, -1, keepdims=True), 1e-9)
    return tf.pad(position[:, :-1], [[0, 0], [1, 0]]) * continues


def follow_sequence(matches, starts, continues):
    """``follow_positions`` over teacher-forced inputs: matches [B,T,C], starts [B,T] -> follow [B,T,C]."""
    steps = tf.scan(lambda follow, inputs: follow_positions(*inputs, follow, continues),
                    (_swap_batch_time(matches), _swap_batch_time(starts)), initializer=tf.zeros_like(continues))
    return _swap_batch_time(steps)


def _copy_mask_of_inputs(copy_mask):
    """[B,T,C] bool: the table tokens each input token y_{t-1} copies (copy_mask one step back;
    nothing for <s>), as decoding feeds the copied id back."""
    return tf.pad(copy_mask[:, :-1], [[0, 0], [1, 0], [0, 0]]) > 0


def _swap_batch_time(x):
    """[B, T, ...] <-> [T, B, ...]."""
    return tf.transpose(x, [1, 0] + list(range(2, x.shape.rank)))


def _unknown_slots(values, texts, mask, count):
    """[B,C] int32: 1 + the rank (by first occurrence) of each out-of-vocabulary token's text
    among the table's distinct OOV texts, 0 for in-vocabulary and padding tokens and for texts
    beyond the first ``count``."""
    same, first = _oov_types(values, texts, mask)
    rank = tf.where(first, tf.cumsum(tf.cast(first, tf.int32), axis=1), 0)  # 1.. at first occurrences
    rank = tf.reduce_max(tf.cast(same > 0, tf.int32) * rank[:, None, :], -1)  # each token: its text's
    return tf.where(rank <= count, rank, 0)


def _oov_types(values, texts, mask):
    """Out-of-vocabulary content words grouped by text (eq. 16's 1{c_i = w} for w not in V):
    same [B,C,C] float (1 where tokens i and j are OOV with equal text), first [B,C] bool
    (token i is the first of its text: it holds the copy slot V + i)."""
    oov = tf.equal(values, UNK_ID) & mask
    same = tf.equal(texts[:, :, None], texts[:, None, :]) & oov[:, :, None] & oov[:, None, :]
    num = tf.shape(values)[1]
    earlier = tf.range(num)[None, :] < tf.range(num)[:, None]  # [i, j]: j < i
    first = oov & ~tf.reduce_any(same & earlier[None], -1)
    return tf.cast(same, tf.float32), first

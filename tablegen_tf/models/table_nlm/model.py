"""Table NLM (Lebret, Grangier, Auli 2016): a feed-forward n-gram LM conditioned on a table.

One registered family, ``table-nlm`` (the paper's full model); the rows of the paper's
Table 1 are config flags (``tablegen_tf/configs/table_nlm/*.yaml``):

=========================  =====  ===========  =========  ============  ===========
row                        copy   local_start  local_end  global_field  global_word
=========================  =====  ===========  =========  ============  ===========
nlm                        no     no           no         no            no
nlm+local                  no     yes          yes        no            no
table-nlm-local-start      yes    yes          no         no            no
+end                       yes    yes          yes        no            no
+global-field              yes    yes          yes        yes           no
+global-field-word (full)  yes    yes          yes        yes           yes
=========================  =====  ===========  =========  ============  ===========

Table features come from the shared table batch (CONTRACT.md): one record per value token
(field, value word, p+, p-). The occurrences z_w of a token w (eq. 5) are the records
whose value is w: for an in-vocabulary word, the records with that word id; for an
out-of-vocabulary table token, the records with the same text. Every distinct table token
has a *key*: the index of its first record.

Output domain W u Q (section 3.3, eq. 22): vocabulary ids 0..V-1 and, for table tokens
outside the vocabulary, the extended id V + key (the decoding contract of CONTRACT.md).
A table token that is in the vocabulary is scored once, at its vocabulary id, with the
copy score added (eq. 22); extended ids of non-key records and padding are masked, so a
copy action can only name a token of this table, once.

Decoder state: the n-1 previous extended ids (the window), left-padded with <s>.

Perplexity (``token_nll``): every target token incl. </s>, scored over this model's output
domain: with copy, an out-of-vocabulary table token is predicted by its copy action (V + key)
and other out-of-vocabulary tokens as <unk>; without copy every OOV token is <unk>. So, as the
paper's Table 1 caveat says, perplexities of copy and no-copy rows are over different output
domains and not directly comparable.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict

import keras
import tensorflow as tf

from tablegen_tf.config import Bound, at_least, at_least_below
from tablegen_tf.constants import BOS_ID, MASKED_LOGIT, NEG_INF, UNK_ID
from tablegen_tf.models.base import GenerationModel, KeyedConfig
from tablegen_tf.models.registry import register_model
from tablegen_tf.models.table_nlm.featurizer import TableNLMFeaturizer


@dataclasses.dataclass
class TableNLMConfig:
    """The ``model:`` section of Table NLM; defaults are the paper's Table 3 (WikiBio)."""

    KIND: ClassVar[str] = "table-nlm"  # corpus files tune it under `models: {table-nlm: ...}`
    BOUNDS: ClassVar[Dict[str, Bound]] = {
        "order": at_least(2),  # an n-gram model with n-1 >= 1 context words
        "word_dim": at_least(1), "global_dim": at_least(1), "hidden_units": at_least(1),
        "max_field_position": at_least(1), "min_field_count": at_least(0), "dropout": at_least_below(0, 1),
    }
    name: str = "table-nlm"
    order: int = 11  # n: the context is the n-1 previous words
    word_dim: int = 64  # d: word, (field, position) embeddings
    global_dim: int = 128  # g: global field / word embeddings (G^w shares E when d == g)
    hidden_units: int = 256  # nhu
    max_field_position: int = 10  # l: p+ / p- capped at l
    min_field_count: int = 100  # fields seen fewer times in training share the unknown-field id
    copy: bool = True  # copy actions: output domain W u Q (eq. 20-22)
    local_start: bool = True  # local conditioning on (field, p+) (eq. 15, first half)
    local_end: bool = True  # ... and on (field, p-) (eq. 15, second half)
    global_field: bool = True  # eq. 16
    global_word: bool = True  # eq. 17
    dropout: float = 0.0  # on psi (eq. 18); the paper uses none


def _masked_max(values, mask, axis):
    """Component-wise max over ``axis`` of the entries where ``mask``; 0 where none."""
    neg = tf.fill(tf.shape(values), tf.constant(-1e9, values.dtype))
    mx = tf.reduce_max(tf.where(mask[..., None], values, neg), axis=axis)
    return tf.where(mx <= -1e8, tf.zeros_like(mx), mx)


def _max_by_key(values, keys):
    """[B, R, D] -> [B, R, D]: row k is the component-wise max over the records whose key is k
    (an unsorted segment max, linear in R); rows that are no key are 0."""
    shape = tf.shape(values)
    segments = tf.where(keys >= 0, tf.range(shape[0])[:, None] * shape[1] + keys, shape[0] * shape[1])
    flat = tf.reshape(values, [-1, shape[2]])
    mx = tf.math.unsorted_segment_max(flat, tf.reshape(segments, [-1]), shape[0] * shape[1] + 1)[:-1]
    present = tf.math.unsorted_segment_max(tf.ones_like(tf.reshape(segments, [-1]), tf.int32),
                                           tf.reshape(segments, [-1]), shape[0] * shape[1] + 1)[:-1] > 0
    return tf.reshape(tf.where(present[:, None], mx, tf.zeros_like(mx)), shape)


def record_keys(batch):
    """[B, R] key of each record: the index of the first record with the same value text
    (the distinct table token it is an occurrence of); -1 for padding."""
    text, mask = batch["record_value_text"], batch["record_mask"]
    same = tf.equal(text[:, :, None], text[:, None, :]) & mask[:, None, :] & mask[:, :, None]  # [B,R,R]
    first = tf.argmax(tf.cast(same, tf.int32), axis=2, output_type=tf.int32)
    return tf.where(mask, first, -1)


@register_model("table-nlm", config=TableNLMConfig, featurizer=TableNLMFeaturizer,
                description="feed-forward n-gram LM conditioned on the table + copy actions (Lebret et al. 2016)")
@keras.saving.register_keras_serializable(package="tablegen")
class TableNLM(KeyedConfig, GenerationModel):
    """Feed-forward n-gram language model with local / global table conditioning and copy actions."""

    reports_perplexity = True

    CONFIG_KEYS = ("word_vocab_size", "field_vocab_size", "order", "word_dim", "global_dim", "hidden_units",
                   "max_field_position", "copy", "local_start", "local_end", "global_field", "global_word", "dropout")

    def __init__(self, word_vocab_size, field_vocab_size, order=11, word_dim=64, global_dim=128,
                 hidden_units=256, max_field_position=10, copy=True, local_start=True, local_end=True,
                 global_field=True, global_word=True, dropout=0.0, **kwargs):
        kwargs.pop("min_field_count", None)  # a featurizer setting
        super().__init__(**kwargs)
        if local_end and not local_start:
            raise ValueError("model.local_end needs model.local_start (the paper's rows add end to start)")
        self.word_vocab_size, self.field_vocab_size = word_vocab_size, field_vocab_size
        self.order, self.word_dim, self.global_dim = order, word_dim, global_dim
        self.hidden_units, self.max_field_position = hidden_units, max_field_position
        self.copy, self.local_start, self.local_end = copy, local_start, local_end
        self.global_field, self.global_word, self.dropout = global_field, global_word, dropout
        d, g, positions = word_dim, global_dim, max_field_position + 1
        # === Layers ===
        self.word_embedding = keras.layers.Embedding(word_vocab_size, d, name="E")  # eq. 14
        # Z+ / Z- in R^{|F| x l x d} as one row per (field, position) (eq. 15); row 0 of each
        # field is unused (positions are 1-based).  The no-field embeddings: one d-vector each.
        self.z_start = keras.layers.Embedding(field_vocab_size * positions, d, name="Z_start") if local_start else None
        self.z_end = keras.layers.Embedding(field_vocab_size * positions, d, name="Z_end") if local_end else None
        self.no_field = (self.add_weight(shape=(2, d), initializer="random_normal", name="no_field")
                         if local_start else None)
        self.g_field = keras.layers.Embedding(field_vocab_size, g, name="G_field") if global_field else None  # eq. 16
        # eq. 17: G^w shares its parameters with E when d == g (the paper's "in general")
        self.g_word = (None if not global_word or g == d else keras.layers.Embedding(word_vocab_size, g, name="G_word"))
        self.psi_dropout = keras.layers.Dropout(dropout, name="psi_dropout")
        self.hidden = keras.layers.Dense(hidden_units, activation="tanh", name="W2")  # eq. 18 (h)
        self.vocab_scores = keras.layers.Dense(word_vocab_size, name="W3")  # eq. 19
        if copy:
            self.f_embedding = keras.layers.Embedding(field_vocab_size * positions, d, name="F")  # eq. 20
            self.copy_projection = keras.layers.Dense(hidden_units, activation="tanh", name="W4")  # eq. 20
        else:
            self.f_embedding = self.copy_projection = None
        self.build()

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes):
        values = {k: v for k, v in dataclasses.asdict(config.model).items() if k != "name"}
        return cls(word_vocab_size=vocab_sizes["words"], field_vocab_size=vocab_sizes["fields"], **values,
                   **dict(family.fixed), name=family.name.replace("-", "_"))

    def psi_dim(self):
        per_word = self.word_dim * (1 + int(self.local_start) + int(self.local_end))
        return (self.order - 1) * per_word + self.global_dim * (int(self.global_field) + int(self.global_word))

    def build(self, input_shape=None):
        for layer in (self.word_embedding, self.z_start, self.z_end, self.g_field, self.g_word, self.f_embedding):
            if layer is not None:
                layer.build(None)
        self.hidden.build((None, self.psi_dim()))
        self.vocab_scores.build((None, self.hidden_units))
        if self.copy_projection is not None:
            self.copy_projection.build((None, self.word_dim))
        self.built = True

    # === The table (once per table) ===

    def _field_position(self, fields, positions):
        """Row of (field, min(p, l)) in the |F| x (l+1) tables (l = max_field_position)."""
        capped = tf.clip_by_value(positions, 0, self.max_field_position)
        return fields * (self.max_field_position + 1) + capped

    def encode(self, features, training=False):
        """Per-table tensors: record keys, the per-token aggregated local embeddings
        (eq. 15), the global vector (eq. 16-17) and the per-token copy vectors q (eq. 20)."""
        mask = tf.convert_to_tensor(features["record_mask"])
        fields = tf.convert_to_tensor(features["record_field"])
        values = tf.convert_to_tensor(features["record_value"])
        keys = record_keys(features)
        memory = {"record_value": values, "record_key": keys, "record_mask": mask}
        if self.local_start:  # eq. 15: component-wise max over the token's occurrences
            start = self.z_start(self._field_position(fields, features["record_pos_start"]))
            memory["local_start"] = _max_by_key(start, keys)  # [B, key, d]
            if self.local_end:
                end = self.z_end(self._field_position(fields, features["record_pos_end"]))
                memory["local_end"] = _max_by_key(end, keys)
        parts = []
        if self.global_field:  # eq. 16: max over the table's field embeddings
            parts.append(_masked_max(self.g_field(fields), mask, axis=1))
        if self.global_word:  # eq. 17: max over the table's word embeddings
            table = self.g_word if self.g_word is not None else self.word_embedding
            parts.append(_masked_max(table(values), mask, axis=1))
        memory["global"] = (tf.concat(parts, -1) if parts
                            else tf.zeros([tf.shape(mask)[0], 0], self.compute_dtype))
        if self.copy:
            # eq. 20: q(w) = max over (f, p) in z_w of tanh(W4 psi_F(f, p) + b4); the pair's
            # position is p+ (the paper's F has one position per field, as in eq. 3).
            q = self.copy_projection(self.f_embedding(self._field_position(fields, features["record_pos_start"])))
            memory["copy_q"] = _max_by_key(q, keys)  # [B, key, nhu]
            memory["copy_key"] = mask & tf.equal(keys, tf.range(tf.shape(keys)[1])[None, :])  # first occurrences
        return memory

    # === Scoring n-gram contexts ===

    def context_keys(self, ids, memory):
        """Extended ids [B, T, C] -> the key of the table token each one is (-1: not in the table)."""
        V = self.word_vocab_size
        values, keys, mask = memory["record_value"], memory["record_key"], memory["record_mask"]
        flat = tf.reshape(ids, [tf.shape(ids)[0], -1])  # [B, T*C]
        match = tf.equal(flat[:, :, None], values[:, None, :]) & mask[:, None, :] & (flat != UNK_ID)[:, :, None]
        by_word = tf.where(tf.reduce_any(match, -1), tf.argmax(tf.cast(match, tf.int32), -1, output_type=tf.int32), -1)
        record = tf.clip_by_value(flat - V, 0, tf.maximum(tf.shape(keys)[1] - 1, 0))
        by_copy = tf.gather(tf.pad(keys, [[0, 0], [0, 1]], constant_values=-1), record, batch_dims=1)
        key = tf.where(flat >= V, by_copy, by_word)
        return tf.reshape(key, tf.shape(ids))

    def word_ids(self, ids, memory):
        """Extended ids -> word ids for E: a copied out-of-vocabulary token is <unk>."""
        return tf.where(ids >= self.word_vocab_size, tf.constant(UNK_ID, ids.dtype), ids)

    def hidden_state(self, contexts, memory, training=False):
        """contexts [B, T, n-1] extended ids -> h [B, T, nhu] (eq. 14-18)."""
        shape = tf.shape(contexts)
        parts = [tf.reshape(self.word_embedding(self.word_ids(contexts, memory)), [shape[0], shape[1], -1])]  # eq. 14
        if self.local_start:  # eq. 15, with the no-field embedding for words not in the table
            key = self.context_keys(contexts, memory)
            in_table = (key >= 0)[..., None]
            safe = tf.maximum(key, 0)
            for i, name in enumerate(("local_start", "local_end")):
                if name in memory:
                    table = tf.gather(memory[name], tf.reshape(safe, [shape[0], -1]), batch_dims=1)
                    table = tf.reshape(table, [shape[0], shape[1], shape[2], self.word_dim])
                    local = tf.where(in_table, table, tf.cast(self.no_field[i], table.dtype))
                    parts.append(tf.reshape(local, [shape[0], shape[1], -1]))
        if self.global_field or self.global_word:
            parts.append(tf.tile(memory["global"][:, None, :], [1, shape[1], 1]))
        psi = self.psi_dropout(tf.concat(parts, -1), training=training)  # eq. 18: psi_alpha1
        return self.hidden(psi)  # h = tanh(W2 psi + b2)

    def scores(self, h, memory):
        """h [B, T, nhu] -> scores over W u Q [B, T, V + R] (eq. 19-22), masked entries MASKED_LOGIT."""
        vocab = self.vocab_scores(h)  # eq. 19
        num_records = tf.shape(memory["record_value"])[1]
        if not self.copy:
            return tf.pad(vocab, [[0, 0], [0, 0], [0, num_records]], constant_values=MASKED_LOGIT)
        copy = tf.einsum("btn,brn->btr", h, memory["copy_q"])  # eq. 21: h . q(w), per key record
        key = memory["copy_key"]
        values = memory["record_value"]
        in_vocab = key & (values != UNK_ID)
        # eq. 22: a table token in W gets its vocabulary score + h . q(w), at its vocabulary id.
        shape = tf.shape(copy)  # scatter-add h . q(w) at (b, t, id of w): no [B, R, V] one-hot
        index = tf.stack([tf.broadcast_to(tf.range(shape[0])[:, None, None], shape),
                          tf.broadcast_to(tf.range(shape[1])[None, :, None], shape),
                          tf.broadcast_to(values[:, None, :], shape)], -1)
        vocab = tf.tensor_scatter_nd_add(vocab, index, tf.where(in_vocab[:, None, :], copy, tf.zeros_like(copy)))
        # A table token outside W: phi^W(w) = 0 (the paper defines phi^W over W only), score h . q(w)
        # at V + key; every other extended id is masked (a copy names a token of this table, once).
        oov = key & (values == UNK_ID)
        extended = tf.where(oov[:, None, :], copy, MASKED_LOGIT)
        return tf.concat([vocab, extended], -1)

    # === Training (eq. 23) ===

    def extended_targets(self, batch):
        """target_out over W u Q: an out-of-vocabulary target token copied from the table
        (copy_mask) is its copy action V + key; without copy the plain ids."""
        target = tf.convert_to_tensor(batch["target_out"])
        if not self.copy:
            return target
        keys = record_keys(batch)
        copy_mask = tf.convert_to_tensor(batch["copy_mask"]) > 0
        first = tf.argmax(tf.cast(copy_mask, tf.int32), -1, output_type=tf.int32)  # [B, T]
        key = tf.gather(keys, first, batch_dims=1)
        copied = tf.reduce_any(copy_mask, -1) & (target == UNK_ID) & (key >= 0)
        return tf.where(copied, self.word_vocab_size + key, target)

    def contexts(self, targets):
        """[B, T] extended targets -> [B, T, n-1] contexts (the n-1 previous tokens, <s>-padded)."""
        shape = tf.shape(targets)
        padded = tf.concat([tf.fill([shape[0], self.order - 1], tf.constant(BOS_ID, targets.dtype)), targets[:, :-1]], 1)
        windows = [padded[:, i:i + shape[1]] for i in range(self.order - 1)]
        return tf.stack(windows, -1)

    def per_token_nll(self, batch, training=False):
        memory = self.encode(batch, training=training)
        targets = self.extended_targets(batch)
        h = self.hidden_state(self.contexts(targets), memory, training=training)
        logits = tf.cast(self.scores(h, memory), tf.float32)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits)  # eq. 23

    def compute_loss_from_batch(self, batch, training=False):
        mask = tf.cast(batch["target_mask"], tf.float32)
        nll = self.per_token_nll(batch, training)
        return tf.reduce_sum(nll * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)

    def token_nll(self, batch):
        """(sum of NLL in nats, token count) over target_mask (incl. </s>; see the module doc)."""
        mask = tf.cast(batch["target_mask"], tf.float32)
        return tf.reduce_sum(self.per_token_nll(batch) * mask), tf.reduce_sum(mask)

    def call(self, batch, training=False):
        return self.per_token_nll(batch, training)

    # === Decoding (the window of n-1 extended ids is the state) ===

    def initial_decoding_state(self, memory):
        batch = tf.shape(memory["record_value"])[0]
        return tf.fill([batch, self.order - 1], tf.constant(BOS_ID, tf.int32))

    def decoding_step_fn(self, memory):
        def step_fn(prev_ids, step, window):
            window = tf.concat([window[:, 1:], tf.cast(prev_ids, tf.int32)[:, None]], 1)
            h = self.hidden_state(window[:, None, :], memory)
            log_probs = tf.nn.log_softmax(tf.cast(self.scores(h, memory)[:, 0], tf.float32))
            return tf.where(log_probs <= MASKED_LOGIT / 2, NEG_INF, log_probs), window

        return step_fn

"""Sentence compression, Miao & Blunsom 2016 ("Language as a Latent Variable"): FSC, ASC, ASC+FSC.

* ``fsc``      forced-attention sentence compression: BiLSTM encoder (eq. 1), LSTM
               compressor (eq. 2), pointer attention (eq. 3-4 / 17), vocabulary softmax
               (eq. 18), selection factor (eq. 19-20), mixture (eq. 21), trained by eq. 22.
* ``asc``      auto-encoding compression: the pointer network q_phi(c|s) (eq. 1-4), the
               reconstruction p_theta(s|c) (eq. 5-10), a pre-trained LM prior p(c)
               (``compression-lm``, ``model.prior_run``), the lambda-scaled bound (eq. 12),
               theta by eq. 13, phi by REINFORCE with baselines b and b(s) (eq. 14-16).
* ``asc+fsc``  the joint objective (eq. 24): eq. 22 on labelled examples (those with
               deletion labels) plus the ASC bound on every source in the batch. The
               training data decide the setting: the labelled pairs only (ASC+FSC_1) or
               the labelled pairs plus unlabelled ``--format sentences`` examples (ASC+FSC_2).

Choices where the paper is open (each also noted where it is made):

* The pointer attends over the source tokens plus one learned end sentinel (position S)
  that stands for </s>: the paper's pointer has no way to stop otherwise.
* Pointer selections are monotonic (a position after the previously selected one): the
  data are deletion-based, so a compression is a subsequence of its source, the keep
  mask is well defined, and extractive decoding keeps tokens in source order. The same
  mask is used in training (labelled alignments, ASC samples) and decoding.
* ``model.decoding``: ``extractive`` (default) chooses monotonic source positions scored by
  the trained eq. 21 mixture: position i gets t alpha_i + (1 - t) beta(s_i) (its copy plus
  its word from the vocabulary, exactly the probability eq. 22 trains for a kept token), </s>
  t alpha_end + (1 - t) beta(</s>), renormalised over the allowed positions. ``pointer``
  uses the pointer alone (q_phi, eq. 4: for ``asc``, whose beta and t are untrained); FSC
  trains the pointer only through the mixture, so where t is small (common words, </s>)
  alpha is barely trained and pointer-alone decoding keeps too much (select split, FSC 3k
  step 600: ratio 0.69 vs the references' 0.44). ``abstractive`` uses the full mixture of
  eq. 21. All run through the shared beam search (beam 5 by default); copy ids V + i name
  source token i.
"""

from __future__ import annotations

import dataclasses
import os
from typing import ClassVar, Dict

import keras
import tensorflow as tf

from tablegen_tf.config import Bound, at_least, at_least_below
from tablegen_tf.constants import BOS_ID, EOS_ID, MASKED_LOGIT, NEG_INF, PAD_ID, UNK_ID
from tablegen_tf.data.text_featurizer import TextFeaturizer
from tablegen_tf.decoding.common import copied_word_ids
from tablegen_tf.models.base import GenerationModel
from tablegen_tf.models.compression.lm import CompressionLM
from tablegen_tf.models.registry import register_model
from tablegen_tf.syntax import DEP_LABELS

OBJECTIVES = ("fsc", "asc", "asc+fsc")
DECODINGS = ("extractive", "pointer", "abstractive")


@dataclasses.dataclass
class CompressionConfig:
    """The ``model:`` section of the sentence-compression family (its only defaults)."""

    KIND: ClassVar[str] = "compression"
    BOUNDS: ClassVar[Dict[str, Bound]] = {
        "word_dim": at_least(1), "hidden_size": at_least(1), "attention_size": at_least(1), "kl_weight": at_least(0),
        "samples": at_least(1), "baseline_hidden": at_least(1), "asc_weight": at_least(0),
        "dropout": at_least_below(0, 1), "shape_dim": at_least(0), "softmax_words": at_least(0),
        "trainable_words": at_least(0), "tagging_weight": at_least(0), "tagger_decoding_weight": at_least(0),
        "syntax_weight": at_least(0),
    }
    name: str = "fsc"
    word_dim: int = 100
    hidden_size: int = 128  # per encoder direction; compressor / decoder cells are 2x this
    attention_size: int = 128  # W1, W2 (eq. 3) and W4, W5 (eq. 7)
    decoding: str = "extractive"  # extractive (source positions by eq. 21) | pointer (eq. 4) | abstractive (eq. 21)
    kl_weight: float = 0.1  # lambda of eq. 12 (the paper: 0.1 for every experiment)
    samples: int = 2  # M compressions sampled per sentence (eq. 13-16)
    baseline_hidden: int = 64  # the MLP of the input-dependent baseline b(s)
    asc_weight: float = 1.0  # weight of the ASC bound against eq. 22 in the joint objective (eq. 24: 1)
    prior_run: str = ""  # a `compression-lm` run directory: the prior p(c); "" = no prior (log p(c) = 0)
    dropout: float = 0.0  # training only, on word embeddings and encoder states (the paper is silent; 8k pairs overfit)
    # word2vec text file (`tablegen embeddings`) initialising the word table at step 0: 7k pairs
    # alone teach little about 20k+ words (tablegen_tf.embeddings; docs/compression.md)
    pretrained_embeddings: str = ""
    freeze_embeddings: bool = False  # keep the pre-trained table fixed during training
    # > 0: the encoder also reads a learned embedding of each source token's shape (lower case,
    # Capitalised, ALL CAPS, number, punctuation, other) x (in / out of vocabulary): what
    # <unk> alone hides about a rare word (a name? a number?)
    shape_dim: int = 0
    # > 0: the vocabulary softmax (eq. 18) covers the first N words only (rarer ones are copied,
    # as <unk> is), so a large input vocabulary for pre-trained embeddings costs little
    softmax_words: int = 0
    # > 0: the word table stays fixed (the pre-trained vectors) and a trained, zero-initialised
    # table of the first N words (rarer ones share its <unk> row) is added to it: frequent words
    # are fine-tuned, rare ones keep their pre-trained vectors (fine-tuning all rows with Adam
    # lets 7k pairs memorise through rare words: docs/compression.md)
    trainable_words: int = 0
    # > 0: an auxiliary keep/delete tagger on the encoder states (sigmoid per source token, trained
    # on the deletion labels, this weight against eq. 22): the encoder learns the labels directly,
    # not only through the pointer (training only; decoding is unchanged)
    tagging_weight: float = 0.0
    # > 0 (with the tagger): extractive decoding adds this weight x the tagger's log-probability of
    # each choice (keep position i, drop those skipped; </s>: drop the rest), renormalised: a
    # product of the pointer mixture and the per-token tagger (chosen on the selection split)
    tagger_decoding_weight: float = 0.0
    # added to the tagger's keep logit in decoding only (with tagger_decoding_weight > 0): < 0 keeps
    # fewer tokens. A per-token length lever that changes which hypothesis wins (a per-step </s>
    # penalty does not: every finished hypothesis pays it once; docs/compression.md)
    tagger_keep_bias: float = 0.0
    # > 0: a syntactic scaffold: the encoder states also predict each source token's dependency
    # label and head (a bilinear pointer over the source tokens), this weight x their
    # cross-entropy, on examples parsed by `tablegen syntax` (tablegen_tf/syntax.py; training
    # only: decoding and the SavedModel need no parser)
    syntax_weight: float = 0.0


def lstm_step(x, state, cell, stop_weights=False):
    """One LSTM step with a Keras LSTMCell's weights (gate order i, f, c, o, as Keras);
    ``stop_weights``: the gradient does not reach the cell's weights (footnote 2)."""
    kernel, recurrent, bias = cell.kernel, cell.recurrent_kernel, cell.bias
    if stop_weights:
        kernel, recurrent, bias = tf.stop_gradient(kernel), tf.stop_gradient(recurrent), tf.stop_gradient(bias)
    h, c = state
    z = tf.matmul(x, kernel) + tf.matmul(h, recurrent) + bias
    i, f, g, o = tf.split(z, 4, axis=-1)
    c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
    h = tf.sigmoid(o) * tf.tanh(c)
    return h, (h, c)


def run_lstm(inputs, state, cell, stop_weights=False):
    """[B, T, E] inputs -> [B, T, H] outputs of ``lstm_step`` from ``state``."""
    def body(carry, x):
        _, new_state = lstm_step(x, carry, cell, stop_weights)
        return new_state

    hs, _ = tf.scan(body, tf.transpose(inputs, [1, 0, 2]), initializer=state)
    return tf.transpose(hs, [1, 0, 2])


def mixture_probs(alpha, beta, t):
    """eq. 21 over the extended vocabulary: [.., V + S] = ((1 - t) beta, t alpha)."""
    return tf.concat([(1.0 - t)[..., None] * beta, t[..., None] * alpha], -1)


def reinforce_surrogate(signal, baseline, log_q):
    """eq. 16 as a loss: its gradient w.r.t. phi is -(l - b - b(s)) d log q / d phi."""
    return -tf.reduce_mean(tf.stop_gradient(signal - baseline) * log_q)


@register_model("fsc", config=CompressionConfig, featurizer=TextFeaturizer, fixed={"objective": "fsc"},
                description="forced-attention sentence compression (Miao & Blunsom 2016)")
@register_model("asc", config=CompressionConfig, featurizer=TextFeaturizer, fixed={"objective": "asc"},
                description="auto-encoding sentence compression with REINFORCE (Miao & Blunsom 2016)")
@register_model("asc+fsc", config=CompressionConfig, featurizer=TextFeaturizer, fixed={"objective": "asc+fsc"},
                description="semi-supervised ASC+FSC (Miao & Blunsom 2016, eq. 24)")
class SentenceCompression(GenerationModel):
    reports_perplexity = True
    # The served source axis is the batch's longest sentence (keep_mask is per source token),
    # not bucketed: XLA steps would compile once per sentence length.
    xla_decoding_steps = False

    def __init__(self, word_vocab_size, objective="fsc", word_dim=100, hidden_size=128, attention_size=128,
                 decoding="extractive", kl_weight=0.1, samples=2, baseline_hidden=64, asc_weight=1.0,
                 prior=None, dropout=0.0, shape_dim=0, softmax_words=0, trainable_words=0,
                 tagging_weight=0.0, tagger_decoding_weight=0.0, tagger_keep_bias=0.0, syntax_weight=0.0,
                 **kwargs):
        super().__init__(**kwargs)
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        if decoding not in DECODINGS:
            raise ValueError(f"model.decoding must be one of {DECODINGS}, got {decoding!r}")
        self.word_vocab_size = word_vocab_size
        self.objective, self.decoding = objective, decoding
        self.kl_weight, self.samples, self.asc_weight = kl_weight, samples, asc_weight
        size = 2 * hidden_size
        self.embedding = keras.layers.Embedding(word_vocab_size, word_dim, name="embedding")
        self.trainable_words = min(trainable_words, word_vocab_size) if trainable_words > 0 else 0
        self.word_offsets = None  # created only when used: runs without it keep their checkpoint layout
        if self.trainable_words:
            self.embedding.trainable = False
            self.word_offsets = keras.layers.Embedding(self.trainable_words, word_dim, embeddings_initializer="zeros",
                                                       name="word_offsets")
        self.tagging_weight = tagging_weight
        self.tagger_decoding_weight = tagger_decoding_weight if tagging_weight > 0 else 0.0
        self.tagger_keep_bias = tagger_keep_bias
        self.tagger = keras.layers.Dense(1, name="keep_tagger") if tagging_weight > 0 else None
        self.syntax_weight = syntax_weight
        # created only when used: runs without them keep their checkpoint layout
        self.dep_label_output = keras.layers.Dense(len(DEP_LABELS), name="dep_label_output") \
            if syntax_weight > 0 else None
        self.dep_head_query = keras.layers.Dense(size, use_bias=False, name="dep_head_query") \
            if syntax_weight > 0 else None
        self.softmax_words = min(softmax_words, word_vocab_size) if softmax_words > 0 else word_vocab_size
        # created only when used: runs without it keep their checkpoint layout
        self.shape_embedding = keras.layers.Embedding(NUM_SHAPE_IDS, shape_dim, name="shape_embedding") \
            if shape_dim > 0 else None
        self.dropout = keras.layers.Dropout(dropout, name="dropout")
        self.encoder = keras.layers.Bidirectional(  # eq. 1
            keras.layers.LSTM(hidden_size, return_sequences=True, return_state=True, name="lstm"), name="encoder")
        self.end_vector = self.add_weight(shape=(size,), initializer="random_normal", name="end_sentinel")
        self.compressor = keras.layers.LSTMCell(size, name="compressor")  # f_com, eq. 2 and 6
        self.w1 = keras.layers.Dense(attention_size, use_bias=False, name="pointer_w1")  # eq. 3
        self.w2 = keras.layers.Dense(attention_size, name="pointer_w2")
        self.w3 = keras.layers.Dense(1, use_bias=False, name="pointer_w3")
        self.vocab_output = keras.layers.Dense(self.softmax_words, name="vocab_output")  # W, eq. 18
        self.selection = self.add_weight(shape=(size, size), initializer="glorot_uniform", name="selection_m")  # M, eq. 20
        # reconstruction p_theta(s|c), eq. 5-10
        self.decoder = keras.layers.LSTMCell(size, name="decoder")  # f_dec, eq. 5
        self.w4 = keras.layers.Dense(attention_size, use_bias=False, name="recon_w4")
        self.w5 = keras.layers.Dense(attention_size, name="recon_w5")
        self.w6 = keras.layers.Dense(1, use_bias=False, name="recon_w6")
        self.w7 = keras.layers.Dense(word_vocab_size, name="recon_w7")
        # baselines of eq. 15: b (centring) and the MLP b(s)
        self.baseline_b = self.add_weight(shape=(), initializer="zeros", name="baseline_b")
        self.baseline_mlp = keras.Sequential([keras.layers.Dense(baseline_hidden, activation="tanh", name="hidden"),
                                              keras.layers.Dense(1, name="out")], name="baseline_mlp")
        self.prior = prior
        if prior is not None:
            prior.trainable = False  # pre-trained p(c): fixed
        self.build()

    def build(self, input_shape=None):
        word_dim, size = self.embedding.output_dim, self.compressor.units
        self.embedding.build(None)
        if self.word_offsets is not None:
            self.word_offsets.build(None)
        encoder_dim = word_dim
        if self.shape_embedding is not None:
            self.shape_embedding.build(None)
            encoder_dim += self.shape_embedding.output_dim
        self.encoder.build((None, None, encoder_dim))
        self.compressor.build((None, word_dim))
        self.w1.build((None, size))
        self.w2.build((None, size))
        self.w3.build((None, self.w1.units))
        self.vocab_output.build((None, size))
        if self.tagger is not None:
            self.tagger.build((None, size))
        if self.dep_label_output is not None:
            self.dep_label_output.build((None, size))
            self.dep_head_query.build((None, size))
        self.decoder.build((None, word_dim))
        self.w4.build((None, size))
        self.w5.build((None, size))
        self.w6.build((None, self.w4.units))
        self.w7.build((None, 2 * size))
        self.baseline_mlp.build((None, size))
        self.built = True

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes):
        m = config.model
        fixed = dict(family.fixed)
        prior = load_prior(m.prior_run, vocab_sizes["words"]) if m.prior_run else None
        return cls(vocab_sizes["words"], fixed.get("objective", "fsc"), m.word_dim, m.hidden_size,
                   m.attention_size, m.decoding, m.kl_weight, m.samples, m.baseline_hidden, m.asc_weight,
                   prior=prior, dropout=m.dropout, shape_dim=m.shape_dim, softmax_words=m.softmax_words,
                   trainable_words=m.trainable_words, tagging_weight=m.tagging_weight,
                   tagger_decoding_weight=m.tagger_decoding_weight, tagger_keep_bias=m.tagger_keep_bias,
                   syntax_weight=m.syntax_weight,
                   name="compression")

    def word_embedding_layer(self):
        return self.embedding

    def embed(self, ids):
        """Word vectors of ids: the word table's rows (+ the trained offsets of ``trainable_words``)."""
        vectors = self.embedding(ids)
        if self.word_offsets is not None:
            vectors = vectors + self.word_offsets(tf.where(ids < self.trainable_words, ids, UNK_ID))
        return vectors

    # ------------------------------------------------------------------ encoder (eq. 1)

    def encode(self, features, training=False):
        ids = tf.convert_to_tensor(features["source_ids"])
        mask = tf.convert_to_tensor(features["source_mask"])
        batch, width = tf.shape(ids)[0], tf.shape(ids)[1]
        # one extra masked step: a batch of empty sentences (S = 0) still runs the LSTM
        padded_ids, padded_mask = tf.pad(ids, [[0, 0], [0, 1]]), tf.pad(mask, [[0, 0], [0, 1]])
        embedded = self.embed(padded_ids)
        if self.shape_embedding is not None:
            shapes = tf.pad(token_shape_ids(features["source_text"], ids, mask), [[0, 0], [0, 1]])
            embedded = tf.concat([embedded, self.shape_embedding(shapes)], -1)
        embedded = self.dropout(embedded, training=training)
        outputs, fh, fc, bh, bc = self.encoder(embedded, mask=padded_mask, training=training)
        outputs = self.dropout(outputs[:, :width], training=training)
        end = tf.tile(self.end_vector[None, None, :], [batch, 1, 1])
        states = tf.concat([outputs * tf.cast(mask, outputs.dtype)[..., None], end], 1)  # [B, S + 1, 2H]
        has_tokens = tf.cast(tf.reduce_any(mask, 1), tf.float32)[:, None]
        # h^c_0: the source sentence vector (both directions' final states); zeros for empty inputs
        memory = {"states": states, "keys": self.w2(states), "mask": tf.concat([mask, tf.ones([batch, 1], tf.bool)], 1),
                  "source_ids": ids, "h0": tf.concat([fh, bh], -1) * has_tokens,
                  "c0": tf.concat([fc, bc], -1) * has_tokens}
        if self.tagger is not None:
            logits = tf.squeeze(self.tagger(states[:, :-1]), -1) + self.tagger_keep_bias  # decoding only
            drop = tf.where(mask, tf.math.log_sigmoid(-logits), 0.0)
            # keep_scores[i]: log p(keep i); skipped_drop[k] = sum of log p(drop j) for j < k, [B, S + 1]
            memory["keep_scores"] = tf.math.log_sigmoid(logits)
            memory["skipped_drop"] = tf.pad(tf.cumsum(drop, 1), [[0, 0], [1, 0]])
        return memory

    # ------------------------------------------------------------------ pointer + mixture

    def _allowed(self, memory_mask, last_pos):
        """Positions a selection may take after ``last_pos`` [...]: later source tokens or the end sentinel."""
        width = tf.shape(memory_mask)[-1]
        positions = tf.range(width)
        later = positions > last_pos[..., None]
        return memory_mask & (later | tf.equal(positions, width - 1))

    def _pointer_log_alpha(self, hc, keys, allowed):
        """eq. 3-4 / 17: log alpha_j over the S + 1 positions; hc [B, T, C], keys [B, S+1, A]."""
        u = tf.squeeze(self.w3(tf.tanh(self.w1(hc)[:, :, None, :] + keys[:, None, :, :])), -1)  # eq. 3
        return tf.nn.log_softmax(tf.where(allowed, u, MASKED_LOGIT), -1)  # eq. 4

    def _mixture(self, hc, memory, log_alpha):
        """eq. 18-21 -> (alpha [.., S+1], beta [.., V], t [..])."""
        alpha = tf.exp(log_alpha)
        beta = tf.nn.softmax(self.vocab_output(hc))  # eq. 18
        eta = tf.einsum("bts,bsh->bth", alpha, memory["states"])  # eq. 19
        t = tf.sigmoid(tf.einsum("bth,hk,btk->bt", eta, self.selection, hc))  # eq. 20
        return alpha, beta, t

    def _softmax_ids(self, ids):
        """Word ids as the vocabulary softmax sees them: words beyond ``softmax_words`` are <unk>."""
        return tf.where(ids < self.softmax_words, ids, UNK_ID)

    def _full_vocabulary(self, beta):
        """beta [.., softmax_words] -> [.., V] (zero for the words beyond the softmax)."""
        missing = self.word_vocab_size - self.softmax_words
        if not missing:
            return beta
        return tf.concat([beta, tf.zeros(tf.concat([tf.shape(beta)[:-1], [missing]], 0), beta.dtype)], -1)

    def _word_inputs(self, prev_ids, source_ids):
        """Previous extended ids -> word ids (a copy id V + i -> source token i's id)."""
        return copied_word_ids(prev_ids, source_ids, self.word_vocab_size)

    # ------------------------------------------------------------------ FSC (eq. 22)

    def _pointer_targets(self, batch, memory):
        """[B, T, S+1] pointer targets and [B, T] previous positions of the target sequence.

        Labelled examples: target step j points at the j-th kept source token, </s> at the
        sentinel (target tokens after the kept ones, an added final period, have none).
        Examples without labels: every source position equal to the target token (no
        monotonic constraint: previous position -1)."""
        source_len = tf.shape(batch["source_ids"])[1]
        steps = tf.shape(batch["target_out"])[1]
        labels = _fit_labels(batch["labels"], source_len)
        kept = tf.equal(labels, 1)
        rank = tf.cumsum(tf.cast(kept, tf.int32), axis=1) - 1  # j for the j-th kept token
        t_range = tf.range(steps)
        aligned = kept[:, None, :] & tf.equal(rank[:, None, :], t_range[None, :, None])  # [B, T, S]
        is_eos = tf.equal(batch["target_out"], EOS_ID) & batch["target_mask"]
        aligned = tf.concat([aligned, is_eos[..., None]], -1)
        copy_mask = tf.concat([batch["copy_mask"] > 0, is_eos[..., None]], -1)
        labelled = tf.reduce_any(labels >= 0, 1)  # [B]
        targets = tf.where(labelled[:, None, None], aligned, copy_mask)
        position = tf.argmax(tf.cast(aligned[..., :-1], tf.int32), -1, output_type=tf.int32)
        position = tf.where(tf.reduce_any(aligned[..., :-1], -1), position, -1)
        previous = tf.pad(_running_max(position)[:, :-1], [[0, 0], [1, 0]], constant_values=-1)
        previous = tf.where(labelled[:, None], previous, -1)
        return tf.cast(targets, tf.float32), previous, labelled

    def _fsc_token_log_probs(self, batch, memory, training=False):
        """log p(c_j | c_<j, s) of eq. 21 for each target step [B, T], and the labelled flags."""
        inputs = self.dropout(self.embed(batch["target_in"]), training=training)
        hc = run_lstm(inputs, (memory["h0"], memory["c0"]), self.compressor)  # eq. 2
        targets, previous, labelled = self._pointer_targets(batch, memory)
        allowed = self._allowed(memory["mask"][:, None, :], previous)
        log_alpha = self._pointer_log_alpha(hc, memory["keys"], allowed)
        alpha, beta, t = self._mixture(hc, memory, log_alpha)
        labels = self._softmax_ids(batch["target_out"])
        has_copy = tf.reduce_any(targets > 0, -1)
        vocab_credit = tf.cast(tf.not_equal(labels, UNK_ID) | ~has_copy, tf.float32)
        copy_p = tf.reduce_sum(alpha * targets, -1)
        vocab_p = tf.gather(beta, labels, batch_dims=2) * vocab_credit
        probability = t * copy_p + (1.0 - t) * vocab_p  # eq. 21
        return tf.math.log(tf.maximum(probability, 1e-12)), labelled

    def token_nll(self, batch):
        """Summed NLL of the target compressions under the mixture (eq. 21) and the count of
        scored tokens: every target token and </s> (labelled or not)."""
        memory = self.encode(batch)
        log_p, _ = self._fsc_token_log_probs(batch, memory)
        mask = tf.cast(batch["target_mask"], tf.float32)
        return -tf.reduce_sum(log_p * mask), tf.reduce_sum(mask)

    def tagging_loss(self, batch, memory):
        """Mean binary cross-entropy of the keep tagger over the labelled source tokens."""
        states = memory["states"][:, :-1]  # without the end sentinel
        labels = _fit_labels(batch["labels"], tf.shape(states)[1])
        scored = (labels >= 0) & memory["mask"][:, :-1]
        logits = tf.squeeze(self.tagger(states), -1)
        losses = tf.nn.sigmoid_cross_entropy_with_logits(tf.cast(tf.maximum(labels, 0), tf.float32), logits)
        weights = tf.cast(scored, tf.float32)
        return tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)

    # ------------------------------------------------------------------ ASC (eq. 5-16)

    def syntax_loss(self, batch, memory):
        """Mean cross-entropy of the dependency label plus that of the head (a bilinear pointer
        from each token over the sentence's tokens) over the parsed source tokens."""
        states, mask = memory["states"][:, :-1], memory["mask"][:, :-1]  # without the end sentinel
        width = tf.shape(states)[1]
        labels, heads = _fit_labels(batch["dep_labels"], width), _fit_labels(batch["dep_heads"], width)
        scored = (labels >= 0) & (heads >= 0) & mask
        label_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.maximum(labels, 0),
                                                                    self.dep_label_output(states))
        head_logits = tf.einsum("bid,bjd->bij", self.dep_head_query(states), states)
        head_logits = tf.where(mask[:, None, :], head_logits, MASKED_LOGIT)
        head_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.maximum(heads, 0), head_logits)
        weights = tf.cast(scored, tf.float32)
        count = tf.maximum(tf.reduce_sum(weights), 1.0)
        return tf.reduce_sum(label_loss * weights) / count, tf.reduce_sum(head_loss * weights) / count

    def sample_compressions(self, memory, samples):
        """M monotonic samples c ~ q_phi(c|s) per sentence (eq. 4) -> positions [N, S+1]
        (source indices, S = the end sentinel, -1 after it), N = B * M, sample-major per sentence."""
        memory = self.tile(memory, samples)
        n = tf.shape(memory["source_ids"])[0]
        width = tf.shape(memory["mask"])[1]
        end = width - 1

        def body(step, state, last, done, out):
            h, _ = state
            allowed = self._allowed(memory["mask"], last)
            log_alpha = self._pointer_log_alpha(h[:, None, :], memory["keys"], allowed[:, None, :])[:, 0]
            choice = tf.random.categorical(log_alpha, 1, dtype=tf.int32)[:, 0]
            choice = tf.where(done, -1, choice)
            word = tf.gather(tf.pad(memory["source_ids"], [[0, 0], [0, 1]]), tf.maximum(choice, 0), batch_dims=1)
            _, state = lstm_step(self.embed(word), state, self.compressor)
            return (step + 1, state, tf.where(done, last, choice), done | tf.equal(choice, end),
                    out.write(step, choice))

        start = lstm_step(self.embed(tf.fill([n], BOS_ID)), (memory["h0"], memory["c0"]), self.compressor)[1]
        out = tf.TensorArray(tf.int32, size=width)
        _, _, _, _, out = tf.while_loop(lambda step, *_: step < width, body,
                                        (0, start, tf.fill([n], -1), tf.zeros([n], tf.bool), out))
        return tf.stop_gradient(tf.transpose(out.stack())), memory

    def compression_log_q(self, memory, positions):
        """log q_phi(c|s) [N] of sampled positions (teacher forced, with gradient w.r.t. phi)."""
        source_ids = memory["source_ids"]
        end = tf.shape(memory["mask"])[1] - 1
        valid = positions >= 0
        words = tf.gather(tf.pad(source_ids, [[0, 0], [0, 1]]), tf.maximum(positions, 0), batch_dims=1)
        inputs = tf.concat([tf.fill([tf.shape(words)[0], 1], BOS_ID), words[:, :-1]], 1)
        hc = run_lstm(self.embed(inputs), (memory["h0"], memory["c0"]), self.compressor)  # eq. 2
        previous = tf.pad(_running_max(positions)[:, :-1], [[0, 0], [1, 0]], constant_values=-1)
        allowed = self._allowed(memory["mask"][:, None, :], previous)
        log_alpha = self._pointer_log_alpha(hc, memory["keys"], allowed)
        chosen = tf.gather(log_alpha, tf.clip_by_value(positions, 0, end), batch_dims=2)
        return tf.reduce_sum(tf.where(valid, chosen, 0.0), 1)

    def reconstruction_log_p(self, source_ids, source_mask, c_ids, c_mask):
        """log p_theta(s|c) [N] (eq. 5-10): the compressor cell re-encodes c without source
        information and without gradient to its weights (eq. 6, footnote 2)."""
        n = tf.shape(c_ids)[0]
        size = self.compressor.units
        zeros = tf.zeros([n, size])
        h_hat = run_lstm(self.embed(c_ids), (zeros, zeros), self.compressor, stop_weights=True)  # eq. 6
        c_len = tf.reduce_sum(tf.cast(c_mask, tf.int32), 1)
        last = tf.gather(tf.pad(h_hat, [[0, 0], [0, 1], [0, 0]]), tf.maximum(c_len - 1, 0), batch_dims=1)
        last = last * tf.cast(c_len > 0, tf.float32)[:, None]  # h^d_0 = last c-hat state
        # the c-hat states only feed eq. 7-9 (the cell's c state of the re-encoding is not carried)
        dec_in = tf.concat([tf.fill([n, 1], BOS_ID), source_ids], 1)
        dec_out = tf.concat([source_ids, tf.zeros([n, 1], tf.int32)], 1)
        lengths = tf.reduce_sum(tf.cast(source_mask, tf.int32), 1)
        dec_out = tf.tensor_scatter_nd_update(dec_out, tf.stack([tf.range(n), lengths], 1), tf.fill([n], EOS_ID))
        dec_mask = tf.sequence_mask(lengths + 1, tf.shape(dec_out)[1])
        hd = run_lstm(self.embed(dec_in), (last, tf.zeros_like(last)), self.decoder)  # eq. 5
        v = tf.squeeze(self.w6(tf.tanh(self.w4(hd)[:, :, None, :] + self.w5(h_hat)[:, None, :, :])), -1)  # eq. 7
        gamma = tf.nn.softmax(tf.where(c_mask[:, None, :], v, MASKED_LOGIT), -1)  # eq. 8
        d = tf.einsum("nkj,njh->nkh", gamma, h_hat) * tf.cast(c_len > 0, tf.float32)[:, None, None]  # eq. 9
        # eq. 10 uses d_k alone; we feed [d_k; h^d_k] (Luong-style) since d_k alone hides the
        # decoder's own history from the softmax.
        log_probs = tf.nn.log_softmax(self.w7(tf.concat([d, hd], -1)))  # eq. 10
        token = tf.gather(log_probs, dec_out, batch_dims=2)
        return tf.reduce_sum(tf.where(dec_mask, token, 0.0), 1)

    def prior_log_p(self, c_ids, c_mask):
        """log p(c) [N] under the pre-trained LM (0 without a prior)."""
        if self.prior is None:
            return tf.zeros([tf.shape(c_ids)[0]])
        n = tf.shape(c_ids)[0]
        c_len = tf.reduce_sum(tf.cast(c_mask, tf.int32), 1)
        target_in = tf.concat([tf.fill([n, 1], BOS_ID), c_ids], 1)
        target_out = tf.concat([c_ids, tf.zeros([n, 1], tf.int32)], 1)
        target_out = tf.tensor_scatter_nd_update(target_out, tf.stack([tf.range(n), c_len], 1), tf.fill([n], EOS_ID))
        mask = tf.sequence_mask(c_len + 1, tf.shape(target_out)[1])
        return tf.stop_gradient(tf.reduce_sum(self.prior.sequence_log_probs(target_in, target_out, mask), 1))

    def asc_loss(self, batch, memory, training=False):
        """The ASC objective (eq. 12-16) on the batch's sources -> (loss, diagnostics)."""
        positions, tiled = self.sample_compressions(memory, self.samples)
        source_ids, source_mask = tiled["source_ids"], tiled["mask"][:, :-1]
        end = tf.shape(tiled["mask"])[1] - 1
        is_token = (positions >= 0) & (positions < end)
        # the sampled compression as words, left-aligned (monotonic samples: already in order)
        c_ids = tf.where(is_token, tf.gather(tf.pad(source_ids, [[0, 0], [0, 1]]), tf.maximum(positions, 0),
                                             batch_dims=1), PAD_ID)[:, :-1]
        c_mask = is_token[:, :-1]
        log_q = self.compression_log_q(tiled, positions)
        log_recon = self.reconstruction_log_p(source_ids, source_mask, c_ids, c_mask)
        log_prior = self.prior_log_p(c_ids, c_mask)
        length = tf.reduce_sum(tf.cast(source_mask, tf.float32), 1) + 1.0
        # learning signal l(s, c) (eq. 14), per source token: sentence sums vary with length
        # far more than with the compression; the baselines then centre a comparable scale.
        signal = tf.stop_gradient(log_recon - self.kl_weight * (log_q - log_prior)) / length
        sentence = tf.stop_gradient(tf.repeat(memory["h0"], self.samples, axis=0))
        baseline = self.baseline_b + tf.squeeze(self.baseline_mlp(sentence), -1)  # b + b(s)
        baseline_loss = tf.reduce_mean(tf.square(signal - baseline))  # eq. 15
        phi_loss = reinforce_surrogate(signal, baseline, log_q)  # eq. 16
        theta_loss = -tf.reduce_sum(log_recon) / tf.reduce_sum(length)  # eq. 13, per token
        kl = tf.reduce_mean(log_q - log_prior)
        c_len = tf.reduce_sum(tf.cast(c_mask, tf.float32), 1)
        stats = {"learning_signal": tf.reduce_mean(signal), "baseline_b": self.baseline_b,
                 "baseline_bs": tf.reduce_mean(baseline - self.baseline_b), "kl": kl,
                 "reconstruction_nll": -tf.reduce_mean(log_recon), "baseline_mse": baseline_loss,
                 "sample_ratio": tf.reduce_mean(c_len / (length - 1.0 + 1e-6))}
        return theta_loss + phi_loss + baseline_loss, stats, positions

    # ------------------------------------------------------------------ the contract

    def compute_loss_from_batch(self, batch, training=False):
        memory = self.encode(batch, training)
        total = 0.0
        if self.objective in ("fsc", "asc+fsc"):
            log_p, labelled = self._fsc_token_log_probs(batch, memory, training)
            mask = tf.cast(batch["target_mask"], tf.float32)
            if self.objective == "asc+fsc":  # eq. 22 over the labelled examples only
                mask = mask * tf.cast(labelled, tf.float32)[:, None]
            fsc = -tf.reduce_sum(log_p * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
            tf.summary.scalar("fsc/nll", fsc)
            total = fsc
            if self.tagger is not None:
                tagging = self.tagging_loss(batch, memory)
                tf.summary.scalar("fsc/tagging_loss", tagging)
                total = total + self.tagging_weight * tagging
            if self.dep_label_output is not None:
                label_loss, head_loss = self.syntax_loss(batch, memory)
                tf.summary.scalar("fsc/dep_label_loss", label_loss)
                tf.summary.scalar("fsc/dep_head_loss", head_loss)
                total = total + self.syntax_weight * (label_loss + head_loss)
        if self.objective in ("asc", "asc+fsc"):
            asc, stats, positions = self.asc_loss(batch, memory, training)
            for name, value in stats.items():
                tf.summary.scalar(f"asc/{name}", value)
            tf.summary.text("asc/sample_compression", _sample_text(batch["source_text"][0], positions[0]))
            total = total + self.asc_weight * asc
        return total

    def initial_decoding_state(self, memory):
        batch = tf.shape(memory["source_ids"])[0]
        return (memory["h0"], memory["c0"], tf.fill([batch], -1))

    def decoding_step_fn(self, memory):
        vocab = self.word_vocab_size

        def step_fn(prev_ids, step, state):
            h, c, last = state
            last = tf.where(prev_ids >= vocab, prev_ids - vocab, last)
            words = self._word_inputs(prev_ids, memory["source_ids"])
            hc, (h, c) = lstm_step(self.embed(words), (h, c), self.compressor)  # eq. 2
            allowed = self._allowed(memory["mask"], last)
            log_alpha = self._pointer_log_alpha(hc[:, None, :], memory["keys"], allowed[:, None, :])  # eq. 4
            if self.decoding == "pointer":
                log_probs = self._extractive_log_probs(log_alpha[:, 0, :-1], log_alpha[:, 0, -1], allowed)
            else:
                alpha, beta, t = self._mixture(hc[:, None, :], memory, log_alpha)
                alpha, beta, t = alpha[:, 0], beta[:, 0], t[:, 0]
                if self.decoding == "extractive":
                    tagged = self._tagger_choice_scores(memory, last) if self.tagger_decoding_weight else None
                    log_probs = self._extractive_mixture_log_probs(alpha, beta, t, memory["source_ids"], allowed,
                                                                   tagged)
                else:  # eq. 21: the mixture; the sentinel's pointer mass goes to </s>
                    probs = mixture_probs(alpha[:, :-1], self._full_vocabulary(beta), t)
                    probs = probs + tf.one_hot(EOS_ID, tf.shape(probs)[1]) * (t * alpha[:, -1])[:, None]
                    log_probs = tf.where(probs > 0, tf.math.log(tf.maximum(probs, 1e-30)), NEG_INF)
            return log_probs, (h, c, last)

        return step_fn

    def _extractive_log_probs(self, source, end, allowed):
        """[B, V + S] log-probs of a deletion choice: copy ids of the allowed positions and </s>."""
        vocab_part = tf.where(tf.equal(tf.range(self.word_vocab_size), EOS_ID)[None, :], end[:, None], NEG_INF)
        return tf.concat([vocab_part, tf.where(allowed[:, :-1], source, NEG_INF)], 1)

    def _tagger_choice_scores(self, memory, last):
        """[B, S + 1] the tagger's log-probability of each next choice after position ``last``:
        keep i (> last) and drop last+1..i-1; the sentinel: drop every token after ``last``."""
        skipped = memory["skipped_drop"]
        before = tf.gather(skipped, last + 1, batch_dims=1)[:, None]
        keep = memory["keep_scores"] + skipped[:, :-1] - before
        return tf.concat([keep, skipped[:, -1:] - before], 1)

    def _extractive_mixture_log_probs(self, alpha, beta, t, source_ids, allowed, tagged=None):
        """eq. 21 restricted to deletion choices: position i <- t alpha_i + (1 - t) beta(s_i) (no
        beta credit for <unk>, as in eq. 22), </s> <- t alpha_end + (1 - t) beta(</s>); renormalised."""
        source_ids = self._softmax_ids(source_ids)
        word_p = tf.gather(beta, source_ids, batch_dims=1) * tf.cast(tf.not_equal(source_ids, UNK_ID), beta.dtype)
        source = t[:, None] * alpha[:, :-1] + (1.0 - t[:, None]) * word_p
        end = t * alpha[:, -1] + (1.0 - t) * beta[:, EOS_ID]
        probs = tf.concat([tf.where(allowed[:, :-1], source, 0.0), end[:, None]], 1)
        log_p = tf.math.log(tf.maximum(probs, 1e-30))
        if tagged is not None:  # product with the tagger, renormalised over the allowed choices
            log_p = tf.where(allowed, log_p + self.tagger_decoding_weight * tagged, NEG_INF)
            log_p = log_p - tf.reduce_logsumexp(log_p, 1, keepdims=True)
        else:
            log_p = log_p - tf.math.log(tf.reduce_sum(probs, 1, keepdims=True))
        return self._extractive_log_probs(log_p[:, :-1], log_p[:, -1], allowed)

    def serving_signatures(self, module, decoder=None):
        from tablegen_tf.generation import decode_ids

        vocab, decoder = self.word_vocab_size, decoder or self  # an ensemble: its members share the vocabulary

        def compress(sentences):
            features = module.featurizer.serving_features(sentences)
            ids, lengths, scores, _ = decode_ids(decoder, features, module.decode)
            text = module.featurizer.output_text(features, ids, lengths)
            valid = tf.sequence_mask(lengths, tf.shape(ids)[1]) & (ids >= vocab)
            width = tf.shape(features["source_ids"])[1]
            hits = tf.one_hot(tf.where(valid, ids - vocab, -1), width, dtype=tf.int32)
            keep = tf.minimum(tf.reduce_sum(hits, 1), 1) * tf.cast(features["source_mask"], tf.int32)
            return {"text": text, "score": tf.cast(scores, tf.float32), "keep_mask": keep}

        return {"compress": tf.function(compress, input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])}


def load_prior(run_dir: str, vocab_size: int) -> CompressionLM:
    """The trained ``compression-lm`` of a run directory (its best checkpoint), frozen."""
    from tablegen_tf.config import load_run_config
    from tablegen_tf.models.registry import get_family

    config = load_run_config(run_dir)
    family = get_family(config.model.name)
    if family.model_class is not CompressionLM:
        raise ValueError(f"model.prior_run: {run_dir} is a {config.model.name!r} run, not compression-lm")
    prior = family.build_model(config, {"words": vocab_size})
    # the latest weights: a run's "best" is chosen by BLEU, which says little about an LM
    path = tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints")) or tf.train.latest_checkpoint(
        os.path.join(run_dir, "best"))
    if path is None:
        raise ValueError(f"model.prior_run: no checkpoint in {run_dir}")
    from tablegen_tf.training.trainer import variables_checkpoint

    variables_checkpoint(prior).restore(path).expect_partial().assert_existing_objects_matched()
    return prior


# Token shapes, first match wins (RE2 full matches); id = 1 + index (+ NUM_SHAPES when the
# token is out of vocabulary), 0 = padding.
SHAPE_PATTERNS = (
    r".*\p{N}.*",  # a number, or a word with digits (G20, 2-1)
    r"[^\p{L}\p{N}]+",  # punctuation, symbols
    r"\p{Ll}.*",  # lower case
    r"\p{Lu}[\p{Lu}.&'’-]+",  # ALL CAPS, acronyms (NATO, U.S.)
    r"\p{Lu}.*",  # Capitalised
)
NUM_SHAPES = len(SHAPE_PATTERNS) + 1  # + other (scripts without case)
NUM_SHAPE_IDS = 1 + 2 * NUM_SHAPES


def token_shape_ids(text, ids, mask):
    """Shape ids [B, S] of source tokens ``text`` [B, S] (strings) given their word ids and mask."""
    shape = tf.fill(tf.shape(text), NUM_SHAPES)
    for index, pattern in reversed(list(enumerate(SHAPE_PATTERNS))):
        shape = tf.where(tf.strings.regex_full_match(text, pattern), index + 1, shape)
    shape = shape + tf.where(tf.equal(ids, UNK_ID), NUM_SHAPES, 0)
    return tf.where(mask, shape, 0)


def _fit_labels(labels, width):
    """Labels [B, L] (-1 padded, L may differ from the source width) -> [B, width]."""
    labels = tf.pad(labels, [[0, 0], [0, tf.maximum(width - tf.shape(labels)[1], 0)]], constant_values=-1)
    return labels[:, :width]


def _running_max(positions):
    """Running maximum along axis 1 (the last selected position so far; -1 before any)."""
    return tf.transpose(tf.scan(tf.maximum, tf.transpose(positions), initializer=tf.fill(tf.shape(positions)[:1], -1)))


def _sample_text(source_text, positions):
    """The first sentence's first sampled compression as text (TensorBoard)."""
    width = tf.shape(source_text)[0]
    kept = tf.boolean_mask(positions, (positions >= 0) & (positions < width))
    return tf.strings.reduce_join(tf.gather(source_text, kept), separator=" ")

"""Backbone language model (Mou et al. 2015, "Backbone Language Modeling for Constrained
Sentence Generation") and its sequential GRU LM baseline.

``backbone-lm``: a sentence w_1..w_m is split at w_s into two chains (eq. 5)

    backward chain  w_s, w_{s-1}, ..., w_1, </s>     (predicted by p^(bw), eq. 6)
    forward chain   w_s, w_{s+1}, ..., w_m, </s>     (predicted by p^(fw), eq. 6)

the shorter one padded with </s> until both end. One shared GRU (eq. 8-11) reads
x~_t = [x^(fw)_t; x^(bw)_t], the embeddings of the previous word of each chain, and two
softmax heads predict the next word of each chain (eq. 6-7):

    p(w_{s-t}, w_{s+t} | middle) = softmax(W_out^(bw) h_t)[w_{s-t}] * softmax(W_out^(fw) h_t)[w_{s+t}]

(The paper's prose calls w_s, w_{s-1}, ... the "forward sequence"; its equations call the
head predicting w_{s-t} "bw". We follow the equations: backward = towards w_1.)

Training: w_s is drawn uniformly per sentence at every step (so per epoch), and the
loss also scores w_s (both heads at t = 0, from a <s> input), the paper's choice.

Decoding uses the shared model-free searches (tablegen_tf.decoding) over an
*interleaved* stream: stream step 2u is the backward word of joint step u+1, stream
step 2u+1 its forward word. The GRU advances on even steps only; the forward head's
log-probabilities wait in the state for the odd step. A stream hypothesis' score is
exactly the joint log-probability of eq. 6 (the sum of both heads' log-probs), so beam
search over the stream is beam search over the joint step with pruning after each half
step; no search of its own is needed, and constrained search (must_include) works
unchanged. Stream markers: the backward chain's </s> is emitted as <s> (BOS_ID), the
forward chain's </s> as <pad> while the backward chain runs on, and as </s> (the
search's end) once both chains ended; a finished chain is padded by forced markers
(log-prob 0). ``max_length`` of ``generate_around`` counts joint steps (2 stream steps).

``seq-lm``: a GRU LM (the paper's 100-unit comparison); generating "around" a word puts
it first (as the paper's Table 2 does for the sequential LM).

Perplexity (``token_nll``): every word w_1..w_m once, </s> excluded (the paper); the
backbone LM scores w_s with its forward head at t = 0 (both heads predict w_s there;
the paper does not say which one its PPL uses, so we take one, and report the w_s-oracle
PPL, p(w_s) = 1, separately). ``position_nll`` gives per-word NLL with the distance to
the first (sequential) or split (backbone) word, for Table 1 and Figure 2.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict

import keras
import tensorflow as tf

from tablegen_tf.config import Bound, above, at_least
from tablegen_tf.constants import BOS_ID, EOS_ID, PAD_ID
from tablegen_tf.models import GenerationModel, register_model
from tablegen_tf.models.backbone_lm.featurizer import SequentialWordFeaturizer, WordFeaturizer

NUM_SPECIAL = 4  # <pad> <unk> <s> </s>: ids < 4; <unk> stays a predictable word
_NEG_INF = float("-inf")


@dataclasses.dataclass
class BackboneLMConfig:
    KIND: ClassVar[str] = "backbone-lm"
    BOUNDS: ClassVar[Dict[str, Bound]] = {"word_dim": at_least(1), "hidden_size": at_least(1), "init_scale": above(0)}
    name: str = "backbone-lm"
    word_dim: int = 50  # paper: 50-d embeddings
    hidden_size: int = 200  # paper: one GRU layer of 200 units
    init_scale: float = 0.08  # paper: weights ~ U[-0.08, 0.08]


@dataclasses.dataclass
class SequentialLMConfig:
    KIND: ClassVar[str] = "seq-lm"
    BOUNDS: ClassVar[Dict[str, Bound]] = BackboneLMConfig.BOUNDS
    name: str = "seq-lm"
    word_dim: int = 50
    hidden_size: int = 100  # paper: half the backbone's, the "fair size" comparison
    init_scale: float = 0.08


def sentence_of(batch):
    """(word ids [B, M] (</s> and padding after each length), lengths [B]) of a batch."""
    lengths = tf.reduce_sum(tf.cast(batch["target_mask"], tf.int32), axis=1) - 1  # drop </s>
    return batch["target_out"], lengths


def split_chains(words, lengths, split) -> Dict[str, tf.Tensor]:
    """eq. 5: the chains of each sentence split at (0-based) position ``split``.

    words [B, M] int32, lengths [B], split [B] -> [B, T] tensors, T = max(s + 2, m - s + 1):
    ``bw_out`` / ``fw_out`` the labels (w_{s-t} / w_{s+t}, then </s>, padded with </s>),
    ``bw_in`` / ``fw_in`` the inputs (<s> at t = 0, then the previous label),
    ``bw_mask`` / ``fw_mask`` the scored labels (words and each chain's first </s>),
    ``bw_word`` / ``fw_word`` labels that are words (not </s>).
    """
    words = tf.convert_to_tensor(words, tf.int32)
    lengths = tf.convert_to_tensor(lengths, tf.int32)
    split = tf.convert_to_tensor(split, tf.int32)
    steps = tf.reduce_max(tf.maximum(split + 2, lengths - split + 1))
    t = tf.range(steps)[None, :]
    last = tf.maximum(tf.shape(words)[1] - 1, 0)
    bw_index = split[:, None] - t  # w_{s-t}
    fw_index = split[:, None] + t  # w_{s+t}
    bw_word = bw_index >= 0
    fw_word = fw_index < lengths[:, None]
    bw_out = tf.where(bw_word, tf.gather(words, tf.clip_by_value(bw_index, 0, last), batch_dims=1), EOS_ID)
    fw_out = tf.where(fw_word, tf.gather(words, tf.clip_by_value(fw_index, 0, last), batch_dims=1), EOS_ID)
    bos = tf.fill([tf.shape(words)[0], 1], BOS_ID)
    return {
        "bw_out": bw_out, "fw_out": fw_out,
        "bw_in": tf.concat([bos, bw_out[:, :-1]], 1), "fw_in": tf.concat([bos, fw_out[:, :-1]], 1),
        # The first </s> is a prediction; the </s> padding after it is forced, not scored
        # (the paper pads "until the other part also terminates").
        "bw_mask": bw_index >= -1, "fw_mask": fw_index <= lengths[:, None],
        "bw_word": bw_word, "fw_word": fw_word,
    }


def _uniform(scale):
    return keras.initializers.RandomUniform(-scale, scale, seed=None)


def _forced(token, width):
    """[N] token ids -> [N, W] log-probs: the token with log-prob 0, everything else -inf."""
    return tf.where(tf.equal(tf.range(width)[None, :], token[:, None]), 0.0, _NEG_INF)


def _without_specials(log_probs):
    """<pad> <s> </s> are never predicted as words (their mass is moved by the caller)."""
    ids = tf.range(tf.shape(log_probs)[1])[None, :]
    special = (ids == PAD_ID) | (ids == BOS_ID) | (ids == EOS_ID)
    return tf.where(special, _NEG_INF, log_probs)


def _as_input(ids):
    """Stream markers (<pad>, <s>, </s>) are a chain's </s> (padding input after the end)."""
    return tf.where((ids == PAD_ID) | (ids == BOS_ID) | (ids == EOS_ID), EOS_ID, ids)


class _WordLM(GenerationModel):
    reports_perplexity = True
    stream_steps_per_word = 1  # stream tokens per joint step (generate_around's max_length)

    def __init__(self, vocab_size, word_dim, hidden_size, init_scale, input_dim, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.input_dim = input_dim
        self.embedding = keras.layers.Embedding(vocab_size, word_dim, embeddings_initializer=_uniform(init_scale),
                                                name="embedding")
        # eq. 8-11 (Keras' GRU with reset_after=False applies r before U_x as eq. 10; its
        # z gates the old state, h = z h_{t-1} + (1 - z) h~, i.e. eq. 11 with z -> 1 - z).
        self.cell = keras.layers.GRUCell(hidden_size, reset_after=False, kernel_initializer=_uniform(init_scale),
                                         recurrent_initializer=_uniform(init_scale), name="gru")

    @classmethod
    def from_config_sections(cls, family, config, vocab_sizes):
        m = config.model
        return cls(vocab_sizes["words"], m.word_dim, m.hidden_size, m.init_scale, name=family.name.replace("-", "_"))

    def _run(self, inputs, initial=None):
        """GRU over [B, T, D] inputs -> hidden states [B, T, H] (the same cell as decoding)."""
        batch = tf.shape(inputs)[0]
        h = tf.zeros([batch, self.cell.units]) if initial is None else initial
        steps = tf.shape(inputs)[1]
        out = tf.TensorArray(tf.float32, size=steps)

        def body(t, h, out):
            h, _ = self.cell(inputs[:, t], [h])
            return t + 1, h, out.write(t, h)

        _, _, out = tf.while_loop(lambda t, *_: t < steps, body, (0, h, out))
        return tf.transpose(out.stack(), [1, 0, 2])

    @staticmethod
    def _nll(logits, labels):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

    def encode(self, features, training=False):
        return {"word_id": tf.convert_to_tensor(features["word_id"], tf.int32)}

    def token_nll(self, batch):
        nll, _, mask = self.position_nll(batch)
        mask = tf.cast(mask, tf.float32)
        return tf.reduce_sum(nll * mask), tf.reduce_sum(mask)

    def serving_signatures(self, module, decoder=None):
        from tablegen_tf.export import checked_decoding_inputs
        from tablegen_tf.generation import decode_ids

        model, featurizer, decode = decoder or self, module.featurizer, module.decode
        steps_per_word = self.stream_steps_per_word

        @tf.function(input_signature=[
            tf.TensorSpec([None], tf.string, name="words"),
            tf.TensorSpec([], tf.int32, name="beam_size"),
            tf.TensorSpec([], tf.int32, name="max_length"),
        ])
        def generate_around(words, beam_size, max_length):
            """A sentence around each word: text [B] (containing the word), score [B]."""
            beam_size, max_length = checked_decoding_inputs(beam_size, max_length)
            features = featurizer.serving_features(words)
            config = dataclasses.replace(decode, beam_size=beam_size,
                                         max_length=max_length * steps_per_word)
            ids, lengths, scores, _ = decode_ids(model, features, config)
            return {"text": featurizer.output_text(features, ids, lengths), "score": tf.cast(scores, tf.float32)}

        return {"generate_around": generate_around}


@register_model("backbone-lm", config=BackboneLMConfig, featurizer=WordFeaturizer,
                description="backbone LM (Mou et al. 2015): a sentence around a given word")
class BackboneLM(_WordLM):
    """Backbone LM: one GRU, a backward and a forward softmax head (eq. 5-11)."""

    stream_steps_per_word = 2

    def __init__(self, vocab_size, word_dim=50, hidden_size=200, init_scale=0.08, **kwargs):
        super().__init__(vocab_size, word_dim, hidden_size, init_scale, 2 * word_dim, **kwargs)
        self.bw_head = keras.layers.Dense(vocab_size, kernel_initializer=_uniform(init_scale),
                                          name="backward_softmax")  # eq. 7, W_out^(bw)
        self.fw_head = keras.layers.Dense(vocab_size, kernel_initializer=_uniform(init_scale),
                                          name="forward_softmax")  # eq. 7, W_out^(fw)
        self.build()

    def build(self, input_shape=None):
        self.embedding.build(None)
        self.cell.build((None, self.input_dim))
        self.bw_head.build((None, self.cell.units))
        self.fw_head.build((None, self.cell.units))
        self.built = True

    def _inputs(self, fw_ids, bw_ids):
        return tf.concat([self.embedding(fw_ids), self.embedding(bw_ids)], axis=-1)  # x~ = [x^(fw); x^(bw)]

    def chain_nll(self, chains):
        """Per-step NLL of both heads (eq. 6-7): (bw [B, T], fw [B, T])."""
        hidden = self._run(self._inputs(chains["fw_in"], chains["bw_in"]))  # eq. 8-11
        return self._nll(self.bw_head(hidden), chains["bw_out"]), self._nll(self.fw_head(hidden), chains["fw_out"])

    def _split(self, batch, training):
        words, lengths = sentence_of(batch)
        if training:  # w_s uniformly at random, per sentence, at every step
            draw = tf.random.uniform(tf.shape(lengths), 0.0, 1.0)
            split = tf.minimum(tf.cast(draw * tf.cast(lengths, tf.float32), tf.int32), lengths - 1)
        else:  # deterministic for evaluation: the featurizer's hashed word position
            split = tf.minimum(tf.cast(batch["word_position"], tf.int32), lengths - 1)
        return split_chains(words, lengths, tf.maximum(split, 0))

    def compute_loss_from_batch(self, batch, training=False):
        chains = self._split(batch, training)
        bw_nll, fw_nll = self.chain_nll(chains)
        bw_mask, fw_mask = tf.cast(chains["bw_mask"], tf.float32), tf.cast(chains["fw_mask"], tf.float32)
        total = tf.reduce_sum(bw_nll * bw_mask) + tf.reduce_sum(fw_nll * fw_mask)  # eq. 5 (log), w_s included
        return total / tf.maximum(tf.reduce_sum(bw_mask) + tf.reduce_sum(fw_mask), 1.0)

    def position_nll(self, batch, oracle: bool = False):
        """Per-word NLL (each word once, </s> excluded) -> (nll, distance to w_s, mask), [B, 2T].
        ``oracle``: w_s is given (its NLL is 0, it still counts as a word)."""
        chains = self._split(batch, False)
        bw_nll, fw_nll = self.chain_nll(chains)
        t = tf.broadcast_to(tf.range(tf.shape(bw_nll)[1])[None, :], tf.shape(bw_nll))
        fw_nll = tf.where((t == 0) & oracle, 0.0, fw_nll)  # w_s scored once, by the forward head
        nll = tf.concat([bw_nll, fw_nll], 1)
        distance = tf.concat([t, t], 1)
        mask = tf.concat([chains["bw_word"] & (t > 0), chains["fw_word"]], 1)
        return nll, distance, mask

    # === decoding over the interleaved stream (module docstring) ===

    def initial_decoding_state(self, memory):
        word = memory["word_id"]
        batch = tf.shape(word)[0]
        bos = tf.fill([batch], BOS_ID)
        h, _ = self.cell(self._inputs(bos, bos), [tf.zeros([batch, self.cell.units])])  # t = 0 reads <s>, <s>
        false = tf.zeros([batch], tf.bool)
        return (h, word, false, false, tf.zeros([batch, self.vocab_size]))

    def decoding_step_fn(self, memory):
        word = memory["word_id"]
        width = self.vocab_size

        def step_fn(prev_ids, step, state):
            h, pending, bw_done, fw_done, cache = state
            prev_ids = tf.convert_to_tensor(prev_ids, tf.int32)

            def backward_half():  # even stream step: advance the GRU, emit the backward word
                first = tf.equal(step, 0)
                fw_prev = tf.where(first, word, _as_input(prev_ids))
                bw_prev = tf.where(first, word, _as_input(pending))
                fw_ended = fw_done | (~first & ((prev_ids == PAD_ID) | (prev_ids == EOS_ID)))
                new_h, _ = self.cell(self._inputs(fw_prev, bw_prev), [h])  # eq. 8-11
                bw = tf.nn.log_softmax(self.bw_head(new_h))  # eq. 7
                fw = tf.nn.log_softmax(self.fw_head(new_h))
                out = _without_specials(bw)
                out = tf.where(tf.range(width)[None, :] == BOS_ID, bw[:, EOS_ID:EOS_ID + 1], out)  # bw </s> -> <s>
                out = tf.where(bw_done[:, None], _forced(tf.fill(tf.shape(prev_ids), BOS_ID), width), out)
                return out, (new_h, pending, bw_done, fw_ended, fw)

            def forward_half():  # odd stream step: emit the forward word of the same h_t
                bw_ended = bw_done | (prev_ids == BOS_ID)
                end = tf.where(bw_ended, EOS_ID, PAD_ID)  # fw </s>: the stream's end once both ended
                out = _without_specials(cache)
                out = tf.where(tf.range(width)[None, :] == end[:, None], cache[:, EOS_ID:EOS_ID + 1], out)
                out = tf.where(fw_done[:, None], _forced(end, width), out)
                return out, (h, prev_ids, bw_ended, fw_done, cache)

            return tf.cond(tf.equal(step % 2, 0), backward_half, forward_half)

        return step_fn


@register_model("seq-lm", config=SequentialLMConfig, featurizer=SequentialWordFeaturizer,
                description="sequential GRU LM (the backbone LM paper's baseline)")
class SequentialLM(_WordLM):
    """A left-to-right GRU LM: p(w_t | w_<t) = softmax(W_out h_t) (eq. 3-4 with a GRU)."""

    def __init__(self, vocab_size, word_dim=50, hidden_size=100, init_scale=0.08, **kwargs):
        super().__init__(vocab_size, word_dim, hidden_size, init_scale, word_dim, **kwargs)
        self.head = keras.layers.Dense(vocab_size, kernel_initializer=_uniform(init_scale), name="softmax")  # eq. 4
        self.build()

    def build(self, input_shape=None):
        self.embedding.build(None)
        self.cell.build((None, self.input_dim))
        self.head.build((None, self.cell.units))
        self.built = True

    def _token_nll_matrix(self, batch):
        hidden = self._run(self.embedding(batch["target_in"]))
        return self._nll(self.head(hidden), batch["target_out"])

    def compute_loss_from_batch(self, batch, training=False):
        nll = self._token_nll_matrix(batch)
        mask = tf.cast(batch["target_mask"], tf.float32)
        return tf.reduce_sum(nll * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)

    def position_nll(self, batch, oracle: bool = False):
        """(nll [B, T], distance to the first word, mask of words; </s> excluded)."""
        nll = self._token_nll_matrix(batch)
        _, lengths = sentence_of(batch)
        t = tf.broadcast_to(tf.range(tf.shape(nll)[1])[None, :], tf.shape(nll))
        nll = tf.where((t == 0) & oracle, 0.0, nll)
        return nll, t, t < lengths[:, None]

    def initial_decoding_state(self, memory):
        batch = tf.shape(memory["word_id"])[0]
        h, _ = self.cell(self.embedding(tf.fill([batch], BOS_ID)), [tf.zeros([batch, self.cell.units])])
        return h

    def decoding_step_fn(self, memory):
        word = memory["word_id"]

        def step_fn(prev_ids, step, h):
            inputs = tf.where(tf.equal(step, 0), word, tf.convert_to_tensor(prev_ids, tf.int32))  # the word first
            h, _ = self.cell(self.embedding(inputs), [h])
            log_probs = tf.nn.log_softmax(self.head(h))
            ids = tf.range(tf.shape(log_probs)[1])[None, :]
            return tf.where((ids == PAD_ID) | (ids == BOS_ID), _NEG_INF, log_probs), h

        return step_fn

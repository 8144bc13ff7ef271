"""The featurizer half of the family contract: examples and raw serving inputs -> features.

A featurizer turns the prepared examples of one example form (``table`` or ``text``,
tablegen_tf.schema) into training / evaluation batches with tf.data, and the same
features from raw serving inputs inside the graph, so the SavedModel sees exactly what
training saw. Every batch carries ``target_in`` / ``target_out`` / ``target_mask`` (the
decoder side, CONTRACT.md) and the strings that copy ids resolve to
(``copy_text_key``): extended id V + i names source item i.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict, Sequence

import tensorflow as tf

from tablegen_tf.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tablegen_tf.data import input_pipeline as ip
from tablegen_tf.decoding.common import copied_items
from tablegen_tf.tokenizer import Tokenizer


class Featurizer:
    example_form: ClassVar[str] = ""
    serving_input: ClassVar[str] = ""  # name of the raw string[B] input of the signatures
    example_class: ClassVar[type] = object
    copy_text_key: ClassVar[str] = ""

    def __init__(self, vocabs: ip.Vocabularies, config):
        self.vocabs = vocabs
        self.config = config
        self.tokenizer = Tokenizer(config.tokenizer)

    # === examples -> batches (training, evaluation) ===

    def parser(self, config: ip.InputConfig):
        """An object with ``primary(serialized)`` and ``per_reference(serialized)``."""
        raise NotImplementedError

    def input_config(self, training: bool) -> ip.InputConfig:
        data = self.config.data
        names = {f.name for f in dataclasses.fields(ip.InputConfig)}
        config = ip.InputConfig(**{k: v for k, v in dataclasses.asdict(data).items() if k in names})
        if training:
            return config
        return dataclasses.replace(config, expand_references=False, shuffle_buffer=0)

    def dataset(self, file_pattern: str, training: bool, seed=None) -> tf.data.Dataset:
        config = self.input_config(training)
        return ip.make_dataset(file_pattern, self.vocabs, config, training, seed, parser=self.parser(config))

    def ordered_batches(self, serialized: Sequence[bytes], batch_size: int) -> tf.data.Dataset:
        """Padded batches in input order (no bucketing, no shuffling, whole targets)."""
        config = dataclasses.replace(self.input_config(False), max_target_length=0)
        dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(serialized), tf.string))
        dataset = dataset.map(self.parser(config).primary)
        return dataset.padded_batch(batch_size, padding_values=ip.padding_values(dataset.element_spec)).prefetch(2)

    def parse_example(self, serialized: bytes):
        return self.example_class.parse(serialized)

    # === raw serving inputs -> the same features, in graph ===

    def serving_features(self, inputs: tf.Tensor) -> Dict[str, tf.Tensor]:
        raise NotImplementedError

    def copy_texts(self, features) -> tf.Tensor:
        """[B, S] strings: what extended id V + i resolves to."""
        return features[self.copy_text_key]

    def batch_size(self, features) -> tf.Tensor:
        return tf.shape(self.copy_texts(features))[0]

    def output_text(self, features, ids, lengths) -> tf.Tensor:
        """Extended ids -> detokenized text [B]."""
        return self.rows_text(ids, lengths, self.copy_texts(features))

    def rows_text(self, ids, lengths, copy_texts) -> tf.Tensor:
        """Extended ids [N, T], lengths [N] -> detokenized text [N], copy ids resolved
        against each row's own ``copy_texts`` [N, S] (rows of beams, or of a search step)."""
        return self.tokenizer.detokenize(ids_to_tokens(ids, lengths, self.vocabs.words, copy_texts))

    def candidate_texts(self, features, ids, lengths) -> tf.Tensor:
        """All beams: extended ids [B, K, T], lengths [B, K] -> detokenized text [B, K]."""
        k = tf.shape(ids)[1]
        copy_texts = tf.repeat(self.copy_texts(features), k, axis=0)
        flat_ids = tf.reshape(ids, [-1, tf.shape(ids)[2]])
        return tf.reshape(self.rows_text(flat_ids, tf.reshape(lengths, [-1]), copy_texts), tf.shape(lengths))

    def slot_table(self, features):
        """(fields, values, mask) [B, R] record strings for slot reranking, or None when the
        inputs are not tables."""
        return None

    def omission_variants(self, features):
        """(features of the tables and of their omission distractors, table-major
        [(1 + D) * B, ...]; valid [1 + D, B]) for the pragmatic listener
        (tablegen_tf.pragmatics), or None when the inputs are not tables."""
        return None

    def constraint_ids(self, features, words: tf.Tensor) -> tf.Tensor:
        """Constraint words [B, C] -> vocabulary ids, else the copy id of the first source
        item holding the word; -1 for padding ("") and words that can be neither."""
        copy_texts = self.copy_texts(features)
        vocab_size = tf.size(self.vocabs.words)
        word_ids = self.vocabs.lookup("words", words)
        in_source = tf.equal(words[:, :, None], copy_texts[:, None, :])
        first = tf.argmax(tf.cast(in_source, tf.int32), axis=2, output_type=tf.int32)
        ids = tf.where(word_ids != UNK_ID, word_ids, tf.where(tf.reduce_any(in_source, 2), vocab_size + first, -1))
        return tf.where(tf.equal(words, ""), -1, ids)

    def constraint_phrases(self, features, phrases: tf.Tensor):
        """must_include entries [B, C] (words or multi-word phrases, "" = pad) -> their
        tokens as constraint ids [B, T] (-1 pad), ``continues`` [B, T] (token t continues
        the phrase of t - 1) and ``unknown`` [B, T] (a token no output can contain)."""
        phrases = tf.convert_to_tensor(phrases, tf.string)
        rows, per_row = tf.shape(phrases, out_type=tf.int64)[0], tf.shape(phrases, out_type=tf.int64)[1]
        tokens = self.tokenizer.tokenize(tf.reshape(phrases, [-1]))  # [B * C, (n)]
        within = tf.ragged.range(tokens.row_lengths())

        def by_row(ragged):
            return tf.RaggedTensor.from_uniform_row_length(ragged, per_row, nrows=rows).merge_dims(1, 2)

        text = by_row(tokens).to_tensor("")
        continues = by_row(within).to_tensor(0) > 0
        ids = self.constraint_ids(features, text)
        return ids, continues, tf.not_equal(text, "") & (ids < 0)


def ids_to_tokens(ids, lengths, words: tf.Tensor, copy_texts: tf.Tensor) -> tf.RaggedTensor:
    """Extended ids -> token strings; id V + i is source item i's text (copy resolution)."""
    return tf.ragged.boolean_mask(token_strings(ids, words, copy_texts), output_positions(ids, lengths))


def token_strings(ids, words: tf.Tensor, copy_texts: tf.Tensor) -> tf.Tensor:
    """Extended ids [B, T] -> their token strings [B, T], special ids included."""
    vocab_size = tf.shape(words, out_type=ids.dtype)[0]
    from_vocab = tf.gather(words, tf.minimum(ids, vocab_size - 1))
    return tf.where(ids >= vocab_size, copied_items(ids, copy_texts, vocab_size), from_vocab)


def output_positions(ids, lengths) -> tf.Tensor:
    """[B, T] bool: the positions of ``ids`` that are output tokens (not </s>, padding, <s>)."""
    positions = tf.range(tf.shape(ids)[1])[None, :]
    return (positions < lengths[:, None]) & (ids != EOS_ID) & (ids != PAD_ID) & (ids != BOS_ID)

"""The word-in, sentence-out featurizer of the language-model families.

Training / evaluation read text examples (``tablegen prepare --format sentences``:
source = target = one sentence). Serving reads ``words: string[B]``: the word the
sentence must contain. Both give the same word features:

* ``word_id`` int32 [B]: the word's vocabulary id (<unk> when out of vocabulary),
* ``word_text`` string [B]: the word itself (what the output shows; an OOV word is
  copied, never rendered as <unk>),
* ``word_position`` int32 [B] (examples only): where the word sits in the target; a
  deterministic hash of the example id, so evaluation and validation decoding pick the
  same split word every time (training draws its own at random, model.py).

A serving "word" is normalised like training text (e.g. lower-cased); if the tokenizer
splits it into several tokens they are kept together as one given item (joined by a
space; its id is then <unk>).
"""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from tablegen_tf import schema
from tablegen_tf.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tablegen_tf.data import input_pipeline as ip
from tablegen_tf.data.text_featurizer import TextExampleParser, TextFeaturizer

_HASH_BUCKETS = 1 << 30


class WordExampleParser(TextExampleParser):
    def features(self, parsed, target_tokens: tf.Tensor) -> Dict[str, tf.Tensor]:
        features = super().features(parsed, target_tokens)
        tokens = target_tokens
        if self.config.max_target_length:
            tokens = tokens[: self.config.max_target_length]
        length = tf.maximum(tf.size(tokens), 1)
        bucket = tf.strings.to_hash_bucket_fast(parsed[schema.EXAMPLE_ID], _HASH_BUCKETS)
        position = tf.cast(bucket % tf.cast(length, tf.int64), tf.int32)
        word = tf.cond(tf.size(tokens) > 0, lambda: tokens[tf.minimum(position, tf.size(tokens) - 1)],
                       lambda: tf.constant(""))
        features["word_position"] = position
        features["word_text"] = word
        features["word_id"] = self.vocabs.lookup("words", word)
        return features


class WordFeaturizer(TextFeaturizer):
    """Text examples for training; a given word ``words: string[B]`` at serving."""

    serving_input = "words"
    copy_text_key = "word_text"

    def parser(self, config: ip.InputConfig) -> WordExampleParser:
        return WordExampleParser(self.vocabs, config)

    def serving_features(self, words: tf.Tensor) -> Dict[str, tf.Tensor]:
        tokens = self.tokenizer.tokenize(words)
        text = tf.strings.reduce_join(tokens, axis=1, separator=" ")
        single = tf.equal(tokens.row_lengths(), 1)
        ids = tf.where(single, self.vocabs.lookup("words", text), UNK_ID)
        return {"word_id": ids, "word_text": text}

    def copy_texts(self, features) -> tf.Tensor:
        return features["word_text"][:, None]  # copy id V + 0 is the given word

    def output_text(self, features, ids, lengths) -> tf.Tensor:
        """Interleaved stream (model.py) -> reversed backward words, the word, forward words."""
        tokens = self.family_tokens(features, ids, lengths)
        return self.tokenizer.detokenize(tokens)

    def family_tokens(self, features, ids, lengths) -> tf.RaggedTensor:
        ids = tf.convert_to_tensor(ids)
        positions = tf.range(tf.shape(ids)[1])[None, :]
        ids = tf.where(positions < lengths[:, None], ids, PAD_ID)
        word = tf.RaggedTensor.from_tensor(features["word_text"][:, None])
        if getattr(self, "interleaved", True):
            backward = _words(tf.reverse(ids[:, 0::2], axis=[1]), self.vocabs.words)
            forward = _words(ids[:, 1::2], self.vocabs.words)
            return tf.concat([backward, word, forward], axis=1)
        return tf.concat([word, _words(ids, self.vocabs.words)], axis=1)


class SequentialWordFeaturizer(WordFeaturizer):
    """The sequential LM's stream is the words after the given (first) word."""

    interleaved = False


def _words(ids, words: tf.Tensor) -> tf.RaggedTensor:
    """Vocabulary ids -> ragged word strings, markers and padding dropped."""
    keep = (ids != PAD_ID) & (ids != BOS_ID) & (ids != EOS_ID) & (ids < tf.size(words))
    return tf.ragged.boolean_mask(tf.gather(words, tf.clip_by_value(ids, 0, tf.size(words) - 1)), keep)

"""SavedModel export: raw JSONL tables in, text out, everything inside the graph.

Signatures (TF Serving runs them unchanged: core TF + tensorflow-text ops only):

* ``serving_default(tables: string[B]) -> {text: string[B], score: float32[B]}``
  with the run's decoding config (beam size, max length, length penalty).
* ``generate(tables, beam_size: int32, max_length: int32, must_include: string[B, C])``
  decoding controls; ``must_include`` words (padded with "") are forced into the
  output by constrained beam search (Mou et al. 2015's "generate around a given
  word" setting); words outside the vocabulary are copied from the table.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict

import tensorflow as tf

from tablegen_tf.data.input_pipeline import Vocabularies
from tablegen_tf.generation import DecodeConfig, decode_ids, ids_to_tokens
from tablegen_tf.serving_io import batched_records_features, serving_records
from tablegen_tf.tokenizer import Tokenizer, TokenizerConfig

# beam_size is a graph input, but the search needs a static beam width: one branch
# per supported width, chosen with tf.switch_case.
SUPPORTED_BEAMS = tuple(range(1, 11))


class ServingModule(tf.Module):
    def __init__(self, model, vocabs: Vocabularies, config: Dict):
        super().__init__(name="tablegen_serving")
        self.model = model
        self.vocabs = vocabs
        self.tokenizer = Tokenizer(TokenizerConfig(**config.get("tokenizer", {})))
        self.decode = DecodeConfig.from_dict(config.get("decode"))
        self.max_position = int(config["data"].get("max_position", 30))
        self.max_records = int(config["data"].get("max_records", 0))

    def features(self, tables: tf.Tensor) -> Dict[str, tf.Tensor]:
        records = serving_records(tables, self.tokenizer)
        return batched_records_features(self.vocabs, records, self.max_position, self.max_records)

    def _text(self, features, ids, lengths):
        tokens = ids_to_tokens(ids, lengths, self.vocabs.words, features["record_value_text"])
        return self.tokenizer.detokenize(tokens)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="tables")])
    def serve(self, tables):
        features = self.features(tables)
        ids, lengths, scores = decode_ids(self.model, features, self.decode)
        return {"text": self._text(features, ids, lengths), "score": tf.cast(scores, tf.float32)}

    def _constraint_ids(self, features, must_include):
        """Words -> vocabulary ids, else the first table record holding the word (copy id)."""
        vocab_size = tf.size(self.vocabs.words)
        word_ids = self.vocabs.lookup("words", must_include)
        in_table = tf.equal(must_include[:, :, None], features["record_value_text"][:, None, :])
        record = tf.argmax(tf.cast(in_table, tf.int32), axis=2, output_type=tf.int32)
        copy_ids = vocab_size + record
        ids = tf.where(word_ids != 1, word_ids, tf.where(tf.reduce_any(in_table, 2), copy_ids, -1))
        return tf.where(tf.equal(must_include, ""), -1, ids)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="tables"),
            tf.TensorSpec([], tf.int32, name="beam_size"),
            tf.TensorSpec([], tf.int32, name="max_length"),
            tf.TensorSpec([None, None], tf.string, name="must_include"),
        ]
    )
    def generate(self, tables, beam_size, max_length, must_include):
        tf.debugging.assert_greater_equal(beam_size, 1, message="beam_size must be >= 1")
        tf.debugging.assert_less_equal(beam_size, max(SUPPORTED_BEAMS), message="beam_size must be <= 10")
        tf.debugging.assert_greater_equal(max_length, 1, message="max_length must be >= 1")
        features = self.features(tables)
        constraints = self._constraint_ids(features, must_include)

        def branch(beam):
            def run():
                config = dataclasses.replace(self.decode, beam_size=beam, max_length=max_length)
                ids, lengths, scores = decode_ids(self.model, features, config, must_include=constraints)
                return self._text(features, ids, lengths), tf.cast(scores, tf.float32)

            return run

        text, score = tf.switch_case(beam_size - 1, [branch(b) for b in SUPPORTED_BEAMS])
        return {"text": text, "score": score}


def export_saved_model(run_dir: str, export_dir: str) -> str:
    """Writes the SavedModel of a training run's best checkpoint to ``export_dir``."""
    from tablegen_tf.training.trainer import load_trained

    config, vocabs, model, _ = load_trained(run_dir)
    module = ServingModule(model, vocabs, config)
    tf.saved_model.save(
        module,
        export_dir,
        signatures={"serving_default": module.serve, "generate": module.generate},
    )
    return export_dir


def next_version_dir(base: str) -> str:
    """TF Serving layout BASE/<int version>/: the next free version number."""
    versions = [int(name) for name in tf.io.gfile.listdir(base) if name.strip("/").isdigit()] if tf.io.gfile.exists(base) else []
    return os.path.join(base, str(max(versions, default=0) + 1))

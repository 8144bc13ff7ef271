"""The text example form: a source sentence in (tokens, optional labels), a target out.

Batch keys (besides the decoder side of CONTRACT.md): ``source_ids`` int32 [B, S]
(word vocabulary, shared with targets; OOV -> <unk>; 0 pad), ``source_mask`` bool,
``source_text`` string [B, S] (copy ids V + i resolve to source token i), ``labels``
int32 [B, S] (-1 pad; empty when the corpus has none), ``dep_labels`` / ``dep_heads`` int32
[B, S] (the optional dependency parse, schema.DEP_LABELS; -1 pad, and a head cut off by
max_source_length is -1) and ``copy_mask`` [B, T, S] (1 where the source token equals the
label token).
"""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from tablegen_tf import schema
from tablegen_tf.constants import PAD_ID
from tablegen_tf.data import input_pipeline as ip
from tablegen_tf.data.featurizer import Featurizer


class TextExampleParser:
    """Serialized TextExample -> per-example feature dicts."""

    def __init__(self, vocabs: ip.Vocabularies, config: ip.InputConfig):
        self.vocabs = vocabs
        self.config = config

    def parse(self, serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
        return tf.io.parse_single_example(serialized, schema.text_feature_spec())

    def source_features(self, source_tokens: tf.Tensor, labels: tf.Tensor, dep_labels: tf.Tensor,
                        dep_heads: tf.Tensor) -> Dict[str, tf.Tensor]:
        limit = self.config.max_source_length
        if limit:
            source_tokens, labels = source_tokens[:limit], labels[:limit]
            dep_labels, dep_heads = dep_labels[:limit], dep_heads[:limit]
            dep_heads = tf.where(dep_heads < limit, dep_heads, -1)
        return {
            "source_ids": self.vocabs.lookup("words", source_tokens),
            "source_mask": tf.ones_like(source_tokens, tf.bool),
            "source_text": source_tokens,
            "labels": tf.cast(labels, tf.int32),
            "dep_labels": tf.cast(dep_labels, tf.int32),
            "dep_heads": tf.cast(dep_heads, tf.int32),
        }

    def features(self, parsed, target_tokens: tf.Tensor) -> Dict[str, tf.Tensor]:
        features = self.source_features(parsed[schema.SOURCE_TOKENS], parsed[schema.LABELS],
                                        parsed[schema.DEP_LABELS], parsed[schema.DEP_HEADS])
        if self.config.max_target_length:
            target_tokens = target_tokens[: self.config.max_target_length]
        copy_mask = tf.cast(tf.equal(target_tokens[:, None], features["source_text"][None, :]), tf.float32)
        features["example_id"] = parsed[schema.EXAMPLE_ID]
        features.update(ip.target_features(self.vocabs, target_tokens, copy_mask))
        return features

    def primary(self, serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
        parsed = self.parse(serialized)
        return self.features(parsed, parsed[schema.TARGET_TOKENS])

    def per_reference(self, serialized: tf.Tensor) -> tf.data.Dataset:
        parsed = self.parse(serialized)
        references = ip.reference_token_strings(parsed)
        return tf.data.Dataset.from_tensor_slices(references).map(
            lambda reference: self.features(parsed, tf.strings.split(reference, " ")))


class TextFeaturizer(Featurizer):
    example_form = "text"
    serving_input = "sources"  # raw source sentences
    example_class = schema.TextExample
    copy_text_key = "source_text"

    def parser(self, config: ip.InputConfig) -> TextExampleParser:
        return TextExampleParser(self.vocabs, config)

    def serving_features(self, sources: tf.Tensor) -> Dict[str, tf.Tensor]:
        tokens = self.tokenizer.tokenize(sources)
        limit = self.config.data.max_source_length
        if limit:
            tokens = tokens[:, :limit]
        text = tokens.to_tensor("")
        mask = tokens.with_flat_values(tf.ones_like(tokens.flat_values, tf.bool)).to_tensor(False)
        ids = tf.where(mask, self.vocabs.lookup("words", text), PAD_ID)
        unknown = tf.fill(tf.shape(ids), -1)
        return {"source_ids": ids, "source_mask": mask, "source_text": text, "labels": unknown,
                "dep_labels": unknown, "dep_heads": unknown}

"""The table example form: records (Lebret et al. 2016) in, the batch of CONTRACT.md out."""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from tablegen_tf import schema
from tablegen_tf.data import input_pipeline as ip
from tablegen_tf.data.featurizer import Featurizer
from tablegen_tf.pragmatics import KEPT_FIELD, omission_masks
from tablegen_tf.serving_io import batched_records_features, serving_records


class TableFeaturizer(Featurizer):
    example_form = "table"
    serving_input = "tables"  # JSONL table strings (tablegen_tf.serving_io)
    example_class = schema.TableExample
    copy_text_key = "record_value_text"

    def parser(self, config: ip.InputConfig) -> ip.ExampleParser:
        return ip.ExampleParser(self.vocabs, config)

    def serving_features(self, tables: tf.Tensor) -> Dict[str, tf.Tensor]:
        records = serving_records(tables, self.tokenizer)
        data = self.config.data
        return batched_records_features(self.vocabs, records, data.max_position, data.max_records)

    def slot_table(self, features):
        fields = tf.gather(tf.constant(self.vocabs.tokens["fields"], tf.string), features["record_field"])
        return fields, features["record_value_text"], features["record_mask"]

    def omission_variants(self, features):
        kept = self.vocabs.lookup("fields", tf.constant(KEPT_FIELD))
        masks, valid = omission_masks(features["record_field"], features["record_mask"], kept)
        tables = tf.shape(masks)[0]
        variants = {key: tf.tile(value, tf.concat([[tables], tf.ones([value.shape.rank - 1], tf.int32)], 0))
                    if value.shape.rank else value for key, value in features.items()}
        variants["record_mask"] = tf.reshape(masks, [-1, tf.shape(masks)[2]])
        return variants, valid

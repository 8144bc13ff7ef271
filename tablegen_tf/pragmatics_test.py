"""The distractor listener (tablegen_tf.pragmatics) on hand-made tables and a fake model
whose next-word distribution favours the words of the records it can see
(tests/ensemble_test.py: trained runs)."""

import numpy as np
import tensorflow as tf

from tablegen_tf.constants import EOS_ID
from tablegen_tf.decoding.common import tile_batch
from tablegen_tf.models.base import GenerationModel
from tablegen_tf.pragmatics import attribute_index, listener_log_probs, omission_masks

NAME = 7  # the field id of `name`
VOCAB = 10


def test_records_are_indexed_by_attribute_in_table_order_and_the_name_never():
    # name name food area area food(again) pad
    fields = tf.constant([[NAME, NAME, 3, 4, 4, 3, 0]])
    mask = tf.constant([[True] * 6 + [False]])
    index, count = attribute_index(fields, mask, NAME)
    assert index.numpy().tolist() == [[-1, -1, 0, 1, 1, 0, -1]]
    assert count.numpy().tolist() == [2]


def test_each_distractor_masks_one_attribute_and_tables_with_fewer_have_fewer():
    fields = tf.constant([[NAME, 3, 4, 5], [NAME, 3, 0, 0]])
    mask = tf.constant([[True, True, True, True], [True, True, False, False]])
    masks, valid = omission_masks(fields, mask, NAME)
    assert masks.numpy().astype(int).tolist() == [
        [[1, 1, 1, 1], [1, 1, 0, 0]],  # the tables
        [[1, 0, 1, 1], [1, 0, 0, 0]],  # without their first attribute
        [[1, 1, 0, 1], [1, 1, 0, 0]],  # without the second: the second table has none
        [[1, 1, 1, 0], [1, 1, 0, 0]],
    ]
    assert valid.numpy().tolist() == [[True, True], [True, True], [True, False], [True, False]]


class RecordWords(GenerationModel):
    """p(word) = 0.1 for the value of a visible record, else 0.05; the last word takes the
    rest: a text naming a record is likelier under a table that shows it, and one naming
    none is as likely under every table."""

    def build(self, *args, **kwargs):
        self.built = True

    def encode(self, features, training=False):
        visible = tf.cast(features["record_mask"], tf.float32)
        counts = tf.math.unsorted_segment_sum(tf.reshape(visible, [-1]), tf.reshape(
            features["record_value"] + VOCAB * tf.range(tf.shape(visible)[0])[:, None], [-1]),
            VOCAB * tf.shape(visible)[0])
        return {"seen": tf.reshape(counts, [-1, VOCAB]) > 0}

    def initial_decoding_state(self, memory):
        return tf.zeros([tf.shape(memory["seen"])[0]])

    def tile(self, memory, multiplier):
        return tile_batch(memory, multiplier)

    def decoding_step_fn(self, memory):
        def step_fn(prev_ids, step, state):
            probs = tf.where(memory["seen"], 0.1, 0.05)[:, :-1]
            rest = 1.0 - tf.reduce_sum(probs, -1, keepdims=True)
            return tf.math.log(tf.concat([probs, rest], -1)), state

        return step_fn


def _variants(fields, values, mask):
    masks, valid = omission_masks(fields, mask, NAME)
    tables = tf.shape(masks)[0]
    features = {"record_value": tf.tile(values, [tables, 1]), "record_mask": tf.reshape(masks, [-1, 4])}
    return features, valid


def test_the_listener_prefers_the_beam_that_names_an_attribute_and_normalises_over_valid_tables():
    fields = tf.constant([[NAME, 3, 4, 0], [NAME, 3, 0, 0]])
    values = tf.constant([[1, 5, 6, 0], [1, 5, 0, 0]])  # name word 1; attribute words 5, 6
    mask = tf.constant([[True, True, True, False], [True, True, False, False]])
    # beams: the name only; the name and word 6 (table 0's second attribute) / word 5
    ids = tf.constant([[[1, EOS_ID, 0], [1, 6, EOS_ID]], [[1, EOS_ID, 0], [1, 5, EOS_ID]]])
    lengths = tf.constant([[2, 3], [2, 3]])
    heard = listener_log_probs(RecordWords(), *_variants(fields, values, mask), ids, lengths).numpy()
    # the name alone is equally likely under every table: log 1 / (1 + attributes)
    np.testing.assert_allclose(heard[:, 0], np.log([1 / 3, 1 / 2]), rtol=1e-5)
    assert heard[0, 1] > heard[0, 0] and heard[1, 1] > heard[1, 0]
    assert heard[0, 1] < 0 and heard[1, 1] < 0

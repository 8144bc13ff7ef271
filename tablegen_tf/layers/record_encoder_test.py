import numpy as np
import tensorflow as tf

from tablegen_tf.layers.record_encoder import RecordEncoder
from tablegen_tf.layers.testing import SIZES, random_batch


def _encoder(**overrides):
    kwargs = dict(field_vocab_size=SIZES["fields"], value_vocab_size=SIZES["words"],
                  entity_vocab_size=SIZES["entities"], group_vocab_size=SIZES["groups"],
                  max_position=5, hidden_size=8, field_dim=3, value_dim=4, position_dim=2,
                  entity_dim=2, group_dim=2)
    kwargs.update(overrides)
    return RecordEncoder(**kwargs)


def test_shape_and_zero_padding():
    batch = random_batch()
    encoded = _encoder()(batch)
    assert encoded.shape == (3, 6, 8)
    np.testing.assert_array_equal(tf.boolean_mask(encoded, ~batch["record_mask"]), 0.0)
    assert np.all(np.asarray(encoded) >= 0)  # ReLU


def test_padding_records_do_not_change_outputs():
    batch = random_batch()
    encoder = _encoder()
    encoded = encoder(batch)
    keys = [k for k in batch if k.startswith("record_") and k != "record_value_text"]
    padded = {k: tf.pad(batch[k], [[0, 0], [0, 2]]) for k in keys}
    np.testing.assert_allclose(encoder(padded)[:, :6], encoded, rtol=1e-6)


def test_zero_dim_features_are_left_out():
    encoder = _encoder(entity_dim=0, group_dim=0)
    encoder.build(None)
    assert sorted(encoder.embeddings) == ["record_field", "record_pos_end", "record_pos_start", "record_value"]
    assert encoder.projection.kernel.shape == (3 + 4 + 2 + 2, 8)


def test_config_round_trip():
    encoder = _encoder()
    clone = RecordEncoder.from_config(encoder.get_config())
    assert clone.get_config() == encoder.get_config()

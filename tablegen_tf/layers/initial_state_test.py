import numpy as np
import tensorflow as tf

from tablegen_tf.layers.initial_state import EntityMeanInitialState, entity_pooled_mean


def test_mean_of_entity_means_hand_computed():
    r = tf.constant([[[1.0, 0.0], [3.0, 0.0], [0.0, 6.0], [9.0, 9.0]]])
    entity = tf.constant([[5, 5, 7, 0]])
    mask = tf.constant([[True, True, True, False]])
    # entity 5: mean (2, 0); entity 7: (0, 6); mean over entities: (1, 3); pad ignored
    np.testing.assert_allclose(entity_pooled_mean(r, entity, mask), [[1.0, 3.0]])


def test_no_entities_is_plain_mean():
    r = tf.random.normal([2, 4, 3])
    entity = tf.fill([2, 4], 2)  # all <none>
    mask = tf.ones([2, 4], tf.bool)
    np.testing.assert_allclose(entity_pooled_mean(r, entity, mask), tf.reduce_mean(r, 1), rtol=1e-5, atol=1e-6)


def test_state_layout_and_padding_invariance():
    layer = EntityMeanInitialState(units=4, num_layers=2)
    r = tf.random.normal([2, 3, 5])
    entity = tf.constant([[3, 3, 4], [4, 2, 2]])
    mask = tf.constant([[True, True, True], [True, True, False]])
    state = layer(r, entity, mask)
    assert len(state) == 5 and all(s.shape == (2, 4) for s in state)
    padded = layer(tf.concat([r, 50 * tf.ones([2, 2, 5])], 1), tf.pad(entity, [[0, 0], [0, 2]]),
                   tf.pad(mask, [[0, 0], [0, 2]]))
    for a, b in zip(state, padded):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.layers.attention import BahdanauAttention, LuongAttention, make_attention

B, R, D, U = 2, 4, 5, 3


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    memory = tf.constant(rng.normal(size=(B, R, D)), tf.float32)
    mask = tf.constant([[True, True, True, False], [True, True, False, False]])
    return memory, mask


@pytest.mark.parametrize("kind", ["general", "bahdanau"])
@pytest.mark.parametrize("steps", [None, 6])
def test_shapes_and_normalisation(kind, steps):
    memory, mask = _inputs()
    query = tf.random.normal([B, U] if steps is None else [B, steps, U])
    context, probs = make_attention(kind, U)(query, memory, mask)
    lead = [B] if steps is None else [B, steps]
    assert context.shape == lead + [D] and probs.shape == lead + [R]
    np.testing.assert_allclose(tf.reduce_sum(probs, -1), 1.0, rtol=1e-5)
    padded = tf.boolean_mask(probs, ~tf.broadcast_to(mask[:, None, :] if steps else mask, probs.shape))
    np.testing.assert_allclose(padded, 0.0)


@pytest.mark.parametrize("layer", [LuongAttention(U), LuongAttention(D, score="dot"), BahdanauAttention(U)])
def test_padding_records_do_not_change_outputs(layer):
    memory, mask = _inputs()
    query = tf.random.normal([B, layer.units])
    context, probs = layer(query, memory, mask)
    junk = tf.random.normal([B, 3, D]) * 100.0
    more_memory = tf.concat([memory, junk], 1)
    more_mask = tf.concat([mask, tf.zeros([B, 3], tf.bool)], 1)
    context2, probs2 = layer(query, more_memory, more_mask)
    np.testing.assert_allclose(context2, context, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probs2[:, :R], probs, rtol=1e-5, atol=1e-6)


def test_general_score_matches_equation():
    memory, mask = _inputs()
    layer = LuongAttention(U)
    query = tf.random.normal([B, U])
    _, probs = layer(query, memory, mask)
    scores = np.einsum("bu,du,brd->br", query, layer.kernel.numpy(), memory)  # h^T W_a r
    scores = np.where(mask, scores, -np.inf)
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(probs, expected / expected.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)

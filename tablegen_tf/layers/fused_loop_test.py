import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.layers.fused_loop import attention_lstm_loop
from tablegen_tf.layers.lstm_decoder import AttentionLSTMDecoder, _run_loop

T, B, R, E, D, H = 5, 3, 4, 2, 6, 4


def _problem(layers, dropout, seed=0):
    tf.random.set_seed(seed)
    decoder = AttentionLSTMDecoder(H, num_layers=layers)
    decoder.build((None, None, E), (None, None, D))
    rng = np.random.default_rng(seed)
    x_gates = tf.constant(rng.normal(size=(T, B, 4 * H)), tf.float32)
    state = [tf.constant(rng.normal(size=(B, H)), tf.float32) for _ in range(2 * layers + 1)]
    memory = tf.constant(rng.normal(size=(B, R, D)), tf.float32)
    mask = tf.constant([[True] * 4, [True, True, True, False], [True, False, False, False]])
    masks = None
    if dropout:
        masks = [tf.constant((rng.random((B, H)) > 0.3) / 0.7, tf.float32) for _ in range(2)]
    upstream = [tf.constant(rng.normal(size=s), tf.float32) for s in ((B, T, H), (B, T, D))]
    return decoder, x_gates, state, memory, mask, masks, upstream


def _loss(outputs, upstream):
    h_tilde, context, final = outputs
    return (tf.reduce_sum(tf.transpose(h_tilde, [1, 0, 2]) * upstream[0])
            + tf.reduce_sum(tf.transpose(context, [1, 0, 2]) * upstream[1])
            + tf.reduce_sum(final[-1] * 0.3) + tf.reduce_sum(final[0] * 0.7))


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("dropout", [False, True])
def test_manual_gradients_equal_autodiff(layers, dropout):
    decoder, x_gates, state, memory, mask, masks, upstream = _problem(layers, dropout)
    weights = decoder._weights(tf.float32)
    sources = [x_gates, memory, *state, *decoder.trainable_variables]

    def plain():
        keys = decoder.precompute(memory)
        cell = lambda x, s: decoder._cell(x, s, decoder._weights(tf.float32), keys, memory, mask, masks)  # noqa
        h, c, final = _run_loop(cell, x_gates, tuple(state), None)
        return tf.transpose(h, [1, 0, 2]), tf.transpose(c, [1, 0, 2]), final

    def fused():
        w = decoder._weights(tf.float32)
        return attention_lstm_loop(x_gates, state, w["recurrent"], w["bias"][1:], w["output"],
                                   decoder.precompute(memory), memory, mask, masks)

    results = []
    for fn in (plain, fused):
        with tf.GradientTape() as tape:
            tape.watch([x_gates, memory, *state])
            outputs = fn()
            loss = _loss(outputs, upstream)
        results.append((outputs, tape.gradient(loss, sources)))
    (plain_out, plain_grads), (fused_out, fused_grads) = results
    for a, b in zip(tf.nest.flatten(plain_out), tf.nest.flatten(fused_out)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert weights is not None
    for a, b, v in zip(plain_grads, fused_grads, sources):
        if a is None:  # the decoder's layer-0 bias / input kernel: not used by x_gates here
            assert b is None or np.allclose(b, 0)
            continue
        np.testing.assert_allclose(tf.convert_to_tensor(b), tf.convert_to_tensor(a), rtol=1e-4, atol=1e-5)


def test_carry_step_snapshot_and_gradients_ignore_it():
    decoder, x_gates, state, memory, mask, masks, upstream = _problem(2, False)
    w = decoder._weights(tf.float32)
    keys = decoder.precompute(memory)
    args = (w["recurrent"], w["bias"][1:], w["output"], keys, memory, mask, None)
    _, _, carried = attention_lstm_loop(x_gates, state, *args, carry_step=2)
    _, _, prefix = attention_lstm_loop(x_gates[:2], state, *args)
    for a, b in zip(carried, prefix):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with tf.GradientTape() as tape:
        tape.watch(x_gates)
        h_tilde, _, carried = attention_lstm_loop(x_gates, state, *args, carry_step=2)
        loss = tf.reduce_sum(h_tilde[-1]) + tf.reduce_sum(tf.stop_gradient(carried[0]))
    assert np.all(np.isfinite(tape.gradient(loss, x_gates)))

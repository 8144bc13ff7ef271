import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.layers.lstm_decoder import AttentionLSTMDecoder

B, T, R, E, D, H = 2, 5, 4, 3, 6, 4


def _setup(num_layers=2, attention="general", dropout=0.0, seed=0):
    tf.random.set_seed(seed)
    decoder = AttentionLSTMDecoder(H, num_layers=num_layers, attention=attention, dropout=dropout)
    inputs = tf.random.normal([B, T, E])
    memory = tf.random.normal([B, R, D])
    mask = tf.constant([[True, True, True, False], [True, True, False, False]])
    state = tuple(tf.random.normal([B, H]) for _ in range(2 * num_layers + 1))
    return decoder, inputs, memory, mask, state


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("attention", ["general", "bahdanau"])
def test_shapes(num_layers, attention):
    decoder, inputs, memory, mask, state = _setup(num_layers, attention)
    h_tilde, context, final = decoder(inputs, memory, mask, state)
    assert h_tilde.shape == (B, T, H) and context.shape == (B, T, D)
    assert len(final) == 2 * num_layers + 1 and all(s.shape == (B, H) for s in final)
    np.testing.assert_allclose(final[0], h_tilde[:, -1], rtol=1e-6)  # state[0] is h~_T


def test_step_by_step_equals_sequence():
    """The decoding path (step) and the training path (while_loop) compute the same thing."""
    decoder, inputs, memory, mask, state = _setup()
    h_tilde, context, final = decoder(inputs, memory, mask, state)
    keys = decoder.precompute(memory)
    step_state = state
    for t in range(T):
        h, c, step_state = decoder.step(inputs[:, t], step_state, memory, mask, keys)
        np.testing.assert_allclose(h, h_tilde[:, t], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c, context[:, t], rtol=1e-5, atol=1e-6)
    for a, b in zip(step_state, final):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_input_feeding_and_first_attentional_vector_matter():
    decoder, inputs, memory, mask, state = _setup()
    h1, _, _ = decoder(inputs, memory, mask, state)
    other = (state[0] + 1.0,) + state[1:]  # only h~_0 differs
    h2, _, _ = decoder(inputs, memory, mask, other)
    assert not np.allclose(h1[:, 0], h2[:, 0])


def test_padding_records_do_not_change_outputs():
    decoder, inputs, memory, mask, state = _setup()
    h_tilde, _, _ = decoder(inputs, memory, mask, state)
    more = tf.concat([memory, 10 * tf.random.normal([B, 2, D])], 1)
    h2, c2, _ = decoder(inputs, more, tf.pad(mask, [[0, 0], [0, 2]]), state)
    np.testing.assert_allclose(h2, h_tilde, rtol=1e-5, atol=1e-6)


def test_carry_step_returns_state_after_that_step():
    decoder, inputs, memory, mask, state = _setup()
    _, _, carried = decoder(inputs, memory, mask, state, carry_step=3)
    _, _, prefix_final = decoder(inputs[:, :3], memory, mask, state)
    for a, b in zip(carried, prefix_final):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_dropout_only_in_training():
    decoder, inputs, memory, mask, state = _setup(dropout=0.5)
    a, _, _ = decoder(inputs, memory, mask, state)
    b, _, _ = decoder(inputs, memory, mask, state)
    np.testing.assert_allclose(a, b)
    c, _, _ = decoder(inputs, memory, mask, state, training=True)
    assert not np.allclose(a, c)


def test_gradients_flow_through_the_loop():
    decoder, inputs, memory, mask, state = _setup()
    with tf.GradientTape() as tape:
        tape.watch([memory, state[0]])
        h_tilde, _, _ = decoder(inputs, memory, mask, state, training=True)
        loss = tf.reduce_sum(h_tilde[:, -1])
    grads = tape.gradient(loss, [memory, state[0]] + decoder.trainable_variables)
    assert all(g is not None and np.all(np.isfinite(g)) for g in grads)
    assert np.abs(grads[1]).sum() > 0  # last output depends on h~_0 through input feeding

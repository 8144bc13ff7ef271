"""Stacked LSTM decoder with Luong attention and input feeding (Luong et al. 2015).

Per step t (input feeding: the previous attentional vector is part of the input):

    x_t      = [emb(y_{t-1}); h~_{t-1}]
    h^l_t    = LSTM_l(h^{l-1}_t, h^l_{t-1}),  h^0_t = x_t      (2 layers in the thesis)
    a_t      = softmax_s score(h^L_t, r_s)                       (Luong eq. 7)
    c_t      = sum_s a_{t,s} r_s
    h~_t     = tanh(W_c [c_t; h^L_t])                            (Luong eq. 5)

Input feeding rules out a fused whole-sequence (cuDNN-style) LSTM, so this is
a lean per-step ``tf.while_loop``: the embedding part of the first layer's
gates (emb @ W_x + b) and the attention keys (W_a r_s) are computed once for
the whole sequence outside the loop; inside, each layer does one fused matmul
[h~_{t-1}; h_{t-1}] @ U (layer 1) or [h^{l-1}_t; h^l_{t-1}] @ U (layer l > 1).
Output projections, copy attention and the switch only need h~_t / c_t and
are done after the loop on [B, T, .] tensors.  With Luong attention the
training loop is ``fused_loop.attention_lstm_loop``, whose hand-written
backward pass is ~2x cheaper than autodiff of the while_loop; Bahdanau
attention uses the plain loop below.  ``step`` (decoding) runs the same cell.

Dropout: ordinary dropout on the embeddings; on h~_t (fed back and emitted)
and between LSTM layers one mask per sequence (variational, Gal & Ghahramani
2016), drawn outside the loop so the loop body stays deterministic.

State layout (flat tuple, also the decoding state): (h~, h_1, c_1, ..., h_L, c_L).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tablegen_tf.layers.attention import dense, make_attention
from tablegen_tf.layers.fused_loop import attention_lstm_loop


def lstm_gates(z, c):
    """Keras gate order (i, f, g, o) -> new (h, c)."""
    i, f, g, o = tf.split(z, 4, axis=-1)
    c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
    return tf.sigmoid(o) * tf.tanh(c), c


@keras.saving.register_keras_serializable(package="tablegen")
class AttentionLSTMDecoder(keras.layers.Layer):
    """call(inputs [B,T,E], memory [B,R,D], memory_mask [B,R], initial_state)
    -> (h_tilde [B,T,H], context [B,T,D], state)."""

    def __init__(self, units, num_layers=2, attention="general", dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.num_layers = num_layers
        self.attention_kind = attention
        self.dropout = dropout
        self.attention = make_attention(attention, units, name="attention")
        self.input_dropout = keras.layers.Dropout(dropout)
        self.mask_dropout = keras.layers.Dropout(dropout)

    def build(self, inputs_shape, memory_shape, memory_mask_shape=None, initial_state_shape=None):
        h = self.units
        self.input_kernel = self.add_weight(name="input_kernel", shape=(inputs_shape[-1], 4 * h))
        self.recurrent_kernels, self.biases = [], []
        for layer in range(self.num_layers):
            # layer 0: [h~_{t-1}; h_{t-1}];  layer l > 0: [h^{l-1}_t; h^l_{t-1}]
            self.recurrent_kernels.append(self.add_weight(name=f"kernel_{layer}", shape=(2 * h, 4 * h)))
            self.biases.append(
                self.add_weight(name=f"bias_{layer}", shape=(4 * h,), initializer=_unit_forget_bias))
        self.output_kernel = self.add_weight(name="output_kernel", shape=(memory_shape[-1] + h, h))
        self.attention.build((None, h), memory_shape)

    # --- pieces shared by training (call) and decoding (step) ---

    def precompute(self, memory):
        """Attention keys, computed once per example."""
        return self.attention.keys(memory)

    def _weights(self, dtype):
        """Weights read (and cast to the compute dtype) once, outside the time loop."""
        cast = lambda v: tf.cast(v, dtype)  # noqa: E731
        return {
            "input": cast(self.input_kernel),
            "recurrent": [cast(k) for k in self.recurrent_kernels],
            "bias": [cast(b) for b in self.biases],
            "output": cast(self.output_kernel),
        }

    def _cell(self, x_gates, state, weights, keys, memory, memory_mask, masks=None):
        """One decoder step from precomputed input gates -> (h~_t, c_t, new_state)."""
        h_tilde, layers = state[0], state[1:]
        below, new_layers = h_tilde, []
        for layer in range(self.num_layers):
            h, c = layers[2 * layer], layers[2 * layer + 1]
            z = tf.matmul(tf.concat([below, h], axis=-1), weights["recurrent"][layer])
            z = z + (x_gates if layer == 0 else weights["bias"][layer])
            h, c = lstm_gates(z, c)
            new_layers += [h, c]
            below = h if masks is None or layer == self.num_layers - 1 else h * masks[1]
        context, _ = self.attention.attend(below, keys, memory, memory_mask)
        h_tilde = tf.tanh(tf.matmul(tf.concat([context, below], axis=-1), weights["output"]))
        if masks is not None:
            h_tilde = h_tilde * masks[0]
        return h_tilde, context, (h_tilde, *new_layers)

    def _input_gates(self, inputs, weights):
        return dense(inputs, weights["input"]) + weights["bias"][0]

    def step(self, inputs, state, memory, memory_mask, keys):
        """Inference step: inputs [N,E] -> (h~ [N,H], context [N,D], new_state)."""
        weights = self._weights(inputs.dtype)
        x_gates = self._input_gates(inputs, weights)
        return self._cell(x_gates, tuple(state), weights, keys, memory, memory_mask)

    def _dropout_masks(self, batch_size, dtype, training):
        if not training or self.dropout == 0:
            return None
        ones = tf.ones([2, batch_size, self.units], dtype)
        return tf.unstack(self.mask_dropout(ones, training=True))

    # --- whole sequence (teacher forcing) ---

    def call(self, inputs, memory, memory_mask, initial_state, training=False, carry_step=None):
        """``carry_step`` (int scalar) -> also return the state after that many steps (TBPTT)
        instead of the final state."""
        inputs = self.input_dropout(inputs, training=training)
        weights = self._weights(inputs.dtype)
        x_gates = tf.transpose(self._input_gates(inputs, weights), [1, 0, 2])  # time-major
        keys = self.precompute(memory)
        masks = self._dropout_masks(tf.shape(inputs)[0], inputs.dtype, training)
        if self.attention_kind in ("general", "dot"):  # hand-written backward pass (fused_loop.py)
            h_tilde, context, state = attention_lstm_loop(
                x_gates, tuple(initial_state), weights["recurrent"], weights["bias"][1:], weights["output"],
                keys, memory, memory_mask, masks, carry_step,
            )
            return tf.transpose(h_tilde, [1, 0, 2]), tf.transpose(context, [1, 0, 2]), state
        cell = lambda x, state: self._cell(x, state, weights, keys, memory, memory_mask, masks)  # noqa: E731
        return _run_loop(cell, x_gates, tuple(initial_state), carry_step)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "num_layers": self.num_layers,
                "attention": self.attention_kind, "dropout": self.dropout}


def _unit_forget_bias(shape, dtype=None):
    h = shape[0] // 4
    return tf.concat([tf.zeros([h]), tf.ones([h]), tf.zeros([2 * h])], 0)


def _run_loop(cell, x_gates, state, carry_step):
    steps = tf.shape(x_gates)[0]
    inputs_ta = tf.TensorArray(x_gates.dtype, size=steps).unstack(x_gates)
    h_ta = tf.TensorArray(x_gates.dtype, size=steps)
    ctx_ta = tf.TensorArray(x_gates.dtype, size=steps)
    carried = state

    def body(t, state, h_ta, ctx_ta, carried):
        h_tilde, context, state = cell(inputs_ta.read(t), state)
        if carry_step is not None:
            take = tf.equal(t + 1, carry_step)
            carried = tuple(tf.where(take, n, o) for n, o in zip(state, carried))
        return t + 1, state, h_ta.write(t, h_tilde), ctx_ta.write(t, context), carried

    _, state, h_ta, ctx_ta, carried = tf.while_loop(
        lambda t, *_: t < steps, body, (tf.constant(0), state, h_ta, ctx_ta, carried),
        maximum_iterations=steps,  # lets XLA size the TensorArrays
    )
    outputs = [tf.transpose(ta.stack(), [1, 0, 2]) for ta in (h_ta, ctx_ta)]
    return outputs[0], outputs[1], carried if carry_step is not None else state

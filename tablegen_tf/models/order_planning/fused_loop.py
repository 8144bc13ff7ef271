"""The order-planning decoder's time loop (teacher forcing) with a hand-written backward pass.

Autodiff of the plain loop (``OrderPlanning.decode_sequence``) computes, at every step, the
full gradient of each loop invariant it reads (the table's link sub-matrix L [B,C,C], field
embeddings, encoder states, the kernels) and sums them over the steps with AddN. Here the
forward loop stores what the backward needs, the reverse loop carries the state gradients
only, and each loop invariant's gradient is ONE batched matmul over all steps afterwards
(as ``tablegen_tf.layers.fused_loop`` does for the encoder-decoder's loop). Same maths as
``OrderPlanning._cell`` for the paper's full model (hybrid attention with the self-adaptive
gate, no field feedback; float32); the model test checks the gradients against autodiff.

Per step (content attention alpha^c_t, eq. 5-7, and the y_{t-1} blocks computed before):
    s = alpha_{t-1} L;  alpha^l = softmax(s) (masked)              (eq. 8-9)
    e = alpha^l F;  z = sigmoid(h w_h + e w_f + g_t);  z~ = 0.2 z + 0.5     (eq. 10)
    alpha = z~ alpha^c + (1 - z~) alpha^l                          (eq. 11)
    v = alpha M;  x = tanh(v W_a + d_t)                            (eq. 12-13)
    i, f, g, o = gates([x; h] U + b);  c = f c + i g;  h = o tanh(c)
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.models.order_planning.layers import masked_softmax

# The saved per-step tensors of the forward loop.
_SAVED = ("xh", "i", "f", "g", "o", "c", "link", "alpha", "z", "v", "e")  # x_t is xh[..., :H]
# The per-step gradients the reverse loop writes.
_STEP_GRADS = ("dz", "dpre", "dgate", "dcontent", "dv", "de", "ds")


def dispatcher_lstm_loop(word_part, gate_part, content, state, weights, table):
    """Inputs time-major: word_part [T,B,H] (eq. 13's y block + b_d), gate_part [T,B]
    (eq. 10's y block + b), content [T,B,C] (alpha^c, float32); state (h, c, alpha) [B,H],
    [B,H], [B,C]; weights (w_h [H,1], w_f [Df,1], W_a [H,H], U [2H,4H], b [4H]); table
    (links [B,C,C], mask [B,C] bool, fields [B,C,Df], memory [B,C,H]).
    -> (h' [T,B,H], alpha [T,B,C], final state (h, c, alpha))."""
    links, mask, fields, memory = table

    @tf.custom_gradient
    def run(word_part, gate_part, content, h0, c0, a0, w_h, w_f, w_a, kernel, bias, links, fields, memory):
        inputs = dict(word_part=word_part, gate_part=gate_part, content=content)
        weights = dict(w_h=w_h, w_f=w_f, w_a=w_a, kernel=kernel, bias=bias)
        table = dict(links=links, mask=mask, fields=fields, memory=memory)
        saved, states, final = _forward(inputs, (h0, c0, a0), weights, table)

        def grad(d_states, d_alpha, dh, dc, da):
            return _backward(inputs, (h0, c0, a0), weights, table, saved, d_states, d_alpha, (dh, dc, da))

        return (states, saved["alpha"], *final), grad

    states, alpha, *final = run(word_part, gate_part, content, *state, *weights, links, fields, memory)
    return states, alpha, tuple(final)


def _forward(inputs, state, weights, table):
    steps = tf.shape(inputs["word_part"])[0]
    reads = {n: tf.TensorArray(x.dtype, size=steps, element_shape=x.shape[1:]).unstack(x)
             for n, x in inputs.items()}
    arrays = {n: tf.TensorArray(tf.float32, size=steps) for n in _SAVED + ("h",)}

    def body(t, state, arrays):
        h, c, previous = state
        link = masked_softmax(_row_times(previous, table["links"]), table["mask"])  # eq. 8-9
        e = _row_times(link, table["fields"])
        z = tf.sigmoid(tf.matmul(h, weights["w_h"])[:, 0] + tf.matmul(e, weights["w_f"])[:, 0]
                       + reads["gate_part"].read(t))  # eq. 10
        gate = (0.2 * z + 0.5)[:, None]
        alpha = gate * reads["content"].read(t) + (1.0 - gate) * link  # eq. 11
        v = _row_times(alpha, table["memory"])  # eq. 12
        x = tf.tanh(tf.matmul(v, weights["w_a"]) + reads["word_part"].read(t))  # eq. 13
        xh = tf.concat([x, h], -1)
        i, f, g, o = tf.split(tf.matmul(xh, weights["kernel"]) + weights["bias"], 4, axis=-1)
        i, f, g, o = tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)
        c = f * c + i * g
        h = o * tf.tanh(c)
        values = dict(xh=xh, i=i, f=f, g=g, o=o, c=c, link=link, alpha=alpha, z=z, v=v, e=e, h=h)
        return t + 1, (h, c, alpha), {n: a.write(t, values[n]) for n, a in arrays.items()}

    _, final, arrays = tf.while_loop(lambda t, *_: t < steps, body, (0, tuple(state), arrays),
                                     maximum_iterations=steps)
    saved = {n: a.stack() for n, a in arrays.items()}
    return saved, saved.pop("h"), list(final)


def _backward(inputs, state, weights, table, saved, d_states, d_alpha, d_final):
    """-> gradients of ``run``'s inputs, in order (None for nothing)."""
    d_states = tf.zeros_like(saved["c"]) if d_states is None else d_states
    d_alpha = tf.zeros_like(saved["alpha"]) if d_alpha is None else d_alpha
    carry = tuple(tf.zeros_like(s) if d is None else d for s, d in zip(state, d_final))
    c_prev = tf.concat([state[1][None], saved["c"][:-1]], 0)
    hidden = state[0].shape[-1]
    steps = tf.shape(saved["c"])[0]
    arrays = {n: tf.TensorArray(tf.float32, size=steps) for n in _STEP_GRADS}
    # Loop invariants transposed once (a transpose_b operand is transposed at every call).
    kernel_t, w_a_t = tf.transpose(weights["kernel"]), tf.transpose(weights["w_a"])
    w_h_row, w_f_row = tf.transpose(weights["w_h"]), tf.transpose(weights["w_f"])

    def body(t, carry, arrays):
        dh, dc, da = carry
        dh = dh + d_states[t]
        i, f, g, o, c = (saved[n][t] for n in ("i", "f", "g", "o", "c"))
        tc = tf.tanh(c)
        dc = dc + dh * o * (1 - tc * tc)
        dz = tf.concat([dc * g * i * (1 - i), dc * c_prev[t] * f * (1 - f), dc * i * (1 - g * g),
                        dh * tc * o * (1 - o)], -1)
        dx, dh_prev = tf.split(tf.matmul(dz, kernel_t), [hidden, hidden], axis=-1)
        x = saved["xh"][t, :, :hidden]
        dpre = dx * (1 - x * x)
        dv = tf.matmul(dpre, w_a_t)
        dalpha = d_alpha[t] + da + tf.linalg.matvec(table["memory"], dv)
        link, z = saved["link"][t], saved["z"][t]
        gate = (0.2 * z + 0.5)[:, None]
        dgate = 0.2 * tf.reduce_sum(dalpha * (inputs["content"][t] - link), -1) * z * (1 - z)  # [B]
        dh_prev = dh_prev + dgate[:, None] * w_h_row
        de = dgate[:, None] * w_f_row
        dlink = (1.0 - gate) * dalpha + tf.linalg.matvec(table["fields"], de)
        ds = link * (dlink - tf.reduce_sum(link * dlink, -1, keepdims=True))  # softmax backward
        da_prev = tf.linalg.matvec(table["links"], ds)
        values = dict(dz=dz, dpre=dpre, dgate=dgate, dcontent=gate * dalpha, dv=dv, de=de, ds=ds)
        return t - 1, (dh_prev, dc * f, da_prev), {n: a.write(t, values[n]) for n, a in arrays.items()}

    _, carry, arrays = tf.while_loop(lambda t, *_: t >= 0, body, (steps - 1, carry, arrays),
                                     maximum_iterations=steps)
    grads = {n: a.stack() for n, a in arrays.items()}
    return [grads["dpre"], grads["dgate"], grads["dcontent"], *carry,
            *_weight_gradients(saved, grads, state), *_table_gradients(saved, grads, state)]


def _row_times(row, matrix):
    """row [B,C] x matrix [B,C,D] -> [B,D] (a batched matmul: no transposed operand)."""
    return tf.matmul(row[:, None, :], matrix)[:, 0]


def _flat(x):
    return tf.reshape(x, [-1, x.shape[-1]])


def _weight_gradients(saved, grads, state):
    """dW = sum_t in_t^T d_t, one matmul over all steps: (w_h, w_f, W_a, U, b)."""
    h_prev = saved["xh"][:, :, state[0].shape[-1]:]  # [x_t; h_{t-1}]
    dgate = tf.reshape(grads["dgate"], [-1, 1])
    return [tf.matmul(_flat(h_prev), dgate, transpose_a=True),
            tf.matmul(_flat(saved["e"]), dgate, transpose_a=True),
            tf.matmul(_flat(saved["v"]), _flat(grads["dpre"]), transpose_a=True),
            tf.matmul(_flat(saved["xh"]), _flat(grads["dz"]), transpose_a=True),
            tf.reduce_sum(grads["dz"], axis=[0, 1])]


def _table_gradients(saved, grads, state):
    """(links, fields, memory): sum_t of outer products, one batched matmul each."""
    previous = tf.concat([state[2][None], saved["alpha"][:-1]], 0)  # alpha_{t-1}
    return [_sum_over_time(previous, grads["ds"]),  # dL[j, i] = sum_t alpha_{t-1, j} ds_{t, i}
            _sum_over_time(saved["link"], grads["de"]),
            _sum_over_time(saved["alpha"], grads["dv"])]


def _sum_over_time(weights, values):
    """sum_t weights[t,b,c] values[t,b,d] -> [B,C,D]."""
    return tf.matmul(tf.transpose(weights, [1, 2, 0]), tf.transpose(values, [1, 0, 2]))

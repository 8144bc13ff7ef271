"""The input-feeding attention-LSTM time loop with a hand-written backward pass.

Autodiff of a ``tf.while_loop`` costs ~4x its forward pass on CPU: every
iteration pushes/pops each intermediate on TensorLists and adds the full
gradient of every loop-invariant tensor (recurrent kernels, attention keys,
memory) with an AddN.  Here the forward loop stores only what the backward
needs; the reverse loop propagates state gradients only, and the gradients of
the loop invariants are computed after it, each as ONE large matmul/einsum over
all steps (dW = sum_t x_t^T dz_t = X^T DZ).  Same maths as
``AttentionLSTMDecoder._cell`` (Luong general/dot attention); the layer test
checks gradients against autodiff of the plain loop.

Per step (layer 0 input gates precomputed: x_gates_t = emb_t W_x + b_0):
    z_l = [below_l; h_l] U_l (+ b_l for l > 0), below_0 = h~_{t-1}, below_l = m1 * h_{l-1}
    i, f, g, o = sig(z_i), sig(z_f), tanh(z_g), sig(z_o);  c_l = f c_l + i g;  h_l = o tanh(c_l)
    p = softmax(h_L . keys) (masked), ctx = sum_r p_r memory_r
    h~ = m0 * tanh([ctx; h_L] W_out)
"""

from __future__ import annotations

import tensorflow as tf

from tablegen_tf.constants import MASKED_LOGIT
from tablegen_tf.layers.attention import dot_scores, weighted_sum


def attention_lstm_loop(x_gates, state, recurrent, biases, output_kernel, keys, memory, memory_mask,
                        masks=None, carry_step=None):
    """x_gates [T,B,4H] time-major; state (h~, h_1, c_1, ..., h_L, c_L) [B,H]; recurrent: L
    kernels [2H,4H]; biases: L-1 biases of layers >= 1; output_kernel [D+H,H]; keys [B,R,H];
    memory [B,R,D]; memory_mask [B,R] bool; masks None or (m_htilde, m_between) [B,H] (not
    differentiated).  -> (h_tilde [T,B,H], context [T,B,D], final state), or with
    ``carry_step`` the state after that many steps instead (TBPTT; no gradient flows
    back from it)."""
    layers = len(recurrent)
    sizes = [1, len(state), layers, layers - 1, 1, 1, 1]

    @tf.custom_gradient
    def run(*flat):
        parts = _split(flat, sizes)
        saved, final = _forward(parts, memory_mask, masks, layers, carry_step)
        outputs = [saved["h_tilde"], saved["ctx"], *final]

        def grad(*upstream):
            if carry_step is not None:  # the carried state is not differentiated
                upstream = list(upstream[:2]) + [None] * len(parts["state"])
            return _backward(parts, saved, upstream, memory_mask, masks, layers)

        return outputs, grad

    flat = [x_gates, *state, *recurrent, *biases, output_kernel, keys, memory]
    h_tilde, context, *final = run(*flat)
    return h_tilde, context, tuple(final)


def _split(flat, sizes):
    parts, start = [], 0
    for size in sizes:
        parts.append(list(flat[start:start + size]))
        start += size
    x_gates, state, recurrent, biases, output_kernel, keys, memory = parts
    return dict(x_gates=x_gates[0], state=state, recurrent=recurrent, biases=biases,
                output_kernel=output_kernel[0], keys=keys[0], memory=memory[0])


def _gates(z):
    i, f, g, o = tf.split(z, 4, axis=-1)
    return tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)


def _attention_probs(query, keys, memory_mask):
    scores = tf.cast(dot_scores(query, keys), tf.float32)
    return tf.cast(tf.nn.softmax(tf.where(memory_mask, scores, MASKED_LOGIT)), query.dtype)


def _forward(parts, memory_mask, masks, layers, carry_step):
    x_gates, memory, keys = parts["x_gates"], parts["memory"], parts["keys"]
    steps = tf.shape(x_gates)[0]
    names = [f"{n}{l}" for l in range(layers) for n in ("xh", "gates", "c")] + ["p", "q", "hr", "ctx"]
    arrays = {n: tf.TensorArray(x_gates.dtype, size=steps) for n in names}
    inputs = tf.TensorArray(x_gates.dtype, size=steps).unstack(x_gates)

    def body(t, state, carried, arrays):
        below, new_state, arrays = state[0], [], dict(arrays)
        for l in range(layers):
            h, c = state[1 + 2 * l], state[2 + 2 * l]
            xh = tf.concat([below, h], axis=-1)
            z = tf.matmul(xh, parts["recurrent"][l]) + (inputs.read(t) if l == 0 else parts["biases"][l - 1])
            i, f, g, o = _gates(z)
            c = f * c + i * g
            h = o * tf.tanh(c)
            arrays.update({f"xh{l}": arrays[f"xh{l}"].write(t, xh), f"c{l}": arrays[f"c{l}"].write(t, c),
                           f"gates{l}": arrays[f"gates{l}"].write(t, tf.concat([i, f, g, o], -1))})
            new_state += [h, c]
            below = h if masks is None or l == layers - 1 else h * masks[1]
        p = _attention_probs(below, keys, memory_mask)
        ctx = weighted_sum(p, memory)
        hr = tf.tanh(tf.matmul(tf.concat([ctx, below], -1), parts["output_kernel"]))
        h_tilde = hr if masks is None else hr * masks[0]
        for name, value in (("p", p), ("q", below), ("hr", hr), ("ctx", ctx)):
            arrays[name] = arrays[name].write(t, value)
        new_state = (h_tilde, *new_state)
        if carry_step is not None:
            carried = tuple(tf.where(tf.equal(t + 1, carry_step), n, o) for n, o in zip(new_state, carried))
        return t + 1, new_state, carried, arrays

    state = tuple(parts["state"])
    _, final, carried, arrays = tf.while_loop(
        lambda t, *_: t < steps, body, (0, state, state, arrays), maximum_iterations=steps
    )
    final = final if carry_step is None else carried
    saved = {name: array.stack() for name, array in arrays.items()}
    saved["h_tilde"] = saved["hr"] if masks is None else saved["hr"] * masks[0][None]
    return saved, list(final)


def _backward(parts, saved, upstream, memory_mask, masks, layers):
    d_htilde_seq, d_ctx_seq = (tf.zeros_like(saved[k]) if g is None else g
                               for k, g in zip(("h_tilde", "ctx"), upstream[:2]))
    carry = tuple(tf.zeros_like(s) if g is None else g for s, g in zip(parts["state"], upstream[2:]))
    c_prev = [tf.concat([parts["state"][2 + 2 * l][None], saved[f"c{l}"][:-1]], 0) for l in range(layers)]
    steps = tf.shape(saved["hr"])[0]
    split = [parts["memory"].shape[-1], saved["hr"].shape[-1]]  # [ctx; h_L]
    names = [f"dz{l}" for l in range(layers)] + ["da", "ds", "dctx"]
    arrays = {n: tf.TensorArray(saved["hr"].dtype, size=steps) for n in names}
    # The kernels transposed once, here: a loop-invariant ``transpose_b=True`` operand is
    # transposed again at every step (oneDNN; profiled: the recurrent one took 2.2x the
    # forward matmul of the same size).
    output_t = tf.transpose(parts["output_kernel"])
    recurrent_t = [tf.transpose(kernel) for kernel in parts["recurrent"]]

    def body(t, carry, arrays):
        arrays = dict(arrays)
        d_ht = d_htilde_seq[t] + carry[0]
        d_hr = d_ht if masks is None else d_ht * masks[0]
        hr = saved["hr"][t]
        da = d_hr * (1 - hr * hr)
        d_ctx, d_below = tf.split(tf.matmul(da, output_t), split, axis=-1)
        d_ctx = d_ctx + d_ctx_seq[t]
        ds, dq = _attention_backward(saved["p"][t], d_ctx, parts["memory"], parts["keys"])
        d_below = d_below + dq
        new_carry = [None] * len(carry)
        for l in reversed(range(layers)):
            dz, d_below, new_carry[1 + 2 * l], new_carry[2 + 2 * l] = _lstm_backward(
                saved, l, t, c_prev[l][t], d_below + carry[1 + 2 * l], carry[2 + 2 * l], recurrent_t[l]
            )
            arrays[f"dz{l}"] = arrays[f"dz{l}"].write(t, dz)
            if l > 0 and masks is not None:
                d_below = d_below * masks[1]
        new_carry[0] = d_below
        for name, value in (("da", da), ("ds", ds), ("dctx", d_ctx)):
            arrays[name] = arrays[name].write(t, value)
        return t - 1, tuple(new_carry), arrays

    _, carry, arrays = tf.while_loop(
        lambda t, *_: t >= 0, body, (steps - 1, carry, arrays), maximum_iterations=steps
    )
    grads = {name: array.stack() for name, array in arrays.items()}
    return _parameter_gradients(parts, saved, grads, carry, layers)


def _attention_backward(p, d_ctx, memory, keys):
    """-> (d_scores [B,R], d_query [B,H]) for ctx = sum_r p_r memory_r, p = softmax(q . keys)."""
    dp = tf.cast(tf.linalg.matvec(memory, d_ctx), tf.float32)
    p32 = tf.cast(p, tf.float32)
    ds = tf.cast(p32 * (dp - tf.reduce_sum(p32 * dp, axis=-1, keepdims=True)), p.dtype)
    return ds, weighted_sum(ds, keys)


def _lstm_backward(saved, l, t, c_prev, dh, dc, kernel_t):
    """-> (dz [B,4H], d_below [B,H], dh_prev [B,H], dc_prev [B,H]); ``kernel_t`` [4H,2H]."""
    i, f, g, o = tf.split(saved[f"gates{l}"][t], 4, axis=-1)
    tc = tf.tanh(saved[f"c{l}"][t])
    dc = dc + dh * o * (1 - tc * tc)
    dz = tf.concat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g * g),
                    dh * tc * o * (1 - o)], axis=-1)
    d_xh = tf.matmul(dz, kernel_t)
    d_below, dh_prev = tf.split(d_xh, 2, axis=-1)
    return dz, d_below, dh_prev, dc * f


def _parameter_gradients(parts, saved, grads, carry, layers):
    def flat(x):
        return tf.reshape(x, [-1, x.shape[-1]])

    d_recurrent = [tf.matmul(flat(saved[f"xh{l}"]), flat(grads[f"dz{l}"]), transpose_a=True)
                   for l in range(layers)]
    d_biases = [tf.reduce_sum(grads[f"dz{l}"], axis=[0, 1]) for l in range(1, layers)]
    cat = tf.concat([saved["ctx"], saved["q"]], axis=-1)
    d_output = tf.matmul(flat(cat), flat(grads["da"]), transpose_a=True)
    d_keys = _sum_over_time(grads["ds"], saved["q"])
    d_memory = _sum_over_time(saved["p"], grads["dctx"])
    return [grads["dz0"], *carry, *d_recurrent, *d_biases, d_output, d_keys, d_memory]


def _sum_over_time(weights, values):
    """sum_t weights[t,b,r] values[t,b,d] -> [B,R,D] (one batched matmul, batch B)."""
    return tf.matmul(tf.transpose(weights, [1, 2, 0]), tf.transpose(values, [1, 0, 2]))

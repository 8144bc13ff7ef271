"""Truncated backpropagation through time (Williams & Peng 1990; thesis sec. TBPTT).

Thesis: a sequence of N steps is cut into (N - t2) / t1 + 1 chunks (one more if
t1 does not divide N - t2); chunk k runs ordinary BPTT over steps
[k t1, k t1 + t2) and the state after step k t1 + t1 (i.e. at the start of the
next chunk) is fed, without gradient, as the next chunk's initial state.

When t2 > t1 chunks overlap.  The thesis does not say which chunk's loss a
step belongs to; we count every step exactly once: chunk 0 owns [0, t2),
chunk k > 0 owns its last t1 steps [k t1 + t2 - t1, k t1 + t2) -- which is
Williams & Peng's BPTT(h = t2, h' = t1): every t1 steps the errors of the
last t1 steps are propagated back t2 steps.  The forward pass is exact (the
carried state equals the full-sequence state), only gradients are truncated.

``tbptt_loss_and_gradients`` drives any model with the attributes
``hidden_size``, ``num_layers`` and the methods ``encode(batch, training,
use_gold_plan)``, ``initial_decoding_state(memory)``, ``decode_sequence(memory,
target_in, state, training, carry_step)``, ``token_nll(outputs, memory,
target_out, copy_mask)`` and ``auxiliary_loss(memory, batch)``
(tablegen_tf.models.encdec implements them).  The encoder is recomputed per
chunk (it has no recurrence) so each chunk is an independent tape and memory
stays bounded by one chunk.
"""

from __future__ import annotations

import tensorflow as tf


def tbptt_chunks(n, t1, t2):
    """[(start, end)] of the chunks of an n-step sequence."""
    if not 0 < t1 <= t2:
        raise ValueError(f"need 0 < t1 <= t2, got t1={t1}, t2={t2}")
    if n <= t2:
        return [(0, n)]
    count = (n - t2) // t1 + 1 + int((n - t2) % t1 != 0)
    return [(k * t1, min(k * t1 + t2, n)) for k in range(count)]


def tbptt_loss_spans(n, t1, t2):
    """[(loss_start, loss_end)] per chunk: the steps whose loss the chunk owns."""
    return [(start if k == 0 else start + t2 - t1, end)
            for k, (start, end) in enumerate(tbptt_chunks(n, t1, t2))]


def tbptt_loss_and_gradients(model, batch, t1, t2, training=True):
    """Masked-mean token NLL (+ auxiliary loss) and its TBPTT gradients.

    Returns (loss, gradients aligned with model.trainable_variables).  With one
    chunk this equals full BPTT of ``model.compute_loss_from_batch``.  The chunks
    run in a tf.while_loop, so the target length may be unknown at trace time
    (bucketed batches): one trace serves every length.
    """
    n = tf.shape(batch["target_in"])[1]
    count = 1 + tf.maximum(0, (n - t2 + t1 - 1) // t1)  # = len(tbptt_chunks(n, t1, t2))
    tokens = tf.maximum(tf.reduce_sum(tf.cast(batch["target_mask"], tf.float32)), 1.0)
    variables = model.trainable_variables
    batch_size = tf.shape(batch["target_in"])[0]
    state = tuple(tf.zeros([batch_size, model.hidden_size], model.compute_dtype)
                  for _ in range(2 * model.num_layers + 1))

    def body(k, total, grads, state):
        with tf.GradientTape() as tape:
            loss, state = _chunk_loss(model, batch, k, state, (n, t1, t2), tokens, training)
        chunk_grads = tape.gradient(loss, variables)
        grads = [g if c is None else g + tf.convert_to_tensor(c) for g, c in zip(grads, chunk_grads)]
        return k + 1, total + loss, grads, tuple(tf.stop_gradient(s) for s in state)

    grads = [tf.zeros_like(v) for v in variables]
    _, total, grads, _ = tf.while_loop(
        lambda k, *_: k < count, body, (tf.constant(0), tf.constant(0.0), grads, state)
    )
    return total, grads


def _chunk_loss(model, batch, k, carried, sizes, tokens, training):
    """Loss (summed over the steps chunk k owns, / all tokens) and the state to carry."""
    n, t1, t2 = sizes
    start = k * t1
    end = tf.minimum(start + t2, n)
    loss_start = tf.where(k == 0, 0, start + t2 - t1)
    first = tf.equal(k, 0)
    memory = model.encode(batch, training=training, use_gold_plan=True)
    # chunk 0 starts from the encoder's initial state (and owns the auxiliary/plan loss)
    state = tuple(tf.where(first, i, c) for i, c in zip(model.initial_decoding_state(memory), carried))
    aux = tf.where(first, model.auxiliary_loss(memory, batch), 0.0)
    outputs, next_state = model.decode_sequence(
        memory, batch["target_in"][:, start:end], state, training=training, carry_step=t1
    )
    nll = model.token_nll(outputs, memory, batch["target_out"][:, start:end], batch["copy_mask"][:, start:end])
    owned = tf.range(start, end) >= loss_start
    mask = tf.cast(batch["target_mask"][:, start:end] & owned[None, :], nll.dtype)
    return aux + tf.reduce_sum(nll * mask) / tokens, next_state

import keras
import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.layers.tbptt import tbptt_chunks, tbptt_loss_and_gradients, tbptt_loss_spans
from tablegen_tf.layers.testing import SIZES, random_batch


def test_chunk_count_follows_thesis():
    assert tbptt_chunks(10, 3, 4) == [(0, 4), (3, 7), (6, 10)]  # (10-4)/3 + 1 = 3
    assert tbptt_chunks(11, 3, 4) == [(0, 4), (3, 7), (6, 10), (9, 11)]  # + 1: not divisible
    assert tbptt_chunks(4, 3, 8) == [(0, 4)]
    assert tbptt_chunks(9, 3, 3) == [(0, 3), (3, 6), (6, 9)]
    with pytest.raises(ValueError):
        tbptt_chunks(9, 4, 3)


@pytest.mark.parametrize("n,t1,t2", [(10, 3, 4), (11, 3, 4), (23, 5, 9), (9, 3, 3), (4, 2, 8)])
def test_every_step_is_counted_once(n, t1, t2):
    owned = [s for start, end in tbptt_loss_spans(n, t1, t2) for s in range(start, end)]
    assert owned == list(range(n))
    for (start, end), (loss_start, _) in zip(tbptt_chunks(n, t1, t2), tbptt_loss_spans(n, t1, t2)):
        assert start <= loss_start < end


def _model(name="encdec-copy"):
    from tablegen_tf.models import build_model

    keras.utils.set_random_seed(0)
    config = dict(hidden_size=8, num_layers=2, word_dim=6, field_dim=3, value_dim=4, position_dim=2,
                  entity_dim=2, group_dim=2, **({"max_plan_length": 4} if name == "ncp" else {}))
    return build_model(name, config, SIZES, {"max_position": 5})


def _full(model, batch):
    with tf.GradientTape() as tape:
        loss = model.compute_loss_from_batch(batch, training=False)
    grads = tape.gradient(loss, model.trainable_variables)
    variables = model.trainable_variables
    return loss, [tf.zeros(v.shape) if g is None else tf.convert_to_tensor(g) for g, v in zip(grads, variables)]


@pytest.mark.parametrize("name", ["encdec-copy", "ncp"])
def test_one_chunk_equals_full_bptt(name):
    model, batch = _model(name), random_batch(target_length=7)
    loss, grads = _full(model, batch)
    t_loss, t_grads = tbptt_loss_and_gradients(model, batch, t1=7, t2=7, training=False)
    np.testing.assert_allclose(t_loss, loss, rtol=1e-6)
    for g, t in zip(grads, t_grads):
        np.testing.assert_allclose(t, g, rtol=1e-5, atol=1e-7)


def test_chunks_give_the_exact_loss_and_truncated_gradients():
    model, batch = _model(), random_batch(target_length=7)
    loss, grads = _full(model, batch)
    t_loss, t_grads = tbptt_loss_and_gradients(model, batch, t1=2, t2=3, training=False)
    np.testing.assert_allclose(t_loss, loss, rtol=1e-5)  # forward pass is exact
    assert all(np.all(np.isfinite(g)) for g in t_grads)
    assert not all(np.allclose(g, t, atol=1e-7) for g, t in zip(grads, t_grads))


def test_unknown_length_under_tf_function_matches_eager():
    model, batch = _model(), random_batch(target_length=7)
    eager_loss, eager_grads = tbptt_loss_and_gradients(model, batch, t1=2, t2=3, training=False)
    spec = {k: tf.TensorSpec([None] * v.shape.rank, v.dtype) for k, v in batch.items()}
    traced = tf.function(lambda b: tbptt_loss_and_gradients(model, b, 2, 3, training=False), input_signature=[spec])
    loss, grads = traced(batch)
    np.testing.assert_allclose(loss, eager_loss, rtol=1e-6)
    for a, b in zip(grads, eager_grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    shorter = {k: (v[:, :5] if k.startswith("target") or k == "copy_mask" else v) for k, v in batch.items()}
    assert np.isfinite(traced(shorter)[0])  # same trace, another length

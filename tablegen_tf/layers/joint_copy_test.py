import math

import keras
import numpy as np
import tensorflow as tf

from tablegen_tf.layers.joint_copy import JointCopy, extended_log_probs, joint_copy_nll, scatter_rows, smoothed_nll
from tablegen_tf.layers.testing import SIZES, make_train_step

V = 6


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def test_loss_equals_hand_computed_toy_case():
    logits = np.log(np.array([[[0.1, 0.1, 0.2, 0.1, 0.4, 0.1]] * 3], np.float32))  # P_vocab
    copy_probs = np.array([[[0.5, 0.3, 0.2]] * 3], np.float32)  # a_copy over 3 records
    switch = np.array([[0.0, 1.0, -2.0]], np.float32)
    labels = np.array([[4, 1, 1]])  # in vocab; OOV copyable; OOV not copyable
    copy_mask = np.array([[[1, 0, 1], [0, 1, 0], [0, 0, 0]]], np.float32)
    nll = joint_copy_nll(tf.constant(logits), tf.constant(labels), tf.constant(switch),
                         tf.constant(np.log(copy_probs)), tf.constant(copy_mask))
    p0, p1, p2 = _sigmoid(0.0), _sigmoid(1.0), _sigmoid(-2.0)
    expected = [
        -math.log(p0 * 0.4 + (1 - p0) * (0.5 + 0.2)),  # both paths, copies marginalised
        -math.log((1 - p1) * 0.3),  # <unk> label that can be copied: no vocab credit
        -math.log(p2 * 0.1),  # <unk> label with nothing to copy: ordinary <unk> target
    ]
    np.testing.assert_allclose(nll[0], expected, rtol=1e-5)


def test_loss_is_stable_for_extreme_switch():
    nll = joint_copy_nll(tf.zeros([1, 1, V]), tf.constant([[4]]), tf.constant([[80.0]]),
                         tf.math.log(tf.constant([[[1.0, 0.0]]]) + 1e-30), tf.constant([[[1.0, 0.0]]]))
    assert np.isfinite(nll.numpy()).all()
    np.testing.assert_allclose(nll, [[math.log(V)]], rtol=1e-4)


def test_extended_distribution_folds_in_vocab_copies():
    vocab = tf.math.log(tf.fill([1, V], 1.0 / V))
    copy = tf.constant([[0.5, 0.25, 0.25]])
    values = tf.constant([[4, 1, 0]])  # in vocab, OOV, padding
    out = tf.exp(extended_log_probs(vocab, tf.constant([0.0]), copy, values, tf.constant([[0, 1, 2]]), 3))
    expected = np.full(V + 3, 0.5 / V)
    expected[V:] = 0.0
    expected[4] += 0.5 * 0.5
    expected[V + 1] += 0.5 * 0.25
    expected[V + 2] += 0.5 * 0.25  # padding record (its attention is ~0 in practice)
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-7)


def test_scatter_rows():
    out = scatter_rows(tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), tf.constant([[0, 2, 0], [1, 1, 3]]), 4)
    np.testing.assert_allclose(out, [[4.0, 0.0, 2.0, 0.0], [0.0, 9.0, 0.0, 6.0]])


def test_layer_shapes():
    layer = JointCopy(4)
    copy_log_probs, switch = layer(tf.random.normal([2, 5, 4]), tf.random.normal([2, 5, 3]),
                                   tf.random.normal([2, 5, 2]), tf.random.normal([2, 7, 3]),
                                   tf.ones([2, 7], tf.bool))
    assert copy_log_probs.shape == (2, 5, 7) and switch.shape == (2, 5)
    np.testing.assert_allclose(tf.reduce_logsumexp(copy_log_probs, -1), 0.0, atol=1e-5)


def _copy_task(rng, batch_size, num_records=4):
    """Records: fields 2..5 in random order, values random in-vocab words except the
    "name" record (field 2) whose value is OOV (<unk> = 1).  Target: "w name </s>"."""
    fields = np.stack([rng.permutation(num_records) + 2 for _ in range(batch_size)])
    values = rng.integers(5, SIZES["words"], (batch_size, num_records))
    name = np.argmax(fields == 2, axis=1)
    values[np.arange(batch_size), name] = 1
    ones = np.ones_like(fields)
    target_out = np.tile([4, 1, 3], (batch_size, 1))
    copy_mask = np.zeros((batch_size, 3, num_records), np.float32)
    copy_mask[np.arange(batch_size), 1, name] = 1.0
    batch = dict(record_field=fields, record_value=values, record_pos_start=ones, record_pos_end=ones,
                 record_entity=2 * ones, record_group=2 * ones, record_mask=ones.astype(bool),
                 target_in=np.tile([2, 4, 1], (batch_size, 1)), target_out=target_out,
                 target_mask=np.ones((batch_size, 3), bool), copy_mask=copy_mask)
    dtype = lambda v: tf.int32 if v.dtype.kind == "i" else None  # noqa: E731  (CONTRACT dtypes)
    return {k: tf.constant(v, dtype(v)) for k, v in batch.items()}, name


def test_tiny_model_learns_to_copy_an_unseen_oov_token():
    from tablegen_tf.models import build_model

    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(0)
    model = build_model("encdec-copy", dict(hidden_size=16, num_layers=1, word_dim=8, field_dim=8,
                                            value_dim=4, position_dim=2), SIZES,
                        {"max_position": 3})
    optimizer = keras.optimizers.Adam(0.01)

    train_step = make_train_step(model, optimizer)

    for _ in range(200):
        loss = train_step(_copy_task(rng, 16)[0])
    assert float(loss) < 0.1
    batch, name = _copy_task(np.random.default_rng(123), 32)  # fresh tables: unseen names
    memory = model.encode(batch)
    step_fn = model.decoding_step_fn(memory)
    state = model.initial_decoding_state(memory)
    prev = tf.fill([32], 2)
    decoded = []
    for t in range(3):
        log_probs, state = step_fn(prev, tf.constant(t), state)
        prev = tf.argmax(log_probs, -1, output_type=tf.int32)
        decoded.append(prev.numpy())
    np.testing.assert_array_equal(decoded[0], 4)
    np.testing.assert_array_equal(decoded[1], SIZES["words"] + name)  # copy of the OOV record
    np.testing.assert_array_equal(decoded[2], 3)


def test_label_smoothing_adds_the_cross_entropy_to_a_uniform_vocabulary_target():
    p_vocab = np.array([[0.1, 0.1, 0.2, 0.1, 0.4, 0.1]], np.float32)
    nll = tf.constant([1.5])
    smoothed = smoothed_nll(nll, tf.constant(np.log(p_vocab) + 3.0), 0.1)  # logits: any offset
    uniform_ce = -np.mean(np.log(p_vocab))
    np.testing.assert_allclose(smoothed.numpy(), [0.9 * 1.5 + 0.1 * uniform_ce], rtol=1e-5)
    np.testing.assert_allclose(smoothed_nll(nll, tf.constant(np.log(p_vocab)), 0.0).numpy(), [1.5])

import keras
import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.layers.testing import SIZES, make_train_step, random_batch
from tablegen_tf.config import ConfigError
from tablegen_tf.models import build_model
from tablegen_tf.models.encdec import EncDec
from tablegen_tf.models.ncp import NCP

NAMES = ["encdec", "encdec-copy", "encdec-cs", "ncp"]
TINY = dict(hidden_size=8, num_layers=2, word_dim=6, field_dim=3, value_dim=4, position_dim=2,
            entity_dim=2, group_dim=2)
DATA = {"max_position": 5}


def _model(name, **overrides):
    keras.utils.set_random_seed(0)
    tiny = {**TINY, "max_plan_length": 4} if name == "ncp" else TINY
    return build_model(name, {**tiny, **overrides}, SIZES, DATA)


@pytest.mark.parametrize("name", NAMES)
def test_loss_is_finite_and_decreases(name):
    model, batch = _model(name, dropout=0.1), random_batch()
    optimizer = keras.optimizers.Adam(0.02)

    train_step = make_train_step(model, optimizer)

    losses = [float(train_step(batch)) for _ in range(15)]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.8 * losses[0]


@pytest.mark.parametrize("name", NAMES)
def test_training_loss_on_tokens_only_equals_the_masked_loss(name):
    """compute_loss_from_batch skips padding positions; loss and gradients are unchanged."""
    model, batch = _model(name), random_batch()
    assert not np.all(batch["target_mask"])  # the batch has padding to skip
    with tf.GradientTape(persistent=True) as tape:
        packed = model.compute_loss_from_batch(batch)
        masked = model.loss_from_predictions(batch, model(batch))
    np.testing.assert_allclose(packed, masked, rtol=1e-5)
    for a, b in zip(tape.gradient(packed, model.trainable_variables),
                    tape.gradient(masked, model.trainable_variables)):
        if a is not None or b is not None:
            np.testing.assert_allclose(tf.convert_to_tensor(a), tf.convert_to_tensor(b), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_step_fn_shapes_and_normalisation(name):
    model, batch = _model(name), random_batch()
    memory = model.encode(batch)
    beam = 2
    state = model.initial_decoding_state(memory)
    step_fn = model.decoding_step_fn(model.tile(memory, beam))
    state = tf.nest.map_structure(lambda x: tf.repeat(x, beam, axis=0), state)
    prev = tf.constant([2, 2, SIZES["words"], 5, SIZES["words"] + 1, 3])  # incl. copied ids
    log_probs, new_state = step_fn(prev, tf.constant(0), state)
    assert log_probs.shape == (6, SIZES["words"] + 6)
    np.testing.assert_allclose(tf.reduce_logsumexp(log_probs, -1), 0.0, atol=1e-5)
    assert tf.nest.map_structure(lambda x: x.shape, new_state) == tf.nest.map_structure(lambda x: x.shape, state)
    if name == "encdec":
        assert np.all(np.isneginf(log_probs[:, SIZES["words"]:]))


@pytest.mark.parametrize("name", NAMES)
def test_step_fn_agrees_with_training_loss(name):
    """Feeding the gold prefix to step_fn gives the training marginal of each label
    (except copyable <unk> labels, whose copy mass stays per record in V + r)."""
    model, batch = _model(name), random_batch()
    predictions = model(batch)
    nll = model.token_nll(predictions["outputs"], predictions["memory"], batch["target_out"], batch["copy_mask"])
    memory = model.encode(batch, use_gold_plan=True)
    state = model.initial_decoding_state(memory)
    step_fn = model.decoding_step_fn(memory)
    oov_copy = (batch["target_out"] == 1) & (tf.reduce_sum(batch["copy_mask"], -1) > 0)
    check = batch["target_mask"] & ~oov_copy
    for t in range(batch["target_in"].shape[1]):
        log_probs, state = step_fn(batch["target_in"][:, t], tf.constant(t), state)
        gold = tf.gather(log_probs, batch["target_out"][:, t], batch_dims=1)
        np.testing.assert_allclose(tf.boolean_mask(-gold, check[:, t]), tf.boolean_mask(nll[:, t], check[:, t]),
                                   rtol=1e-4, atol=1e-5)


def test_feedback_maps_copied_ids_to_record_values():
    model, batch = _model("encdec-copy"), random_batch()
    v = SIZES["words"]
    ids = model.feedback_ids(tf.constant([7, v, v + 2]), batch["record_value"])
    np.testing.assert_array_equal(ids, [7, batch["record_value"][1, 0], batch["record_value"][2, 2]])


def test_ncp_inference_plans_then_decodes():
    model, batch = _model("ncp"), random_batch()
    memory = model.encode(batch)
    # the shared greedy search stops once every plan ended: at most max_plan_length steps
    assert memory["plan"].shape[0] == 3 and memory["plan"].shape[1] <= 4
    assert memory["memory"].shape[:2] == memory["plan"].shape
    plan_step = model.planning_step_fn(memory)
    state = model.planner.initial_state(memory["records"], memory["record_mask"])
    log_probs, _ = plan_step(tf.fill([3], 6 + 1), tf.constant(0), state)
    assert log_probs.shape == (3, 6 + 1)  # records + EOS
    assert np.isneginf(log_probs[2, 5])  # padding record of the 3rd table


def test_ncp_copy_mask_follows_plan_positions():
    model, batch = _model("ncp"), random_batch()
    plan = tf.constant([[2, 0, -1, -1], [1, 1, 3, -1], [0, -1, -1, -1]])
    memory = model.encode(batch, plan=plan)
    remapped = model.memory_copy_mask(memory, batch["copy_mask"])
    np.testing.assert_array_equal(remapped[1, :, 2], batch["copy_mask"][1, :, 3])
    np.testing.assert_array_equal(remapped[0, :, 2:], 0.0)


@pytest.mark.parametrize("name", NAMES)
def test_config_round_trip(name):
    model = _model(name)
    clone = type(model).from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert len(clone.trainable_variables) == len(model.trainable_variables)
    assert isinstance(model, NCP if name == "ncp" else EncDec)


def test_build_model_rejects_unknown_names_and_keys():
    with pytest.raises(ConfigError, match="unknown model 'no-such-family'"):
        build_model("no-such-family", TINY, SIZES)
    with pytest.raises(ConfigError, match="did you mean 'model.hidden_size'"):
        build_model("encdec", {**TINY, "hiden_size": 3}, SIZES)
    with pytest.raises(ConfigError, match="max_plan_length"):  # an ncp key is not an encdec key
        build_model("encdec", {**TINY, "max_plan_length": 3}, SIZES)


def test_keras_fit_on_contract_batches():
    model = _model("encdec-copy")
    model.compile(optimizer=keras.optimizers.Adam(0.01))
    batches = [random_batch(seed=s) for s in range(2)]
    dataset = tf.data.Dataset.from_tensors(batches[0]).concatenate(tf.data.Dataset.from_tensors(batches[1]))
    history = model.fit(dataset.repeat(), steps_per_epoch=2, epochs=2, verbose=0, shuffle=False)
    assert np.all(np.isfinite(history.history["loss"]))
    assert np.isfinite(model.evaluate(dataset, verbose=0))


@pytest.mark.parametrize("name", ["encdec-copy", "ncp"])
def test_mixed_bfloat16_policy_trains_and_decodes(name):
    model, batch = _model(name, dtype="mixed_bfloat16"), random_batch()
    assert keras.config.dtype_policy().name == "float32"  # the global policy is left alone
    assert model.decoder.compute_dtype == "bfloat16" and model.decoder.variable_dtype == "float32"
    optimizer = keras.optimizers.Adam(0.02)

    train_step = make_train_step(model, optimizer)

    losses = [float(train_step(batch)) for _ in range(10)]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    memory = model.encode(batch)
    log_probs, _ = model.decoding_step_fn(memory)(tf.fill([3], 2), tf.constant(0),
                                                  model.initial_decoding_state(memory))
    assert log_probs.dtype == tf.float32
    np.testing.assert_allclose(tf.reduce_logsumexp(log_probs, -1), 0.0, atol=1e-3)
    clone = type(model).from_config(model.get_config())
    assert clone.decoder.compute_dtype == "bfloat16"


@pytest.mark.parametrize("name", ["encdec-cs", "ncp"])
def test_keras_save_and_load(name, tmp_path):
    model, batch = _model(name), random_batch()
    loss = float(model.compute_loss_from_batch(batch))
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(float(restored.compute_loss_from_batch(batch)), loss, rtol=1e-6)
    model.save_weights(tmp_path / "model.weights.h5")
    fresh = _model(name)
    fresh.load_weights(tmp_path / "model.weights.h5")
    np.testing.assert_allclose(float(fresh.compute_loss_from_batch(batch)), loss, rtol=1e-6)

import keras
import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.config import ConfigError, DecodeConfig, load_config
from tablegen_tf.constants import BOS_ID, EOS_ID
from tablegen_tf.decoding import beam_search, greedy_search
from tablegen_tf.layers.testing import SIZES, make_train_step, random_batch
from tablegen_tf.models import build_model, get_family
from tablegen_tf.models.transformer import Transformer

V = SIZES["words"]
NAMES = ["transformer-copy", "transformer"]
TINY = dict(d_model=16, num_heads=2, encoder_layers=1, decoder_layers=2, ffn_dim=32, field_dim=4, position_dim=2,
            dropout=0.0)


def _model(name="transformer-copy", max_length=12, seed=0, **overrides):
    """A tiny model through the registry; its caches hold ``max_length`` + 1 steps."""
    keras.utils.set_random_seed(seed)
    config = load_config(None, {"model": {"name": name, **TINY, **overrides}, "data": {"max_position": 5},
                                "decode": {"max_length": max_length}})
    return get_family(name).build_model(config, SIZES)


def _gold_log_probs(model, batch, log_probs, t):
    """The step's log-probability of label t; a copyable <unk> label (an OOV record value)
    is its records' copy slots V + r, where the step keeps that mass."""
    labels = batch["target_out"][:, t]
    gold = tf.gather(log_probs, labels, batch_dims=1)
    if not model.copy:
        return gold
    can_copy = batch["copy_mask"][:, t] > 0
    copied = tf.reduce_logsumexp(tf.where(can_copy, log_probs[:, V:], -np.inf), -1)
    return tf.where(tf.equal(labels, 1) & tf.reduce_any(can_copy, -1), copied, gold)


@pytest.mark.parametrize("name", NAMES)
def test_step_fn_agrees_with_the_training_pass(name):
    """The gold target fed one step at a time through the cached decoder gives the teacher-
    forced pass's per-token log-probabilities."""
    model, batch = _model(name), random_batch()
    outputs = model(batch)["outputs"]
    nll = model.token_nll(outputs, batch["target_out"], batch["copy_mask"])
    memory = model.encode(batch)
    state = model.initial_decoding_state(memory)
    step_fn = model.decoding_step_fn(memory)
    for t in range(batch["target_in"].shape[1]):
        log_probs, new_state = step_fn(batch["target_in"][:, t], tf.constant(t), state)
        assert log_probs.shape == (3, V + 6)
        np.testing.assert_allclose(tf.reduce_logsumexp(log_probs, -1), 0.0, atol=1e-5)
        assert tf.nest.map_structure(lambda x: x.shape, new_state) == tf.nest.map_structure(lambda x: x.shape, state)
        check = batch["target_mask"][:, t]
        np.testing.assert_allclose(tf.boolean_mask(-_gold_log_probs(model, batch, log_probs, t), check),
                                   tf.boolean_mask(nll[:, t], check), rtol=1e-5, atol=1e-5)
        state = new_state
    if name == "transformer":
        assert np.all(np.isneginf(log_probs[:, V:]))  # no copy: nothing beyond the vocabulary


def test_a_copied_id_feeds_back_its_records_word():
    model, batch = _model(), random_batch()
    memory = model.encode(batch)
    state = model.initial_decoding_state(memory)
    step_fn = model.decoding_step_fn(memory)
    copied = tf.constant([V + 2, V + 3, V + 1])  # extended ids of real records
    words = tf.gather(batch["record_value"], [[2], [3], [1]], batch_dims=1)[:, 0]
    by_copy, _ = step_fn(copied, tf.constant(0), state)
    by_word, _ = step_fn(words, tf.constant(0), state)
    np.testing.assert_allclose(by_copy, by_word)


@pytest.mark.parametrize("name", NAMES)
def test_training_lowers_the_loss(name):
    model, batch = _model(name, dropout=0.1, label_smoothing=0.1), random_batch()
    train_step = make_train_step(model, keras.optimizers.Adam(0.01))
    losses = [float(train_step(batch)) for _ in range(30)]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0]


def test_the_registry_builds_it_and_refuses_bad_settings():
    config = load_config(None, ["model.name=transformer-copy"])
    assert (config.model.d_model, config.model.num_heads, config.model.ffn_dim) == (256, 4, 1024)
    model = get_family("transformer").build_model(load_config(None, {"model": {"name": "transformer", **TINY}}),
                                                  SIZES)
    assert isinstance(model, Transformer) and not model.copy and model.name == "transformer"
    assert model.max_decode_length == DecodeConfig().max_length + 1
    with pytest.raises(ConfigError, match="model.num_heads must be >= 1, got 0"):
        load_config(None, ["model.name=transformer-copy", "model.num_heads=0"])
    with pytest.raises(ConfigError, match="model.dropout must be at least 0 and below 1"):
        load_config(None, ["model.name=transformer", "model.dropout=1"])
    with pytest.raises(ConfigError, match=r"model.d_model \(10\) must be divisible by model.num_heads \(4\)"):
        load_config(None, ["model.name=transformer-copy", "model.d_model=10"])
    with pytest.raises(ConfigError, match="divisible"):
        build_model("transformer", {**TINY, "num_heads": 3}, SIZES)


def test_the_e2e_overlay_loads_over_its_corpus():
    config = load_config("e2e,experiments/e2e_transformer")
    assert config.model.name == "transformer-copy" and config.model.d_model == 256
    assert (config.data.max_words, config.train.max_steps, config.train.eval_every_steps) == (1200, 6000, 1000)
    assert (config.train.optimizer.schedule, config.train.optimizer.warmup_steps) == ("cosine", 400)


@pytest.mark.parametrize("name", NAMES)
def test_config_round_trip(name):
    model = _model(name)
    clone = type(model).from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert [v.path for v in clone.weights] == [v.path for v in model.weights]


def _replayed_score(model, batch, ids, length):
    """The sum of the step log-probabilities of ``ids`` [B, T] up to ``length`` [B]."""
    memory = model.encode(batch)
    state = model.initial_decoding_state(memory)
    step_fn = model.decoding_step_fn(memory)
    prev, total = tf.fill([ids.shape[0]], BOS_ID), np.zeros(ids.shape[0])
    for t in range(ids.shape[1]):
        log_probs, state = step_fn(prev, tf.constant(t), state)
        chosen = tf.gather(log_probs, ids[:, t], batch_dims=1).numpy()
        total += np.where(t < length, chosen, 0.0)
        prev = ids[:, t]
    return total


def _peaked(model):
    """Larger weights: peaked steps, so beams end within a short max_length."""
    model.set_weights([w * 3.0 for w in model.get_weights()])
    return model


@pytest.mark.parametrize("name", NAMES)
def test_the_best_beams_score_is_the_sum_of_its_step_log_probs(name):
    model, batch = _peaked(_model(name)), random_batch()

    @tf.function
    def search():
        memory = model.encode(batch)
        return beam_search(model.decoding_step_fn(model.tile(memory, 3)), tf.fill([3], BOS_ID),
                           model.initial_decoding_state(memory), 3, 10, EOS_ID)

    ids, lengths, scores = search()
    assert np.all(np.isfinite(scores))
    np.testing.assert_allclose(scores, _replayed_score(model, batch, ids, lengths.numpy()), rtol=1e-5, atol=1e-5)


def test_a_search_longer_than_the_cache_is_capped_at_its_last_position():
    # decode.max_length 4: a cache of 5 steps; a request for 20 ends every hypothesis at step 5
    model, batch = _model(max_length=4), random_batch()
    memory = model.encode(batch)
    step_fn = model.decoding_step_fn(model.tile(memory, 2))
    forbid_end = lambda prev, t, s: (lambda lp, s2: (tf.where(  # noqa: E731
        (tf.range(tf.shape(lp)[1]) == EOS_ID) & (t < 4), -np.inf, lp), s2))(*step_fn(prev, t, s))
    ids, lengths, scores = tf.function(lambda: beam_search(forbid_end, tf.fill([3], BOS_ID),
                                                           model.initial_decoding_state(memory), 2, 20, EOS_ID))()
    np.testing.assert_array_equal(lengths, [5, 5, 5])
    np.testing.assert_array_equal(ids[:, 4], [EOS_ID] * 3)
    assert np.all(np.isfinite(scores))
    greedy_ids, greedy_lengths, _ = tf.function(lambda: greedy_search(
        model.decoding_step_fn(memory), tf.fill([3], BOS_ID), model.initial_decoding_state(memory), 20, EOS_ID))()
    assert np.all(greedy_lengths.numpy() <= 5)


def test_the_longest_search_is_the_caches_and_an_ensemble_takes_its_shortest_member():
    from tablegen_tf.ensemble import EnsembleModel

    encdec = build_model("encdec-copy", dict(hidden_size=8, num_layers=1, word_dim=6, field_dim=3, value_dim=4,
                                             position_dim=2), SIZES, {"max_position": 5})
    assert _model(max_length=12).longest_search == 12 and encdec.longest_search is None
    assert EnsembleModel([_model(max_length=12), encdec, _model(max_length=7)]).longest_search == 7
    assert EnsembleModel([encdec, encdec]).longest_search is None


def _beams(model, batch, compact):
    """Beam search (3 beams, 10 steps); ``compact``: through ``decoding_memory``, finished
    entries leave the batch (their cached states' rows must follow)."""
    memory = model.encode(batch)
    rows = model.tile(model.decoding_memory(memory) if compact else memory, 3)
    return tf.function(lambda: beam_search(
        model.decoding_step_fn(rows), tf.fill([batch["record_mask"].shape[0]], BOS_ID),
        model.initial_decoding_state(memory), 3, 10, EOS_ID,
        step_memory=(rows, model.decoding_step_fn) if compact else None))()


def test_compact_search_gives_the_same_beams():
    model, batch = _peaked(_model()), random_batch(batch_size=5, seed=3)
    plain, compact = _beams(model, batch, False), _beams(model, batch, True)
    assert len(set(plain[1].numpy().tolist())) > 1  # entries end at different steps
    for a, b in zip(plain[:2], compact[:2]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(plain[2], compact[2], rtol=1e-5)


def test_an_ensemble_with_encdec_copy_decodes_with_beam_search():
    from tablegen_tf.ensemble import EnsembleModel

    keras.utils.set_random_seed(1)
    encdec = build_model("encdec-copy", dict(hidden_size=8, num_layers=1, word_dim=6, field_dim=3, value_dim=4,
                                             position_dim=2), SIZES, {"max_position": 5})
    ensemble = EnsembleModel([_model(), encdec])
    ids, lengths, scores = _beams(ensemble, random_batch(), True)
    assert ids.shape[0] == 3 and np.all(np.isfinite(scores)) and np.all(lengths.numpy() <= 10)
    assert np.all(ids.numpy() < V + 6)  # the shared extended vocabulary V + R


RECORD_SPEC = {**{k: tf.TensorSpec([None, None], tf.int32) for k in (
    "record_field", "record_value", "record_pos_start", "record_pos_end")},
    "record_mask": tf.TensorSpec([None, None], tf.bool)}


class BeamServing(tf.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    @tf.function(input_signature=[RECORD_SPEC])
    def beam(self, features):
        memory = self.model.encode(features)
        start = tf.fill([tf.shape(features["record_mask"])[0]], BOS_ID)
        ids, lengths, scores = beam_search(self.model.decoding_step_fn(self.model.tile(memory, 3)), start,
                                           self.model.initial_decoding_state(memory), 3, 6, EOS_ID)
        return {"ids": ids, "lengths": lengths, "scores": scores}


def test_savedmodel_round_trip_with_beam_search(tmp_path):
    serving, batch = BeamServing(_model()), random_batch()
    features = {k: batch[k] for k in RECORD_SPEC}
    expected = serving.beam(features)
    tf.saved_model.save(serving, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))  # kept: its functions read its variables
    for key, value in loaded.beam(features).items():
        np.testing.assert_array_equal(value, expected[key])


def test_mixed_bfloat16_policy_trains_and_decodes():
    model, batch = _model(dtype="mixed_bfloat16"), random_batch()
    assert keras.config.dtype_policy().name == "float32"  # the global policy is left alone
    assert model.decoder_blocks[0].compute_dtype == "bfloat16"
    assert np.isfinite(float(make_train_step(model, keras.optimizers.Adam(0.01))(batch)))
    memory = model.encode(batch)
    log_probs, _ = model.decoding_step_fn(memory)(tf.fill([3], BOS_ID), tf.constant(0),
                                                  model.initial_decoding_state(memory))
    assert log_probs.dtype == tf.float32
    np.testing.assert_allclose(tf.reduce_logsumexp(log_probs, -1), 0.0, atol=1e-3)

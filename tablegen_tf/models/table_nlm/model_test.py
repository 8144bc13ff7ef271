import keras
import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.layers.testing import SIZES, make_train_step, random_batch
from tablegen_tf.models import build_model, get_family
from tablegen_tf.models.table_nlm.model import TableNLM

TINY = dict(order=4, word_dim=4, global_dim=5, hidden_units=6, max_field_position=3)
DATA = {"max_position": 5}
ROWS = {  # configs/table_nlm/*.yaml
    "nlm": dict(copy=False, local_start=False, local_end=False, global_field=False, global_word=False),
    "nlm-local": dict(copy=False, local_start=True, local_end=True, global_field=False, global_word=False),
    "table-nlm-local-start": dict(copy=True, local_start=True, local_end=False, global_field=False, global_word=False),
    "table-nlm-local-start-end": dict(copy=True, local_start=True, local_end=True, global_field=False,
                                      global_word=False),
    "table-nlm-global-field": dict(copy=True, local_start=True, local_end=True, global_field=True, global_word=False),
    "table-nlm": dict(copy=True, local_start=True, local_end=True, global_field=True, global_word=True),
}
V = SIZES["words"]


def _model(**overrides):
    keras.utils.set_random_seed(0)
    return build_model("table-nlm", {**TINY, **overrides}, SIZES, DATA)


def hand_table():
    """One table, 4 records: name = "7 1(OOV 'Zed')", food = "7", near = "9"; word 7 occurs twice."""
    return {
        "record_field": tf.constant([[3, 3, 4, 5]]),
        "record_value": tf.constant([[7, 1, 7, 9]]),
        "record_value_text": tf.constant([["seven", "Zed", "seven", "nine"]]),
        "record_pos_start": tf.constant([[1, 2, 1, 1]]),
        "record_pos_end": tf.constant([[2, 1, 1, 1]]),
        "record_mask": tf.constant([[True, True, True, True]]),
    }


def test_eq15_local_conditioning_is_the_max_over_occurrences():
    model = _model(**ROWS["nlm-local"])
    table = hand_table()
    memory = model.encode(table)
    zs, ze = model.z_start.embeddings.numpy(), model.z_end.embeddings.numpy()
    row = lambda f, p: f * 4 + p  # noqa: E731  (l + 1 = 4 rows per field)
    # word 7 occurs as (field 3, p+ 1, p- 2) and (field 4, p+ 1, p- 1): component-wise max (eq. 15)
    psi_plus = np.maximum(zs[row(3, 1)], zs[row(4, 1)])
    psi_minus = np.maximum(ze[row(3, 2)], ze[row(4, 1)])
    contexts = tf.constant([[[7, 9, 12]]])  # 12 is not in the table: the no-field embedding
    h = model.hidden_state(contexts, memory)
    e = model.word_embedding.embeddings.numpy()
    nf = model.no_field.numpy()
    # hidden_state lays psi out as [E(c); Z+(c) Z-(c) per word]: rebuild in that order
    psi = np.concatenate([e[7], e[9], e[12], psi_plus, zs[row(5, 1)], nf[0], psi_minus, ze[row(5, 1)], nf[1]])
    w, b = model.hidden.kernel.numpy(), model.hidden.bias.numpy()
    np.testing.assert_allclose(h[0, 0], np.tanh(psi @ w + b), rtol=1e-5, atol=1e-6)


def test_eq20_22_copy_scores_on_a_hand_computed_table():
    model = _model(**ROWS["table-nlm-local-start"])
    table = hand_table()
    memory = model.encode(table)
    h = tf.constant([[[0.3, -0.2, 0.5, 0.1, -0.4, 0.2]]])
    scores = model.scores(h, memory).numpy()[0, 0]
    F, W4 = model.f_embedding.embeddings.numpy(), model.copy_projection.kernel.numpy()
    b4 = model.copy_projection.bias.numpy()
    q = lambda f, p: np.tanh(F[f * 4 + p] @ W4 + b4)  # noqa: E731  eq. 20 per (field, p+)
    q7 = np.maximum(q(3, 1), q(4, 1))  # word 7: max over its two (field, position) pairs
    vocab = h.numpy()[0, 0] @ model.vocab_scores.kernel.numpy() + model.vocab_scores.bias.numpy()  # eq. 19
    expected = vocab.copy()
    expected[7] += h.numpy()[0, 0] @ q7  # eq. 21 + 22: in W and in Q
    expected[9] += h.numpy()[0, 0] @ q(5, 1)
    np.testing.assert_allclose(scores[:V], expected, rtol=1e-5, atol=1e-5)
    # the OOV table token "Zed" (record 1, its first occurrence) is V + 1 with phi^W = 0
    np.testing.assert_allclose(scores[V + 1], h.numpy()[0, 0] @ q(3, 2), rtol=1e-5)
    # in-vocabulary tokens are scored at their vocabulary id only: V + 0, V + 2, V + 3 are masked
    assert np.all(scores[[V, V + 2, V + 3]] < -1e8)


def test_copy_actions_never_name_a_token_outside_the_table():
    model = _model()
    batch = random_batch()
    memory = model.encode(batch)
    step_fn = model.decoding_step_fn(memory)
    log_probs, _ = step_fn(tf.fill([3], 2), tf.constant(0), model.initial_decoding_state(memory))
    copy = log_probs.numpy()[:, V:]
    keys = model.encode(batch)["copy_key"].numpy() & (batch["record_value"].numpy() == 1)
    assert np.all(np.isneginf(copy[~keys]))  # padding, repeated and in-vocabulary records
    assert np.all(np.isfinite(copy[keys]))
    np.testing.assert_allclose(tf.reduce_logsumexp(log_probs, -1), 0.0, atol=1e-5)


@pytest.mark.parametrize("row", sorted(ROWS))
def test_ablation_configs_build_the_layers_they_name_and_only_those(row):
    from tablegen_tf.config import load_config

    config = load_config(f"e2e,table_nlm/{row}")
    flags = {k: getattr(config.model, k) for k in ROWS[row]}
    assert flags == ROWS[row]
    model = _model(**ROWS[row])
    names = {v.path.split("/")[1] for v in model.weights}
    expected = {"E", "W2", "W3"}
    expected |= {"Z_start", "no_field"} if flags["local_start"] else set()
    expected |= {"Z_end"} if flags["local_end"] else set()
    expected |= {"G_field"} if flags["global_field"] else set()
    expected |= {"G_word"} if flags["global_word"] else set()  # d != g: G^w is its own matrix
    expected |= {"F", "W4"} if flags["copy"] else set()
    assert {n.split("/")[0] for n in names} == expected or names == expected, names
    assert model.hidden.kernel.shape[0] == model.psi_dim()


def test_global_word_shares_E_when_d_equals_g():
    model = _model(word_dim=5, global_dim=5)
    assert model.g_word is None
    assert not any("G_word" in v.path for v in model.weights)


@pytest.mark.parametrize("row", ["nlm", "table-nlm"])
def test_step_fn_agrees_with_training_nll_and_loss_decreases(row):
    model, batch = _model(**ROWS[row]), random_batch()
    nll = model.per_token_nll(batch)
    targets = model.extended_targets(batch)
    memory = model.encode(batch)
    state = model.initial_decoding_state(memory)
    step_fn = model.decoding_step_fn(memory)
    previous = tf.concat([tf.fill([3, 1], 2), targets[:, :-1]], 1)
    for t in range(targets.shape[1]):
        log_probs, state = step_fn(previous[:, t], tf.constant(t), state)
        gold = tf.gather(log_probs, targets[:, t], batch_dims=1)
        check = batch["target_mask"][:, t]
        np.testing.assert_allclose(tf.boolean_mask(-gold, check), tf.boolean_mask(nll[:, t], check), rtol=1e-4,
                                   atol=1e-5)
    total, count = model.token_nll(batch)
    assert int(count) == int(tf.reduce_sum(tf.cast(batch["target_mask"], tf.int32)))
    train_step = make_train_step(model, keras.optimizers.Adam(0.02))
    losses = [float(train_step(batch)) for _ in range(12)]
    assert losses[-1] < 0.8 * losses[0]


def test_oov_table_targets_become_copy_actions():
    model = _model()
    batch = dict(hand_table())
    batch.update(target_out=tf.constant([[7, 1, 1, 3]]), target_mask=tf.constant([[True] * 4]),
                 copy_mask=tf.constant([[[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]], tf.float32))
    # in-vocabulary 7 stays 7; copied OOV "Zed" is V + 1; an OOV word not in the table stays <unk>
    np.testing.assert_array_equal(model.extended_targets(batch), [[7, V + 1, 1, 3]])


def test_config_round_trip_and_registration():
    model = _model()
    clone = TableNLM.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert get_family("table-nlm").model_class is TableNLM
    with pytest.raises(ValueError, match="local_end needs"):
        _model(local_start=False, local_end=True)


def test_beam_greedy_and_constrained_decoding_run():
    from tablegen_tf.config import DecodeConfig
    from tablegen_tf.generation import decode_ids

    model, batch = _model(), random_batch()
    for beam in (1, 3):
        ids, lengths, scores, _ = decode_ids(model, batch, DecodeConfig(beam_size=beam, max_length=6))
        assert ids.shape[0] == 3 and np.all(lengths.numpy() <= 6)
    must = tf.constant([[9, -1], [V + 0, -1], [-1, -1]])  # a vocabulary word; a copy of an OOV record
    ids, lengths, _, _ = decode_ids(model, batch, DecodeConfig(beam_size=3, max_length=8), must_include=must)
    assert 9 in ids.numpy()[0][: lengths[0]] and V in ids.numpy()[1][: lengths[1]]

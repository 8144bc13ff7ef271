"""order-planning: equations against hand-computed values, ablation builds, decoding contract."""

import glob
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.config import ConfigError, read_yaml
from tablegen_tf.layers.testing import SIZES, make_train_step, random_batch
from tablegen_tf.models import build_model
from tablegen_tf.models.order_planning.layers import HybridGate, LinkAttention

TINY = dict(word_dim=6, field_dim=5, hidden_size=8)
ABLATIONS = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "order_planning")
V = SIZES["words"]


def _model(seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    return build_model("order-planning", {**TINY, **overrides}, SIZES, {})


def test_link_attention_eq_8_9_by_hand():
    layer = LinkAttention(4)
    layer.build()
    # L[from, to] over 4 field ids; the table has tokens of fields [1, 2, 2, 3] (+ one pad)
    layer.link.assign([[0, 0, 0, 0], [0, 0.0, 1.0, 2.0], [0, 0.5, 0.0, -1.0], [0, 3.0, 0.0, 0.0]])
    fields = tf.constant([[1, 2, 2, 3, 0]])
    mask = tf.constant([[True, True, True, True, False]])
    previous = tf.constant([[0.1, 0.2, 0.3, 0.4, 0.0]])
    links = layer.table_links(fields)
    assert links[0, 0, 1] == 1.0 and links[0, 3, 0] == 3.0 and links[0, 1, 3] == -1.0  # L[f_j, f_i]
    alpha = layer(previous, links, mask).numpy()[0]
    # sum_j alpha_j L[f_j, f_i]:  i=0 (field 1): .1*0 + .2*.5 + .3*.5 + .4*3 = 1.45
    # i=1,2 (field 2): .1*1 + 0 + 0 + 0 = 0.1;  i=3 (field 3): .1*2 + .2*-1 + .3*-1 + 0 = -0.3
    scores = np.array([1.45, 0.1, 0.1, -0.3])
    expected = np.exp(scores) / np.exp(scores).sum()  # eq. 9, the pad gets nothing
    np.testing.assert_allclose(alpha[:4], expected, rtol=1e-6)
    assert alpha[4] == 0.0


def test_hybrid_gate_eq_10_11_by_hand():
    gate = HybridGate()
    gate.build((None, 2), (None, 1), (None, 1))
    gate.h_kernel.assign([[1.0], [-2.0]])
    gate.f_kernel.assign([[0.5]])
    gate.y_kernel.assign([[3.0]])
    gate.bias.assign([0.25])
    h, field_summary, word = tf.constant([[0.5, 0.25]]), tf.constant([[2.0]]), tf.constant([[-0.5]])
    z_tilde = gate.gate(h, field_summary, gate.word_part(word))
    z = 1 / (1 + np.exp(-(0.5 - 0.5 + 1.0 - 1.5 + 0.25)))  # eq. 10: w^T [h'; e^(f); y] + b = -0.25
    np.testing.assert_allclose(z_tilde, [0.2 * z + 0.5], rtol=1e-6)
    content, link = tf.constant([[0.7, 0.2, 0.1]]), tf.constant([[0.1, 0.1, 0.8]])
    hybrid = gate(z_tilde, content, link).numpy()
    zt = 0.2 * z + 0.5
    np.testing.assert_allclose(hybrid, [zt * np.array([0.7, 0.2, 0.1]) + (1 - zt) * np.array([0.1, 0.1, 0.8])],
                               rtol=1e-6)  # eq. 11
    np.testing.assert_allclose(hybrid.sum(), 1.0, rtol=1e-6)


def test_gate_is_bounded_between_half_and_seven_tenths():
    gate = HybridGate()
    gate.build((None, 3), (None, 2), (None, 2))
    for scale in (0.0, 1.0, 1e3, -1e3):
        gate.h_kernel.assign(tf.fill([3, 1], scale))
        gate.f_kernel.assign(tf.fill([2, 1], scale))
        gate.y_kernel.assign(tf.fill([2, 1], scale))
        h, f, y = (tf.random.normal([50, n]) for n in (3, 2, 2))
        z = gate.gate(h, f, gate.word_part(y)).numpy()
        assert np.all(z >= 0.5) and np.all(z <= 0.7)
    # the saturated ends are reached
    gate.h_kernel.assign(tf.fill([3, 1], 1e3))
    np.testing.assert_allclose(gate.gate(tf.ones([1, 3]), tf.zeros([1, 2]), tf.zeros([1])), [0.7])
    np.testing.assert_allclose(gate.gate(-tf.ones([1, 3]), tf.zeros([1, 2]), tf.zeros([1])), [0.5])


def _layer_names(model):
    return {v.path.split("/")[1] for v in model.weights}


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ABLATIONS, "*.yaml"))), ids=os.path.basename)
def test_ablation_configs_build_only_the_layers_they_name(path):
    values = read_yaml(path)
    model = _model(**{k: v for k, v in values.items() if k != "name"})
    layers = _layer_names(model)
    attention = values["attention"]
    assert ("content_attention" in layers) == (attention in ("content", "hybrid"))
    assert ("link_attention" in layers) == (attention in ("link", "hybrid"))
    assert ("hybrid_gate" in layers) == (attention == "hybrid" and values.get("fixed_gate") is None)
    assert ("copy_scores" in layers) == values["copy"]
    field_input = any("field_kernel" in v.path for v in model.decoder_cell.weights)
    assert field_input == (values.get("field_feedback") == "decoder_input")
    if values.get("field_feedback") == "content_attention":
        assert model.content_attention.field_kernel.shape[1] == TINY["word_dim"] + TINY["field_dim"]


def test_bad_ablation_values_are_config_errors():
    with pytest.raises(ConfigError, match="model.attention"):
        _model(attention="links")
    with pytest.raises(ConfigError, match="fixed_gate"):
        _model(attention="content", fixed_gate=0.4)
    with pytest.raises(ConfigError, match="field_feedback"):
        _model(attention="link", field_feedback="content_attention")


VARIANTS = dict(argvalues=[{}, {"attention": "link", "copy": False},
                           {"attention": "content", "field_feedback": "content_attention"},
                           {"fixed_gate": 0.4, "field_feedback": "decoder_input"}, {"unknown_word_slots": 2},
                           {"copy_continuation": "all"}, {"copy_continuation": "unknown"},
                           {"copy_continuation": "all", "continuation_by_field": True}],
                ids=["full", "link-nocopy", "t4-content", "fixed-gate-t4-decoder", "unknown-slots", "continuation-all",
                     "continuation-unknown", "continuation-by-field"])


@pytest.mark.parametrize("overrides", **VARIANTS)
def test_step_fn_agrees_with_training_loss_and_loss_decreases(overrides):
    model, batch = _model(**overrides), random_batch()
    _assert_step_fn_agrees_with_training_loss(model, batch)
    train_step = make_train_step(model, keras.optimizers.Adam(0.02))
    losses = [float(train_step(batch)) for _ in range(12)]
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.8 * losses[0]


def _assert_step_fn_agrees_with_training_loss(model, batch):
    predictions = model(batch)
    nll = model.token_nll(predictions["outputs"], predictions["memory"], batch["target_out"], batch["copy_mask"])
    memory = model.encode(batch)
    state = model.initial_decoding_state(memory)
    step_fn = model.decoding_step_fn(memory)
    oov_copy = (batch["target_out"] == 1) & (tf.reduce_sum(batch["copy_mask"], -1) > 0)
    previous = batch["target_in"][:, 0]
    for t in range(batch["target_in"].shape[1]):
        log_probs, state = step_fn(previous, tf.constant(t), state)
        np.testing.assert_allclose(tf.reduce_logsumexp(log_probs, -1), 0.0, atol=1e-5)
        gold = tf.gather(log_probs, batch["target_out"][:, t], batch_dims=1)
        previous = batch["target_out"][:, t]
        if model.copy:  # an OOV label that is in the table is its copy slot V + first token
            first = tf.argmax(tf.cast(batch["copy_mask"][:, t] > 0, tf.int32), -1, output_type=tf.int32)
            gold = tf.where(oov_copy[:, t], tf.gather(log_probs, V + first, batch_dims=1), gold)
            previous = tf.where(oov_copy[:, t], V + first, previous)  # decoding feeds the copied id back
        check = batch["target_mask"][:, t] & (True if model.copy else ~oov_copy[:, t])
        np.testing.assert_allclose(tf.boolean_mask(-gold, check), tf.boolean_mask(nll[:, t], check),
                                   rtol=1e-4, atol=1e-5)


def _unknown_words_batch():
    """random_batch with three OOV table tokens, texts "alpha", "beta", "alpha" (records 0-2),
    and targets that copy "alpha" at step 1 and "beta" at step 2."""
    batch = {k: v.numpy() for k, v in random_batch().items()}
    value, real = batch["record_value"], batch["record_mask"]
    value[:, :3] = 1
    texts = batch["record_value_text"].astype(object)
    texts[:, :3] = [b"alpha", b"beta", b"alpha"]
    out = batch["target_out"]
    out[:, 1:3] = 1
    batch["target_in"][:, 2:4] = 1
    copy_mask = (out[:, :, None] == value[:, None, :]) & real[:, None, :] & (out[:, :, None] > 3)
    copy_mask[:, 1, :] = texts == b"alpha"
    copy_mask[:, 2, :] = texts == b"beta"
    batch["copy_mask"] = copy_mask.astype(np.float32)
    batch = {k: tf.constant(v) for k, v in batch.items() if k != "record_value_text"}
    return {**batch, "record_value_text": tf.constant(texts.astype(bytes))}


def test_unknown_word_slots_tell_copied_unknown_words_apart():
    from tablegen_tf.models.order_planning.model import _unknown_slots

    batch = _unknown_words_batch()
    slots = _unknown_slots(batch["record_value"], batch["record_value_text"], batch["record_mask"], 4)
    assert slots.numpy()[:, :4].tolist() == [[1, 2, 1, 0]] * 3
    assert _unknown_slots(batch["record_value"], batch["record_value_text"], batch["record_mask"], 1).numpy()[
        0, :3].tolist() == [1, 0, 1]  # beyond the count: plain <unk>
    for count in (0, 2):
        model = _model(unknown_word_slots=count)
        _assert_step_fn_agrees_with_training_loss(model, batch)
        memory = model.encode(batch)
        state = model.initial_decoding_state(memory)
        after_alpha, _ = model.decoding_step_fn(memory)(tf.fill([3], V + 0), tf.constant(1), state)
        after_beta, _ = model.decoding_step_fn(memory)(tf.fill([3], V + 1), tf.constant(1), state)
        # Without slots every unknown word is the same <unk> input; with them, what was copied shows.
        change = np.abs(np.exp(after_alpha) - np.exp(after_beta)).max()
        assert change > 1e-4 if count else change == 0.0


@pytest.mark.parametrize("overrides", **VARIANTS)
def test_mixed_bfloat16_policy_trains_and_decodes(overrides):
    model, batch = _model(dtype="mixed_bfloat16", **overrides), random_batch()
    assert keras.config.dtype_policy().name == "float32"  # the global policy is left alone
    assert model.decoder_cell.compute_dtype == "bfloat16" and model.decoder_cell.variable_dtype == "float32"
    assert model.encoder.compute_dtype == "bfloat16" and model.output_projection.compute_dtype == "bfloat16"
    assert all(v.dtype == "float32" for v in model.weights)
    if model.link_attention is not None:  # the planning scores of eq. 8-9: float32 under any policy
        assert model.link_attention.compute_dtype == "float32"
    train_step = make_train_step(model, keras.optimizers.Adam(0.02))
    losses = [float(train_step(batch)) for _ in range(10)]
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.9 * losses[0]
    predictions = model(batch)
    nll = model.token_nll(predictions["outputs"], predictions["memory"], batch["target_out"], batch["copy_mask"])
    assert nll.dtype == tf.float32
    memory = model.encode(batch)
    assert memory["memory"].dtype == tf.bfloat16
    state = model.initial_decoding_state(memory)
    step_fn = tf.function(model.decoding_step_fn(memory), jit_compile=True)  # as the searches run it
    oov_copy = (batch["target_out"] == 1) & (tf.reduce_sum(batch["copy_mask"], -1) > 0)
    for t in range(3):
        log_probs, state = step_fn(batch["target_in"][:, t], tf.constant(t), state)
        assert log_probs.dtype == tf.float32
        np.testing.assert_allclose(tf.reduce_sum(tf.exp(log_probs), -1), 1.0, atol=1e-5)
        assert state[2].dtype == tf.float32  # alpha_t, a distribution over the table
        np.testing.assert_allclose(tf.reduce_sum(state[2], -1), 1.0, atol=1e-5)
        # the step agrees with teacher forcing up to bfloat16 rounding (labels scored by id)
        gold = tf.gather(log_probs, batch["target_out"][:, t], batch_dims=1)
        check = batch["target_mask"][:, t] & ~oov_copy[:, t]
        np.testing.assert_allclose(tf.boolean_mask(-gold, check), tf.boolean_mask(nll[:, t], check), atol=0.05)
    traces = model.attention_traces(batch, 2)
    assert all(value.dtype == tf.float32 for value in traces.values())
    clone = type(model).from_config(model.get_config())
    assert clone.dtype_policy.name == "mixed_bfloat16" and clone.decoder_cell.compute_dtype == "bfloat16"
    assert keras.config.dtype_policy().name == "float32"


def test_copy_sums_equal_content_words_eq_16():
    """Two OOV tokens with the same text share one slot (the first) with the summed score;
    an in-vocabulary token's score is added to its word's vocabulary logit."""
    model = _model()
    batch = random_batch()
    value = batch["record_value"].numpy()
    text = batch["record_value_text"].numpy()
    value[0, :3] = [1, 1, 9]  # tokens 0 and 1: OOV, same text; token 2: word 9
    text[0, :3] = [b"zork", b"zork", b"9"]
    batch = {**batch, "record_value": tf.constant(value), "record_value_text": tf.constant(text)}
    memory = model.encode(batch)
    states = tf.random.normal([3, 1, TINY["hidden_size"]])
    logits = model.extended_logits(states, memory).numpy()[0, 0]
    scores = model.copy_scores(states, memory["copy_keys"], memory["memory_mask"]).numpy()[0, 0]
    vocab = model.output_projection(states).numpy()[0, 0]
    np.testing.assert_allclose(logits[V + 0], scores[0] + scores[1], rtol=1e-5)
    assert logits[V + 1] < -1e8  # the second occurrence has no slot of its own
    extra = scores[2] + sum(scores[i] for i in range(3, 6) if value[0, i] == 9)
    np.testing.assert_allclose(logits[9], vocab[9] + extra, rtol=1e-5, atol=1e-6)


def test_summary_images_show_attention_gate_and_link_matrix():
    model, batch = _model(), random_batch()
    images = model.summary_images(batch, 2)
    assert {"hybrid_attention", "attention/table_0", "attention/table_1", "link_matrix"} <= set(images)
    assert images["hybrid_attention"].shape[:2] == (2, batch["target_in"].shape[1])
    assert all(len(image.shape) == 4 for image in images.values())


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_fused_loop_gradients_equal_autodiff_of_the_plain_loop(dropout):
    """model.fused_loop: the same loss and the same gradient of every weight (and of the
    final state, which TBPTT-style callers read) as autodiff of the plain loop."""
    batch = random_batch(target_length=9)
    results = []
    for fused in (False, True):
        model = _model(fused_loop=fused, dropout=dropout)
        rng = np.random.default_rng(0)  # weights far from their initial values: attention not uniform,
        for v in model.trainable_variables:  # the gate and the link matrix matter
            v.assign(rng.normal(0.0, 0.7, v.shape))
        with tf.GradientTape() as tape:
            keras.utils.set_random_seed(1)  # the same dropout masks
            predictions = model(batch, training=True)
            memory = model.encode(batch)
            outputs, final = model.decode_sequence(memory, batch["target_in"], model.initial_decoding_state(memory))
            loss = model.compute_loss_from_batch(batch, training=True) + tf.reduce_sum(
                final[0] * 0.3) + tf.reduce_sum(final[2] * tf.range(final[2].shape[-1], dtype=tf.float32))
            noise = tf.random.stateless_normal(tf.shape(outputs["alpha"]), [1, 2])
            loss += 0.1 * tf.reduce_sum(outputs["alpha"] * noise)
        assert predictions["outputs"]["states"].shape[1] == 9
        results.append((float(loss), [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)],
                        [v.path for v in model.trainable_variables]))
    (plain_loss, plain_grads, names), (fused_loss, fused_grads, fused_names) = results
    assert names == fused_names
    np.testing.assert_allclose(fused_loss, plain_loss, rtol=1e-5)
    for name, a, b in zip(names, plain_grads, fused_grads):
        assert np.abs(a).max() > 1e-4, name  # every weight takes part
        np.testing.assert_allclose(b, a, rtol=2e-4, atol=1e-6 * np.abs(a).max(), err_msg=name)


def test_fused_loop_applies_only_to_the_full_float32_model():
    batch = random_batch()
    assert _model(fused_loop=True)._fused(False, {"content": 1})
    for overrides in ({"fixed_gate": 0.4}, {"field_feedback": "decoder_input"}, {"dtype": "mixed_bfloat16"},
                      {"attention": "link"}):
        model = _model(fused_loop=True, **overrides)
        assert not model._fused(False, {"content": 1})
        model(batch)  # the plain loop runs
    assert not _model(fused_loop=True)._fused(True, {"content": 1})  # attention traces: the plain loop
    assert _model(fused_loop=True).get_config()["fused_loop"] is True


@pytest.mark.parametrize("members", [1, 2], ids=["single", "ensemble"])
def test_compact_and_parallel_searches_give_the_same_beams(members, monkeypatch):
    # decoding_memory lets finished entries and beams leave the search, and lets a large
    # batch be searched in parts side by side; the beams must equal the search without.
    from tablegen_tf import generation
    from tablegen_tf.config import DecodeConfig
    from tablegen_tf.ensemble import EnsembleModel

    models = [_model(seed=seed) for seed in range(members)]  # the second: other weights throughout
    for model in models:  # peaked steps: beams end at different steps
        model.set_weights([w * 3.0 for w in model.get_weights()])
    # Equal weights of unrelated members mix into flat steps whose beams never end within
    # max_length; at 0.2 the second member still moves every score (given the first's
    # memory, its steps give other beams: the test sees a member read the wrong rows).
    model = models[0] if members == 1 else EnsembleModel(models, [0.8, 0.2])
    batch = random_batch(batch_size=5, seed=3)
    monkeypatch.setattr(generation, "PARALLEL_MIN_BATCH", 4)

    @tf.function
    def decode(parallel):
        return generation.decode_ids(model, batch, DecodeConfig(beam_size=3, max_length=12,
                                                                parallel_searches=parallel))[:3]

    compact, in_parts = decode(1), decode(2)
    monkeypatch.setattr(type(model), "decoding_memory", lambda self, memory: None)
    plain = tf.function(lambda: generation.decode_ids(model, batch, DecodeConfig(beam_size=3, max_length=12))[:3])()
    assert len(set(plain[1].numpy().tolist())) > 1  # entries end at different lengths
    # Computed on other rows, a step's matmuls may round differently in the last bit (the
    # kernel's blocking depends on the row count): the same beams, scores within 1e-6.
    for other in (compact, in_parts):
        for a, b in zip(plain[:2], other[:2]):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(plain[2], other[2], rtol=1e-6)


def test_training_renames_the_unknown_word_slots_by_a_permutation_per_table():
    model = _model(unknown_word_slots=6)
    slots = tf.constant([[1, 2, 1, 0, 3], [1, 0, 0, 0, 0]] * 8)
    renamed = model._shuffled_slots(slots).numpy()
    for before, after in zip(slots.numpy(), renamed):
        assert ((after == 0) == (before == 0)).all() and after.max() <= 6
        # one new name per old one, both ways: same word -> same slot, different words -> different
        pairs = {(b, a) for b, a in zip(before, after) if b}
        assert len(pairs) == len({b for b, _ in pairs}) == len({a for _, a in pairs})
    assert len({tuple(row) for row in renamed[::2]}) > 1  # the names differ between tables


def test_position_tracking_follows_a_multi_word_value_through_a_repeated_word():
    from tablegen_tf.models.order_planning.model import CONTINUATION_PREFERENCE as K
    from tablegen_tf.models.order_planning.model import follow_positions

    # "Accademia di Architettura di Mendrisio | country | Switzerland" as table tokens
    words = "Accademia di Architettura di Mendrisio country Switzerland".split()
    continues = tf.constant([[0, 1, 1, 1, 1, 0, 0]], tf.float32)  # p+ > 1: continues the value before

    def matches(word):
        return tf.constant([[float(w == word) for w in words]])

    follow, starts = tf.zeros([1, 7]), tf.ones([1])
    expected = {
        "Accademia": [0, 1, 0, 0, 0, 0, 0],  # the next word of its value is "di"
        # "di" is tokens 1 and 3; token 1 continues as expected: weight 1 + K against 1
        "di": [0, 0, (1 + K) / (2 + K), 0, 1 / (2 + K), 0, 0],
    }
    for word in ("Accademia", "di"):
        follow = follow_positions(matches(word), starts, follow, continues)
        np.testing.assert_allclose(follow.numpy()[0], expected[word], rtol=1e-6)
    # a word that ends a value, or is not in the table, expects nothing next
    assert follow_positions(matches("Mendrisio"), starts, follow, continues).numpy().sum() == 0.0
    assert follow_positions(matches("the"), starts, follow, continues).numpy().sum() == 0.0
    # "unknown": a word that may not begin a span ("di" said out of the blue) follows nothing,
    # but continues a span it was expected in
    no_start = tf.zeros([1])
    assert follow_positions(matches("di"), no_start, tf.zeros([1, 7]), continues).numpy().sum() == 0.0
    after_accademia = follow_positions(matches("Accademia"), starts, tf.zeros([1, 7]), continues)
    np.testing.assert_allclose(follow_positions(matches("di"), no_start, after_accademia, continues).numpy()[0],
                               [0, 0, 1, 0, 0, 0, 0], rtol=1e-6)


@pytest.mark.parametrize("mode", ["all", "unknown"])
def test_step_fn_agrees_with_training_loss_on_copies_of_unknown_words(mode):
    # the tracked spans of "unknown" begin only at copies of out-of-vocabulary words (V + i)
    model = _model(copy_continuation=mode)
    batch = _unknown_words_batch()
    batch["record_pos_start"] = tf.constant([[1, 2, 3, 1, 2, 1]] * 3)  # spans: tokens 0-2, 3-4, 5
    _assert_step_fn_agrees_with_training_loss(model, batch)


def test_copy_continuation_values_are_checked():
    from tablegen_tf.models.order_planning.model import OrderPlanning

    assert _model(copy_continuation="none").continuation_bonus is None
    assert OrderPlanning(V, SIZES["fields"], **TINY).continuation_bonus is None  # the paper's model by default
    with pytest.raises(ConfigError, match="copy_continuation"):
        _model(copy_continuation="spans")
    with pytest.raises(ConfigError, match="copy_continuation needs model.copy"):
        _model(copy=False, copy_continuation="unknown")
    with pytest.raises(ConfigError, match="continuation_by_field needs model.copy_continuation"):
        _model(continuation_by_field=True)
    assert _model(copy_continuation="all").continuation_field_bonus is None


def test_field_bonus_starts_at_zero_and_the_step_fn_agrees_once_it_is_learnt():
    model = _model(copy_continuation="all", continuation_by_field=True)
    batch = _unknown_words_batch()
    batch["record_pos_start"] = tf.constant([[1, 2, 3, 1, 2, 1]] * 3)
    np.testing.assert_array_equal(model.encode(batch)["continuation_field"].numpy(), 0.0)  # the "all" model at first
    kernel = model.continuation_field_bonus.kernel
    kernel.assign(tf.random.stateless_normal(kernel.shape, seed=[1, 2]) * 3.0)
    assert np.ptp(model.encode(batch)["continuation_field"].numpy()) > 0  # differs by field
    _assert_step_fn_agrees_with_training_loss(model, batch)


def test_continuation_bonus_raises_the_copy_score_of_the_next_word_only():
    model, batch = _model(copy_continuation="all"), random_batch()
    memory = model.encode(batch)
    states = tf.random.normal([3, 1, TINY["hidden_size"]])
    follow = tf.one_hot([[2]] * 3, 6)  # token 2 of each table is where the last copy continues
    model.continuation_bonus.bias.assign([3.0])
    model.continuation_bonus.kernel.assign(tf.zeros_like(model.continuation_bonus.kernel))
    plain, bonus = model.extended_logits(states, memory), model.extended_logits(states, memory, follow)
    changed = np.nonzero((bonus - plain).numpy()[0, 0])[0]
    assert changed.tolist() == [int(batch["record_value"][0, 2])]  # the in-vocabulary word of token 2
    np.testing.assert_allclose((bonus - plain).numpy()[0, 0, changed], [3.0], rtol=1e-5)

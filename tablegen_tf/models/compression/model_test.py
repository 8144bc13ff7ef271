"""Sentence compression (Miao & Blunsom 2016): equations, REINFORCE, stop-gradient, decoding."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.config import DecodeConfig
from tablegen_tf.constants import BOS_ID, EOS_ID
from tablegen_tf.generation import decode_ids
from tablegen_tf.models.compression.model import SentenceCompression, mixture_probs, reinforce_surrogate

V = 30


def tiny(objective="fsc", **kwargs):
    tf.random.set_seed(0)
    return SentenceCompression(V, objective, word_dim=8, hidden_size=8, attention_size=8, samples=2,
                               baseline_hidden=4, **kwargs)


def toy_batch():
    rng = np.random.default_rng(0)
    src = rng.integers(4, V, (3, 6)).astype(np.int32)
    mask = np.ones((3, 6), bool)
    mask[2, 4:] = False
    src[2, 4:] = 0
    labels = np.array([[1, 0, 1, 0, 0, 1], [0, 1, 1, 0, 0, 0], [-1] * 6], np.int32)
    targets = [src[0, [0, 2, 5]], src[1, [1, 2]], src[2, [0, 1, 2]]]
    t_in, t_out, t_mask = (np.zeros((3, 4), np.int32) for _ in range(3))
    for b, t in enumerate(targets):
        t_in[b, 0] = BOS_ID
        t_in[b, 1:len(t) + 1] = t[:3]
        t_out[b, :len(t)] = t
        t_out[b, len(t)] = EOS_ID
        t_mask[b, :len(t) + 1] = 1
    copy = (t_out[:, :, None] == src[:, None, :]).astype(np.float32) * t_mask[:, :, None]
    copy[t_out == EOS_ID] = 0
    text = np.array([[f"w{i}" for i in row] for row in src])
    return dict(source_ids=src, source_mask=mask, labels=labels, target_in=t_in, target_out=t_out,
                target_mask=t_mask.astype(bool), copy_mask=copy, source_text=text)


def test_eq21_mixture_on_a_hand_example():
    # source "the cat sat", V = 4 words; t = 0.75; alpha over the 3 source positions
    alpha = tf.constant([[0.5, 0.3, 0.2]])
    beta = tf.constant([[0.1, 0.2, 0.3, 0.4]])
    t = tf.constant([0.75])
    probs = mixture_probs(alpha, beta, t).numpy()[0]
    np.testing.assert_allclose(probs, [0.025, 0.05, 0.075, 0.1, 0.375, 0.225, 0.15], rtol=1e-6)
    assert probs.sum() == pytest.approx(1.0)
    # c_j = s_i (word 2 at source position 1): t alpha(i) + (1 - t) beta(c_j); c_j not in s: (1 - t) beta
    assert probs[2] + probs[4 + 1] == pytest.approx(0.75 * 0.3 + 0.25 * 0.3)
    assert probs[3] == pytest.approx(0.25 * 0.4)


def test_training_nll_is_the_mixture_the_step_function_scores():
    model = tiny(decoding="abstractive")
    batch = toy_batch()
    memory = model.encode(batch)
    log_p, _ = model._fsc_token_log_probs(batch, memory)
    step_fn = model.decoding_step_fn(memory)
    state = model.initial_decoding_state(memory)
    prev = tf.fill([3], BOS_ID)
    # example 0 kept source positions 0, 2, 5: score the copy ids step by step
    expected = []
    for j, pos in enumerate([0, 2, 5]):
        log_probs, state = step_fn(prev, j, state)
        token = batch["source_ids"][0, pos]
        p = np.exp(log_probs[0, V + pos].numpy()) + np.exp(log_probs[0, token].numpy())
        expected.append(np.log(p))
        prev = tf.constant([V + pos, V + 1, V + 0], tf.int32)
    np.testing.assert_allclose(log_p[0, :3].numpy(), expected, rtol=1e-4, atol=1e-5)


def test_reinforce_gradient_of_a_toy_policy_matches_the_analytic_gradient():
    logits = tf.Variable([0.3, -0.2, 0.5, 0.0])
    reward = tf.constant([1.0, -2.0, 0.5, 3.0])
    probs = tf.nn.softmax(logits)
    # d E[f] / d logits = sum_a p(a) f(a) (onehot(a) - p)
    analytic = (probs * reward - probs * tf.reduce_sum(probs * reward)).numpy()
    actions = tf.random.stateless_categorical(logits[None], 200000, seed=[1, 2])[0]
    with tf.GradientTape() as tape:
        log_q = tf.gather(tf.nn.log_softmax(logits), actions)
        signal = tf.gather(reward, actions)
        loss = reinforce_surrogate(signal, tf.fill(tf.shape(signal), 0.7), log_q)  # any baseline b: unbiased
    estimate = -tape.gradient(loss, logits).numpy()
    np.testing.assert_allclose(estimate, analytic, atol=0.03)
    assert np.abs(analytic).max() > 0.3  # the check can fail


def test_reconstruction_gradient_does_not_reach_the_compressor_cell():
    model = tiny("asc")
    batch = toy_batch()
    cell = [model.compressor.kernel, model.compressor.recurrent_kernel, model.compressor.bias]
    c_ids = tf.constant(batch["source_ids"][:, :3])
    with tf.GradientTape(persistent=True) as tape:
        log_p = model.reconstruction_log_p(batch["source_ids"], batch["source_mask"], c_ids, tf.ones([3, 3], bool))
        memory = model.encode(batch)
        positions, tiled = model.sample_compressions(memory, 2)
        log_q = model.compression_log_q(tiled, positions)
    assert all(g is None for g in tape.gradient(log_p, cell))
    assert all(g is not None for g in tape.gradient(log_p, model.decoder.trainable_variables))
    assert all(g is not None for g in tape.gradient(log_q, cell))  # phi still trains the cell


def test_samples_are_monotonic_and_end_once():
    model = tiny("asc")
    memory = model.encode(toy_batch())
    positions, _ = model.sample_compressions(memory, 4)
    lengths = [6, 6, 6, 6] * 2 + [4] * 4
    for row, source_len in zip(positions.numpy(), lengths):
        chosen = row[row >= 0]
        assert (np.diff(chosen) > 0).all()
        assert chosen[-1] == 6  # the end sentinel, once
        assert (chosen[:-1] < source_len).all()


@pytest.mark.parametrize("objective", ["fsc", "asc+fsc"])
def test_every_objective_trains_every_variable_it_uses(objective):
    model = tiny(objective)
    with tf.GradientTape() as tape:
        loss = model.compute_loss_from_batch(toy_batch(), training=True)
    grads = {v.path.split("/", 1)[1]: g for v, g in zip(model.trainable_variables,
                                                         tape.gradient(loss, model.trainable_variables))}
    assert np.isfinite(float(loss))
    assert grads["compressor/kernel"] is not None
    assert (grads["recon_w7/kernel"] is not None) == (objective != "fsc")
    assert (grads["selection_m"] is not None) == (objective != "asc")


@pytest.mark.parametrize("decoding", ["extractive", "pointer"])
def test_extractive_decoding_keeps_source_tokens_in_order(decoding):
    model = tiny(decoding=decoding)
    batch = toy_batch()
    ids, lengths, _, _ = decode_ids(model, batch, DecodeConfig(beam_size=3, max_length=12))
    for row, length, source_len in zip(ids.numpy(), lengths.numpy(), [6, 6, 4]):
        row = row[:length]
        assert row[-1] == EOS_ID
        copies = row[:-1] - V
        assert (copies >= 0).all() and (copies < source_len).all() and (np.diff(copies) > 0).all()


def test_token_nll_counts_target_tokens_and_eos():
    model = tiny()
    nll, count = model.token_nll(toy_batch())
    assert float(count) == 3 + 1 + 2 + 1 + 3 + 1
    assert float(nll) > 0


def test_dropout_acts_in_training_only():
    model = tiny(dropout=0.5)
    batch = toy_batch()
    scored = [float(model.compute_loss_from_batch(batch, training=False)) for _ in range(2)]
    trained = [float(model.compute_loss_from_batch(batch, training=True)) for _ in range(2)]
    assert scored[0] == scored[1]
    assert trained[0] != trained[1] and scored[0] not in trained


def test_extractive_decoding_scores_positions_by_the_eq21_mixture():
    # a kept position i is worth t alpha_i + (1 - t) beta(s_i), </s> t alpha_end + (1 - t) beta(</s>):
    # the abstractive step's copy + word probabilities, renormalised over the allowed choices
    batch = toy_batch()
    steps, model = {}, tiny()
    for decoding in ("extractive", "abstractive"):
        model.decoding = decoding  # the same weights, scored both ways
        memory = model.encode(batch)
        state = model.initial_decoding_state(memory)
        prev = tf.fill([3], BOS_ID)
        for j, pos in enumerate([0, 2]):  # after copying position 0, positions > 0 remain
            log_probs, state = model.decoding_step_fn(memory)(prev, j, state)
            prev = tf.fill([3], V + pos)
        steps[decoding] = np.exp(log_probs.numpy().astype(np.float64))
    for b, source_len in enumerate([6, 6, 4]):
        abstractive = steps["abstractive"][b]
        source = batch["source_ids"][b]
        credit = [abstractive[V + i] + abstractive[source[i]] if i > 0 else 0.0 for i in range(source_len)]
        expected = np.array(credit + [abstractive[EOS_ID]])
        expected /= expected.sum()
        got = steps["extractive"][b]
        np.testing.assert_allclose(np.r_[got[V:V + source_len], got[EOS_ID]], expected, rtol=1e-4, atol=1e-7)
        assert got.sum() == pytest.approx(1.0, abs=1e-5)


def test_compression_config_ranks_compressions_by_a_length_normalised_score():
    # configs/compression.yaml's decode section reaches the extractive search: the chosen
    # compression's score is its summed log-probs over GNMT ((5 + len) / 6) ** alpha
    from tablegen_tf.config import load_config
    from tablegen_tf.generation import search_inputs

    decode = load_config("compression").decode
    assert decode.length_penalty == pytest.approx(0.5)
    model, batch = tiny(), toy_batch()
    ids, lengths, scores, _ = decode_ids(model, batch, dataclasses.replace(decode, max_length=12))
    _, state, prev, step_fn, _ = search_inputs(model, batch, decode, tiled=False)
    ids, lengths = ids.numpy(), lengths.numpy()
    summed = np.zeros(3)
    for j in range(ids.shape[1]):
        log_probs, state = step_fn(prev, j, state)
        chosen = np.take_along_axis(log_probs.numpy(), ids[:, j:j + 1], 1)[:, 0]
        summed += np.where(j < lengths, chosen, 0.0)
        prev = tf.constant(ids[:, j])
    np.testing.assert_allclose(scores.numpy(), summed / ((5.0 + lengths) / 6.0) ** 0.5, rtol=1e-4)


def test_pretrained_embeddings_fill_the_word_table_in_vocabulary_order_and_can_freeze_it(tmp_path):
    from tablegen_tf.embeddings import initialise_word_embeddings, save_embeddings

    model = tiny()
    vocab = [f"w{i}" for i in range(V)]
    before = model.embedding.embeddings.numpy()
    scale = np.mean(np.linalg.norm(before, axis=1))
    vectors = np.eye(8, dtype=np.float32)[[3, 5]] * 2.0  # w7 -> e3, w4 -> e5 (file order differs from ids)
    path = str(tmp_path / "emb.txt")
    save_embeddings(path, ["w7", "w4"], vectors)
    message = initialise_word_embeddings(model, vocab, path, freeze=True)
    assert message.startswith("word embeddings: 2 of 30 vocabulary words") and "(frozen)" in message
    after = model.embedding.embeddings.numpy()
    np.testing.assert_allclose(after[7], np.eye(8)[3] * scale, rtol=1e-5)
    np.testing.assert_allclose(after[4], np.eye(8)[5] * scale, rtol=1e-5)
    untouched = [i for i in range(V) if i not in (4, 7)]
    np.testing.assert_array_equal(after[untouched], before[untouched])
    assert not any("embedding" in v.path and "shape" not in v.path for v in model.trainable_variables)


def test_token_shapes_tell_names_numbers_and_unknown_words_apart():
    from tablegen_tf.constants import UNK_ID
    from tablegen_tf.models.compression.model import NUM_SHAPES, token_shape_ids

    text = tf.constant([["Obama", "said", "NATO", "G20", ",", "U.S.", ""]])
    ids = tf.constant([[UNK_ID, 9, 9, UNK_ID, 9, 9, 0]])
    mask = tf.constant([[True] * 6 + [False]])
    # 1 number, 2 punctuation, 3 lower, 4 ALL CAPS, 5 Capitalised; + NUM_SHAPES when <unk>; 0 padding
    assert token_shape_ids(text, ids, mask).numpy().tolist() == [[5 + NUM_SHAPES, 3, 4, 1 + NUM_SHAPES, 2, 4, 0]]


def test_shape_features_and_a_smaller_softmax_train_and_decode():
    model = tiny(shape_dim=3, softmax_words=12)  # toy source ids 4..29: most are beyond the softmax
    batch = toy_batch()
    with tf.GradientTape() as tape:
        loss = model.compute_loss_from_batch(batch, training=True)
    grads = dict(zip([v.path.split("/", 1)[1] for v in model.trainable_variables],
                     tape.gradient(loss, model.trainable_variables)))
    assert np.isfinite(float(loss))
    assert grads["shape_embedding/embeddings"] is not None
    assert model.vocab_output.kernel.shape[-1] == 12
    ids, lengths, _, _ = decode_ids(model, batch, DecodeConfig(beam_size=3, max_length=12))
    for row, length in zip(ids.numpy(), lengths.numpy()):
        assert row[length - 1] == EOS_ID and (row[:length - 1] >= V).all()
    model.decoding = "abstractive"  # eq. 21 over the full vocabulary: zero for the words beyond the softmax
    log_probs, _ = model.decoding_step_fn(model.encode(batch))(tf.fill([3], BOS_ID), 0, model.initial_decoding_state(
        model.encode(batch)))
    assert log_probs.shape[-1] == V + 6 and np.all(log_probs.numpy()[:, 12:V] < -1e8)


def test_trainable_words_fine_tune_frequent_rows_and_keep_the_table_fixed():
    model = tiny(trainable_words=10)
    ids = tf.constant([[5, 20]])
    np.testing.assert_array_equal(model.embed(ids).numpy(), model.embedding(ids).numpy())  # zero offsets at first
    model.word_offsets.embeddings.assign(tf.reshape(tf.range(80, dtype=tf.float32), [10, 8]))
    vectors = model.embed(ids).numpy()[0]
    np.testing.assert_array_equal(vectors[0] - model.embedding.embeddings.numpy()[5], np.arange(40, 48))
    np.testing.assert_array_equal(vectors[1] - model.embedding.embeddings.numpy()[20], np.arange(8, 16))  # <unk>'s
    paths = [v.path.split("/", 1)[1] for v in model.trainable_variables]  # the model's name varies
    assert "word_offsets/embeddings" in paths
    assert "embedding/embeddings" not in paths


def test_tagging_loss_is_the_keep_tagger_cross_entropy_on_labelled_tokens():
    model = tiny(tagging_weight=0.5)
    batch = toy_batch()
    memory = model.encode(batch)
    logits = tf.squeeze(model.tagger(memory["states"][:, :-1]), -1).numpy()[:2]  # example 2 has no labels
    labels = batch["labels"][:2]
    p = 1.0 / (1.0 + np.exp(-logits))
    expected = -np.mean(np.where(labels == 1, np.log(p), np.log(1.0 - p)))
    assert float(model.tagging_loss(batch, memory)) == pytest.approx(expected, rel=1e-5)
    joint = float(model.compute_loss_from_batch(batch))
    model.tagging_weight = 0.0  # the same weights, eq. 22 alone
    assert joint == pytest.approx(float(model.compute_loss_from_batch(batch)) + 0.5 * expected, rel=1e-5)


def test_tagger_decoding_multiplies_each_choice_by_the_taggers_probability():
    # after keeping position 0: keep i > 0 is worth p(keep i) * prod_{0<j<i} p(drop j), </s> prod_{j>0} p(drop j)
    model, batch = tiny(tagging_weight=1.0), toy_batch()
    steps = {}
    for weight in (0.0, 2.0):
        model.tagger_decoding_weight = weight
        memory = model.encode(batch)
        step_fn, state = model.decoding_step_fn(memory), model.initial_decoding_state(memory)
        _, state = step_fn(tf.fill([3], BOS_ID), 0, state)
        steps[weight] = step_fn(tf.fill([3], V + 0), 1, state)[0].numpy().astype(np.float64)
    logits = tf.squeeze(model.tagger(memory["states"][:, :-1]), -1).numpy().astype(np.float64)
    keep, drop = -np.logaddexp(0, -logits), -np.logaddexp(0, logits)
    for b, length in enumerate([6, 6, 4]):
        tagger = [keep[b, i] + drop[b, 1:i].sum() for i in range(1, length)] + [drop[b, 1:length].sum()]
        plain = np.r_[steps[0.0][b, V + 1:V + length], steps[0.0][b, EOS_ID]]
        expected = plain + 2.0 * np.array(tagger)
        expected -= np.logaddexp.reduce(expected)
        got = np.r_[steps[2.0][b, V + 1:V + length], steps[2.0][b, EOS_ID]]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_tagger_keep_bias_shifts_the_keep_logits_in_decoding_only():
    model, batch = tiny(tagging_weight=1.0, tagger_decoding_weight=1.0), toy_batch()
    plain, loss = model.encode(batch), float(model.compute_loss_from_batch(batch))
    model.tagger_keep_bias = -1.5
    biased = model.encode(batch)
    logits = tf.squeeze(model.tagger(plain["states"][:, :-1]), -1).numpy() - 1.5
    np.testing.assert_allclose(biased["keep_scores"].numpy(), -np.logaddexp(0, -logits), rtol=1e-5, atol=1e-6)
    assert float(model.compute_loss_from_batch(batch)) == pytest.approx(loss, rel=1e-6)  # training: unchanged


def test_syntax_loss_is_the_label_and_head_cross_entropy_on_parsed_tokens():
    model, batch = tiny(syntax_weight=0.5), toy_batch()
    # example 0 parsed (token 2 is the root: its own head); example 1 unparsed; example 2 parsed, 4 tokens
    batch["dep_labels"] = np.array([[3, 5, 0, 7, 1, 2], [-1] * 6, [4, 0, 6, 8, -1, -1]], np.int32)
    batch["dep_heads"] = np.array([[2, 2, 2, 4, 2, 4], [-1] * 6, [1, 1, 1, 2, -1, -1]], np.int32)
    memory = model.encode(batch)
    states = memory["states"][:, :-1].numpy().astype(np.float64)
    label_logits = model.dep_label_output(memory["states"][:, :-1]).numpy().astype(np.float64)
    queries = model.dep_head_query(memory["states"][:, :-1]).numpy().astype(np.float64)
    label_losses, head_losses = [], []
    for b, length in ((0, 6), (2, 4)):
        for i in range(length):
            label_losses.append(np.logaddexp.reduce(label_logits[b, i]) - label_logits[b, i, batch["dep_labels"][b, i]])
            scores = states[b, :length] @ queries[b, i]
            head_losses.append(np.logaddexp.reduce(scores) - scores[batch["dep_heads"][b, i]])
    label_loss, head_loss = model.syntax_loss(batch, memory)
    assert float(label_loss) == pytest.approx(np.mean(label_losses), rel=1e-4)
    assert float(head_loss) == pytest.approx(np.mean(head_losses), rel=1e-4)
    joint = float(model.compute_loss_from_batch(batch))
    model.syntax_weight, model.dep_label_output = 0.0, None  # the same weights, eq. 22 alone
    expected = float(model.compute_loss_from_batch(batch)) + 0.5 * (np.mean(label_losses) + np.mean(head_losses))
    assert joint == pytest.approx(expected, rel=1e-4)

import keras
import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.config import build_config
from tablegen_tf.constants import BOS_ID, EOS_ID, PAD_ID
from tablegen_tf.data.input_pipeline import Vocabularies
from tablegen_tf.models import get_family
from tablegen_tf.models.backbone_lm.model import split_chains

E = EOS_ID
WORDS = ["<pad>", "<unk>", "<s>", "</s>", "the", "cat", "sat", "on", "a", "mat", "dog", "ran", "fast", "today"]
TINY = {"word_dim": 4, "hidden_size": 6}


def _setup(name, seed=0):
    keras.utils.set_random_seed(seed)
    config = build_config({"model": {"name": name, **TINY}, "decode": {"beam_size": 3, "max_length": 8}})
    family = get_family(name)
    vocabs = Vocabularies({"words": WORDS, "fields": ["<pad>", "<unk>", "<none>"],
                           "entities": ["<pad>", "<unk>", "<none>"], "groups": ["<pad>", "<unk>", "<none>"]})
    model = family.build_model(config, {"words": len(WORDS)})
    return config, vocabs, family.featurizer(vocabs, config), model


def _batch(sentences, positions):
    """A featurizer-like batch of sentences (word ids), as target_out / target_mask."""
    longest = max(len(s) for s in sentences) + 1
    out = np.zeros([len(sentences), longest], np.int32)
    mask = np.zeros([len(sentences), longest], bool)
    for row, s in enumerate(sentences):
        out[row, : len(s) + 1] = s + [E]
        mask[row, : len(s) + 1] = True
    target_in = np.concatenate([np.full([len(sentences), 1], BOS_ID), out[:, :-1]], 1)
    target_in[~mask] = PAD_ID
    return {"target_out": tf.constant(out), "target_in": tf.constant(target_in.astype(np.int32)),
            "target_mask": tf.constant(mask), "word_position": tf.constant(positions, tf.int32)}


def test_chain_split_and_padding_eq5_hand_example():
    # w = 10 11 12 13 14 (m = 5): split at s = 2 (w_3 = 12, 0-based 2) and at s = 0.
    words = tf.constant([[10, 11, 12, 13, 14], [10, 11, 12, 13, 14]])
    chains = {k: v.numpy() for k, v in split_chains(words, [5, 5], [2, 0]).items()}
    T = 6  # max(s + 2, m - s + 1) over the batch
    assert chains["bw_out"].shape == (2, T)
    np.testing.assert_array_equal(chains["bw_out"][0], [12, 11, 10, E, E, E])
    np.testing.assert_array_equal(chains["fw_out"][0], [12, 13, 14, E, E, E])
    np.testing.assert_array_equal(chains["bw_in"][0], [BOS_ID, 12, 11, 10, E, E])
    np.testing.assert_array_equal(chains["fw_in"][0], [BOS_ID, 12, 13, 14, E, E])
    np.testing.assert_array_equal(chains["bw_mask"][0], [1, 1, 1, 1, 0, 0])  # first </s> scored, padding not
    np.testing.assert_array_equal(chains["fw_mask"][0], [1, 1, 1, 1, 0, 0])
    # s = 0: the backward chain is w_1 </s>, padded with </s> until the forward chain ends.
    np.testing.assert_array_equal(chains["bw_out"][1], [10, E, E, E, E, E])
    np.testing.assert_array_equal(chains["bw_mask"][1], [1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(chains["fw_out"][1], [10, 11, 12, 13, 14, E])
    np.testing.assert_array_equal(chains["fw_mask"][1], [1, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(chains["bw_word"][1], [1, 0, 0, 0, 0, 0])


def test_loss_is_both_heads_cross_entropy_including_w_s():
    _, _, _, model = _setup("backbone-lm")
    batch = _batch([[4, 5, 6, 7, 8, 9], [10, 11]], [3, 1])
    loss = float(model.compute_loss_from_batch(batch, training=False))
    chains = split_chains(batch["target_out"], [6, 2], [3, 1])
    hidden = model._run(model._inputs(chains["fw_in"], chains["bw_in"])).numpy()
    total, count = 0.0, 0
    for head, key in ((model.bw_head, "bw"), (model.fw_head, "fw")):
        logits = head(hidden).numpy()
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        labels, mask = chains[f"{key}_out"].numpy(), chains[f"{key}_mask"].numpy()
        for b, t in zip(*np.nonzero(mask)):
            total -= log_probs[b, t, labels[b, t]]
            count += 1
    assert count == (5 + 4) + (3 + 2)  # w_s counted by both heads at t = 0 (the paper's choice)
    np.testing.assert_allclose(loss, total / count, rtol=1e-5)
    with tf.GradientTape() as tape:
        loss = model.compute_loss_from_batch(batch, training=True)
    grads = tape.gradient(loss, [model.bw_head.kernel, model.fw_head.kernel])
    assert all(float(tf.reduce_sum(tf.abs(g))) > 0 for g in grads)  # both heads are trained


def test_random_split_changes_between_steps():
    _, _, _, model = _setup("backbone-lm")
    batch = _batch([[4, 5, 6, 7, 8, 9, 10, 11, 12, 13]] * 8, [0] * 8)
    losses = {round(float(model.compute_loss_from_batch(batch, training=True)), 6) for _ in range(4)}
    assert len(losses) > 1


@pytest.mark.parametrize("oracle", [False, True])
def test_stream_step_fn_scores_equal_the_chain_likelihood(oracle):
    # Teacher-forcing the interleaved stream through decoding_step_fn gives eq. 5's log-probability.
    _, _, _, model = _setup("backbone-lm", seed=3)
    sentence, s = [4, 5, 6, 7, 8], 1  # chains: bw 5 4 </s>, fw 5 6 7 8 </s>
    stream = [4, 6, BOS_ID, 7, BOS_ID, 8, BOS_ID, EOS_ID]  # bw, fw, bw, fw ... (markers: <s>, then the end)
    memory = model.encode({"word_id": tf.constant([sentence[s]])})
    state, step_fn = model.initial_decoding_state(memory), model.decoding_step_fn(memory)
    prev, total = tf.constant([BOS_ID]), 0.0
    for t, token in enumerate(stream):
        log_probs, state = step_fn(prev, tf.constant(t), state)
        total += float(log_probs[0, token])
        prev = tf.constant([token])
    nll, distance, mask = model.position_nll(_batch([sentence], [s]), oracle=True)
    chains = split_chains(tf.constant([sentence]), [5], [s])
    bw, fw = model.chain_nll(chains)
    expected = -(tf.reduce_sum(bw[:, 1:] * tf.cast(chains["bw_mask"][:, 1:], tf.float32))
                 + tf.reduce_sum(fw[:, 1:] * tf.cast(chains["fw_mask"][:, 1:], tf.float32)))
    np.testing.assert_allclose(total, float(expected), rtol=1e-4)
    assert int(tf.reduce_sum(tf.cast(mask, tf.int32))) == 5  # each word once
    np.testing.assert_array_equal(np.sort(distance.numpy()[mask.numpy()]), [0, 1, 1, 2, 3])


def test_token_nll_counts_each_word_once_without_eos():
    for name in ("backbone-lm", "seq-lm"):
        _, _, _, model = _setup(name)
        total, count = model.token_nll(_batch([[4, 5, 6], [7, 8, 9, 10, 11]], [1, 4]))
        assert float(count) == 8 and float(total) > 0


def _around(featurizer, model, words, beam=3):
    import types

    module = types.SimpleNamespace(featurizer=featurizer, decode=featurizer.config.decode)
    signature = model.serving_signatures(module)["generate_around"]
    out = signature(tf.constant(words), tf.constant(beam), tf.constant(6))
    return [t.decode() for t in out["text"].numpy()], out["score"].numpy()


@pytest.mark.parametrize("name", ["backbone-lm", "seq-lm"])
@pytest.mark.parametrize("seed", [1])
def test_the_word_is_in_every_output_also_out_of_vocabulary(name, seed):
    _, _, featurizer, model = _setup(name, seed)
    words = ["cat", "mat", "zyzzyva", "today", "Dog"]  # an OOV word and a capitalised one
    texts, scores = _around(featurizer, model, words)
    assert len(texts) == 5 and np.isfinite(scores).all()
    for word, text in zip(words, texts):
        assert word in text.split(), (word, text)
    assert "<unk>" not in texts[2]


@pytest.mark.slow
def test_savedmodel_parity_of_generate_around(tmp_path):
    import types

    config, vocabs, featurizer, model = _setup("backbone-lm", seed=5)
    around = model.serving_signatures(types.SimpleNamespace(featurizer=featurizer, decode=config.decode))[
        "generate_around"]
    words = tf.constant(["cat", "zyzzyva", "the"])
    expected = around(words, tf.constant(2), tf.constant(6))
    holder = tf.Module()  # only this signature (ServingModule's others are tested in tablegen_tf/export tests)
    holder.model, holder.vocabs, holder.tokenizer, holder.around = model, vocabs, featurizer.tokenizer, around
    tf.saved_model.save(holder, str(tmp_path), signatures={"generate_around": around})
    loaded = tf.saved_model.load(str(tmp_path)).signatures["generate_around"]
    got = loaded(words=words, beam_size=tf.constant(2), max_length=tf.constant(6))
    np.testing.assert_array_equal(got["text"].numpy(), expected["text"].numpy())
    np.testing.assert_allclose(got["score"].numpy(), expected["score"].numpy(), rtol=1e-5)

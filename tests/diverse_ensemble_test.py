"""benchmarks/diverse_ensemble.py (Gehrmann et al. 2018 diverse ensembling): each example goes
to the member that scores it best, and a member's step is the token mean over the examples it won."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from trainer_test import data_dir  # noqa: F401  (fixture; tests/ is on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
FULL_MODEL = os.path.join(ROOT, "tablegen_tf", "configs", "order_planning", "t3_copy_hybrid.yaml")


def test_each_example_goes_to_the_member_with_the_lowest_nll():
    from diverse_ensemble import assignment

    nll = tf.constant([[3.0, 1.0, 5.0, 2.0], [2.0, 4.0, 5.5, 2.5], [9.0, 9.0, 4.0, 2.0]])
    np.testing.assert_array_equal(assignment(nll, "mcl").numpy(),
                                  [[0, 1, 0, 1], [1, 0, 0, 0], [0, 0, 1, 0]])  # a tie goes to the first
    np.testing.assert_array_equal(assignment(nll, "independent").numpy(), np.ones([3, 4]))


@pytest.fixture(scope="module")
def members(data_dir, tmp_path_factory):  # noqa: F811
    from tablegen_tf.config import load_config, parse_overrides
    from tablegen_tf.training.trainer import Trainer, load_trained

    root = tmp_path_factory.mktemp("members")
    runs = []
    for seed in (1, 2):
        out = str(root / f"seed{seed}")
        config = load_config("e2e", parse_overrides([
            f"model=@{FULL_MODEL}", "model.hidden_size=8", "model.word_dim=8", "model.field_dim=4", "model.l2=0",
            "data.batch_size=8", "data.shuffle_buffer=16", "train.max_steps=4", "train.eval_every_steps=4",
            "train.checkpoint_every_steps=4", f"train.seed={seed}", "decode.beam_size=1", "decode.max_length=8",
            f"data.train={os.path.join(data_dir, 'train')}", f"data.valid={os.path.join(data_dir, 'valid')}",
        ]))
        Trainer(config, out).train(progress=False)
        runs.append(load_trained(out))
    return runs


def test_a_member_trains_on_the_examples_it_won_and_only_then(members, data_dir):  # noqa: F811
    from diverse_ensemble import joint_step_fn, token_nll

    models = [trained.model for trained in members]
    batch = next(iter(members[0].featurizer.dataset(os.path.join(data_dir, "train"), training=True, seed=1)))
    nll = np.stack([token_nll(model, batch, training=False).numpy().sum(1) for model in models])
    won = (nll == nll.min(0)).astype(np.float32)
    won[1] *= 1 - won[0]  # ties go to the first member
    # the loss a member steps on: its token mean over the examples it won
    expected = [float(model.compute_loss_from_batch({**batch, "target_mask": batch["target_mask"] * won[k][:, None]}))
                if won[k].any() else 0.0 for k, model in enumerate(models)]
    before = [[w.numpy() for w in model.trainable_variables] for model in models]
    optimizers = [tf.keras.optimizers.Adam(1e-2) for _ in models]
    losses, counts, rows, _ = joint_step_fn(models, optimizers, "mcl")(batch)
    np.testing.assert_allclose(losses.numpy(), expected, rtol=1e-5)
    np.testing.assert_array_equal(counts.numpy(), won.sum(1))
    assert int(rows) == nll.shape[1]
    for k, model in enumerate(models):  # a fresh Adam moves no weight on a zero gradient
        moved = any(not np.array_equal(old, new.numpy()) for old, new in zip(before[k], model.trainable_variables))
        assert moved == bool(won[k].any())


def test_the_mixture_loss_is_the_nll_of_the_members_average_probability():
    from diverse_ensemble import mixture_nll

    # two members, one example of three tokens (the last is padding)
    token_nlls = tf.constant([[[np.log(2.0), np.log(4.0), 7.0]], [[np.log(4.0), np.log(4.0), 9.0]]], tf.float32)
    mask = tf.constant([[1.0, 1.0, 0.0]])
    # token 1: (1/2 + 1/4) / 2 = 3/8; token 2: 1/4
    expected = -(np.log(3 / 8) + np.log(1 / 4)) / 2
    np.testing.assert_allclose(float(mixture_nll(token_nlls, mask)), expected, rtol=1e-6)


def test_scheduled_sampling_feeds_the_members_own_words_after_the_start(members, data_dir):  # noqa: F811
    from diverse_ensemble import sampled_inputs

    model = members[0].model
    batch = next(iter(members[0].featurizer.dataset(os.path.join(data_dir, "train"), training=True, seed=1)))
    gold = batch["target_in"].numpy()
    np.testing.assert_array_equal(sampled_inputs(model, batch, 0.0).numpy(), gold)
    tf.random.set_seed(1)
    mixed = sampled_inputs(model, batch, 1.0).numpy()
    np.testing.assert_array_equal(mixed[:, 0], gold[:, 0])  # <s> stays
    assert (mixed[:, 1:] != gold[:, 1:]).any()  # an 8-unit model after 4 steps does not sample the references
    assert mixed.min() >= 0 and mixed.max() < model.word_vocab_size  # words, never copy slots

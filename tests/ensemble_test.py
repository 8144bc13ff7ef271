"""Ensembles of trained runs (tablegen_tf.ensemble): the exported ensemble SavedModel says
what in-process ensemble decoding says, the ensemble differs from its first member, and
runs that cannot share a featurizer are refused with the reason, families that share one ensemble."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from trainer_test import data_dir, tiny_config  # noqa: F401  (fixture; tests/ is on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVSET = os.path.join(ROOT, "tests", "fixtures", "e2e", "devset.csv")


@pytest.fixture(scope="module")
def runs(data_dir, tmp_path_factory):  # noqa: F811
    from tablegen_tf.training.trainer import Trainer

    root = tmp_path_factory.mktemp("ensemble")
    outs = []
    for seed in (1, 2):
        out = str(root / f"seed{seed}")
        Trainer(tiny_config(data_dir, max_steps=12, seed=seed), out).train(progress=False)
        outs.append(out)
    return outs


def first_step_log_probs(model, features):
    """The model's first decoding step from <s> on ``features``: log-probs [N, V + R]."""
    from tablegen_tf.constants import BOS_ID

    memory = model.encode(features)
    start = tf.fill([tf.shape(features["record_mask"])[0]], BOS_ID)
    return model.decoding_step_fn(memory)(start, 0, model.initial_decoding_state(memory))[0].numpy()


@pytest.fixture(scope="module")
def tables():
    from tablegen_tf.inference import read_inputs

    raw, _ = read_inputs("e2e", DEVSET, "valid")
    return tf.constant([table.serving_input() for table in raw])


@pytest.mark.slow
def test_the_ensemble_savedmodel_says_what_in_process_ensemble_decoding_says(runs, tables, tmp_path):
    from tablegen_tf.ensemble import load_ensemble
    from tablegen_tf.export import MEMBERS_ASSET, export_saved_model
    from tablegen_tf.generation import decode_text
    from tablegen_tf.training.trainer import load_trained

    # Unequal weights ([1, 3] = --ensemble-weights), so the SavedModel must carry them in
    # the graph; one search (these few tables never take the parallel-searches branch, and
    # without it the export traces half as much).
    weighted = load_ensemble(runs, [1, 3])
    features = weighted.featurizer.serving_features(tables)
    expected = list(decode_text(weighted.model, weighted.featurizer, features, weighted.config.decode)[0].numpy())
    alone = list(decode_text(load_trained(runs[0]).model, weighted.featurizer, features,
                             weighted.config.decode)[0].numpy())
    assert alone != expected, "the second member changes no output: this test could not fail"
    export_dir = export_saved_model(runs[0], str(tmp_path / "weighted"), ensemble=runs[1:], ensemble_weights=[1, 3],
                                    decode_overrides={"parallel_searches": 1})
    served = tf.saved_model.load(export_dir).signatures["serving_default"](tables=tables)
    assert list(served["text"].numpy()) == expected
    with open(os.path.join(export_dir, MEMBERS_ASSET), encoding="utf-8") as handle:
        assert json.load(handle)["weights"] == [0.25, 0.75]


def test_runs_with_different_vocabularies_are_refused(runs, tmp_path):
    from tablegen_tf.ensemble import load_ensemble

    other = str(tmp_path / "other")
    shutil.copytree(runs[1], other)
    with open(os.path.join(other, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    config["data"]["vocab"] = os.path.join(other, "vocab")  # the copy's own vocabularies
    with open(os.path.join(other, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    words = os.path.join(other, "vocab", "words.txt")
    with open(words, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    lines[-1], lines[-2] = lines[-2], lines[-1]
    with open(words, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="vocabularies differ"):
        load_ensemble([runs[0], other])



def test_the_listener_scores_each_beam_as_the_search_did_and_masking_is_removal(runs, tables):
    """tablegen_tf.pragmatics: teacher-forcing the kept beams through the ensemble's step
    function under their own tables gives the search's scores; a table with an attribute
    masked gives the model what the table without that attribute gives it."""
    import dataclasses

    from tablegen_tf.ensemble import load_ensemble
    from tablegen_tf.generation import decode_beams
    from tablegen_tf.inference import read_inputs
    from tablegen_tf.pragmatics import teacher_forced_log_probs

    ensemble = load_ensemble(runs)
    config = dataclasses.replace(ensemble.config.decode, beam_size=3, length_penalty=0.0, slot_end_penalty=0.0)
    features = ensemble.featurizer.serving_features(tables)
    ids, lengths, scores, _, _ = decode_beams(ensemble.model, ensemble.featurizer, features, config)
    forced = teacher_forced_log_probs(ensemble.model, features, tf.reshape(ids, [-1, tf.shape(ids)[2]]),
                                      tf.reshape(lengths, [-1]), 3)
    alive = np.isfinite(scores.numpy().reshape(-1))
    assert alive.sum() > len(alive) // 2
    np.testing.assert_allclose(forced.numpy()[alive], scores.numpy().reshape(-1)[alive], rtol=1e-4, atol=1e-4)

    raw, _ = read_inputs("e2e", DEVSET, "valid")
    variants, valid = ensemble.featurizer.omission_variants(features)
    batch = len(raw)
    assert valid.numpy()[1:, 0].sum() == len(raw[0].items) - 1  # every attribute but the name
    k = next(k for k, item in enumerate(raw[0].items) if item.field != "name")  # its first attribute
    without = dataclasses.replace(raw[0], items=raw[0].items[:k] + raw[0].items[k + 1:])
    removed = ensemble.featurizer.serving_features(tf.constant([without.serving_input()]))
    masked = {key: value[batch: batch + 1] for key, value in variants.items()}  # table 0 without attribute 0

    def first_step(features):
        return first_step_log_probs(ensemble.model, features)[:, : ensemble.featurizer.vocabs.words.shape[0]]

    np.testing.assert_allclose(first_step(masked), first_step(removed), rtol=1e-4, atol=1e-5)
    assert not np.allclose(first_step(masked), first_step({k: v[:1] for k, v in features.items()}), atol=1e-5)


def test_member_weights_mix_the_step_distributions_and_a_zero_weight_drops_a_member(runs, tables):
    """--ensemble-weights: p = sum_n w_n p_n with w normalised; (1, 0) is the first member
    alone, (3, 3) the equal-weight ensemble, (3, 1) lies between them."""
    from tablegen_tf.ensemble import load_ensemble
    from tablegen_tf.training.trainer import load_trained

    features = load_trained(runs[0]).featurizer.serving_features(tables[:4])

    def first_step(trained):
        return np.exp(first_step_log_probs(trained.model, features))

    alone = [first_step(load_trained(run)) for run in runs]
    assert not np.allclose(alone[0], alone[1], atol=1e-4), "the members agree: this test could not fail"
    np.testing.assert_allclose(first_step(load_ensemble(runs, [1, 0])), alone[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(first_step(load_ensemble(runs, [3, 3])), first_step(load_ensemble(runs)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(first_step(load_ensemble(runs, [3, 1])), 0.75 * alone[0] + 0.25 * alone[1],
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("weights, message", [
    ([1.0], "1 weights for 2 members"),
    ([1.0, -1.0], "must be >= 0"),
    ([0.0, 0.0], "not all 0"),
])
def test_weights_that_do_not_fit_the_members_are_refused_before_loading(weights, message):
    from tablegen_tf.ensemble import load_ensemble

    with pytest.raises(ValueError, match=message):
        load_ensemble(["no-such-run-1", "no-such-run-2"], weights)


@pytest.mark.slow
def test_families_that_share_a_featurizer_ensemble_over_one_extended_vocabulary(runs, tables, data_dir, tmp_path):  # noqa: F811
    """encdec-copy beside order-planning: both read TableFeaturizer batches and give log-probs
    over the same V + R ids (CONTRACT.md), so the ensemble's step is the mean of theirs over
    every id, copy slots included, and it decodes."""
    from tablegen_tf.config import load_config
    from tablegen_tf.ensemble import load_ensemble
    from tablegen_tf.generation import decode_text
    from tablegen_tf.training.trainer import Trainer, load_trained
    from trainer_test import TINY

    planned = str(tmp_path / "order-planning")
    overrides = {**TINY, "model": {"name": "order-planning", "hidden_size": 8, "word_dim": 8, "field_dim": 4},
                 "train": {**TINY["train"], "max_steps": 12},
                 "data": {**TINY["data"], "train": os.path.join(data_dir, "train"),
                          "valid": os.path.join(data_dir, "valid")}}
    Trainer(load_config("e2e", overrides), planned).train(progress=False)
    members = [load_trained(runs[0]), load_trained(planned)]
    assert [m.family.name for m in members] == ["encdec-copy", "order-planning"]
    ensemble = load_ensemble([runs[0], planned])
    features = ensemble.featurizer.serving_features(tables[:4])
    alone = [np.exp(first_step_log_probs(m.model, features)) for m in members]
    assert alone[0].shape == alone[1].shape  # [N, V + R] for both families
    assert not np.allclose(alone[0], alone[1], atol=1e-4)
    np.testing.assert_allclose(np.exp(first_step_log_probs(ensemble.model, features)), 0.5 * (alone[0] + alone[1]),
                               rtol=1e-4, atol=1e-6)
    text = decode_text(ensemble.model, ensemble.featurizer, features, ensemble.config.decode)[0].numpy()
    assert len(text) == len(tables[:4]) and all(len(t) for t in text)


def test_runs_of_different_example_forms_are_refused(runs):
    """A family of another featurizer (here a text family's) cannot read the first run's batches."""
    import dataclasses

    from tablegen_tf.ensemble import check_compatible
    from tablegen_tf.models import get_family
    from tablegen_tf.training.trainer import load_trained

    first = load_trained(runs[0])
    other = dataclasses.replace(load_trained(runs[1]), family=get_family("fsc"))
    with pytest.raises(ValueError, match="family 'fsc' reads 'text' examples"):
        check_compatible([first, other])
    check_compatible([first, load_trained(runs[1])])

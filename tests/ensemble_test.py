"""Ensembles of trained runs (tablegen_tf.ensemble): the exported ensemble SavedModel says
what in-process ensemble decoding says, the ensemble differs from its first member, and
runs that cannot share a featurizer are refused with the reason."""

import json
import os
import shutil

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


@pytest.fixture(scope="module")
def tables():
    from tablegen_tf.inference import read_inputs

    raw, _ = read_inputs("e2e", DEVSET, "valid")
    return tf.constant([table.serving_input() for table in raw])


@pytest.mark.slow
def test_the_ensemble_savedmodel_says_what_in_process_ensemble_decoding_says(runs, tables, tmp_path):
    from tablegen_tf.ensemble import load_ensemble
    from tablegen_tf.export import export_saved_model
    from tablegen_tf.generation import decode_text
    from tablegen_tf.training.trainer import load_trained

    ensemble = load_ensemble(runs)
    features = ensemble.featurizer.serving_features(tables)
    expected = list(decode_text(ensemble.model, ensemble.featurizer, features, ensemble.config.decode)[0].numpy())
    alone = list(decode_text(load_trained(runs[0]).model, ensemble.featurizer, features,
                             ensemble.config.decode)[0].numpy())
    assert alone != expected, "the second member changes no output: this test could not fail"
    export_dir = export_saved_model(runs[0], str(tmp_path / "export"), ensemble=runs[1:])
    served = tf.saved_model.load(export_dir).signatures["serving_default"](tables=tables)
    assert list(served["text"].numpy()) == expected


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

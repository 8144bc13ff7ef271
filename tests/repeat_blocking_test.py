"""decode.no_repeat_ngram_size on a real (tiny, barely trained, so repetitive) model: no text
repeats an n-gram, beams and greedy alike, and the SavedModel says what in-process decoding says."""

import dataclasses
import os

import pytest
import tensorflow as tf

from trainer_test import data_dir, tiny_config  # noqa: F401  (fixture; tests/ is on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVSET = os.path.join(ROOT, "tests", "fixtures", "e2e", "devset.csv")


@pytest.fixture(scope="module")
def run(data_dir, tmp_path_factory):  # noqa: F811
    from tablegen_tf.training.trainer import Trainer

    out = str(tmp_path_factory.mktemp("repeats") / "run")
    Trainer(tiny_config(data_dir, max_steps=12, seed=1), out).train(progress=False)
    return out


@pytest.fixture(scope="module")
def tables():
    from tablegen_tf.inference import read_inputs

    raw, _ = read_inputs("e2e", DEVSET, "valid")
    return tf.constant([table.serving_input() for table in raw])


def repeated_ngrams(trained, features, config, size):
    """Texts (as token strings, copies resolved) of ``config``'s search that say an n-gram twice."""
    from tablegen_tf.data.featurizer import ids_to_tokens
    from tablegen_tf.generation import decode_ids, repeat_blocker

    featurizer = trained.featurizer
    ids, lengths, _, _ = decode_ids(trained.model, features, config, end_gate=None,
                                    blocker=repeat_blocker(featurizer, features, config))
    tokens = ids_to_tokens(ids, lengths, featurizer.vocabs.words, featurizer.copy_texts(features)).to_list()
    grams = [[tuple(row[i:i + size]) for i in range(len(row) - size + 1)] for row in tokens]
    return [row for row, g in zip(tokens, grams) if len(set(g)) < len(g)]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_blocked_search_never_repeats_an_ngram(run, tables, beam_size):
    from tablegen_tf.training.trainer import load_trained

    trained = load_trained(run)
    features = trained.featurizer.serving_features(tables)
    plain = dataclasses.replace(trained.config.decode, beam_size=beam_size, max_length=30)
    assert repeated_ngrams(trained, features, plain, 2), "the model repeats nothing: this test could not fail"
    blocked = dataclasses.replace(plain, no_repeat_ngram_size=2)
    assert repeated_ngrams(trained, features, blocked, 2) == []


@pytest.mark.slow
def test_the_savedmodel_blocks_repeats_as_in_process_decoding_does(run, tables, tmp_path):
    from tablegen_tf.export import export_saved_model
    from tablegen_tf.generation import decode_text
    from tablegen_tf.training.trainer import load_trained

    trained = load_trained(run)
    features = trained.featurizer.serving_features(tables)
    overrides = {"no_repeat_ngram_size": 3, "beam_size": 4, "parallel_searches": 1}
    config = dataclasses.replace(trained.config.decode, **overrides)
    expected = list(decode_text(trained.model, trained.featurizer, features, config)[0].numpy())
    plain = list(decode_text(trained.model, trained.featurizer, features,
                             dataclasses.replace(config, no_repeat_ngram_size=0))[0].numpy())
    assert expected != plain, "blocking changes no output: this test could not fail"
    export_dir = export_saved_model(run, str(tmp_path / "blocked"), decode_overrides=overrides)
    served = tf.saved_model.load(export_dir).signatures["serving_default"](tables=tables)
    assert list(served["text"].numpy()) == expected

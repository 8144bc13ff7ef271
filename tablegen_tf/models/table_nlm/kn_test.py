import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.config import DecodeConfig
from tablegen_tf.generation import decode_ids
from tablegen_tf.models.table_nlm.kn import Distributions, KNModel, fit_lm, template

CORPUS = [
    "the eagle is a cheap pub near the river".split(),
    "the mill is a pub".split(),
    "the eagle serves cheap food near the mill".split(),
    "a cheap pub is the eagle".split(),
]
WORDS = ["<pad>", "<unk>", "<s>", "</s>", "the", "eagle", "is", "a", "cheap", "pub", "near", "river", "mill",
         "serves", "food", "zzz"]


def test_indexed_kn_equals_nltk_word_by_word():
    reference = fit_lm(CORPUS, 3, 0.75, indexed=False)  # nltk.lm.KneserNeyInterpolated as is
    indexed = fit_lm(CORPUS, 3, 0.75)
    dist = Distributions(indexed, WORDS)
    for context in [(), ("the",), ("the", "eagle"), ("<s>", "<s>"), ("a", "cheap"), ("zzz", "pub")]:
        vector = dist.distribution(context)
        expected = [reference.score(w, context) for w in WORDS]
        np.testing.assert_allclose(vector, expected, rtol=1e-9, atol=1e-12)
    assert dist.distribution(("the", "eagle"))[6] > dist.distribution(("the", "eagle"))[9]  # "is" > "pub"


def test_template_replaces_table_words_by_their_descriptor():
    fields, values, pos = ["name", "name", "food"], ["the", "eagle", "cheap"], [1, 2, 1]
    assert template("the eagle is cheap , the".split(), fields, values, pos) == \
        "name_1 name_2 is food_1 , name_1".split()


def _table_batch(descriptor_fields, values):
    words = {w: i for i, w in enumerate(WORDS)}
    return {
        "record_field": tf.constant([[descriptor_fields.index(f) + 3 for f in descriptor_fields]]),
        "record_value": tf.constant([[words.get(v, 1) for v in values]]),
        "record_value_text": tf.constant([values]),
        "record_pos_start": tf.constant([[1] * len(values)]),
        "record_pos_end": tf.constant([[1] * len(values)]),
        "record_mask": tf.constant([[True] * len(values)]),
    }


@pytest.mark.parametrize("templated", [False, True])
def test_kn_models_decode_with_the_shared_beam_search(templated):
    fields = ["<pad>", "<unk>", "<none>", "name", "food"]
    table_fields, values = ["name", "food"], ["Zorba", "cheap"]
    corpus = CORPUS
    if templated:
        corpus = [template(s, ["name", "name", "food"], ["the", "eagle", "cheap"], [1, 2, 1]) for s in CORPUS]
        table_fields, values = ["name", "food"], ["Zorba", "cheap"]
    lm = fit_lm(corpus, 3, 0.75)
    model = KNModel(WORDS, fields, lm, order=3, template=templated)
    batch = _table_batch(table_fields, values)
    memory = model.encode(batch)
    step_fn = model.decoding_step_fn(memory)
    log_probs, _ = step_fn(tf.constant([2]), tf.constant(0), model.initial_decoding_state(memory))
    np.testing.assert_allclose(tf.reduce_logsumexp(log_probs, -1), 0.0, atol=1e-5)
    copies = log_probs.numpy()[0, len(WORDS):]
    if templated:
        assert np.all(np.isfinite(copies))  # name_1, food_1 are in the table and the LM
        assert np.isneginf(log_probs.numpy()[0, WORDS.index("<s>")])
    else:
        assert np.all(np.isneginf(copies))
    ids, lengths, _, _ = decode_ids(model, batch, DecodeConfig(beam_size=3, max_length=10))
    out = ids.numpy()[0][: lengths[0]]
    assert np.all((out < len(WORDS)) | (out < len(WORDS) + 2))  # never a copy outside the table
    if templated:
        assert (out >= len(WORDS)).any()  # the template LM starts with name_1: copies "Zorba"
    nll, count = model.token_nll({**batch, "target_out": tf.constant([[4, 5, 3]]),
                                  "target_mask": tf.constant([[True, True, True]]),
                                  "copy_mask": tf.zeros([1, 3, 2])})
    assert int(count) == 3 and 0 < float(nll) < 3 * 50

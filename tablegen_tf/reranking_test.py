import json

import pytest
import tensorflow as tf

from tablegen_tf.config import build_config
from tablegen_tf.data.input_pipeline import Vocabularies
from tablegen_tf.data.table_featurizer import TableFeaturizer
from tablegen_tf.reranking import slot_reranker

WORDS = ["<pad>", "<unk>", "<s>", "</s>", "is", "an", "a", "Italian", "Chinese", "coffee", "shop", "."]
TABLE = {"table": [{"field": "name", "value": "Zizzi"}, {"field": "eatType", "value": "coffee shop"},
                   {"field": "food", "value": "Italian"}]}


def _featurizer():
    vocabs = Vocabularies({"words": WORDS, "fields": ["<pad>", "<unk>", "<none>", "name", "eatType", "food"],
                           "entities": ["<pad>", "<unk>", "<none>"], "groups": ["<pad>", "<unk>", "<none>"]})
    return TableFeaturizer(vocabs, build_config({"model": {"name": "encdec-copy"}}))


def _ids(words, copy_base):
    """Words -> extended ids; "Zizzi" is not in the vocabulary: copy id of record 0."""
    ids = [copy_base if w == "Zizzi" else WORDS.index(w) for w in words.split()] + [3]
    return ids + [0] * (9 - len(ids))


def _beams(featurizer):
    features = featurizer.serving_features(tf.constant([json.dumps(TABLE)]))
    v = len(WORDS)
    candidates = ["Zizzi is a Chinese coffee shop .",  # best model score, wrong food
                  "Zizzi is an Italian .",  # eatType missed
                  "Zizzi is an Italian coffee shop ."]  # faithful, lowest score
    ids = tf.constant([[_ids(c, v) for c in candidates]], tf.int32)
    lengths = tf.constant([[len(c.split()) + 1 for c in candidates]], tf.int32)
    return features, ids, lengths, tf.constant([[-1.0, -2.0, -3.5]])


def test_candidate_texts_resolve_copies_per_beam():
    featurizer = _featurizer()
    features, ids, lengths, _ = _beams(featurizer)
    texts = featurizer.candidate_texts(features, ids, lengths).numpy().tolist()
    assert [t.decode() for t in texts[0]] == ["Zizzi is a Chinese coffee shop.", "Zizzi is an Italian.",
                                              "Zizzi is an Italian coffee shop."]


@pytest.mark.parametrize("weight, chosen", [(3.0, 2), (1.0, 0), (0.0001, 0)])
def test_reranking_trades_slot_errors_against_model_score(weight, chosen):
    """Errors 1, 1, 0 at scores -1, -2, -3.5: the faithful beam wins once an error costs > 2.5."""
    featurizer = _featurizer()
    features, ids, lengths, scores = _beams(featurizer)
    choose = slot_reranker(featurizer, features, weight)
    assert choose(ids, lengths, scores).numpy().tolist() == [chosen]


def test_constraints_come_before_slots():
    featurizer = _featurizer()
    features, ids, lengths, scores = _beams(featurizer)
    choose = slot_reranker(featurizer, features, 10.0)
    assert choose(ids, lengths, scores, tf.constant([[True, True, False]])).numpy().tolist() == [0]


def test_off_for_weight_zero_and_for_text_inputs():
    featurizer = _featurizer()
    features, _, _, _ = _beams(featurizer)
    assert slot_reranker(featurizer, features, 0.0) is None

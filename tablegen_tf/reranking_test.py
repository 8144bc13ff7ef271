import json

import pytest
import tensorflow as tf

from tablegen_tf.config import DecodeConfig, build_config
from tablegen_tf.data.input_pipeline import Vocabularies
from tablegen_tf.data.table_featurizer import TableFeaturizer
from tablegen_tf.reranking import beam_reranker

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
    choose = beam_reranker(featurizer, features, DecodeConfig(slot_rerank_weight=weight))
    assert choose(ids, lengths, scores).numpy().tolist() == [chosen]


def test_constraints_come_before_slots():
    featurizer = _featurizer()
    features, ids, lengths, scores = _beams(featurizer)
    choose = beam_reranker(featurizer, features, DecodeConfig(slot_rerank_weight=10.0))
    assert choose(ids, lengths, scores, tf.constant([[True, True, False]])).numpy().tolist() == [0]


def test_off_for_weight_zero_and_for_text_inputs():
    featurizer = _featurizer()
    features, _, _, _ = _beams(featurizer)
    assert beam_reranker(featurizer, features, DecodeConfig(slot_rerank_weight=0.0)) is None


# WebNLG: subject / property / object records, one per value token (readers/webnlg.py)
TRIPLES = {"table": [{"field": "subject", "value": "Aarhus Airport"}, {"field": "property", "value": "city served"},
                     {"field": "object", "value": "Denmark"}, {"field": "subject", "value": "Aarhus Airport"},
                     {"field": "property", "value": "elevation"}, {"field": "object", "value": "25.0"}]}
TRIPLE_WORDS = ["<pad>", "<unk>", "<s>", "</s>", "serves", "is", "metres", "high", ".", "and", "Airport"]


def _webnlg_beams():
    vocabs = Vocabularies({"words": TRIPLE_WORDS, "fields": ["<pad>", "<unk>", "<none>", "subject", "property", "object"],
                           "entities": ["<pad>", "<unk>", "<none>"], "groups": ["<pad>", "<unk>", "<none>"]})
    featurizer = TableFeaturizer(vocabs, build_config({"model": {"name": "order-planning"}}))
    features = featurizer.serving_features(tf.constant([json.dumps(TRIPLES)]))
    copies = {"Aarhus": len(TRIPLE_WORDS), "Denmark": len(TRIPLE_WORDS) + 4, "25.0": len(TRIPLE_WORDS) + 8}

    def ids(words):
        out = [copies.get(w, TRIPLE_WORDS.index(w) if w in TRIPLE_WORDS else -1) for w in words.split()] + [3]
        return out + [0] * (12 - len(out))

    candidates = ["Aarhus Airport serves Denmark .",  # best model score; the elevation triple dropped
                  "Aarhus Airport is 25.0 metres high .",  # the city triple dropped
                  "Aarhus Airport serves Denmark and is 25.0 metres high ."]  # every triple, lowest score
    assert all(i >= 0 for c in candidates for i in ids(c))
    beams = tf.constant([[ids(c) for c in candidates]], tf.int32)
    lengths = tf.constant([[len(c.split()) + 1 for c in candidates]], tf.int32)
    texts = featurizer.candidate_texts(features, beams, lengths).numpy()[0].tolist()
    assert [t.decode() for t in texts] == ["Aarhus Airport serves Denmark.", "Aarhus Airport is 25.0 metres high.",
                                           "Aarhus Airport serves Denmark and is 25.0 metres high."]
    return featurizer, features, beams, lengths, tf.constant([[-1.0, -1.5, -2.2]])


@pytest.mark.parametrize("weight, chosen", [(2.0, 2), (1.0, 0), (0.0001, 0)])
def test_coverage_reranking_trades_missed_table_words_against_model_score(weight, chosen):
    """Fact words aarhus, airport, denmark, 25.0: missed 1, 1, 0 at scores -1, -1.5, -2.2: the
    beam with every triple wins once a missed word costs > 1.2."""
    featurizer, features, beams, lengths, scores = _webnlg_beams()
    choose = beam_reranker(featurizer, features, DecodeConfig(coverage_rerank_weight=weight))
    assert choose(beams, lengths, scores).numpy().tolist() == [chosen]


def test_coverage_and_slot_weights_add_up():
    """A WebNLG table has no slot errors: the slot weight alone keeps the model's order,
    and adding it does not change what the coverage weight chooses."""
    featurizer, features, beams, lengths, scores = _webnlg_beams()
    slot_only = beam_reranker(featurizer, features, DecodeConfig(slot_rerank_weight=5.0))
    both = beam_reranker(featurizer, features, DecodeConfig(slot_rerank_weight=5.0, coverage_rerank_weight=2.0))
    assert slot_only(beams, lengths, scores).numpy().tolist() == [0]
    assert both(beams, lengths, scores).numpy().tolist() == [2]

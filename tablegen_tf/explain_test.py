"""The ``explain`` signature's content (tablegen_tf.generation.explain_text) through the family
contract, on untrained tiny models: a two-stage copy family (per-token copy and attention, its
plan) and a family without a table (the default hook: candidates and scores)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.config import build_config
from tablegen_tf.data.input_pipeline import Vocabularies
from tablegen_tf.export import ServingModule
from tablegen_tf.models import get_family

WORDS = ["<pad>", "<unk>", "<s>", "</s>", "the", "is", "a", "pub", "in", "riverside", "near", ".", "Aromi"]
SPECIALS = ["<pad>", "<unk>", "<none>"]
TABLE_SIZES = {"hidden_size": 8, "word_dim": 6, "field_dim": 3, "value_dim": 4, "position_dim": 2,
               "entity_dim": 2, "group_dim": 2, "num_layers": 1}
TABLES = [
    {"table": [{"field": "name", "value": "The Vaults"}, {"field": "eatType", "value": "pub"},
               {"field": "area", "value": "riverside"}]},
    {"table": [{"field": "name", "value": "Zizzi"}, {"field": "near", "value": "Aromi"}]},
]


def _module(name, sizes, seed=3):
    keras.utils.set_random_seed(seed)
    config = build_config({"model": {"name": name, **sizes},
                           "decode": {"beam_size": 3, "max_length": 7, "slot_rerank_weight": 5.0}})
    vocabs = Vocabularies({"words": WORDS, "fields": SPECIALS + ["name", "eatType", "area", "near"],
                           "entities": SPECIALS, "groups": SPECIALS})
    family = get_family(name)
    model = family.build_model(config, {k: len(v) for k, v in vocabs.tokens.items()})
    return ServingModule(model, family.featurizer(vocabs, config), config)


def test_a_two_stage_copy_family_explains_the_served_text_token_by_token():
    """ncp runs EncDec's explain_tokens over its plan's memory (encdec-copy: the same hook over
    the records, checked on a trained model in tests/real_model_serving_test.py)."""
    module = _module("ncp", {**TABLE_SIZES, "max_plan_length": 4})
    tables = tf.constant([json.dumps(t) for t in TABLES])
    served = module.serve(tables)
    out = {k: v.numpy() for k, v in module.explain(tables).items()}
    np.testing.assert_array_equal(out["text"], served["text"].numpy())
    np.testing.assert_allclose(out["score"], served["score"].numpy(), rtol=1e-5)
    assert out["candidates"].shape == out["candidate_scores"].shape == (2, 3)
    copied = 0
    for b in range(2):
        shown = out["tokens"][b] != b""
        assert out["tokens"][b][shown].tolist() == [t.encode() for t in out["text"][b].decode().split()]
        for t in np.flatnonzero(out["copied_from"][b] >= 0):
            copied += 1
            assert out["tokens"][b, t] == out["source"][b, out["copied_from"][b, t]]
        probabilities = out["copy_probability"][b][shown]
        assert ((probabilities >= 0) & (probabilities <= 1)).all()
        np.testing.assert_allclose(out["attention"][b][shown].sum(axis=1), 1.0, rtol=1e-4)
        assert not out["attention"][b][~shown].any()
    assert copied > 0, "an untrained copy model copies some words"
    assert out["source_field"][0, :4].tolist() == [b"name", b"name", b"eatType", b"area"]
    assert out["slot_attributes"].shape == out["slot_errors"].shape == (2, 8)
    assert out["plan"].shape[0] == 2 and (out["plan"] >= 0).any()


def test_a_family_without_a_table_explains_candidates_and_scores():
    module = _module("backbone-lm", {"word_dim": 4, "hidden_size": 6})
    words = tf.constant(["pub", "zyzzyva"])
    served = module.serve(words)
    out = {k: v.numpy() for k, v in module.explain(words).items()}
    np.testing.assert_array_equal(out["text"], served["text"].numpy())
    assert out["candidates"].shape == (2, 3)
    assert out["attention"].shape[2] == 0 and (out["copied_from"] == -1).all()
    assert out["slot_errors"].shape == (2, 0)

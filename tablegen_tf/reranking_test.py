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


# A scripted model: the token it expects at each step gets log-prob -0.01, every other -10;
# after "Zizzi is an Italian" it would rather end (-0.1) than go on with "coffee" (-3).
SCRIPT = ["Zizzi", "is", "an", "Italian", "coffee", "shop", ".", "</s>"]


def _scripted_step(width):
    def step(prev_ids, t, state):
        expected = SCRIPT[-1] if t >= len(SCRIPT) else SCRIPT[t]
        token = len(WORDS) if expected == "Zizzi" else WORDS.index(expected)  # Zizzi: copy of record 0
        row = tf.where(tf.equal(tf.range(width), token), -0.01, -10.0)
        row = tf.where(tf.equal(t, 4) & tf.equal(tf.range(width), 3), -0.1, tf.where(
            tf.equal(t, 4) & tf.equal(tf.range(width), token), -3.0, row))
        return tf.tile(row[None, :], [tf.shape(prev_ids)[0], 1]), state

    return step


@pytest.mark.parametrize("penalty, text", [(0.0, "Zizzi is an Italian"), (5.0, "Zizzi is an Italian coffee shop.")])
def test_the_end_gate_keeps_the_beam_that_goes_on_to_say_the_missed_slot(penalty, text):
    """Ending after "Italian" misses eatType: at penalty 5 that end costs -5.1 against
    "coffee"'s -3, so the search goes on, where reranking alone (both kept beams end
    early or are junk) could not."""
    from tablegen_tf.decoding import beam_search
    from tablegen_tf.decoding.common import tile_batch
    from tablegen_tf.reranking import slot_end_gate

    featurizer, beams = _featurizer(), 2
    features = featurizer.serving_features(tf.constant([json.dumps(TABLE)]))
    width = len(WORDS) + int(tf.shape(featurizer.copy_texts(features))[1])
    step, state = _scripted_step(width), tf.zeros([1, 1])
    gate = slot_end_gate(featurizer, features, DecodeConfig(slot_end_penalty=penalty))
    assert (gate is None) == (penalty == 0)
    if gate is not None:
        step, state = gate.wrap(step, tile_batch(gate.rows, beams)), gate.initial_state(state, 1, 12)
    ids, lengths, _ = beam_search(step, tf.constant([2]), state, beams, 12, end_id=3)
    assert featurizer.output_text(features, ids, lengths).numpy()[0].decode() == text


def test_the_end_gate_gives_the_same_text_when_finished_rows_leave_the_step():
    """Compacted search (``step_memory``): the step runs on the running rows only, with the
    gate's table rows gathered like the model's memory; same output as the plain search."""
    from tablegen_tf.decoding import beam_search
    from tablegen_tf.decoding.common import tile_batch
    from tablegen_tf.reranking import slot_end_gate

    featurizer, beams = _featurizer(), 3
    other = {"table": TABLE["table"][:1] + [{"field": "food", "value": "Italian"}]}  # no eatType to miss
    features = featurizer.serving_features(tf.constant([json.dumps(TABLE), json.dumps(other)]))
    width = len(WORDS) + int(tf.shape(featurizer.copy_texts(features))[1])
    gate = slot_end_gate(featurizer, features, DecodeConfig(slot_end_penalty=5.0))
    state = gate.initial_state(tf.zeros([2, 1]), 2, 12)
    rows = tile_batch(gate.rows, beams)

    def make_step_fn(memory_rows):
        return gate.wrap(_scripted_step(width), memory_rows)

    plain = beam_search(make_step_fn(rows), tf.constant([2, 2]), state, beams, 12, end_id=3)
    compact = beam_search(make_step_fn(rows), tf.constant([2, 2]), state, beams, 12, end_id=3,
                          step_memory=(rows, make_step_fn))
    texts = [featurizer.output_text(features, ids, lengths).numpy().tolist() for ids, lengths, _ in (plain, compact)]
    assert texts[0] == texts[1] == [b"Zizzi is an Italian coffee shop.", b"Zizzi is an Italian"]


@pytest.mark.parametrize("aligned_rows", ["may end", "all"])
def test_aligning_only_rows_that_may_end_gives_the_same_search(aligned_rows):
    """The gate aligns the rows whose </s> is within their beam-width best tokens; aligning
    every row (a width above the vocabulary) must give the same hypotheses and scores."""
    from tablegen_tf.decoding import beam_search
    from tablegen_tf.decoding.common import tile_batch
    from tablegen_tf.reranking import SlotEndGate

    featurizer, beams = _featurizer(), 2
    features = featurizer.serving_features(tf.constant([json.dumps(TABLE)]))
    width = len(WORDS) + int(tf.shape(featurizer.copy_texts(features))[1])
    gate = SlotEndGate(featurizer, features, 5.0, beams if aligned_rows == "may end" else 10 * width)
    step = gate.wrap(_scripted_step(width), tile_batch(gate.rows, beams))
    ids, lengths, scores = beam_search(step, tf.constant([2]), gate.initial_state(tf.zeros([1, 1]), 1, 12), beams, 12,
                                       end_id=3, return_all_beams=True)
    assert featurizer.candidate_texts(features, ids, lengths).numpy()[0].tolist() == [
        b"Zizzi is an Italian coffee shop.", b"Zizzi is an Italian"]
    assert scores.numpy()[0].tolist() == pytest.approx([-3.07, -5.14], abs=1e-4)


@pytest.mark.parametrize("references", [1, 2])
@pytest.mark.parametrize("weight, chosen", [(0.1, 0), (10.0, 2)])
def test_minimum_bayes_risk_prefers_the_beam_most_like_the_samples(weight, chosen, references):
    """Every sample says beam 2's text (BLEU 1 against it, less for the others): a small
    weight leaves the model's best beam, a large one picks the beam like the samples."""
    featurizer = _featurizer()
    features, ids, lengths, scores = _beams(featurizer)

    def samples():
        return tf.tile(ids[:, 2:3], [1, 4, 1]), tf.tile(lengths[:, 2:3], [1, 4]), tf.zeros([1, 4])

    config = DecodeConfig(mbr_weight=weight, mbr_samples=4, mbr_references=references)
    choose = beam_reranker(featurizer, features, config, samples=samples)
    assert choose(ids, lengths, scores).numpy().tolist() == [chosen]
    assert beam_reranker(featurizer, features, DecodeConfig(mbr_weight=0.0), samples=samples) is None

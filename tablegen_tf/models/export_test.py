"""The models trace into a SavedModel with the decoding library (tablegen_tf.decoding)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.layers.testing import SIZES, random_batch
from tablegen_tf.models import build_model

decoding = pytest.importorskip("tablegen_tf.decoding")

RECORD_KEYS = ("record_field", "record_value", "record_pos_start", "record_pos_end", "record_entity",
               "record_group")
SPEC = {**{k: tf.TensorSpec([None, None], tf.int32) for k in RECORD_KEYS},
        "record_mask": tf.TensorSpec([None, None], tf.bool)}
TINY = dict(hidden_size=8, num_layers=2, word_dim=6, field_dim=3, value_dim=4, position_dim=2,
            entity_dim=2, group_dim=2)


def _model(name):
    return build_model(name, {**TINY, **({"max_plan_length": 4} if name == "ncp" else {})}, SIZES,
                       {"max_position": 5})
BEAM = 3


class Serving(tf.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    @tf.function(input_signature=[SPEC])
    def greedy(self, batch):
        memory = self.model.encode(batch)
        start = tf.fill([tf.shape(batch["record_mask"])[0]], 2)
        ids, lengths, _ = decoding.greedy_search(
            self.model.decoding_step_fn(memory), start, self.model.initial_decoding_state(memory), 6, 3)
        return {"ids": ids, "lengths": lengths}

    @tf.function(input_signature=[SPEC])
    def beam(self, batch):
        memory = self.model.encode(batch)
        start = tf.fill([tf.shape(batch["record_mask"])[0]], 2)
        step_fn = self.model.decoding_step_fn(self.model.tile(memory, BEAM))
        ids, lengths, scores = decoding.beam_search(
            step_fn, start, self.model.initial_decoding_state(memory), BEAM, 6, 3)
        return {"ids": ids, "lengths": lengths, "scores": scores}


@pytest.mark.parametrize("name", ["encdec-copy", "ncp"])
def test_savedmodel_round_trip_with_greedy_and_beam_search(name, tmp_path):
    keras.utils.set_random_seed(0)
    serving = Serving(_model(name))
    batch = {k: v for k, v in random_batch().items() if k in SPEC}
    expected = {m: getattr(serving, m)(batch) for m in ("greedy", "beam")}
    assert expected["beam"]["ids"].shape[0] == 3
    assert np.all(np.isfinite(expected["beam"]["scores"]))
    assert np.all(expected["greedy"]["ids"] < SIZES["words"] + 6)  # extended vocabulary V + R
    tf.saved_model.save(serving, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    for method, outputs in expected.items():
        for key, value in getattr(loaded, method)(batch).items():
            np.testing.assert_array_equal(value, outputs[key])


def test_ncp_beam_search_over_plans_then_text():
    keras.utils.set_random_seed(0)
    model, batch = _model("ncp"), random_batch()
    records, mask = model.encode_records(batch)
    num_records = int(records.shape[1])
    memory = {"records": records, "record_mask": mask}
    state = model.planner.initial_state(records, mask)
    ids, _, _ = decoding.beam_search(model.planning_step_fn(model.tile(memory, BEAM)),
                                     tf.fill([3], num_records + 1), state, BEAM, 4, num_records, pad_id=-1)
    plan = tf.where(ids == num_records, -1, ids)
    assert np.all(plan.numpy() < np.sum(mask, axis=1, keepdims=True))  # real records only
    text_memory = model.encode(batch, plan=plan)
    log_probs, _ = model.decoding_step_fn(text_memory)(tf.fill([3], 2), tf.constant(0),
                                                       model.initial_decoding_state(text_memory))
    assert log_probs.shape == (3, SIZES["words"] + num_records)

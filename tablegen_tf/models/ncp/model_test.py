import keras
import numpy as np
import tensorflow as tf

from tablegen_tf.layers.testing import SIZES, random_batch
from tablegen_tf.models import build_model

TINY = dict(hidden_size=8, num_layers=1, word_dim=6, field_dim=3, value_dim=4, position_dim=2, max_plan_length=4)


def test_greedy_plan_uses_the_shared_search_and_pads_after_eos():
    keras.utils.set_random_seed(0)
    model, batch = build_model("ncp", TINY, SIZES, {"max_position": 5}), random_batch()
    records, mask = model.encode_records(batch)
    model.planner.eos.assign(model.planner.eos * 0 + 100.0)  # EOS wins early
    plan = model.greedy_plan({"records": records, "record_mask": mask}).numpy()
    assert plan.shape[0] == 3 and plan.shape[1] <= 4
    for row, real in zip(plan, mask.numpy().sum(1)):
        ended = np.flatnonzero(row < 0)
        if ended.size:
            assert np.all(row[ended[0]:] == -1)
        assert np.all(row[row >= 0] < real)


def test_greedy_plan_matches_step_by_step_argmax():
    keras.utils.set_random_seed(1)
    model, batch = build_model("ncp", TINY, SIZES, {"max_position": 5}), random_batch()
    records, mask = model.encode_records(batch)
    memory = {"records": records, "record_mask": mask}
    plan = model.greedy_plan(memory).numpy()
    step_fn = model.planning_step_fn(memory)
    state = model.planner.initial_state(records, mask)
    num_records = int(records.shape[1])
    prev = tf.fill([3], num_records + 1)
    for t in range(plan.shape[1]):
        log_probs, state = step_fn(prev, tf.constant(t), state)
        prev = tf.argmax(log_probs, -1, output_type=tf.int32)
        expected = np.where(prev.numpy() == num_records, -1, prev.numpy())
        alive = np.all(plan[:, :t] >= 0, axis=1) if t else np.ones(3, bool)
        np.testing.assert_array_equal(plan[alive, t], expected[alive])
    assert model.has_planning_stage and model.planned({"plan": plan}) is plan

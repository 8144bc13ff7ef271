import numpy as np
import tensorflow as tf

from tablegen_tf.layers.content_planning import ContentPlanner, PlanEncoder, gather_plan, plan_targets

B, R, H = 2, 5, 6


def _records():
    records = tf.random.normal([B, R, H])
    mask = tf.constant([[True] * 5, [True, True, True, False, False]])
    return records * tf.cast(mask, tf.float32)[..., None], mask


def test_plan_targets_shift_and_eos():
    plan = tf.constant([[3, 0, 4], [1, -1, -1], [-1, -1, -1]])
    plan_in, plan_out, mask = plan_targets(plan, num_records=R)
    bos, eos = R + 1, R
    np.testing.assert_array_equal(plan_in, [[bos, 3, 0, 4], [bos, 1, 0, 0], [bos, 0, 0, 0]])
    np.testing.assert_array_equal(plan_out[:, :2], [[3, 0], [1, eos], [eos, 0]])
    np.testing.assert_array_equal(plan_out[0], [3, 0, 4, eos])
    np.testing.assert_array_equal(plan_out[2, 0], eos)  # empty plan: just EOS
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])


def test_pointer_distribution_masks_padding_and_bos():
    records, mask = _records()
    planner = ContentPlanner()
    plan_in, _, _ = plan_targets(tf.constant([[3, 0], [1, -1]]), R)
    log_probs = planner(records, mask, plan_in)
    assert log_probs.shape == (B, 3, R + 1)  # records + EOS
    probs = tf.exp(log_probs)
    np.testing.assert_allclose(tf.reduce_sum(probs, -1), 1.0, rtol=1e-5)  # BOS gets nothing
    np.testing.assert_allclose(probs[1, :, 3:5], 0.0)  # padding records
    assert np.all(probs[:, :, R] > 0)  # EOS is pointable


def test_step_equals_teacher_forced_call():
    records, mask = _records()
    planner = ContentPlanner()
    plan_in, _, _ = plan_targets(tf.constant([[3, 0, 2], [1, 2, -1]]), R)
    log_probs = planner(records, mask, plan_in)
    memory, pointable, keys = planner.memory(records, mask)
    state = planner.initial_state(records, mask)
    for t in range(plan_in.shape[1]):
        step_log_probs, state = planner.step(plan_in[:, t], state, memory, pointable, keys)
        np.testing.assert_allclose(step_log_probs, log_probs[:, t], rtol=1e-5, atol=1e-5)


def test_plan_encoder_and_gather():
    records, mask = _records()
    plan = tf.constant([[4, 0, 4], [2, -1, -1]])
    encoded, plan_mask = PlanEncoder(H)(records, plan)
    assert encoded.shape == (B, 3, H)
    np.testing.assert_array_equal(plan_mask, plan >= 0)
    np.testing.assert_array_equal(encoded[1, 1:], 0.0)
    copy_mask = tf.random.uniform([B, 7, R])
    np.testing.assert_allclose(gather_plan(copy_mask, plan, axis=2)[0, :, 0], copy_mask[0, :, 4])

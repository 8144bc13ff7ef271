"""copied_word_ids: the decoding contract's copy ids become the copied item's word id;
switch_case keeps its branches as function calls; top_k is tf.math.top_k exactly."""

import numpy as np
import pytest
import tensorflow as tf

from tablegen_tf.decoding.common import TOP_K_CHUNK, copied_word_ids, switch_case, top_k

VOCAB = 10


def test_copy_ids_become_source_word_ids_rank_1():
    source = tf.constant([[4, 7, 9], [3, 1, 2]])
    ids = tf.constant([VOCAB + 1, 5])  # copy item 1 of row 0; plain word 5 in row 1
    np.testing.assert_array_equal(copied_word_ids(ids, source, VOCAB).numpy(), [7, 5])


def test_copy_ids_become_source_word_ids_rank_2():
    source = tf.constant([[4, 7, 9]])
    ids = tf.constant([[VOCAB + 2, 3, VOCAB + 0]])
    np.testing.assert_array_equal(copied_word_ids(ids, source, VOCAB).numpy(), [[9, 3, 4]])


def test_out_of_range_copy_is_clipped_and_empty_source_is_safe():
    np.testing.assert_array_equal(copied_word_ids(tf.constant([VOCAB + 99]), tf.constant([[4, 7]]), VOCAB).numpy(), [7])
    empty = tf.zeros([1, 0], tf.int32)
    np.testing.assert_array_equal(copied_word_ids(tf.constant([VOCAB + 1]), empty, VOCAB).numpy(), [0])


def test_copied_items_work_for_strings_too():
    from tablegen_tf.decoding.common import copied_items

    texts = tf.constant([["The", "Eagle"], ["Aromi", ""]])
    got = copied_items(tf.constant([[VOCAB + 1, 3], [VOCAB, VOCAB + 5]]), texts, VOCAB).numpy()
    assert got[0, 0] == b"Eagle" and got[1, 0] == b"Aromi" and got[1, 1] == b""  # clipped to the last item


def test_copied_items_can_be_rows():
    from tablegen_tf.decoding.common import copied_items

    rows = tf.constant([[[1, 0], [0, 1]], [[5, 6], [7, 8]]])  # [N=2, S=2, 2]
    np.testing.assert_array_equal(copied_items(tf.constant([VOCAB + 1, VOCAB]), rows, VOCAB).numpy(), [[0, 1], [5, 6]])
    empty = tf.zeros([1, 0, 3])
    np.testing.assert_array_equal(copied_items(tf.constant([VOCAB + 2]), empty, VOCAB).numpy(), [[0, 0, 0]])


def test_switch_case_runs_the_chosen_branch_and_is_not_lowered():
    # Lowered to Switch/Merge, the branches not taken would run as dead ops at every call
    # (the SavedModel generate's 10 beam widths): the Case op must say not to lower.
    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def pick(index):
        return switch_case(index, [lambda: tf.constant(10), lambda: tf.constant(20), lambda: index * 100])

    assert [int(pick(tf.constant(i))) for i in range(3)] == [10, 20, 200]
    cases = [op for op in pick.get_concrete_function().graph.get_operations() if op.type in ("Case", "StatelessCase")]
    assert len(cases) == 1 and cases[0].get_attr("_lower_using_switch_merge") is False
    # eagerly (in-process decoding outside a tf.function) the chosen branch just runs
    assert int(switch_case(tf.constant(1), [lambda: tf.constant(10), lambda: tf.constant(20)])) == 20


@pytest.mark.parametrize("width", [1, 5, TOP_K_CHUNK - 1, 3 * TOP_K_CHUNK + 7, 40 * TOP_K_CHUNK])
def test_top_k_is_tf_top_k_ties_and_minus_inf_included(width):
    # Coarse values tie often (ties go to the lower index), and many are -inf (rows with
    # fewer than k finite values pick the lowest-index -inf ones, never the padding).
    rng = np.random.default_rng(width)
    values = np.round(rng.normal(size=(16, width)), 0).astype(np.float32)
    values[rng.random(values.shape) < 0.7] = -np.inf
    values[0] = -np.inf
    for k in sorted({1, min(3, width), min(5, width), width}):
        expected = tf.math.top_k(values, k=k)
        got = top_k(tf.constant(values), k)
        np.testing.assert_array_equal(got[0].numpy(), expected.values.numpy())
        np.testing.assert_array_equal(got[1].numpy(), expected.indices.numpy())

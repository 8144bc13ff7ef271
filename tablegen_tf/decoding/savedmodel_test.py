"""Decoders wrapped in a tf.Module survive tf.saved_model.save / load (TF Serving path)."""

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from tablegen_tf.decoding import beam_search, constrained_beam_search, greedy_search
from tablegen_tf.decoding.beam import JIT_STEP_BUCKETS
from tablegen_tf.decoding.fakes_test import END, START, MarkovModel, random_table


class FakeDecoder(tf.Module):
    """A 'model' whose weights are the Markov table, exported with serving signatures."""

    def __init__(self, table):
        super().__init__()
        self.table = tf.Variable(table, trainable=False)

    def _model(self):
        return MarkovModel(self.table)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="start_ids")])
    def greedy(self, start_ids):
        model = self._model()
        ids, lengths, scores = greedy_search(
            model.step_fn, start_ids, model.initial_state(start_ids), 8, END)
        return {"ids": ids, "lengths": lengths, "scores": scores}

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.int32, name="start_ids"),
        tf.TensorSpec([], tf.int32, name="max_length"),
    ])
    def beam(self, start_ids, max_length):
        model = self._model()
        ids, lengths, scores = beam_search(
            model.step_fn, start_ids, model.initial_state(start_ids), 4, max_length, END,
            length_penalty=0.6, return_all_beams=True)
        return {"ids": ids, "lengths": lengths, "scores": scores}

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.int32, name="start_ids"),
        tf.TensorSpec([None, None], tf.int32, name="constraints"),
    ])
    def constrained(self, start_ids, constraints):
        model = self._model()
        ids, lengths, scores, satisfied = constrained_beam_search(
            model.step_fn, start_ids, model.initial_state(start_ids), constraints, 3, 10, END)
        return {"ids": ids, "lengths": lengths, "scores": scores, "satisfied": satisfied}


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def exported_nodes(export_dir):
    """Every node of the exported graph and of its functions."""
    saved_model = saved_model_pb2.SavedModel()
    with open(f"{export_dir}/saved_model.pb", "rb") as f:
        saved_model.ParseFromString(f.read())
    graph = saved_model.meta_graphs[0].graph_def
    return list(graph.node) + [node for function in graph.library.function for node in function.node_def]


def exported_op_types(export_dir):
    return {node.op for node in exported_nodes(export_dir)}


def case_branch_counts(export_dir):
    """The number of branches of every Case op in the exported graph and its functions."""
    return [len(node.attr["branches"].list.func) for node in exported_nodes(export_dir)
            if node.op in ("Case", "StatelessCase")]


def test_saved_model_round_trip(tmp_path):
    module = FakeDecoder(random_table(0, vocab=7, width=9))
    start = tf.constant([START, 4, 5])
    constraints = tf.constant([[5, 8], [6, -1], [-1, -1]])
    expected = {
        "greedy": module.greedy(start),
        "beam": module.beam(start, tf.constant(6)),
        "constrained": module.constrained(start, constraints),
    }
    signatures = {
        "serving_default": module.beam,
        "greedy": module.greedy,
        "constrained": module.constrained,
    }
    tf.saved_model.save(module, str(tmp_path), signatures=signatures)
    loaded = tf.saved_model.load(str(tmp_path))

    assert_same(loaded.greedy(start), expected["greedy"])
    assert_same(loaded.beam(start, tf.constant(6)), expected["beam"])
    assert_same(loaded.constrained(start, constraints), expected["constrained"])
    # The serving signatures (what TF Serving calls) take keyword tensors.
    served = loaded.signatures["serving_default"](start_ids=start, max_length=tf.constant(6))
    assert_same(served, expected["beam"])
    served = loaded.signatures["constrained"](start_ids=start, constraints=constraints)
    assert_same(served, expected["constrained"])
    # Another batch size through the same exported graph.
    assert loaded.signatures["greedy"](start_ids=tf.constant([START]))["ids"].shape[0] == 1

    # One graph loop per decoder (no per-token unrolling) and no custom-op libraries
    # (TF-Addons ops are namespaced "Addons>...", like most tensorflow-text ones).
    ops = exported_op_types(tmp_path)
    assert {"StatelessWhile", "TopKV2", "TensorListSetItem"} <= ops
    assert not [op for op in ops if ">" in op]


class XlaStepDecoder(FakeDecoder):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="start_ids")])
    def beam(self, start_ids):
        model = self._model()
        ids, lengths, scores = beam_search(
            model.step_fn, start_ids, model.initial_state(start_ids), 4, 7, END, length_penalty=0.6, return_all_beams=True,
            jit_max_batch=1)
        return {"ids": ids, "lengths": lengths, "scores": scores}


def test_xla_steps_survive_the_saved_model(tmp_path):
    # One-entry requests run each beam step as an XLA computation (jit_max_batch): it must
    # load and run from the SavedModel's signature and decode as the graph loop does.
    module = XlaStepDecoder(random_table(1, vocab=7, width=9))
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.beam})
    served = tf.saved_model.load(str(tmp_path)).signatures["serving_default"]
    plain = FakeDecoder(random_table(1, vocab=7, width=9))
    for start in ([START], [START, 4]):  # XLA steps, then the graph loop
        expected = plain.beam(tf.constant(start), tf.constant(7))
        assert_same(served(start_ids=tf.constant(start)), expected)


class RuntimeWidthDecoder(FakeDecoder):
    """The beam width as a signature input: one search graph for every width."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="start_ids"),
                                  tf.TensorSpec([], tf.int32, name="beam_size")])
    def beam(self, start_ids, beam_size):
        model = self._model()
        ids, lengths, scores = beam_search(
            model.step_fn, start_ids, model.initial_state(start_ids), beam_size, 7, END, length_penalty=0.6,
            return_all_beams=True, jit_max_batch=1)
        return {"ids": ids, "lengths": lengths, "scores": scores}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="start_ids"),
                                  tf.TensorSpec([None, None], tf.int32, name="constraints"),
                                  tf.TensorSpec([], tf.int32, name="beam_size")])
    def constrained(self, start_ids, constraints, beam_size):
        model = self._model()
        ids, lengths, scores, satisfied = constrained_beam_search(
            model.step_fn, start_ids, model.initial_state(start_ids), constraints, beam_size, 10, END,
            length_penalty=0.6)
        return {"ids": ids, "lengths": lengths, "scores": scores, "satisfied": satisfied}


def _static_width(width):
    """The searches of RuntimeWidthDecoder with ``width`` a Python int (what evaluate runs)."""
    model = MarkovModel(random_table(2, vocab=7, width=9))

    @tf.function
    def beam(start):
        ids, lengths, scores = beam_search(model.step_fn, start, model.initial_state(start), width, 7, END,
                                           length_penalty=0.6, return_all_beams=True, jit_max_batch=1)
        return {"ids": ids, "lengths": lengths, "scores": scores}

    @tf.function
    def constrained(start, constraints):
        ids, lengths, scores, satisfied = constrained_beam_search(
            model.step_fn, start, model.initial_state(start), constraints, width, 10, END, length_penalty=0.6)
        return {"ids": ids, "lengths": lengths, "scores": scores, "satisfied": satisfied}

    return beam, constrained


def test_one_exported_graph_decodes_every_beam_width_as_a_python_width(tmp_path):
    # generate's beam_size is read at run time: two widths through one loaded graph give
    # exactly the beams, lengths and scores of searches built for each width, on the XLA
    # step path (one entry) and the graph loop (three), constrained too.
    module = RuntimeWidthDecoder(random_table(2, vocab=7, width=9))
    tf.saved_model.save(module, str(tmp_path), signatures={
        "serving_default": module.beam, "constrained": module.constrained})
    loaded = tf.saved_model.load(str(tmp_path)).signatures
    for width in (2, 4):
        beam, constrained = _static_width(width)
        for start in ([START], [START, 4, 5]):
            start = tf.constant(start)
            constraints = tf.constant([[5, 8]] * int(start.shape[0]))
            assert_same(loaded["serving_default"](start_ids=start, beam_size=tf.constant(width)), beam(start))
            assert_same(loaded["constrained"](start_ids=start, constraints=constraints, beam_size=tf.constant(width)),
                        constrained(start, constraints))
    # no branch per width: the only Case ops left choose the search (XLA step buckets or the loop)
    assert set(case_branch_counts(tmp_path)) <= {len(JIT_STEP_BUCKETS) + 1}

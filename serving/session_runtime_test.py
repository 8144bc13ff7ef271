"""`tablegen serve --runtime session`: versions loaded and run in a TF1 session, as TF Serving
does, behave as the default runtime's (tf.saved_model.load) over the stand-in SavedModels."""

import os
import threading

import numpy as np
import pytest
import tensorflow as tf

from serving import testing
from serving.model_manager import ModelManager
from serving.session_runtime import (FUNCTION_CALL_OPS, SERVE_TAG, SessionModel, apply_grappler_switch,
                                     set_warmup_pool_niceness, warmup_pool_threads)
from serving.signatures import Signature
from serving.testing import MODEL

TABLES = testing.sample_tables(3)


def test_session_signatures_match_the_loaded_functions(exports):
    """Same signature names, input and output specs (so the same request checks and
    batching), and the same outputs."""
    session_model = SessionModel(exports["v1"])
    functions = tf.saved_model.load(exports["v1"]).signatures
    try:
        assert set(session_model.signatures) == set(functions)
        for name, function in functions.items():
            ours, theirs = Signature(name, session_model.signatures[name]), Signature(name, function)
            assert ours.inputs == theirs.inputs and ours.outputs == theirs.outputs
            assert ours.batchable == theirs.batchable
        tables = tf.constant(TABLES)
        ours = Signature("serving_default", session_model.signatures["serving_default"]).run({"tables": tables})
        theirs = Signature("serving_default", functions["serving_default"]).run({"tables": tables})
        assert ours.keys() == theirs.keys()
        for key in ours:
            np.testing.assert_array_equal(ours[key], theirs[key])
        assert [t.decode() for t in ours["text"]] == [testing.expected_text(t, "v1") for t in TABLES]
    finally:
        session_model.close()


def test_a_graph_check_raises_the_same_error_class(exports):
    """The server maps tf.errors classes to gRPC codes: a session raises the same ones."""
    session_model = SessionModel(exports["v1"])
    try:
        with pytest.raises(tf.errors.InvalidArgumentError, match="tables must be JSON objects"):
            session_model.signatures["serving_default"](tables=tf.constant(["not a table"]))
    finally:
        session_model.close()


def test_function_calls_get_the_process_grappler_switch(exports):
    """A session optimises a called function by the ConfigProto in its call node (Grappler
    on, from tracing), not by the session's: with the switch off, every call node says so."""
    from tensorflow.python.saved_model import loader_impl

    meta_graph = loader_impl.SavedModelLoader(exports["v1"]).get_meta_graph_def_from_tags([SERVE_TAG])
    calls = [n for n in meta_graph.graph_def.node if n.op in FUNCTION_CALL_OPS]
    calls += [n for f in meta_graph.graph_def.library.function for n in f.node_def if n.op in FUNCTION_CALL_OPS]
    assert calls

    def grappler_disabled(node) -> bool:
        config = tf.compat.v1.ConfigProto()
        config.ParseFromString(node.attr["config_proto"].s)
        return config.graph_options.rewrite_options.disable_meta_optimizer

    before = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    try:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": False})
        assert apply_grappler_switch(meta_graph) == 0 and not any(map(grappler_disabled, calls))
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
        assert apply_grappler_switch(meta_graph) == len(calls) and all(map(grappler_disabled, calls))
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": before})


def test_the_function_library_is_added_without_python_wrappers(exports):
    """Nodes imported first, then each function by its own C call: the whole library is
    there, and no per-function Python object is left for the collector."""
    from tensorflow.python.saved_model import loader_impl

    meta_graph = loader_impl.SavedModelLoader(exports["v1"]).get_meta_graph_def_from_tags([SERVE_TAG])
    wanted = {f.signature.name for f in meta_graph.graph_def.library.function}
    session_model = SessionModel(exports["v1"])
    try:
        assert wanted and {f.signature.name for f in session_model.graph.as_graph_def().library.function} == wanted
        assert not session_model.graph._functions
    finally:
        session_model.close()


def test_a_library_with_a_registered_gradient_is_added_the_same_way(tmp_path):
    """An export whose functions use tf.custom_gradient (as the fused LSTM loop does) keeps
    a registered gradient in its library; serving runs it forward without it, and without
    a Python wrapper per function (before, such a library was imported the slow way)."""
    from tensorflow.python.saved_model import loader_impl

    @tf.custom_gradient
    def doubled(x):
        return 2.0 * x, lambda upstream: 3.0 * upstream

    module = tf.Module()
    module.run = tf.function(lambda x: {"y": doubled(x) + 1.0},
                             input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    path = str(tmp_path / "custom_gradient")
    tf.saved_model.save(module, path, signatures={"serving_default": module.run})
    library = loader_impl.SavedModelLoader(path).get_meta_graph_def_from_tags([SERVE_TAG]).graph_def.library
    assert library.registered_gradients  # what the fix is about: it used to keep the slow import
    session_model = SessionModel(path)
    try:
        assert not session_model.graph._functions
        outputs = session_model.signatures["serving_default"](x=np.array([1.0, 2.5], np.float32))
        np.testing.assert_allclose(outputs["y"], [3.0, 6.0])
    finally:
        session_model.close()


def test_session_runtime_loads_warms_up_and_swaps(tmp_path, exports):
    """serving_default first (pruned, serving.partial_load), generate in the background,
    then a pushed version takes over; all through sessions."""
    model_dir = str(tmp_path / MODEL)
    testing.push_version(exports["v1"], model_dir, 1)
    manager = ModelManager(MODEL, model_dir, poll_seconds=0.01, settle_seconds=0, runtime="session")
    try:
        manager.poll_once(initial=True)
        manager.wait_for_warm_up()
        with manager.lease() as loaded:
            assert isinstance(loaded._model, SessionModel) and loaded.complete
            assert list(loaded._model.signatures) == ["serving_default"]  # pruned to it
            text = loaded.signature("").run({"tables": tf.constant(TABLES[:1])})["text"][0].decode()
            assert text == testing.expected_text(TABLES[0], "v1")
            generated = loaded.signature("generate").run({
                "tables": tf.constant(TABLES[:1]), "beam_size": tf.constant(1),
                "max_length": tf.constant(100), "must_include": tf.zeros([1, 0], tf.string)})
            assert generated["text"][0].decode() == testing.expected_text(TABLES[0], "v1")
        testing.push_version(exports["v2"], model_dir, 2)
        manager.poll_once()
        manager.poll_once()
        manager.wait_for_warm_up()
        with manager.lease() as loaded:
            assert loaded.version == 2
            text = loaded.signature("").run({"tables": tf.constant(TABLES[:1])})["text"][0].decode()
            assert text == testing.expected_text(TABLES[0], "v2")
    finally:
        manager.stop()


def test_server_with_session_runtime_answers_and_maps_graph_errors(base_path):
    """Over gRPC: texts, and a graph assertion (tf.errors.InvalidArgumentError from
    Session.run) is INVALID_ARGUMENT, after which the server keeps serving."""
    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from serving import server

    def request(tables):
        message = predict_pb2.PredictRequest()
        message.model_spec.name = MODEL
        message.inputs["tables"].CopyFrom(tf.make_tensor_proto(tables))
        return message

    instance = server.build_server(testing.serve_args(base_path, "--runtime", "session")).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{instance.grpc_port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            bad = '{"id": 1, "table": [{"field": "a", "value": "b"}]}'  # JSON the graph rejects
            with pytest.raises(grpc.RpcError) as error:
                stub.Predict(request([bad]), timeout=30)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "tables must be JSON objects" in error.value.details()
            response = stub.Predict(request(TABLES), timeout=30)
            texts = [t.decode() for t in tf.make_ndarray(response.outputs["text"])]
            assert texts == [testing.expected_text(t, "v1") for t in TABLES]
    finally:
        instance.stop()


def test_a_corrupt_version_raises_for_the_manager_to_retry(tmp_path, exports):
    """The manager retries a version whose load raises (serving.model_manager._load)."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(exports["v1"], broken)
    data = (broken / "saved_model.pb").read_bytes()
    (broken / "saved_model.pb").write_bytes(data[: len(data) // 2])
    with pytest.raises(Exception):
        SessionModel(str(broken))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="thread niceness by /proc: Linux only")
def test_a_warm_up_call_runs_on_its_own_pool_at_the_given_niceness(exports):
    """A warm-up's ops run on pool threads, not on the loader's: they get the warm-up pool,
    reniced, and give the same outputs as a request."""
    session_model = SessionModel(exports["v1"])
    function = session_model.signatures["serving_default"]
    seen = {}

    def warm_up_at(niceness):
        seen["outputs"] = function.warm_up({"tables": np.array(TABLES, dtype=object)}, niceness)

    try:
        thread = threading.Thread(target=warm_up_at, args=(7,))
        thread.start()
        thread.join()
        pool = warmup_pool_threads()
        assert pool and all(os.getpriority(os.PRIO_PROCESS, t) == 7 for t in pool)
        assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # nothing else was reniced
        expected = function(tables=np.array(TABLES, dtype=object))
        for key in expected:
            np.testing.assert_array_equal(seen["outputs"][key], expected[key])
    finally:
        set_warmup_pool_niceness(0)  # the pool is process-wide: later tests get it as it was
        session_model.close()

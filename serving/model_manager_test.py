"""Version discovery, partial-directory robustness and draining, driven with
poll_once() (no poll thread) over the stand-in SavedModels of conftest.py."""

import gc
import os
import shutil
import threading
import time
import weakref

import grpc
import pytest
import tensorflow as tf

from serving import testing
from serving.testing import MODEL
from serving.errors import ServingError
from serving.model_manager import ModelManager, is_complete

TABLE = testing.sample_tables(1)


def run(loaded):
    return loaded.signature("").run({"tables": tf.constant(TABLE)})["text"][0].decode()


@pytest.fixture
def manager(base_path):
    # settle 0: a new version loads on its second poll (tests drive poll_once themselves)
    manager = ModelManager(MODEL, os.path.join(base_path, MODEL), poll_seconds=0.01,
                           settle_seconds=0)
    manager.poll_once(initial=True)
    manager.wait_for_warm_up()  # the background warm-up holds a lease on version 1
    yield manager
    manager.stop()


def serving_version(manager):
    with manager.lease() as loaded:
        return loaded.version


def test_is_complete(tmp_path, exports):
    export = tmp_path / "1"
    shutil.copytree(exports["v1"], export)
    assert is_complete(str(export))
    os.remove(export / "variables" / "variables.data-00000-of-00001")
    assert not is_complete(str(export))
    shutil.rmtree(export / "variables")
    assert not is_complete(str(export))


def test_new_version_is_loaded_once_stable(manager, base_path, exports):
    testing.push_version(exports["v2"], os.path.join(base_path, MODEL), 2)
    manager.poll_once()  # first sighting: the copy might still be moving
    assert serving_version(manager) == 1
    manager.poll_once()
    assert serving_version(manager) == 2
    states = {v: state for v, state, _ in manager.status()}
    assert states == {2: "AVAILABLE", 1: "END"}


def test_renamed_version_loads_at_its_first_sighting(manager, base_path, exports):
    manager.settle_seconds = 0.05  # unchanged for that long
    testing.push_version(exports["v2"], os.path.join(base_path, MODEL), 2)
    manager.poll_once()
    assert serving_version(manager) == 2


def test_versions_pushed_together_share_one_settle_wait(manager, base_path, exports, monkeypatch):
    waits = []
    monkeypatch.setattr(manager._stop, "wait", lambda seconds: waits.append(seconds))
    manager.settle_seconds = 0.05
    for version in (2, 3):
        testing.push_version(exports["v2"], os.path.join(base_path, MODEL), version)
    assert manager._candidates(initial=False) == [3, 2, 1]  # newest first
    assert waits == [0.05]


def test_version_still_being_written_waits(manager, base_path, exports):
    manager.settle_seconds = 0.2
    version = os.path.join(base_path, MODEL, "2")
    testing.push_version(exports["v2"], os.path.join(base_path, MODEL), 2)
    writing, stop = os.path.join(version, "assets.extra", "still_copying"), threading.Event()
    os.makedirs(os.path.dirname(writing), exist_ok=True)

    def copy_in_progress():
        with open(writing, "a") as f:
            while not stop.wait(0.01):
                f.write("x"), f.flush()

    writer = threading.Thread(target=copy_in_progress)
    writer.start()
    try:
        manager.poll_once(), manager.poll_once()
        assert serving_version(manager) == 1
    finally:
        stop.set(), writer.join()
    manager.poll_once()
    assert serving_version(manager) == 2


def test_partial_and_corrupt_versions_are_retried_not_served(manager, base_path, exports):
    target = os.path.join(base_path, MODEL, "3")
    os.makedirs(target)
    shutil.copy(os.path.join(exports["v2"], "saved_model.pb"), target)  # no variables yet
    manager.poll_once(), manager.poll_once()
    assert serving_version(manager) == 1
    shutil.copytree(os.path.join(exports["v2"], "variables"), os.path.join(target, "variables"))
    with open(os.path.join(target, "saved_model.pb"), "wb") as f:
        f.write(b"truncated")  # complete-looking but corrupt: the load fails
    manager.poll_once(), manager.poll_once()
    assert serving_version(manager) == 1
    assert "load failed" in dict((v, e) for v, _, e in manager.status())[3]
    shutil.copy(os.path.join(exports["v2"], "saved_model.pb"), target)  # the copy completes
    manager._retry.clear()  # skip the backoff wait
    manager.poll_once(), manager.poll_once()
    assert serving_version(manager) == 3


def test_retired_version_stays_usable_until_its_last_request(manager, base_path, exports):
    with manager.lease() as old:
        testing.push_version(exports["v2"], os.path.join(base_path, MODEL), 2)
        manager.poll_once(), manager.poll_once()
        assert serving_version(manager) == 2 and old.state == "UNLOADING"
        assert run(old).endswith("v1")  # the in-flight request still works
    assert old.state == "END"


def test_specific_version_and_missing_model(manager, tmp_path):
    with manager.lease(1) as loaded:
        assert loaded.version == 1
    with pytest.raises(ServingError) as caught:
        with manager.lease(2):
            pass
    assert caught.value.code == grpc.StatusCode.NOT_FOUND
    empty = ModelManager("empty", str(tmp_path / "nothing"))
    empty.poll_once(initial=True)
    with pytest.raises(ServingError, match="no loaded version"):
        with empty.lease():
            pass


def test_removing_the_latest_version_rolls_back(manager, base_path, exports):
    testing.push_version(exports["v2"], os.path.join(base_path, MODEL), 2)
    manager.poll_once(), manager.poll_once()
    shutil.rmtree(os.path.join(base_path, MODEL, "2"))
    manager.poll_once(), manager.poll_once()
    assert serving_version(manager) == 1


def test_start_falls_back_when_the_newest_version_is_corrupt(base_path, exports):
    broken = testing.push_version(exports["v2"], os.path.join(base_path, MODEL), 2)
    with open(os.path.join(broken, "saved_model.pb"), "wb") as f:
        f.write(b"not a SavedModel")
    manager = ModelManager(MODEL, os.path.join(base_path, MODEL))
    manager.poll_once(initial=True)
    assert serving_version(manager) == 1
    assert dict((v, s) for v, s, _ in manager.status()) == {2: "END", 1: "AVAILABLE"}
    manager.stop()


@pytest.mark.parametrize("runtime", ["function", "session"])
def test_unloaded_version_memory_is_freed_on_the_poll_thread(base_path, exports, runtime):
    """A restored SavedModel sits in reference cycles; with automatic collection off,
    only the manager's own collection after the swap can free its variables (functions)
    or its graph, after its session was closed there (session)."""
    manager = ModelManager(MODEL, os.path.join(base_path, MODEL), poll_seconds=0.01,
                           settle_seconds=0, runtime=runtime)
    manager.poll_once(initial=True)
    manager.wait_for_warm_up()
    with manager.lease() as old:
        # captured by cyclic FuncGraphs; a tf.Graph in cycles with its operations
        freed = weakref.ref(old._model.weights.handle if runtime == "function" else old._model.graph)
    gc.disable()
    try:
        testing.push_version(exports["v2"], os.path.join(base_path, MODEL), 2)
        manager.poll_once()
        assert freed() is not None
        manager.poll_once()  # swaps, retires version 1 (nothing in flight), closes, collects
        assert serving_version(manager) == 2
        assert freed() is None
    finally:
        gc.enable()
        manager.stop()


def test_warm_up_replays_the_tf_serving_warmup_file_that_export_writes(tmp_path, exports):
    """tablegen_tf.export writes TF Serving's PredictionLog TFRecord; the server replays
    every request in it (the bad table's assertion failure shows it really ran)."""
    import numpy as np
    from tensorflow_serving.apis import prediction_log_pb2

    from serving.model_manager import LoadedVersion
    from tablegen_tf.config import DecodeConfig
    from tablegen_tf.constants import WARMUP_ASSET
    from tablegen_tf.export import warmup_requests, write_warmup_requests

    export = tmp_path / "1"
    shutil.copytree(exports["v1"], export)
    requests = warmup_requests("tables", testing.sample_tables(3), {"serving_default", "generate"},
                               DecodeConfig())
    requests.append(("serving_default", {"tables": np.array(["not a table"], dtype=object)}))
    assert write_warmup_requests(str(export), requests) == 6
    logs = [prediction_log_pb2.PredictionLog.FromString(record.numpy())
            for record in tf.data.TFRecordDataset(str(export / WARMUP_ASSET))]
    specs = [(log.predict_log.request.model_spec.name, log.predict_log.request.model_spec.signature_name)
             for log in logs]
    assert specs == [(MODEL, "serving_default")] * 4 + [(MODEL, "generate"), (MODEL, "serving_default")]
    assert [len(log.predict_log.request.inputs["tables"].string_val) for log in logs] == [1, 1, 3, 16, 1, 1]
    assert set(logs[4].predict_log.request.inputs) == {"tables", "beam_size", "max_length", "must_include"}
    assert LoadedVersion(MODEL, 1, str(export)).warm_up() == (5, 6)


def test_the_parallel_searches_batch_warms_up_after_the_swap():
    """Before the swap: serving_default's one-table and small-batch requests; its batch of
    PARALLEL_MIN_BATCH rows (no c16 batch is that large) and the other signatures after."""
    from tablegen_tf.config import DecodeConfig
    from tablegen_tf.export import warmup_requests
    from serving.model_manager import split_warmup

    requests = warmup_requests("tables", testing.sample_tables(3), {"serving_default", "generate"},
                               DecodeConfig())
    first, later = split_warmup(requests, background=True)
    assert [(name, len(arrays["tables"])) for name, arrays in first] == [("serving_default", n) for n in (1, 1, 3)]
    assert [(name, len(arrays["tables"])) for name, arrays in later] == [("serving_default", 16), ("generate", 1)]
    assert split_warmup(requests, background=False) == (requests, [])


def test_other_signatures_warm_up_in_the_background_after_the_swap(tmp_path, exports, caplog):
    """Only serving_default's warm-up requests run before a version takes traffic; the
    other signatures' run after the swap on a background thread, the version serving."""
    import logging

    from tablegen_tf.config import DecodeConfig
    from tablegen_tf.export import warmup_requests, write_warmup_requests

    export = testing.push_version(exports["slow"], str(tmp_path / MODEL), 1)  # ~0.4 s per call
    requests = warmup_requests("tables", testing.sample_tables(2), {"serving_default", "generate"},
                               DecodeConfig())
    write_warmup_requests(export, requests[-1:] * 3 + requests[:1])  # generate x3, serving_default
    manager = ModelManager(MODEL, str(tmp_path / MODEL))
    with caplog.at_level(logging.INFO, "tablegen.serving"):
        manager.poll_once(initial=True)
        [warmer] = manager._warmers
        assert warmer.is_alive()
        assert "warmed up (1 of 1 requests)" in caplog.text and "3 more in the background" in caplog.text
        assert run_generate(manager).endswith("slow")  # answers while generate warms up
        manager.wait_for_warm_up()
    assert "background warm-up (3 of 3 requests)" in caplog.text
    manager.stop()


def run_generate(manager):
    with manager.lease() as loaded:
        return run_generate_on(loaded)


def test_a_version_serves_before_its_other_signatures_load(tmp_path, exports, caplog):
    """serving_default alone is loaded before the swap; generate loads in the background
    (a request to it waits for that), and if that load fails only generate fails."""
    import logging

    export = testing.push_version(exports["v1"], str(tmp_path / MODEL), 1)
    manager = ModelManager(MODEL, str(tmp_path / MODEL))
    with caplog.at_level(logging.INFO, "tablegen.serving"):
        manager.poll_once(initial=True)
        with manager.lease() as loaded:
            assert set(loaded.signature_defs.signature_def) >= {"serving_default", "generate"}
            assert run(loaded) == testing.expected_text(TABLE[0], "v1")
            assert run_generate(manager) == testing.expected_text(TABLE[0], "v1")  # waits for the load
            assert loaded.complete
        manager.wait_for_warm_up()
    assert "its other signatures load in the background" in caplog.text
    assert "generate loaded in" in caplog.text
    manager.stop()

    with open(os.path.join(export, "saved_model.pb"), "rb") as handle:
        good = handle.read()
    manager = ModelManager(MODEL, str(tmp_path / MODEL))
    loaded = manager._load(1)[0]  # serving_default only, then the full SavedModel breaks
    with open(os.path.join(export, "saved_model.pb"), "wb") as handle:
        handle.write(good[: len(good) // 2])
    assert loaded.load_rest() == []
    assert run(loaded) == testing.expected_text(TABLE[0], "v1")
    with pytest.raises(ServingError) as error:
        loaded.signature("generate")
    assert error.value.code == grpc.StatusCode.UNAVAILABLE and "failed to load" in error.value.message


def _in_thread(target):
    """(thread, results): ``target``'s return value or exception lands in results."""
    results = []

    def run_it():
        try:
            results.append(target())
        except Exception as error:  # noqa: BLE001 - the test asserts on it
            results.append(error)

    thread = threading.Thread(target=run_it, daemon=True)
    thread.start()
    return thread, results


def test_a_request_loads_the_other_signatures_itself(tmp_path, exports):
    """The background load of generate runs niced: a request must not wait for it (here it
    never starts, as on a host too busy to give it the CPU), and when both load at once,
    one copy is kept."""
    testing.push_version(exports["v1"], str(tmp_path / MODEL), 1)
    manager = ModelManager(MODEL, str(tmp_path / MODEL))
    loaded = manager._load(1)[0]  # serving_default only; no background thread
    assert not loaded.complete
    request, answers = _in_thread(lambda: run_generate_on(loaded))
    request.join(timeout=120)
    assert not request.is_alive(), "the request waited for a background load that never ran"
    assert answers == [testing.expected_text(TABLE[0], "v1")] and loaded.complete

    loaded = manager._load(1)[0]
    background, added = _in_thread(loaded.load_rest)
    request, answers = _in_thread(lambda: run_generate_on(loaded))
    for thread in (background, request):
        thread.join(timeout=120)
    assert answers == [testing.expected_text(TABLE[0], "v1")]
    assert "generate" in loaded.signatures and loaded.complete and not loaded._rest_error
    assert added[0] in ([], sorted(set(loaded.signatures) - {"serving_default"}))
    manager.stop()


def test_the_background_load_stands_down_once_a_request_loads(tmp_path, exports):
    """A request already loading the other signatures: the background load adds no copy."""
    testing.push_version(exports["v1"], str(tmp_path / MODEL), 1)
    manager = ModelManager(MODEL, str(tmp_path / MODEL))
    loaded = manager._load(1)[0]
    background_returned, loads = threading.Event(), []
    real_load = loaded._load_partial

    def counted_load(signatures):
        loads.append(signatures)
        if len(loads) == 1:  # the request's load goes on once the background call has returned
            background_returned.wait(timeout=60)
        return real_load(signatures)

    loaded._load_partial = counted_load
    request, answers = _in_thread(lambda: run_generate_on(loaded))
    deadline = time.monotonic() + 60
    while not loads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loaded.load_rest(background=True) == []
    background_returned.set()
    request.join(timeout=120)
    assert answers == [testing.expected_text(TABLE[0], "v1")] and loaded.complete
    assert len(loads) == 1, "the background load loaded a second copy"
    manager.stop()


def run_generate_on(loaded):
    return loaded.signature("generate").run({
        "tables": tf.constant(TABLE), "beam_size": tf.constant(1), "max_length": tf.constant(100),
        "must_include": tf.zeros([1, 0], tf.string)})["text"][0].decode()

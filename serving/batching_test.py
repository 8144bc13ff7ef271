"""The request-coalescing queue, with a plain Python function as the 'model'."""

import os
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from serving.batching import Batcher, BatchingOptions, parse_batching_parameters

HERE = os.path.dirname(os.path.abspath(__file__))


class RecordingModel:
    """Doubles its input; remembers batch sizes; 'bad' rows fail the whole call."""

    def __init__(self, seconds=0.0):
        self.sizes, self.seconds = [], seconds

    def __call__(self, inputs):
        values = inputs["x"].numpy()
        self.sizes.append(len(values))
        time.sleep(self.seconds)
        if (values < 0).any():
            raise tf.errors.InvalidArgumentError(None, None, "negative input")
        return {"y": values * 2}


def submit_concurrently(batcher, values):
    results, start = {}, threading.Barrier(len(values))

    def call(value):
        start.wait()
        try:
            results[value] = batcher.submit({"x": tf.constant([value])}, 1)["y"].tolist()
        except tf.errors.InvalidArgumentError as error:
            results[value] = error

    threads = [threading.Thread(target=call, args=(v,)) for v in values]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_concurrent_requests_are_merged_and_split_back():
    model = RecordingModel(seconds=0.02)
    batcher = Batcher(model, BatchingOptions(max_batch_size=8, batch_timeout_micros=50_000))
    try:
        results = submit_concurrently(batcher, list(range(1, 17)))
    finally:
        batcher.close()
    assert results == {v: [2 * v] for v in range(1, 17)}
    assert max(model.sizes) > 1 and max(model.sizes) <= 8 and sum(model.sizes) == 16


def test_a_lone_client_does_not_wait_for_the_batch_timeout():
    batcher = Batcher(RecordingModel(), BatchingOptions(batch_timeout_micros=500_000))
    try:
        started = time.perf_counter()
        for value in range(5):
            assert batcher.submit({"x": tf.constant([value, value])}, 2)["y"].tolist() == [2 * value] * 2
        assert time.perf_counter() - started < 0.5  # 5 calls, far below one timeout
    finally:
        batcher.close()


def test_a_failing_request_does_not_fail_its_batch_neighbours():
    model = RecordingModel(seconds=0.01)
    batcher = Batcher(model, BatchingOptions(batch_timeout_micros=50_000))
    try:
        results = submit_concurrently(batcher, [1, 2, -3, 4])
    finally:
        batcher.close()
    assert max(model.sizes) > 1  # the bad row did share a batch
    assert isinstance(results[-3], tf.errors.InvalidArgumentError)
    assert {v: results[v] for v in (1, 2, 4)} == {1: [2], 2: [4], 4: [8]}


def test_closed_batcher_finishes_queue_then_refuses():
    batcher = Batcher(RecordingModel(), BatchingOptions())
    batcher.close()
    with pytest.raises(Exception, match="shutting down"):
        batcher.submit({"x": tf.constant([1])}, 1)


def test_parse_batching_parameters_file():
    with open(os.path.join(HERE, "batching_parameters.txt")) as f:
        options = parse_batching_parameters(f.read())
    assert options.max_batch_size == 64 and options.num_batch_threads == 2
    # TF Serving's timeout is a fixed wait (its batches run full or at the timeout), so
    # its file keeps a shorter one than our default, whose wait ends when no row is coming.
    assert 2000 <= options.batch_timeout_micros <= 5000


def test_serve_defaults_are_the_batchers():
    import argparse

    from serving.server import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])
    assert BatchingOptions(args.max_batch_size, args.batch_timeout_micros, args.num_batch_threads) == BatchingOptions()


def test_outputs_are_numpy_slices():
    batcher = Batcher(lambda inputs: {"y": np.arange(3)}, BatchingOptions())
    try:
        assert batcher.submit({"x": tf.constant([1, 2, 3])}, 3)["y"].tolist() == [0, 1, 2]
    finally:
        batcher.close()


def test_one_batcher_serves_two_versions_without_mixing_them():
    """A swap's crossover: requests for the old and the new version's function share the
    queue and threads, and each batch runs one function on its own requests only."""
    old, new = RecordingModel(seconds=0.02), RecordingModel(seconds=0.02)
    old.name, new.name = "old", "new"
    batcher = Batcher(None, BatchingOptions(max_batch_size=8, batch_timeout_micros=50_000, num_batch_threads=1))
    results, start = {}, threading.Barrier(8)

    def call(value, model):
        start.wait()
        results[value] = (model.name, batcher.submit({"x": tf.constant([value])}, 1, model.__call__)["y"].tolist())

    threads = [threading.Thread(target=call, args=(v, old if v % 2 else new)) for v in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.close()
    assert results == {v: ("old" if v % 2 else "new", [2 * v]) for v in range(1, 9)}
    assert sum(old.sizes) == sum(new.sizes) == 4
    assert max(old.sizes) > 1 and max(new.sizes) > 1  # still batched, per function


def test_under_steady_load_each_thread_batches_its_share_of_the_clients():
    """16 clients in a closed loop on 2 batch threads: batches of at most 8, mostly of 8,
    two at a time (one batch of 16 would leave a core idle; see serving.batching)."""
    model = RecordingModel(seconds=0.02)
    batcher = Batcher(model, BatchingOptions(max_batch_size=64, batch_timeout_micros=50_000, num_batch_threads=2))
    start = threading.Barrier(16)

    def client(value):
        start.wait()
        for _ in range(6):
            assert batcher.submit({"x": tf.constant([value])}, 1)["y"].tolist() == [2 * value]

    threads = [threading.Thread(target=client, args=(v,)) for v in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.close()
    assert sum(model.sizes) == 96 and max(model.sizes) <= 8
    assert sum(size for size in model.sizes if size == 8) >= 48, model.sizes


def test_a_batch_does_not_wait_for_rows_no_client_is_sending():
    """Every row of the recent peak is queued or running: the queued one runs at once on
    the free thread instead of waiting out the timeout for a share that cannot come."""
    entered, release = threading.Event(), threading.Event()

    def model(inputs):
        values = inputs["x"].numpy()
        if len(values) == 2:  # the first request holds its thread until released
            entered.set()
            release.wait(10)
        return {"y": values * 2}

    batcher = Batcher(model, BatchingOptions(batch_timeout_micros=5_000_000, num_batch_threads=2))
    first = threading.Thread(target=batcher.submit, args=({"x": tf.constant([1, 2])}, 2))
    try:
        first.start()
        assert entered.wait(10)
        started = time.perf_counter()  # peak 3 in flight, share 2: one row queued, two running
        assert batcher.submit({"x": tf.constant([3])}, 1)["y"].tolist() == [6]
        assert time.perf_counter() - started < 2.5  # half the timeout; ~0 s when right
    finally:
        release.set()
        first.join()
        batcher.close()

"""Fixtures for the serving tests.

The SavedModels are small stand-ins built here with tf.saved_model.save
(serving/testing.py), not the project's real exporter: the server only depends
on the signature contract, which they implement.
"""

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tablegen_tf import logs  # noqa: E402

# TF's start-up lines (absl, oneDNN, cuInit) ignore the level above; a pytest-xdist worker loads
# this file before its output is captured, so the import's chatter goes to the log, not the console.
with logs.capture_output():
    from serving import testing  # noqa: E402


@pytest.fixture(scope="session")
def exports(tmp_path_factory):
    """Version sources: 'v1'/'v2' differ in the text suffix; 'slow' takes ~0.4 s per call."""
    root = tmp_path_factory.mktemp("exports")
    return {
        "v1": testing.save_fake_model(str(root / "v1"), suffix="v1"),
        "v2": testing.save_fake_model(str(root / "v2"), suffix="v2"),
        "slow": testing.save_fake_model(str(root / "slow"), suffix="slow", decoder_steps=20000,
                                        width=256),
    }


@pytest.fixture
def base_path(tmp_path, exports):
    """BASE with BASE/tablegen/1 published."""
    testing.push_version(exports["v1"], str(tmp_path / "models" / testing.MODEL), 1)
    return str(tmp_path / "models")


@pytest.fixture
def running(base_path):
    """A started in-process server over base_path (gRPC and REST on free ports)."""
    from serving import server

    instance = server.build_server(testing.serve_args(base_path)).start()
    yield instance
    instance.stop()

"""SIGTERM drains in-flight requests and exits 0 (server in a subprocess, serving
the slow stand-in SavedModel from conftest.py)."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import grpc
import pytest

from serving import client, testing
from serving.testing import MODEL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(base_path, temp_dir):
    """temp_dir: the server's TMPDIR, where its XLA cache (serving/xla_cache.py) goes."""
    os.makedirs(temp_dir)
    process = subprocess.Popen(
        [sys.executable, "-m", "serving.server", "--model-base-path", base_path,
         "--model-name", MODEL, "--host", "127.0.0.1", "--port", "0", "--rest-port", "0"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": temp_dir, "TF_XLA_FLAGS": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in process.stdout], daemon=True).start()
    deadline = time.time() + 240  # a loaded CI machine starts TF slowly
    while time.time() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line.startswith("tablegen serve: ready"):
            port = int(line.split("grpc=127.0.0.1:")[1].split()[0])
            return process, f"127.0.0.1:{port}", lines
    process.kill()
    pytest.fail("server did not become ready")


def xla_caches(temp_dir):
    return [name for name in os.listdir(temp_dir) if name.startswith("tablegen-xla-")]


def test_sigterm_drains_in_flight_requests_and_exits_zero(tmp_path, exports):
    testing.push_version(exports["slow"], str(tmp_path / MODEL), 1)
    process, address, lines = start_server(str(tmp_path), str(tmp_path / "tmp"))
    models = []
    try:
        assert len(xla_caches(tmp_path / "tmp")) == 1
        tables = testing.sample_tables(1)
        client.generate_remote(address, MODEL, tables)  # connected and warm
        finished = []
        # Connected before the barrier: a thread still dialling when SIGTERM lands is refused
        # (a new connection), which is right for the server and was this test's flake.
        models.extend(client.RemoteModel(address, MODEL, retries=0) for _ in range(4))
        for model in models:
            grpc.channel_ready_future(model._channel).result(timeout=30)
        started = threading.Barrier(len(models) + 1)

        def request(model):
            started.wait()
            finished.append((model.generate(tables), time.perf_counter()))

        threads = [threading.Thread(target=request, args=(model,)) for model in models]
        for thread in threads:
            thread.start()
        started.wait()
        time.sleep(0.15)  # the calls are sent; the slow model takes ~0.4 s each
        signalled = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(30)
        assert process.wait(30) == 0
    finally:
        process.kill()
        for model in models:
            model.close()
    assert len(finished) == 4 and all(texts[0].endswith("slow") for texts, _ in finished)
    assert any(at > signalled for _, at in finished)  # they really were in flight
    assert "tablegen serve: stopped\n" in list(lines.queue)
    assert not xla_caches(tmp_path / "tmp")  # removed at the stop
    with pytest.raises(grpc.RpcError) as caught:
        client.generate_remote(address, MODEL, tables, timeout=1, retries=0)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_sigterm_does_not_wait_for_a_background_warm_up_request(tmp_path):
    """A real model's first `generate` call takes minutes; SIGTERM during its background
    warm-up exits 0 at once instead of waiting for it (every request was answered)."""
    from tablegen_tf.config import DecodeConfig
    from tablegen_tf.export import warmup_requests, write_warmup_requests

    export = testing.save_fake_model(str(tmp_path / MODEL / "1"), decoder_steps=20_000_000)  # minutes
    requests = warmup_requests("tables", testing.sample_tables(1), {"generate"}, DecodeConfig())
    write_warmup_requests(export, [r for r in requests if r[0] == "generate"])
    process, _, lines = start_server(str(tmp_path), str(tmp_path / "tmp"))
    try:
        assert len(xla_caches(tmp_path / "tmp")) == 1
        time.sleep(1.0)  # the warm-up request is running
        signalled = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        assert time.perf_counter() - signalled < 30
    finally:
        process.kill()
    assert "tablegen serve: stopped\n" in list(lines.queue)
    assert not xla_caches(tmp_path / "tmp")  # removed on the early exit too

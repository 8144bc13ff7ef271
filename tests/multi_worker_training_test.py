"""`tablegen train --workers 2`: two MultiWorkerMirroredStrategy workers on loopback ports.

One slow test, four checks on the same runs (each run starts TensorFlow in 1-2 processes,
the expensive part):
* the per-step training loss equals a single-process run's at the same global batch
  (float tolerance: the two workers' gradients are summed in another order). Dropout is 0:
  a dropout mask is drawn per replica for its rows' shape, so masks cannot match a
  one-device run's bitwise; everything else (data order, padding, loss weighting) does;
* each worker trains on its half of every global batch (the example ids each worker logs
  at every step: disjoint, and together the single run's batch);
* only the chief writes the run directory (checkpoints, summaries, config, results);
* SIGKILL of worker 1 mid-run: the launcher stops worker 0 and exits 1 with a message
  naming the dead worker; the same command then resumes from the last checkpoint and ends
  at the same final step, every started process gone.
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from trainer_test import data_dir  # noqa: F401  (the prepared tiny E2E fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_SET = [
    "model.hidden_size=8", "model.word_dim=8", "model.field_dim=4", "model.value_dim=8", "model.position_dim=2",
    "model.num_layers=1", "model.dropout=0", "data.batch_size=4", "data.shuffle_buffer=16", "train.seed=1",
    # one bucket: no global batch smaller than the 2 replicas, which a multi-worker run skips
    "data.bucket_boundaries=[1000]",
    "train.checkpoint_every_steps=3", "train.log_every_steps=1",
    "decode.beam_size=2", "decode.max_length=8",
]
MAX_STEPS = 30
KILL_AFTER_CHECKPOINT = 6
IDS_LINE = re.compile(r"step (\d+): worker (\d+) of (\d+) trained on \d+ examples: (.*)$")
RUN_FILES = {"best", "checkpoints", "config.json", "logs", "train_result.json", "vocab"}


def _command(data, out, workers):
    # No validation set: decoding is not under test, and tracing it costs seconds per process.
    return [sys.executable, "-m", "tablegen_cli.main", "train", "--config", "e2e", "--out", out,
            "--train", os.path.join(data, "train"),
            "--max-steps", str(MAX_STEPS), "--no-progress", "--workers", str(workers)] + \
        [a for kv in TINY_SET for a in ("--set", kv)]


def _run(data, out, workers):
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run(_command(data, out, workers), env=env, capture_output=True, text=True, timeout=300)
    return done


def _losses(out):
    """step -> the training loss of the last session that ran the step (a killed session's
    steps after its last checkpoint are run again)."""
    import tensorflow as tf

    by_step = {}
    for path in glob.glob(os.path.join(out, "logs", "train", "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "loss":
                    loss = float(tf.make_ndarray(value.tensor))
                    if event.step not in by_step or by_step[event.step][0] < event.wall_time:
                        by_step[event.step] = (event.wall_time, loss)
    return {step: loss for step, (_, loss) in by_step.items()}


def _example_ids(log_path):
    """step -> sorted example ids this worker trained on (its last session's line)."""
    ids = {}
    with open(log_path, encoding="utf-8") as handle:
        for line in handle:
            match = IDS_LINE.search(line.rstrip("\n"))
            if match:
                ids[int(match.group(1))] = sorted(match.group(4).split())
    return ids


def _newest_checkpoint_step(out):
    steps = [int(path.rsplit("ckpt-", 1)[1].split(".")[0])
             for path in glob.glob(os.path.join(out, "checkpoints", "ckpt-*.index"))]
    return max(steps, default=0)


def _worker_processes(launcher):
    """index -> psutil.Process of the launcher's workers (from their TF_CONFIG)."""
    workers = {}
    for child in launcher.children():  # the workers; their own children inherit TF_CONFIG too
        try:
            config = json.loads(child.environ().get("TF_CONFIG", "{}"))
        except (psutil.Error, ValueError):
            continue
        if config:
            workers[config["task"]["index"]] = child
    return workers


def _kill_worker_one_mid_run(data, out):
    """Starts 2 workers, SIGKILLs worker 1 once a checkpoint past KILL_AFTER_CHECKPOINT is
    on disk; returns the launcher's exit code, stderr and the pids it started."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    launcher = subprocess.Popen(_command(data, out, 2), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    try:
        parent, pids = psutil.Process(launcher.pid), set()
        deadline = time.time() + 180
        while launcher.poll() is None and time.time() < deadline and \
                _newest_checkpoint_step(out) < KILL_AFTER_CHECKPOINT:
            pids |= {p.pid for p in parent.children(recursive=True)}  # workers and anything they start
            time.sleep(0.05)
        workers = _worker_processes(parent)
        assert launcher.poll() is None and set(workers) == {0, 1}, "the run ended before the kill"
        pids |= {p.pid for p in parent.children(recursive=True)}
        workers[1].send_signal(signal.SIGKILL)
        _, stderr = launcher.communicate(timeout=60)  # bounded: the launcher stops worker 0
        return launcher.returncode, stderr, pids
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


@pytest.mark.slow
def test_two_workers_equal_one_shard_each_batch_and_resume_after_sigkill(data_dir, tmp_path):  # noqa: F811
    single, multi = str(tmp_path / "single"), str(tmp_path / "multi")
    done = _run(data_dir, single, 1)
    assert done.returncode == 0, done.stderr[-3000:]

    code, stderr, pids = _kill_worker_one_mid_run(data_dir, multi)
    assert code == 1, stderr[-3000:]
    assert "worker 1 was killed by SIGKILL" in stderr and "Run the same command again to resume" in stderr, stderr
    assert len(pids) >= 2 and not [pid for pid in pids if psutil.pid_exists(pid)], pids
    killed_at = _newest_checkpoint_step(multi)
    assert KILL_AFTER_CHECKPOINT <= killed_at < MAX_STEPS

    done = _run(data_dir, multi, 2)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    with open(os.path.join(multi, "logs", "train.log"), encoding="utf-8") as handle:
        assert f"resumed from {multi}/checkpoints/ckpt-{killed_at} at step {killed_at}" in handle.read()
    assert f"trained {MAX_STEPS} steps" in done.stdout, done.stdout

    # The loss trajectory of 2 workers (killed and resumed) is the single process's.
    expected, got = _losses(single), _losses(multi)
    assert sorted(got) == sorted(expected) == list(range(1, MAX_STEPS + 1))
    steps = sorted(got)  # measured: at most 2.4e-7 apart, relatively
    np.testing.assert_allclose([got[s] for s in steps], [expected[s] for s in steps], rtol=1e-5)

    # Each worker trained on its half of every global batch.
    single_ids = _example_ids(os.path.join(single, "logs", "train.log"))
    halves = [_example_ids(os.path.join(multi, "logs", "train.log")),
              _example_ids(os.path.join(multi, "logs", "worker-1.log"))]
    for step in range(1, MAX_STEPS + 1):
        assert halves[0][step] and halves[1][step], step
        assert sorted(halves[0][step] + halves[1][step]) == single_ids[step], step
        assert abs(len(halves[0][step]) - len(halves[1][step])) <= 1, step

    # Only the chief wrote the run directory: two sessions' summaries, no worker files
    # (valid/ is the chief's empty validation writer).
    assert set(os.listdir(multi)) == RUN_FILES
    assert set(os.listdir(os.path.join(multi, "logs"))) == {"train", "valid", "train.log", "worker-1.log"}
    assert len(glob.glob(os.path.join(multi, "logs", "train", "events.*"))) == 2

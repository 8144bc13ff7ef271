"""Crash-safe training: SIGKILL at random moments, then the same command resumes and ends
with the same weights, bitwise, as an uninterrupted seeded run; SIGTERM stops it cleanly
(exit 143, its temp dir removed) and it resumes; an unreadable latest checkpoint falls back
to the previous one with a warning.

Why bitwise holds: the training checkpoint holds the weights, the optimizer slots, the
dropout seed generators' states, the step, the early-stopping counter and the last
validated step; the seeded input order is skipped to the checkpoint's step; validation
runs before the checkpoint of its step is written. CPU kernels are deterministic for one
thread configuration, so both runs below use the same one.
"""

import glob
import logging
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from trainer_test import data_dir, tiny_config  # noqa: F401  (the prepared tiny E2E fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_SET = [
    "model.hidden_size=8", "model.word_dim=8", "model.field_dim=4", "model.value_dim=8", "model.position_dim=2",
    "model.num_layers=1", "model.dropout=0.3", "data.batch_size=4", "data.shuffle_buffer=16", "train.seed=1",
    "train.eval_every_steps=25", "train.checkpoint_every_steps=3", "train.log_every_steps=5",
    "decode.beam_size=2", "decode.max_length=8",
]
MAX_STEPS = 200  # long enough that a fast machine cannot finish between two kills
KILLS = 4  # then one uninterrupted resume to the end


def _train_command(data, out):
    return [sys.executable, "-m", "tablegen_cli.main", "train", "--config", "e2e", "--data", data, "--out", out,
            "--max-steps", str(MAX_STEPS), "--no-progress"] + [a for kv in TINY_SET for a in ("--set", kv)]


def _environment():
    # One thread configuration for every run (kernels are deterministic for a given one).
    return {**os.environ, "TF_NUM_INTEROP_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "PYTHONPATH": ROOT}


def _train_to_the_end(data, out):
    done = subprocess.run(_train_command(data, out), env=_environment(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]


def _newest_checkpoint_step(out):
    steps = [int(path.rsplit("ckpt-", 1)[1].split(".")[0])
             for path in glob.glob(os.path.join(out, "checkpoints", "ckpt-*.index"))]
    return max(steps, default=0)


def _final_variables(out):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(os.path.join(out, "checkpoints"))
    names = sorted(n for n in reader.get_variable_to_shape_map() if n.startswith(("model.", "optimizer.", "rng.")))
    return {name: reader.get_tensor(name) for name in names}


@pytest.mark.slow
def test_sigterm_stops_training_cleanly_and_the_run_resumes(data_dir, tmp_path):  # noqa: F811
    out, temp = str(tmp_path / "run"), tmp_path / "tmp"
    temp.mkdir()
    process = subprocess.Popen(_train_command(data_dir, out), env={**_environment(), "TMPDIR": str(temp)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while process.poll() is None and time.time() < deadline and _newest_checkpoint_step(out) == 0:
        time.sleep(0.05)
    assert process.poll() is None, "training ended before it could be stopped: raise MAX_STEPS"
    assert os.listdir(temp), "the command's private temp dir is not under TMPDIR"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    assert "tablegen train: stopped by SIGTERM" in stderr
    assert os.listdir(temp) == []  # Beam's and autograph's files went with the private dir
    _train_to_the_end(data_dir, out)
    assert _newest_checkpoint_step(out) == MAX_STEPS


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_the_same_weights(data_dir, tmp_path):  # noqa: F811
    straight, killed = str(tmp_path / "straight"), str(tmp_path / "killed")
    _train_to_the_end(data_dir, straight)
    rng = random.Random(20261123)
    kills, attempts = 0, 0
    while kills < KILLS and attempts < 12:
        attempts += 1
        process = subprocess.Popen(_train_command(data_dir, killed), env=_environment(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Kill once training is under way (a checkpoint newer than the last one exists),
        # at a random moment: inside a step, a validation or a checkpoint write. Compared by
        # step number, not by count: only the newest keep_checkpoints files stay on disk.
        before = _newest_checkpoint_step(killed)
        deadline = time.time() + 300
        while process.poll() is None and time.time() < deadline and _newest_checkpoint_step(killed) <= before:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.5))
        if process.poll() is not None:
            assert process.returncode == 0
            break
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills += 1
    assert kills >= 2, "the run finished before it could be killed twice: raise MAX_STEPS"
    if process.returncode != 0:  # killed last time round: one more resume to finish
        _train_to_the_end(data_dir, killed)
    expected, got = _final_variables(straight), _final_variables(killed)
    assert sorted(expected) == sorted(got) and any(n.startswith("rng.") for n in got)
    for name in expected:
        np.testing.assert_array_equal(expected[name], got[name], err_msg=name)


def test_an_unreadable_latest_checkpoint_falls_back_to_the_previous_one(data_dir, tmp_path, caplog):  # noqa: F811
    from tablegen_tf.training.trainer import Trainer

    out = str(tmp_path / "run")
    Trainer(tiny_config(data_dir, max_steps=4, checkpoint_every_steps=2), out).train(progress=False)
    latest = os.path.join(out, "checkpoints", "ckpt-4")
    for path in glob.glob(latest + ".data-*"):
        with open(path, "r+b") as handle:  # a disk error: the variables' bytes are garbage
            handle.write(b"\xde\xad\xbe\xef" * 64)
    with open(latest + ".index", "wb") as handle:
        handle.write(b"not a checkpoint index")
    resumed = Trainer(tiny_config(data_dir, max_steps=6, checkpoint_every_steps=2), out)
    with caplog.at_level(logging.WARNING):
        message = resumed.restore()
    assert "ckpt-2" in message and int(resumed.step.numpy()) == 2
    assert any("ckpt-4 is unreadable" in r.getMessage() for r in caplog.records)
    assert resumed.train(progress=False).steps == 6

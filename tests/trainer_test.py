"""Trainer: resume after interruption, best-model export, strategies (tiny sizes)."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

from beam_jobs import prepare
from tablegen_tf.config import load_config

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TINY = {
    "model": {"hidden_size": 8, "word_dim": 8, "field_dim": 4, "value_dim": 8, "position_dim": 2, "num_layers": 1},
    "data": {"batch_size": 4, "shuffle_buffer": 16},
    "train": {"eval_every_steps": 4, "checkpoint_every_steps": 2, "log_every_steps": 2, "seed": 1},
    "decode": {"beam_size": 2, "max_length": 8},
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    source = os.path.join(FIXTURES, "e2e", "aligned")
    for split in ("train", "valid"):
        # The aligned fixture holds valid lines only: train on them too (tiny smoke data).
        config = prepare.PrepareConfig(
            format="e2e-aligned", input=os.path.join(source, "src_valid.txt"), output=str(root / split), split=split
        )
        prepare.run(config, IN_PROCESS)
    return str(root)


def tiny_config(data_dir, **train):
    overrides = {**TINY, "train": {**TINY["train"], **train}}
    overrides["data"] = {**TINY["data"], "train": os.path.join(data_dir, "train"), "valid": os.path.join(data_dir, "valid")}
    return load_config("e2e", overrides)


def test_splits_without_examples_or_vocabularies_are_config_errors_naming_the_setting(data_dir, tmp_path):
    import shutil

    from tablegen_tf.config import ConfigError
    from tablegen_tf.training.trainer import Trainer

    config = tiny_config(data_dir)
    config.data.valid = str(tmp_path / "no-such-split")
    with pytest.raises(ConfigError, match=r"^data\.valid: no TFRecord files match .*no-such-split"):
        Trainer(config, str(tmp_path / "run"))
    unprepared = tmp_path / "examples-only"  # examples, but not the vocab/ prepare writes beside them
    shutil.copytree(os.path.join(data_dir, "train"), unprepared, ignore=shutil.ignore_patterns("vocab"))
    config = tiny_config(data_dir)
    config.data.train = str(unprepared)
    with pytest.raises(ConfigError, match=r"^data\.train: no vocabulary .*examples-only/vocab/words\.txt"):
        Trainer(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_resume_continues_the_step_count_and_weights(data_dir, tmp_path):
    from tablegen_tf.training.trainer import Trainer

    out = str(tmp_path / "run")
    first = Trainer(tiny_config(data_dir, max_steps=4), out)
    assert first.train(progress=False).steps == 4
    weights = [w.numpy() for w in first.model.weights]
    second = Trainer(tiny_config(data_dir, max_steps=6), out)
    assert "resumed" in second.restore()
    assert int(second.step.numpy()) == 4
    for before, after in zip(weights, second.model.weights):
        np.testing.assert_array_equal(before, after.numpy())
    result = second.train(progress=False)
    assert result.steps == 6
    assert os.listdir(os.path.join(out, "best"))


def test_load_trained_restores_the_best_weights(data_dir, tmp_path):
    from tablegen_tf.training.trainer import Trainer, load_trained

    out = str(tmp_path / "run")
    trainer = Trainer(tiny_config(data_dir, max_steps=4), out)
    trainer.train(progress=False)
    path = load_trained(out).checkpoint
    assert path.endswith(f"ckpt-{int(trainer.best_step.numpy())}")


def _crashed_at_step_4_and_resumed(config, out):
    """A run that crashes after its step-2 checkpoint (log_every_steps 2: the reporter runs
    before step 4's validation and save), then resumed to the end: its Trainer."""
    from tablegen_tf.training.trainer import Trainer

    def crash_at_step_4(step, _max_steps, _scores):
        if step == 4:
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        Trainer(config, out).train(reporter=crash_at_step_4)
    resumed = Trainer(config, out)
    assert "at step 2" in resumed.restore()
    resumed.train(progress=False)
    return resumed


def _with_ema(config, momentum):
    optimizer = dataclasses.replace(config.train.optimizer, ema_momentum=momentum)
    return config.replace(train=dataclasses.replace(config.train, optimizer=optimizer))


def test_ema_validates_and_keeps_the_moving_average_and_trains_on_the_raw_weights(data_dir, tmp_path):
    from tablegen_tf.training.trainer import Trainer, load_trained

    momentum, out = 0.5, str(tmp_path / "run")
    trainer = Trainer(_with_ema(tiny_config(data_dir, max_steps=4, log_every_steps=1), momentum), out)
    raw_after_each_step = []
    trainer.train(reporter=lambda *_: raw_after_each_step.append(
        [v.numpy() for v in trainer.model.trainable_variables]))
    assert len(raw_after_each_step) == 4
    average = raw_after_each_step[0]  # Keras's first update copies the weights
    for raw in raw_after_each_step[1:]:
        average = [momentum * a + (1 - momentum) * w for a, w in zip(average, raw)]
    kept = load_trained(out).model.trainable_variables
    for expected, best, now, last in zip(average, kept, trainer.model.trainable_variables, raw_after_each_step[-1]):
        np.testing.assert_allclose(best.numpy(), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(now.numpy(), last)  # the swap put the raw weights back
    assert any(not np.allclose(a, w) for a, w in zip(average, raw_after_each_step[-1]))


def test_an_ema_run_resumed_after_a_crash_ends_with_the_uninterrupted_weights(data_dir, tmp_path):
    from tablegen_tf.training.trainer import Trainer, load_trained

    # Validated at step 2 before its checkpoint: the resume starts from weights the swap put back.
    config = _with_ema(tiny_config(data_dir, max_steps=6, eval_every_steps=2), 0.5)
    whole = Trainer(config, str(tmp_path / "whole"))
    whole.train(progress=False)

    parted = str(tmp_path / "parted")
    resumed = _crashed_at_step_4_and_resumed(config, parted)
    for uninterrupted, after_resume in zip(whole.optimizer.variables + whole.model.weights,
                                           resumed.optimizer.variables + resumed.model.weights):
        np.testing.assert_allclose(uninterrupted.numpy(), after_resume.numpy(), rtol=1e-6, atol=1e-7)
    for a, b in zip(load_trained(str(tmp_path / "whole")).model.weights, load_trained(parted).model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def _tiny_transformer_run(data_dir, out):
    from tablegen_tf.training.trainer import Trainer

    model = {"name": "transformer-copy", "d_model": 8, "num_heads": 2, "encoder_layers": 1, "decoder_layers": 1,
             "ffn_dim": 16, "field_dim": 4, "position_dim": 2}
    config = dataclasses.replace(tiny_config(data_dir, max_steps=2), model=load_config("e2e", {"model": model}).model)
    Trainer(config, out).train(progress=False)
    return out


def test_load_trained_sizes_the_model_for_a_longer_search(data_dir, tmp_path):
    # The transformer's key/value caches hold decode.max_length + 1 positions: a longer
    # --max-length must build them longer, not cap the texts at the run's length.
    from tablegen_tf.training.trainer import load_trained

    out = _tiny_transformer_run(data_dir, str(tmp_path / "run"))
    assert load_trained(out).model.max_decode_length == 9
    assert load_trained(out, max_length=4).model.max_decode_length == 9
    longer = load_trained(out, max_length=20)
    assert (longer.model.max_decode_length, longer.config.decode.max_length) == (21, 20)


@pytest.mark.slow
def test_a_transformer_export_refuses_a_generate_request_longer_than_its_caches(data_dir, tmp_path):
    # A request's max_length above the exported decode.max_length (8) is INVALID_ARGUMENT,
    # not a text cut short at the caches' end; `tablegen export --max-length` raises the limit.
    import tensorflow as tf

    from tablegen_tf.export import export_saved_model
    from tablegen_tf.inference import read_inputs

    out = _tiny_transformer_run(data_dir, str(tmp_path / "run"))
    raw, _ = read_inputs("e2e", os.path.join(os.path.dirname(__file__), "fixtures", "e2e", "devset.csv"), "valid")
    generate = tf.saved_model.load(export_saved_model(out, str(tmp_path / "export" / "1"))).signatures["generate"]

    def request(max_length):
        return generate(tables=tf.constant([raw[0].serving_input()]), beam_size=tf.constant(2),
                        max_length=tf.constant(max_length), must_include=tf.zeros([1, 0], tf.string))["text"]

    assert request(8).shape == (1,)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_length must be <= 8 for this model"):
        request(9)


def test_a_refit_replays_a_schedule_without_validation(data_dir, tmp_path):
    # A refit on all the data has no validation split: the learning rate still halves after
    # each step in train.decay_at_steps (once, also across a resume), and best/ is the last step.
    from tablegen_tf.training.trainer import Trainer, load_trained

    out = str(tmp_path / "run")
    config = tiny_config(data_dir, max_steps=3, decay_at_steps=[2, 3])
    config = config.replace(data=dataclasses.replace(config.data, valid=""))
    first = Trainer(config, out)
    first.train(progress=False)
    assert first._learning_rate() == pytest.approx(0.001 * 0.25)
    again = Trainer(config.replace(train=dataclasses.replace(config.train, max_steps=5)), out)
    again.train(progress=False)
    assert again._learning_rate() == pytest.approx(0.001 * 0.25)
    assert load_trained(out).checkpoint.endswith("ckpt-5")


def test_a_cosine_schedule_ends_on_its_floor_and_a_resume_replays_it(data_dir, tmp_path):
    # The rate is a function of the step (times decay on plateau's factors, checkpointed):
    # a run that crashes after its step-2 checkpoint and is resumed to 6 ends with the
    # uninterrupted run's weights.
    from tablegen_tf.training.trainer import Trainer

    base = tiny_config(data_dir, max_steps=6, decay_at_steps=[1])
    schedule = dataclasses.replace(base.train.optimizer, schedule="cosine", final_lr_fraction=0.1)
    config = base.replace(data=dataclasses.replace(base.data, valid=""),
                          train=dataclasses.replace(base.train, optimizer=schedule))

    whole = Trainer(config, str(tmp_path / "whole"))
    whole.train(progress=False)
    # the last update (step index 5 of 6) used 0.001 x 0.5 (plateau) x cosine(5/6)
    cosine = 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 5 / 6))
    assert whole._learning_rate() == pytest.approx(0.001 * 0.5 * cosine, rel=1e-5)

    resumed = _crashed_at_step_4_and_resumed(config, str(tmp_path / "parted"))
    assert float(resumed.lr_scale.numpy()) == pytest.approx(0.5)
    for uninterrupted, after_resume in zip(whole.model.weights, resumed.model.weights):
        np.testing.assert_allclose(uninterrupted.numpy(), after_resume.numpy(), rtol=1e-6, atol=1e-7)


def test_train_step_under_two_replica_mirrored_strategy(data_dir, tmp_path):
    # Logical devices must be configured before TensorFlow initialises: a fresh process.
    code = f"""
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tablegen_tf.training.trainer import Trainer
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from trainer_test import tiny_config
config = tiny_config({data_dir!r}, max_steps=2, strategy="mirrored")
config.data.valid = None
trainer = Trainer(config, {str(tmp_path / 'mirrored')!r})
assert trainer.strategy.num_replicas_in_sync == 2, trainer.strategy.num_replicas_in_sync
result = trainer.train(progress=False)
assert result.steps == 2
print("MIRRORED_OK")
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert "MIRRORED_OK" in proc.stdout, proc.stderr[-3000:]

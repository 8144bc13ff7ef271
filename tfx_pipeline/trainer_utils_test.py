"""run_fn helpers: vocabulary from the train split, finding the warm-start run."""

import json
import os

import tensorflow as tf

from tfx_pipeline import trainer_utils

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "e2e")


def _write_examples(path):
    from tablegen_tf.readers.build import build_examples
    from tablegen_tf.inference import read_inputs
    from tablegen_tf.tokenizer import TokenizerConfig

    tables, _ = read_inputs("e2e", os.path.join(FIXTURES, "devset.csv"), "train")
    built, _ = build_examples(tables, TokenizerConfig())
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for example, _ in built:
            writer.write(example.serialize())
    return [example for example, _ in built]


def test_vocabularies_are_built_like_tablegen_prepare(tmp_path):
    os.makedirs(tmp_path / "Split-train")
    examples = _write_examples(str(tmp_path / "Split-train" / "data_tfrecord-00000-of-00001.gz"))
    trainer_utils.build_vocabularies(str(tmp_path / "Split-train" / "*"), str(tmp_path / "out"), 1, 50000)
    words = (tmp_path / "out" / "vocab" / "words.txt").read_text().split("\n")
    fields = (tmp_path / "out" / "vocab" / "fields.txt").read_text().split()
    assert words[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert set(examples[0].values) <= set(words)
    assert fields[:3] == ["<pad>", "<unk>", "<none>"] and "familyfriendly" in fields
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["examples"] == len(examples) == 11


def _run_dir(path, model):
    from tablegen_tf.config import build_config, save_run_config

    os.makedirs(path)
    save_run_config(build_config({"model": model}), str(path))
    return str(path)


def _model(**values):
    from tablegen_tf.config import build_config

    return build_config({"model": values}).model


def test_warm_start_source_follows_the_model_artifact_to_its_run(tmp_path):
    run = _run_dir(tmp_path / "model_run" / "7", {"name": "encdec-copy", "hidden_size": 8})
    serving = tmp_path / "model" / "7" / "Format-Serving"
    os.makedirs(serving)
    (tmp_path / "model" / "7" / trainer_utils.RUN_INFO).write_text(json.dumps({"model_run_dir": run}))
    assert trainer_utils.base_run_dir(str(serving)) == run
    assert trainer_utils.base_run_dir(None) is None
    assert trainer_utils.warm_start_source(run, _model(name="encdec-copy", hidden_size=8)) == run
    # Another architecture cannot restore the checkpoint: train from scratch.
    assert trainer_utils.warm_start_source(run, _model(name="encdec-copy", hidden_size=16)) is None
    assert trainer_utils.warm_start_source(run, _model(name="ncp", hidden_size=8)) is None


class _Result:
    steps = 40


class _TrainerWithReporter:
    def train(self, warm_start_from=None, progress=True, reporter=None):
        for step in (20, 40):
            reporter(step, 40, {"loss": 1.5, "tokens_per_second": 9100.0})
        return _Result()


def test_step_progress_reaches_the_active_stage_if_the_trainer_reports(monkeypatch):
    import io

    from tablegen_tf import progress

    reported = []
    monkeypatch.setattr(progress.Progress, "report", lambda self, *args: reported.append((self.label, *args)))
    with progress.active_stage("[5/7] Trainer", io.StringIO()):
        assert trainer_utils._train(_TrainerWithReporter(), None, 40).steps == 40
    assert reported == [("[5/7] Trainer", 20, 40, {"loss": 1.5, "tokens_per_second": 9100.0}),
                        ("[5/7] Trainer", 40, 40, {"loss": 1.5, "tokens_per_second": 9100.0})]

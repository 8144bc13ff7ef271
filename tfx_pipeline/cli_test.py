"""CLI wiring (`tablegen pipeline ...`, `tablegen tensorboard`) and config loading."""

import argparse
import os

import pytest

from tfx_pipeline import cli, config


def _parser():
    parser = argparse.ArgumentParser(prog="tablegen")
    cli.add_pipeline_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_sub_commands_reach_their_handlers():
    parser = _parser()
    args = parser.parse_args(["pipeline", "run", "--config", "p.yaml", "--set", "pusher.model_name=x"])
    assert args.handler is cli.run_handler and args.config == "p.yaml" and args.overrides == ["pusher.model_name=x"]
    args = parser.parse_args(["pipeline", "compile", "--target", "kubeflow-v2", "--output", "p.json", "--config", "p.yaml"])
    assert args.handler is cli.compile_handler and args.output == "p.json"
    args = parser.parse_args(["tensorboard", "--pipeline-root", "/r"])
    assert args.handler is cli.tensorboard_handler and args.pipeline_root == "/r"
    with pytest.raises(SystemExit):
        parser.parse_args(["pipeline", "compile", "--target", "argo", "--output", "p.json"])


def test_tensorboard_covers_model_runs_and_evaluations(tmp_path, capsys):
    for path in ("Trainer/model_run/7/logs/train", "Trainer/model_run/12/logs/valid", "Evaluator/evaluation/8/logs"):
        os.makedirs(tmp_path / path)
    args = _parser().parse_args(["tensorboard", "--pipeline-root", str(tmp_path), "--print-only"])
    assert args.handler(args, []) == 0
    command = capsys.readouterr().out.strip()
    assert command.startswith("tensorboard --logdir_spec ")
    for name, path in (("train_7", "Trainer/model_run/7/logs"), ("train_12", "Trainer/model_run/12/logs"),
                       ("eval_8", "Evaluator/evaluation/8/logs")):
        assert f"{name}:{tmp_path / path}" in command


def test_tensorboard_without_logs_fails_readably(tmp_path, capsys):
    args = _parser().parse_args(["tensorboard", "--pipeline-root", str(tmp_path), "--print-only"])
    assert args.handler(args, []) == 2
    assert "no model run or evaluation logs" in capsys.readouterr().err


def test_default_config_and_overrides(tmp_path):
    user = tmp_path / "p.yaml"
    user.write_text("pipeline: {root: my_root}\nevaluator: {min_bleu: 30}\n")
    loaded = config.load(str(user), config.parse_overrides(["trainer.config.train.max_steps=7"]))
    assert loaded.root == os.path.abspath("my_root")
    assert loaded.evaluator["min_bleu"] == 30 and loaded.evaluator["max_bleu_drop"] == 0.0
    assert loaded.trainer["config"]["train"]["max_steps"] == 7
    assert loaded.trainer["config"]["model"]["name"] == "encdec-copy"  # default kept
    assert [s.name for s in loaded.splits] == ["train", "eval"]
    assert [s.merges for s in loaded.splits] == [False, True]
    assert loaded.push_directory.endswith(os.path.join("runs", "serving", "tablegen-e2e"))
    assert loaded.metadata_path == os.path.join(loaded.root, "metadata.sqlite")
    from tablegen_tf.config import load_config

    trained = load_config(loaded.trainer["corpus"], loaded.trainer["config"])
    assert trained.model.name == "encdec-copy" and trained.model.hidden_size == 128
    cloud = config.for_kubeflow(loaded)
    assert cloud.root.startswith("gs://") and cloud.input_base.startswith("gs://")


def test_a_pipeline_config_may_name_any_family(tmp_path):
    # The default's encdec sizes sit under models.encdec, so naming another family does not
    # drag encdec keys into its model section.
    from tablegen_tf.config import load_config

    user = tmp_path / "p.yaml"
    user.write_text("trainer: {config: {model: {name: table-nlm, hidden_units: 64}}}\n")
    loaded = config.load(str(user))
    trained = load_config(loaded.trainer["corpus"], loaded.trainer["config"])
    assert trained.model.name == "table-nlm" and trained.model.hidden_units == 64


def test_the_table_nlm_pipeline_config_names_the_family():
    from tablegen_tf.config import load_config

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    loaded = config.load(os.path.join(root, "tfx_pipeline", "configs", "table_nlm.yaml"))
    trained = load_config(loaded.trainer["corpus"], loaded.trainer["config"])
    assert trained.model.name == "table-nlm" and trained.train.max_steps == 600
    assert loaded.push_directory.endswith("tablegen-e2e-table-nlm")

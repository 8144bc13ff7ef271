"""The `tablegen` command line: exit codes and messages."""

import os
import re
import subprocess
import sys

import pytest

from tablegen_cli.main import main
from tablegen_tf.config import ConfigError

IN_PROCESS = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def test_cli_exit_codes(tmp_path, capsys):
    assert main(["prepare", "--format", "jsonl", "--input", str(tmp_path / "missing.jsonl"),
                 "--output", str(tmp_path / "o")] + IN_PROCESS) == 2
    assert "input not found" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n{}\n")
    assert main(["prepare", "--format", "jsonl", "--input", str(bad), "--output", str(tmp_path / "o2")] + IN_PROCESS) == 2
    assert "no valid records" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["prepare", "--format", "nope", "--input", str(bad), "--output", str(tmp_path / "o3")])



@pytest.mark.parametrize("override, message", [
    ("train.optimizer.schedule=cosine", "train.optimizer.schedule: 'cosine' anneals over the step budget: set train.max_steps"),
    ("train.strategy=foo", "train.strategy: unknown strategy 'foo'"),  # raised by the trainer
])
def test_a_training_setting_that_cannot_run_is_a_usage_error_not_a_traceback(tmp_path, capsys, override, message):
    code = main(["train", "--config", "e2e", "--train", str(tmp_path / "train"), "--out", str(tmp_path / "run"),
                 "--set", override, "--set", "train.max_steps=0"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"tablegen train: error: {message}" in err and "Traceback" not in err


def test_a_training_split_prepare_did_not_write_is_a_usage_error_naming_it(tmp_path, capsys):
    (tmp_path / "train").mkdir()  # e.g. the parent of the prepared split, as once in our own runs
    code = main(["train", "--config", "e2e", "--train", str(tmp_path / "train"), "--out", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err
    expected = f"data.train: no TFRecord files match {tmp_path / 'train' / 'examples-*.tfrecord.gz'}"
    assert f"tablegen train: error: {expected}" in err and "Traceback" not in err, err


def test_a_pragmatic_alpha_outside_0_1_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["evaluate", "--model", "run", "--format", "e2e", "--input", "dev.csv", "--pragmatic-alpha", "1.5"])
    assert exited.value.code == 2
    assert "--pragmatic-alpha: must be between 0 and 1, got 1.5" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, message", [
    ("--mbr-epsilon", "1.5", "--mbr-epsilon: must be at least 0 and below 1, got 1.5"),
    ("--mbr-samples", "0", "--mbr-samples: must be >= 1, got 0"),
    ("--mbr-weight", "-2", "--mbr-weight: must be >= 0, got -2"),
    ("--beam-size", "0", "--beam-size: must be >= 1, got 0"),
    ("--max-length", "-5", "--max-length: must be >= 1, got -5"),
])
def test_decoding_flags_out_of_range_are_usage_errors_before_any_loading(capsys, flag, value, message):
    with pytest.raises(SystemExit) as exited:
        main(["evaluate", "--model", "no-such-run", "--format", "e2e", "--input", "dev.csv", flag, value])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_each_decoding_flag_refuses_what_the_decode_config_refuses(capsys):
    """The flags' ranges are the config's (DecodeConfig.BOUNDS): a value the flag lets through
    is one DecodeConfig accepts, and the other way round."""
    from tablegen_tf.config import DecodeConfig

    for flag, key, value in (("--mbr-references", "mbr_references", "0"), ("--mbr-epsilon", "mbr_epsilon", "0.999"),
                             ("--pragmatic-alpha", "pragmatic_alpha", "1.0"), ("--beam-size", "beam_size", "1")):
        try:
            main(["evaluate", "--model", "no-such-run", "--format", "e2e", "--input", "dev.csv", flag, value,
                  "--help"])
            flag_accepts = True
        except SystemExit as exited:
            flag_accepts = exited.code == 0
        try:
            DecodeConfig(**{key: type(getattr(DecodeConfig(), key))(value)})
            config_accepts = True
        except ConfigError:
            config_accepts = False
        assert flag_accepts == config_accepts, (flag, value)
    capsys.readouterr()


def test_a_config_error_after_loading_is_an_error_message_not_a_traceback(monkeypatch, capsys):
    import tablegen_cli.main as cli
    from tablegen_tf.config import ConfigError

    def refuse(*_):
        raise ConfigError("decode.mbr_samples must be >= 1")

    monkeypatch.setattr(cli, "_run_evaluate", refuse)
    assert main(["evaluate", "--model", "run", "--format", "e2e", "--input", "dev.csv"]) == 2
    assert "tablegen evaluate: error: decode.mbr_samples must be >= 1" in capsys.readouterr().err


def test_ensemble_weights_that_do_not_fit_the_runs_are_a_usage_error_before_any_loading(tmp_path, capsys):
    assert main(["export", "--model", "no-such-run", "--ensemble", "other-run", "--output", str(tmp_path / "out"),
                 "--ensemble-weights", "1", "2", "3"]) == 2
    assert "tablegen export: error: --ensemble-weights: 3 weights for 2 members" in capsys.readouterr().err
    assert main(["evaluate", "--model", "no-such-run", "--format", "e2e", "--input", "dev.csv",
                 "--ensemble-weights", "1"]) == 2
    assert "--ensemble-weights needs an ensemble" in capsys.readouterr().err


def test_ensemble_flags_on_a_served_model_name_the_flag_given(tmp_path, capsys):
    served = ["generate", "--server", "localhost:1", "--model-name", "m", "--format", "e2e", "--input", "dev.csv",
              "--output", str(tmp_path / "out.txt")]  # (the command's log file goes beside its output)
    assert main(served + ["--ensemble-weights", "1", "2"]) == 2
    err = capsys.readouterr().err
    assert "tablegen generate: error: --ensemble-weights decodes local runs with --model" in err
    assert "Traceback" not in err
    assert main(served + ["--ensemble", "other-run"]) == 2
    assert "tablegen generate: error: --ensemble decodes local runs with --model" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # refused before any work: no out.txt.log either


def test_a_refused_prepare_leaves_no_output_directory_behind(tmp_path, capsys):
    out = tmp_path / "prepared"
    assert main(["prepare", "--format", "e2e", "--input", "dev.csv", "--split", "valid", "--selection-fraction",
                 "0.05", "--output", str(out)]) == 2
    assert "--selection-fraction carves from the train split only" in capsys.readouterr().err
    assert not out.exists()  # not even OUTPUT/logs/prepare.log: the log file opens at its first record


@pytest.mark.slow
def test_prepare_console_is_quiet_and_the_full_log_is_kept(tmp_path):
    from tablegen_tf import logs

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = os.path.join(root, "tests", "fixtures", "text_pairs", "train.tsv")
    out = tmp_path / "prepared"
    done = subprocess.run(
        [sys.executable, "-m", "tablegen_cli.main", "prepare", "--format", "text-pairs", "--input", source,
         "--output", str(out)] + IN_PROCESS,
        capture_output=True, text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert done.returncode == 0, done.stderr
    lines = (done.stdout + done.stderr).splitlines()
    assert not [line for line in lines if logs.is_noise(line)], lines
    assert any(line.startswith("read 40, written 40, rejected 0") for line in lines), lines
    # Running counts ("read 40 rows, written 40") come once per 30 s or more, so their
    # number depends on the machine's speed; every other line is bounded as before.
    counts = [line for line in lines if re.fullmatch(r"read [\d,]+ rows?, written [\d,]+", line)]
    assert len(lines) - len(counts) <= 5, lines
    log = (out / "logs" / "prepare.log").read_text()
    assert "apache_beam" in log  # Beam's INFO lines went to the file, not the console


def test_evaluate_prints_strict_json_nothing_measured_is_null():
    import json

    from tablegen_cli.main import _nan_to_none

    text = json.dumps(_nan_to_none({"bleu": 1.5, "hallucinated_numbers_rate": float("nan"),
                                    "plan": {"f1": float("nan")}, "list": [float("nan"), 2]}))
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}")) == {
        "bleu": 1.5, "hallucinated_numbers_rate": None, "plan": {"f1": None}, "list": [None, 2]}


def test_output_files_go_into_new_directories(tmp_path):
    # `evaluate|generate --output runs/new/dev.txt` decodes for minutes first: a missing
    # directory must not turn that into a traceback at the end
    from tablegen_cli.main import _write_lines

    path = tmp_path / "new" / "deeper" / "dev.txt"
    _write_lines(str(path), ["a table's text", "two\nlines"])
    assert path.read_text(encoding="utf-8") == "a table's text\ntwo lines\n"


def test_a_failed_prepare_leaves_nothing_in_the_temp_directory(tmp_path):
    # A prepare that stopped with an error (here: no such input) under the default
    # DirectRunner left a beam-pipeline-temp* dir in /tmp.
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "tablegen_cli.main", "prepare", "--format", "e2e", "--input",
         str(tmp_path / "missing.csv"), "--output", str(tmp_path / "prepared")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TMPDIR": str(temp)})
    assert done.returncode == 2 and "input not found" in done.stderr, done.stderr
    assert list(temp.iterdir()) == []


def test_a_negative_step_budget_is_a_usage_error_before_any_loading(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["train", "--out", "no-such-run", "--max-steps", "-5"])
    assert exited.value.code == 2
    assert "--max-steps: must be >= 0, got -5" in capsys.readouterr().err

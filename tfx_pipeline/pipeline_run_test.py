"""`tablegen pipeline run` as a user meets it, on the tiny corpus and model of pipeline_e2e_test.

Through the CLI in a subprocess without a TTY: stage lines, a short console without known
noise, the run report; a run killed (SIGKILL) during the Trainer, then rerun, completes
with the earlier stages cached. In process: schema drift stops a span before training
(ExampleValidator/AnomaliesGate for a new field; the reader, in ExampleGen, for a file
without its text column or an empty file), with a message naming it, and nothing is pushed.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tfx_pipeline.pipeline_e2e_test import add_span, executions, tiny_config, tiny_overrides

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGE_LINE = re.compile(r"^\[(\d)/7\] (\w+) (…|done|cached|failed)")


@pytest.fixture
def workdir(tmp_path):
    """tmp_path, removed after the test (pipeline roots are large); TMPDIR points inside it
    so what a run leaks into the temp directory is seen (and cleaned) here."""
    (tmp_path / "tmp").mkdir()
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


def _write_config(workdir, **trainer_train):
    overrides = tiny_overrides(workdir)
    overrides["trainer"] = json.loads(json.dumps(overrides["trainer"]))
    overrides["trainer"]["config"]["train"].update(trainer_train)
    path = workdir / "tiny.yaml"
    path.write_text(yaml.safe_dump(overrides))
    return str(path)


def _command(config_path):
    # tfx_pipeline.cli's own entry point: `tablegen pipeline run` without the rest of the CLI.
    return [sys.executable, "-m", "tfx_pipeline.cli", "pipeline", "run", "--config", config_path]


def _env(workdir):
    return {**os.environ, "TMPDIR": str(workdir / "tmp"), "PYTHONUNBUFFERED": "1"}


def _run(workdir, config_path):
    result = subprocess.run(_command(config_path), cwd=REPO, env=_env(workdir), stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=1500)
    return result, (result.stdout + result.stderr).splitlines()


def _stages(lines):
    return [(int(m.group(1)), m.group(2), m.group(3)) for m in map(STAGE_LINE.match, lines) if m]


@pytest.mark.slow
def test_cli_run_is_quiet_shows_stages_and_writes_the_report(workdir):
    from tablegen_tf import logs

    add_span(str(workdir / "input"), 1)
    result, lines = _run(workdir, _write_config(workdir))
    assert result.returncode == 0, "\n".join(lines)
    ends = [(i, name, status) for i, name, status in _stages(lines) if status != "…"]
    assert ends == [(1, "ExampleGen", "done"), (2, "StatisticsGen", "done"), (3, "SchemaGen", "done"),
                    (4, "ExampleValidator", "done"), (5, "Trainer", "done"), (6, "Evaluator", "done"),
                    (7, "Pusher", "done")], "\n".join(lines)
    assert len(lines) <= 60, "\n".join(lines)
    noisy = [line for line in lines if logs.is_noise(line)]
    assert noisy == [], noisy
    assert any(line.startswith("Run ") and "model pushed" in line for line in lines), "\n".join(lines)
    assert any("tablegen serve --model-base-path" in line for line in lines)
    assert result.stderr == "", result.stderr  # nothing but real warnings would go there

    root = workdir / "root"
    (run_dir,) = (root / "runs").iterdir()
    report = json.loads((run_dir / "run_report.json").read_text())
    assert {"pipeline", "run_id", "seconds", "status", "verdict", "stages", "model", "next_commands",
            "log_file", "budget"} <= set(report)
    assert report["status"] == "pushed" and report["model"]["pushed"]
    figures = {s["name"]: s["figures"] for s in report["stages"]}
    assert figures["ExampleGen"]["examples"] == {"train": 11, "eval": 3}
    assert figures["ExampleValidator"]["anomalies"] == []
    assert figures["Trainer"]["steps"] == 6 and figures["Trainer"]["stopped_because"] == "max_steps"
    assert figures["Evaluator"]["blessed"] is True and "bleu" in figures["Evaluator"]["candidate"]
    assert os.path.isdir(os.path.join(report["model"]["path"], "variables"))
    assert (run_dir / "run_report.md").read_text().startswith("# tablegen pipeline run")
    log_text = (root / "logs" / "pipeline.log").read_text()
    assert "Component Trainer is running" in log_text  # the noise is kept, in the log file
    assert os.listdir(workdir / "tmp") == []  # Beam / TF temp dirs removed with the run


def _wait_for_line(process, pattern, timeout):
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(seen))


@pytest.mark.slow
def test_a_run_killed_during_training_reruns_with_earlier_stages_cached(workdir):
    add_span(str(workdir / "input"), 1)
    config_path = _write_config(workdir, max_steps=300)
    process = subprocess.Popen(_command(config_path), cwd=REPO, env=_env(workdir), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _wait_for_line(process, r"^\[5/7\] Trainer …", timeout=300)
        time.sleep(1.0)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the run and any worker it started
        process.communicate(timeout=60)
    killed = [(node, state) for node, state, _ in executions(tiny_config(workdir))]
    assert ("Trainer", "RUNNING") in killed, killed  # it died in the Trainer

    result, lines = _run(workdir, config_path)
    assert result.returncode == 0, "\n".join(lines)
    assert [(name, status) for _, name, status in _stages(lines) if status != "…"] == [
        ("ExampleGen", "cached"), ("StatisticsGen", "cached"), ("SchemaGen", "cached"),
        ("ExampleValidator", "cached"), ("Trainer", "done"), ("Evaluator", "done"), ("Pusher", "done")]
    assert len(os.listdir(workdir / "serving" / "tiny")) == 1


DRIFTS = {
    # an E2E attribute the schema does not know
    "new field": ("devset.csv", '"name[Zizzi], rating[5 stars]",Zizzi is rated 5 stars.\n', "append",
                  "split eval, feature 'record_field'"),
    # the CSV lost its text column
    "missing column": ("devset.csv", 'mr\n"name[Zizzi], food[Italian]"\n', "replace",
                       "CSV header must name columns 'mr' and 'ref'"),
    # an empty file (the reader stops it in ExampleGen, before statistics)
    "empty file": ("devset.csv", "", "replace", "devset.csv: CSV header must name columns 'mr' and 'ref', got []"),
}


@pytest.mark.slow
@pytest.mark.parametrize("drift", sorted(DRIFTS))
def test_schema_drift_in_a_new_span_stops_before_training(workdir, capfd, drift):
    from tfx_pipeline import runner

    config = tiny_config(workdir)
    add_span(config.input_base, 1)
    name, text, mode, message = DRIFTS[drift]
    with open(os.path.join(config.input_base, "span-1", name), "a" if mode == "append" else "w") as handle:
        handle.write(text)
    assert runner.run_and_report(config) == 2
    console = capfd.readouterr().out
    assert message in console, console
    assert "nothing pushed" in console
    ran = {node for node, _, _ in executions(config)}
    assert not {"Trainer", "AtomicPusher"} & ran, ran
    assert not os.path.exists(config.push_directory)

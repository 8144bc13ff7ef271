"""Stage lines, the run report and its console summary, without running a pipeline."""

import datetime
import io
import json
import os

import pytest

from tablegen_tf import progress
from tfx_pipeline import report, stages
from tfx_pipeline.pipeline_e2e_test import tiny_config

NODES = ["TableExampleGen", "StatisticsGen", "ImportSchemaGen", "ExampleValidator", "AnomaliesGate",
         "latest_blessed_model_resolver", "Trainer", "Evaluator", "Pusher"]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _run_nodes(tracker, clock, states, fail=None):
    for node in NODES:
        if node == fail:
            with pytest.raises(RuntimeError):
                with tracker.running(node):
                    clock.now += 2.0
                    raise RuntimeError("anomalies")
            return
        with tracker.running(node) as result:
            clock.now += 10.0
            result.update(execution_id=NODES.index(node) + 1, state=states.get(node, "COMPLETE"))


def test_stage_lines_follow_nodes_cached_done_and_failed():
    clock, stream = Clock(), io.StringIO()
    tracker = stages.StageTracker(stream, clock=clock, describe=lambda s: "3 anomalies" if s.name == "ExampleValidator" else "")
    tracker.plan(NODES)
    cached = {n: "CACHED" for n in NODES[:5]}
    _run_nodes(tracker, clock, cached, fail="Trainer")
    lines = stream.getvalue().splitlines()
    assert lines[:2] == ["[1/7] ExampleGen …", "[1/7] ExampleGen cached in 10s"]
    assert "[4/7] ExampleValidator cached in 20s (3 anomalies)" in lines  # two nodes, one stage
    assert not any("resolver" in line for line in lines)
    assert lines[-2:] == ["[5/7] Trainer …", "[5/7] Trainer failed in 2.0s"]
    assert [s.status for s in tracker.stages][4:] == ["failed", "not run", "not run"]


def test_code_running_in_a_stage_sees_its_label():
    tracker = stages.StageTracker(io.StringIO())
    tracker.plan(NODES)
    with tracker.running("Trainer"):
        assert progress.current_stage().label == "[5/7] Trainer"
    assert progress.current_stage() is None


def _finished_tracker(pushed=True, error_stage=None):
    clock = Clock()
    tracker = stages.StageTracker(io.StringIO(), clock=clock)
    tracker.plan(NODES)
    _run_nodes(tracker, clock, {}, fail=error_stage)
    figures = {
        "ExampleGen": {"examples": {"eval": 547, "train": 42061}, "rejected": {"eval": 0, "train": 2},
                       "dead_letter_dir": "/r/TableExampleGen/examples/1/dead_letter"},
        "ExampleValidator": {"anomalies": []},
        "Trainer": {"steps": 5000, "max_steps": 5000, "stopped_because": "max_steps", "tokens_per_second": 15700.0,
                    "tensorboard_logs": "/r/Trainer/model_run/7/logs"},
        "Evaluator": {"candidate": {"bleu": 66.1, "nist": 8.5, "rougeL": 68.2, "fact_precision": 0.98,
                                    "hallucination_rate": 0.01},
                      "baseline": {"bleu": 65.0}, "blessed": pushed,
                      "message": "BLEU 66.10 >= threshold 10.00, baseline 65.00"},
        "Pusher": {"pushed": pushed, "destination": "/s/tablegen-e2e/1795426740" if pushed else None,
                   "version": "1795426740" if pushed else None},
    }
    for stage in tracker.stages:
        if stage.status != "not run":
            stage.figures = figures.get(stage.name, {})
    tracker.finish()
    return tracker


def _report(tmp_path, tracker, error=None):
    config = tiny_config(tmp_path)
    paths = report.RunPaths.create(config.root, now=datetime.datetime(2026, 11, 23, 9, 0, 0))
    return report.build(config, tracker, paths, error)


def test_report_of_a_pushed_model(tmp_path):
    built = _report(tmp_path, _finished_tracker())
    assert built["status"] == "pushed" and built["run_id"] == "20261123-090000"
    assert built["verdict"] == "model pushed: BLEU 66.10 >= threshold 10.00, baseline 65.00"
    assert built["next_commands"][0].startswith("tablegen serve --model-base-path ")
    assert built["next_commands"][0].endswith("--model-name tiny")
    assert any(c.startswith("tensorboard --logdir /r/Trainer/model_run/7/logs") for c in built["next_commands"])
    lines = report.summary_lines(built)
    assert len(lines) <= 16
    text = "\n".join(lines)
    assert "eval 547, train 42,061 examples; 2 rejected (dead letters:" in text
    assert "5,000/5,000 steps, stopped by max_steps, 16k tok/s" in text
    assert "BLEU 66.10, NIST 8.50, ROUGE-L 68.20" in text and "baseline   BLEU 65.00" in text
    paths = report.write(built)
    assert json.loads(open(paths["json"]).read())["model"]["version"] == "1795426740"
    assert "| 5 | Trainer | done |" in open(paths["md"]).read()


def test_report_of_a_failed_run_names_the_stage_and_the_error(tmp_path):
    error = RuntimeError("2 data anomalies (ExampleValidator, /r):\n  split eval, feature 'record_field': x")
    built = _report(tmp_path, _finished_tracker(error_stage="AnomaliesGate"), error)
    assert built["status"] == "failed" and not built["model"]["pushed"]
    assert built["verdict"] == "run failed in ExampleValidator; nothing pushed"
    text = "\n".join(report.summary_lines(built))
    assert "error: 2 data anomalies" in text and "split eval, feature 'record_field'" in text
    assert not any(c.startswith("tablegen serve") for c in built["next_commands"])  # nothing to serve


def test_not_blessed_is_not_pushed_and_says_why(tmp_path):
    tracker = _finished_tracker(pushed=False)
    for stage in tracker.stages:
        if stage.name == "Evaluator":
            stage.figures["message"] = "BLEU 60.00 < baseline 65.00 - 0.00"
    built = _report(tmp_path, tracker)
    assert built["status"] == "not pushed"
    assert built["verdict"] == "model NOT pushed: BLEU 60.00 < baseline 65.00 - 0.00"


def test_a_fully_cached_rerun_says_nothing_new_was_trained(tmp_path):
    tracker = _finished_tracker()
    for stage in tracker.stages:
        stage.status = "cached"
    built = _report(tmp_path, tracker)
    assert built["verdict"] == ("every stage cached (same data, code and config); "
                                "version 1795426740 stays the pushed model")


def test_logs_rotate_and_runs_get_their_own_dir(tmp_path):
    root = str(tmp_path / "root")
    first = report.RunPaths.create(root, now=datetime.datetime(2026, 1, 1, 0, 0, 0))
    open(first.log_file, "w").write("run 1")
    second = report.RunPaths.create(root, now=datetime.datetime(2026, 1, 1, 0, 0, 1))
    assert first.log_file == second.log_file == os.path.join(root, "logs", "pipeline.log")
    assert open(second.log_file + ".1").read() == "run 1"
    assert os.path.isdir(second.run_dir) and first.run_dir != second.run_dir


def test_a_trainer_stopped_by_the_wall_time_cap_is_reported_as_such(tmp_path):
    tracker = _finished_tracker(pushed=False)
    for stage in tracker.stages:
        if stage.name == "Trainer":
            stage.figures.update(steps=3100, stopped_because="max_minutes")
        if stage.name == "Evaluator":
            stage.figures["message"] = "training hit the wall-time cap (max_minutes 20) at step 3100 of max_steps 5000"
    built = _report(tmp_path, tracker)
    text = "\n".join(report.summary_lines(built))
    assert "3,100/5,000 steps, stopped by max_minutes -- wall-time cap hit, not pushable" in text
    assert built["verdict"].startswith("model NOT pushed: training hit the wall-time cap")

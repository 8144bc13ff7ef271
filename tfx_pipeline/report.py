"""The run report: what each stage did, the verdict, where the model went, what to run next.

Written to ``ROOT/runs/<run id>/run_report.json`` and ``run_report.md``; the console
gets a short summary. Figures come from ML Metadata (the artifacts of this run's
executions, cached ones included) and the files our executors write beside them:
ExampleGen's counts (custom properties), ExampleValidator's anomalies, the Trainer's
``tablegen_run.json``, the Evaluator's ``metrics.json``, the Pusher's properties.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import json
import os
from typing import Any, Callable, Dict, List, Optional

from tablegen_tf.progress import format_duration, format_rate
from tfx_pipeline.config import PipelineConfig
from tfx_pipeline.stages import Stage, StageTracker

RUNS_DIR, LOGS_DIR, LOG_FILE = "runs", "logs", "pipeline.log"
REPORT_JSON, REPORT_MD = "run_report.json", "run_report.md"
KEEP_LOGS = 5  # pipeline.log and pipeline.log.1 .. .4
MAX_CONSOLE_ANOMALIES = 8
METRIC_NAMES = (("bleu", "BLEU"), ("nist", "NIST"), ("rougeL", "ROUGE-L"), ("fact_precision", "fact precision"),
                ("hallucination_rate", "hallucination rate"), ("slot_error_rate", "slot error rate"))


@dataclasses.dataclass(frozen=True)
class RunPaths:
    run_id: str
    run_dir: str
    log_file: str

    @classmethod
    def create(cls, root: str, now: Optional[datetime.datetime] = None) -> "RunPaths":
        """A new run dir; the previous logs rotate (pipeline.log -> pipeline.log.1 ...)."""
        run_id = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
        run_dir = os.path.join(root, RUNS_DIR, run_id)
        os.makedirs(run_dir, exist_ok=True)
        log_file = os.path.join(root, LOGS_DIR, LOG_FILE)
        _rotate(log_file, KEEP_LOGS)
        return cls(run_id, run_dir, log_file)


def _rotate(path: str, keep: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for index in range(keep - 1, 0, -1):
        older = f"{path}.{index - 1}" if index > 1 else path
        if os.path.exists(older):
            os.replace(older, f"{path}.{index}")


# ------------------------------------------------------------------ figures from ML Metadata


def _outputs(store, execution_id: int) -> Dict[str, List]:
    """Output key -> artifacts of one execution (a cached execution records its reused outputs)."""
    from ml_metadata.proto import metadata_store_pb2

    outputs: Dict[str, List[int]] = {}
    for event in store.get_events_by_execution_ids([execution_id]):
        if event.type in (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT):
            key = event.path.steps[0].key if event.path.steps else ""
            outputs.setdefault(key, []).append(event.artifact_id)
    artifacts = {a.id: a for a in store.get_artifacts_by_id([i for ids in outputs.values() for i in ids])}
    return {key: [artifacts[i] for i in ids if i in artifacts] for key, ids in outputs.items()}


def _custom(artifact) -> Dict[str, Any]:
    return {k: getattr(v, v.WhichOneof("value")) for k, v in artifact.custom_properties.items() if v.WhichOneof("value")}


def _read_json(path: str) -> Optional[Dict]:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _example_gen(outputs) -> Dict:
    examples = outputs.get("examples", [None])[0]
    if examples is None:
        return {}
    custom = _custom(examples)
    splits = sorted((k[len("examples_"):] for k in custom if k.startswith("examples_")), key=lambda s: (s != "train", s))
    return {"uri": examples.uri, "span": _custom_or_property(examples, "span"),
            "examples": {s: custom[f"examples_{s}"] for s in splits},
            "rejected": {s: custom.get(f"rejected_{s}", 0) for s in splits},
            "dead_letter_dir": custom.get("dead_letter_dir")}


def _custom_or_property(artifact, name: str):
    if name in artifact.properties:
        value = artifact.properties[name]
        return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None
    return _custom(artifact).get(name)


def _validator(outputs) -> Dict:
    from tfx.types import artifact_utils

    from tfx_pipeline.components import anomalies_report

    anomalies = outputs.get("anomalies", [None])[0]
    if anomalies is None:
        return {}
    splits = artifact_utils.decode_split_names(_custom_or_property(anomalies, "split_names") or "[]")
    return {"uri": anomalies.uri, "anomalies": anomalies_report(anomalies.uri, splits)}


def _trainer(outputs) -> Dict:
    model = outputs.get("model", [None])[0]
    if model is None:
        return {}
    run = _read_json(os.path.join(model.uri, "tablegen_run.json")) or {}
    logs = os.path.join(run["model_run_dir"], "logs") if run.get("model_run_dir") else None
    return {"model_uri": model.uri, "tensorboard_logs": logs, **run}


def _evaluator(outputs) -> Dict:
    evaluation = outputs.get("evaluation", [None])[0]
    if evaluation is None:
        return {}
    metrics = _read_json(os.path.join(evaluation.uri, "metrics.json")) or {}
    return {"uri": evaluation.uri, "candidate": metrics.get("candidate"), "baseline": metrics.get("baseline"),
            "baseline_model": metrics.get("baseline_model"), "blessed": metrics.get("blessed"),
            "message": metrics.get("message")}


def _pusher(outputs) -> Dict:
    pushed = outputs.get("pushed_model", [None])[0]
    if pushed is None:
        return {}
    custom = _custom(pushed)
    return {"pushed": bool(custom.get("pushed")), "destination": custom.get("pushed_destination"),
            "version": custom.get("pushed_version")}


FIGURES: Dict[str, Callable[[Dict], Dict]] = {
    "ExampleGen": _example_gen, "ExampleValidator": _validator, "Trainer": _trainer,
    "Evaluator": _evaluator, "Pusher": _pusher,
}


def stage_figures(store, stage: Stage) -> Dict:
    outputs: Dict[str, List] = {}
    for execution_id in stage.executions.values():
        for key, artifacts in _outputs(store, execution_id).items():
            outputs.setdefault(key, []).extend(artifacts)
    return FIGURES[stage.name](outputs) if stage.name in FIGURES else {}


def stage_detail(name: str, figures: Dict) -> str:
    """The short figures on a stage's end line."""
    if not figures:
        return ""
    if name == "ExampleGen":
        counts = ", ".join(f"{split} {n:,}" for split, n in figures["examples"].items())
        return f"{counts} examples; {sum(figures['rejected'].values()):,} rejected"
    if name == "ExampleValidator":
        return f"{len(figures['anomalies'])} anomalies" if figures["anomalies"] else "no anomalies"
    if name == "Trainer" and "steps" in figures:
        return (f"{figures['steps']:,} steps, stopped by {figures.get('stopped_because')}, "
                f"{format_rate(figures.get('tokens_per_second') or 0)} tok/s")
    if name == "Evaluator" and figures.get("candidate"):
        verdict = "blessed" if figures.get("blessed") else "NOT blessed"
        return f"BLEU {figures['candidate']['bleu']:.2f}, {verdict}"
    if name == "Pusher":
        return f"version {figures['version']}" if figures.get("pushed") else "not pushed"
    return ""


def describer(config: PipelineConfig) -> Callable[[Stage], str]:
    """For StageTracker: reads a finished stage's figures (kept on the stage) and its end-line detail."""
    from tfx_pipeline.runner import metadata_store

    def describe(stage: Stage) -> str:
        try:
            stage.figures = stage_figures(metadata_store(config), stage)
        except Exception:  # a report must never fail the run it reports
            import logging

            logging.getLogger(__name__).debug("no figures for %s", stage.name, exc_info=True)
            return ""
        return stage_detail(stage.name, stage.figures)

    return describe


# ------------------------------------------------------------------ the report


def build(config: PipelineConfig, tracker: StageTracker, paths: RunPaths, error: Optional[BaseException] = None,
          store=None) -> Dict:
    stages = []
    for stage in tracker.stages:
        figures = stage.figures
        if not figures and stage.executions and store is not None:
            figures = stage_figures(store, stage)
        stages.append({"index": stage.index, "name": stage.name, "status": stage.status,
                       "seconds": round(stage.seconds, 1), "figures": figures or {}})
    by_name = {s["name"]: s["figures"] for s in stages}
    pusher = by_name.get("Pusher", {})
    model = {"pushed": bool(pusher.get("pushed")), "path": pusher.get("destination"),
             "version": pusher.get("version"), "model_name": config.model_name,
             "serving_base": config.serving_base}
    report = {
        "pipeline": config.name, "root": config.root, "run_id": paths.run_id,
        "started": tracker.started_at.isoformat(timespec="seconds"), "seconds": round(tracker.seconds, 1),
        "status": "failed" if error else ("pushed" if model["pushed"] else "not pushed"),
        "error": _error_text(error), "stages": stages, "model": model,
        "budget": {k: (config.trainer.get("config") or {}).get("train", {}).get(k)
                   for k in ("max_steps", "max_minutes", "seed")},
        "log_file": paths.log_file, "run_dir": paths.run_dir,
    }
    report["verdict"] = verdict(report)
    report["next_commands"] = next_commands(config, report)
    return report


def _error_text(error: Optional[BaseException]) -> Optional[str]:
    if error is None:
        return None
    text = str(error).strip()
    return text if text else type(error).__name__


def verdict(report: Dict) -> str:
    """One sentence: pushed or not, and why."""
    if report["error"]:
        failed = next((s["name"] for s in report["stages"] if s["status"] == "failed"), "the pipeline")
        return f"run failed in {failed}; nothing pushed"
    figures = {s["name"]: s["figures"] for s in report["stages"]}
    message = (figures.get("Evaluator") or {}).get("message") or ""
    if report["stages"] and all(s["status"] == "cached" for s in report["stages"]):
        # A rerun over unchanged data, code and config: nothing was trained or pushed now.
        version = report["model"].get("version")
        kept = f"version {version} stays the pushed model" if report["model"]["pushed"] else "nothing pushed"
        return f"every stage cached (same data, code and config); {kept}"
    if report["model"]["pushed"]:
        return f"model pushed: {message}"
    return f"model NOT pushed: {message}" if message else "model NOT pushed"


def next_commands(config: PipelineConfig, report: Dict) -> List[str]:
    commands = []
    if report["model"]["pushed"] or _has_versions(config.push_directory):
        commands.append(f"tablegen serve --model-base-path {_show(config.serving_base)} --model-name {config.model_name}")
        eval_split = next((s for s in config.splits if s.name == config.evaluator.get("split", "eval")), None)
        eval_input = _input_file(config.input_base, eval_split.pattern) if eval_split else None
        if eval_input:
            commands.append(f"tablegen generate --server localhost:8500 --model-name {config.model_name} "
                            f"--format {eval_split.format} --input {_show(eval_input)} "
                            f"--output {config.model_name}-{eval_split.name}.txt")
    logs = (next((s["figures"] for s in report["stages"] if s["name"] == "Trainer"), {}) or {}).get("tensorboard_logs")
    if logs:
        commands.append(f"tensorboard --logdir {_show(logs)}")
    commands.append(f"tablegen tensorboard --pipeline-root {_show(config.root)}")
    return commands


def _has_versions(directory: str) -> bool:
    return os.path.isdir(directory) and any(n.isdigit() for n in os.listdir(directory))


def _input_file(input_base: str, pattern: str) -> Optional[str]:
    matches = sorted(glob.glob(os.path.join(input_base, pattern.replace("{SPAN}", "*").replace("{VERSION}", "*"))))
    return matches[-1] if matches else None


def _show(path: Optional[str]) -> str:
    """A path relative to the working directory when it is below it (shorter lines)."""
    if not path:
        return ""
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else path


# ------------------------------------------------------------------ rendering


def metrics_text(metrics: Optional[Dict]) -> str:
    if not metrics:
        return "none"
    parts = []
    for key, name in METRIC_NAMES:
        if metrics.get(key) is not None:
            value = metrics[key]
            parts.append(f"{name} {value:.2f}" if key in ("bleu", "nist", "rougeL") else f"{name} {value:.3f}")
    return ", ".join(parts)


def summary_lines(report: Dict) -> List[str]:
    """The console summary (about 12 lines)."""
    figures = {s["name"]: s["figures"] for s in report["stages"]}
    lines = [f"Run {report['run_id']} finished in {format_duration(report['seconds'])}: {report['verdict']}"]
    if report["error"]:
        error_lines = report["error"].splitlines()
        lines += [f"  error: {error_lines[0]}"] + [f"    {line.strip()}" for line in error_lines[1:MAX_CONSOLE_ANOMALIES + 1]]
        if len(error_lines) > MAX_CONSOLE_ANOMALIES + 1:
            lines.append(f"    ... {len(error_lines) - MAX_CONSOLE_ANOMALIES - 1} more lines in the report")
    data = figures.get("ExampleGen")
    if data:
        lines.append(f"  data       {stage_detail('ExampleGen', data)}"
                     + (f" (dead letters: {_show(data['dead_letter_dir'])})" if sum(data["rejected"].values()) else ""))
    trainer = figures.get("Trainer")
    if trainer and "steps" in trainer:
        cap = " -- wall-time cap hit, not pushable" if trainer.get("stopped_because") == "max_minutes" else ""
        lines.append(f"  trainer    {trainer['steps']:,}/{trainer.get('max_steps') or 0:,} steps, stopped by "
                     f"{trainer.get('stopped_because')}{cap}, {format_rate(trainer.get('tokens_per_second') or 0)} tok/s"
                     + (f", warm start from {_show(trainer['warm_started_from'])}" if trainer.get("warm_started_from") else ""))
    evaluation = figures.get("Evaluator")
    if evaluation and evaluation.get("candidate"):
        lines.append(f"  evaluator  {metrics_text(evaluation['candidate'])}")
        lines.append(f"  baseline   {metrics_text(evaluation.get('baseline'))}")
    if report["model"]["pushed"]:
        lines.append(f"  pushed     {_show(report['model']['path'])} (model {report['model']['model_name']}, "
                     f"version {report['model']['version']})")
    lines.append(f"Report: {_show(os.path.join(report['run_dir'], REPORT_MD))} (.json); "
                 f"log: {_show(report['log_file'])}")
    if report["next_commands"]:
        lines.append("Next:")
        lines += [f"  {command}" for command in report["next_commands"]]
    return lines


def markdown(report: Dict) -> str:
    rows = [f"| {s['index']} | {s['name']} | {s['status']} | {format_duration(s['seconds'])} | "
            f"{stage_detail(s['name'], s['figures'])} |" for s in report["stages"]]
    figures = {s["name"]: s["figures"] for s in report["stages"]}
    evaluation = figures.get("Evaluator") or {}
    anomalies = (figures.get("ExampleValidator") or {}).get("anomalies") or []
    parts = [
        f"# tablegen pipeline run {report['run_id']}: {report['status']}",
        "",
        f"{report['verdict']}",
        "",
        f"Pipeline `{report['pipeline']}`, root `{report['root']}`, started {report['started']}, "
        f"{format_duration(report['seconds'])}. Budget: {report['budget']}.",
        "",
        "| # | stage | status | wall time | figures |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
        f"* candidate: {metrics_text(evaluation.get('candidate'))}",
        f"* baseline (last blessed model): {metrics_text(evaluation.get('baseline'))}",
        f"* anomalies: {'none' if not anomalies else ''}",
        *[f"  * {line}" for line in anomalies],
        f"* pushed: `{report['model']['path']}` (version {report['model']['version']})" if report["model"]["pushed"]
        else "* pushed: nothing",
    ]
    if report["error"]:
        parts += ["", "## Error", "", "```", report["error"], "```"]
    parts += ["", "## Next", "", "```", *report["next_commands"], "```", "", f"Log: `{report['log_file']}`", ""]
    return "\n".join(parts)


def write(report: Dict) -> Dict[str, str]:
    paths = {"json": os.path.join(report["run_dir"], REPORT_JSON), "md": os.path.join(report["run_dir"], REPORT_MD)}
    with open(paths["json"], "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, sort_keys=True, default=str)
    with open(paths["md"], "w", encoding="utf-8") as handle:
        handle.write(markdown(report))
    return paths

"""Pipeline configuration: configs/default.yaml <- the user's YAML <- --set overrides.

Plain dataclasses and YAML only (no TFX import), so the CLI and tests can read a
configuration cheaply.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

import yaml

from beam_jobs.runner_names import with_our_runners
from tablegen_tf.config import deep_merge, parse_overrides  # noqa: F401  (re-exported: one YAML merge rule)

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs", "default.yaml")
METADATA_FILE = "metadata.sqlite"


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    """One output split: files matching `pattern` (relative to input_base) read by `format`."""

    name: str
    format: str
    pattern: str
    reader_split: str = ""  # split name the reader understands (train / valid / test)
    merge_references: Optional[bool] = None  # default: every split but train
    # E2E-style training tables keep the slots their text realises (tablegen prepare --clean-slots)
    clean_slots: bool = False

    @property
    def reader_split_name(self) -> str:
        return self.reader_split or ("train" if self.name == "train" else "valid")

    @property
    def merges(self) -> bool:
        return self.merge_references if self.merge_references is not None else self.reader_split_name != "train"


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    name: str
    root: str
    input_base: str
    splits: Sequence[SplitSpec]
    trainer: Dict[str, Any]  # custom_config of the Trainer (see trainer_utils.run_fn)
    evaluator: Dict[str, Any]
    serving_base: str  # Pusher base_directory = serving_base/model_name
    model_name: str
    beam_pipeline_args: List[str] = dataclasses.field(default_factory=list)
    enable_cache: bool = True
    lowercase: bool = False
    schema_file: Optional[str] = None
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict)  # the merged YAML

    @property
    def metadata_path(self) -> str:
        return os.path.join(self.root, METADATA_FILE)

    @property
    def push_directory(self) -> str:
        return os.path.join(self.serving_base, self.model_name)


def load_raw(path: Optional[str] = None, overrides: Optional[Mapping] = None) -> Dict[str, Any]:
    with open(DEFAULT_CONFIG, encoding="utf-8") as handle:
        raw = yaml.safe_load(handle) or {}
    if path:
        with open(path, encoding="utf-8") as handle:
            raw = deep_merge(raw, yaml.safe_load(handle) or {})
    return deep_merge(raw, overrides or {})


def _abs(path: Optional[str]) -> Optional[str]:
    # Remote paths (gs://, s3://) pass unchanged; local ones become absolute because
    # TFX records them in ML Metadata and executors may run from another directory.
    if not path or "://" in path:
        return path
    return os.path.abspath(os.path.expanduser(path))


def from_raw(raw: Dict[str, Any]) -> PipelineConfig:
    pipeline, data, pusher = raw["pipeline"], raw["data"], raw["pusher"]
    trainer = copy.deepcopy(raw["trainer"])
    if trainer.get("corpus") and trainer["corpus"].endswith((".yaml", ".yml")):
        trainer["corpus"] = _abs(trainer["corpus"])
    return PipelineConfig(
        name=pipeline["name"],
        root=_abs(pipeline["root"]),
        input_base=_abs(data["input_base"]),
        splits=tuple(SplitSpec(**split) for split in data["splits"]),
        trainer=trainer,
        evaluator=dict(raw.get("evaluator") or {}),
        serving_base=_abs(pusher["base_directory"]),
        model_name=pusher["model_name"],
        beam_pipeline_args=with_our_runners(pipeline.get("beam_pipeline_args") or []),
        enable_cache=bool(pipeline.get("enable_cache", True)),
        lowercase=bool(data.get("lowercase", False)),
        schema_file=_abs(data.get("schema_file")),
        raw=raw,
    )


def load(path: Optional[str] = None, overrides: Optional[Mapping] = None) -> PipelineConfig:
    return from_raw(load_raw(path, overrides))


DEFAULT_KUBEFLOW_IMAGE = "gcr.io/my-project/tablegen:latest"


def kubeflow_image(config: PipelineConfig) -> str:
    """The container image of every Kubeflow V2 step (and of the Vertex training pools)."""
    return (config.raw.get("kubeflow") or {}).get("image") or DEFAULT_KUBEFLOW_IMAGE


def vertex_worker_pools(config: PipelineConfig) -> Optional[List[Dict[str, Any]]]:
    """Vertex AI CustomJobSpec ``worker_pool_specs`` of ``kubeflow.vertex_training`` (None when
    the section is null): pool 0 the chief (one replica), pool 1 the workers if any."""
    section = (config.raw.get("kubeflow") or {}).get("vertex_training")
    if not section:
        return None
    for key in ("project", "region", "chief"):
        if not section.get(key):
            raise ValueError(f"kubeflow.vertex_training.{key} is required (or set vertex_training: null)")
    image = kubeflow_image(config)
    pools = [_worker_pool(section["chief"], 1, image, "chief")]
    workers = section.get("workers") or {}
    count = int(workers.get("replica_count", 0))
    if count < 0:
        raise ValueError(f"kubeflow.vertex_training.workers.replica_count must be >= 0, got {count}")
    if count:
        pools.append(_worker_pool(workers, count, image, "workers"))
    return pools


def _worker_pool(spec: Mapping[str, Any], replicas: int, image: str, name: str) -> Dict[str, Any]:
    if not spec.get("machine_type"):
        raise ValueError(f"kubeflow.vertex_training.{name}.machine_type is required")
    machine = {"machine_type": spec["machine_type"]}
    if spec.get("accelerator_type"):
        machine.update(accelerator_type=spec["accelerator_type"],
                       accelerator_count=int(spec.get("accelerator_count", 1)))
    # TFX's Vertex client sets container_spec.command (its executor entry point) itself.
    return {"machine_spec": machine, "replica_count": replicas, "container_spec": {"image_uri": image}}


def for_kubeflow(config: PipelineConfig) -> PipelineConfig:
    """The same pipeline with the cloud paths of the `kubeflow:` section."""
    kfp = config.raw.get("kubeflow") or {}
    return dataclasses.replace(
        config,
        root=kfp.get("pipeline_root", config.root),
        input_base=kfp.get("input_base", config.input_base),
        serving_base=kfp.get("base_directory", config.serving_base),
        beam_pipeline_args=with_our_runners(kfp.get("beam_pipeline_args", config.beam_pipeline_args)),
        schema_file=kfp.get("schema_file") or config.schema_file,
    )


def airflow_dag_args(config: PipelineConfig) -> Dict[str, Any]:
    """Keyword arguments of Airflow's ``DAG`` from the ``airflow:`` section (airflow_dag.py).

    ``schedule`` is Airflow >= 2.4's name (``schedule_interval`` before); a timezone-less
    start date is read as UTC, as Airflow does.
    """
    import datetime

    section = config.raw.get("airflow") or {}
    start = datetime.datetime.fromisoformat(str(section.get("start_date", "2024-01-01")))
    if start.tzinfo is None:
        start = start.replace(tzinfo=datetime.timezone.utc)
    return {
        "schedule": section.get("schedule"),
        "start_date": start,
        "catchup": bool(section.get("catchup", False)),
        "max_active_runs": int(section.get("max_active_runs", 1)),
    }

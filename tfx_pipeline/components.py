"""Custom TFX pieces: our ExampleGen executor, the anomalies gate, the baseline resolver.

* ``TableExampleGenExecutor``: a FileBasedExampleGen executor that runs the
  project's corpus readers (``tablegen_tf.readers``) and example builder
  (``tablegen_tf.readers.build``) on the files each split pattern matches, so TFX sees
  exactly the records ``tablegen prepare`` writes. Rejected rows go to
  ``<examples uri>/dead_letter/<split>.jsonl`` (beside the ``Split-*`` dirs) and
  are counted in the artifact's custom properties ``rejected_<split>``.
* ``AnomaliesGate``: ExampleValidator in TFX 1.21 only records anomalies; this
  component stops the run with a readable summary when there are any.
* ``LatestBlessedModelBeforeExamplesStrategy``: baseline / warm-start resolver.
* ``AtomicPusherExecutor``: TFX's Pusher, but a version directory appears complete or not at all.
"""

import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import apache_beam as beam
from google.protobuf import json_format, struct_pb2
from tfx import types
from tfx import v1 as tfx
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2, pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

from tablegen_tf.readers import get_reader
from tablegen_tf.readers.base import InputError
from beam_jobs.prepare import BuildExamples, CleanSlots, MergeReferences, ReadUnit
from tfx_pipeline.config import SplitSpec

os.environ.pop("TF_USE_LEGACY_KERAS", None)  # set by `import tfx`; see runner.py

DEAD_LETTER_DIR = "dead_letter"
_DEAD_LETTER_KEY = "_tablegen_dead_letter_dir"  # exec property added by our Do()


# ------------------------------------------------------------------ ExampleGen


def example_gen_custom_config(splits: Sequence[SplitSpec], lowercase: bool,
                              code_version: str = "") -> example_gen_pb2.CustomConfig:
    """Per-split reader settings, carried as a Struct in ExampleGen's CustomConfig.

    `code_version` (a hash of the readers' sources) only keys the cache.
    """
    struct = struct_pb2.Struct()
    struct.update({
        "code_version": code_version,
        "lowercase": lowercase,
        "splits": {
            s.name: {"format": s.format, "reader_split": s.reader_split_name, "merge": s.merges,
                     "clean_slots": s.clean_slots} for s in splits
        },
    })
    config = example_gen_pb2.CustomConfig()
    config.custom_config.Pack(struct)
    return config


def read_custom_config(exec_properties: Dict[str, Any]) -> Dict[str, Any]:
    raw = exec_properties.get("custom_config")
    config = example_gen_pb2.CustomConfig()
    if isinstance(raw, str):
        json_format.Parse(raw, config)
    elif raw is not None:
        config.CopyFrom(raw)
    struct = struct_pb2.Struct()
    if not config.custom_config.Unpack(struct):
        raise ValueError("TableExampleGen needs custom_config from example_gen_custom_config()")
    return json_format.MessageToDict(struct)


def _split_name(exec_properties: Dict[str, Any], split_pattern: str) -> str:
    # The PTransform only receives the (span-resolved) pattern: find its split.
    input_config = example_gen_pb2.Input()
    json_format.Parse(exec_properties["input_config"], input_config)
    for split in input_config.splits:
        if split.pattern == split_pattern:
            return split.name
    raise ValueError(f"pattern {split_pattern!r} is not one of the input_config splits")


def input_units(input_base: str, pattern: str, format_name: str, reader_split: str) -> List[str]:
    """Reader units (files) of the files matching pattern; several matches may share a unit."""
    files = sorted(fileio.glob(os.path.join(input_base, pattern)))
    if not files:
        raise InputError(f"no input file matches {os.path.join(input_base, pattern)}")
    reader, units = get_reader(format_name), []
    for path in files:
        for unit in reader.input_units(path, reader_split):
            if unit not in units:
                units.append(unit)
    return units


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(bytes)
def _TablesToExamples(pipeline: beam.Pipeline, exec_properties: Dict[str, Any], split_pattern: str):
    """Raw corpus files of one split -> serialized tf.train.Example; rejections -> JSONL."""
    config = read_custom_config(exec_properties)
    name = _split_name(exec_properties, split_pattern)
    split = config["splits"][name]
    units = input_units(exec_properties["input_base"], split_pattern, split["format"], split["reader_split"])
    parsed = (
        pipeline
        | "Units" >> beam.Create(units)
        | "Read" >> beam.ParDo(ReadUnit(split["format"], split["reader_split"])).with_outputs("rejected", main="tables")
    )
    tables = parsed.tables
    if split["merge"]:
        tables = tables | "MergeByMR" >> MergeReferences()
    else:
        tables = tables | "Spread" >> beam.Reshuffle()
    if split.get("clean_slots"):
        tables = tables | "CleanSlots" >> beam.ParDo(CleanSlots())
    built = (
        tables
        | "Batch" >> beam.BatchElements(min_batch_size=16, max_batch_size=256)
        | "Build" >> beam.ParDo(BuildExamples(bool(config.get("lowercase")),
                                              readable_references=bool(split["merge"]))).with_outputs(
            "rejected", "summaries", main="examples"
        )
    )
    dead_letter = os.path.join(exec_properties[_DEAD_LETTER_KEY], f"{name}.jsonl")
    _ = (
        (parsed.rejected, built.rejected)
        | "AllRejected" >> beam.Flatten()
        | "RejectedJson" >> beam.Map(lambda r: r.to_json())
        | "WriteDeadLetter" >> beam.io.WriteToText(dead_letter, shard_name_template="")
    )
    _ = (
        built.examples
        | "Count" >> beam.combiners.Count.Globally()
        | "WriteCount" >> beam.io.WriteToText(dead_letter[: -len(".jsonl")] + ".count", shard_name_template="")
    )
    return built.examples


class TableExampleGenExecutor(BaseExampleGenExecutor):
    """FileBasedExampleGen executor running the tablegen readers and example builder."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        return _TablesToExamples

    def Do(self, input_dict, output_dict, exec_properties):
        examples = artifact_utils.get_single_instance(output_dict["examples"])
        dead_letter_dir = os.path.join(examples.uri, DEAD_LETTER_DIR)
        super().Do(input_dict, output_dict, {**exec_properties, _DEAD_LETTER_KEY: dead_letter_dir})
        record_counts(examples, dead_letter_dir, read_custom_config(exec_properties)["splits"])


def record_counts(examples: types.Artifact, dead_letter_dir: str, splits: Dict[str, Any]) -> None:
    """Counts on the artifact (visible in MLMD); an empty split fails here, readably."""
    examples.set_string_custom_property("dead_letter_dir", dead_letter_dir)
    for name in splits:
        with fileio.open(os.path.join(dead_letter_dir, f"{name}.count")) as handle:
            written = int(handle.read().strip() or 0)
        with fileio.open(os.path.join(dead_letter_dir, f"{name}.jsonl")) as handle:
            rejected = sum(1 for line in handle if line.strip())
        examples.set_int_custom_property(f"examples_{name}", written)
        examples.set_int_custom_property(f"rejected_{name}", rejected)
        if written == 0:
            raise InputError(
                f"split {name}: no valid example ({rejected} rejected); see {dead_letter_dir}/{name}.jsonl"
            )


def table_example_gen(input_base: str, splits: Sequence[SplitSpec], lowercase: bool = False, code_version: str = ""):
    """FileBasedExampleGen over our readers; output splits = input splits (one per SplitSpec)."""
    return FileBasedExampleGen(
        input_base=input_base,
        input_config=tfx.proto.Input(
            splits=[tfx.proto.Input.Split(name=s.name, pattern=s.pattern) for s in splits]
        ),
        custom_config=example_gen_custom_config(splits, lowercase, code_version),
        custom_executor_spec=executor_spec.BeamExecutorSpec(TableExampleGenExecutor),
    ).with_id("TableExampleGen")


# ------------------------------------------------------------------ anomalies gate


def anomalies_report(anomalies_uri: str, split_names: Sequence[str]) -> List[str]:
    """One readable line per anomaly: split, feature, short description, description."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    lines = []
    for split in split_names:
        path = os.path.join(anomalies_uri, f"Split-{split}", "SchemaDiff.pb")
        if not fileio.exists(path):
            continue
        anomalies = anomalies_pb2.Anomalies()
        with fileio.open(path, "rb") as handle:
            anomalies.ParseFromString(handle.read())
        for feature, info in sorted(anomalies.anomaly_info.items()):
            lines.append(f"split {split}, feature {feature!r}: {info.short_description} -- {info.description}")
        if anomalies.HasField("dataset_anomaly_info"):
            info = anomalies.dataset_anomaly_info
            lines.append(f"split {split}, dataset: {info.short_description} -- {info.description}")
    return lines


class DataAnomaliesError(RuntimeError):
    """ExampleValidator found anomalies: the run stops before training."""


def raise_on_anomalies(anomalies_uri: str, split_names: Sequence[str]) -> None:
    lines = anomalies_report(anomalies_uri, split_names)
    if lines:
        raise DataAnomaliesError(
            f"{len(lines)} data anomalies (ExampleValidator, {anomalies_uri}):\n  " + "\n  ".join(lines)
            + "\nFix the input (see the dead letters beside the examples), or accept the change "
            "by updating the schema (data.schema_file)."
        )


@tfx.dsl.components.component
def AnomaliesGate(anomalies: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.ExampleAnomalies]):
    """Fails the run, with a readable report, if ExampleValidator found anomalies."""
    raise_on_anomalies(anomalies.uri, artifact_utils.decode_split_names(anomalies.split_names))


# ------------------------------------------------------------------ resolver


class LatestBlessedModelBeforeExamplesStrategy(tfx.dsl.experimental.ResolverStrategy):
    """The latest blessed Model created before the current Examples artifact.

    Used as the Trainer's warm start and the Evaluator's baseline. Why "before the
    examples": a model trained on the data now in use is never its own baseline or
    base, so a rerun with unchanged data resolves exactly as the previous run did
    and every component is cached; a new span (a newer Examples artifact) resolves
    the latest blessed model and retraining warm-starts from it. TFX's own
    LatestBlessedModelStrategy would resolve the previous run's model on a plain
    rerun and retrain/re-evaluate needlessly. Kubeflow V2 compiles only the built-in
    strategies: `create_pipeline(..., target="kubeflow-v2")` uses that one.
    """

    def resolve_artifacts(self, store, input_dict: Dict[str, List[types.Artifact]]) -> Optional[Dict[str, List[types.Artifact]]]:
        examples = input_dict.get("examples") or []
        newest_examples = max((a.id for a in examples), default=None)
        blessed = {
            b.get_int_custom_property("current_model_id"): b
            for b in input_dict.get("model_blessing", [])
            if b.get_int_custom_property("blessed") == 1
        }
        models = [
            m for m in input_dict.get("model", [])
            if m.id in blessed and (newest_examples is None or m.id < newest_examples)
        ]
        latest = max(models, key=lambda m: m.id, default=None)
        return {
            "examples": examples,
            "model": [latest] if latest else [],
            "model_blessing": [blessed[latest.id]] if latest else [],
        }


# ------------------------------------------------------------------ pusher


def next_version(base_directory: str, now: Callable[[], float] = time.time) -> str:
    """TFX's version (unix seconds), made strictly greater than every existing version."""
    existing = [int(n) for n in fileio.listdir(base_directory) if n.isdigit()] if fileio.exists(base_directory) else []
    return str(max([int(now())] + [v + 1 for v in existing]))


def push_atomically(model_path: str, base_directory: str, now: Callable[[], float] = time.time) -> str:
    """Copies a SavedModel to BASE/.tmp-VERSION, then renames it to BASE/VERSION; returns VERSION.

    TFX 1.21's Pusher copies straight into BASE/VERSION (saved_model.pb last), so a server
    listing BASE sees the version directory while its variables are still being copied, and
    a push killed halfway leaves a broken version behind. A rename within one filesystem is
    atomic (on GCS it is a copy: mount the bucket or accept TFX's behaviour there).
    """
    fileio.makedirs(base_directory)
    version = next_version(base_directory, now)
    staging = os.path.join(base_directory, f".tmp-{version}")  # not a number: servers ignore it
    if fileio.exists(staging):
        fileio.rmtree(staging)
    try:
        io_utils.copy_dir(model_path, staging)
        fileio.rename(staging, os.path.join(base_directory, version))
    except BaseException:
        if fileio.exists(staging):
            fileio.rmtree(staging)
        raise
    return version


class AtomicPusherExecutor(pusher_executor.Executor):
    """TFX's Pusher executor with `push_atomically` for filesystem destinations."""

    def Do(self, input_dict, output_dict, exec_properties):
        destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.PUSH_DESTINATION_KEY], destination)
        if destination.WhichOneof("destination") != "filesystem":
            return super().Do(input_dict, output_dict, exec_properties)
        self._log_startup(input_dict, output_dict, exec_properties)
        model_push = artifact_utils.get_single_instance(output_dict[standard_component_specs.PUSHED_MODEL_KEY])
        if not self.CheckBlessing(input_dict):
            self._MarkNotPushed(model_push)
            return None
        model_path = self.GetModelPath(input_dict)
        base_directory = destination.filesystem.base_directory
        version = push_atomically(model_path, base_directory)
        io_utils.copy_dir(model_path, model_push.uri)  # the archive copy TFX's Pusher keeps
        self._MarkPushed(model_push, pushed_destination=os.path.join(base_directory, version),
                         pushed_version=version)
        return None


class AtomicPusher(tfx.components.Pusher):
    """TFX's Pusher with AtomicPusherExecutor (the pipeline gives it the id "Pusher")."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(AtomicPusherExecutor)

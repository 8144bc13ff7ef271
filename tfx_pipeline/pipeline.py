"""The tablegen TFX pipeline, built by one function without side effects (no runner).

    TableExampleGen -> StatisticsGen -> SchemaGen (or ImportSchemaGen) -> ExampleValidator
      -> AnomaliesGate -> Trainer (warm start: latest blessed model)
      -> BleuEvaluator (baseline: latest blessed model) -> Pusher (BASE/MODEL_NAME/VERSION)

Caching and code: TFX keys a component's cache on its inputs and parameters, not on
the Python code its executor runs (our readers, model, metrics). Each custom step
therefore gets a ``code_version`` parameter, a hash of the sources it runs, so
changing a reader retrains from new examples, changing the model retrains, and
editing a test or the CLI changes nothing. (TFX's own ``module_file`` packaging
would hash every .py beside trainer_utils.py, tests included, and none of
tablegen_tf, hence ``run_fn`` by module path plus this hash.)
"""

from __future__ import annotations

import copy
import glob
import hashlib
import os
from typing import Dict, List, Optional, Sequence

from tfx import v1 as tfx

from tfx_pipeline import components, evaluator
from tfx_pipeline.config import PipelineConfig, vertex_worker_pools

os.environ.pop("TF_USE_LEGACY_KERAS", None)  # set by `import tfx`; see runner.py

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_FN = "tfx_pipeline.trainer_utils.run_fn"
TARGETS = ("local", "kubeflow-v2")
# Sources that change what is printed, not what is computed: no cache invalidation.
UNKEYED = ("testing.py", "cli.py", "progress.py", "logs.py")
RESOLVER_ID = "latest_blessed_model_resolver"
# Sources whose changes must invalidate each custom step's cache (relative to REPO_ROOT).
CODE = {
    "examples": ("beam_jobs/**/*.py", "tablegen_tf/tokenizer.py", "tablegen_tf/schema.py",
                 "tablegen_tf/readers/*.py", "tablegen_tf/metrics/slot_metrics.py", "tfx_pipeline/components.py"),
    "trainer": ("tfx_pipeline/trainer_utils.py", "tablegen_tf/**/*.py", "tablegen_tf/configs/*.yaml",
                "beam_jobs/summaries.py"),
    "evaluator": ("tfx_pipeline/evaluator.py", "tablegen_tf/metrics/*.py", "tablegen_tf/inference.py",
                  "tablegen_tf/tokenizer.py"),
}


def code_version(patterns: Sequence[str], root: str = REPO_ROOT) -> str:
    """sha256 (16 hex digits) of the non-test sources matching `patterns` under `root`."""
    digest = hashlib.sha256()
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(root, pattern), recursive=True)):
            name = os.path.basename(path)
            if name.endswith("_test.py") or name in UNKEYED:
                continue
            digest.update(os.path.relpath(path, root).encode("utf-8"))
            with open(path, "rb") as handle:
                digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()[:16]


def _schema_gen(config: PipelineConfig, statistics):
    if config.schema_file:
        return tfx.components.ImportSchemaGen(schema_file=config.schema_file)
    # Inferred from every split: train-only inference would flag the multi-reference
    # eval examples (references: max 1 in train) on every run.
    return tfx.components.SchemaGen(statistics=statistics, infer_feature_shape=False)


def _resolver(example_gen, builtin: bool):
    if builtin:  # Kubeflow V2 compiles only TFX's built-in strategies
        return tfx.dsl.Resolver(
            strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
            model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
            model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
        ).with_id(RESOLVER_ID)
    return tfx.dsl.Resolver(
        strategy_class=components.LatestBlessedModelBeforeExamplesStrategy,
        examples=example_gen.outputs["examples"],
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id(RESOLVER_ID)


def _trainer(config: PipelineConfig, examples, schema, base_model, target: str):
    train_budget = int((config.trainer.get("config") or {}).get("train", {}).get("max_steps") or 0)
    custom_config = {**config.trainer, "code_version": code_version(CODE["trainer"])}
    pools = vertex_worker_pools(config) if target == "kubeflow-v2" else None
    trainer_class = tfx.components.Trainer
    if pools:
        trainer_class, custom_config = vertex_trainer(config, custom_config, pools)
    return trainer_class(
        run_fn=RUN_FN,
        examples=examples,
        schema=schema,
        base_model=base_model,
        train_args=tfx.proto.TrainArgs(splits=["train"], num_steps=train_budget),
        eval_args=tfx.proto.EvalArgs(splits=[config.evaluator.get("split", "eval")]),
        custom_config=custom_config,
    )


def vertex_trainer(config: PipelineConfig, custom_config: Dict, pools: List[Dict]):
    """TFX's Vertex Trainer and its custom_config: the step submits a Vertex AI CustomJob whose
    worker pools run TFX's GenericExecutor (our run_fn) in the pipeline image; with a worker
    pool the model trains under MultiWorkerMirroredStrategy (TF_CONFIG comes from Vertex)."""
    from tfx.v1.extensions import google_cloud_ai_platform as vertex

    section = config.raw["kubeflow"]["vertex_training"]
    custom_config = copy.deepcopy(custom_config)
    if len(pools) > 1:
        train = custom_config.setdefault("config", {}).setdefault("train", {})
        train["strategy"] = "multi_worker_mirrored"
    custom_config.update({
        vertex.ENABLE_VERTEX_KEY: True,
        vertex.VERTEX_REGION_KEY: section["region"],
        # A Vertex CustomJob (job_spec = CustomJobSpec); TFX pops `project` before submitting.
        vertex.TRAINING_ARGS_KEY: {"project": section["project"], "job_spec": {"worker_pool_specs": pools}},
    })
    return vertex.Trainer, custom_config


def _evaluator(config: PipelineConfig, examples, model, baseline_model):
    settings = config.evaluator
    return evaluator.BleuEvaluator(
        examples=examples,
        model=model,
        baseline_model=baseline_model,
        split=settings.get("split", "eval"),
        min_bleu=float(settings.get("min_bleu", 0.0)),
        max_bleu_drop=float(settings.get("max_bleu_drop", 0.0)),
        max_examples=int(settings.get("max_examples", 0)),
        batch_size=int(settings.get("batch_size", 64)),
        code_version=code_version(CODE["evaluator"]),
    ).with_id("Evaluator")


def create_components(config: PipelineConfig, target: str = "local") -> List:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
    example_gen = components.table_example_gen(
        config.input_base, config.splits, config.lowercase, code_version(CODE["examples"])
    )
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = _schema_gen(config, statistics_gen.outputs["statistics"])
    schema_gen.add_upstream_node(statistics_gen)  # ImportSchemaGen too: stages run in the order shown
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"]
    )
    gate = components.AnomaliesGate(anomalies=example_validator.outputs["anomalies"])
    resolver = _resolver(example_gen, builtin=target == "kubeflow-v2")
    trainer = _trainer(config, example_gen.outputs["examples"], schema_gen.outputs["schema"],
                       resolver.outputs["model"], target)
    trainer.add_upstream_node(gate)  # no training on data with anomalies
    bleu_evaluator = _evaluator(config, example_gen.outputs["examples"], trainer.outputs["model"],
                                resolver.outputs["model"])
    pusher = components.AtomicPusher(
        model=trainer.outputs["model"],
        model_blessing=bleu_evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(base_directory=config.push_directory)
        ),
    ).with_id("Pusher")
    return [example_gen, statistics_gen, schema_gen, example_validator, gate, resolver,
            trainer, bleu_evaluator, pusher]


def create_pipeline(
    config: PipelineConfig,
    metadata_connection_config=None,
    target: str = "local",
    pipeline_root: Optional[str] = None,
) -> tfx.dsl.Pipeline:
    """The pipeline of `config` for `target` (local: LocalDagRunner / Airflow; kubeflow-v2:
    TFX's built-in resolver); `metadata_connection_config` None = the orchestrator's own."""
    return tfx.dsl.Pipeline(
        pipeline_name=config.name,
        pipeline_root=pipeline_root or config.root,
        components=create_components(config, target),
        enable_cache=config.enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=list(config.beam_pipeline_args),
    )

"""Pipeline construction, Kubeflow V2 compilation, the Airflow DAG guard."""

import dataclasses
import importlib
import importlib.util
import json

import pytest
import yaml

from tfx_pipeline import config as pipeline_config

COMPONENT_IDS = [
    "TableExampleGen", "StatisticsGen", "ImportSchemaGen", "ExampleValidator", "AnomaliesGate",
    "latest_blessed_model_resolver", "Trainer", "Evaluator", "Pusher",
]


def _config(tmp_path, **changes):
    config = pipeline_config.load(overrides={"pipeline": {"root": str(tmp_path / "root")}})
    return dataclasses.replace(config, **changes)


def test_create_pipeline_has_every_component(tmp_path):
    from tfx_pipeline.pipeline import create_pipeline

    pipeline = create_pipeline(_config(tmp_path))
    assert sorted(c.id for c in pipeline.components) == sorted(COMPONENT_IDS)
    by_id = {c.id: c for c in pipeline.components}
    # Training waits for the anomalies gate; Pusher consumes the BLEU gate's blessing.
    assert by_id["AnomaliesGate"] in by_id["Trainer"].upstream_nodes
    assert by_id["Evaluator"] in by_id["Pusher"].upstream_nodes
    assert by_id["latest_blessed_model_resolver"] in by_id["Trainer"].upstream_nodes
    assert pipeline.beam_pipeline_args[-1] == "--direct_num_workers=2"


def test_without_a_schema_file_the_schema_is_inferred(tmp_path):
    from tfx_pipeline.pipeline import create_pipeline

    pipeline = create_pipeline(_config(tmp_path, schema_file=None))
    assert "SchemaGen" in {c.id for c in pipeline.components}
    assert len(pipeline.components) == len(COMPONENT_IDS)


def _compiled(tmp_path, config):
    from tfx_pipeline.runner import compile_kubeflow_v2

    output = str(tmp_path / "tablegen.json")
    compile_kubeflow_v2(config, output)
    with open(output) as handle:
        return json.load(handle)


def test_kubeflow_v2_compile_writes_every_component(tmp_path):
    pytest.importorskip("kfp.pipeline_spec", reason="needs kfp-pipeline-spec")
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = _compiled(tmp_path, _config(tmp_path))
    # KFP's schema: the spec parses into its PipelineSpec proto, unknown fields refused.
    parsed = json_format.ParseDict(spec["pipelineSpec"], pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    assert parsed.pipeline_info.name == "tablegen-e2e"
    assert set(parsed.root.dag.tasks) == set(spec["pipelineSpec"]["root"]["dag"]["tasks"])
    # ... and the KFP SDK's own loader accepts it as a pipeline component.
    from kfp import components

    loaded = components.load_component_from_text(yaml.safe_dump(spec["pipelineSpec"]))
    assert loaded.name == "tablegen-e2e"
    assert set(loaded.pipeline_spec.root.dag.tasks) == set(parsed.root.dag.tasks)
    tasks = spec["pipelineSpec"]["root"]["dag"]["tasks"]
    for component_id in set(COMPONENT_IDS) - {"latest_blessed_model_resolver"}:
        assert component_id in tasks, sorted(tasks)
    # The built-in resolver compiles into its two KFP resolver tasks.
    assert any(name.startswith("latest_blessed_model_resolver") for name in tasks)
    executors = spec["pipelineSpec"]["deploymentSpec"]["executors"]
    images = {e["container"]["image"] for e in executors.values() if "container" in e}
    assert images == {"gcr.io/my-project/tablegen:latest"}
    assert spec["runtimeConfig"]["gcsOutputDirectory"] == "gs://my-bucket/tablegen/pipeline-root"
    _check_vertex_worker_pools(spec)


VERTEX_EXECUTOR = "tfx.extensions.google_cloud_ai_platform.trainer.executor.GenericExecutor"


def _check_vertex_worker_pools(spec):
    """The compiled Trainer submits a Vertex AI CustomJob with the config's worker pools: the
    CustomJob TFX's own Vertex client builds from the compiled parameters parses as
    aiplatform_v1.CustomJob (unknown fields refused)."""
    from google.cloud.aiplatform_v1.types import CustomJob
    from tfx.extensions.google_cloud_ai_platform import training_clients
    from tfx.v1.extensions import google_cloud_ai_platform as vertex

    pipeline_spec = spec["pipelineSpec"]
    executor = pipeline_spec["deploymentSpec"]["executors"]["Trainer_executor"]["container"]
    assert executor["args"][:2] == ["--executor_class_path", VERTEX_EXECUTOR]
    parameters = {name: value["runtimeValue"]["constantValue"]["stringValue"]
                  for name, value in pipeline_spec["root"]["dag"]["tasks"]["Trainer"]["inputs"]["parameters"].items()}
    custom_config = json.loads(parameters["custom_config"])
    assert custom_config[vertex.ENABLE_VERTEX_KEY] is True
    assert custom_config[vertex.VERTEX_REGION_KEY] == "us-central1"
    assert custom_config["config"]["train"]["strategy"] == "multi_worker_mirrored"
    job_args = custom_config[vertex.TRAINING_ARGS_KEY]
    assert job_args["project"] == "my-project"
    image = {"image_uri": "gcr.io/my-project/tablegen:latest"}
    assert job_args["job_spec"]["worker_pool_specs"] == [
        {"machine_spec": {"machine_type": "n1-standard-8"}, "replica_count": 1, "container_spec": image},
        {"machine_spec": {"machine_type": "n1-standard-8"}, "replica_count": 2, "container_spec": image},
    ]

    class OfflineVertexClient(training_clients.VertexJobClient):
        def create_client(self):  # the API client only: it would look up GCP credentials
            self._client = None

    job_args.pop("project")  # as tfx...google_cloud_ai_platform.runner.start_cloud_training does
    job = OfflineVertexClient("us-central1").create_training_job(
        {}, {}, parameters, "tfx.components.trainer.executor.GenericExecutor", job_args, None, None)
    pools = CustomJob(job).job_spec.worker_pool_specs
    assert [(p.replica_count, p.machine_spec.machine_type, p.container_spec.image_uri) for p in pools] == [
        (1, "n1-standard-8", image["image_uri"]), (2, "n1-standard-8", image["image_uri"])]
    assert all("tfx_pipeline.trainer_utils.run_fn" in " ".join(p.container_spec.command) for p in pools)


def test_without_vertex_training_the_trainer_runs_in_its_step(tmp_path):
    from tfx_pipeline.pipeline import create_pipeline

    config = pipeline_config.load(overrides={"pipeline": {"root": str(tmp_path / "root")},
                                             "kubeflow": {"vertex_training": None}})
    (trainer,) = [c for c in create_pipeline(config, target="kubeflow-v2").components if c.id == "Trainer"]
    assert type(trainer) is tfx_trainer_class()
    assert "ai_platform_training_args" not in trainer.exec_properties["custom_config"]


def tfx_trainer_class():
    from tfx import v1 as tfx

    return tfx.components.Trainer


def test_vertex_worker_pools_from_the_config():
    def pools(**section):
        base = {"project": "p", "region": "r", "chief": {"machine_type": "n1-standard-4"}}
        config = pipeline_config.load(overrides={"kubeflow": {"image": "img", "vertex_training": {**base, **section}}})
        return pipeline_config.vertex_worker_pools(config)

    assert pools(workers=None) == [
        {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1, "container_spec": {"image_uri": "img"}}]
    gpu = pools(workers={"machine_type": "n1-standard-8", "replica_count": 3, "accelerator_type": "NVIDIA_TESLA_T4"})
    assert gpu[1]["replica_count"] == 3
    assert gpu[1]["machine_spec"] == {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                                      "accelerator_count": 1}
    with pytest.raises(ValueError, match="kubeflow.vertex_training.workers.machine_type is required"):
        pools(workers={"machine_type": None, "replica_count": 2})
    with pytest.raises(ValueError, match="kubeflow.vertex_training.project is required"):
        pools(project=None)


def test_airflow_dag_needs_airflow():
    if importlib.util.find_spec("airflow") is not None:
        pytest.skip("Airflow is installed: the DAG module imports")
    with pytest.raises(ImportError, match="Apache Airflow"):
        importlib.import_module("tfx_pipeline.airflow_dag")


def test_the_airflow_dag_is_scheduled_daily_without_backfill(tmp_path):
    import datetime

    args = pipeline_config.airflow_dag_args(_config(tmp_path))
    assert args == {"schedule": "@daily", "catchup": False, "max_active_runs": 1,
                    "start_date": datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)}
    manual = pipeline_config.load(overrides={"airflow": {"schedule": None, "start_date": "2025-06-01T06:00:00+02:00"}})
    args = pipeline_config.airflow_dag_args(manual)
    assert args["schedule"] is None and args["start_date"].utcoffset() == datetime.timedelta(hours=2)


def test_code_version_follows_sources_not_tests(tmp_path):
    from tfx_pipeline.pipeline import code_version

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "reader.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "reader_test.py").write_text("B = 1\n")
    before = code_version(["pkg/**/*.py"], root=str(tmp_path))
    (tmp_path / "pkg" / "reader_test.py").write_text("B = 2\n")
    assert code_version(["pkg/**/*.py"], root=str(tmp_path)) == before
    (tmp_path / "pkg" / "reader.py").write_text("A = 2\n")
    assert code_version(["pkg/**/*.py"], root=str(tmp_path)) != before

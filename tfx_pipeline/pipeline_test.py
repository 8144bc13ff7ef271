"""Pipeline construction, Kubeflow V2 compilation, the Airflow DAG guard."""

import dataclasses
import importlib
import importlib.util
import json

import pytest

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


def test_kubeflow_v2_compile_writes_every_component(tmp_path):
    pytest.importorskip("kfp.pipeline_spec", reason="needs kfp-pipeline-spec")
    from tfx_pipeline.runner import compile_kubeflow_v2

    output = str(tmp_path / "tablegen.json")
    compile_kubeflow_v2(_config(tmp_path), output)
    with open(output) as handle:
        spec = json.load(handle)
    tasks = spec["pipelineSpec"]["root"]["dag"]["tasks"]
    for component_id in set(COMPONENT_IDS) - {"latest_blessed_model_resolver"}:
        assert component_id in tasks, sorted(tasks)
    # The built-in resolver compiles into its two KFP resolver tasks.
    assert any(name.startswith("latest_blessed_model_resolver") for name in tasks)
    executors = spec["pipelineSpec"]["deploymentSpec"]["executors"]
    images = {e["container"]["image"] for e in executors.values() if "container" in e}
    assert images == {"gcr.io/my-project/tablegen:latest"}
    assert spec["runtimeConfig"]["gcsOutputDirectory"] == "gs://my-bucket/tablegen/pipeline-root"


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

"""Airflow DAG of the tablegen pipeline (TFX AirflowDagRunner).

Importable only where Apache Airflow 2.x is installed (``./scripts/setup_airflow.sh`` builds
``.cache/airflow-venv`` with Airflow 2.11.2 and the project's stack): put a file importing
``DAG`` from this module into Airflow's DAG folder and set ``TABLEGEN_PIPELINE_CONFIG`` to
the pipeline YAML (default: configs/default.yaml); its ``airflow:`` section sets the
schedule (``@daily`` by default), start date, catch-up and concurrency. Without Airflow,
importing it raises ImportError naming what is missing, on purpose: the name does not
match ``*_test.py`` so pytest never collects it, and no other module imports it.

Each component is an Airflow task (TFX's legacy in-process launcher inside a
PythonOperator); ML Metadata is the SQLite file under the pipeline root, as with
``tablegen pipeline run``, so caching, the baseline resolver and the BLEU gate behave the
same. benchmarks/airflow_schedule.py runs it with ``airflow dags test``.
"""

import os

try:
    import airflow  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised only without Airflow
    raise ImportError(
        "tfx_pipeline/airflow_dag.py needs Apache Airflow 2.x (./scripts/setup_airflow.sh builds "
        ".cache/airflow-venv); use `tablegen pipeline run` to run locally"
    ) from error

from tfx.orchestration.airflow.airflow_dag_runner import AirflowDagRunner, AirflowPipelineConfig

from tfx_pipeline import config as pipeline_config
from tfx_pipeline.pipeline import create_pipeline
from tfx_pipeline.runner import metadata_config

os.environ.pop("TF_USE_LEGACY_KERAS", None)  # set by `import tfx`; see runner.py

CONFIG = pipeline_config.load(os.environ.get("TABLEGEN_PIPELINE_CONFIG"))

# Airflow discovers DAGs as module-level globals; the DAG id is the pipeline name.
DAG = AirflowDagRunner(
    AirflowPipelineConfig(airflow_dag_config=pipeline_config.airflow_dag_args(CONFIG))
).run(create_pipeline(CONFIG, metadata_config(CONFIG)))

"""Airflow DAG of the tablegen pipeline (TFX AirflowDagRunner).

Importable only where Apache Airflow is installed (``pip install "tfx[airflow]==1.21.0"``,
Airflow < 3): copy or symlink this file into Airflow's ``dags/`` folder and set
``TABLEGEN_PIPELINE_CONFIG`` to the pipeline YAML (default: configs/default.yaml).
Without Airflow, importing it raises ImportError naming what is missing, on purpose:
the name does not match ``*_test.py`` so pytest never collects it, and no other
module imports it. Airflow's scheduler runs each component as a task; ML Metadata is
the SQLite file under the pipeline root, as with ``tablegen pipeline run``.
"""

import datetime
import os

try:
    import airflow  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised only without Airflow
    raise ImportError(
        "tfx_pipeline/airflow_dag.py needs Apache Airflow (pip install 'tfx[airflow]==1.21.0'); "
        "use `tablegen pipeline run` to run locally"
    ) from error

from tfx.orchestration.airflow.airflow_dag_runner import AirflowDagRunner, AirflowPipelineConfig

from tfx_pipeline import config as pipeline_config
from tfx_pipeline.pipeline import create_pipeline
from tfx_pipeline.runner import metadata_config

_CONFIG = pipeline_config.load(os.environ.get("TABLEGEN_PIPELINE_CONFIG"))
_AIRFLOW = _CONFIG.raw.get("airflow") or {}

# Airflow discovers DAGs as module-level globals.
DAG = AirflowDagRunner(
    AirflowPipelineConfig(
        airflow_dag_config={
            "schedule_interval": _AIRFLOW.get("schedule_interval"),
            "start_date": datetime.datetime.fromisoformat(str(_AIRFLOW.get("start_date", "2024-01-01"))),
        }
    )
).run(create_pipeline(_CONFIG, metadata_config(_CONFIG)))

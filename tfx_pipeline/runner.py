"""Entry points: run locally (LocalDagRunner + SQLite ML Metadata), compile for Kubeflow V2.

Environment note: importing ``tfx.v1`` imports tensorflow_transform, which sets
``TF_USE_LEGACY_KERAS=1``; Beam worker processes started by a run would inherit it.
tablegen uses Keras 3 (``import keras``) everywhere and no TFX component here needs
tf-keras, so our modules drop the variable right after importing TFX.
"""

from __future__ import annotations

import glob
import os
from typing import Dict, List, Optional

from tablegen_tf.tempdirs import private_tempdir
from tfx_pipeline.config import PipelineConfig, for_kubeflow, kubeflow_image


def metadata_config(config: PipelineConfig):
    from tfx import v1 as tfx

    os.makedirs(config.root, exist_ok=True)
    return tfx.orchestration.metadata.sqlite_metadata_connection_config(config.metadata_path)


def run_local(config: PipelineConfig, tracker=None) -> Dict:
    """Runs the pipeline with LocalDagRunner (stage lines to `tracker`, default stdout);
    returns where_outputs_are(config)."""
    from tfx_pipeline.pipeline import create_pipeline
    from tfx_pipeline.stages import StageTracker, reporting_dag_runner

    os.environ.pop("TF_USE_LEGACY_KERAS", None)
    pipeline = create_pipeline(config, metadata_config(config))
    with private_tempdir(prefix="tablegen-pipeline-"):
        reporting_dag_runner(tracker or StageTracker()).run(pipeline)
    return where_outputs_are(config)


def run_and_report(config: PipelineConfig, verbose: bool = False) -> int:
    """`tablegen pipeline run`: quiet console (full log under ROOT/logs), stage lines, the
    run report (ROOT/runs/<id>/run_report.{json,md}) and its summary. Exit code: 0 the run
    completed (pushed or not), 2 bad input data, 1 another failure."""
    from tablegen_tf import logs
    from tfx_pipeline import report
    from tfx_pipeline.stages import StageTracker

    paths = report.RunPaths.create(config.root)
    with logs.session(verbose, paths.log_file) as console:
        console.out.write(f"tablegen pipeline run: {config.name}, {config.input_base} -> {config.root}\n")
        tracker = StageTracker(console.out, describe=report.describer(config))
        error = _run_tracked(config, tracker)
        tracker.finish()
        store = metadata_store(config) if os.path.exists(config.metadata_path) else None
        summary = report.build(config, tracker, paths, error, store)
        report.write(summary)
        console.out.write("\n".join(report.summary_lines(summary)) + "\n")
    if error is None:
        return 0
    return 2 if _is_data_error(error) else 1


def _run_tracked(config: PipelineConfig, tracker) -> Optional[BaseException]:
    import logging

    try:
        run_local(config, tracker)
    except Exception as error:  # reported, not raised: the traceback goes to the log file
        logging.getLogger(__name__).debug("pipeline run failed", exc_info=True)
        return error
    return None


def _is_data_error(error: BaseException) -> bool:
    from tablegen_tf.readers.base import InputError
    from tfx_pipeline.components import DataAnomaliesError

    return isinstance(error, (DataAnomaliesError, InputError))


def metadata_store(config: PipelineConfig):
    """Read-only ML Metadata store of a local run."""
    from ml_metadata import metadata_store as mlmd
    from ml_metadata.proto import metadata_store_pb2

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = config.metadata_path
    connection.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return mlmd.MetadataStore(connection)


def _latest(store, type_name: str):
    artifacts = store.get_artifacts_by_type(type_name)
    return max(artifacts, key=lambda a: a.id) if artifacts else None


def where_outputs_are(config: PipelineConfig) -> Dict:
    """Latest model run (TensorBoard logs), evaluation and push, read from ML Metadata."""
    store = metadata_store(config)
    run, evaluation, push = (_latest(store, t) for t in ("ModelRun", "ModelEvaluation", "PushedModel"))
    pushed = push is not None and push.custom_properties["pushed"].int_value == 1
    return {
        "model_run_logs": os.path.join(run.uri, "logs") if run else None,
        "evaluation": evaluation.uri if evaluation else None,
        "pushed": pushed,
        "pushed_to": push.custom_properties["pushed_destination"].string_value if pushed else None,
        "serving_base": config.push_directory,
        "versions": sorted(os.listdir(config.push_directory)) if os.path.isdir(config.push_directory) else [],
    }


def compile_kubeflow_v2(config: PipelineConfig, output: str) -> str:
    """Writes the Kubeflow Pipelines V2 (Vertex AI Pipelines) JSON of the pipeline."""
    from tfx import v1 as tfx  # noqa: F401  (TFX first: sets up its registries)
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as kfp_v2

    from tfx_pipeline.pipeline import create_pipeline

    cloud = for_kubeflow(config)
    image = kubeflow_image(config)
    runner = kfp_v2.KubeflowV2DagRunner(
        config=kfp_v2.KubeflowV2DagRunnerConfig(default_image=image),
        output_dir=os.path.dirname(os.path.abspath(output)),
        output_filename=os.path.basename(output),
    )
    runner.run(create_pipeline(cloud, target="kubeflow-v2"), write_out=True)
    return output


def tensorboard_logdirs(pipeline_root: str) -> Dict[str, str]:
    """name -> log dir of every Trainer model run and Evaluator evaluation under the root."""
    found = {}
    for prefix, parts in (("train", ("Trainer", "model_run")), ("eval", ("Evaluator", "evaluation"))):
        paths = glob.glob(os.path.join(pipeline_root, *parts, "*", "logs"))
        for path in sorted(paths, key=_execution_id):
            found[f"{prefix}_{_execution_id(path)}"] = path
    return found


def _execution_id(logs_dir: str) -> int:
    name = os.path.basename(os.path.dirname(logs_dir))
    return int(name) if name.isdigit() else -1


def tensorboard_command(pipeline_root: str, port: int = 6006) -> List[str]:
    spec = ",".join(f"{name}:{path}" for name, path in tensorboard_logdirs(pipeline_root).items())
    return ["tensorboard", "--logdir_spec", spec, "--port", str(port)]

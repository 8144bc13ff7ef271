"""The pipeline's seven stages as a user follows them: `[i/7] Name …` lines with wall times.

How stage start and end are observed: ``ReportingDagRunner`` is TFX 1.21's
``LocalDagRunner`` loop (nodes in topological order, one ``Launcher`` each, in this
process) with a hook around each ``launch()``. That sees every node -- executed, cached
or failed -- in order and in the calling thread, so the Trainer's run_fn can find the
active stage (``tablegen_tf.progress.current_stage``) to label its step progress.
The alternatives were weaker: wrapping executors misses cached nodes and the system
resolver; polling ML Metadata from a thread races SQLite writes and lags; matching
TFX's "Component X is running." log records ties us to a message's wording.
Partial runs (``run_options``) are not supported by this loop; nothing here uses them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import sys
import time
from typing import IO, Callable, Dict, List, Optional, Sequence, Tuple

from tablegen_tf import progress

_LOG = logging.getLogger(__name__)

# Stage name -> the pipeline nodes it covers (the resolver is part of no stage).
STAGES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("ExampleGen", ("TableExampleGen",)),
    ("StatisticsGen", ("StatisticsGen",)),
    ("SchemaGen", ("ImportSchemaGen", "SchemaGen")),
    ("ExampleValidator", ("ExampleValidator", "AnomaliesGate")),
    ("Trainer", ("Trainer",)),
    ("Evaluator", ("Evaluator",)),
    ("Pusher", ("Pusher",)),
)


@dataclasses.dataclass
class Stage:
    index: int
    name: str
    nodes: Tuple[str, ...]  # the nodes of this pipeline in the stage
    status: str = "not run"  # running | done | cached | failed | not run
    seconds: float = 0.0
    executions: Dict[str, int] = dataclasses.field(default_factory=dict)  # node -> execution id
    states: Dict[str, str] = dataclasses.field(default_factory=dict)  # node -> COMPLETE / CACHED / FAILED
    detail: str = ""
    figures: Dict = dataclasses.field(default_factory=dict)  # filled by the report (tfx_pipeline.report)

    @property
    def label(self) -> str:
        return f"[{self.index}/{len(STAGES)}] {self.name}"


class StageTracker:
    """Receives node start/end from the runner; prints stage lines to `stream`.

    `describe(stage)` (optional) returns the short figures of a finished stage
    (e.g. examples written, BLEU), shown on its end line.
    """

    def __init__(self, stream: Optional[IO[str]] = None, clock: Callable[[], float] = time.monotonic,
                 describe: Optional[Callable[[Stage], str]] = None):
        self.stream = stream if stream is not None else sys.stdout
        self.clock = clock
        self.describe = describe
        self.stages: List[Stage] = []
        self._by_node: Dict[str, Stage] = {}
        self.started_at = datetime.datetime.now()
        self._start = clock()
        self.seconds = 0.0

    def plan(self, node_ids: Sequence[str]) -> None:
        present = set(node_ids)
        self.stages = [Stage(i, name, tuple(n for n in nodes if n in present))
                       for i, (name, nodes) in enumerate(STAGES, start=1)]
        self._by_node = {node: stage for stage in self.stages for node in stage.nodes}

    @contextlib.contextmanager
    def running(self, node_id: str):
        """Around one node's launch; yields a dict the runner fills with `execution_id`/`state`."""
        stage = self._by_node.get(node_id)
        result: Dict = {}
        if stage is None:  # the resolver: no stage of its own
            yield result
            return
        if stage.status == "not run":
            stage.status = "running"
            self._print(progress.stage_line(stage.index, len(STAGES), stage.name))
        start = self.clock()
        try:
            with progress.active_stage(stage.label, self.stream):
                yield result
        except BaseException:
            stage.seconds += self.clock() - start
            stage.states[node_id] = "FAILED"
            stage.status = "failed"
            self._print(progress.stage_line(stage.index, len(STAGES), stage.name, "failed", stage.seconds))
            raise
        stage.seconds += self.clock() - start
        stage.states[node_id] = result.get("state", "COMPLETE")
        if result.get("execution_id") is not None:
            stage.executions[node_id] = result["execution_id"]
        if len(stage.states) == len(stage.nodes):
            self._finish(stage)

    def _finish(self, stage: Stage) -> None:
        cached = all(state == "CACHED" for state in stage.states.values())
        stage.status = "cached" if cached else "done"
        if self.describe is not None:
            stage.detail = self.describe(stage)
        self._print(progress.stage_line(stage.index, len(STAGES), stage.name, stage.status, stage.seconds,
                                        stage.detail))

    def finish(self) -> None:
        self.seconds = self.clock() - self._start

    def _print(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


def _local_dag_runner_class():
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    return LocalDagRunner


def reporting_dag_runner(tracker: StageTracker):
    """A LocalDagRunner that reports every node to `tracker` (see the module docstring)."""
    from tfx.dsl.compiler import constants
    from tfx.orchestration import metadata
    from tfx.orchestration.local import runner_utils
    from tfx.orchestration.portable import launcher, runtime_parameter_utils

    class ReportingDagRunner(_local_dag_runner_class()):
        def run_with_ir(self, pipeline, run_options=None):
            if run_options:
                raise ValueError("tablegen's pipeline runner does not support partial runs (run_options)")
            runtime_parameter_utils.substitute_runtime_parameter(
                pipeline, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: datetime.datetime.now().isoformat()})
            deployment = runner_utils.extract_local_deployment_config(pipeline)
            connection = deployment.metadata_connection_config
            connection = getattr(connection, connection.WhichOneof("connection_config"))
            tracker.plan([node.pipeline_node.node_info.id for node in pipeline.nodes])
            for node in pipeline.nodes:  # topological order
                pipeline_node = node.pipeline_node
                node_id = pipeline_node.node_info.id
                if pipeline_node.execution_options.HasField("skip"):
                    continue
                node_launcher = launcher.Launcher(
                    pipeline_node=pipeline_node,
                    mlmd_connection=metadata.Metadata(connection),
                    pipeline_info=pipeline.pipeline_info,
                    pipeline_runtime_spec=pipeline.runtime_spec,
                    executor_spec=runner_utils.extract_executor_spec(deployment, node_id),
                    custom_driver_spec=runner_utils.extract_custom_driver_spec(deployment, node_id),
                )
                _LOG.info("Component %s is running.", node_id)  # TFX's own log lines, kept in the log file
                with tracker.running(node_id) as result:
                    info = node_launcher.launch()
                    if info is not None and info.execution_id is not None:
                        result["execution_id"] = info.execution_id
                        result["state"] = _execution_state(connection, info.execution_id)
                _LOG.info("Component %s is finished.", node_id)

    return ReportingDagRunner()


def _execution_state(connection, execution_id: int) -> str:
    """COMPLETE / CACHED / ... of an execution, read back from ML Metadata."""
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    executions = metadata_store.MetadataStore(connection).get_executions_by_id([execution_id])
    if not executions:
        return "COMPLETE"
    return metadata_store_pb2.Execution.State.Name(executions[0].last_known_state)

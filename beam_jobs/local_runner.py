"""The DirectRunner without its first attempt, Prism.

Beam 2.77's DirectRunner first tries the Prism runner, whose Go binary it downloads from
GitHub at run time. Without network access (our CI, air-gapped workers) the download fails,
the job falls back to the FnApiRunner, and the Prism job server's temp directory
(``/tmp/beam-temp*``) is left behind, one per job. This runner goes straight to that
FnApiRunner, built as the DirectRunner builds it (the options reach the SDK workers through
the provision info), so `--direct_running_mode` and `--direct_num_workers` work as before.
Our jobs are bounded and globally windowed, all of which the FnApiRunner runs.
"""

from __future__ import annotations

from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineRunner


class LocalDirectRunner(PipelineRunner):
    def run_pipeline(self, pipeline, options):
        encoded_options = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision_info = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded_options))
        return fn_runner.FnApiRunner(provision_info=provision_info).run_pipeline(pipeline, options)

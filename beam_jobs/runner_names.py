"""Runner names as users write them -> the runner class Beam builds.

`--runner=DaskRunner` (or `dask`) means beam_jobs.dask_runner.DaskRunner: Beam 2.77's own
DaskRunner, which Beam would pick for that name, cannot run our jobs (see dask_runner.py).
Kept apart from dask_runner.py so that reading options does not import dask.
"""

from __future__ import annotations

from typing import List

DASK_RUNNER = "beam_jobs.dask_runner.DaskRunner"
_DASK_NAMES = ("daskrunner", "dask", "apache_beam.runners.dask.dask_runner.daskrunner")


def with_our_runners(beam_args: List[str]) -> List[str]:
    """The same Beam options with a Dask runner name replaced by ours (both spellings:
    `--runner=NAME` and `--runner NAME`)."""
    resolved, args = [], list(beam_args)
    for index, arg in enumerate(args):
        if arg.startswith("--runner=") and arg.split("=", 1)[1].lower() in _DASK_NAMES:
            arg = f"--runner={DASK_RUNNER}"
        elif index and args[index - 1] == "--runner" and arg.lower() in _DASK_NAMES:
            arg = DASK_RUNNER
        resolved.append(arg)
    return resolved

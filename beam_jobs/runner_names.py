"""Runner names as users write them -> the runner class Beam builds.

`--runner=DaskRunner` (or `dask`) means beam_jobs.dask_runner.DaskRunner: Beam 2.77's own
DaskRunner, which Beam would pick for that name, cannot run our jobs (see dask_runner.py).
`--runner=DirectRunner` (or `direct`, or no runner in `tablegen prepare`) means
beam_jobs.local_runner.LocalDirectRunner: the same FnApiRunner without the Prism download.
Kept apart from dask_runner.py so that reading options does not import dask.
"""

from __future__ import annotations

from typing import List

DASK_RUNNER = "beam_jobs.dask_runner.DaskRunner"
_DASK_NAMES = ("daskrunner", "dask", "apache_beam.runners.dask.dask_runner.daskrunner")
# The DirectRunner without its run-time download of the Prism binary (local_runner.py).
LOCAL_RUNNER = "beam_jobs.local_runner.LocalDirectRunner"
_DIRECT_NAMES = ("directrunner", "direct", "switchingdirectrunner")
_OURS = {**{name: DASK_RUNNER for name in _DASK_NAMES}, **{name: LOCAL_RUNNER for name in _DIRECT_NAMES}}


def with_our_runners(beam_args: List[str]) -> List[str]:
    """The same Beam options with a Dask or Direct runner name replaced by ours (both
    spellings: `--runner=NAME` and `--runner NAME`)."""
    resolved, args = [], list(beam_args)
    for index, arg in enumerate(args):
        name = arg.split("=", 1)[1].lower() if arg.startswith("--runner=") else None
        if name in _OURS:
            arg = f"--runner={_OURS[name]}"
        elif index and args[index - 1] == "--runner" and arg.lower() in _OURS:
            arg = _OURS[arg.lower()]
        resolved.append(arg)
    return resolved

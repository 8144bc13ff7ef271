"""Test-session hygiene: a test run leaves nothing behind in the temp directory.

Beam (pipeline and sink temp dirs), TF's autograph (generated modules), pytest's own
tmp_path and every subprocess (via TMPDIR) write to one directory for the session,
removed when the session ends.
"""

import os
import shutil
import tempfile

_SAVED = {}


def pytest_configure(config):
    directory = tempfile.mkdtemp(prefix="tablegen-tests-")
    _SAVED.update(directory=directory, tempdir=tempfile.tempdir, TMPDIR=os.environ.get("TMPDIR"))
    tempfile.tempdir = directory
    os.environ["TMPDIR"] = directory


def pytest_unconfigure(config):
    if "directory" not in _SAVED:
        return
    tempfile.tempdir = _SAVED["tempdir"]
    if _SAVED["TMPDIR"] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = _SAVED["TMPDIR"]
    shutil.rmtree(_SAVED.pop("directory"), ignore_errors=True)


# `-n auto` (pyproject addopts) means this many workers: each holds TensorFlow and a few trained
# models (~4 GB at its peak), and a test often trains on both cores itself, so more workers than two
# buy little and risk memory on small hosts. PYTEST_XDIST_AUTO_NUM_WORKERS=N overrides.
MAX_TEST_WORKERS = 2


def pytest_xdist_auto_num_workers(config):
    return max(1, min(MAX_TEST_WORKERS, len(os.sched_getaffinity(0))))

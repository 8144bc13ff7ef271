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

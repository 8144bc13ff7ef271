"""A private temp directory for one command or pipeline run, removed after it.

Beam's portable job service and stager (``beam-pipeline-temp*``) and TF's autograph
(``__autograph_generated_file*.py``) create temp dirs and files they never delete: every
`tablegen prepare` left a Beam dir in /tmp, a test run ~25. Pointing ``tempfile`` and
``TMPDIR`` (read by Beam's worker processes) at a directory of our own, removed at the
end, catches all of it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator


@contextlib.contextmanager
def private_tempdir(prefix: str = "tablegen-") -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix=prefix)
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = directory
    os.environ["TMPDIR"] = directory
    try:
        yield directory
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
        shutil.rmtree(directory, ignore_errors=True)

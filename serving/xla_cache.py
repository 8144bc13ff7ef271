"""Compiled XLA computations kept on disk, so a new version skips compiling what the last
one compiled (TensorFlow's persistent XLA cache, ``--tf_xla_persistent_cache_directory``).

A served version's one-table beam search is an XLA computation (tablegen_tf.decoding.beam,
``jit_compile``), compiled at its first call for each table-size bucket. Each version runs
in a session of its own, and a session's compilation cache dies with it, so every push
compiled the same computations again: 1.3 of the E2E export's 3.0 s of warm-up before it
takes traffic, on XLA's own threads at full priority beside the requests. The weights are
arguments of the computation, not constants, so a retrained model of the same
architecture and vocabulary size hits the cache; another architecture simply misses.
Entries are keyed by a fingerprint of the computation and checked against it on load.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import tempfile
from typing import Optional

log = logging.getLogger("tablegen.serving")

ENVIRONMENT = "TF_XLA_FLAGS"
FLAG = "--tf_xla_persistent_cache_directory"


def _tensorflow_version() -> str:
    try:
        return importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class XlaCache:
    """Points this process's XLA cache at ``directory`` (one subdirectory per TensorFlow
    version, whose executables another version may not read), or at a temporary directory
    removed by ``close()``. Takes effect only before the process's first XLA compilation
    (TensorFlow reads the flags once); a cache directory already in TF_XLA_FLAGS is kept."""

    def __init__(self, directory: Optional[str] = None):
        self.directory: Optional[str] = None
        self._temporary = False
        flags = os.environ.get(ENVIRONMENT, "")
        if FLAG in flags:
            log.info("XLA cache: %s already set in %s; kept", FLAG, ENVIRONMENT)
            return
        if directory is None:
            self.directory, self._temporary = tempfile.mkdtemp(prefix="tablegen-xla-"), True
        else:
            self.directory = os.path.join(directory, f"tensorflow-{_tensorflow_version()}")
            os.makedirs(self.directory, exist_ok=True)
        os.environ[ENVIRONMENT] = f"{flags} {FLAG}={self.directory}".strip()

    def close(self) -> None:
        if self._temporary:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory, self._temporary = None, False

    def __enter__(self) -> "XlaCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

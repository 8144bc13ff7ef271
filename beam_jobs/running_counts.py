"""Running counts of a Beam job, for a progress line while it runs.

Beam's metrics reach the launching process only when the pipeline has finished, so a
long `tablegen prepare` would show nothing for minutes. Instead, on runners whose
workers share this machine's disk (the DirectRunner, in-memory or multi-processing),
each DoFn instance writes its own counts to a small JSON file in a local directory at
most once a second (write + rename, so a reader never sees half a file), and the
launcher sums the files on a thread. On other runners (Dataflow, Flink, ...) there is no
directory and the runner's own UI shows the job's counters.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from typing import Callable, Dict, Optional

WRITE_EVERY_SECONDS = 1.0
SUFFIX = ".counts.json"


class Heartbeat:
    """One DoFn instance's counts, written to DIRECTORY/<unique>.counts.json."""

    def __init__(self, directory: Optional[str]):
        self.directory = directory
        self.counts: Dict[str, int] = collections.Counter()
        self._path = os.path.join(directory, uuid.uuid4().hex + SUFFIX) if directory else None
        self._last = 0.0

    def add(self, key: str, n: int = 1) -> None:
        if self._path is None:
            return
        self.counts[key] += n
        if time.monotonic() - self._last >= WRITE_EVERY_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self._path is None or not os.path.isdir(self.directory):  # the job has ended
            return
        self._last = time.monotonic()
        temporary = self._path + ".tmp"
        with open(temporary, "w") as handle:
            json.dump(self.counts, handle)
        os.replace(temporary, self._path)


def read_totals(directory: str) -> Dict[str, int]:
    """The sum of every heartbeat file's counts."""
    totals: Dict[str, int] = collections.Counter()
    for name in os.listdir(directory):
        if name.endswith(SUFFIX):
            try:
                with open(os.path.join(directory, name)) as handle:
                    totals.update(json.load(handle))
            except (OSError, ValueError):  # replaced or removed while read: next time
                continue
    return dict(totals)


class Watcher:
    """A temporary heartbeat directory and a thread calling ``on_counts(totals)`` every
    ``poll_seconds`` while the job runs; removes the directory on exit."""

    def __init__(self, on_counts: Callable[[Dict[str, int]], None], poll_seconds: float = 1.0):
        self.on_counts, self.poll_seconds = on_counts, poll_seconds
        self.directory: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "Watcher":
        self.directory = tempfile.mkdtemp(prefix="tablegen-counts-")
        self._thread = threading.Thread(target=self._poll, name="running-counts", daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            self.on_counts(read_totals(self.directory))

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        try:
            if exc_info[0] is None:
                self.on_counts(read_totals(self.directory))  # the final counts, once
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

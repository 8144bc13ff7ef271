"""Version discovery, background loading and hot swap for one model.

Layout is TF Serving's: BASE/NAME/VERSION/ with VERSION an integer directory.
Like TF Serving's default policy the latest ready version is served. A poll
thread notices new versions, loads them off the request path and swaps them in
under a lock; the previous version is retired but stays alive until its last
in-flight request returns (reference count), so a swap never fails a request.

Warm-up: TF Serving loads a version whole and replays its whole warm-up file before it
takes traffic. Here (``background_warmup``, the default) only ``serving_default`` is loaded
(serving.partial_load: a quarter of a real model's graph ops) and warmed up before the swap;
right after it a background thread at a lower CPU priority loads the whole SavedModel and
runs the other signatures' warm-up requests. Their load and first calls (graph optimisation)
would otherwise delay the new version's first answer. The first request to such a
signature meanwhile loads them too, at its own priority (the niced load could starve on a
busy host), and pays their first call, as it would without a warm-up file.
``background_warmup=False`` is TF Serving's behaviour.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import logging
import os
import re
import sys
import threading
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, prediction_log_pb2

from serving.errors import ServingError, not_found
from serving.partial_load import load_signatures
from serving.defaults import (DEFAULT_RUNTIME, POLL_SECONDS, RUNTIMES as RUNTIME_NAMES, SETTLE_SECONDS,
                              WARMUP_NICENESS)
from serving.session_runtime import SERVE_TAG, SessionModel
from serving.signatures import TABLES_INPUT, Signature
from tablegen_tf.constants import WARMUP_ASSET
from tablegen_tf.generation import PARALLEL_MIN_BATCH

log = logging.getLogger("tablegen.serving")

SHARD = re.compile(r"variables\.data-(\d+)-of-(\d+)$")
MAX_RETRY_SECONDS = 60.0
WARMUP_TABLE = '{"table": [{"field": "name", "value": "warm up"}]}'
# Warmed up before a version takes traffic when the rest is warmed up in the background;
# their batches of PARALLEL_MIN_BATCH rows or more too (the parallel searches' first call:
# 16 clients make batches of ~8 per batch thread, so the swap need not wait for it).
FIRST_WARMUP_SIGNATURES = ("serving_default", "")
# Niceness of the background warm-up thread (Linux: per thread): its graph optimisation
# and XLA compilation yield the CPU to requests. Its model calls release the GIL, so a
# preempted warm-up thread does not hold up the request threads. Never less nice than the
# loader thread (--loader-niceness), which starts it.
BACKGROUND_WARMUP_NICENESS = 10


# serving.defaults.RUNTIMES -> the loader: a session holds ~60x fewer Python objects than
# tf.saved_model.load's functions, so loading and unloading a version stall requests less.
RUNTIMES = dict(zip(RUNTIME_NAMES, (tf.saved_model.load, SessionModel)))


# Python's GIL switch interval while a SavedModel loads. tf.saved_model.load rebuilds every
# function of the library in Python (~75,000 graph ops for a real model, tens of seconds)
# holding the GIL; each time a request thread needs the GIL it waits up to one interval
# (5 ms by default) for the loader to drop it, many times per request.
LOAD_SWITCH_INTERVAL = 0.0005
_switch_lock = threading.Lock()
_loads_running = [0, 0.0]  # loads in progress, the interval before the first of them


@contextlib.contextmanager
def short_gil_switch_interval() -> Iterator[None]:
    """LOAD_SWITCH_INTERVAL while at least one load runs (loads of several models overlap)."""
    with _switch_lock:
        if _loads_running[0] == 0:
            _loads_running[1] = sys.getswitchinterval()
            sys.setswitchinterval(min(LOAD_SWITCH_INTERVAL, _loads_running[1]))
        _loads_running[0] += 1
    try:
        yield
    finally:
        with _switch_lock:
            _loads_running[0] -= 1
            if _loads_running[0] == 0:
                sys.setswitchinterval(_loads_running[1])


def register_custom_ops() -> None:
    """The real model uses tensorflow-text ops; without this import the load
    fails with "Op type not registered 'NormalizeUTF8'"."""
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        pass


def is_complete(path: str) -> bool:
    """saved_model.pb present and variables/ has its index and every data shard."""
    variables = os.path.join(path, "variables")
    if not os.path.isfile(os.path.join(path, "saved_model.pb")) or not os.path.isdir(variables):
        return False
    names = os.listdir(variables)
    shards = [SHARD.match(n) for n in names]
    shards = [(int(m.group(1)), int(m.group(2))) for m in shards if m]
    if "variables.index" not in names or not shards:
        return False
    total = shards[0][1]
    return {index for index, _ in shards} == set(range(total))


def fingerprint(path: str) -> Tuple:
    """Names, sizes and mtimes of every file: equal on two polls = the copy is not moving."""
    entries = []
    for root, _, files in os.walk(path):
        for name in files:
            stat = os.stat(os.path.join(root, name))
            entries.append((os.path.relpath(os.path.join(root, name), path), stat.st_size,
                            stat.st_mtime_ns))
    return tuple(sorted(entries))


def read_signature_defs(path: str) -> get_model_metadata_pb2.SignatureDefMap:
    """The serve meta graph's SignatureDefs, as TF Serving returns them in metadata."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    graphs = [g for g in saved_model.meta_graphs if SERVE_TAG in g.meta_info_def.tags]
    result = get_model_metadata_pb2.SignatureDefMap()
    for key, value in (graphs or saved_model.meta_graphs)[0].signature_def.items():
        result.signature_def[key].CopyFrom(value)
    return result


def _first_line(error: BaseException) -> str:
    """An error's first line for a log or status message (its repr when it has no text)."""
    return str(error).splitlines()[0] if str(error) else repr(error)


class LoadedVersion:
    """One loaded SavedModel version with an in-flight count."""

    def __init__(self, name: str, version: int, path: str, first_signatures: Optional[Iterable[str]] = None,
                 runtime: str = DEFAULT_RUNTIME):
        """``first_signatures``: load only these now (serving.partial_load) when the version
        has others; ``load_rest`` loads the others later. ``runtime``: a key of RUNTIMES."""
        register_custom_ops()
        self.name, self.version, self.path = name, version, path
        self._load_whole = RUNTIMES[runtime]
        self.signature_defs = read_signature_defs(path)
        names = {key for key in self.signature_defs.signature_def if not key.startswith("__")}
        first = names & set(first_signatures or ())
        self._rest_loaded = threading.Event()
        self._rest_error = ""
        self._rest_loads = 0  # loads of the other signatures running (background, request)
        self._request_load_started = False
        self._model = self._rest_model = None
        if first and names - first:
            self._model = self._load_partial(sorted(first))
        if self._model is None:
            with short_gil_switch_interval():
                self._model = self._load_whole(path)
            self._rest_loaded.set()
        self.signatures = {k: Signature(k, fn) for k, fn in self._model.signatures.items()}
        self.state = "AVAILABLE"
        self._in_flight = 0
        self._lock = threading.Lock()
        self._on_unload: List[Callable[[], None]] = []
        self._retired_models: list = []

    def _load_partial(self, signatures: List[str]):
        try:
            with short_gil_switch_interval():
                return load_signatures(self.path, signatures, self._load_whole)
        except Exception as error:  # e.g. a SavedModel without an object graph: load it whole
            log.warning("loading only %s of %s failed, loading all of it: %s", signatures, self.path,
                        _first_line(error))
            return None

    @property
    def complete(self) -> bool:
        """Every signature is loaded (or the full load failed)."""
        return self._rest_loaded.is_set()

    def load_rest(self, background: bool = False) -> List[str]:
        """Loads the signatures the first load left out (alone: serving.partial_load); -> the
        names it added: none if it failed or another thread's load of them finished first
        (a request's, see ``_wait_for_rest``). ``background``: none either if a request has
        started loading them (a second copy would only double the memory and CPU while both
        run). Safe to call from several threads."""
        if self.complete:
            return []
        started = time.perf_counter()
        with self._lock:
            if background and self._request_load_started:
                return []
            self._rest_loads += 1
        try:
            # Only the signatures left out: the first load's are not rebuilt a second time
            # (a quarter of the ops: load time, memory, and the unload's collection).
            model = self._load_partial(self._left_out())
            if model is None:
                with short_gil_switch_interval():
                    model = self._load_whole(self.path)
            rest = {k: Signature(k, fn) for k, fn in model.signatures.items() if k not in self.signatures}
        except Exception as error:
            self._rest_failed(error)
            return []
        return self._install_rest(model, rest, started)

    def _install_rest(self, model, rest: Dict[str, Signature], started: float) -> List[str]:
        with self._lock:
            self._rest_loads -= 1
            kept = not self.complete
            if kept:
                self._rest_model = model
                self.signatures = {**self.signatures, **rest}
                self._rest_loaded.set()
        if not kept:  # another thread's load won: this copy is dropped
            if hasattr(model, "close"):
                model.close()
            return []
        log.info("model %s version %d: %s loaded in %.2fs", self.name, self.version,
                 ", ".join(sorted(rest)), time.perf_counter() - started)
        return sorted(rest)

    def _rest_failed(self, error: Exception) -> None:
        """Requests to the other signatures fail (UNAVAILABLE) once no load of them is left."""
        with self._lock:
            self._rest_loads -= 1
            final = not self.complete and self._rest_loads == 0
            if final:
                self._rest_error = _first_line(error)
                self._rest_loaded.set()
        log.warning("loading the other signatures of %s failed%s: %s", self.path,
                    "" if final else " (another load of them continues)", _first_line(error))

    def _wait_for_rest(self) -> None:
        """A request to a signature not loaded yet. The background load runs niced, and on a
        busy host a request waiting for it would wait minutes (priority inversion: the first
        `explain` took 112 s on a host at load 2.5). So the first such request loads them too,
        on its own thread at its own priority; the first load to finish is kept. Later
        requests wait for either."""
        with self._lock:
            claimed, self._request_load_started = not self._request_load_started, True
        if claimed:
            self.load_rest()
        self._rest_loaded.wait()

    def _left_out(self) -> List[str]:
        return sorted(key for key in self.signature_defs.signature_def
                      if not key.startswith("__") and key not in self.signatures)

    def warmup_requests(self) -> List[Tuple[str, Dict[str, np.ndarray]]]:
        """TF Serving's warmup file if the export has one, else one synthetic row per
        loaded signature."""
        return warmup_file_requests(self.path) or self.synthetic_requests(self.signatures)

    def synthetic_requests(self, names) -> List[Tuple[str, Dict[str, np.ndarray]]]:
        return [(name, synthetic_inputs(self.signatures[name])) for name in names]

    def warm_up(self, requests=None, stop: Optional[threading.Event] = None, niceness: int = 0) -> Tuple[int, int]:
        """Run ``requests`` (default: all of ``warmup_requests()``) before they meet real
        traffic: the first call of a loaded function pays for graph optimisation (~50 ms
        for a toy model, seconds to minutes for a real one) and XLA compilation. Stops
        early once ``stop`` is set; ``niceness``: of the threads running them, where the runtime has
        its own for warm-up (serving.session_runtime). Returns (requests that succeeded, requests)."""
        requests = self.warmup_requests() if requests is None else requests
        succeeded, seconds = 0, collections.Counter()
        for name, arrays in requests:
            if stop is not None and stop.is_set():
                break
            started = time.perf_counter()
            try:
                self.signature(name).run({k: tf.constant(v) for k, v in arrays.items()}, niceness)
                succeeded += 1
            except Exception as error:  # warm-up is best effort
                log.warning("warm-up request to %s/%s failed: %s", self.path, name,
                            _first_line(error))
            seconds[name] += time.perf_counter() - started
        log.info("warm-up of %s: %s", self.path,
                 ", ".join(f"{name} {s:.2f}s" for name, s in seconds.items()))
        return succeeded, len(requests)

    def signature(self, name: str) -> Signature:
        key = name or "serving_default"
        if key not in self.signatures and key in self.signature_defs.signature_def:
            self._wait_for_rest()
            if self._rest_error:
                raise ServingError(grpc.StatusCode.UNAVAILABLE,
                                   f"signature {key} of model {self.name} version {self.version} "
                                   f"failed to load: {self._rest_error}")
        if key not in self.signatures:
            raise ServingError(  # TF Serving's code for an unknown signature
                grpc.StatusCode.FAILED_PRECONDITION,
                f'Serving signature key "{key}" not found; model {self.name} version '
                f"{self.version} has {sorted(self.signatures)}")
        return self.signatures[key]

    def on_unload(self, callback: Callable[[], None]) -> None:
        self._on_unload.append(callback)

    def acquire(self) -> None:
        with self._lock:
            self._in_flight += 1

    def release(self) -> None:
        with self._lock:
            self._in_flight -= 1
            drained = self.state == "UNLOADING" and self._in_flight == 0
        if drained:
            self._unload()

    def retire(self) -> None:
        with self._lock:
            self.state = "UNLOADING"
            drained = self._in_flight == 0
        if drained:
            self._unload()

    def _unload(self) -> None:
        self._retired_models = [m for m in (self._model, self._rest_model) if m is not None]
        self._model, self._rest_model, self.signatures, self.state = None, None, {}, "END"
        for callback in self._on_unload:
            callback()
        log.info("model %s version %d unloaded", self.name, self.version)

    def close_models(self) -> None:
        """Frees what the unload left: a session closes (TF frees its kernels and variables
        with the GIL released), then the Python objects wait for the collection."""
        models, self._retired_models = self._retired_models, []
        for model in models:
            if hasattr(model, "close"):
                model.close()


def synthetic_inputs(signature: Signature) -> Dict[str, np.ndarray]:
    """One-row inputs: a tiny table for `tables`, 1 for numbers, empty inner dims."""
    arrays = {}
    for key, spec in signature.inputs.items():
        shape = [1 if i == 0 and d is None else (d or 0) for i, d in enumerate(spec.shape.as_list())]
        if spec.dtype == tf.string:
            fill = WARMUP_TABLE if key == TABLES_INPUT else ""
            arrays[key] = np.full(shape, fill.encode(), dtype=object)
        else:
            arrays[key] = np.ones(shape, dtype=spec.dtype.as_numpy_dtype)
    return arrays


def warmup_file_requests(path: str) -> List[Tuple[str, Dict[str, np.ndarray]]]:
    warmup = os.path.join(path, WARMUP_ASSET)
    if not os.path.exists(warmup):
        return []
    requests = []
    for record in tf.data.TFRecordDataset(warmup):
        entry = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        if entry.HasField("predict_log"):
            request = entry.predict_log.request
            requests.append((request.model_spec.signature_name,
                             {k: tf.make_ndarray(v) for k, v in request.inputs.items()}))
    return requests


def split_warmup(requests, background: bool):
    """-> (requests to run before the swap, requests to run after it in the background)."""
    if not background:
        return list(requests), []
    first = [r for r in requests if r[0] in FIRST_WARMUP_SIGNATURES and _rows(r[1]) < PARALLEL_MIN_BATCH]
    return first, [r for r in requests if not any(r is f for f in first)]


def _rows(arrays: Dict[str, np.ndarray]) -> int:
    return max((len(a) for a in arrays.values() if np.ndim(a) > 0), default=1)


def lower_thread_priority(niceness: int) -> None:
    """Raise the calling thread's niceness (Linux schedules threads separately); a no-op
    where that is not supported."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
    except (AttributeError, OSError) as error:
        log.debug("cannot lower the thread's priority: %s", error)


class ModelManager:
    """Serves the latest ready version under model_dir (= BASE/NAME) and hot-swaps newer ones."""

    def __init__(self, name: str, model_dir: str, poll_seconds: float = POLL_SECONDS,
                 background_warmup: bool = True, loader_niceness: int = 0,
                 settle_seconds: float = SETTLE_SECONDS, runtime: str = DEFAULT_RUNTIME):
        self.name = name
        self.runtime = runtime  # how versions are loaded and run: a key of RUNTIMES
        self.model_dir = model_dir
        self.poll_seconds = poll_seconds
        # A new version's files must stay unchanged this long before it loads; 0 waits
        # for the next poll instead (one poll period).
        self.settle_seconds = settle_seconds
        self.background_warmup = background_warmup
        self.loader_niceness = loader_niceness  # of the poll thread, which loads new versions
        self.warmup_niceness = min(loader_niceness, WARMUP_NICENESS)  # of warm-up calls' threads
        self._warmers: List[threading.Thread] = []
        self._current: Optional[LoadedVersion] = None
        self._lock = threading.Lock()
        self._status: Dict[int, Tuple[str, str]] = {}   # version -> (state, error)
        self._seen: Dict[int, Tuple] = {}               # version -> fingerprint last poll
        self._retry: Dict[int, Tuple[float, int]] = {}  # version -> (next attempt, failures)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # Retired versions that drained: closed and collected on the poll thread.
        self._drained: List[LoadedVersion] = []

    # --- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        """Load what is on disk now (synchronously), then poll in the background."""
        self.poll_once(initial=True)
        if self._current is None:
            log.warning("no complete version under %s yet; waiting for one", self.model_dir)
        self._thread = threading.Thread(target=self._poll_loop, name=f"poll-{self.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.wait_for_warm_up(timeout=1.0)  # they stop after their current request
        with self._lock:
            current, self._current = self._current, None
        if current:
            current.retire()
            current.close_models()  # nothing when requests are still in flight

    def wait_for_warm_up(self, timeout: Optional[float] = None) -> None:
        """Until the background warm-ups started so far have ended."""
        for warmer in list(self._warmers):
            warmer.join(timeout)

    def warming_up(self) -> bool:
        """A background warm-up is still running (its current request cannot be interrupted)."""
        return any(warmer.is_alive() for warmer in self._warmers)

    def _poll_loop(self) -> None:
        if self.loader_niceness:
            lower_thread_priority(self.loader_niceness)
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll_once()
            except Exception:  # a broken poll must never kill the thread
                log.exception("polling %s failed", self.model_dir)

    # --- polling and swapping ----------------------------------------------------
    def poll_once(self, initial: bool = False) -> None:
        """Serve the newest candidate that loads; a broken newest version (partial
        copy, corrupt file) is skipped until its retry backoff expires."""
        for version in self._candidates(initial):
            if self._is_current(version):
                break
            loaded, later = self._load(version)
            if loaded:
                self._swap(loaded)
                self._warm_up_in_background(loaded, later)
                break
        self._collect_unloaded()

    def _collect_unloaded(self) -> None:
        """A restored SavedModel sits in reference cycles, so its variables (the bulk
        of its memory) are freed only by a full collection, which a steady request
        load rarely triggers: without this, RSS grew by one model per swap. Run
        here, on the poll thread, not on the request thread that drained it; each
        session is closed first (TF frees its memory with the GIL released)."""
        if self._drained:
            started = time.perf_counter()
            while self._drained:
                self._drained.pop().close_models()
            closed = time.perf_counter()
            freed = gc.collect()
            log.info("collected %d objects of unloaded versions in %.2fs (after %.2fs closing "
                     "their sessions)", freed, time.perf_counter() - closed, closed - started)

    def _candidates(self, initial: bool) -> List[int]:
        """Versions, newest first, whose directory is complete and (after start-up)
        unchanged since the previous poll or over one settle wait, so a copy still in
        progress is skipped."""
        now, seen, ready, changed = time.monotonic(), {}, [], []
        for version in sorted(self._disk_versions(), reverse=True):
            path = os.path.join(self.model_dir, str(version))
            if not is_complete(path) or self._retry.get(version, (0.0, 0))[0] > now:
                continue
            seen[version] = fingerprint(path)
            if initial or self._is_current(version) or self._seen.get(version) == seen[version]:
                ready.append(version)
            else:
                changed.append(version)
        ready += self._settled(changed, seen)
        self._seen = seen
        return sorted(ready, reverse=True)

    def _settled(self, versions: List[int], seen: Dict[int, Tuple]) -> List[int]:
        """Those of ``versions`` still as ``seen`` after ONE settle wait (for all of them):
        a copy in progress moves within that time, an atomic rename (what `tablegen
        export` does) is ready at its first sighting. The others wait for the next poll."""
        if not versions or self.settle_seconds <= 0:
            return []
        self._stop.wait(self.settle_seconds)
        return [v for v in versions if fingerprint(os.path.join(self.model_dir, str(v))) == seen[v]]

    def _disk_versions(self) -> List[int]:
        try:
            names = os.listdir(self.model_dir)
        except FileNotFoundError:
            return []
        return [int(n) for n in names if n.isdigit() and os.path.isdir(os.path.join(self.model_dir, n))]

    def _is_current(self, version: int) -> bool:
        return self._current is not None and self._current.version == version

    def _load(self, version: int) -> Tuple[Optional[LoadedVersion], list]:
        """-> (the loaded version, warmed up for serving_default (all signatures without
        background warm-up), or None; the warm-up requests left for after the swap)."""
        path = os.path.join(self.model_dir, str(version))
        self._set_status(version, "LOADING")
        started = time.perf_counter()
        try:
            loaded = LoadedVersion(self.name, version, path,
                                   FIRST_WARMUP_SIGNATURES if self.background_warmup else None, self.runtime)
            load_seconds = time.perf_counter() - started
            first, later = split_warmup(loaded.warmup_requests(), self.background_warmup)
            succeeded, warmups = loaded.warm_up(first, niceness=self.warmup_niceness)
        except Exception as error:  # partial or corrupt export: retry with backoff
            failures = self._retry.get(version, (0.0, 0))[1] + 1
            delay = min(self.poll_seconds * 2 ** failures, MAX_RETRY_SECONDS)
            self._retry[version] = (time.monotonic() + delay, failures)
            self._set_status(version, "END", f"load failed: {error}")
            log.warning("loading %s failed (attempt %d, retry in %.0fs): %s", path, failures, delay,
                        _first_line(error))
            return None, []
        self._retry.pop(version, None)
        log.info("model %s version %d loaded in %.2fs and warmed up (%d of %d requests) in %.2fs%s%s",
                 self.name, version, load_seconds, succeeded, warmups,
                 time.perf_counter() - started - load_seconds,
                 f"; {len(later)} more in the background" if later else "",
                 "" if loaded.complete else "; its other signatures load in the background")
        return loaded, later

    def _warm_up_in_background(self, loaded: LoadedVersion, requests) -> None:
        """The other signatures' warm-up, after the swap, at a lower priority; the version
        stays loaded until it ends (a lease), even if a newer one replaces it meanwhile."""
        if not requests and loaded.complete:
            return
        loaded.acquire()

        def run() -> None:
            try:
                lower_thread_priority(max(BACKGROUND_WARMUP_NICENESS, self.loader_niceness))
                started = time.perf_counter()
                added = loaded.load_rest(background=True)
                # without warm-up requests for them: one synthetic row per signature loaded now
                warmups = requests or loaded.synthetic_requests(added)
                succeeded, total = loaded.warm_up(warmups, self._stop, self.warmup_niceness)
                log.info("model %s version %d: background warm-up (%d of %d requests) in %.2fs",
                         self.name, loaded.version, succeeded, total, time.perf_counter() - started)
            finally:
                loaded.release()

        self._warmers = [t for t in self._warmers if t.is_alive()]
        thread = threading.Thread(target=run, name=f"warm-up-{self.name}-{loaded.version}", daemon=True)
        self._warmers.append(thread)
        thread.start()

    def _swap(self, loaded: LoadedVersion) -> None:
        with self._lock:
            old, self._current = self._current, loaded
            self._status[loaded.version] = ("AVAILABLE", "")
            if old:
                self._status[old.version] = ("UNLOADING", "")
        log.info("model %s now serves version %d", self.name, loaded.version)
        if old:
            old.on_unload(lambda v=old.version: self._set_status(v, "END"))
            old.on_unload(lambda v=old: self._drained.append(v))
            old.retire()

    def _set_status(self, version: int, state: str, error: str = "") -> None:
        with self._lock:
            self._status[version] = (state, error)

    # --- request side ------------------------------------------------------------
    @contextlib.contextmanager
    def lease(self, version: Optional[int] = None) -> Iterator[LoadedVersion]:
        """The requested (or latest) version, kept loaded until the block exits."""
        with self._lock:
            loaded = self._current
            if loaded is None:
                raise not_found(f"model {self.name} has no loaded version yet "
                                f"(waiting for {self.model_dir}/<version>/saved_model.pb)")
            if version is not None and version != loaded.version:
                raise not_found(f"model {self.name} version {version} is not loaded "
                                f"(serving version {loaded.version})")
            loaded.acquire()
        try:
            yield loaded
        finally:
            loaded.release()

    def served_version(self) -> int:
        """The version requests get now; 0 before one has loaded."""
        current = self._current
        return current.version if current is not None else 0

    def status(self, version: Optional[int] = None) -> List[Tuple[int, str, str]]:
        """[(version, state, error)], newest first, for GetModelStatus."""
        with self._lock:
            items = sorted(self._status.items(), reverse=True)
        if version is not None:
            items = [item for item in items if item[0] == version]
            if not items:
                raise not_found(f"model {self.name} version {version} is unknown to the server")
        if not items:
            raise not_found(f"model {self.name} has no versions yet under {self.model_dir}")
        return [(v, state, error) for v, (state, error) in items]

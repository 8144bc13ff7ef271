"""Transport-independent request handling shared by the gRPC and REST front ends:
model/version lookup, validation, bounded concurrency and (optional) batching."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import grpc
import numpy as np

from serving.batching import Batcher, BatchingOptions
from serving.defaults import MAX_BATCH_SIZE
from serving.errors import ServingError, invalid, not_found
from serving.limits import Limits
from serving.metrics import Metrics
from serving.model_manager import LoadedVersion, ModelManager
from serving.signatures import Prepared, Signature
from tablegen_tf.constants import EXAMPLES_ASSET

DecodeInputs = Callable[[Signature], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class PredictResult:
    model_name: str
    version: int
    signature_name: str
    outputs: Dict[str, np.ndarray]


class Predictor:
    def __init__(self, managers: Mapping[str, ModelManager], max_concurrency: int = 16,
                 max_batch_size: int = MAX_BATCH_SIZE, queue_timeout: float = 5.0,
                 batching: Optional[BatchingOptions] = None, limits: Limits = Limits()):
        self.managers = dict(managers)
        self.limits = limits
        self.max_concurrency = max_concurrency
        self.max_batch_size = max_batch_size
        self.queue_timeout = queue_timeout
        self.batching = batching
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._batchers: Dict[Tuple[str, str], Batcher] = {}
        self._batchers_lock = threading.Lock()
        self.metrics = Metrics(self.managers, self.served_versions)

    def served_versions(self) -> Dict[str, int]:
        return {name: manager.served_version() for name, manager in self.managers.items()}

    def manager(self, name: str) -> ModelManager:
        if name not in self.managers:
            raise not_found(f"model '{name}' is not served here (serving: {sorted(self.managers)})")
        return self.managers[name]

    def predict(self, model_name: str, version: Optional[int], signature_name: str,
                decode_inputs: DecodeInputs, output_filter: Sequence[str] = (),
                timeout: Optional[float] = None) -> PredictResult:
        """decode_inputs(signature) -> arrays: REST needs the signature's dtypes to
        read JSON, gRPC checks each TensorProto against it before decoding.
        timeout: seconds left until the client's deadline; none left -> no work."""
        deadline = None if timeout is None else time.monotonic() + timeout
        _check_deadline(deadline, "before it was read")
        with self.manager(model_name).lease(version) as loaded:
            signature = loaded.signature(signature_name)
            _check_filter(signature, output_filter)
            prepared = signature.prepare(decode_inputs(signature), self.max_batch_size, self.limits)
            _check_deadline(deadline, "while its inputs were checked")
            with self._slot(None if deadline is None else deadline - time.monotonic()):
                outputs = self._execute(loaded, signature, prepared)
        kept = {k: v for k, v in outputs.items() if not output_filter or k in output_filter}
        return PredictResult(model_name, loaded.version, signature.name, kept)

    def signature_defs(self, model_name: str, version: Optional[int]):
        with self.manager(model_name).lease(version) as loaded:
            return loaded.version, loaded.signature_defs

    def examples(self, model_name: str, version: Optional[int]) -> List[str]:
        """The example tables exported beside the model (tablegen_tf.export.EXAMPLES_ASSET)."""
        with self.manager(model_name).lease(version) as loaded:
            return read_examples(loaded.path)

    def status(self, model_name: str, version: Optional[int]) -> List[Tuple[int, str, str]]:
        return self.manager(model_name).status(version)

    def close(self) -> None:
        with self._batchers_lock:
            batchers, self._batchers = list(self._batchers.values()), {}
        for batcher in batchers:
            batcher.close()

    @contextlib.contextmanager
    def _slot(self, timeout: Optional[float]) -> Iterator[None]:
        """Admission control: wait for a free slot until the client's deadline or
        queue_timeout, whichever is sooner, then shed load."""
        wait = self.queue_timeout if timeout is None else max(0.0, min(timeout, self.queue_timeout))
        if not self._slots.acquire(timeout=wait):
            raise ServingError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"server busy: {self.max_concurrency} requests already in flight "
                               f"and no slot freed within {wait:.2f}s; retry later")
        try:
            yield
        finally:
            self._slots.release()

    def _execute(self, loaded: LoadedVersion, signature: Signature, prepared: Prepared):
        if self.batching is None or not signature.batchable:
            return signature.run(prepared.tensors)
        return self._batcher(loaded.name, signature.name).submit(
            prepared.tensors, prepared.batch_size, signature.run)

    def _batcher(self, model_name: str, signature_name: str) -> Batcher:
        """One batcher per (model, signature), shared by its versions (serving.batching)."""
        key = (model_name, signature_name)
        with self._batchers_lock:
            if key not in self._batchers:
                self._batchers[key] = Batcher(None, self.batching, name="batch-%s-%s" % key,
                                              on_batch=self.metrics.batch_observer(*key))
            return self._batchers[key]


def _check_deadline(deadline: Optional[float], when: str) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise ServingError(grpc.StatusCode.DEADLINE_EXCEEDED,
                           f"the request's deadline passed {when}; it was not run")


def _check_filter(signature: Signature, names: Sequence[str]) -> None:
    unknown = sorted(set(names) - set(signature.outputs))
    if unknown:
        raise invalid(f"output_filter names unknown outputs {unknown}; signature "
                      f"'{signature.name}' has {sorted(signature.outputs)}")


def read_examples(export_dir: str) -> List[str]:
    """One JSON table per line of the asset; none when the model was exported without it."""
    path = os.path.join(export_dir, EXAMPLES_ASSET)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip()]

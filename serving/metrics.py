"""Prometheus metrics of a server, at ``GET /monitoring/prometheus/metrics`` on its REST port
(the path TF Serving's monitoring config conventionally names).

Two metrics carry TF Serving's own names and labels, so its dashboards and alerts work
unchanged: ``:tensorflow:serving:request_count`` {model_name, status} (status as gRPC's
code name: OK, INVALID_ARGUMENT, ...) and ``:tensorflow:serving:request_latency``
{model_name, API, entrypoint} (microseconds, TF Serving's buckets: 10 x 1.8^k, k < 33).
The request count is exposed untyped: prometheus_client renames counters to ``*_total``,
which TF Serving's do not have; ``rate()`` works on both.

Ours, under ``tablegen_serving_``: per merged batch its rows (``batch_size``), how long its
oldest request waited to be batched (``batch_wait_seconds``) and the model call
(``batch_run_seconds``) -- batches smaller than the clients in flight show up here, without
instrumenting the code (serving/README.md, 2026-12-04) -- and the version each model serves.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Dict, Iterator, Tuple

import prometheus_client
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST
LATENCY_BUCKETS_MICROS = tuple(10 * 1.8 ** k for k in range(33))  # TF Serving's request_latency
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
SECONDS_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10)
UNKNOWN_MODEL = "(unknown)"  # a name no model has: label values stay bounded whatever clients send

prometheus_client.disable_created_metrics()  # no *_created series: TF Serving has none


class _RequestCounts(Collector):
    def __init__(self):
        self._counts: Dict[Tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def add(self, model_name: str, status: str) -> None:
        with self._lock:
            self._counts[model_name, status] = self._counts.get((model_name, status), 0) + 1

    def collect(self):
        metric = Metric(":tensorflow:serving:request_count", "The total number of requests.", "unknown")
        with self._lock:
            for (model_name, status), count in sorted(self._counts.items()):
                metric.add_sample(metric.name, {"model_name": model_name, "status": status}, count)
        yield metric


class _Versions(Collector):
    def __init__(self, versions: Callable[[], Dict[str, int]]):
        self._versions = versions

    def collect(self):
        metric = GaugeMetricFamily("tablegen_serving_model_version", "The version each model serves (0: none yet).",
                                   labels=["model_name"])
        for name, version in sorted(self._versions().items()):
            metric.add_metric([name], version)
        yield metric


class Metrics:
    """One server's metrics, in a registry of its own (several servers share a test process).
    ``versions() -> {model name: version served, 0 if none}`` is read at each scrape."""

    def __init__(self, model_names=(), versions: Callable[[], Dict[str, int]] = dict):
        self.model_names = frozenset(model_names)
        self.registry = CollectorRegistry()
        self._requests = _RequestCounts()
        self.registry.register(self._requests)
        self.registry.register(_Versions(versions))
        self._latency = Histogram(":tensorflow:serving:request_latency",
                                  "Distribution of wall time (in microseconds) for Tensorflow Serving request.",
                                  ["model_name", "API", "entrypoint"], buckets=LATENCY_BUCKETS_MICROS,
                                  registry=self.registry)
        labels = ["model_name", "signature_name"]
        self._batch_size = Histogram("tablegen_serving_batch_size", "Rows of each merged batch.", labels,
                                     buckets=BATCH_SIZE_BUCKETS, registry=self.registry)
        self._batch_wait = Histogram("tablegen_serving_batch_wait_seconds",
                                     "How long each batch's oldest request waited to be batched.",
                                     labels, buckets=SECONDS_BUCKETS, registry=self.registry)
        self._batch_run = Histogram("tablegen_serving_batch_run_seconds", "The model call of each batch.",
                                    labels, buckets=SECONDS_BUCKETS, registry=self.registry)

    def _model(self, name: str) -> str:
        return name if name in self.model_names else UNKNOWN_MODEL

    @contextlib.contextmanager
    def request(self, model_name: str, api: str, entrypoint: str) -> Iterator[None]:
        """Counts and times the request in its block; an exception gives its status."""
        from serving.errors import as_serving_error

        started, status = time.perf_counter(), "OK"
        try:
            yield
        except Exception as error:
            status = as_serving_error(error).code.name
            raise
        finally:
            model = self._model(model_name)
            self._requests.add(model, status)
            self._latency.labels(model, api, entrypoint).observe((time.perf_counter() - started) * 1e6)

    def batch_observer(self, model_name: str, signature_name: str):
        """-> on_batch(rows, waited seconds, run seconds) for serving.batching.Batcher."""
        labels = (self._model(model_name), signature_name)
        size, wait, run = (h.labels(*labels) for h in (self._batch_size, self._batch_wait, self._batch_run))

        def on_batch(rows: int, waited: float, ran: float) -> None:
            size.observe(rows)
            wait.observe(waited)
            run.observe(ran)

        return on_batch

    def exposition(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)

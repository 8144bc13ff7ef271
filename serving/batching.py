"""Server-side request batching: coalesce concurrent requests into one model call.

A decoder step costs nearly the same for 1 row as for 16, so on a few cores
throughput under concurrency comes from batching, not threads. Like TF
Serving's batch scheduler: one thread at a time forms a batch (waiting at most
`batch_timeout_micros` for it to fill) while the others run theirs.

Unlike a fixed timeout, the wait stops as soon as the queue holds this thread's share
of the rows recently in flight at once (their peak over the threads), and as soon as no
more rows are coming: every row of that peak is queued or running (3 clients on 2
threads: a batch of 2 runs, the third row waits for nobody). It is skipped when only
one request was in flight: a lone sequential client pays no batching delay.
A batch takes no more than that share, so under steady load each batch thread runs its
own half (on 2 threads) concurrently: on 2 cores two concurrent batches of 8 tables ran
1.2-1.3x the tables/s of one batch of 16 (E2E export, serving/README.md), and sharing
evenly keeps a returning group of clients from being split into batches of 1-3.

Like TF Serving's shared batch scheduler, one batcher serves every version of a
model's signature: a request names the function it runs (its version's), a batch
holds requests for one function only, and the threads and the in-flight estimate
carry over a version swap. A batcher per version started cold at each swap (batches
of one while its estimate grew) with its own threads beside the old version's still
draining: 4 batch threads on 2 cores.
"""

from __future__ import annotations

import collections
import math
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import grpc
import numpy as np
import tensorflow as tf

from serving.defaults import BATCH_TIMEOUT_MICROS, MAX_BATCH_SIZE, NUM_BATCH_THREADS
from serving.errors import ServingError

PEAK_WINDOW_SECONDS = 1.0


@dataclass
class BatchingOptions:
    max_batch_size: int = MAX_BATCH_SIZE
    batch_timeout_micros: int = BATCH_TIMEOUT_MICROS
    num_batch_threads: int = NUM_BATCH_THREADS


def parse_batching_parameters(text: str, defaults: Optional[BatchingOptions] = None) -> BatchingOptions:
    """Read TF Serving's batching_parameters.txt (`name { value: N }` text proto)
    so both servers share one file; fields we don't implement are ignored."""
    options = defaults or BatchingOptions()
    for key, value in re.findall(r"(\w+)\s*\{\s*value\s*:\s*(\d+)\s*\}", text):
        if hasattr(options, key):
            setattr(options, key, int(value))
    return options


Run = Callable[[Dict[str, tf.Tensor]], Dict[str, np.ndarray]]


class _Task:
    def __init__(self, inputs: Dict[str, tf.Tensor], size: int, run: Run):
        self.inputs, self.size, self.run = inputs, size, run
        self.queued_at = time.monotonic()
        self.outputs: Optional[Dict[str, np.ndarray]] = None
        self.error: Optional[Exception] = None
        self.done = threading.Event()

    def finish(self, outputs=None, error=None) -> None:
        self.outputs, self.error = outputs, error
        self.done.set()


class Batcher:
    """Runs `run(inputs) -> outputs` on concatenations of submitted requests; `run`
    is the batcher's, or the one a request names (its model version's). `on_batch(rows,
    waited, ran)`: after each batch that ran whole, its rows, the seconds its oldest request
    waited and the seconds the call took (serving.metrics)."""

    def __init__(self, run: Optional[Run], options: BatchingOptions, name: str = "batcher",
                 on_batch: Optional[Callable[[int, float, float], None]] = None):
        self._run, self._options, self._on_batch = run, options, on_batch
        self._queue: collections.deque = collections.deque()
        self._queued_rows = self._in_flight_rows = 0
        self._peak_rows, self._peak_at = 0, 0.0
        self._cond = threading.Condition()
        self._forming = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
                         for i in range(max(1, options.num_batch_threads))]
        for thread in self._threads:
            thread.start()

    def submit(self, inputs: Dict[str, tf.Tensor], size: int, run: Optional[Run] = None) -> Dict[str, np.ndarray]:
        task = _Task(inputs, size, run or self._run)
        with self._cond:
            if self._closed:
                raise ServingError(grpc.StatusCode.UNAVAILABLE, "server is shutting down")
            self._queue.append(task)
            self._queued_rows += size
            self._in_flight_rows += size
            self._note_peak()
            self._cond.notify_all()
        task.done.wait()
        if task.error is not None:
            raise task.error
        return task.outputs

    def close(self, wait: bool = True) -> None:
        """Stop after the queued requests have run."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads if wait else ():
            thread.join()

    def _note_peak(self) -> None:
        now = time.monotonic()
        if self._in_flight_rows >= self._peak_rows or now - self._peak_at > PEAK_WINDOW_SECONDS:
            self._peak_rows, self._peak_at = self._in_flight_rows, now

    def _loop(self) -> None:
        while True:
            with self._forming:
                batch = self._collect()
            if batch is None:
                return
            self._execute(batch)

    def _collect(self) -> Optional[List[_Task]]:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            target = self._share()
            deadline = time.monotonic() + self._options.batch_timeout_micros / 1e6
            # Rows in flight are queued or running; the rest of the peak is on its way back.
            while self._queued_rows < target and self._in_flight_rows < self._peak_rows and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return self._take(target)

    def _share(self) -> int:
        """Rows one batch waits for and takes: the recent peak in flight over the threads."""
        return max(1, min(self._options.max_batch_size, math.ceil(self._peak_rows / len(self._threads))))

    def _take(self, limit: int) -> List[_Task]:
        """The oldest request and the next ones for the same function, in order, up to
        `limit` rows; requests for another function (version) keep their place."""
        batch = [self._queue.popleft()]
        rows, skipped = batch[0].size, []
        while self._queue and rows + self._queue[0].size <= limit:
            task = self._queue.popleft()
            if task.run == batch[0].run:  # bound methods: equal when of the same object
                rows += task.size
                batch.append(task)
            else:
                skipped.append(task)
        self._queue.extendleft(reversed(skipped))
        self._queued_rows -= rows
        return batch

    def _execute(self, batch: List[_Task]) -> None:
        started = time.monotonic()
        try:
            outputs = batch[0].run(_concat([t.inputs for t in batch]) if len(batch) > 1 else batch[0].inputs)
        except Exception as error:
            if len(batch) > 1:  # one bad request must not fail its neighbours: run alone
                for task in batch:
                    self._execute([task])
                return
            self._finish(batch[0], error=error)
            return
        if self._on_batch:
            self._on_batch(sum(t.size for t in batch), started - batch[0].queued_at, time.monotonic() - started)
        offset = 0
        for task in batch:
            self._finish(task, outputs={k: v[offset:offset + task.size] for k, v in outputs.items()})
            offset += task.size

    def _finish(self, task: _Task, **result) -> None:
        # Out of flight when answered, not when its thread next runs: a forming batch
        # counts the rows still to come by what is in flight (see _collect).
        with self._cond:
            self._in_flight_rows -= task.size
        task.finish(**result)


def _concat(inputs: List[Dict[str, tf.Tensor]]) -> Dict[str, tf.Tensor]:
    return {key: tf.concat([row[key] for row in inputs], axis=0) for key in inputs[0]}

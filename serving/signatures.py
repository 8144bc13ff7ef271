"""Signature introspection and request validation, independent of the transport.

Everything is read from the loaded signature (its structured_input_signature and
structured_outputs), so new signatures need no server change. The one piece of
model knowledge is `check_tables`: inputs named ``tables`` are pre-checked in
Python, so a malformed table gets a message naming the offending row instead of
a graph assertion (the graph's InvalidArgumentError remains the backstop).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, Mapping, Optional

import numpy as np
import tensorflow as tf

from serving.errors import invalid

TABLES_INPUT = "tables"


@dataclass(frozen=True)
class Prepared:
    tensors: Dict[str, tf.Tensor]
    batch_size: int


class Signature:
    def __init__(self, name: str, fn):
        self.name = name
        self.fn = fn
        self.inputs: Dict[str, tf.TensorSpec] = dict(fn.structured_input_signature[1])
        self.outputs: Dict[str, tf.TensorSpec] = dict(fn.structured_outputs)

    @property
    def batchable(self) -> bool:
        """Requests can be concatenated on axis 0 iff every input and output is
        [batch, fixed...]; e.g. `generate` (scalars, ragged must_include) is not."""
        specs = list(self.inputs.values()) + list(self.outputs.values())
        return all(s.shape.rank and s.shape[0] is None and s.shape[1:].is_fully_defined()
                   for s in specs)

    def prepare(self, arrays: Mapping[str, np.ndarray], max_batch_size: int) -> Prepared:
        _check_names(self.name, set(self.inputs), set(arrays))
        sizes = {}
        for key, spec in self.inputs.items():
            _check_array(key, spec, arrays[key])
            if spec.shape.rank and spec.shape[0] is None:
                sizes[key] = arrays[key].shape[0]
        batch_size = _batch_size(sizes, max_batch_size)
        if TABLES_INPUT in arrays:
            check_tables(arrays[TABLES_INPUT])
        tensors = {k: tf.constant(arrays[k], dtype=spec.dtype) for k, spec in self.inputs.items()}
        return Prepared(tensors, batch_size)

    def run(self, tensors: Mapping[str, tf.Tensor]) -> Dict[str, np.ndarray]:
        return {key: value.numpy() for key, value in self.fn(**tensors).items()}


def array_dtype(array: np.ndarray) -> tf.DType:
    if array.dtype.kind in "OSU":
        return tf.string
    return tf.as_dtype(array.dtype)


def _check_names(signature: str, wanted: set, given: set) -> None:
    if wanted != given:
        raise invalid(
            f"inputs do not match signature '{signature}': expected {sorted(wanted)}, got "
            f"{sorted(given)} (missing {sorted(wanted - given)}, unexpected {sorted(given - wanted)})")


def _check_array(key: str, spec: tf.TensorSpec, array: np.ndarray) -> None:
    if array_dtype(array) != spec.dtype:
        raise invalid(f"input '{key}' must be {spec.dtype.name}, got {array_dtype(array).name}")
    if spec.shape.rank is not None and array.ndim != spec.shape.rank:
        raise invalid(f"input '{key}' must have rank {spec.shape.rank} (shape {_shape(spec.shape)}), "
                      f"got rank {array.ndim} (shape {list(array.shape)})")
    if not spec.shape.is_compatible_with(array.shape):
        raise invalid(f"input '{key}' must have shape {_shape(spec.shape)}, got {list(array.shape)}")


def _shape(shape: tf.TensorShape) -> str:
    return "[" + ", ".join("batch" if i == 0 and d is None else str(d) for i, d in
                           enumerate(shape.as_list())) + "]"


def _batch_size(sizes: Dict[str, int], max_batch_size: int) -> int:
    if len(set(sizes.values())) > 1:
        raise invalid(f"batched inputs differ in their first dimension: {sizes}")
    batch_size = next(iter(sizes.values()), 1)
    if batch_size == 0:
        raise invalid(f"empty batch: input(s) {sorted(sizes)} have no rows")
    if batch_size > max_batch_size:
        raise invalid(f"batch of {batch_size} exceeds the server's max batch size "
                      f"{max_batch_size}; split the request into smaller chunks")
    return batch_size


def check_tables(tables: np.ndarray) -> None:
    """Each row must be a JSON object whose "table" is a non-empty list of objects.
    Deliberately no stricter than the exported model's in-graph parser (which also
    checks the records' fields and names the row), so it never rejects a table
    the model would accept."""
    for index, raw in enumerate(tables.reshape(-1)):
        problem = _table_problem(raw)
        if problem:
            raise invalid(f"tables[{index}]: {problem}")


def _table_problem(raw) -> Optional[str]:
    try:
        table = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as error:
        return f"not valid JSON ({error})"
    if not isinstance(table, dict) or not isinstance(table.get("table"), list):
        return 'expected a JSON object {"table": [{"field": ..., "value": ...}, ...]}'
    if not table["table"]:
        return "empty table: at least one record is required"
    for position, record in enumerate(table["table"]):
        if not isinstance(record, dict):
            return f'record {position} must be an object {{"field": ..., "value": ...}}'
    return None

"""Signature introspection and request validation, independent of the transport.

Everything is read from the loaded signature (its structured_input_signature and
structured_outputs), so new signatures need no server change. The one piece of
model knowledge is `check_tables`: inputs named ``tables`` are pre-checked in
Python, so a malformed table gets a message naming the offending row instead of
a graph assertion (the graph's InvalidArgumentError remains the backstop), and
the size caps of `Limits` bound what one table can cost.

String inputs are text (valid UTF-8) unless their name ends in ``_bytes``, the
same convention REST uses for outputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional

import numpy as np
import tensorflow as tf

from serving.errors import ServingError, invalid
from serving.limits import Limits, check_json_depth, flag

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

    def check_names(self, given) -> None:
        _check_names(self.name, set(self.inputs), set(given))

    def prepare(self, arrays: Mapping[str, np.ndarray], max_batch_size: int,
                limits: Limits = Limits()) -> Prepared:
        self.check_names(arrays)
        sizes = {}
        for key, spec in self.inputs.items():
            _check_array(key, spec, arrays[key])
            if spec.shape.rank and spec.shape[0] is None:
                sizes[key] = arrays[key].shape[0]
        batch_size = _batch_size(sizes, max_batch_size)
        for key, spec in self.inputs.items():
            if key == TABLES_INPUT:
                check_tables(arrays[key], limits)
            elif spec.dtype == tf.string and not key.endswith("_bytes"):
                _check_utf8(key, arrays[key])
        tensors = {k: tf.constant(arrays[k], dtype=spec.dtype) for k, spec in self.inputs.items()}
        return Prepared(tensors, batch_size)

    def run(self, tensors: Mapping[str, tf.Tensor], warm_up_niceness: Optional[int] = None) -> Dict[str, np.ndarray]:
        """warm_up_niceness: run on the runtime's warm-up threads, at that niceness, where it
        has them (a session's)."""
        if warm_up_niceness is not None and hasattr(self.fn, "warm_up"):
            outputs = self.fn.warm_up(tensors, warm_up_niceness)
        else:
            outputs = self.fn(**tensors)
        # numpy already from a session (serving.session_runtime), eager tensors from a function
        return {key: value if isinstance(value, np.ndarray) else value.numpy()
                for key, value in outputs.items()}


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
    check_input(key, spec, array_dtype(array), list(array.shape))


def check_input(key: str, spec: tf.TensorSpec, dtype: tf.DType, shape: List[int]) -> None:
    """dtype and shape against the signature (also used before a TensorProto is decoded)."""
    if dtype != spec.dtype:
        raise invalid(f"input '{key}' must be {spec.dtype.name}, got {dtype.name}")
    if spec.shape.rank is not None and len(shape) != spec.shape.rank:
        raise invalid(f"input '{key}' must have rank {spec.shape.rank} (shape {_shape(spec.shape)}), "
                      f"got rank {len(shape)} (shape {shape})")
    if not spec.shape.is_compatible_with(shape):
        raise invalid(f"input '{key}' must have shape {_shape(spec.shape)}, got {shape}")


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


def _check_utf8(key: str, array: np.ndarray) -> None:
    for index, value in np.ndenumerate(array):
        if not isinstance(value, bytes):
            continue  # numpy str: already text
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as error:
            position = ", ".join(map(str, index))
            raise invalid(f"input '{key}'[{position}] is not valid UTF-8 ({error.reason} at byte "
                          f"{error.start}); string inputs are text unless their name ends in "
                          '"_bytes"') from None


def check_tables(tables: np.ndarray, limits: Limits = Limits()) -> None:
    """Each row must be UTF-8 JSON (no BOM, no NaN/Infinity) whose "table" is a
    non-empty list of objects, within the caps of `limits`. Otherwise no stricter
    than the exported model's in-graph parser (which also checks the records'
    fields and names the row), so it never rejects a table the model would accept."""
    for index, raw in enumerate(tables.reshape(-1)):
        problem = _table_problem(raw, limits)
        if problem:
            raise invalid(f"tables[{index}]: {problem}")


def _table_problem(raw, limits: Limits) -> Optional[str]:
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > limits.max_table_bytes:
        return (f"table of {size} bytes is above the cap of {limits.max_table_bytes} "
                f"({flag('max_table_bytes')})")
    try:
        text = raw if isinstance(raw, str) else raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not valid UTF-8 ({error.reason} at byte {error.start}); tables are UTF-8 JSON"
    try:
        check_json_depth(text, limits.max_json_depth, "table")
        table = json.loads(text, parse_constant=_reject_constant)
    except ServingError as error:
        return error.message
    except ValueError as error:
        return f"not valid JSON ({error})"
    if not isinstance(table, dict) or not isinstance(table.get("table"), list):
        return 'expected a JSON object {"table": [{"field": ..., "value": ...}, ...]}'
    return _records_problem(table["table"], limits)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _records_problem(records: list, limits: Limits) -> Optional[str]:
    if not records:
        return "empty table: at least one record is required"
    if len(records) > limits.max_table_records:
        return (f"{len(records)} records, above the cap of {limits.max_table_records} "
                f"({flag('max_table_records')})")
    for position, record in enumerate(records):
        if not isinstance(record, dict):
            return f'record {position} must be an object {{"field": ..., "value": ...}}'
        for key, value in record.items():
            if isinstance(value, str):
                problem = _value_problem(value, limits)
                if problem:
                    return f'record {position} "{key[:50]}": {problem}'
    return None


def _value_problem(value: str, limits: Limits) -> Optional[str]:
    if len(value) > limits.max_value_chars:
        return (f"{len(value)} characters, above the cap of {limits.max_value_chars} "
                f"({flag('max_value_chars')})")
    tokens = len(value.split())
    if tokens > limits.max_value_tokens:
        return (f"{tokens} tokens, above the cap of {limits.max_value_tokens} "
                f"({flag('max_value_tokens')})")
    return None

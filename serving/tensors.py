"""Validation of request TensorProtos before they are decoded into arrays.

tf.make_ndarray trusts the proto: a negative dim, a dim of 2**40 with one
broadcast value, float_val on a DT_STRING tensor or tensor_content of the wrong
length either raise something obscure or allocate without bound. Every such
proto is refused here with INVALID_ARGUMENT naming the input and the problem,
and the dtype and shape are checked against the signature before any allocation.
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2

from serving.errors import invalid
from serving.limits import Limits, flag
from serving.signatures import Signature, check_input

# Request dtypes and the TensorProto field holding their values (besides tensor_content).
VALUE_FIELD = {
    types_pb2.DT_FLOAT: "float_val", types_pb2.DT_DOUBLE: "double_val",
    types_pb2.DT_HALF: "half_val", types_pb2.DT_INT8: "int_val", types_pb2.DT_INT16: "int_val",
    types_pb2.DT_INT32: "int_val", types_pb2.DT_UINT8: "int_val", types_pb2.DT_UINT16: "int_val",
    types_pb2.DT_INT64: "int64_val", types_pb2.DT_UINT32: "uint32_val",
    types_pb2.DT_UINT64: "uint64_val", types_pb2.DT_BOOL: "bool_val",
    types_pb2.DT_STRING: "string_val", types_pb2.DT_COMPLEX64: "scomplex_val",
    types_pb2.DT_COMPLEX128: "dcomplex_val",
}
MAX_INT64 = 2**63 - 1
POINTER_BYTES = 8  # a decoded string element is an object reference


def dtype_name(enum: int) -> str:
    try:
        return types_pb2.DataType.Name(enum)
    except ValueError:
        return f"unknown dtype {enum}"


def decode_inputs(inputs: Mapping[str, tensor_pb2.TensorProto], signature: Signature,
                  limits: Limits) -> Dict[str, np.ndarray]:
    signature.check_names(inputs)
    return {key: decode_tensor(key, proto, signature.inputs[key], limits)
            for key, proto in inputs.items()}


def decode_tensor(key: str, proto: tensor_pb2.TensorProto, spec: tf.TensorSpec,
                  limits: Limits) -> np.ndarray:
    dtype = _dtype(key, proto)
    shape = _shape(key, proto)
    check_input(key, spec, dtype, shape)
    count = _element_count(key, shape, dtype, limits)
    _check_values(key, proto, dtype, count)
    try:
        return tf.make_ndarray(proto)
    except Exception as error:  # e.g. half_val entries above 16 bits
        raise invalid(f"input '{key}' is not a valid TensorProto: {error}") from error


def _dtype(key: str, proto) -> tf.DType:
    if proto.dtype not in VALUE_FIELD:
        supported = ", ".join(sorted(dtype_name(d) for d in VALUE_FIELD))
        raise invalid(f"input '{key}' has dtype {dtype_name(proto.dtype)}, which requests cannot "
                      f"carry (supported: {supported})")
    return tf.as_dtype(proto.dtype)


def _shape(key: str, proto) -> List[int]:
    if proto.tensor_shape.unknown_rank:
        raise invalid(f"input '{key}' has unknown rank; a request tensor needs a concrete shape")
    shape = [dim.size for dim in proto.tensor_shape.dim]
    if any(size < 0 for size in shape):
        raise invalid(f"input '{key}' has negative dimension(s) in shape {shape}; a request "
                      "tensor needs a concrete shape")
    return shape


def _element_count(key: str, shape: List[int], dtype: tf.DType, limits: Limits) -> int:
    count = math.prod(shape)  # Python int: cannot overflow
    if count > MAX_INT64:
        raise invalid(f"input '{key}' shape {shape} has {count} elements, which overflows int64")
    itemsize = POINTER_BYTES if dtype == tf.string else dtype.size
    if count * itemsize > limits.max_request_bytes:
        raise invalid(f"input '{key}' shape {shape} has {count} elements ({count * itemsize} bytes "
                      f"decoded), above the cap of {limits.max_request_bytes} bytes "
                      f"({flag('max_request_bytes')})")
    return count


def _check_values(key: str, proto, dtype: tf.DType, count: int) -> None:
    """Values only in the dtype's own field or tensor_content, and as many as the shape
    says (one value is broadcast, as TensorFlow does)."""
    field = VALUE_FIELD[dtype.as_datatype_enum]
    present = [f.name for f, _ in proto.ListFields() if f.name.endswith("_val")]
    name = dtype_name(dtype.as_datatype_enum)
    if [p for p in present if p != field]:
        raise invalid(f"input '{key}' is {name} but carries {present}; its values belong in "
                      f"{field}" + ("" if dtype == tf.string else " or tensor_content"))
    if proto.tensor_content:
        _check_content(key, proto, dtype, count, field, present)
        return
    per_element = 2 if field.endswith("complex_val") else 1
    given = len(getattr(proto, field))
    if given % per_element or given // per_element not in ({count, 1} if count else {0}):
        raise invalid(f"input '{key}' has {count} elements but {given} {field} entries "
                      f"(expected {count * per_element}, or {per_element} to fill every element)")


def _check_content(key: str, proto, dtype: tf.DType, count: int, field: str, present) -> None:
    if dtype == tf.string:
        raise invalid(f"input '{key}' is DT_STRING: its values belong in string_val, not "
                      "tensor_content")
    if present:
        raise invalid(f"input '{key}' carries both tensor_content and {field}; use one")
    expected = count * dtype.size
    if len(proto.tensor_content) != expected:
        raise invalid(f"input '{key}' tensor_content has {len(proto.tensor_content)} bytes; "
                      f"{count} {dtype.name} elements need {expected}")

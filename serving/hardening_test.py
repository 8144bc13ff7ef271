"""Bad input is refused with a status naming the problem and the cap, before the
work it would cost: JSON depth, table caps, TensorProto validation, REST bodies
(gzip bombs included), undecodable protobufs and expired deadlines."""

import gzip
import http.client
import json
import time
import zlib

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving import grpc_api, limits, signatures, tensors, testing
from serving.errors import ServingError
from serving.testing import MODEL

TABLE = testing.sample_tables(1)[0]
SPEC = tf.TensorSpec([None], tf.string)


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def table_with_value(value) -> str:
    return json.dumps({"table": [{"field": "name", "value": value}]})


def refusal(call, *args) -> ServingError:
    with pytest.raises(ServingError) as caught:
        call(*args)
    return caught.value


def tables_refusal(*rows, **caps) -> str:
    error = refusal(signatures.check_tables, np.array([r.encode() if isinstance(r, str) else r
                                                        for r in rows], dtype=object),
                    limits.Limits(**caps))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    return error.message


# --- JSON depth -------------------------------------------------------------------
@pytest.mark.parametrize("text, depth", [
    ("", 0), ("1", 0), ("[]", 1), ('{"a": [1, {"b": []}]}', 4),
    ('["[[[[", "]]"]', 1),             # brackets inside strings do not count
    (r'["\"[[[", "\\", [[]]]', 3),     # escaped quotes and backslashes
    ('[[["unterminated [[[[', 3),       # an unterminated string runs to the end
    (deep(100_000), 100_000),
])
def test_json_depth(text, depth):
    assert limits.json_depth(text) == depth


def test_json_depth_is_linear_on_adversarial_quotes():
    started = time.perf_counter()
    assert limits.json_depth('"' + '\\"' * 500_000) == 0
    assert limits.json_depth('["' + '\\' * 1_000_001) == 1
    assert time.perf_counter() - started < 2


# --- tables -------------------------------------------------------------------------
@pytest.mark.parametrize("levels", [1000, 100_000])
@pytest.mark.parametrize("where", ["value", "extra key", "top level"])
def test_deeply_nested_tables_are_refused_naming_row_and_cap(levels, where):
    row = {"value": '{"table": [{"field": "a", "value": %s}]}' % deep(levels),
           "extra key": '{"table": [{"field": "a", "value": "b"}], "x": %s}' % deep(levels),
           "top level": deep(levels)}[where]
    depth = levels + {"value": 3, "extra key": 1, "top level": 0}[where]
    message = tables_refusal(TABLE, row)
    assert message.startswith("tables[1]: ") and f"nested {depth} levels deep" in message
    assert "cap of 64 (--max-json-depth)" in message


@pytest.mark.parametrize("row, caps, expected", [
    (testing.table_json(*["f", "v"] * 1001), {}, "1001 records, above the cap of 1000 (--max-table-records)"),
    (testing.table_json(*["f", "v"] * 6), {"max_table_records": 5}, "(--max-table-records)"),
    (table_with_value("w " * 201), {}, '"value": 201 tokens, above the cap of 200 (--max-value-tokens)'),
    (table_with_value("x" * 2001), {}, "2001 characters, above the cap of 2000 (--max-value-chars)"),
    (table_with_value("x" * 600), {"max_table_bytes": 512}, "above the cap of 512 (--max-table-bytes)"),
    (b'{"table": [{"field": "a", "value": "\xff"}]}', {}, "not valid UTF-8 (invalid start byte at byte 36)"),
    ("\ufeff" + TABLE, {}, "Unexpected UTF-8 BOM"),
    ('{"table": [{"field": "a", "value": NaN}]}', {}, "NaN is not valid JSON"),
    ('{"table": [{"field": "a", "value": -Infinity}]}', {}, "-Infinity is not valid JSON"),
])
def test_table_caps_and_encoding(row, caps, expected):
    message = tables_refusal(row, **caps)
    assert message.startswith("tables[0]: ") and expected in message, message


def test_tables_within_caps_pass():
    signatures.check_tables(np.array([testing.table_json(*["f", "w " * 200] * 1000).encode()],
                                     dtype=object), limits.Limits(max_table_bytes=1 << 30))


def test_text_inputs_must_be_utf8_unless_named_bytes():
    spec = {"tables": SPEC, "must_include": tf.TensorSpec([None, None], tf.string),
            "raw_bytes": tf.TensorSpec([None], tf.string)}
    signature = signatures.Signature.__new__(signatures.Signature)
    signature.name, signature.inputs = "s", spec
    arrays = {"tables": np.array([TABLE.encode()], dtype=object),
              "must_include": np.array([[b"ok", b"\xc3("]], dtype=object),
              "raw_bytes": np.array([b"\xff"], dtype=object)}
    error = refusal(signature.prepare, arrays, 64)
    assert "input 'must_include'[0, 1] is not valid UTF-8" in error.message
    arrays["must_include"] = np.array([[b"ok", b"fine"]], dtype=object)
    assert signature.prepare(arrays, 64).batch_size == 1


# --- TensorProtos ---------------------------------------------------------------------
def proto(dtype=types_pb2.DT_STRING, dims=(1,), **fields) -> tensor_pb2.TensorProto:
    message = tensor_pb2.TensorProto(dtype=dtype, **fields)
    for size in dims:
        message.tensor_shape.dim.add(size=size)
    return message


@pytest.mark.parametrize("message, expected", [
    (proto(dims=(-1,), string_val=[TABLE.encode()]), "negative dimension(s) in shape [-1]"),
    (proto(dims=(1 << 40,), string_val=[TABLE.encode()]),
     "has 1099511627776 elements (8796093022208 bytes decoded), above the cap"),
    (proto(dims=(1 << 32, 1 << 32, 1 << 32), string_val=[b"x"]), "must have rank 1"),
    (proto(dims=(3,), string_val=[b"a", b"b"]), "has 3 elements but 2 string_val entries"),
    (proto(dims=(2,), float_val=[1.0, 2.0]), "is DT_STRING but carries ['float_val']"),
    (proto(dims=(2,), tensor_content=b"12345678"), "values belong in string_val, not tensor_content"),
    (proto(dtype=types_pb2.DT_RESOURCE), "dtype DT_RESOURCE, which requests cannot carry"),
    (proto(dtype=types_pb2.DT_VARIANT), "dtype DT_VARIANT"),
    (proto(dtype=types_pb2.DT_FLOAT_REF), "dtype DT_FLOAT_REF"),
    (proto(dtype=999), "unknown dtype 999"),
    (proto(dtype=types_pb2.DT_FLOAT, float_val=[1.0]), "must be string, got float32"),
    (proto(dims=(2,), string_val=[]), "has 2 elements but 0 string_val entries"),
])
def test_malformed_tensor_protos_are_refused_before_decoding(message, expected):
    error = refusal(tensors.decode_tensor, "tables", message, SPEC, limits.Limits())
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT and expected in error.message, error.message


def test_unknown_rank_and_element_count_overflow():
    unknown = proto(dims=(), string_val=[b"x"])
    unknown.tensor_shape.unknown_rank = True
    assert "unknown rank" in refusal(tensors.decode_tensor, "t", unknown, SPEC, limits.Limits()).message
    huge = proto(dims=(1 << 32, 1 << 32, 1 << 32), string_val=[b"x"])
    any_rank = tf.TensorSpec(None, tf.string)
    assert "overflows int64" in refusal(tensors.decode_tensor, "t", huge, any_rank, limits.Limits()).message


@pytest.mark.parametrize("content, expected", [(b"\x01\x00\x00", "has 3 bytes; 1 int32 elements need 4"),
                                               (b"", None)])
def test_tensor_content_length_must_match_shape(content, expected):
    spec = tf.TensorSpec([], tf.int32)
    message = proto(dtype=types_pb2.DT_INT32, dims=(), tensor_content=content)
    if expected is None:  # no content and no values: one element needs a value
        message.int_val.append(7)
        assert tensors.decode_tensor("n", message, spec, limits.Limits()) == 7
        message.tensor_content = b"\x01\x00\x00\x00"
        expected = "both tensor_content and int_val"
    assert expected in refusal(tensors.decode_tensor, "n", message, spec, limits.Limits()).message


def test_valid_protos_decode_including_broadcast_and_empty():
    broadcast = proto(dims=(3,), string_val=[b"x"])
    assert tensors.decode_tensor("t", broadcast, SPEC, limits.Limits()).tolist() == [b"x"] * 3
    empty = tf.make_tensor_proto(np.zeros((2, 0), dtype=object), dtype=tf.string)
    assert tensors.decode_tensor("m", empty, tf.TensorSpec([None, None], tf.string),
                                 limits.Limits()).shape == (2, 0)


# --- gzip ---------------------------------------------------------------------------
def gzip_bomb(inflated: int) -> bytes:
    compressor, zeros = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS), bytes(1 << 20)
    return b"".join([compressor.compress(zeros) for _ in range(inflated >> 20)] + [compressor.flush()])


def test_gunzip_refuses_a_bomb_at_the_cap():
    bomb = gzip_bomb(256 << 20)
    assert len(bomb) < 300_000
    error = refusal(limits.gunzip, bomb, 1 << 20)
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.http_status == 413
    assert "more than 1048576 bytes (--max-request-bytes)" in error.message
    assert limits.gunzip(gzip.compress(b"{}"), 10) == b"{}"
    assert "truncated" in refusal(limits.gunzip, gzip.compress(b"x" * 100)[:-12], 1000).message
    assert "not valid gzip" in refusal(limits.gunzip, b"not gzip", 1000).message
    assert "after the gzip stream" in refusal(limits.gunzip, gzip.compress(b"{}") + b"xx", 10).message


# --- end to end ---------------------------------------------------------------------
@pytest.fixture
def capped(base_path):
    from serving import server

    args = testing.serve_args(base_path, "--max-table-records", "5", "--max-request-bytes",
                              str(1 << 20))
    instance = server.build_server(args).start()
    yield instance
    instance.stop()


@pytest.fixture
def stub(capped):
    with grpc.insecure_channel(f"127.0.0.1:{capped.grpc_port}") as channel:
        yield prediction_service_pb2_grpc.PredictionServiceStub(channel)


def predict(stub, tables_proto, **spec):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = spec.get("name", MODEL)
    request.inputs["tables"].CopyFrom(tables_proto)
    return stub.Predict(request, timeout=20)


def grpc_error(call, *args) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args)
    return caught.value


def test_grpc_refusals_name_the_problem_and_server_keeps_serving(stub):
    cases = {
        "tables[1]: table is nested 100003 levels deep, above the cap of 64":
            tf.make_tensor_proto([TABLE, table_with_value("x").replace('"x"', deep(100_000))]),
        "6 records, above the cap of 5 (--max-table-records)":
            tf.make_tensor_proto([testing.table_json(*["f", "v"] * 6)]),
        "negative dimension(s)": proto(dims=(-1,), string_val=[TABLE.encode()]),
    }
    for expected, tables_proto in cases.items():
        error = grpc_error(predict, stub, tables_proto)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and expected in error.details()
    too_big = grpc_error(predict, stub, tf.make_tensor_proto([TABLE + " " * (1 << 20)]))
    assert too_big.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    response = predict(stub, tf.make_tensor_proto([TABLE]))
    assert len(response.outputs["text"].string_val) == 1


def test_undecodable_request_bytes_are_invalid_argument(capped):
    with grpc.insecure_channel(f"127.0.0.1:{capped.grpc_port}") as channel:
        raw = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
        for data in (b"\xff\xff\xff", b"\x0a\x04\x0a\x02\xc3\x28"):  # garbage; bad UTF-8 name
            error = grpc_error(raw, data)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "not a valid PredictRequest protobuf" in error.details()


class ExpiredContext:
    def time_remaining(self):
        return 0.0

    def abort(self, code, details):
        raise ServingError(code, details)


def test_expired_deadline_is_not_decoded():
    class NoPredictor:
        limits = limits.Limits()

        def predict(self, *args):
            raise AssertionError("an expired request must not be decoded")

    servicer = grpc_api.PredictionServicer(NoPredictor())
    error = refusal(servicer.Predict, predict_pb2.PredictRequest(), ExpiredContext())
    assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED


def rest_post(server, body: bytes, headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=20)
    try:
        connection.putrequest("POST", f"/v1/models/{MODEL}:predict")
        headers = {"Content-Length": str(len(body)), **(headers or {})}
        for key, value in headers.items():
            connection.putheader(key, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_rest_bodies_are_bounded(capped):
    valid = json.dumps({"instances": [TABLE]}).encode()
    assert rest_post(capped, gzip.compress(valid), {"Content-Encoding": "gzip"})[0] == 200
    status, body = rest_post(capped, gzip_bomb(64 << 20), {"Content-Encoding": "gzip"})
    assert status == 413 and "inflates to more than" in body["error"]
    status, body = rest_post(capped, b'{"instances": ' + deep(100_000).encode() + b"}")
    assert status == 400 and "request body is nested 100001 levels deep" in body["error"]
    assert rest_post(capped, valid, {"Content-Length": "-5"})[0] == 400
    assert rest_post(capped, valid, {"Content-Length": "lots"})[0] == 400
    assert rest_post(capped, valid, {"Content-Encoding": "br"})[0] == 400
    assert rest_post(capped, b"\xef\xbb\xbf" + valid)[0] == 400
    assert rest_post(capped, valid)[0] == 200

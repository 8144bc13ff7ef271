"""A seeded, reproducible fuzzer for `tablegen serve` over real gRPC and REST.

Request i of seed S is generated from its own Random(f"{S}:{i}") and its category
is CATEGORIES[i % len(CATEGORIES)] (in a seed-shuffled order), so every category is
covered and any failure can be replayed alone with `make_case(S, i, ...)`.

Each category produces malformed (or, as controls, valid) requests: deep JSON
nesting, oversized tables, malformed TensorProtos (negative/huge/overflowing dims,
dtype confusion, content length mismatch, DT_RESOURCE/DT_VARIANT), bad UTF-8,
BOMs, NaN, unknown or path-like model names, oversized messages, undecodable
protobuf bytes, REST gzip bombs, ... Every answer must be one of the statuses
the category allows (never INTERNAL/UNKNOWN), every OK answer must carry one text
per row, and the server must still answer a valid request at the end.

The server under test serves `serving.testing`'s fake model with SERVER_FLAGS.
"""

from __future__ import annotations

import collections
import functools
import gzip
import http.client
import json
import random
import zlib
from dataclasses import dataclass, field
from typing import Callable, Counter, Dict, FrozenSet, List, Optional, Tuple

import grpc
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving.limits import Limits
from serving.testing import MODEL, table_json

# The server's request cap is lowered so oversized messages stay cheap to send.
MAX_REQUEST_BYTES = 4 << 20
MAX_BATCH_SIZE = 64
SERVER_FLAGS = ["--max-request-bytes", str(MAX_REQUEST_BYTES), "--max-batch-size", str(MAX_BATCH_SIZE)]
LIMITS = Limits(max_request_bytes=MAX_REQUEST_BYTES)

OK, INVALID, NOT_FOUND = "OK", "INVALID_ARGUMENT", "NOT_FOUND"
EXHAUSTED, PRECONDITION, DEADLINE = "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "DEADLINE_EXCEEDED"
GRPC_ALLOWED = frozenset({OK, INVALID, NOT_FOUND, EXHAUSTED, PRECONDITION})
REST_ALLOWED = frozenset({"HTTP 200", "HTTP 400", "HTTP 404", "HTTP 413", "HTTP 429"})
PREDICT_METHOD = "/tensorflow.serving.PredictionService/Predict"
REST_TIMEOUT_SECONDS = 20.0

WORDS = ["The Vaults", "pub", "riverside", "5 out of 5", "£20-25", "café", "中文", "naïve",
         "quote \" and \\ backslash", "emoji 🍕", "tab\there", "", "x" * 40, "Zizzi"]
FIELDS = ["name", "eatType", "food", "area", "priceRange", "customer rating", "near"]


@dataclass
class Case:
    """One request: kind 'grpc' (PredictRequest), 'raw' (bytes for Predict) or
    'rest' ((path, body, headers)); `rows` = texts an OK answer must carry."""
    category: str
    kind: str
    payload: object
    allowed: FrozenSet[str]
    rows: Optional[int] = None
    timeout: float = 60.0


CATEGORIES: Dict[str, Callable[[random.Random], Case]] = {}


def category(name: str, kind: str = "grpc", allowed=GRPC_ALLOWED):
    def register(make: Callable[[random.Random], Tuple[object, FrozenSet[str], Optional[int]]]):
        def build(rng: random.Random) -> Case:
            payload, narrowed, rows = make(rng)
            return Case(name, kind, payload, frozenset(narrowed or allowed), rows)
        CATEGORIES[name] = build
        return make
    return register


# --- building blocks --------------------------------------------------------------
def random_table(rng: random.Random, records: Optional[int] = None) -> str:
    count = records if records is not None else rng.randint(1, 8)
    pairs = []
    for _ in range(count):
        pairs += [rng.choice(FIELDS), rng.choice(WORDS)]
    return table_json(*pairs)


def tables(rng: random.Random, count: Optional[int] = None) -> List[str]:
    return [random_table(rng) for _ in range(count or rng.randint(1, 4))]


def string_proto(values, shape=None) -> tensor_pb2.TensorProto:
    encoded = [v if isinstance(v, bytes) else v.encode("utf-8", "surrogatepass") for v in values]
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=encoded)
    for size in (len(encoded),) if shape is None else shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


def request(inputs: Dict[str, tensor_pb2.TensorProto], name: str = MODEL, signature: str = "",
            version: Optional[int] = None) -> predict_pb2.PredictRequest:
    message = predict_pb2.PredictRequest()
    message.model_spec.name = name
    message.model_spec.signature_name = signature
    if version is not None:
        message.model_spec.version.value = version
    for key, value in inputs.items():
        message.inputs[key].CopyFrom(value)
    return message


def with_row(rng: random.Random, bad) -> predict_pb2.PredictRequest:
    """A batch of valid tables with `bad` (str or bytes) at a random row."""
    rows = tables(rng)
    rows.insert(rng.randrange(len(rows) + 1), bad)
    return request({"tables": string_proto(rows)})


def nested(rng: random.Random) -> str:
    levels = rng.choice([1000, 100_000])
    opener = rng.choice(["[", '{"a":'])
    return opener * levels + "1" + ("]" if opener == "[" else "}") * levels


def generate_inputs(rng: random.Random, rows: List[str], width: int = 1) -> Dict[str, tensor_pb2.TensorProto]:
    words = [[rng.choice(WORDS[:6]) for _ in range(width)] for _ in rows]
    return {"tables": string_proto(rows), "must_include": string_proto(
                [w for row in words for w in row], (len(rows), width)),
            "beam_size": tf.make_tensor_proto(np.int32(rng.randint(1, 8))),
            "max_length": tf.make_tensor_proto(np.int32(rng.randint(1, 200)))}


# --- gRPC categories --------------------------------------------------------------
@category("valid")
def _valid(rng):
    rows = tables(rng, rng.randint(1, MAX_BATCH_SIZE))
    return request({"tables": string_proto(rows)}), {OK}, len(rows)


@category("valid_generate")
def _valid_generate(rng):
    rows = tables(rng)
    inputs = generate_inputs(rng, rows, rng.randint(0, 3))
    return request(inputs, signature="generate"), {OK}, len(rows)


@category("deep_nesting_value")
def _deep_value(rng):
    return with_row(rng, '{"table": [{"field": "name", "value": %s}]}' % nested(rng)), {INVALID}, None


@category("deep_nesting_extra_key")
def _deep_extra(rng):
    return with_row(rng, '{"table": [{"field": "a", "value": "b"}], "extra": %s}' % nested(rng)), {INVALID}, None


@category("deep_nesting_top_level")
def _deep_top(rng):
    return with_row(rng, nested(rng)), {INVALID}, None


@category("malformed_json")
def _malformed_json(rng):
    text = random_table(rng)
    cut = rng.randrange(len(text))
    mutated = rng.choice([text[:cut], text[:cut] + rng.choice('{}[]",:\\x') + text[cut + 1:],
                          text.replace('"', "'"), text + "}", "{" + text])
    return with_row(rng, mutated), {OK, INVALID}, None


@category("not_a_table")
def _not_a_table(rng):
    bad = rng.choice(['"table"', "42", "null", "[]", '{"table": {}}', '{"rows": []}', '{"table": "x"}',
                      '{"table": [1, 2]}', '{"table": [[]]}', '{"table": null}', ""])
    return with_row(rng, bad), {INVALID}, None


@category("empty_table")
def _empty_table(rng):
    return with_row(rng, rng.choice(['{"table": []}', '{"table": [], "x": 1}'])), {INVALID}, None


@category("too_many_records")
def _too_many_records(rng):
    records = rng.choice([LIMITS.max_table_records + 1, 5000, 10_000])
    return with_row(rng, table_json(*["f", "v"] * records)), {INVALID}, None


@category("value_too_many_tokens")
def _too_many_tokens(rng):
    words = rng.randint(LIMITS.max_value_tokens + 1, LIMITS.max_value_chars // 2)
    return with_row(rng, table_json("name", "a " * words)), {INVALID}, None


@category("value_too_many_chars")
def _too_many_chars(rng):
    return with_row(rng, table_json(rng.choice(FIELDS), "x" * rng.randint(
        LIMITS.max_value_chars + 1, 50_000))), {INVALID}, None


@category("table_too_large")
def _table_too_large(rng):
    records = LIMITS.max_table_bytes // 40 + rng.randint(1, 100)
    return with_row(rng, json.dumps({"table": [{"field": "f", "value": "vvvvvvvv"}] * 2,
                                     "pad": "p" * 40 * records})), {INVALID}, None


@category("malformed_utf8")
def _malformed_utf8(rng):
    good = random_table(rng).encode()
    junk = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82"])
    at = rng.randrange(len(good))
    return with_row(rng, good[:at] + junk + good[at:]), {INVALID}, None


@category("bom_and_encodings")
def _bom(rng):
    text = random_table(rng)
    bad = rng.choice([b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16"),
                      text.encode("utf-32"), text.encode("utf-16-le")])
    return with_row(rng, bad), {INVALID}, None


@category("nan_infinity")
def _nan(rng):
    constant = rng.choice(["NaN", "Infinity", "-Infinity"])
    return with_row(rng, '{"table": [{"field": "x", "value": %s}]}' % constant), {INVALID}, None


@category("control_characters")
def _control(rng):
    char = rng.choice(["\x00", "\x01", "\x1f", "\x7f", "\u2028", "\ud800"])
    text = table_json("name", "a" + char + "b")  # escaped: valid JSON
    raw = '{"table": [{"field": "name", "value": "a%sb"}]}' % char  # raw control: invalid
    return with_row(rng, rng.choice([text, raw])), {OK, INVALID}, None


@category("negative_dim")
def _negative_dim(rng):
    rows = tables(rng)
    shape = rng.choice([(-1,), (-len(rows),), (len(rows), -1), (-(2**63),)])
    return request({"tables": string_proto(rows, shape)}), {INVALID}, None


@category("huge_dim")
def _huge_dim(rng):
    size = rng.choice([2**31, 2**40, 2**62, 2**63 - 1, MAX_REQUEST_BYTES])
    values = rng.choice([[], [random_table(rng)]])
    return request({"tables": string_proto(values, (size,))}), {INVALID}, None


@category("element_count_overflow")
def _overflow(rng):
    dims = rng.choice([(2**32, 2**32), (2**62, 4), (2**31, 2**31, 2**31)])
    name = rng.choice(["tables", "must_include"])
    inputs = generate_inputs(rng, tables(rng, 1))
    inputs[name] = string_proto([b"x"], dims)
    return request(inputs, signature="generate" if name == "must_include" else ""), {INVALID}, None


@category("zero_dims")
def _zero_dims(rng):
    if rng.random() < 0.5:  # [0] tables: an empty batch
        return request({"tables": string_proto([], (0,))}), {INVALID}, None
    rows = tables(rng)
    return request(generate_inputs(rng, rows, 0), signature="generate"), {OK}, len(rows)


@category("content_length_mismatch")
def _content_mismatch(rng):
    rows = tables(rng, rng.randint(3, 5))
    inputs = generate_inputs(rng, rows)
    choice = rng.randrange(3)
    if choice == 0:  # fewer string_val than the shape (but not 1, which fills every element)
        inputs["tables"] = string_proto(rows[:-1], (len(rows),))
    elif choice == 1:  # int32 scalar with 3 or 5 bytes of tensor_content
        inputs["beam_size"] = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32,
                                                     tensor_content=b"\x01" * rng.choice([3, 5, 8]))
    else:  # more values than elements
        inputs["tables"] = string_proto(rows + rows, (len(rows),))
    return request(inputs, signature="generate"), {INVALID}, None


@category("dtype_confusion")
def _dtype_confusion(rng):
    rows = tables(rng)
    confused = [
        tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, float_val=[1.0] * len(rows)),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, int_val=[1] * len(rows)),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, string_val=[r.encode() for r in rows]),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=b"\x00" * 4 * len(rows)),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, tensor_content=rows[0].encode()),
        tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64, int64_val=[1] * len(rows), float_val=[1.0]),
    ]
    proto = rng.choice(confused)
    if not proto.tensor_shape.dim:
        proto.tensor_shape.dim.add(size=len(rows))
    return request({"tables": proto}), {INVALID}, None


@category("unsupported_dtype")
def _unsupported_dtype(rng):
    dtype = rng.choice([types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT, types_pb2.DT_INVALID,
                        types_pb2.DT_STRING_REF, types_pb2.DT_QINT8, types_pb2.DT_BFLOAT16, 999])
    proto = tensor_pb2.TensorProto(dtype=dtype)
    proto.tensor_shape.dim.add(size=1)
    if dtype == types_pb2.DT_VARIANT:
        proto.variant_val.add(type_name="x", metadata=b"\x00" * 8)
    return request({"tables": proto}), {INVALID}, None


@category("wrong_rank")
def _wrong_rank(rng):
    rows = tables(rng, 2)
    shape = rng.choice([(), (1, 2), (2, 1), (1, 1, 1, 2)])
    values = rows[:1] if shape == () else rows
    return request({"tables": string_proto(values, shape)}), {INVALID}, None


@category("batch_mismatch")
def _batch_mismatch(rng):
    rows = tables(rng, rng.randint(2, 5))
    inputs = generate_inputs(rng, rows)
    inputs["must_include"] = string_proto([b"x"] * (len(rows) - 1), (len(rows) - 1, 1))
    return request(inputs, signature="generate"), {INVALID}, None


@category("empty_batch")
def _empty_batch(rng):
    inputs = generate_inputs(rng, [])
    return request(inputs, signature=rng.choice(["", "generate"])), {INVALID}, None


@category("oversized_batch")
def _oversized_batch(rng):
    rows = tables(rng, rng.randint(MAX_BATCH_SIZE + 1, 4 * MAX_BATCH_SIZE))
    return request({"tables": string_proto(rows)}), {INVALID}, None


@category("missing_or_extra_inputs")
def _missing_extra(rng):
    inputs = generate_inputs(rng, tables(rng, 1))
    if rng.random() < 0.5:
        del inputs[rng.choice(sorted(inputs))]
    else:
        for i in range(rng.choice([1, 1000])):
            inputs[f"extra_{i}_" + "k" * rng.randint(0, 200)] = string_proto([b"x"])
    return request(inputs, signature="generate"), {INVALID}, None


@category("unknown_model")
def _unknown_model(rng):
    name = rng.choice(["nope", MODEL.upper(), MODEL + " ", "x" * 10_000, "ü"])
    return request({"tables": string_proto(tables(rng))}, name=name), {NOT_FOUND}, None


@category("path_like_model_name")
def _path_like(rng):
    name = rng.choice(["../x", "../../etc/passwd", f"{MODEL}/../{MODEL}", f"./{MODEL}", "/", "..",
                       "%2e%2e%2fx", f"{MODEL}/1", "C:\\models", "", "\x00"])
    return request({"tables": string_proto(tables(rng))}, name=name), {NOT_FOUND}, None


@category("unknown_version")
def _unknown_version(rng):
    message = request({"tables": string_proto(tables(rng))},
                      version=rng.choice([0, 2, -1, 2**63 - 1, -(2**63)]))
    if rng.random() < 0.3:
        message.model_spec.ClearField("version")
        message.model_spec.version_label = rng.choice(["stable", "canary", "../x"])
        return message, {INVALID}, None
    return message, {NOT_FOUND}, None


@category("unknown_signature")
def _unknown_signature(rng):
    signature = rng.choice(["nope", "serving_default ", "GENERATE", "../generate", "x" * 5000])
    return request({"tables": string_proto(tables(rng))}, signature=signature), {PRECONDITION}, None


@category("output_filter")
def _output_filter(rng):
    rows = tables(rng)
    message = request({"tables": string_proto(rows)})
    names = rng.choice([["text"], ["text", "score"], ["nope"], ["text", "text"], [""], ["x" * 3000] * 5])
    message.output_filter.extend(names)
    known = set(names) <= {"text", "score"}
    return message, {OK} if known else {INVALID}, len(rows) if "text" in names else None


@category("generate_scalars")
def _generate_scalars(rng):
    rows = tables(rng)
    inputs = generate_inputs(rng, rows)
    key = rng.choice(["beam_size", "max_length"])
    inputs[key] = tf.make_tensor_proto(np.int32(rng.choice([0, -1, -(2**31), 2**31 - 1])))
    return request(inputs, signature="generate"), {OK, INVALID}, len(rows)


@category("oversized_message")
def _oversized(rng):
    padding = "x" * (MAX_REQUEST_BYTES + rng.randint(1, 1 << 20))
    return with_row(rng, table_json("name", padding)), {EXHAUSTED}, None


@category("short_deadline")
def _short_deadline(rng):
    rows = tables(rng)
    return request({"tables": string_proto(rows)}), {OK, DEADLINE}, len(rows)


@category("undecodable_protobuf", kind="raw")
def _undecodable(rng):
    valid = request({"tables": string_proto(tables(rng))}).SerializeToString()
    bad_name = b"\x0a\x05\x0a\x03" + rng.choice([b"\xff\xfe\xfd", b"\xc3\x28a", b"\xed\xa0\x80"])
    data = rng.choice([bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64))),
                       valid[:rng.randrange(1, len(valid))], bad_name, b"\x0a\xff\xff\xff\xff\x0f"])
    return data, GRPC_ALLOWED, None


# --- REST categories ------------------------------------------------------------------
PREDICT_PATH = f"/v1/models/{MODEL}:predict"


def rest_body(rows, extra=None) -> bytes:
    return json.dumps({"instances": rows, **(extra or {})}).encode()


@category("rest_valid", kind="rest")
def _rest_valid(rng):
    rows = tables(rng)
    body, headers = rest_body(rows), {}
    if rng.random() < 0.5:
        body, headers = gzip.compress(body), {"Content-Encoding": "gzip"}
    return (PREDICT_PATH, body, headers), {"HTTP 200"}, len(rows)


@category("rest_deep_body", kind="rest")
def _rest_deep_body(rng):
    body = '{"instances": %s}' % nested(rng)
    return (PREDICT_PATH, body.encode(), {}), {"HTTP 400"}, None


@category("rest_deep_table", kind="rest")
def _rest_deep_table(rng):
    rows = tables(rng) + ['{"table": [{"field": "a", "value": %s}]}' % nested(rng)]
    return (PREDICT_PATH, rest_body(rows), {}), {"HTTP 400"}, None


@category("rest_malformed_body", kind="rest")
def _rest_malformed(rng):
    valid = rest_body(tables(rng))
    body = rng.choice([valid[:rng.randrange(len(valid))], b"\xef\xbb\xbf" + valid, b"\xff" + valid,
                       valid.decode().encode("utf-16"), b'{"instances": NaN}', b"[]", b"",
                       b'{"instances": [], "inputs": {}}', b'{"instances": [{"b64": "!!"}]}',
                       b'{"inputs": {"tables": [1, 2]}}', b'{"instances": [[["a"]]]}'])
    return (PREDICT_PATH, body, {}), {"HTTP 400"}, None


@functools.lru_cache(maxsize=None)
def gzip_bomb(inflated: int) -> bytes:
    compressor, zeros = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS), bytes(1 << 20)
    return b"".join([compressor.compress(zeros) for _ in range(inflated >> 20)] + [compressor.flush()])


@category("rest_gzip_bomb", kind="rest")
def _rest_gzip_bomb(rng):
    bomb = gzip_bomb(rng.choice([64 << 20, 256 << 20]))
    return (PREDICT_PATH, bomb, {"Content-Encoding": "gzip"}), {"HTTP 413"}, None


@category("rest_bad_encoding", kind="rest")
def _rest_bad_encoding(rng):
    packed = gzip.compress(rest_body(tables(rng)))
    body, encoding = rng.choice([(packed[:-rng.randint(1, 12)], "gzip"), (packed + b"junk", "gzip"),
                                 (b"not gzip at all", "gzip"), (packed, "br"), (packed, "deflate"),
                                 (rest_body(tables(rng)), "gzip")])
    return (PREDICT_PATH, body, {"Content-Encoding": encoding}), {"HTTP 400"}, None


@category("rest_bad_content_length", kind="rest")
def _rest_bad_length(rng):
    body = rest_body(tables(rng))
    length = rng.choice(["-1", "-99999", "abc", "1e3", str(MAX_REQUEST_BYTES + 1), str(2**70)])
    allowed = {"HTTP 413"} if length.isdigit() else {"HTTP 400"}
    return (PREDICT_PATH, body, {"Content-Length": length}), allowed, None


@category("rest_path_like_model", kind="rest")
def _rest_path_like(rng):
    path = rng.choice(["/v1/models/..%2fx:predict", "/v1/models/../x:predict", "/v1/models/%00:predict",
                       "/v1/models/nope:predict", f"/v1/models/{MODEL}/versions/99999999999999999999:predict",
                       f"/v1/models/{MODEL}/versions/7:predict", "/v1/models/" + "x" * 5000 + ":predict"])
    return (path, rest_body(tables(rng)), {}), {"HTTP 404"}, None


@category("rest_integer_confusion", kind="rest")
def _rest_integers(rng):
    rows = tables(rng)
    value = rng.choice([1.5, "4", 1e30, True, 2**40, -(2**70), None, [4], float("nan")])
    inputs = {"tables": rows, "beam_size": 2, "max_length": 50, "must_include": [["a"]] * len(rows)}
    inputs[rng.choice(["beam_size", "max_length"])] = value
    body = json.dumps({"signature_name": "generate", "inputs": inputs}).encode()
    return (PREDICT_PATH, body, {}), {"HTTP 400"}, None


# --- running ----------------------------------------------------------------------------
def category_order(seed: int) -> List[str]:
    names = sorted(CATEGORIES)
    random.Random(seed).shuffle(names)
    return names


def make_case(seed: int, index: int, order: Optional[List[str]] = None) -> Case:
    order = order or category_order(seed)
    rng = random.Random(f"{seed}:{index}")
    case = CATEGORIES[order[index % len(order)]](rng)
    if case.category == "short_deadline":
        case.timeout = rng.choice([1e-4, 1e-3, 1e-2])
    return case


@dataclass
class Report:
    seed: int
    counts: Counter = field(default_factory=collections.Counter)   # (category, status) -> n
    violations: List[str] = field(default_factory=list)
    final_ok: bool = False

    @property
    def passed(self) -> bool:
        return self.final_ok and not self.violations

    def table(self) -> str:
        """Requests per category (rows) and status (columns)."""
        statuses = sorted({status for _, status in self.counts})
        total = collections.Counter()
        for (_, status), count in self.counts.items():
            total[status] += count
        rows = [["category", *statuses, "total"]]
        for name in sorted({c for c, _ in self.counts}):
            cells = [self.counts.get((name, s), 0) for s in statuses]
            rows.append([name, *[str(c or "") for c in cells], str(sum(cells))])
        rows.append(["TOTAL", *[str(total[s]) for s in statuses], str(sum(total.values()))])
        widths = [max(len(row[i]) for row in rows) + 2 for i in range(len(rows[0]))]
        return "\n".join("".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows)


class Target:
    """Connections to one server: gRPC stub, raw Predict method and REST address."""

    def __init__(self, grpc_address: str, rest_address: Optional[str]):
        self.channel = grpc.insecure_channel(grpc_address, options=[
            ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)])
        self.stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.raw = self.channel.unary_unary(PREDICT_METHOD)
        self.rest_address = rest_address

    def close(self) -> None:
        self.channel.close()

    def send(self, case: Case) -> Tuple[str, Optional[int]]:
        """-> (status, texts in an OK answer, if countable)."""
        if case.kind == "rest":
            return self._rest(*case.payload)
        call = self.stub.Predict if case.kind == "grpc" else self.raw
        try:
            response = call(case.payload, timeout=case.timeout)
        except grpc.RpcError as error:
            return error.code().name, None
        if case.kind == "raw":
            return OK, None
        return OK, len(response.outputs["text"].string_val) if "text" in response.outputs else None

    def _rest(self, path: str, body: bytes, headers: Dict[str, str]) -> Tuple[str, Optional[int]]:
        try:
            return self._rest_call(path, body, headers)
        except (OSError, http.client.HTTPException, ValueError) as error:  # no (JSON) answer
            return f"HTTP failed: {type(error).__name__}", None

    def _rest_call(self, path: str, body: bytes, headers: Dict[str, str]) -> Tuple[str, Optional[int]]:
        host, port = self.rest_address.rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=REST_TIMEOUT_SECONDS)
        try:
            connection.putrequest("POST", path, skip_accept_encoding=True)
            for key, value in {"Content-Length": str(len(body)), **headers}.items():
                connection.putheader(key, value)
            connection.endheaders()
            try:
                connection.send(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused before the whole body was read; the status still comes
            response = connection.getresponse()
            answer = json.loads(response.read() or b"{}")
            return f"HTTP {response.status}", len(answer.get("predictions", [])) or None
        finally:
            connection.close()


def check(case: Case, status: str, texts: Optional[int]) -> Optional[str]:
    universe = REST_ALLOWED if case.kind == "rest" else GRPC_ALLOWED | {DEADLINE}
    if status not in case.allowed or status not in universe:
        return f"status {status}, allowed {sorted(case.allowed)}"
    if status in (OK, "HTTP 200") and case.rows is not None and texts != case.rows:
        return f"{texts} texts for {case.rows} rows"
    return None


def valid_request_works(target: Target) -> bool:
    rows = [table_json("name", "Aromi", "eatType", "coffee shop")]
    try:
        response = target.stub.Predict(request({"tables": string_proto(rows)}), timeout=30)
    except grpc.RpcError:
        return False
    return len(response.outputs["text"].string_val) == 1


def run(grpc_address: str, rest_address: Optional[str], requests: int, seed: int,
        progress: Optional[Callable[[int], None]] = None) -> Report:
    """Send `requests` fuzz cases, then one valid request; REST cases need rest_address."""
    report, order = Report(seed), category_order(seed)
    if rest_address is None:
        order = [name for name in order if not name.startswith("rest_")]
    target = Target(grpc_address, rest_address)
    try:
        for index in range(requests):
            case = make_case(seed, index, order)
            status, texts = target.send(case)
            report.counts[(case.category, status)] += 1
            problem = check(case, status, texts)
            if problem:
                report.violations.append(f"seed {seed} request {index} ({case.category}): {problem}")
            if progress:
                progress(index)
        report.final_ok = valid_request_works(target)
    finally:
        target.close()
    return report

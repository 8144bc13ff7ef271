"""TF Serving's REST API on the standard library's ThreadingHTTPServer.

    GET  /v1/models/NAME[/versions/N]            -> model status
    GET  /v1/models/NAME[/versions/N]/metadata   -> signature defs
    POST /v1/models/NAME[/versions/N]:predict    -> {"instances": [...]} -> {"predictions": [...]}
                                                    {"inputs": ...}     -> {"outputs": ...}

and, beyond TF Serving's API, for the try-it page (serving/static, served at ``/``):

    GET  /                                       -> the page (GET /static/FILE: its files)
    GET  /v1/models                              -> {"models": [{"name": ..., "model_version_status":
                                                    [...]}]}: every served model's status
    GET  /monitoring/prometheus/metrics          -> Prometheus metrics (serving.metrics; TF
                                                    Serving's path when its monitoring is on)
    GET  /v1/models/NAME[/versions/N]/examples   -> {"examples": [JSON table, ...]}: the
                                                    corpus examples exported with the model

JSON carries no dtypes, so values are converted with the signature's input
dtypes; strings are UTF-8, or {"b64": ...} for raw bytes (TF Serving's rule);
integer inputs take JSON integers only. String outputs come back as text unless
their name ends in "_bytes".

Bodies are UTF-8 JSON (no BOM), optionally `Content-Encoding: gzip`; their size
(after inflating) and nesting depth are capped (limits.Limits) before parsing.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional, Tuple

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import json_format
from tensorflow_serving.apis import get_model_metadata_pb2, model_pb2

from serving import grpc_api, metrics
from serving.defaults import METRICS_PATH
from serving.errors import ServingError, as_serving_error, invalid, not_found, too_large
from serving.limits import check_json_depth, flag, gunzip
from serving.predictor import Predictor
from serving.signatures import Signature

log = logging.getLogger("tablegen.serving")

PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?"
                  r"(?:/(?P<metadata>metadata|examples)|:(?P<verb>\w+))?$")
MODELS_PATH = "/v1/models"
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
# A client that stops sending (slow loris) frees its handler thread after this.
SOCKET_TIMEOUT_SECONDS = 30.0


class RestServer(ThreadingHTTPServer):
    # Join handler threads on close so shutdown waits for in-flight requests.
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: Tuple[str, int], predictor: Predictor,
                 ssl_context: Optional[ssl.SSLContext] = None):
        self.predictor = predictor
        super().__init__(address, RestHandler)
        if ssl_context:
            # Handshake in the handler thread (RestHandler.setup), not in the accept loop,
            # so a slow or plaintext client cannot stall other connections.
            self.socket = ssl_context.wrap_socket(self.socket, server_side=True,
                                                  do_handshake_on_connect=False)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, args=(0.05,), name="rest", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self.shutdown()      # stop accepting
        self.server_close()  # close the socket, wait for in-flight handlers

    def handle_error(self, request, client_address) -> None:
        # Only transport failures get here (e.g. the client hung up mid-response).
        log.debug("REST connection from %s failed", client_address, exc_info=True)


class RestHandler(BaseHTTPRequestHandler):
    server: RestServer
    server_version = "tablegen-serving"
    timeout = SOCKET_TIMEOUT_SECONDS

    def setup(self):
        super().setup()  # applies the socket timeout, also to the TLS handshake
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def do_GET(self):
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        if path == "/" or path.startswith("/static/"):
            self._static(path)
        elif path.rstrip("/") == MODELS_PATH:
            self._respond(lambda route: self._models(), route_required=False)
        elif path == METRICS_PATH:
            self._send(200, metrics.CONTENT_TYPE, self.server.predictor.metrics.exposition())
        else:
            self._respond(lambda route: self._get(route))

    def do_POST(self):
        self._respond(lambda route: self._post(route))

    def log_message(self, fmt, *args):  # route access logs to logging, not stderr
        log.debug("%s %s", self.address_string(), fmt % args)

    def _respond(self, handler, route_required: bool = True) -> None:
        try:
            route = PATH.match(self.path.split("?", 1)[0])
            if not route and route_required:
                raise not_found(f"no such endpoint: {self.path}")
            status, body = 200, handler(route)
        except Exception as error:
            failure = as_serving_error(error)
            if failure.http_status == 500:
                log.exception("REST request failed")
            status, body = failure.http_status, {"error": failure.message}
        self._send(status, "application/json", json.dumps(body).encode())

    def _send(self, status: int, content_type: str, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _static(self, path: str) -> None:
        """The try-it page's files: only names listed in STATIC_DIR, never a path."""
        name = "index.html" if path == "/" else path[len("/static/"):]
        extension = os.path.splitext(name)[1]
        if "/" in name or name not in os.listdir(STATIC_DIR) or extension not in STATIC_TYPES:
            def missing(route):
                raise not_found(f"no such file: {path}")

            self._respond(missing, route_required=False)
            return
        with open(os.path.join(STATIC_DIR, name), "rb") as handle:
            payload = handle.read()
        self.send_response(200)
        self.send_header("Content-Type", STATIC_TYPES[extension])
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(payload)

    def _models(self) -> Dict[str, Any]:
        predictor = self.server.predictor
        models = []
        for name in sorted(predictor.managers):
            try:
                status = _to_dict(grpc_api.status_response(predictor, model_pb2.ModelSpec(name=name)))
            except ServingError:  # no version on disk yet: listed without versions
                status = {"model_version_status": []}
            models.append({"name": name, **status})
        return {"models": models}

    def _get(self, route) -> Dict[str, Any]:
        if route["verb"]:
            raise ServingError(grpc.StatusCode.UNIMPLEMENTED,
                               f"use POST for :{route['verb']}")
        spec = _spec(route)
        predictor = self.server.predictor
        if route["metadata"] == "examples":
            return {"examples": predictor.examples(route["name"], _version(route))}
        if route["metadata"]:
            request = get_model_metadata_pb2.GetModelMetadataRequest(
                model_spec=spec, metadata_field=[grpc_api.SIGNATURE_DEF_FIELD])
            return _metadata_json(grpc_api.metadata_response(predictor, request))
        return _to_dict(grpc_api.status_response(predictor, spec))

    def _post(self, route) -> Dict[str, Any]:
        if route["verb"] != "predict":
            raise ServingError(grpc.StatusCode.UNIMPLEMENTED,
                               f"only :predict is implemented (got {route['verb'] or 'no verb'})")
        with self.server.predictor.metrics.request(route["name"], "predict", "REST"):
            body = self._json_body()
            row_format = "instances" in body
            result = self.server.predictor.predict(
                route["name"], _version(route), str(body.get("signature_name", "")),
                lambda signature: decode_inputs(body, signature))
            if row_format:
                return {"predictions": rows_json(result.outputs)}
            return {"outputs": columns_json(result.outputs)}

    def _json_body(self) -> Dict[str, Any]:
        limits = self.server.predictor.limits
        text = self._body_text(limits.max_request_bytes)
        check_json_depth(text, limits.max_json_depth, "request body")
        try:
            body = json.loads(text or "null")
        except ValueError as error:
            raise invalid(f"request body is not valid JSON: {error}") from error
        if not isinstance(body, dict) or ("instances" in body) == ("inputs" in body):
            raise invalid('request body must be a JSON object with exactly one of "instances" '
                          '(row format) or "inputs" (columnar format)')
        return body


    def _body_text(self, cap: int) -> str:
        length = _content_length(self.headers.get("Content-Length"), cap)
        data = self.rfile.read(length)
        if len(data) < length:
            raise invalid(f"request body ended after {len(data)} of {length} bytes")
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            data = gunzip(data, cap)
        elif encoding != "identity":
            raise invalid(f"Content-Encoding '{encoding[:40]}' is not supported (use gzip or none)")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise invalid(f"request body is not valid UTF-8 ({error.reason} at byte "
                          f"{error.start})") from None


def _content_length(header: Optional[str], cap: int) -> int:
    try:
        length = int(header or 0)
    except ValueError:
        raise invalid(f"Content-Length '{header[:40]}' is not a number") from None
    if length < 0:
        raise invalid(f"Content-Length {length} is negative")
    if length > cap:
        raise too_large(f"request body of {length} bytes is above the cap of {cap} "
                        f"({flag('max_request_bytes')})")
    return length


def _version(route) -> Optional[int]:
    return int(route["version"]) if route["version"] else None


def _spec(route) -> model_pb2.ModelSpec:
    spec = model_pb2.ModelSpec(name=route["name"])
    if route["version"]:
        spec.version.value = int(route["version"])
    return spec


def _to_dict(message) -> Dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


def _metadata_json(response) -> Dict[str, Any]:
    signature_defs = get_model_metadata_pb2.SignatureDefMap()
    response.metadata[grpc_api.SIGNATURE_DEF_FIELD].Unpack(signature_defs)
    return {"model_spec": _to_dict(response.model_spec),
            "metadata": {"signature_def": _to_dict(signature_defs)}}


# --- JSON <-> arrays -------------------------------------------------------------
def decode_inputs(body: Dict[str, Any], signature: Signature) -> Dict[str, np.ndarray]:
    names = sorted(signature.inputs)
    if "instances" in body:
        named = _rows_to_columns(body["instances"], names)
    else:
        value = body["inputs"]
        named = value if isinstance(value, dict) and set(value) != {"b64"} else None
        if named is None:
            if len(names) != 1:
                raise invalid(f"signature '{signature.name}' has inputs {names}; name them")
            named = {names[0]: value}
    return {key: to_array(key, value, signature.inputs.get(key)) for key, value in named.items()}


def _rows_to_columns(instances, names) -> Dict[str, list]:
    if not isinstance(instances, list) or not instances:
        raise invalid('"instances" must be a non-empty list')
    if not all(isinstance(row, dict) and set(row) != {"b64"} for row in instances):
        if len(names) != 1:
            raise invalid(f"instances must be objects naming the inputs {names}")
        return {names[0]: instances}
    keys = set(instances[0])
    if any(set(row) != keys for row in instances):
        raise invalid("every instance must have the same input names")
    return {key: [row[key] for row in instances] for key in keys}


def to_array(key: str, value, spec: Optional[tf.TensorSpec]) -> np.ndarray:
    if spec is None:  # unknown input: let signature validation report it
        return np.asarray(0)
    try:
        if spec.dtype == tf.string:
            array = np.array(_to_bytes(value), dtype=object)
            if array.dtype != object or any(not isinstance(x, bytes) for x in array.reshape(-1)):
                raise ValueError("ragged or non-string values")
            return array
        if spec.dtype.is_integer:
            return _integers(value, spec.dtype)
        return np.asarray(value, dtype=spec.dtype.as_numpy_dtype)
    except (TypeError, ValueError, OverflowError) as error:
        raise invalid(f"input '{key}' is not a valid {spec.dtype.name} tensor: {error}") from error


def _integers(value, dtype: tf.DType) -> np.ndarray:
    raw = np.asarray(value)
    if raw.dtype.kind not in "iu":  # floats, booleans, strings, ints beyond int64
        raise ValueError("expected JSON integers")
    if raw.size and (raw.min() < dtype.min or raw.max() > dtype.max):
        raise ValueError(f"values outside [{dtype.min}, {dtype.max}]")
    return raw.astype(dtype.as_numpy_dtype)


def _to_bytes(value):
    if isinstance(value, list):
        return [_to_bytes(v) for v in value]
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, str):
        return value.encode("utf-8")
    raise ValueError(f"expected a string, got {json.dumps(value)[:50]}")


def _json_value(key: str, value):
    if isinstance(value, list):
        return [_json_value(key, v) for v in value]
    if isinstance(value, bytes):
        if key.endswith("_bytes"):
            return {"b64": base64.b64encode(value).decode("ascii")}
        return value.decode("utf-8", errors="replace")
    return value


def columns_json(outputs: Dict[str, np.ndarray]):
    named = {key: _json_value(key, value.tolist()) for key, value in outputs.items()}
    return next(iter(named.values())) if len(named) == 1 else named


def rows_json(outputs: Dict[str, np.ndarray]):
    columns = {key: _json_value(key, value.tolist()) for key, value in outputs.items()}
    if len(columns) == 1:
        return next(iter(columns.values()))
    sizes = {len(v) if isinstance(v, list) else -1 for v in columns.values()}
    if len(sizes) != 1 or -1 in sizes:
        raise invalid("outputs do not share a batch dimension; use the columnar "
                      '"inputs" format')
    return [{key: column[i] for key, column in columns.items()} for i in range(sizes.pop())]

"""gRPC client for TF Serving's PredictionService (this repo's server or real TF Serving).

    from serving.client import generate_remote
    texts = generate_remote("localhost:8500", "e2e", tables)

Transient failures (UNAVAILABLE, DEADLINE_EXCEEDED, and RESOURCE_EXHAUSTED, the
server's back-pressure) are retried with jittered exponential backoff; other
errors raise grpc.RpcError at once (retrying INVALID_ARGUMENT cannot help).
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import grpc
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

@dataclass(frozen=True)
class ClientTLS:
    """TLS for the channel. root_ca_file: CA that signed the server certificate
    (default: the system roots); cert_file/key_file: this client's certificate, for
    servers that require one (mutual TLS); server_name: the name to check the
    server certificate against when it differs from the address's host."""
    root_ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    server_name: Optional[str] = None

    def credentials(self) -> grpc.ChannelCredentials:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("a client certificate needs its key (cert_file and key_file)")
        return grpc.ssl_channel_credentials(_read(self.root_ca_file), _read(self.key_file),
                                            _read(self.cert_file))

    def options(self) -> List[Tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def _read(path: Optional[str]) -> Optional[bytes]:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.RESOURCE_EXHAUSTED})
MAX_MESSAGE_BYTES = 64 << 20


class RemoteModel:
    """A model on a TF Serving endpoint; reuse one instance to reuse its channel."""

    def __init__(self, server: str, model_name: str, timeout: float = 30.0, retries: int = 3,
                 backoff: float = 0.1, max_backoff: float = 5.0, tls: Optional[ClientTLS] = None):
        self.model_name, self.timeout, self.retries = model_name, timeout, retries
        self.backoff, self.max_backoff = backoff, max_backoff
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
        if tls:
            self._channel = grpc.secure_channel(server, tls.credentials(), options + tls.options())
        else:
            self._channel = grpc.insecure_channel(server, options=options)
        self._stub = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)

    def __enter__(self) -> "RemoteModel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def predict(self, inputs: Mapping[str, Any], signature: str = "serving_default",
                version: Optional[int] = None) -> Tuple[Dict[str, np.ndarray], int]:
        """One Predict call -> (outputs as numpy arrays, version that served it)."""
        request = predict_pb2.PredictRequest()
        request.model_spec.name = self.model_name
        request.model_spec.signature_name = signature
        if version is not None:
            request.model_spec.version.value = version
        for key, value in inputs.items():
            request.inputs[key].CopyFrom(_tensor_proto(value))
        response = self._call(request)
        outputs = {key: tf.make_ndarray(proto) for key, proto in response.outputs.items()}
        return outputs, response.model_spec.version.value

    def generate(self, tables: Sequence[str], signature: str = "serving_default",
                 batch_size: int = 64, extra_inputs: Optional[Mapping[str, Any]] = None) -> List[str]:
        """Texts for `tables`, sent in chunks of batch_size. extra_inputs: scalars are sent
        with every chunk; lists with one entry per table are chunked alongside (rows of
        a ragged [batch, n] string input such as must_include are padded with "")."""
        tables, extra = list(tables), dict(extra_inputs or {})
        texts: List[str] = []
        for start in range(0, len(tables), batch_size):
            chunk = {"tables": np.array([t.encode() for t in tables[start:start + batch_size]],
                                        dtype=object)}
            for key, value in extra.items():
                chunk[key] = _chunk(value, len(tables), start, batch_size)
            outputs, _ = self.predict(chunk, signature)
            texts.extend(t.decode("utf-8") for t in outputs["text"].reshape(-1))
        return texts

    def _call(self, request):
        for attempt in range(self.retries + 1):
            try:
                return self._stub.Predict(request, timeout=self.timeout)
            except grpc.RpcError as error:
                if error.code() not in RETRYABLE or attempt == self.retries:
                    raise
                delay = min(self.max_backoff, self.backoff * 2 ** attempt)
                time.sleep(delay * random.uniform(0.5, 1.0))  # jitter: don't retry in lockstep


def generate_remote(server: str, model_name: str, tables: Sequence[str],
                    signature: str = "serving_default", timeout: float = 30.0, retries: int = 3,
                    batch_size: int = 64, extra_inputs: Optional[Mapping[str, Any]] = None,
                    tls: Optional[ClientTLS] = None) -> List[str]:
    """Generate text for each table on a TF Serving endpoint 'host:port'.

    timeout is each RPC's deadline; each chunk is retried up to `retries` times;
    tls (ClientTLS) switches to a TLS channel."""
    with RemoteModel(server, model_name, timeout, retries, tls=tls) as model:
        return model.generate(tables, signature, batch_size, extra_inputs)


def generate_for_corpus(args) -> Tuple[List[str], int]:
    """`tablegen generate --server HOST:PORT`: (texts, inputs read) for the corpus's distinct
    inputs in input order (the same reader as local generation), one text each. --beam-size or
    --max-length select the `generate` signature; the other control then takes
    DecodeConfig's default, since the served model's own defaults are not visible."""
    from tablegen_tf import inference
    from tablegen_tf.config import DecodeConfig

    tables, rejected = inference.read_inputs(args.format, args.input, args.split)
    for rejection in rejected:
        print(f"rejected {rejection.file}:{rejection.line}: {rejection.reason}", file=sys.stderr)
    signature, extra = "serving_default", None
    if args.beam_size or args.max_length:
        defaults = DecodeConfig()
        signature = "generate"
        extra = {"beam_size": args.beam_size or defaults.beam_size,
                 "max_length": args.max_length or defaults.max_length,
                 "must_include": [[] for _ in tables]}
    tls = None
    if args.tls or args.tls_ca or args.tls_cert:
        tls = ClientTLS(args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name)
    texts = generate_remote(args.server, args.model_name or "tablegen", [t.serving_input() for t in tables],
                            signature, timeout=args.timeout, batch_size=args.batch_size, extra_inputs=extra,
                            tls=tls)
    return texts, len(tables) + len(rejected)


def _chunk(value, total: int, start: int, size: int):
    per_row = isinstance(value, (list, tuple, np.ndarray)) and len(value) == total
    if not per_row:
        return value
    rows = list(value[start:start + size])
    if rows and isinstance(rows[0], (list, tuple)):
        width = max(len(r) for r in rows)
        rows = [list(r) + [""] * (width - len(r)) for r in rows]
    return rows


def _tensor_proto(value):
    if not _is_text(value):
        return tf.make_tensor_proto(value)  # Python ints -> int32, floats -> float32
    array = np.asarray(value, dtype=object)
    encoded = np.empty(array.size, dtype=object)
    encoded[:] = [s.encode() if isinstance(s, str) else s for s in array.reshape(-1)]
    return tf.make_tensor_proto(encoded.reshape(array.shape), dtype=tf.string, shape=array.shape)


def _is_text(value) -> bool:
    """Strings, bytes, or (nested) lists/arrays of them - including empty [[], []] rows."""
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "OSU"
    if isinstance(value, (list, tuple)):
        flat = np.asarray(value, dtype=object).reshape(-1)
        return (flat.size == 0 and len(value) > 0) or any(isinstance(v, (str, bytes)) for v in flat)
    return False

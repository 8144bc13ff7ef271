"""One error type for every request failure, mapped to gRPC codes and HTTP statuses."""

from __future__ import annotations

from typing import Optional

import grpc

# TF Serving's REST mapping (model_servers/http_server.cc, ToHTTPStatusCode).
HTTP_STATUS = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
}


# Messages may quote client data (names, JSON errors); gRPC carries them in
# trailing metadata, which clients refuse above ~8 KiB.
MAX_MESSAGE_CHARS = 2000


class ServingError(Exception):
    """A request failure with the status code the client should see."""

    def __init__(self, code: grpc.StatusCode, message: str, http_status: Optional[int] = None):
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS] + " ... (message truncated)"
        super().__init__(message)
        self.code = code
        self.message = message
        self._http_status = http_status

    @property
    def http_status(self) -> int:
        return self._http_status or HTTP_STATUS.get(self.code, 500)


def invalid(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServingError:
    return ServingError(grpc.StatusCode.NOT_FOUND, message)


def too_large(message: str) -> ServingError:
    """A request above a size cap: RESOURCE_EXHAUSTED, HTTP 413 (Payload Too Large)."""
    return ServingError(grpc.StatusCode.RESOURCE_EXHAUSTED, message, http_status=413)


def tf_error_text(error) -> str:
    """The useful part of a TF op error: drop the 'Graph execution error' preamble,
    Python stack frames and the trailing node names, keep the op's own message."""
    keep = []
    for line in str(getattr(error, "message", error)).splitlines():
        stripped = line.strip()
        if (not stripped or stripped.startswith(("Graph execution error", "Detected at node",
                                                 "<stack traces unavailable>", "File \"", "[["))
                or line.startswith("  ")):
            continue
        keep.append(stripped)
    return " ".join(keep) or str(error)


def as_serving_error(error: Exception) -> ServingError:
    """Any per-request exception -> the status the client sees (never a crash)."""
    import tensorflow as tf  # loaded anyway by the time a request runs

    if isinstance(error, ServingError):
        return error
    if isinstance(error, tf.errors.InvalidArgumentError):
        return invalid(tf_error_text(error))
    if isinstance(error, tf.errors.ResourceExhaustedError):  # e.g. an OOM inside the model
        return ServingError(grpc.StatusCode.RESOURCE_EXHAUSTED, tf_error_text(error))
    if isinstance(error, tf.errors.OpError):
        return ServingError(grpc.StatusCode.INTERNAL,
                            f"{type(error).__name__}: {tf_error_text(error)}")
    return ServingError(grpc.StatusCode.INTERNAL, f"internal error: {type(error).__name__}: {error}")

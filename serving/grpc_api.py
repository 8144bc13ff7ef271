"""TF Serving's gRPC services (PredictionService, ModelService) over a Predictor.

Uses the generated stubs from tensorflow_serving.apis, so any TF Serving client
(including serving/client.py) works unchanged against this server.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator, Optional

import grpc
import tensorflow as tf
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2, model_pb2,
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)

from serving import tensors
from serving.errors import ServingError, as_serving_error, invalid
from serving.predictor import Predictor

log = logging.getLogger("tablegen.serving")

SIGNATURE_DEF_FIELD = "signature_def"


@contextlib.contextmanager
def abort_on_error(context: grpc.ServicerContext) -> Iterator[None]:
    """Every per-request failure becomes a status; nothing escapes to crash a worker."""
    try:
        yield
    except Exception as error:
        status = as_serving_error(error)
        if status.code == grpc.StatusCode.INTERNAL:
            log.exception("request failed")
        context.abort(status.code, status.message)


def requested_version(spec: model_pb2.ModelSpec) -> Optional[int]:
    if spec.HasField("version"):
        return spec.version.value
    if spec.version_label:
        raise invalid(f"version labels ('{spec.version_label}') are not supported by this "
                      "server; ask for a version number or leave it empty for the latest")
    return None


def fill_spec(spec: model_pb2.ModelSpec, name: str, version: int, signature_name: str = "") -> None:
    spec.name = name
    spec.version.value = version
    spec.signature_name = signature_name


class Undecodable:
    """Stands in for a request whose bytes do not parse, so the servicer can answer
    INVALID_ARGUMENT (grpcio itself would answer INTERNAL)."""

    def __init__(self, message_type, error: Exception):
        self.message_type, self.error = message_type, error


def parsed(request):
    if isinstance(request, Undecodable):
        raise invalid(f"request is not a valid {request.message_type.__name__} protobuf: "
                      f"{request.error}")
    return request


def _lenient(deserializer):
    message_type = getattr(deserializer, "__self__", None)

    def deserialize(data: bytes):
        try:
            return deserializer(data)
        except Exception as error:  # DecodeError, invalid UTF-8 in a string field, ...
            return Undecodable(message_type or type(error), error)
    return deserialize


class _LenientHandlers(grpc.GenericRpcHandler):
    def __init__(self, inner: grpc.GenericRpcHandler):
        self._inner = inner

    def service(self, handler_call_details):
        handler = self._inner.service(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        return handler._replace(request_deserializer=_lenient(handler.request_deserializer))


class _LenientServer:
    """What the generated add_*_to_server functions register on: wraps their handlers."""

    def __init__(self, server: grpc.Server):
        self._server = server

    def add_generic_rpc_handlers(self, handlers) -> None:
        self._server.add_generic_rpc_handlers([_LenientHandlers(h) for h in handlers])


def check_deadline(context: grpc.ServicerContext) -> None:
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        raise ServingError(grpc.StatusCode.DEADLINE_EXCEEDED,
                           "the request's deadline had passed when it arrived; it was not read")


def metadata_response(predictor: Predictor, request) -> get_model_metadata_pb2.GetModelMetadataResponse:
    fields = list(request.metadata_field)
    if not fields:
        raise invalid("GetModelMetadataRequest must specify at least one metadata_field")
    unsupported = [f for f in fields if f != SIGNATURE_DEF_FIELD]
    if unsupported:
        raise invalid(f"metadata field(s) {unsupported} not supported; use '{SIGNATURE_DEF_FIELD}'")
    spec = request.model_spec
    version, signature_defs = predictor.signature_defs(spec.name, requested_version(spec))
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    fill_spec(response.model_spec, spec.name, version)
    response.metadata[SIGNATURE_DEF_FIELD].Pack(signature_defs)
    return response


def status_response(predictor: Predictor, spec) -> get_model_status_pb2.GetModelStatusResponse:
    response = get_model_status_pb2.GetModelStatusResponse()
    for version, state, error in predictor.status(spec.name, requested_version(spec)):
        entry = response.model_version_status.add()
        entry.version = version
        entry.state = get_model_status_pb2.ModelVersionStatus.State.Value(state)
        entry.status.SetInParent()  # TF Serving always reports a status (OK by default)
        if error:
            entry.status.error_code = 2  # tensorflow.error.UNKNOWN
            entry.status.error_message = error
    return response


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, predictor: Predictor):
        self._predictor = predictor

    def Predict(self, request, context):
        with abort_on_error(context):
            check_deadline(context)
            request, limits = parsed(request), self._predictor.limits
            spec = request.model_spec
            with self._predictor.metrics.request(spec.name, "predict", "GRPC"):
                result = self._predictor.predict(
                    spec.name, requested_version(spec), spec.signature_name,
                    lambda signature: tensors.decode_inputs(request.inputs, signature, limits),
                    list(request.output_filter), context.time_remaining())
                response = predict_pb2.PredictResponse()
                fill_spec(response.model_spec, result.model_name, result.version, result.signature_name)
                for key, value in result.outputs.items():
                    response.outputs[key].CopyFrom(tf.make_tensor_proto(value))
                return response

    def GetModelMetadata(self, request, context):
        with abort_on_error(context):
            return metadata_response(self._predictor, parsed(request))


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, predictor: Predictor):
        self._predictor = predictor

    def GetModelStatus(self, request, context):
        with abort_on_error(context):
            return status_response(self._predictor, parsed(request).model_spec)


def add_services(server: grpc.Server, predictor: Predictor) -> None:
    lenient = _LenientServer(server)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(predictor), lenient)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(predictor), lenient)

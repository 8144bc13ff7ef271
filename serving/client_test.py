"""Client retries, deadlines and chunking against a scripted PredictionService."""

import argparse
import json
import time
from concurrent import futures

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving import client, testing


class ScriptedService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """Plays `script` (status codes or 'slow'), then echoes the tables upper-cased."""

    def __init__(self, script=()):
        self.script, self.calls = list(script), []

    def Predict(self, request, context):
        tables = tf.make_ndarray(request.inputs["tables"])
        self.calls.append(len(tables))
        step = self.script.pop(0) if self.script else None
        if step == "slow":
            time.sleep(1.0)
        elif step is not None:
            context.abort(step, f"scripted {step.name}")
        response = predict_pb2.PredictResponse()
        response.outputs["text"].CopyFrom(tf.make_tensor_proto(
            np.array([t.upper() for t in tables], dtype=object)))
        return response


@pytest.fixture
def scripted():
    def start(*script):
        service = ScriptedService(script)
        server = grpc.server(futures.ThreadPoolExecutor(4))
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return service, f"127.0.0.1:{port}"

    servers = []
    yield start
    for server in servers:
        server.stop(None)


TABLES = testing.sample_tables(5)
UPPER = [t.upper() for t in TABLES]


def test_retries_unavailable_then_succeeds(scripted):
    service, address = scripted(grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE)
    assert client.generate_remote(address, "m", TABLES, retries=3) == UPPER
    assert len(service.calls) == 3


def test_deadline_exceeded_is_retried(scripted):
    service, address = scripted("slow")
    assert client.generate_remote(address, "m", TABLES, timeout=0.3, retries=1) == UPPER
    assert len(service.calls) == 2


def test_gives_up_after_retries(scripted):
    service, address = scripted(*[grpc.StatusCode.UNAVAILABLE] * 5)
    with pytest.raises(grpc.RpcError) as caught:
        client.generate_remote(address, "m", TABLES, retries=2)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE and len(service.calls) == 3


def test_invalid_argument_is_not_retried(scripted):
    service, address = scripted(grpc.StatusCode.INVALID_ARGUMENT)
    with pytest.raises(grpc.RpcError) as caught:
        client.generate_remote(address, "m", TABLES)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and len(service.calls) == 1


def test_unreachable_server_is_unavailable_after_retries():
    started = time.perf_counter()
    with pytest.raises(grpc.RpcError) as caught:
        client.generate_remote("127.0.0.1:1", "m", TABLES, timeout=2, retries=2)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.perf_counter() - started < 10


def test_batches_in_chunks_preserving_order(scripted):
    service, address = scripted()
    assert client.generate_remote(address, "m", TABLES, batch_size=2) == UPPER
    assert service.calls == [2, 2, 1]


def test_tensor_proto_encoding():
    ragged = client._chunk([["a"], [], ["b", "c"]], 3, 0, 64)
    proto = client._tensor_proto(ragged)
    assert tf.make_ndarray(proto).tolist() == [[b"a", b""], [b"", b""], [b"b", b"c"]]
    assert tf.make_ndarray(client._tensor_proto([[], []])).shape == (2, 0)
    assert client._tensor_proto(4).dtype == tf.int32.as_datatype_enum


def test_generate_for_corpus_sends_the_readers_tables(scripted, tmp_path):
    corpus = tmp_path / "valid.jsonl"
    corpus.write_text('{"table": [{"field": "name", "value": "Aromi"}], "text": "x"}\n'
                      '{"table": [{"field": "name", "value": "Zizzi", "entity": "e1"}], "text": "y"}\n')
    service, address = scripted()
    args = argparse.Namespace(server=address, model_name="m", format="jsonl", input=str(corpus),
                              split="valid", beam_size=None, max_length=None, timeout=5,
                              batch_size=64, tls=False, tls_ca=None, tls_cert=None, tls_key=None,
                              tls_server_name=None)
    texts, read = client.generate_for_corpus(args)
    assert read == 2
    assert [json.loads(t.lower()) for t in texts] == [
        {"table": [{"field": "name", "value": "aromi"}]},
        {"table": [{"field": "name", "value": "zizzi", "entity": "e1"}]}]
